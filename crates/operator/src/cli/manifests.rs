//! Reading manifests the way `kubectl apply -f` takes them, for the offline commands
//! (`validate`, `render`): files, directories and stdin; multi-document YAML; `kind: List`
//! (and every other `*List` with `items`) expanded into its objects; and, for every field, the
//! line and column it was written at, so problems can point at the source like a compiler
//! does.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::{Location, MessageFormatter, Spanned};

/// One input: a file (or stdin, labelled `-`) and its text.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// How output lines name the input: the path as given (joined with the directory), or `-`.
    pub(crate) label: String,
    /// The whole text.
    pub(crate) text: String,
}

/// Reads every `-f` argument: a file, a directory (its `.yaml`, `.yml` and `.json` files, sorted
/// by name, the order `kubectl apply -f DIR` uses) or `-` for stdin (at most once).
pub(crate) fn read_inputs(paths: &[PathBuf]) -> anyhow::Result<Vec<Input>> {
    let mut inputs = Vec::new();
    let mut stdin_used = false;
    for path in paths {
        if path.as_os_str() == "-" {
            anyhow::ensure!(!stdin_used, "stdin (-) can be given only once");
            stdin_used = true;
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("read stdin")?;
            inputs.push(Input {
                label: "-".into(),
                text,
            });
            continue;
        }
        let files = if path.is_dir() {
            manifest_files(path)?
        } else {
            vec![path.clone()]
        };
        for file in files {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read {}", file.display()))?;
            inputs.push(Input {
                label: file.display().to_string(),
                text,
            });
        }
    }
    Ok(inputs)
}

/// The `.yaml`, `.yml` and `.json` files directly inside `dir`, sorted by name.
fn manifest_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("read directory {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("read directory {}", dir.display()))?
            .path();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if matches!(ext, "yaml" | "yml" | "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// A place in an input: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Position {
    /// 1-based line.
    pub(crate) line: u32,
    /// 1-based column.
    pub(crate) column: u32,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Where each field of one object was written, by its path in Kubernetes notation
/// (`spec.machines[2]`, `metadata.labels.app`; map keys also as `metadata.labels[app]`).
/// A mapping entry is found at its key, a list item at its first character.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldPositions {
    root: Position,
    fields: BTreeMap<String, Position>,
}

impl FieldPositions {
    /// Where the object starts (its first key).
    pub(crate) fn root(&self) -> Position {
        self.root
    }

    /// Where `path` was written, or where its nearest written ancestor was (a required field
    /// that is missing is reported at the object holding it).
    pub(crate) fn of(&self, path: &str) -> Position {
        let mut path = path;
        loop {
            if let Some(position) = self.fields.get(path) {
                return *position;
            }
            match parent(path) {
                Some(up) => path = up,
                None => return self.root,
            }
        }
    }
}

/// `a.b[1]` → `a.b`, `a.b` → `a`, `a` → none.
fn parent(path: &str) -> Option<&str> {
    if path.ends_with(']')
        && let Some(open) = path.rfind('[')
    {
        return Some(&path[..open]);
    }
    path.rfind('.').map(|dot| &path[..dot])
}

/// One object found in an input.
#[derive(Debug, Clone)]
pub(crate) struct Manifest {
    /// The object as JSON.
    pub(crate) value: Value,
    /// Where its fields are.
    pub(crate) positions: FieldPositions,
}

/// What one document (or one item of a List) turned out to be.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// An object (a mapping); whether it is a Kubernetes object is for the caller to say.
    Object(Manifest),
    /// The document is not YAML; `message` says why, in the user's words.
    Unreadable {
        /// Where the problem is.
        position: Position,
        /// What is wrong.
        message: String,
    },
    /// The document is YAML but not a mapping, so not a Kubernetes object.
    NotAnObject {
        /// Where it starts.
        position: Position,
    },
}

/// Why a document that is not a mapping is refused.
pub(crate) const NOT_AN_OBJECT: &str = "document is not a Kubernetes object (expected a mapping)";

/// Every object of a multi-document YAML (or JSON) text, in order, with Lists expanded.
/// Documents holding only comments or whitespace are skipped.
pub(crate) fn entries(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for doc in documents(text) {
        match serde_saphyr::from_str::<Spanned<Node>>(doc.text) {
            Ok(root) => {
                let shift = |loc: &Location| doc.position(loc);
                match list_items(&root) {
                    Some(items) => {
                        for item in items {
                            push_object(item, &shift, &mut out);
                        }
                    }
                    None => push_object(&root, &shift, &mut out),
                }
            }
            Err(e) => {
                let position = e
                    .location()
                    .map(|loc| doc.position(&loc))
                    .unwrap_or(doc.start);
                out.push(Entry::Unreadable {
                    position,
                    message: format!("invalid YAML: {}", yaml_message(&e)),
                });
            }
        }
    }
    out
}

/// A YAML error in the user's words: serde-saphyr's user-facing wording (its default one
/// advises on library options) without the source snippet, which our output replaces by a
/// position.
pub(crate) fn yaml_message(error: &serde_saphyr::Error) -> String {
    let message = serde_saphyr::UserMessageFormatter.format_message(error.without_snippet());
    first_line(&message).to_string()
}

fn first_line(message: &str) -> &str {
    message
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(message)
        .trim()
}

fn push_object(node: &Spanned<Node>, shift: &dyn Fn(&Location) -> Position, out: &mut Vec<Entry>) {
    let root = shift(&node.referenced);
    if !matches!(node.value, Node::Map(_)) {
        out.push(Entry::NotAnObject { position: root });
        return;
    }
    let mut positions = FieldPositions {
        root,
        fields: BTreeMap::new(),
    };
    let value = to_value(node, "", shift, &mut positions.fields);
    out.push(Entry::Object(Manifest { value, positions }));
}

/// The items of a `kind: List` (or any `kind: *List`) with an `items` list, as
/// `kubectl apply` expands them.
fn list_items(root: &Spanned<Node>) -> Option<&[Spanned<Node>]> {
    let Node::Map(entries) = &root.value else {
        return None;
    };
    let field = |name: &str| {
        entries
            .iter()
            .find(|(k, _)| k.value == name)
            .map(|(_, v)| &v.value)
    };
    match (field("kind"), field("items")) {
        (Some(Node::String(kind)), Some(Node::Seq(items))) if kind.ends_with("List") => Some(items),
        _ => None,
    }
}

fn to_value(
    node: &Spanned<Node>,
    path: &str,
    shift: &dyn Fn(&Location) -> Position,
    fields: &mut BTreeMap<String, Position>,
) -> Value {
    match &node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::from(*i),
        Node::Uint(u) => Value::from(*u),
        Node::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Node::String(s) => Value::String(s.clone()),
        Node::Seq(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let item_path = format!("{path}[{i}]");
                    fields.insert(item_path.clone(), shift(&item.referenced));
                    to_value(item, &item_path, shift, fields)
                })
                .collect(),
        ),
        Node::Map(entries) => {
            let mut map = serde_json::Map::new();
            for (key, child) in entries {
                let child_path = if path.is_empty() {
                    key.value.clone()
                } else {
                    format!("{path}.{}", key.value)
                };
                let at = shift(&key.referenced);
                fields.insert(child_path.clone(), at);
                if !path.is_empty() {
                    fields.insert(format!("{path}[{}]", key.value), at);
                }
                map.insert(
                    key.value.clone(),
                    to_value(child, &child_path, shift, fields),
                );
            }
            Value::Object(map)
        }
    }
}

/// A YAML node that remembers where each of its children was written.
#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    String(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(Spanned<String>, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Uint(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Node::Map(entries))
    }
}

/// One document of a YAML stream and where it starts in the whole text.
struct Document<'a> {
    text: &'a str,
    /// Where `text` starts in the input.
    start: Position,
}

impl Document<'_> {
    /// A location inside `text` as a position in the whole input.
    fn position(&self, loc: &Location) -> Position {
        let (line, column) = (loc.line().max(1) as u32, loc.column().max(1) as u32);
        Position {
            line: self.start.line + line - 1,
            column: if line == 1 {
                self.start.column + column - 1
            } else {
                column
            },
        }
    }
}

/// Splits a YAML stream into its documents, dropping ones that hold only comments or
/// whitespace. Document markers are `---` lines at column 0 (optionally followed by content or
/// a comment); `...` end markers are dropped. Each document keeps the line and column it
/// starts at, so positions inside it can be given for the whole stream; it is parsed on its
/// own, so one broken document does not hide the others.
fn documents(text: &str) -> Vec<Document<'_>> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut start_pos = Position { line: 1, column: 1 };
    let mut offset = 0;
    for (line_no, line) in (1u32..).zip(text.split_inclusive('\n')) {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_marker = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        if is_marker || bare == "..." {
            docs.push(Document {
                text: &text[start..offset],
                start: start_pos,
            });
            // Keep content that follows the marker on the same line (`--- !tag` or `--- {a: 1}`).
            (start, start_pos) = if is_marker && bare != "---" {
                (
                    offset + 3,
                    Position {
                        line: line_no,
                        column: 4,
                    },
                )
            } else {
                (
                    offset + line.len(),
                    Position {
                        line: line_no + 1,
                        column: 1,
                    },
                )
            };
        }
        offset += line.len();
    }
    docs.push(Document {
        text: &text[start..],
        start: start_pos,
    });
    docs.retain(|doc| has_content(doc.text));
    docs
}

/// The documents of a YAML stream as text (see [`documents`]).
pub(crate) fn split_documents(text: &str) -> Vec<&str> {
    documents(text).into_iter().map(|d| d.text).collect()
}

fn has_content(doc: &str) -> bool {
    doc.lines().any(|line| {
        let t = line.trim();
        !t.is_empty() && !t.starts_with('#') && !t.starts_with('%')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(text: &str) -> Vec<Manifest> {
        entries(text)
            .into_iter()
            .map(|e| match e {
                Entry::Object(m) => m,
                Entry::Unreadable { position, message } => panic!("{position}: {message}"),
                Entry::NotAnObject { position } => panic!("{position}: {NOT_AN_OBJECT}"),
            })
            .collect()
    }

    #[test]
    fn splits_documents_and_drops_empty_ones() {
        let text = "---\n# only a comment\n---\na: 1\n---\n\n---\nb: 2\n...\n";
        assert_eq!(split_documents(text), vec!["a: 1\n", "b: 2\n"]);
        assert_eq!(split_documents("a: 1"), vec!["a: 1"]);
        assert_eq!(split_documents("--- {a: 1}\n"), vec![" {a: 1}\n"]);
        // A marker must start the line; indented dashes belong to a block scalar.
        assert_eq!(split_documents("a: |\n  ---\n  x\n").len(), 1);
    }

    #[test]
    fn positions_count_lines_of_the_whole_stream() {
        let text = "# header\n---\na: 1\n---\nkind: X\nspec:\n  items:\n    - x\n    - {y: 2}\n--- {z: 3}\n";
        let found = objects(text);
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].positions.root(), Position { line: 3, column: 1 });
        let second = &found[1].positions;
        assert_eq!(second.of("kind"), Position { line: 5, column: 1 });
        assert_eq!(second.of("spec.items"), Position { line: 7, column: 3 });
        assert_eq!(second.of("spec.items[1]"), Position { line: 9, column: 7 });
        assert_eq!(
            second.of("spec.items[1].y"),
            Position { line: 9, column: 8 }
        );
        // A field that is not there is found at its nearest ancestor.
        assert_eq!(
            second.of("spec.items[1].missing"),
            Position { line: 9, column: 7 }
        );
        assert_eq!(
            second.of("spec.other.deep"),
            Position { line: 6, column: 1 }
        );
        assert_eq!(second.of("status"), Position { line: 5, column: 1 });
        // Content after a marker on the same line keeps its columns.
        assert_eq!(
            found[2].positions.of("z"),
            Position {
                line: 10,
                column: 6
            }
        );
    }

    #[test]
    fn map_keys_are_found_in_both_notations() {
        let found = objects("metadata:\n  labels:\n    app.kubernetes.io/name: x\n");
        let at = Position { line: 3, column: 5 };
        assert_eq!(
            found[0]
                .positions
                .of("metadata.labels.app.kubernetes.io/name"),
            at
        );
        assert_eq!(
            found[0]
                .positions
                .of("metadata.labels[app.kubernetes.io/name]"),
            at
        );
    }

    #[test]
    fn lists_are_expanded_with_positions_of_their_items() {
        let text = "apiVersion: v1\nkind: List\nitems:\n  - kind: A\n    metadata: {name: a}\n  - kind: B\n    spec:\n      x: 1\n";
        let found = objects(text);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].value["kind"], "A");
        assert_eq!(found[0].positions.root(), Position { line: 4, column: 5 });
        assert_eq!(
            found[1].positions.of("spec.x"),
            Position { line: 8, column: 7 }
        );
        // Only a List with items is expanded.
        let found = objects("kind: List\nmetadata: {}\n");
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn values_keep_their_yaml_types() {
        let found =
            objects("a: 1\nb: -2\nc: 1.5\nd: true\ne: null\nf: '1'\ng: 18446744073709551615\n");
        assert_eq!(
            found[0].value,
            serde_json::json!({"a": 1, "b": -2, "c": 1.5, "d": true, "e": null, "f": "1", "g": 18446744073709551615u64})
        );
    }

    #[test]
    fn yaml_errors_have_positions_and_no_library_advice() {
        let found = entries("a: 1\n---\nkey: 1\nkey: 2\n---\nx: [unclosed\n---\n- 1\n");
        let problems: Vec<(Position, String)> = found
            .into_iter()
            .filter_map(|e| match e {
                Entry::Unreadable { position, message } => Some((position, message)),
                Entry::NotAnObject { position } => Some((position, NOT_AN_OBJECT.to_string())),
                Entry::Object(_) => None,
            })
            .collect();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(problems[0].0, Position { line: 4, column: 1 });
        assert!(
            problems[0]
                .1
                .starts_with("invalid YAML: duplicate mapping key `key`"),
            "{problems:?}"
        );
        assert!(!problems[0].1.contains("Options"), "{problems:?}");
        assert_eq!(problems[1].0.line, 6);
        assert!(problems[1].1.starts_with("invalid YAML: "), "{problems:?}");
        assert_eq!(
            problems[2],
            (Position { line: 8, column: 1 }, NOT_AN_OBJECT.to_string())
        );
    }
}
