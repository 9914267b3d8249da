//! `metadata` validation of every write, as the API server's `ValidateObjectMeta` does it: the
//! name (on create: a DNS-1123 subdomain for most kinds, a label for Namespaces, a DNS-1035
//! label for Services, a path segment for RBAC objects), label keys and values, annotation keys
//! and their total size, finalizer names, and no new finalizer on an object being deleted.
//! Causes are worded like the API server's.

use serde_json::Value;

use crate::error::Cause;
use crate::store::ResourceType;

const DNS1123_LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
/// The finalizers the API server itself understands; any other must be a qualified name.
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];
/// The total size of all annotations, keys and values.
const ANNOTATIONS_MAX: usize = 256 * 1024;

fn full_match(pattern: &str, s: &str) -> bool {
    crate::patterns::compiled(&format!("^(?:{pattern})$")).is_some_and(|re| re.is_match(s))
}

/// `msg (e.g. 'a',  or 'b', regex used for validation is 'fmt')`, as apimachinery's
/// `RegexError` words it (two spaces before each further example).
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let shown: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
    format!(
        "{msg} (e.g. {}, regex used for validation is '{fmt}')",
        shown.join(",  or ")
    )
}

fn subdomain_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 253 {
        errors.push("must be no more than 253 characters".to_owned());
    }
    if !full_match(DNS1123_SUBDOMAIN, s) {
        errors.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN,
            &["example.com"],
        ));
    }
    errors
}

fn label_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !full_match(DNS1123_LABEL, s) {
        errors.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL,
            &["my-name", "123-abc"],
        ));
    }
    errors
}

fn dns1035_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !full_match(DNS1035_LABEL, s) {
        errors.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start \
             with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL,
            &["my-name", "abc-123"],
        ));
    }
    errors
}

fn path_segment_errors(s: &str) -> Vec<String> {
    match s {
        "." | ".." => vec![format!("may not be '{s}'")],
        _ => ["/", "%"]
            .iter()
            .filter(|bad| s.contains(**bad))
            .map(|bad| format!("may not contain '{bad}'"))
            .collect(),
    }
}

/// apimachinery's `IsQualifiedName`, with `what` naming the whole (`a qualified name`, or for
/// label keys `a valid label key`).
fn qualified_name_errors(s: &str, what: &str) -> Vec<String> {
    let name_rule = regex_error(
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with \
         an alphanumeric character",
        QUALIFIED_NAME,
        &["MyName", "my.name", "123-abc"],
    );
    let parts: Vec<&str> = s.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return vec![format!(
                "{what} {name_rule} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')"
            )];
        }
    };
    let mut errors = Vec::new();
    match prefix {
        Some("") => errors.push("prefix part must be non-empty".to_owned()),
        Some(p) => errors.extend(
            subdomain_errors(p)
                .into_iter()
                .map(|e| format!("prefix part {e}")),
        ),
        None => {}
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_owned());
    }
    if !name.is_empty() && !full_match(QUALIFIED_NAME, name) {
        errors.push(format!("name part {name_rule}"));
    }
    errors
}

fn label_value_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !full_match(LABEL_VALUE, s) {
        errors.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value:?}: {detail}"),
        field: field.into(),
    }
}

/// What is wrong with the name of a new object of type `t`.
fn name_causes(t: &ResourceType, name: &str) -> Vec<Cause> {
    let errors = match (t.group.as_str(), t.plural.as_str()) {
        ("", "namespaces") => label_errors(name),
        ("", "services") => dns1035_errors(name),
        ("rbac.authorization.k8s.io", _) => path_segment_errors(name),
        _ => subdomain_errors(name),
    };
    errors
        .iter()
        .map(|e| invalid("metadata.name", name, e))
        .collect()
}

fn string_map<'a>(meta: &'a Value, key: &str) -> Vec<(&'a String, &'a Value)> {
    let mut entries: Vec<(&String, &Value)> = meta
        .get(key)
        .and_then(Value::as_object)
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    // Go walks a map in no particular order; sorted keeps the causes stable.
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

/// The causes of `obj`'s metadata (a create when `old` is `None`); empty when it is valid.
pub(crate) fn validate(t: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let Some(meta) = obj.get("metadata") else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    if old.is_none()
        && let Some(name) = meta.get("name").and_then(Value::as_str)
        && !name.is_empty()
    {
        causes.extend(name_causes(t, name));
    }
    for (key, value) in string_map(meta, "labels") {
        for e in qualified_name_errors(key, "a valid label key") {
            causes.push(invalid("metadata.labels", key, &e));
        }
        let value = value.as_str().unwrap_or_default();
        for e in label_value_errors(value) {
            causes.push(invalid("metadata.labels", value, &e));
        }
    }
    let mut size = 0;
    for (key, value) in string_map(meta, "annotations") {
        for e in qualified_name_errors(&key.to_lowercase(), "a qualified name") {
            causes.push(invalid("metadata.annotations", key, &e));
        }
        size += key.len() + value.as_str().map_or(0, str::len);
    }
    if size > ANNOTATIONS_MAX {
        causes.push(Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: may not be more than {ANNOTATIONS_MAX} bytes"),
            field: "metadata.annotations".into(),
        });
    }
    let finalizers: Vec<&str> = meta
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for finalizer in &finalizers {
        if STANDARD_FINALIZERS.contains(finalizer) {
            continue;
        }
        for e in qualified_name_errors(finalizer, "a qualified name") {
            causes.push(invalid("metadata.finalizers", finalizer, &e));
        }
    }
    if let Some(old) = old
        && old.pointer("/metadata/deletionTimestamp").is_some()
    {
        let before: Vec<&str> = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|f| f.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let added: Vec<String> = finalizers
            .iter()
            .filter(|f| !before.contains(f))
            .map(|f| format!("{f:?}"))
            .collect();
        if !added.is_empty() {
            // The API server checks this twice (metadata and the registry's update checks), so
            // clients see the cause twice and the message once.
            let cause = Cause {
                reason: "FieldValueForbidden".into(),
                message: format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, \
                     found new finalizers []string{{{}}}",
                    added.join(", ")
                ),
                field: "metadata.finalizers".into(),
            };
            causes.push(cause.clone());
            causes.push(cause);
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        assert!(qualified_name_errors("example.com/my-finalizer", "a qualified name").is_empty());
        assert!(qualified_name_errors("team", "a valid label key").is_empty());
        assert_eq!(
            qualified_name_errors("a/b/c", "a valid label key").len(),
            1,
            "too many parts"
        );
        assert!(
            qualified_name_errors("Bad_Prefix/x", "a qualified name")[0]
                .starts_with("prefix part a lowercase RFC 1123 subdomain")
        );
        assert!(
            qualified_name_errors("not a finalizer", "a qualified name")[0]
                .starts_with("name part must consist")
        );
    }

    #[test]
    fn names_by_kind() {
        let t = |group: &str, plural: &str| ResourceType::new(group, "v1", plural, "K", true);
        assert!(name_causes(&t("omni.texashpc.com", "omniclusters"), "edge.sample").is_empty());
        assert_eq!(
            name_causes(&t("omni.texashpc.com", "omniclusters"), "Bad_Name").len(),
            1
        );
        assert_eq!(name_causes(&t("", "namespaces"), "a.b").len(), 1);
        assert!(name_causes(&t("rbac.authorization.k8s.io", "roles"), "system:x").is_empty());
    }
}
