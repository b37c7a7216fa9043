//! The server crate's top-level modules form no import cycle.
//!
//! The test reads the crate's own sources (`src/`), takes each top-level module (a file
//! `src/x.rs` or a folder `src/x/`, every file in it counting as `x`), and records an edge
//! `x -> y` for each `crate::y` path in `x`'s code (`use` lines, full paths, `crate::{y, z}`
//! groups; a name re-exported by `lib.rs`, such as `crate::ApiError`, counts as the module it
//! comes from). Comments are skipped; test code counts like any other code. Any strongly
//! connected component of more than one module is a cycle, and the test fails naming it and one
//! cycle path through it. A second test holds the graph to the layers of `lib.rs`'s header:
//! a module imports only modules of lower layers, so the endpoint folders never import each
//! other, and a new top-level module must be given its layer here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (line comments, doc comments and block comments)
/// and without the contents of string literals (which may name paths in messages).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) {
            // A raw string: r"…", r#"…"#, r##"…"##.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' && (i == 0 || !is_ident(b[i - 1])) {
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = (j + close.len()).min(b.len());
                out.push_str("\"\"");
            } else {
                out.push(b[i] as char);
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal such as '"' or '\n' (a lifetime `'a` is left alone).
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The first identifier of `s` (after whitespace).
fn ident(s: &str) -> &str {
    let s = s.trim_start();
    let end = s.bytes().position(|c| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The names right after each `crate::` in `code`: `crate::a::b` gives `a`, `crate::{a, b::c}`
/// gives `a` and `b`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = &code[..at];
        if before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$')
            || before.ends_with("::")
        {
            continue; // `my_crate::`, `$crate::`, `x::crate::`
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        names.push(ident(&group[start..k]).to_string());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(ident(&group[start..k]).to_string());
                        start = k + 1;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(ident(rest).to_string());
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// `lib.rs`'s `pub use module::Name` / `pub use module::{A, B}`: name → module.
fn re_exports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident(path).to_string();
        let rest = &path[module.len()..];
        let items = rest.rsplit("::").next().unwrap_or("");
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = item.rsplit(" as ").next().unwrap_or("").trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.clone());
            }
        }
    }
    map
}

/// The top-level module of a file under `src`: `src/x.rs` and `src/x/…` are both `x`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

fn graph(src: &Path) -> Graph {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs is readable");
    let lib = code_only(&lib);
    let exports = re_exports(&lib);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for f in &files {
        if let Some(m) = module_of(src, f) {
            g.entry(m).or_default();
        }
    }
    for f in &files {
        let Some(from) = module_of(src, f) else {
            continue;
        };
        let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for name in crate_paths(&code_only(&text)) {
            let to = if g.contains_key(&name) {
                name
            } else if let Some(m) = exports.get(&name) {
                m.clone()
            } else {
                continue;
            };
            if to != from {
                g.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    g
}

/// Tarjan's strongly connected components with more than one member.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.g[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// One cycle through `scc`'s first member, by breadth-first search within the component.
fn one_cycle(g: &Graph, scc: &[String]) -> Vec<String> {
    let start = &scc[0];
    let inside: BTreeSet<&String> = scc.iter().collect();
    let mut parent: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in &g[v] {
            if !inside.contains(w) {
                continue;
            }
            if w == start {
                let mut back = Vec::new();
                let mut at = v;
                while at != start {
                    back.push(at.clone());
                    at = parent[at];
                }
                back.reverse();
                let mut path = vec![start.clone()];
                path.extend(back);
                path.push(start.clone());
                return path;
            }
            if !parent.contains_key(w) {
                parent.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    Vec::new()
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_server_modules_import_no_cycle() {
    let g = graph(&src_dir());
    assert!(g.len() > 5, "too few modules found: {g:?}");
    let found = cycles(&g);
    let described: Vec<String> = found
        .iter()
        .map(|scc| {
            format!(
                "{} modules in a cycle: {}\n  e.g. {}",
                scc.len(),
                scc.join(", "),
                one_cycle(&g, scc).join(" -> ")
            )
        })
        .collect();
    let edges: Vec<String> = g
        .iter()
        .map(|(m, to)| {
            format!(
                "  {m} -> {}",
                to.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        found.is_empty(),
        "{}\nthe graph:\n{}",
        described.join("\n"),
        edges.join("\n")
    );
}

/// The layers, lowest first (as `lib.rs`'s header lists them).
const LAYERS: &[&[&str]] = &[
    &["base", "telemetry"],
    &["protocol"],
    &["serving"],
    &[
        "chat",
        "completions",
        "embeddings",
        "lora",
        "messages",
        "responses",
        "routes",
    ],
    &["app"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

#[test]
fn every_module_imports_only_lower_layers() {
    let g = graph(&src_dir());
    let mut wrong = Vec::new();
    for (from, to) in &g {
        let Some(lf) = layer_of(from) else {
            wrong.push(format!(
                "`{from}` has no layer: add it to LAYERS (and lib.rs's header)"
            ));
            continue;
        };
        for t in to {
            match layer_of(t) {
                Some(lt) if lt < lf => {}
                Some(_) => wrong.push(format!(
                    "`{from}` imports `{t}`, of its own or a higher layer"
                )),
                None => wrong.push(format!("`{t}` has no layer: add it to LAYERS")),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_graph_reader_sees_paths_groups_and_re_exports() {
    let code = code_only(
        "use crate::{a, b::{c, d}};\n// crate::commented\nlet s = \"crate::in_string\";\n\
         crate::e::f(); x::crate::no; let c = '\"'; crate::g::h",
    );
    assert_eq!(crate_paths(&code), ["a", "b", "e", "g"]);
    let exports = re_exports("pub use error::ApiError; pub use state::{AppState, Loaded};");
    assert_eq!(exports.get("ApiError").map(String::as_str), Some("error"));
    assert_eq!(exports.get("Loaded").map(String::as_str), Some("state"));
}

#[test]
fn a_cycle_is_found_and_a_path_through_it_named() {
    let mut g = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.into()).or_default().insert(b.into());
        g.entry(b.into()).or_default();
    }
    let found = cycles(&g);
    assert_eq!(found, [["a", "b", "c"]]);
    assert_eq!(one_cycle(&g, &found[0]), ["a", "b", "c", "a"]);
    g.get_mut("c").expect("c").remove("a");
    assert!(cycles(&g).is_empty());
}
