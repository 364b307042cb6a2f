//! Secrets kept out of logs, errors and pages: a URL is shown with its
//! password (or a bare token before `@`) and its query values replaced by
//! `***`, except the parameters delayq and the client libraries read that
//! hold no secret (`ssl_mode`, `ssl_ca`, `exchange`, …). A webhook's
//! `?token=…` is therefore never written out as given.

/// Query parameters shown as written.
const PLAIN_PARAMS: &[&str] = &[
    "ssl_mode",
    "ssl_ca",
    "ssl_cert",
    "ssl_key",
    "unix_socket",
    "exchange",
    "routingKey",
    "subject",
    "protocol",
];

/// `url` fit to be logged.
pub fn url(url: &str) -> String {
    let (rest, fragment) = match url.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (url, None),
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let mut out = userinfo(base);
    if let Some(q) = query {
        out.push('?');
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if !PLAIN_PARAMS.contains(&k) => format!("{k}=***"),
                _ => p.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// `scheme://user:***@host…`, or `scheme://***@host…` for a bare token.
fn userinfo(base: &str) -> String {
    let Some(s) = base.find("://") else {
        return base.to_string();
    };
    let authority_end = base[s + 3..].find('/').map_or(base.len(), |i| s + 3 + i);
    match base[s + 3..authority_end].rfind('@') {
        None => base.to_string(),
        Some(at) => {
            let at = s + 3 + at;
            let cred = &base[s + 3..at];
            let shown = match cred.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_string(),
            };
            format!("{}{shown}{}", &base[..s + 3], &base[at..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::url;

    #[test]
    fn secrets_are_hidden() {
        assert_eq!(url("mysql://u:secret@h:1/d"), "mysql://u:***@h:1/d");
        assert_eq!(url("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(url("rediss://:pw@h:6380/0"), "rediss://:***@h:6380/0");
        assert_eq!(url("nats://tok3n@h:4222"), "nats://***@h:4222");
        assert_eq!(
            url("https://h/hook?token=abc&x=1#frag"),
            "https://h/hook?token=***&x=***#frag"
        );
        assert_eq!(
            url("mysql://u:p@h/d?ssl_mode=verify_ca&ssl_ca=/etc/ca.pem"),
            "mysql://u:***@h/d?ssl_mode=verify_ca&ssl_ca=/etc/ca.pem"
        );
        assert_eq!(
            url("amqps://u:p@h/v?exchange=e&routingKey=k"),
            "amqps://u:***@h/v?exchange=e&routingKey=k"
        );
        // An @ in the path is not a password's end.
        assert_eq!(url("https://h/a@b"), "https://h/a@b");
        assert_eq!(url("https://u:p@h/a@b"), "https://u:***@h/a@b");
    }
}
