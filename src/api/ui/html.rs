//! Text for the dashboard's HTML: escaping, URL encoding, times,
//! durations, bizKeys that show their white space, status badges, body
//! previews.

use std::fmt::Write;

/// HTML-escapes text for an element's content or a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Percent-encodes text for a URL's path segment or query value.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// An epoch-ms time as UTC, to the millisecond.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
    )
}

/// A bizKey, escaped, its white space at either end made visible (`A-1`
/// and `A-1 ` are two keys and must not look alike): each such character
/// is shown as `␠` (or its code) in a marked span.
pub fn key(text: &str) -> String {
    let inner = text.trim();
    if inner.len() == text.len() {
        return esc(text);
    }
    let start = text.len() - text.trim_start().len();
    let end = start + inner.len();
    let mark = |edge: &str| {
        let shown: String = edge
            .chars()
            .map(|c| match c {
                ' ' => "␠".to_string(),
                '\t' => "⇥".to_string(),
                '\n' => "↵".to_string(),
                other => format!("U+{:04X}", other as u32),
            })
            .collect();
        format!(r#"<span class="ws" title="white space">{shown}</span>"#)
    };
    let (head, tail) = (&text[..start], &text[end..]);
    let mut out = String::new();
    if !head.is_empty() {
        out.push_str(&mark(head));
    }
    out.push_str(&esc(inner));
    if !tail.is_empty() {
        out.push_str(&mark(tail));
    }
    out
}

/// A duration in ms, as a person reads it.
pub fn duration(ms: i64) -> String {
    let (abs, sign) = (ms.unsigned_abs(), if ms < 0 { "−" } else { "" });
    match abs {
        0..=999 => format!("{sign}{abs} ms"),
        1_000..=59_999 => format!("{sign}{:.1} s", abs as f64 / 1e3),
        60_000..=3_599_999 => format!("{sign}{:.1} min", abs as f64 / 6e4),
        3_600_000..=86_399_999 => format!("{sign}{:.1} h", abs as f64 / 3.6e6),
        _ => format!("{sign}{:.1} d", abs as f64 / 8.64e7),
    }
}

/// A status as a badge.
pub fn badge(status: crate::message::Status) -> String {
    let name = status.to_string();
    format!(
        r#"<span class="badge s-{}">{name}</span>"#,
        name.to_lowercase()
    )
}

/// The first characters of a body, escaped.
pub fn preview(body: &str, chars: usize) -> String {
    let mut cut: String = body.chars().take(chars).collect();
    if cut.len() < body.len() {
        cut.push('…');
    }
    esc(&cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_show_white_space_at_their_ends() {
        assert_eq!(key("A-1"), "A-1");
        assert_ne!(key("A-1 "), key("A-1"));
        assert!(key("A-1 ").contains("␠"));
        assert!(key(" <b>").starts_with(r#"<span class="ws""#));
        assert!(key(" <b>").ends_with("&lt;b&gt;"));
        assert!(
            key("a\tb").contains('\t'),
            "inner white space is left as it is"
        );
    }

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn encodes_urls() {
        assert_eq!(url_encode("a b/c?d=é"), "a%20b%2Fc%3Fd%3D%C3%A9");
        assert_eq!(url_encode("orders.v1:eu-west_1"), "orders.v1%3Aeu-west_1");
    }

    #[test]
    fn previews_cut_on_characters() {
        assert_eq!(preview("héllo wörld", 5), "héllo…");
        assert_eq!(preview("<b>", 10), "&lt;b&gt;");
    }
}
