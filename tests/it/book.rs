//! The documentation: README.md, BENCHMARKS.md and the book in docs/src/
//! (mdBook; scripts/test builds it with `mdbook build docs`). Read from the
//! files alone, no server started:
//!
//! - every relative link reaches a file of the repository, and every
//!   `#anchor` a heading of the Markdown file it names (by GitHub's slug,
//!   which is mdBook's too) or an `<a id="…">` in it;
//! - every flag of `delayq` and every route the README and the book name
//!   is one the program has: the long flags of [`delayq::config::Cli`]
//!   (the global ones and every subcommand's), the routes of the OpenAPI
//!   document ([`delayq::api::openapi`]) and the dashboard's
//!   ([`delayq::api::ui::UI_ROUTES`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The header of the flag table, in the README and the operating chapter
/// (tests/it/ops.rs holds the README's to `delayq serve --help`).
const FLAG_TABLE: &str = "| command / flag | default | meaning |";

/// A Markdown file: its path from the repository's root and its text.
struct Doc {
    path: PathBuf,
    text: String,
}

impl Doc {
    fn read(path: PathBuf) -> Doc {
        let text = std::fs::read_to_string(Path::new(ROOT).join(&path))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Doc { path, text }
    }

    /// Each line with its number (from 1) and whether it is part of a
    /// fenced code block (the fences included).
    fn lines(&self) -> Vec<(usize, &str, bool)> {
        let mut fenced = false;
        let mut out = Vec::new();
        for (i, line) in self.text.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with("```") || t.starts_with("~~~") {
                fenced = !fenced;
                out.push((i + 1, line, true));
            } else {
                out.push((i + 1, line, fenced));
            }
        }
        out
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// README.md, BENCHMARKS.md and every Markdown file under docs/src.
fn all_docs() -> Vec<Doc> {
    let mut paths = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    let mut dirs = vec![PathBuf::from("docs/src")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(Path::new(ROOT).join(&dir))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let name = entry.unwrap().file_name();
            let path = dir.join(&name);
            if Path::new(ROOT).join(&path).is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths.into_iter().map(Doc::read).collect()
}

/// The inline code spans of a line (text between single backticks).
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// A line without its inline code spans.
fn prose(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// GitHub's anchor of a heading (mdBook makes the same): lower case,
/// inline code marks dropped, every character but letters, digits, `-`,
/// `_` and spaces dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a document: its headings' slugs (a repeated one gets
/// `-1`, `-2`, … as on GitHub) and its `<a id="…">`s.
fn anchors(doc: &Doc) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line, fenced) in doc.lines() {
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        for part in line.split("<a id=\"").skip(1) {
            if let Some(id) = part.split('"').next() {
                out.insert(id.to_string());
            }
        }
    }
    out
}

/// The targets of a line's Markdown links and images (`[text](target)`),
/// outside code spans; a title after the target is left out.
fn link_targets(line: &str) -> Vec<String> {
    let text = prose(line);
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// A link to elsewhere than the repository.
fn external(target: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|p| target.starts_with(p))
}

/// Every relative link in README.md, BENCHMARKS.md and docs/src reaches a
/// file or folder of the repository, and every `#anchor` a heading or an
/// `<a id>` of the Markdown file it names (its own when the link is only
/// `#anchor`).
#[test]
fn book_links_reach_files_and_headings() {
    let docs = all_docs();
    let mut anchors_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    let mut checked = (0, 0);
    for doc in &docs {
        for (n, line, fenced) in doc.lines() {
            if fenced {
                continue;
            }
            for target in link_targets(line) {
                if target.is_empty() || external(&target) {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    doc.path.clone()
                } else {
                    normalize(&doc.path.parent().unwrap().join(file))
                };
                checked.0 += 1;
                if !Path::new(ROOT).join(&path).exists() {
                    broken.push(format!(
                        "{}:{n}: {target}: no file {}",
                        doc.name(),
                        path.display()
                    ));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if path.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                checked.1 += 1;
                let known = anchors_of
                    .entry(path.clone())
                    .or_insert_with(|| anchors(&Doc::read(path.clone())));
                if !known.contains(anchor) {
                    broken.push(format!(
                        "{}:{n}: {target}: no heading #{anchor} in {}",
                        doc.name(),
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // A check that reads nothing passes everything: the files hold links
    // by the hundred, dozens of them to a heading.
    assert!(
        checked.0 >= 80 && checked.1 >= 30,
        "only {} links ({} with an anchor) found",
        checked.0,
        checked.1
    );
}

/// `a/b/../c` as `a/c`, so that a link reaching out of the repository and
/// back reads as the path it means.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Flags the README and the book name that belong to another program,
/// each with the program: in a code span of their own they would read as
/// `delayq`'s.
const NOT_DELAYQ: &[(&str, &str)] = &[
    ("--max-time", "curl"),
    ("--base", "scripts/bench-per-message"),
    ("--nodes", "cluster/up"),
    ("--tls", "cluster/redis-cluster start DIR --tls CERT KEY CA"),
    ("--worker-id", "none: a flag delayq had once, named as gone"),
];

/// Whether a command line (a code block's line or a code span) runs
/// delayq: `delayq …` (not `delayq-bench`), a built binary
/// (`target/release/delayq …`) or `scripts/serve …`, which passes its
/// arguments to `delayq serve`.
fn runs_delayq(command: &str) -> bool {
    let first = command.split_whitespace().next().unwrap_or("");
    first == "delayq" || first.ends_with("/delayq") || first == "scripts/serve"
}

/// The long flags in a piece of text: `--` followed by a lower-case name.
fn flags_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("--") {
        if i > 0 && !text[..i].ends_with([' ', '[', '`', '(', '\t']) {
            continue;
        }
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if name.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push(format!("--{}", name.trim_end_matches('-')));
        }
    }
    out
}

/// The documents the names are checked in: the README and the book but
/// for its dated benchmark log (and BENCHMARKS.md, drawn from it), whose
/// commands are kept as they ran on their day.
fn named_docs() -> Vec<Doc> {
    all_docs()
        .into_iter()
        .filter(|d| d.path != Path::new("BENCHMARKS.md"))
        .filter(|d| d.path != Path::new("docs/src/benchmarks-log.md"))
        .collect()
}

/// The flags a document names as `delayq`'s, each with where. A `--name`
/// counts when it stands
///
/// - in a code block's line that runs delayq ([`runs_delayq`]), or in the
///   lines that line continues into with a trailing `\`;
/// - in a code span that runs delayq (`delayq reconcile --repair`,
///   `scripts/serve --shards 16`);
/// - in a code span that starts with it (`--redis-horizon`,
///   `--topic-limit sms=200/s`): prose names delayq's flags so, and the
///   few of other programs named so are listed in [`NOT_DELAYQ`];
/// - in the first cell of the flag table ([`FLAG_TABLE`]).
///
/// Not counted: a code span or code block line that runs another program
/// (`cargo nextest run --test it`, `curl --max-time 15`, `podman kill
/// --signal KILL`, `scripts/check-faults --secs 1800`, `delayq-bench
/// --url …`, npm, mvn, go).
fn named_flags(doc: &Doc) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut continued = false;
    let mut in_table = false;
    for (n, line, fenced) in doc.lines() {
        let at = format!("{}:{n}", doc.name());
        if fenced {
            let command = line.trim_start().trim_start_matches("$ ");
            if continued || runs_delayq(command) {
                out.extend(flags_in(line).into_iter().map(|f| (f, at.clone())));
            }
            continued = (continued || runs_delayq(command)) && line.trim_end().ends_with('\\');
            continue;
        }
        continued = false;
        if line.trim() == FLAG_TABLE {
            in_table = true;
            continue;
        }
        in_table = in_table && line.starts_with('|');
        if in_table {
            let first = line
                .trim_start_matches('|')
                .split(" | ")
                .next()
                .unwrap_or("");
            out.extend(flags_in(first).into_iter().map(|f| (f, at.clone())));
        }
        for span in code_spans(line) {
            if runs_delayq(span) || span.starts_with("--") {
                out.extend(flags_in(span).into_iter().map(|f| (f, at.clone())));
            }
        }
    }
    out.retain(|(f, _)| !NOT_DELAYQ.iter().any(|(n, _)| n == f));
    out
}

/// Every long flag of `delayq`: the global ones and every subcommand's,
/// `--help` and `--version` included.
fn cli_flags() -> BTreeSet<String> {
    let mut cmd = delayq::config::Cli::command();
    cmd.build();
    let mut out = BTreeSet::new();
    let mut todo = vec![&cmd];
    while let Some(c) = todo.pop() {
        for arg in c.get_arguments() {
            if let Some(long) = arg.get_long() {
                out.insert(format!("--{long}"));
            }
            for alias in arg.get_all_aliases().unwrap_or_default() {
                out.insert(format!("--{alias}"));
            }
        }
        todo.extend(c.get_subcommands());
    }
    out
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"];

/// The routes a document names: `METHOD /path` in a code span (`GET
/// /topics`, `POST /ack/{id}?receipt=R`), the path up to its query.
fn named_routes(doc: &Doc) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (n, line, fenced) in doc.lines() {
        if fenced {
            continue;
        }
        for span in code_spans(line) {
            let words: Vec<&str> = span.split_whitespace().collect();
            for pair in words.windows(2) {
                if METHODS.contains(&pair[0]) && pair[1].starts_with('/') {
                    let path = pair[1]
                        .split(['?', '\\', ',', ')', '…'])
                        .next()
                        .unwrap()
                        .to_string();
                    out.push((pair[0].to_string(), path, format!("{}:{n}", doc.name())));
                }
            }
        }
    }
    out
}

/// A path with each parameter as `{}`: `/ack/{id}` and `/ack/{x}` read
/// the same.
fn route_shape(path: &str) -> Vec<String> {
    path.trim_end_matches('/')
        .split('/')
        .map(|s| {
            if s.starts_with('{') && s.ends_with('}') {
                "{}".to_string()
            } else {
                s.to_string()
            }
        })
        .collect()
}

/// Whether a named path is a served one: segment by segment, `{…}` for
/// any parameter and `...` for any segment (`/dead/.../requeue`).
fn route_matches(named: &[String], served: &[String]) -> bool {
    named.len() == served.len()
        && named
            .iter()
            .zip(served)
            .all(|(n, s)| n == s || n == "..." || (n == "{}" && s == "{}"))
}

/// Every route served: the OpenAPI document's (which a unit test in
/// src/api holds to the table actix-web registers, `/openapi.json`,
/// `/docs`, `/metrics` and `/health` included), and the dashboard's,
/// served beside it and left out of the document (`UI_ROUTES`: `/ui`,
/// its pages, forms and assets). Nothing else is served: any other path
/// is the 404 `no_such_route` of `configure`'s default service.
fn served_routes() -> Vec<(String, Vec<String>)> {
    let doc = serde_json::to_value(delayq::api::openapi()).expect("the OpenAPI document");
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            let method = method.to_uppercase();
            if METHODS.contains(&method.as_str()) {
                out.push((method, route_shape(path)));
            }
        }
    }
    for (method, path) in delayq::api::ui::UI_ROUTES {
        out.push((
            method.to_uppercase(),
            route_shape(&delayq::api::openapi_path(path)),
        ));
    }
    out
}

/// The flag table's rows: each first cell (the flags, or a subcommand)
/// with its default cell.
fn flag_table(doc: &Doc) -> BTreeMap<String, String> {
    let table = doc
        .text
        .split(FLAG_TABLE)
        .nth(1)
        .unwrap_or_else(|| panic!("{}: no flag table", doc.name()));
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            // Neither of the first two cells holds a `|`.
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect()
}

/// Every flag of `delayq` and every route the README and the book name
/// exists: the flags in [`cli_flags`], by the rule of [`named_flags`];
/// the routes among [`served_routes`], with their method. And the flag
/// table of the operating chapter is the README's, row for row (the
/// README's is held to `--help` by tests/it/ops.rs).
#[test]
fn book_names_only_flags_and_routes_delayq_has() {
    let docs = named_docs();
    let known_flags = cli_flags();
    let served = served_routes();
    let mut unknown = Vec::new();
    let (mut flags, mut routes) = (BTreeSet::new(), BTreeSet::new());
    for doc in &docs {
        for (flag, at) in named_flags(doc) {
            if !known_flags.contains(&flag) {
                unknown.push(format!("{at}: {flag} is no flag of delayq"));
            }
            flags.insert(flag);
        }
        for (method, path, at) in named_routes(doc) {
            let shape = route_shape(&path);
            if !served
                .iter()
                .any(|(m, s)| *m == method && route_matches(&shape, s))
            {
                unknown.push(format!("{at}: {method} {path} is no route of delayq"));
            }
            routes.insert(format!("{method} {path}"));
        }
    }
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
    // A rule that matches nothing passes everything: the README and the
    // book name most of delayq's flags and routes.
    assert!(
        flags.len() >= 30,
        "only {} flags found: {flags:?}",
        flags.len()
    );
    assert!(
        routes.len() >= 30,
        "only {} routes found: {routes:?}",
        routes.len()
    );

    let readme = Doc::read(PathBuf::from("README.md"));
    let operating = Doc::read(PathBuf::from("docs/src/operating.md"));
    let (a, b) = (flag_table(&readme), flag_table(&operating));
    let names = |t: &BTreeMap<String, String>| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&a),
        names(&b),
        "the flag tables of README.md and docs/src/operating.md differ"
    );
    for (row, default) in &a {
        assert_eq!(
            &b[row], default,
            "{row}: the two flag tables' defaults differ"
        );
    }
}
