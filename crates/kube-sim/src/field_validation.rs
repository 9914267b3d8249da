//! Server-side field validation: the `fieldValidation` query parameter of create, update and
//! patch. The real server decodes the body strictly and collects every unknown field (for
//! custom resources: every field its schema prunes; for all kinds: unknown `metadata` fields)
//! and every duplicate JSON key, then
//! - `Strict` (kubectl's default `--validate=strict`) refuses the request with 400 BadRequest
//!   `… strict decoding error: unknown field "spec.values", duplicate field "spec.a"`;
//! - `Warn` (the default when the parameter is absent) stores the pruned object and returns
//!   each problem as a `Warning` header;
//! - `Ignore` prunes silently.
//!
//! Built-in kinds are stored without a schema, so only their `metadata` is checked.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::{ApiError, Cause};

/// What to do with unknown and duplicate fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Directive {
    /// Drop them silently.
    Ignore,
    /// Drop them and warn.
    Warn,
    /// Refuse the request.
    Strict,
}

impl Directive {
    /// The request's directive: `Warn` when absent or empty, 422 on the request's options
    /// kind (e.g. `CreateOptions`) for anything but `Ignore`, `Warn` and `Strict`.
    pub(crate) fn from_query(
        q: &HashMap<String, String>,
        options_kind: &str,
    ) -> Result<Self, ApiError> {
        match q.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::invalid(
                "meta.k8s.io",
                options_kind,
                "",
                vec![Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!(
                        "Unsupported value: {other:?}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
                    ),
                    field: "fieldValidation".into(),
                }],
            )),
        }
    }
}

/// The fields of `ObjectMeta` a client may send; anything else under `metadata` is unknown.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Drops unknown `metadata` fields (decoding into `ObjectMeta` has nowhere to put them) and
/// returns their paths.
pub(crate) fn prune_metadata(obj: &mut Value) -> Vec<String> {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Vec::new();
    };
    let unknown: Vec<String> = meta
        .keys()
        .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for key in &unknown {
        meta.remove(key);
    }
    unknown
        .into_iter()
        .map(|k| format!("metadata.{k}"))
        .collect()
}

/// Paths of the keys that occur twice in one object of a JSON body (`spec.a`,
/// `spec.items[1].name`); empty for bodies that are not JSON (they fail decoding elsewhere).
pub(crate) fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let found = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(body);
    let walk = Walk {
        path: String::new(),
        found: &found,
    };
    if walk.deserialize(&mut de).is_err() {
        return Vec::new();
    }
    found.into_inner()
}

/// Walks a JSON document recording repeated keys.
struct Walk<'a> {
    path: String,
    found: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) {
                self.found.borrow_mut().push(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                found: self.found,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Walk {
                path: format!("{}[{i}]", self.path),
                found: self.found,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }
}

/// The problems found while decoding one request, in the server's order: duplicates (found
/// while parsing) first, then unknown fields.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) duplicate: Vec<String>,
    pub(crate) unknown: Vec<String>,
}

impl Findings {
    fn messages(&self) -> Vec<String> {
        let duplicate = self
            .duplicate
            .iter()
            .map(|p| format!("duplicate field \"{p}\""));
        let unknown = self
            .unknown
            .iter()
            .map(|p| format!("unknown field \"{p}\""));
        duplicate.chain(unknown).collect()
    }

    /// Applies the directive: `Err` under `Strict`, the warnings to send under `Warn`.
    /// `handled_as` is the prefix the real server puts before the decoding error of a create
    /// or update (`Kind in version "v1" cannot be handled as a Kind: `); patches have none.
    pub(crate) fn enforce(
        &self,
        directive: Directive,
        handled_as: Option<(&str, &str)>,
    ) -> Result<Vec<String>, ApiError> {
        let messages = self.messages();
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        match directive {
            Directive::Ignore => Ok(Vec::new()),
            Directive::Warn => Ok(messages),
            Directive::Strict => {
                let prefix = handled_as
                    .map(|(kind, version)| {
                        format!("{kind} in version \"{version}\" cannot be handled as a {kind}: ")
                    })
                    .unwrap_or_default();
                Err(ApiError::bad_request(&format!(
                    "{prefix}strict decoding error: {}",
                    messages.join(", ")
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicate_keys_are_found_with_their_paths() {
        let body = br#"{"spec": {"a": 1, "a": 2, "items": [{"n": 1}, {"n": 1, "n": 2}]}}"#;
        assert_eq!(duplicate_fields(body), vec!["spec.a", "spec.items[1].n"]);
        assert!(duplicate_fields(br#"{"a": {"a": 1}}"#).is_empty());
    }

    #[test]
    fn unknown_metadata_fields_are_pruned_and_reported() {
        let mut obj = json!({"metadata": {"name": "x", "labelz": {"a": "b"}}});
        assert_eq!(prune_metadata(&mut obj), vec!["metadata.labelz"]);
        assert_eq!(obj, json!({"metadata": {"name": "x"}}));
    }

    #[test]
    fn strict_refuses_in_the_servers_words_and_warn_warns() {
        let findings = Findings {
            duplicate: vec!["spec.a".into()],
            unknown: vec!["spec.values".into()],
        };
        let err = findings
            .enforce(Directive::Strict, Some(("OmniHelmRelease", "v1alpha1")))
            .unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "OmniHelmRelease in version \"v1alpha1\" cannot be handled as a OmniHelmRelease: \
             strict decoding error: duplicate field \"spec.a\", unknown field \"spec.values\""
        );
        assert_eq!(
            findings.enforce(Directive::Warn, None).unwrap(),
            vec![
                "duplicate field \"spec.a\"".to_owned(),
                "unknown field \"spec.values\"".to_owned()
            ]
        );
        assert!(
            findings
                .enforce(Directive::Ignore, None)
                .unwrap()
                .is_empty()
        );
    }
}
