//! The clients in other languages (clients/*) each carry the list of error
//! codes a user branches on. This is their one source: each list must be
//! exactly `ErrorCode::ALL` then `ErrorCode::PROXY`, in that order, so a
//! code added here and not there (or the other way) fails this test.

use std::path::PathBuf;

use delayq_proto::ErrorCode;

fn expected() -> Vec<String> {
    ErrorCode::ALL
        .iter()
        .chain(ErrorCode::PROXY)
        .map(|c| c.as_str().to_string())
        .collect()
}

fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The code-like strings quoted with `quote` (`'a_b'` or `"a_b"`) in
/// `text`, in order.
fn quoted_codes(text: &str, quote: char) -> Vec<String> {
    let mut codes = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(quote) {
        let after = &rest[start + 1..];
        let Some(end) = after.find(quote) else { break };
        let word = &after[..end];
        if !word.is_empty()
            && word.starts_with(|c: char| c.is_ascii_lowercase())
            && word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            codes.push(word.to_string());
        }
        rest = &after[end + 1..];
    }
    codes
}

/// A client's list: the quoted codes of its file, or of the part of it
/// between `from` and the next `to`.
fn client_list(path: &str, part: Option<(&str, &str)>) -> Vec<String> {
    let file = checkout().join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let text = match part {
        None => text.as_str(),
        Some((from, to)) => {
            let start = text
                .find(from)
                .unwrap_or_else(|| panic!("{path}: no {from:?}"));
            let len = text[start..].find(to).expect("the end of the list");
            &text[start..start + len]
        }
    };
    // JavaScript and TypeScript quote with ', the others with " (and may
    // write an apostrophe in a comment).
    let quote = if path.ends_with(".js") || path.ends_with(".ts") {
        '\''
    } else {
        '"'
    };
    quoted_codes(text, quote)
}

#[test]
fn every_client_knows_every_error_code_and_no_other() {
    let want = expected();
    let lists = [
        ("clients/python/delayq/codes.py", None),
        ("clients/node/src/codes.js", None),
        (
            "clients/node/src/index.d.ts",
            Some(("export type ErrorCode =", ";")),
        ),
        ("clients/go/codes.go", None),
        (
            "clients/java/src/main/java/io/delayq/client/ErrorCode.java",
            None,
        ),
    ];
    let mut wrong = Vec::new();
    for (path, part) in lists {
        let got = client_list(path, part);
        if got != want {
            let missing: Vec<&String> = want.iter().filter(|c| !got.contains(c)).collect();
            let unknown: Vec<&String> = got.iter().filter(|c| !want.contains(c)).collect();
            wrong.push(format!(
                "{path}: missing {missing:?}, not the server's {unknown:?}{}",
                if missing.is_empty() && unknown.is_empty() {
                    " (order or repeats differ)"
                } else {
                    ""
                }
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "the clients' error codes differ from delayq-proto's ErrorCode::ALL + PROXY \
         ({} codes, in that order):\n{}",
        want.len(),
        wrong.join("\n")
    );
}

#[test]
fn quoted_codes_reads_both_quotes_and_skips_other_words() {
    assert_eq!(
        quoted_codes(r#"A = "not_found"; it's "Not a code" "a-b" "" "x_y""#, '"'),
        vec!["not_found", "x_y"]
    );
    assert_eq!(
        quoted_codes(r#"a = 'stale_delivery'; "not_found""#, '\''),
        vec!["stale_delivery"]
    );
}

/// The quoted words (`'Delaying'`, `"in_flight"`) of `path`'s part
/// between `from` and the next `to`, in order.
fn quoted_words(path: &str, from: &str, to: &str, quote: char) -> Vec<String> {
    let file = checkout().join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("{path}: no {from:?}"));
    let len = text[start + from.len()..]
        .find(to)
        .map(|l| l + from.len())
        .expect("the end of the list");
    text[start..start + len]
        .split(quote)
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect()
}

/// The clients whose types name statuses and outcomes (the TypeScript
/// declarations, Go's status constants) name exactly the server's, in its
/// order; the others read them as strings.
#[test]
fn typed_clients_name_every_status_and_outcome_and_no_other() {
    use delayq_proto::{AckOutcome, CancelOutcome, DuplicateOutcome, NackOutcome, Status};
    let statuses: Vec<String> = Status::ALL.iter().map(|s| s.to_string()).collect();
    let ack = AckOutcome::SENT
        .iter()
        .map(|o| o.as_str().to_string())
        .collect::<Vec<_>>();
    let nack = NackOutcome::SENT
        .iter()
        .map(|o| o.as_str().to_string())
        .collect::<Vec<_>>();
    let cancel = CancelOutcome::SENT
        .iter()
        .map(|o| o.as_str().to_string())
        .collect::<Vec<_>>();
    let duplicate = DuplicateOutcome::SENT
        .iter()
        .map(|o| o.as_str().to_string())
        .collect::<Vec<_>>();
    let dts = "clients/node/src/index.d.ts";
    let checks = [
        (dts, "export type Status =", ";", '\'', &statuses),
        (dts, "export type CancelResult =", ";", '\'', &cancel),
        (dts, "export type DuplicateResult =", ";", '\'', &duplicate),
        (dts, "export interface AckResult {", "\n}", '\'', &ack),
        (dts, "export interface NackReply {", "\n}", '\'', &nack),
        ("clients/go/types.go", "StatusWaitPut", ")", '"', &statuses),
    ];
    let mut wrong = Vec::new();
    for (path, from, to, quote, want) in checks {
        let got = quoted_words(path, from, to, quote);
        if &got != want {
            wrong.push(format!("{path} ({from}): {got:?}, the server's {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
