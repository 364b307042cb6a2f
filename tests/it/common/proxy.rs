//! A TCP proxy a test can cut: a node reaches a service through it, and
//! `cut` drops every connection and refuses new ones (a network partition
//! between that node and the service alone); `heal` lets connections
//! through again. `hang` is the other kind of partition, packets dropped
//! (iptables DROP): connections stay open and new ones are accepted, but
//! nothing gets through either way until `heal`, when what was sent
//! meanwhile arrives late. `redirect` moves it to another upstream (an
//! address that follows a failover).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

pub struct Proxy {
    pub port: u16,
    upstream: Arc<AtomicU16>,
    cut: Arc<AtomicBool>,
    hung: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Forwards a free loopback port to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let hung = Arc::new(AtomicBool::new(false));
        let h = hung.clone();
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let upstream = Arc::new(AtomicU16::new(upstream));
        let (c, o, s, u) = (cut.clone(), open.clone(), stop.clone(), upstream.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                if c.load(Ordering::Acquire) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", u.load(Ordering::Acquire)))
                else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut open = o.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    h.clone(),
                );
                pipe(server, client, h.clone());
            }
        });
        Proxy {
            port,
            upstream,
            cut,
            hung,
            open,
            stop,
        }
    }

    /// Drops every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Sends new connections to `127.0.0.1:upstream` from now on and drops
    /// the open ones (as a virtual address moved to a promoted replica).
    pub fn redirect(&self, upstream: u16) {
        self.upstream.store(upstream, Ordering::Release);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Holds every byte either way (connections stay open) until
    /// [`Proxy::heal`].
    pub fn hang(&self) {
        self.hung.store(true, Ordering::Release);
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
        self.hung.store(false, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.hung.store(false, Ordering::Release);
        self.cut();
        // Wake the accept loop so it sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, hung: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    while hung.load(Ordering::Acquire) {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
