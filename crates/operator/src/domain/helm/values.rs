//! The chart values of a release: its `spec.chart.valuesFrom` sources, merged in order, and
//! `spec.chart.values` merged over them last (the order and semantics of Flux's
//! helm-controller; docs/helm.md#values-from-configmaps-and-secrets).
//!
//! A source without a target path is a YAML map of values, merged deeply: a map merges into a
//! map key by key, anything else replaces what was there. A source with a target path is one
//! value, set as a string at that dotted path. Pure: the controller reads the sources; errors
//! name the source (kind, object and key) and a position, never the content, which may be a
//! Secret's.

use serde_json::{Map, Value};

/// The most bytes the merged values may take (as JSON), and any one source: a ConfigMap or
/// Secret holds at most 1 MiB, and Helm stores the values in its release Secret, which has the
/// same limit.
pub(crate) const MAX_VALUES_BYTES: usize = 1 << 20;

/// One source's content, as the controller read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    /// The source in the operator's words, e.g. `Secret "apps/db" key "values.yaml"`.
    pub(crate) what: String,
    /// The key's content.
    pub(crate) text: String,
    /// `targetPath`, when set.
    pub(crate) target_path: Option<String>,
}

/// Why the values could not be merged. Messages name sources and positions, never content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValuesError {
    /// A source is not valid YAML (the message names the source, line and column).
    #[error("{0}")]
    Syntax(String),
    /// A source without a target path is not a map of values.
    #[error("{what} is not a map of values (its top level must be a YAML mapping)")]
    NotAMap {
        /// The source.
        what: String,
    },
    /// A target path that cannot be used (admission refuses it; stored without admission).
    #[error("{what}: targetPath {path:?} {problem}")]
    Path {
        /// The source.
        what: String,
        /// The path as written.
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A source, or the merged values, exceed [`MAX_VALUES_BYTES`].
    #[error("{what} exceeds {MAX_VALUES_BYTES} bytes")]
    TooLarge {
        /// The source, or "the merged chart values".
        what: String,
    },
}

/// `sources` merged in order, then `inline` (`spec.chart.values`, a map) over them.
pub(crate) fn merge(sources: &[Source], inline: &Value) -> Result<Value, ValuesError> {
    let mut merged = Map::new();
    for source in sources {
        if source.text.len() > MAX_VALUES_BYTES {
            return Err(ValuesError::TooLarge {
                what: source.what.clone(),
            });
        }
        match &source.target_path {
            Some(path) => {
                let segments = split_path(path).map_err(|problem| ValuesError::Path {
                    what: source.what.clone(),
                    path: path.clone(),
                    problem,
                })?;
                set_path(&mut merged, &segments, Value::String(source.text.clone()));
            }
            None => deep_merge(&mut merged, parse_map(&source.what, &source.text)?),
        }
    }
    if let Value::Object(inline) = inline {
        deep_merge(&mut merged, inline.clone());
    }
    let merged = Value::Object(merged);
    if merged.to_string().len() > MAX_VALUES_BYTES {
        return Err(ValuesError::TooLarge {
            what: "the merged chart values".to_string(),
        });
    }
    Ok(merged)
}

/// The map of values in `text`: an empty document (or `null`) is an empty map.
fn parse_map(what: &str, text: &str) -> Result<Map<String, Value>, ValuesError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    // serde-saphyr bounds alias expansion and nesting by its default budget.
    match serde_saphyr::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(ValuesError::NotAMap {
            what: what.to_string(),
        }),
        Err(e) => Err(ValuesError::Syntax(
            omni_client::template::yaml_syntax_error(what, &e),
        )),
    }
}

/// `overlay` merged into `base`: maps key by key, any other value replacing what was there
/// (lists too, as Helm merges values files).
fn deep_merge(base: &mut Map<String, Value>, overlay: Map<String, Value>) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(into)), Value::Object(from)) => deep_merge(into, from),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// `value` set at `segments` below `base`: missing maps on the way are created, and a value on
/// the way that is not a map is replaced by one (the later source wins, as in a merge).
fn set_path(base: &mut Map<String, Value>, segments: &[String], value: Value) {
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut at = base;
    for segment in parents {
        let slot = at
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        let Value::Object(map) = slot else {
            unreachable!("the slot was made a map just above")
        };
        at = map;
    }
    at.insert(last.clone(), value);
}

/// The names of a dotted `targetPath` (`a.b.c`; `\.` is a dot inside a name), or what is
/// wrong with it (the message follows `targetPath "…"`).
pub(crate) fn split_path(path: &str) -> Result<Vec<String>, &'static str> {
    if path.trim().is_empty() {
        return Err("must not be blank");
    }
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                current.push('.');
                chars.next();
            }
            '.' => segments.push(std::mem::take(&mut current)),
            c if c.is_whitespace() || c.is_control() => {
                return Err("must not contain whitespace");
            }
            c => current.push(c),
        }
    }
    segments.push(current);
    if segments.iter().any(String::is_empty) {
        return Err("must not have an empty name between dots");
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source(what: &str, text: &str, target_path: Option<&str>) -> Source {
        Source {
            what: what.to_string(),
            text: text.to_string(),
            target_path: target_path.map(str::to_string),
        }
    }

    #[test]
    fn sources_merge_in_order_and_the_inline_values_win() {
        let sources = [
            source(
                "a",
                "image:\n  repository: web\n  tag: \"1\"\nreplicas: 1\nlist: [1, 2]\n",
                None,
            ),
            source("b", "image:\n  tag: \"2\"\nlist: [3]\nextra: true\n", None),
        ];
        let inline = json!({"replicas": 3, "image": {"pullPolicy": "Always"}});
        let merged = merge(&sources, &inline).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            merged,
            json!({
                "image": {"repository": "web", "tag": "2", "pullPolicy": "Always"},
                "replicas": 3,
                "list": [3],
                "extra": true,
            })
        );
    }

    #[test]
    fn a_target_path_sets_one_string_value_and_creates_the_maps_on_the_way() {
        let sources = [
            source("a", "db:\n  host: x\nauth: plain\n", None),
            source("token", "s3cr3t", Some("db.password")),
            source("dotted", "on", Some("annotations.example\\.com/flag")),
            source("over", "7", Some("auth.level")),
        ];
        let merged = merge(&sources, &json!({})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            merged,
            json!({
                "db": {"host": "x", "password": "s3cr3t"},
                "annotations": {"example.com/flag": "on"},
                "auth": {"level": "7"},
            })
        );
    }

    #[test]
    fn without_sources_the_inline_values_are_unchanged() {
        let inline = json!({"a": {"b": null, "c": [1, {"d": 2}]}});
        assert_eq!(merge(&[], &inline), Ok(inline));
    }

    #[test]
    fn an_empty_document_contributes_nothing() {
        let sources = [source("a", "  \n", None), source("b", "~\n", None)];
        assert_eq!(merge(&sources, &json!({"x": 1})), Ok(json!({"x": 1})));
    }

    #[test]
    fn errors_name_the_source_and_line_and_never_the_content() {
        let what = "Secret \"ns/db\" key \"values.yaml\"";
        let bad = [source(what, "password: hunter2\n  nested: [oops\n", None)];
        let err = merge(&bad, &json!({})).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("invalid YAML merged"));
        assert!(err.starts_with(what), "{err}");
        assert!(err.contains("line"), "{err}");
        assert!(!err.contains("hunter2") && !err.contains("oops"), "{err}");
        let scalar = [source(what, "hunter2", None)];
        let err = merge(&scalar, &json!({})).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "Secret \"ns/db\" key \"values.yaml\" is not a map of values (its top level must be a YAML mapping)"
            )
        );
    }

    #[test]
    fn the_merged_values_are_bounded() {
        let big = "x".repeat(MAX_VALUES_BYTES / 2 + 1);
        let sources = [source("a", &big, Some("a")), source("b", &big, Some("b"))];
        assert_eq!(
            merge(&sources, &json!({})),
            Err(ValuesError::TooLarge {
                what: "the merged chart values".into()
            })
        );
        let huge = [source("c", &"y".repeat(MAX_VALUES_BYTES + 1), Some("c"))];
        assert_eq!(
            merge(&huge, &json!({})),
            Err(ValuesError::TooLarge { what: "c".into() })
        );
    }

    #[test]
    fn target_paths_split_on_unescaped_dots() {
        assert_eq!(split_path("a.b"), Ok(vec!["a".into(), "b".into()]));
        assert_eq!(
            split_path("ingress.annotations.cert-manager\\.io/issuer"),
            Ok(vec![
                "ingress".into(),
                "annotations".into(),
                "cert-manager.io/issuer".into()
            ])
        );
        assert!(split_path("").is_err());
        assert!(split_path("a..b").is_err());
        assert!(split_path(".a").is_err());
        assert!(split_path("a.").is_err());
        assert!(split_path("a b").is_err());
    }
}
