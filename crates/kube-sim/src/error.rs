//! API errors rendered as `metav1.Status` objects, as the real API server does.

use serde_json::{Value, json};

/// One field-level cause of an Invalid error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// Cause type, e.g. `FieldValueRequired`.
    pub reason: String,
    /// Human-readable message, e.g. `Required value`.
    pub message: String,
    /// Field path, e.g. `spec.x`.
    pub field: String,
}

/// A failed API request, carrying everything a `Status` needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details`, boxed to keep `Result<_, ApiError>` small.
    pub details: Option<Box<Details>>,
}

/// The `details` of a Status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    /// `details.name`.
    pub name: String,
    /// `details.group`.
    pub group: String,
    /// `details.kind` (the resource for most errors, the Kind for Invalid).
    pub kind: String,
    /// `details.causes`.
    pub causes: Vec<Cause>,
}

fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl ApiError {
    fn new(code: u16, reason: &str, message: String) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message,
            details: None,
        }
    }

    fn details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details = Some(Box::new(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes: Vec::new(),
        }));
        self
    }

    /// 404: `<resource>.<group> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .details(group, resource, name)
    }

    /// 409: `<resource>.<group> "<name>" already exists`.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .details(group, resource, name)
    }

    /// 409 optimistic-concurrency conflict with the API server's wording.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .details(group, resource, name)
    }

    /// 409 for a stale resourceVersion.
    pub fn modified(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422: `<Kind>.<group> "<name>" is invalid: <field>: <message>, ...`. The message lists
    /// each distinct error once (the causes keep repeats), as the API server's aggregate does.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let mut list: Vec<String> = Vec::new();
        for c in &causes {
            let line = format!("{}: {}", c.field, c.message);
            if !list.contains(&line) {
                list.push(line);
            }
        }
        let text = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {text}", qualified(group, kind)),
        )
        .details(group, kind, name);
        if let Some(d) = e.details.as_mut() {
            d.causes = causes;
        }
        e
    }

    /// 403 Forbidden with a full message.
    pub fn forbidden(group: &str, resource: &str, name: &str, message: String) -> Self {
        Self::new(403, "Forbidden", message).details(group, resource, name)
    }

    /// 410 Expired (watch from a too-old resourceVersion).
    pub fn gone(message: &str) -> Self {
        Self::new(410, "Expired", message.to_string())
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: &str) -> Self {
        Self::new(405, "MethodNotAllowed", message.to_string())
    }

    /// 400 BadRequest.
    pub fn bad_request(message: &str) -> Self {
        Self::new(400, "BadRequest", message.to_string())
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".to_string())
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {content_type}"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
    }

    /// An arbitrary code, used by fault-injection hooks; the reason follows the code.
    pub fn with_code(code: u16, message: &str) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, message.to_string())
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            // Empty fields are omitted, as Go's `omitempty` does (an apply conflict's details
            // hold only its causes).
            for (key, value) in [("name", &d.name), ("group", &d.group), ("kind", &d.kind)] {
                if !value.is_empty() {
                    details.insert(key.into(), json!(value));
                }
            }
            if !d.causes.is_empty() {
                let causes: Vec<Value> = d
                    .causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                details.insert("causes".into(), Value::Array(causes));
            }
            status["details"] = Value::Object(details);
        }
        status
    }
}
