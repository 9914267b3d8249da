//! The shape of the controllers, checked on their source (docs/architecture.md):
//!
//! - no import circle among the controller files: the graph of which file names an item of
//!   which other file (through `use` and inline paths, re-exports followed to the file that
//!   defines the item) has no cycle, so each file can be read after the ones it uses;
//! - the shared machinery (`controllers/shared/`) names no kind's module, and its `Context`
//!   names no kind;
//! - no `static` item in the operator's source holds state (a process-wide counter, cache or
//!   switch): state lives in the values that own it.
//!
//! Test code is left out: unit-test modules at the end of a file (from `#[cfg(test)]` on) and
//! the test-only files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Files only unit tests compile.
fn test_only(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name.ends_with("_tests.rs") || ["test_env.rs", "test_support.rs", "fixtures.rs"].contains(&name)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !test_only(&path) {
            out.push(path);
        }
    }
}

/// The code of `path` up to its unit tests, without comments.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let line = match line.find("//") {
            // A `//` inside a string (a URL) is rare in these files and never in a path.
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The module path of a file under `controllers/` (`cluster/sync.rs` → `[cluster, sync]`,
/// `cluster/mod.rs` → `[cluster]`, `mod.rs` → `[]`).
fn module_of(controllers: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(controllers).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The `use` declarations of `code`, each expanded to `(full path, name it binds, public)`.
fn uses(code: &str) -> Vec<(Vec<String>, String, bool)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_use(rest) {
        let (public, start) = at;
        let Some(end) = rest[start..].find(';') else {
            break;
        };
        // `as` is the one word of a use tree; mark it before the spaces go.
        let tree: String = rest[start..start + end]
            .replace(" as ", "@")
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        expand(&tree, &mut Vec::new(), public, &mut out);
        rest = &rest[start + end + 1..];
    }
    out
}

/// The start of the next `use` tree in `code` (after `use `) and whether it is a re-export.
fn find_use(code: &str) -> Option<(bool, usize)> {
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        for (prefix, public) in [
            ("use ", false),
            ("pub use ", true),
            ("pub(crate) use ", true),
            ("pub(super) use ", true),
        ] {
            if trimmed.starts_with(prefix) {
                return Some((public, offset + indent + prefix.len()));
            }
        }
        offset += line.len();
    }
    None
}

/// Expands the use tree `tree` (no whitespace) under `prefix`.
fn expand(
    tree: &str,
    prefix: &mut Vec<String>,
    public: bool,
    out: &mut Vec<(Vec<String>, String, bool)>,
) {
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once('@') {
            Some((p, a)) => (p, Some(a)),
            None => (tree, None),
        };
        let mut full = prefix.clone();
        full.extend(path.split("::").filter(|s| !s.is_empty()).map(String::from));
        if full.last().is_some_and(|s| s == "self") {
            full.pop();
        }
        let name = alias
            .map(String::from)
            .or_else(|| full.last().cloned())
            .unwrap_or_default();
        if !full.is_empty() {
            out.push((full, name, public));
        }
        return;
    };
    let head: Vec<String> = tree[..open]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let inner = &tree[open + 1..tree.len() - 1];
    let depth = prefix.len();
    prefix.extend(head);
    let mut level = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => level += 1,
            '}' => level -= 1,
            ',' if level == 0 => {
                expand(&inner[start..i], prefix, public, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        expand(&inner[start..], prefix, public, out);
    }
    prefix.truncate(depth);
}

/// The paths written inline in `code` that start at `crate::controllers`, `super` or `self`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if (i == 0 || !word(bytes[i - 1])) && word(bytes[i]) {
            let start = i;
            while i < bytes.len() && (word(bytes[i]) || code[i..].starts_with("::")) {
                i += if code[i..].starts_with("::") { 2 } else { 1 };
            }
            let path: Vec<String> = code[start..i]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let rooted = matches!(path.first().map(String::as_str), Some("super" | "self"))
                || path.starts_with(&["crate".to_string(), "controllers".to_string()]);
            if rooted && path.len() > 1 {
                out.push(path);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// `path` as written in the file of module `module`, made absolute under `controllers`;
/// `None` for a path outside the controllers. `super` is relative to the module itself: for
/// `a/b.rs` (module `[a, b]`) it is `[a]`, for `a/mod.rs` (module `[a]`) it is `[]`.
fn absolute(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut here = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            if rest.get(1).map(String::as_str) != Some("controllers") {
                return None;
            }
            here.clear();
            rest = &rest[2..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                here.pop()?;
                rest = &rest[1..];
            }
        }
        // A path from an external crate, or a name already in scope.
        _ => return None,
    }
    here.extend(rest.iter().cloned());
    Some(here)
}

struct Files {
    /// Module path → file.
    by_module: BTreeMap<Vec<String>, PathBuf>,
    /// File → (re-exported name → absolute path of what it re-exports).
    reexports: BTreeMap<PathBuf, BTreeMap<String, Vec<String>>>,
}

impl Files {
    /// The file that defines what the absolute path `path` names, following re-exports.
    fn defining(&self, path: &[String], depth: usize) -> Option<PathBuf> {
        let cut = (0..=path.len())
            .rev()
            .find(|n| self.by_module.contains_key(&path[..*n]))?;
        let file = self.by_module[&path[..cut]].clone();
        let Some(item) = path.get(cut) else {
            return Some(file);
        };
        match self.reexports.get(&file).and_then(|r| r.get(item)) {
            Some(target) if depth < 16 => {
                let mut target = target.clone();
                target.extend(path[cut + 1..].iter().cloned());
                self.defining(&target, depth + 1)
            }
            _ => Some(file),
        }
    }
}

/// Which controller file names an item of which other.
fn import_graph() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let controllers = src().join("controllers");
    let mut paths = Vec::new();
    rust_files(&controllers, &mut paths);
    let mut files = Files {
        by_module: BTreeMap::new(),
        reexports: BTreeMap::new(),
    };
    let mut parsed = Vec::new();
    for path in &paths {
        let module = module_of(&controllers, path);
        let code = code(path);
        files.by_module.insert(module.clone(), path.clone());
        parsed.push((path.clone(), module, code));
    }
    for (path, module, code) in &parsed {
        let mut reexports = BTreeMap::new();
        for (full, name, public) in uses(code) {
            if public && let Some(abs) = absolute(module, &full) {
                reexports.insert(name, abs);
            }
        }
        files.reexports.insert(path.clone(), reexports);
    }
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (path, module, code) in &parsed {
        let named = uses(code)
            .into_iter()
            .map(|(full, _, _)| full)
            .chain(inline_paths(code));
        let edges = graph.entry(path.clone()).or_default();
        for full in named {
            if let Some(abs) = absolute(module, &full)
                && let Some(target) = files.defining(&abs, 0)
                && target != *path
            {
                edges.insert(target);
            }
        }
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn a_cycle(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Option<Vec<PathBuf>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        marks: &mut BTreeMap<PathBuf, Mark>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = stack[from..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

fn short(path: &Path) -> String {
    path.strip_prefix(src())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn the_controller_files_import_one_another_without_a_circle() {
    let graph = import_graph();
    // Guards the scan itself: a change of layout must not silently empty the graph.
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(
        graph.len() > 40 && edges > 150,
        "{} files, {edges} imports",
        graph.len()
    );
    let sync = src().join("controllers/cluster/sync.rs");
    assert!(
        graph[&sync].contains(&src().join("controllers/shared/context.rs")),
        "a re-export is followed to the file that defines the item: {:?}",
        graph[&sync]
    );
    if let Some(cycle) = a_cycle(&graph) {
        let names: Vec<String> = cycle.iter().map(|p| short(p)).collect();
        panic!("import circle: {}", names.join(" → "));
    }
}

#[test]
fn a_circle_is_found_when_there_is_one() {
    let node = |n: &str| PathBuf::from(n);
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    graph.insert(node("a"), [node("b")].into());
    graph.insert(node("b"), [node("c")].into());
    graph.insert(node("c"), BTreeSet::new());
    assert_eq!(a_cycle(&graph), None);
    graph.insert(node("c"), [node("a")].into());
    assert_eq!(
        a_cycle(&graph),
        Some(vec![node("a"), node("b"), node("c"), node("a")])
    );
}

#[test]
fn the_shared_machinery_names_no_kind() {
    let controllers = src().join("controllers");
    let mut paths = Vec::new();
    rust_files(&controllers.join("shared"), &mut paths);
    let kinds = [
        "cluster",
        "connection",
        "children",
        "secret_sync",
        "kubeconfig_export",
        "helm_release",
    ];
    let mut named = Vec::new();
    for path in &paths {
        let code = code(path);
        let module = module_of(&controllers, path);
        let all = uses(&code)
            .into_iter()
            .map(|(full, _, _)| full)
            .chain(inline_paths(&code));
        for full in all {
            if let Some(abs) = absolute(&module, &full)
                && abs.first().is_some_and(|m| kinds.contains(&m.as_str()))
            {
                named.push(format!("{} names {}", short(path), abs.join("::")));
            }
        }
    }
    assert!(named.is_empty(), "{named:#?}");
    let context = code(&controllers.join("shared/context.rs"));
    for kind in omni_operator::api::KINDS {
        assert!(!context.contains(kind), "the Context names {kind}");
    }
}

#[test]
fn no_static_holds_state() {
    let mut paths = Vec::new();
    rust_files(&src(), &mut paths);
    let mut found = Vec::new();
    for path in &paths {
        for line in code(path).lines() {
            let trimmed = line.trim_start();
            let declares = ["static ", "pub static ", "pub(crate) static "]
                .iter()
                .any(|p| trimmed.starts_with(p));
            if declares {
                found.push(format!("{}: {}", short(path), trimmed));
            }
        }
    }
    assert!(found.is_empty(), "static items: {found:#?}");
}
