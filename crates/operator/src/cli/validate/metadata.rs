//! The `metadata` rules the Kubernetes API server applies to every custom resource before
//! its schema or any webhook: the name is a lowercase RFC 1123 subdomain (or `generateName`
//! one once a suffix is added), the namespace an RFC 1123 label, label keys qualified names
//! and label values at most 63 characters of a restricted set, annotation keys qualified
//! names. Messages are the API server's, so a problem reads the same here as from
//! `kubectl apply`.

use serde_json::Value;

use crate::api::validation::FieldError;

const SUBDOMAIN_MAX: usize = 253;
const LABEL_MAX: usize = 63;
const SUBDOMAIN_REGEX: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const LABEL_REGEX: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const KEY_NAME_REGEX: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

/// Every problem of `object`'s `metadata`, each with the path of the field it is about (the
/// API server names only `metadata.labels` for a bad label; the position should still be the
/// label's line).
pub(super) fn check(object: &Value) -> Vec<(FieldError, String)> {
    let mut out: Vec<(FieldError, String)> = Vec::new();
    let mut push = |error: FieldError, at: Option<String>| {
        let at = at.unwrap_or_else(|| error.path.clone());
        out.push((error, at));
    };
    let meta = object.get("metadata").unwrap_or(&Value::Null);
    let text = |field: &str| meta.get(field).and_then(Value::as_str).unwrap_or_default();
    let generate_name = text("generateName");
    if !generate_name.is_empty() {
        for message in subdomain_problems(&mask_trailing_dash(generate_name)) {
            push(
                FieldError::invalid("metadata.generateName", generate_name, message),
                None,
            );
        }
    }
    let name = text("name");
    if name.is_empty() {
        // `kubectl create` accepts generateName alone; `apply` needs a name, but that is the
        // client's rule, not the API server's.
        if generate_name.is_empty() {
            push(
                FieldError::required("metadata.name", "name or generateName is required"),
                None,
            );
        }
    } else {
        for message in subdomain_problems(name) {
            push(FieldError::invalid("metadata.name", name, message), None);
        }
    }
    let namespace = text("namespace");
    if !namespace.is_empty() {
        for message in label_problems(namespace) {
            push(
                FieldError::invalid("metadata.namespace", namespace, message),
                None,
            );
        }
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (key, value) in labels {
            let at = || Some(format!("metadata.labels[{key}]"));
            for message in qualified_name_problems(key) {
                push(FieldError::invalid("metadata.labels", key, message), at());
            }
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            for message in label_value_problems(&value) {
                push(
                    FieldError::invalid("metadata.labels", &value, message),
                    at(),
                );
            }
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        for key in annotations.keys() {
            // Annotation keys are qualified names in any case.
            for message in qualified_name_problems(&key.to_ascii_lowercase()) {
                push(
                    FieldError::invalid("metadata.annotations", key, message),
                    Some(format!("metadata.annotations[{key}]")),
                );
            }
        }
    }
    out
}

/// What the API server does to a `generateName` before checking it: a trailing dash is fine
/// because a random suffix follows.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        format!("{}a", &name[..name.len() - 2])
    } else {
        name.to_string()
    }
}

fn regex_message(what: &str, regex: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{what} (e.g. {}regex used for validation is '{regex}')",
        examples.join("or ")
    )
}

fn is_label(s: &str) -> bool {
    let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.starts_with(edge) && s.ends_with(edge) && s.chars().all(|c| edge(c) || c == '-')
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

fn subdomain_problems(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > SUBDOMAIN_MAX {
        out.push(format!("must be no more than {SUBDOMAIN_MAX} characters"));
    }
    if !is_subdomain(s) {
        out.push(regex_message(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            SUBDOMAIN_REGEX,
            &["example.com"],
        ));
    }
    out
}

fn label_problems(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > LABEL_MAX {
        out.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    if !is_label(s) {
        out.push(if is_subdomain(s) {
            "must not contain dots".to_string()
        } else {
            regex_message(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                LABEL_REGEX,
                &["my-name", "123-abc"],
            )
        });
    }
    out
}

fn is_key_name(s: &str) -> bool {
    let edge = |c: char| c.is_ascii_alphanumeric();
    s.starts_with(edge)
        && s.ends_with(edge)
        && s.chars()
            .all(|c| edge(c) || c == '-' || c == '_' || c == '.')
}

const KEY_NAME_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn qualified_name_problems(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let mut out = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > SUBDOMAIN_MAX {
                    out.push(format!(
                        "prefix part must be no more than {SUBDOMAIN_MAX} bytes"
                    ));
                }
                if !is_subdomain(prefix) {
                    out.push(format!(
                        "prefix part {}",
                        regex_message(
                            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                            SUBDOMAIN_REGEX,
                            &["example.com"],
                        )
                    ));
                }
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_message(
                    KEY_NAME_MESSAGE,
                    KEY_NAME_REGEX,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_MAX {
        out.push(format!("name part must be no more than {LABEL_MAX} bytes"));
    }
    if !is_key_name(name) {
        out.push(format!(
            "name part {}",
            regex_message(
                KEY_NAME_MESSAGE,
                KEY_NAME_REGEX,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    out
}

fn label_value_problems(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    if value.len() > LABEL_MAX {
        out.push(format!("must be no more than {LABEL_MAX} bytes"));
    }
    if !value.is_empty() && !is_key_name(value) {
        out.push(regex_message(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({KEY_NAME_REGEX})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(meta: Value) -> Vec<String> {
        check(&serde_json::json!({ "metadata": meta }))
            .iter()
            .map(|(error, _)| error.to_string())
            .collect()
    }

    #[test]
    fn names_are_rfc_1123_subdomains_as_the_api_server_words_it() {
        assert!(problems(serde_json::json!({"name": "edge-01.example"})).is_empty());
        assert_eq!(
            problems(serde_json::json!({"name": "Edge_01"})),
            vec![
                r#"metadata.name: Invalid value: "Edge_01": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
            ]
        );
        let long = "a".repeat(254);
        assert_eq!(
            problems(serde_json::json!({ "name": long })),
            vec![format!(
                "metadata.name: Invalid value: \"{long}\": must be no more than 253 characters"
            )]
        );
        assert_eq!(
            problems(serde_json::json!({})),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert!(problems(serde_json::json!({"generateName": "edge-"})).is_empty());
        assert_eq!(
            problems(serde_json::json!({"generateName": "Edge-"})).len(),
            1
        );
    }

    #[test]
    fn namespaces_are_labels() {
        assert!(problems(serde_json::json!({"name": "a", "namespace": "team-a"})).is_empty());
        assert_eq!(
            problems(serde_json::json!({"name": "a", "namespace": "team.a"})),
            vec![r#"metadata.namespace: Invalid value: "team.a": must not contain dots"#]
        );
        assert_eq!(
            problems(serde_json::json!({"name": "a", "namespace": "Team"})),
            vec![
                r#"metadata.namespace: Invalid value: "Team": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"#
            ]
        );
    }

    #[test]
    fn labels_and_annotations() {
        let ok = serde_json::json!({"name": "a", "labels": {"app.kubernetes.io/name": "x", "tier": ""}, "annotations": {"Example.com/Note": "anything at all"}});
        assert!(problems(ok).is_empty());
        let bad =
            problems(serde_json::json!({"name": "a", "labels": {"a/b/c": "x", "ok": "-bad"}}));
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad[0].starts_with(
                r#"metadata.labels: Invalid value: "a/b/c": a valid label key must consist of"#
            ),
            "{bad:?}"
        );
        assert!(
            bad[1].starts_with(
                r#"metadata.labels: Invalid value: "-bad": a valid label must be an empty string"#
            ),
            "{bad:?}"
        );
        let bad = problems(serde_json::json!({"name": "a", "annotations": {"/x": ""}}));
        assert_eq!(
            bad,
            vec![r#"metadata.annotations: Invalid value: "/x": prefix part must be non-empty"#]
        );
    }
}
