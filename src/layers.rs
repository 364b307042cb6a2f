//! The floors, checked where Cargo cannot. The domain, the metrics and
//! storage are crates of their own (`crates/`), so Cargo refuses an import
//! from them into a floor above. Within a crate, every `crate::`,
//! `super::` and `self::` path, and every path from a child module
//! (`consume::ack_batch` in `queue/mod.rs`), is read as an arrow from the
//! file that writes it to the module file it names (so a `mod.rs` and a
//! child that import each other are a circle), and the tests fail on an import
//! circle among the files of any crate in the repository (the server, the
//! crates, the client, the benchmark) or on an arrow that runs up a floor
//! of the server's map below (the map in `lib.rs`'s Layout, as a table).
//! Only test code (`#[cfg(test)] mod tests`) is left out; doc comments
//! name modules without importing them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, bottom first. A file may import files on its own floor
/// or below, never above; a module not named takes its parent's floor.
const FLOORS: &[(&str, &[&str])] = &[
    (
        "support: the crate root, the API's error codes, a stalled process, progress bars, the process's end",
        &["lib", "layers", "error", "progress", "stall", "exit"],
    ),
    (
        "the shards' engine: the actors in front of Redis and the journal, wake-ups",
        &["actors", "notify"],
    ),
    (
        "the engine: ownership, the queue's rules, repair",
        &[
            "cluster",
            "queue",
            "restore",
            "reconcile",
            "reshard",
            "retention",
            "horizon",
        ],
    ),
    (
        "the edges: HTTP, forwarding, the outbox, the process",
        &["api", "forward", "outbox", "config", "node", "main"],
    ),
];

fn floor_of(module: &[String]) -> Option<usize> {
    let top = module.first().map(String::as_str).unwrap_or("lib");
    FLOORS.iter().position(|(_, names)| names.contains(&top))
}

/// A source file and the module path it holds (`src/redis/keys.rs` is
/// `["redis", "keys"]`; `lib.rs` and `main.rs` are roots of their own).
struct File {
    path: PathBuf,
    module: Vec<String>,
}

fn files(src: &Path) -> Vec<File> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            if module == ["lib"] {
                module.clear();
            }
            out.push(File { path, module });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The code of a file without comments, strings and its test module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        let after_ident = i > 0 && is_ident(b[i - 1] as char);
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
        } else if !after_ident && (rest.starts_with("r#") || rest.starts_with("r\"")) {
            let hashes = rest[1..].bytes().take_while(|&c| c == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += body
                + rest[body..]
                    .find(&close)
                    .map_or(rest.len() - body, |e| e + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\''
            && rest.len() > 2
            && (rest.as_bytes()[2] == b'\'' || rest.as_bytes()[1] == b'\\')
        {
            // A character literal ('"', '\n'); a lifetime stays.
            i += 1 + rest[1..].find('\'').map_or(0, |e| e + 1);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path a `use` tree names, whole: `a::{b, c::d}` gives `a::b`
/// and `a::c::d`.
fn expand(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let prefix = join(prefix, head);
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&body[start..i], &prefix, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&body[start..], &prefix, out);
    } else if !tree.is_empty() {
        let name = tree.split(" as ").next().unwrap().trim();
        let name = name.trim_end_matches("::self");
        out.push(join(prefix, name));
    }
}

fn join(prefix: &str, rest: &str) -> String {
    match (prefix.is_empty(), rest.is_empty() || rest == "self") {
        (_, true) => prefix.to_string(),
        (true, false) => rest.to_string(),
        (false, false) => format!("{prefix}::{rest}"),
    }
}

/// The paths a file's code names: its `use` trees and the paths written
/// out in place.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    // `use` statements, `pub` or not.
    while let Some(at) = find_word(rest, "use") {
        let after = &rest[at + 3..];
        let end = after.find(';').unwrap_or(after.len());
        expand(&after[..end], "", &mut out);
        rest = &after[end..];
    }
    // Paths in place: `crate::x::y(...)`, `super::Z`.
    for root in ["crate::", "super::", "self::"] {
        out.extend(in_place(code, root));
    }
    out
}

/// The paths in `code` that begin with `root` (`crate::`, `consume::`)
/// where a path begins: not inside a longer name or path.
fn in_place(code: &str, root: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(root) {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(is_ident(c) || c == ':'))
            .unwrap_or(tail.len());
        if before.is_none_or(|c| !is_ident(c) && c != ':') {
            out.push(tail[..len].trim_end_matches(':').to_string());
        }
        rest = &tail[root.len()..];
    }
    out
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        if before.is_none_or(|c| !is_ident(c)) && after.is_some_and(char::is_whitespace) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The module a path names from `module`, as far as it is a module of
/// this crate; `None` for outside crates and the file itself.
fn target(path: &str, module: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segs = path.split("::").map(str::trim).filter(|s| !s.is_empty());
    let mut at: Vec<String> = match segs.next()? {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module[..module.len().saturating_sub(1)].to_vec(),
        // A path from a child module (`pub use client::Client;`,
        // `consume::ack_batch(...)` in the `queue` module's mod.rs): the
        // same as `self::client::...`.
        child if modules.contains(&[module, &[child.to_string()]].concat()) => {
            let mut at = module.to_vec();
            at.push(child.to_string());
            at
        }
        _ => return None,
    };
    let mut named = at.clone();
    for seg in segs {
        if seg == "super" {
            at.pop();
            named = at.clone();
            continue;
        }
        at.push(seg.to_string());
        if modules.contains(&at) {
            named = at.clone();
        } else {
            break;
        }
    }
    Some(named)
}

type Graph = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

/// The server's `src/` (its `lib.rs` the root; `main.rs` is a binary of
/// its own).
fn server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `src/` of every crate in the repository.
fn every_crate() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![server(), root.join("client/src"), root.join("bench/src")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        dirs.push(entry.unwrap().path().join("src"));
    }
    dirs.sort();
    dirs
}

fn graph(src: &Path) -> (Graph, BTreeMap<Vec<String>, PathBuf>) {
    // A binary crate's root is its main.rs; the server's main.rs is a
    // binary beside its library, and not part of it.
    let binary = !src.join("lib.rs").exists();
    let files: Vec<File> = files(src)
        .into_iter()
        .filter(|f| binary || !f.path.ends_with("main.rs"))
        .map(|mut f| {
            if binary && f.module == ["main"] {
                f.module.clear();
            }
            f
        })
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut graph = Graph::new();
    for f in &files {
        let text = std::fs::read_to_string(&f.path).unwrap();
        let arrows = graph.entry(f.module.clone()).or_default();
        let code = code(&text);
        let mut found = paths(&code);
        // Paths in place from a child module: `consume::ack_batch(...)`.
        for m in &modules {
            if m.len() == f.module.len() + 1 && m.starts_with(&f.module) {
                found.extend(in_place(&code, &format!("{}::", m[m.len() - 1])));
            }
        }
        for p in found {
            if let Some(to) = target(&p, &f.module, &modules) {
                // A module's own file is no arrow. A path through the
                // crate root (`crate::Name`, a name the root re-exports)
                // is an arrow to the root, which names every module.
                if to != f.module {
                    arrows.insert(to);
                }
            }
        }
    }
    let names = files.into_iter().map(|f| (f.module, f.path)).collect();
    (graph, names)
}

/// Strongly connected groups of more than one file (Tarjan).
fn circles(graph: &Graph) -> Vec<Vec<Vec<String>>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Vec<String>) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[w].min(self.low[v]);
                    self.low.insert(v, l);
                } else if self.on.contains(w) {
                    let l = self.index[w].min(self.low[v]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    group.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.out.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_import_circle() {
    let mut report = String::new();
    for src in every_crate() {
        let (graph, _) = graph(&src);
        circles_in(&src, &graph, &mut report);
    }
    assert!(report.is_empty(), "{report}");
}

fn circles_in(src: &Path, graph: &Graph, report: &mut String) {
    let found = circles(graph);
    for group in &found {
        report.push_str(&format!(
            "{}: circle of {} modules:\n",
            src.display(),
            group.len()
        ));
        for from in group {
            for to in &graph[from] {
                if group.contains(to) {
                    report.push_str(&format!("  {} -> {}\n", show(from), show(to)));
                }
            }
        }
    }
}

#[test]
fn no_arrow_runs_up_a_floor() {
    let (graph, _) = graph(&server());
    let mut up = Vec::new();
    for (from, tos) in &graph {
        let Some(f) = floor_of(from) else {
            up.push(format!("{} is on no floor: add it to FLOORS", show(from)));
            continue;
        };
        for to in tos {
            if floor_of(to).is_some_and(|t| t > f) {
                up.push(format!(
                    "{} ({}) -> {} ({})",
                    show(from),
                    FLOORS[f].0,
                    show(to),
                    FLOORS[floor_of(to).unwrap()].0
                ));
            }
        }
    }
    assert!(
        up.is_empty(),
        "arrows that run up a floor:\n{}",
        up.join("\n")
    );
}

/// The crates a lower floor's `Cargo.toml` must not name: the floors'
/// promises said in dependencies (the domain knows no HTTP, Redis or SQL;
/// storage no actors, HTTP or ZooKeeper; the wire nothing but serde and
/// utoipa).
#[test]
fn the_lower_floors_name_no_crate_of_a_floor_above() {
    let http = [
        "actix",
        "actix-web",
        "actix-http",
        "actix-server",
        "hyper",
        "reqwest",
        "axum",
    ];
    let redis_sql = [
        "redis",
        "diesel",
        "diesel_migrations",
        "r2d2",
        "libsqlite3-sys",
        "mysqlclient-sys",
        "pq-sys",
    ];
    let cluster = ["zookeeper-client", "lapin", "async-nats"];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let rules: [(&str, Vec<&str>); 4] = [
        (
            "delayq-proto",
            [&http[..], &redis_sql, &cluster, &["tokio", "delayq-domain"]].concat(),
        ),
        (
            "delayq-domain",
            [&http[..], &redis_sql, &cluster, &["utoipa"]].concat(),
        ),
        ("delayq-metrics", [&http[..], &redis_sql, &cluster].concat()),
        (
            "delayq-storage",
            [&http[..], &cluster, &["utoipa"]].concat(),
        ),
    ];
    let mut found = Vec::new();
    for (krate, banned) in rules {
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        let deps: Vec<&str> = manifest
            .lines()
            .skip_while(|l| l.trim() != "[dependencies]")
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .filter_map(|l| l.split('=').next())
            .map(str::trim)
            .filter(|d| !d.is_empty() && !d.starts_with('#'))
            .collect();
        assert!(
            !deps.is_empty() || krate == "delayq-proto",
            "{krate}: no dependencies read"
        );
        for d in deps {
            if banned.contains(&d) {
                found.push(format!("{krate} depends on {d}"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn reads_use_trees_and_paths_in_place() {
    let mut out = Vec::new();
    expand("crate::{a::{b, c as d}, e::self}", "", &mut out);
    assert_eq!(out, ["crate::a::b", "crate::a::c", "crate::e"]);
    let found = paths(&code(
        "let x = crate::redis::keys::delay(1); // crate::api\n\"crate::node\"",
    ));
    assert_eq!(found, ["crate::redis::keys::delay"]);
}
