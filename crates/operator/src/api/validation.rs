//! Field-level validation results shaped like Kubernetes' `field.Error`, so that webhook
//! rejections, controller conditions and `omni-operator validate` all read the same.

use std::fmt;

/// The outcome of validating one object: errors reject it, warnings are returned to the user
/// (as admission warnings or CLI output) without rejecting it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validation {
    /// Problems that make the object invalid, in the order they were found.
    pub errors: Vec<FieldError>,
    /// Advice that does not block the object.
    pub warnings: Vec<String>,
}

impl Validation {
    /// An empty result.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when there are no errors (warnings do not count).
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }

    /// Records an error.
    pub fn push(&mut self, error: FieldError) {
        self.errors.push(error);
    }

    /// Records a warning.
    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Appends everything from `other`.
    pub fn extend(&mut self, other: Validation) {
        self.errors.extend(other.errors);
        self.warnings.extend(other.warnings);
    }

    /// All errors joined the way the Kubernetes API server joins an aggregate: a single error
    /// alone, several as `[a, b]`. Empty when valid.
    pub fn error_summary(&self) -> String {
        match self.errors.as_slice() {
            [] => String::new(),
            [one] => one.to_string(),
            many => {
                let parts: Vec<String> = many.iter().map(ToString::to_string).collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
}

/// One invalid field: the path (`spec.ttl`, `spec.machines[2]`), what kind of problem, and a
/// human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Field path in Kubernetes notation, e.g. `spec.patches[0]`.
    pub path: String,
    /// The category of the problem, which also carries the offending value where relevant.
    pub kind: FieldErrorKind,
    /// Explanation; for `NotSupported` this is usually empty because the supported values say it all.
    pub detail: String,
}

/// The Kubernetes field error types this API uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A required value is missing or blank.
    Required,
    /// The value is malformed or out of range.
    Invalid {
        /// The offending value as the user wrote it.
        value: String,
    },
    /// The value appears more than once in a list that must be unique.
    Duplicate {
        /// The repeated value.
        value: String,
    },
    /// The value is not one of an enumerated set.
    NotSupported {
        /// The offending value.
        value: String,
        /// The accepted values, in documentation order.
        supported: Vec<String>,
    },
    /// The change or value is not allowed in this context.
    Forbidden,
}

impl FieldErrorKind {
    /// The Kubernetes `CauseType` string (`FieldValueRequired`, ...), used in admission responses.
    pub(crate) fn cause_type(&self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid { .. } => "FieldValueInvalid",
            FieldErrorKind::Duplicate { .. } => "FieldValueDuplicate",
            FieldErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
        }
    }
}

impl FieldError {
    /// `path: Required value: detail`.
    pub fn required(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::Required,
            detail: detail.into(),
        }
    }

    /// `path: Invalid value: "value": detail`.
    pub fn invalid(
        path: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::Invalid {
                value: value.into(),
            },
            detail: detail.into(),
        }
    }

    /// `path: Duplicate value: "value"`.
    pub fn duplicate(path: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::Duplicate {
                value: value.into(),
            },
            detail: String::new(),
        }
    }

    /// `path: Unsupported value: "value": supported values: "a", "b"`.
    pub(crate) fn not_supported(
        path: impl Into<String>,
        value: impl Into<String>,
        supported: &[&str],
    ) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::NotSupported {
                value: value.into(),
                supported: supported.iter().map(|s| (*s).to_string()).collect(),
            },
            detail: String::new(),
        }
    }

    /// `path: Forbidden: detail`.
    pub fn forbidden(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.into(),
        }
    }

    /// The part after `path: `, as Kubernetes' `ErrorBody()` renders it.
    pub fn body(&self) -> String {
        let mut out = match &self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Forbidden => "Forbidden".to_string(),
            FieldErrorKind::Invalid { value } => format!("Invalid value: {}", quote(value)),
            FieldErrorKind::Duplicate { value } => format!("Duplicate value: {}", quote(value)),
            FieldErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
                format!(
                    "Unsupported value: {}: supported values: {}",
                    quote(value),
                    list.join(", ")
                )
            }
        };
        if !self.detail.is_empty() {
            out.push_str(": ");
            out.push_str(&self.detail);
        }
        out
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.body())
    }
}

pub use omni_client::duration::quote;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_kubernetes_field_errors() {
        assert_eq!(
            FieldError::invalid("spec.ttl", "-1h", "ttl must be greater than zero").to_string(),
            r#"spec.ttl: Invalid value: "-1h": ttl must be greater than zero"#
        );
        assert_eq!(
            FieldError::required("spec.x", "msg").to_string(),
            "spec.x: Required value: msg"
        );
        assert_eq!(
            FieldError::duplicate("spec.x", "v").to_string(),
            r#"spec.x: Duplicate value: "v""#
        );
        assert_eq!(
            FieldError::not_supported("spec.x", "v", &["Delete", "Orphan"]).to_string(),
            r#"spec.x: Unsupported value: "v": supported values: "Delete", "Orphan""#
        );
        assert_eq!(
            FieldError::forbidden("spec.x", "msg").to_string(),
            "spec.x: Forbidden: msg"
        );
        assert_eq!(
            FieldError::required("spec.x", "").to_string(),
            "spec.x: Required value"
        );
    }

    #[test]
    fn quoting_escapes_like_go() {
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quote("∞"), "\"∞\"");
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
    }

    #[test]
    fn summary_joins_several_errors_in_brackets() {
        let mut v = Validation::new();
        assert!(v.is_valid());
        assert_eq!(v.error_summary(), "");
        v.push(FieldError::required("spec.a", "a"));
        assert_eq!(v.error_summary(), "spec.a: Required value: a");
        v.push(FieldError::forbidden("spec.b", "b"));
        assert!(!v.is_valid());
        assert_eq!(
            v.error_summary(),
            "[spec.a: Required value: a, spec.b: Forbidden: b]"
        );
        v.warn("careful");
        assert_eq!(v.warnings, vec!["careful".to_string()]);
    }
}
