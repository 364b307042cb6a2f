//! A webhook receiver for the forwarding tests, over plain HTTP or TLS.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::now_ms;

/// A webhook receiver: answers each request by `answer(id, attempt)`
/// (attempt counts from 1) and keeps what it received.
#[derive(Clone, Default)]
pub struct Hook {
    pub received: Arc<Mutex<Vec<Request>>>,
}

/// When a request came (epoch ms), its headers (lowercase names), its body.
pub type Request = (i64, HashMap<String, String>, Vec<u8>);

impl Hook {
    pub async fn start(self, answer: fn(&str, usize) -> u16) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(self.clone().serve(sock, answer));
            }
        });
        port
    }

    /// The same over TLS, serving `config`'s certificate; a client that
    /// does not trust it never gets as far as a request.
    pub async fn start_tls(
        self,
        answer: fn(&str, usize) -> u16,
        config: rustls::ServerConfig,
    ) -> u16 {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let (hook, acceptor) = (self.clone(), acceptor.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(sock).await {
                        hook.serve(tls, answer).await;
                    }
                });
            }
        });
        port
    }

    /// HTTP/1.1 with keep-alive, enough for reqwest's requests.
    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
        self,
        mut sock: S,
        answer: fn(&str, usize) -> u16,
    ) {
        let mut buf = Vec::new();
        loop {
            let head_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                let mut chunk = [0u8; 8192];
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let headers: HashMap<String, String> = head
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let len: usize = headers
                .get("content-length")
                .map_or(0, |v| v.parse().unwrap());
            while buf.len() < head_end + len {
                let mut chunk = [0u8; 8192];
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let body = buf[head_end..head_end + len].to_vec();
            buf.drain(..head_end + len);
            let id = headers.get("x-delayq-id").cloned().unwrap_or_default();
            let code = {
                let mut r = self.received.lock().unwrap();
                r.push((now_ms(), headers, body));
                let attempt = r
                    .iter()
                    .filter(|(_, h, _)| h.get("x-delayq-id") == Some(&id))
                    .count();
                answer(&id, attempt)
            };
            let reply = format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\n\r\n");
            if sock.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}
