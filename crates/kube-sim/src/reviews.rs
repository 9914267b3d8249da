//! TokenReview and SubjectAccessReview: the delegated authentication and authorization APIs
//! that servers such as an operator's metrics endpoint call to check a caller's bearer token
//! and then ask whether that user may do something.
//!
//! Both are create-only and never stored. As on the real API server:
//!
//! * a TokenReview echoes the request and answers `status.authenticated` and `status.user` for
//!   `spec.token`, authenticated by the same authenticator that guards kube-sim itself (an
//!   unknown token is `{"user": {}}`, not an error; an empty token is a 400);
//! * a SubjectAccessReview asks the configured authorizer about `spec.user`/`spec.groups`
//!   exactly as given (no implicit groups are added) and answers `status.allowed`; exactly one
//!   of `resourceAttributes`/`nonResourceAttributes` and at least one of user/groups is
//!   required (422 otherwise).
//!
//! Without an authenticator no token is known (`authenticated` stays unset); without an
//! authorizer everything is allowed, as with `AlwaysAllow`.

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::request::{Authenticator, Authorizer, RequestInfo, UserInfo};
use crate::server::{err_response, json_response};
use crate::store::Store;

const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";

/// The audience a token is reviewed for when the request names none: the API server's own
/// (`--api-audiences` defaults to the service-account issuer, which kubeadm sets to this).
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Who answers the reviews: the server's own authenticator and authorizer, and the RBAC
/// objects the authorizer reads.
pub(crate) struct Reviewers<'a> {
    pub(crate) authenticator: Option<&'a dyn Authenticator>,
    pub(crate) authorizer: Option<&'a dyn Authorizer>,
    pub(crate) store: &'a Store,
}

/// Answers one review from its request body.
type Answer = fn(&Value, &Reviewers<'_>) -> Result<Value, ApiError>;

/// Answers `group`/`resource` when it is a TokenReview or SubjectAccessReview request (the
/// request itself already passed authentication and authorization); `None` for anything else.
pub(crate) fn serve(
    group: &str,
    resource: &str,
    verb: &str,
    body: &Bytes,
    reviewers: &Reviewers<'_>,
) -> Option<Response> {
    let (kind, answer): (&str, Answer) = match (group, resource) {
        (AUTHENTICATION, "tokenreviews") => ("TokenReview", token_review),
        (AUTHORIZATION, "subjectaccessreviews") => ("SubjectAccessReview", subject_access_review),
        _ => return None,
    };
    if verb != "create" {
        return Some(err_response(&ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )));
    }
    let review = match parse(body, kind) {
        Ok(review) => review,
        Err(e) => return Some(err_response(&e)),
    };
    Some(match answer(&review, reviewers) {
        Ok(answered) => json_response(201, &answered),
        Err(e) => err_response(&e),
    })
}

/// The review in the request body. Decoding errors never quote the body: a TokenReview's body
/// is a credential.
fn parse(body: &Bytes, kind: &str) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(ApiError::bad_request(&format!(
            "the body of the request could not be decoded as a JSON {kind}"
        ))),
    }
}

/// The request echoed back with `status` set, as the real server answers reviews.
fn answered(review: &Value, kind: &str, api_group: &str, status: Value) -> Value {
    let mut metadata = review
        .get("metadata")
        .filter(|m| m.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    metadata["creationTimestamp"] = Value::Null;
    json!({
        "kind": kind,
        "apiVersion": format!("{api_group}/v1"),
        "metadata": metadata,
        "spec": review.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": status,
    })
}

fn token_review(review: &Value, reviewers: &Reviewers<'_>) -> Result<Value, ApiError> {
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences: Vec<Value> = match spec.get("audiences").and_then(Value::as_array) {
        Some(requested) if !requested.is_empty() => requested.clone(),
        _ => vec![json!(API_AUDIENCE)],
    };
    let user = reviewers
        .authenticator
        .and_then(|authenticator| authenticate_token(authenticator, token));
    let status = match user {
        Some(user) => json!({
            "authenticated": true,
            "user": {"username": user.name, "groups": user.groups},
            "audiences": audiences,
        }),
        None => json!({"user": {}}),
    };
    Ok(answered(review, "TokenReview", AUTHENTICATION, status))
}

/// The user `token` authenticates as, asked exactly as for a request carrying it (and only
/// it: no client certificate, and the anonymous user does not count).
fn authenticate_token(authenticator: &dyn Authenticator, token: &str) -> Option<UserInfo> {
    let value = axum::http::HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    let mut headers = HeaderMap::new();
    headers.insert(axum::http::header::AUTHORIZATION, value);
    authenticator
        .authenticate(&headers, None)
        .filter(|user| user.name != crate::auth::ANONYMOUS_USER)
}

fn subject_access_review(review: &Value, reviewers: &Reviewers<'_>) -> Result<Value, ApiError> {
    let invalid = |field: &str, message: String| {
        ApiError::invalid(
            AUTHORIZATION,
            "SubjectAccessReview",
            "",
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message,
                field: field.into(),
            }],
        )
    };
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|groups| {
            groups
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        return Err(invalid(
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified".into(),
        ));
    }
    let attrs = crate::rbac::review_attributes(review)
        .map_err(|e| invalid("spec.resourceAttributes", e.to_string()))?;
    let info = RequestInfo::from(attrs);
    let subject = UserInfo {
        name: user.to_owned(),
        groups,
    };
    // RBAC has no opinion on a request it does not allow: a denial carries no reason.
    let allowed = match reviewers.authorizer {
        Some(authorizer) => authorizer
            .authorize(&subject, &info, reviewers.store)
            .is_ok(),
        None => true,
    };
    Ok(answered(
        review,
        "SubjectAccessReview",
        AUTHORIZATION,
        json!({"allowed": allowed}),
    ))
}
