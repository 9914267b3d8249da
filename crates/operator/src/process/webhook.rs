//! Validating admission webhook server.
//!
//! One path per kind (`/validate-omni-texashpc-com-v1alpha1-<kind lowercase>`) receives an
//! `admission.k8s.io/v1` AdmissionReview and answers with the verdict of [`crate::api`]'s
//! validation. The decision itself is the pure function [`review`]; `router` exposes it over
//! plain HTTP and [`serve`] over HTTPS with a serving certificate that is reloaded when the files
//! on disk change (cert-manager rotation).
//!
//! Unlike the original operator, updates that do not touch anything but `metadata` and `status`
//! (finalizer, label and annotation edits) and updates of objects being deleted are always
//! allowed, so an object that became invalid under newer rules can still be released.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status};
use serde_json::Value;
use tokio::net::TcpListener;

use crate::api::{self, ValidateError, Validation};
use crate::process::tls::{self, CertFiles, TlsError};

/// Every webhook path is this prefix followed by the lowercase kind.
pub(crate) const PATH_PREFIX: &str = "/validate-omni-texashpc-com-v1alpha1-";

/// Largest request body accepted. An AdmissionReview carries the object and the old object,
/// each of which may approach the API server's 1.5 MiB object limit.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// How long one request may take from its headers to the answer, body upload included; a
/// client trickling its body byte by byte is cut off (408) instead of holding a task.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The webhook path of `kind` (e.g. `OmniCluster` → `/validate-omni-texashpc-com-v1alpha1-omnicluster`).
pub fn path_for(kind: &str) -> String {
    format!("{PATH_PREFIX}{}", kind.to_ascii_lowercase())
}

/// The kind served at path segment `segment` (the lowercase kind, with or without
/// `PATH_PREFIX`), if any.
pub fn kind_for_segment(segment: &str) -> Option<&'static str> {
    let segment = segment.strip_prefix(PATH_PREFIX).unwrap_or(segment);
    api::KINDS
        .iter()
        .copied()
        .find(|kind| kind.eq_ignore_ascii_case(segment))
}

/// Where and how the HTTPS server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Listen address (default `0.0.0.0:9443`).
    pub bind: SocketAddr,
    /// Directory holding the serving certificate and key (a mounted TLS Secret).
    pub cert_dir: PathBuf,
    /// Certificate file name inside `cert_dir` (default `tls.crt`).
    pub cert_name: String,
    /// Key file name inside `cert_dir` (default `tls.key`).
    pub key_name: String,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([0, 0, 0, 0], 9443)),
            cert_dir: PathBuf::from("/tmp/k8s-webhook-server/serving-certs"),
            cert_name: "tls.crt".to_string(),
            key_name: "tls.key".to_string(),
        }
    }
}

impl WebhookConfig {
    /// The certificate and key paths this configuration points at.
    pub(crate) fn cert_files(&self) -> CertFiles {
        CertFiles::in_dir(&self.cert_dir, &self.cert_name, &self.key_name)
    }
}

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The serving certificate could not be loaded.
    #[error("webhook serving certificate: {0}")]
    Tls(#[from] TlsError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address that failed.
        addr: SocketAddr,
        /// The underlying IO error.
        #[source]
        source: std::io::Error,
    },
}

/// The validation function [`review_with`] calls; [`api::validate_dynamic`] in production.
pub(crate) type Validator = fn(&str, &Value, Option<&Value>) -> Result<Validation, ValidateError>;

/// Decides one AdmissionReview for the webhook at `segment` (the lowercase kind, or the whole
/// path) using the API's validation. Never panics; malformed input yields a denial that says why.
pub fn review(
    segment: &str,
    review: AdmissionReview<DynamicObject>,
) -> AdmissionReview<DynamicObject> {
    review_with(segment, review, api::validate_dynamic)
}

/// [`review`] with an explicit validation function (lets embedders and tests substitute it).
pub(crate) fn review_with(
    segment: &str,
    review: AdmissionReview<DynamicObject>,
    validate: Validator,
) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(_) => {
            return AdmissionResponse::invalid("the AdmissionReview carries no request")
                .into_review();
        }
    };
    decide(segment, &request, validate).into_review()
}

fn bad_request(response: AdmissionResponse, message: String) -> AdmissionResponse {
    let mut response = response.deny(&message);
    response.result = Status::failure(&message, "BadRequest").with_code(400);
    response
}

fn decide(
    segment: &str,
    request: &AdmissionRequest<DynamicObject>,
    validate: Validator,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(kind) = kind_for_segment(segment) else {
        return bad_request(
            response,
            format!("no validating webhook is served at {segment:?}"),
        );
    };
    if request.kind.group != api::GROUP || request.kind.kind != kind {
        return bad_request(
            response,
            format!(
                "this webhook validates {kind}.{}, but the request is for {}.{}",
                api::GROUP,
                request.kind.kind,
                request.kind.group
            ),
        );
    }
    match request.operation {
        // Nothing to validate on removal; CONNECT does not apply to custom resources.
        Operation::Delete | Operation::Connect => return response,
        Operation::Create | Operation::Update => {}
    }
    let Some(object) = &request.object else {
        return bad_request(
            response,
            format!("{:?} request without an object", request.operation),
        );
    };
    let new = match serde_json::to_value(object) {
        Ok(value) => value,
        Err(error) => {
            return bad_request(response, format!("cannot re-encode the object: {error}"));
        }
    };
    let old = match &request.old_object {
        Some(old) => match serde_json::to_value(old) {
            Ok(value) => Some(value),
            Err(error) => {
                return bad_request(
                    response,
                    format!("cannot re-encode the old object: {error}"),
                );
            }
        },
        None => None,
    };

    if matches!(request.operation, Operation::Update) {
        // Never block the operator (or a user) from finishing a deletion.
        if object.metadata.deletion_timestamp.is_some() {
            return response;
        }
        // Finalizer, label, annotation and status edits do not change what was validated.
        if let Some(old) = &old
            && same_apart_from_metadata(&new, old)
        {
            return response;
        }
    }

    let name = object
        .metadata
        .name
        .clone()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| request.name.clone());
    match validate(kind, &new, old.as_ref()) {
        Ok(validation) => verdict(response, kind, &name, validation),
        Err(error) => bad_request(
            response,
            format!(
                "{kind}.{} {name:?} cannot be validated: {error}",
                api::GROUP
            ),
        ),
    }
}

/// True when the two objects differ at most in `metadata` and `status`.
fn same_apart_from_metadata(new: &Value, old: &Value) -> bool {
    match (new.as_object(), old.as_object()) {
        (Some(new), Some(old)) => {
            let relevant = |(key, _): &(&String, &Value)| {
                key.as_str() != "metadata" && key.as_str() != "status"
            };
            new.iter().filter(relevant).eq(old.iter().filter(relevant))
        }
        _ => false,
    }
}

/// Turns a validation result into the admission answer: errors reject with a Kubernetes
/// `Invalid` status (422), warnings are passed back either way.
fn verdict(
    mut response: AdmissionResponse,
    kind: &str,
    name: &str,
    validation: Validation,
) -> AdmissionResponse {
    if !validation.warnings.is_empty() {
        response.warnings = Some(validation.warnings.clone());
    }
    if validation.is_valid() {
        return response;
    }
    // Same text the API server produces for an Invalid status error.
    let message = format!(
        "{kind}.{} {} is invalid: {}",
        api::GROUP,
        api::validation::quote(name),
        validation.error_summary()
    );
    let causes = validation
        .errors
        .iter()
        .map(|error| StatusCause {
            reason: error.kind.cause_type().to_string(),
            message: error.body(),
            field: error.path.clone(),
        })
        .collect();
    let mut response = response.deny(&message);
    response.result = Status::failure(&message, "Invalid").with_code(422);
    response.result.details = Some(StatusDetails {
        name: name.to_string(),
        group: api::GROUP.to_string(),
        kind: kind.to_string(),
        causes,
        uid: String::new(),
        retry_after_seconds: 0,
    });
    response
}

/// Handles one HTTP request body for the webhook of `kind`; with `client`, an OmniHelmRelease
/// is also checked against the other releases of its namespace ([`dependency_cycle`]).
async fn handle(kind: &'static str, body: &[u8], client: Option<kube::Client>) -> Response {
    let incoming: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("request body is not an admission.k8s.io/v1 AdmissionReview: {error}\n"),
            )
                .into_response();
        }
    };
    let request: Result<AdmissionRequest<DynamicObject>, _> = incoming.try_into();
    let outcome = match (request, client) {
        (Ok(request), Some(client)) => {
            let response = decide(kind, &request, api::validate_dynamic);
            dependency_cycle(&client, kind, &request, response)
                .await
                .into_review()
        }
        (Ok(request), None) => decide(kind, &request, api::validate_dynamic).into_review(),
        (Err(_), _) => {
            AdmissionResponse::invalid("the AdmissionReview carries no request").into_review()
        }
    };
    if let Some(response) = &outcome.response {
        tracing::debug!(
            kind,
            uid = %response.uid,
            allowed = response.allowed,
            "admission review answered"
        );
    }
    axum::Json(outcome).into_response()
}

/// `response` to an OmniHelmRelease's creation or update, denied when its `spec.dependsOn`
/// closes a cycle with the releases stored in its namespace (read with `client`), naming the
/// cycle. A cycle spans objects, which the per-object validation cannot see. The controller
/// reports a cycle too, so a release list that cannot be read lets the request through.
async fn dependency_cycle(
    client: &kube::Client,
    kind: &str,
    request: &AdmissionRequest<DynamicObject>,
    response: AdmissionResponse,
) -> AdmissionResponse {
    let Some(object) = &request.object else {
        return response;
    };
    let deciding = kind == "OmniHelmRelease"
        && response.allowed
        && matches!(request.operation, Operation::Create | Operation::Update)
        && object.metadata.deletion_timestamp.is_none();
    let own = depends_on(&object.data);
    if !deciding || own.is_empty() {
        return response;
    }
    let name = object
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| request.name.clone());
    let namespace = request
        .namespace
        .clone()
        .or_else(|| object.metadata.namespace.clone())
        .unwrap_or_default();
    let resource = kube::discovery::ApiResource::erase::<api::OmniHelmRelease>(&());
    let releases =
        kube::Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource)
            .list(&kube::api::ListParams::default())
            .await;
    let Ok(releases) = releases else {
        return response;
    };
    let graph = |n: &str| -> Vec<String> {
        if n == name {
            return own.clone();
        }
        releases
            .items
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(n))
            .map(|r| depends_on(&r.data))
            .unwrap_or_default()
    };
    let Some(cycle) = api::helm_policies::dependency_cycle(&name, graph) else {
        return response;
    };
    let next = cycle.get(1).cloned().unwrap_or_default();
    let index = own.iter().position(|d| *d == next).unwrap_or_default();
    let mut validation = Validation::new();
    validation.push(api::validation::FieldError::invalid(
        format!("spec.dependsOn[{index}].name"),
        next,
        format!(
            "dependency cycle {}",
            api::helm_policies::cycle_text(&cycle)
        ),
    ));
    verdict(response, kind, &name, validation)
}

/// The names in `spec.dependsOn` of an OmniHelmRelease's JSON (empty where there are none).
fn depends_on(data: &Value) -> Vec<String> {
    data["spec"]["dependsOn"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["name"].as_str().map(str::to_string))
        .collect()
}

/// The webhook routes over plain HTTP: `POST` on one path per kind. Other paths answer 404.
/// With `client`, the webhook reads what a decision spans besides the object (the other
/// OmniHelmReleases of a namespace, for `dependsOn` cycles).
pub(crate) fn router(client: Option<kube::Client>) -> Router {
    let mut router = Router::new();
    for kind in api::KINDS {
        let client = client.clone();
        router = router.route(
            &path_for(kind),
            post(move |body: Bytes| async move { handle(kind, &body, client).await }),
        );
    }
    router
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(request_deadline))
}

/// Answers 408 when a request (reading its body included) takes longer than
/// [`REQUEST_TIMEOUT`].
async fn request_deadline(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            "the request was not completed in time",
        )
            .into_response(),
    }
}

/// A bound but not yet running HTTPS webhook server.
pub struct Server {
    https: tls::HttpsServer,
    /// What the webhook reads OmniHelmReleases with (see [`router`]).
    client: Option<kube::Client>,
}

impl Server {
    /// Loads the serving certificate and binds the listen address. Fails early when either is
    /// impossible, so a misconfigured operator does not start half-working.
    pub async fn bind(config: &WebhookConfig) -> Result<Self, WebhookError> {
        // Kubernetes talks HTTP/1.1 to webhooks unless offered HTTP/2; offering only HTTP/1.1
        // keeps HTTP/2 stream-flood attacks off this port.
        let (tls_config, certificate) =
            tls::reloading_server_config(config.cert_files(), vec![b"http/1.1".to_vec()])?;
        let listener =
            TcpListener::bind(config.bind)
                .await
                .map_err(|source| WebhookError::Bind {
                    addr: config.bind,
                    source,
                })?;
        Ok(Self {
            https: tls::HttpsServer::new(listener, tls_config, Some(certificate), "webhook"),
            client: None,
        })
    }

    /// The server, reading the other OmniHelmReleases of a namespace with `client` to refuse
    /// a `dependsOn` cycle.
    pub fn with_client(self, client: kube::Client) -> Self {
        Self {
            client: Some(client),
            ..self
        }
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, std::io::Error> {
        self.https.local_addr()
    }

    /// Serves until `shutdown` completes, then lets in-flight requests finish (bounded).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        self.https.run(router(self.client), shutdown).await;
    }
}

/// Runs the HTTPS webhook server described by `config` until `shutdown` completes, reading
/// OmniHelmReleases with `client`.
pub async fn serve(
    config: WebhookConfig,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WebhookError> {
    let server = Server::bind(&config).await?.with_client(client);
    tracing::info!(
        addr = %config.bind,
        cert_dir = %config.cert_dir.display(),
        "admission webhook server listening"
    );
    server.run(shutdown).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::validation::FieldError;
    use serde_json::json;

    fn always_invalid(_: &str, _: &Value, _: Option<&Value>) -> Result<Validation, ValidateError> {
        let mut v = Validation::new();
        v.push(FieldError::required(
            "spec.endpoint",
            "endpoint is required",
        ));
        v.push(FieldError::forbidden("spec.mode", "not here"));
        v.warn("be careful");
        Ok(v)
    }

    fn undecodable(kind: &str, _: &Value, _: Option<&Value>) -> Result<Validation, ValidateError> {
        Err(ValidateError::Decode {
            kind: kind.to_string(),
            message: "spec.endpoint: invalid type".to_string(),
        })
    }

    fn object(spec: Value) -> Value {
        json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniConnection",
            "metadata": {"name": "omni", "namespace": "ns", "resourceVersion": "7"},
            "spec": spec,
        })
    }

    fn request(
        kind: &str,
        operation: &str,
        new: Option<Value>,
        old: Option<Value>,
    ) -> AdmissionReview<DynamicObject> {
        serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "omni.texashpc.com", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "omni.texashpc.com", "version": "v1alpha1", "resource": "omniconnections"},
                "name": "from-request",
                "operation": operation,
                "userInfo": {},
                "object": new,
                "oldObject": old,
            }
        }))
        .expect("review decodes")
    }

    fn answer(review: AdmissionReview<DynamicObject>) -> AdmissionResponse {
        review.response.expect("response")
    }

    #[test]
    fn metadata_and_status_only_updates_skip_validation() {
        let old = object(json!({"endpoint": ""}));
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!(["omni.texashpc.com/finalizer"]);
        new["metadata"]["annotations"] = json!({"a": "b"});
        new["metadata"]["resourceVersion"] = json!("8");
        new["status"] = json!({"conditions": []});
        let response = answer(review_with(
            "omniconnection",
            request("OmniConnection", "UPDATE", Some(new), Some(old)),
            always_invalid,
        ));
        assert!(response.allowed);
        assert_eq!(response.uid, "u-1");
    }

    #[test]
    fn spec_changes_are_validated_and_rejected_in_kubernetes_format() {
        let old = object(json!({"endpoint": "a"}));
        let new = object(json!({"endpoint": ""}));
        let response = answer(review_with(
            PATH_PREFIX.to_string().as_str(),
            request("OmniConnection", "UPDATE", Some(new.clone()), Some(old)),
            always_invalid,
        ));
        // The bare prefix names no kind.
        assert!(!response.allowed);
        assert_eq!(response.result.code, 400);

        let response = answer(review_with(
            &path_for("OmniConnection"),
            request("OmniConnection", "CREATE", Some(new), None),
            always_invalid,
        ));
        assert!(!response.allowed);
        assert_eq!(response.result.code, 422);
        assert_eq!(response.result.reason, "Invalid");
        assert_eq!(
            response.result.message,
            "OmniConnection.omni.texashpc.com \"omni\" is invalid: [spec.endpoint: Required value: \
             endpoint is required, spec.mode: Forbidden: not here]"
        );
        let details = response.result.details.expect("details");
        assert_eq!(details.kind, "OmniConnection");
        assert_eq!(details.causes.len(), 2);
        assert_eq!(details.causes[1].reason, "FieldValueForbidden");
        // Warnings accompany a denial too, so the user sees them with the error.
        assert_eq!(response.warnings, Some(vec!["be careful".to_string()]));
    }

    #[test]
    fn delete_and_deleting_objects_are_never_blocked() {
        let old = object(json!({"endpoint": "a"}));
        let response = answer(review_with(
            "omniconnection",
            request("OmniConnection", "DELETE", None, Some(old.clone())),
            always_invalid,
        ));
        assert!(response.allowed);

        let mut new = object(json!({"endpoint": "changed"}));
        new["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let response = answer(review_with(
            "omniconnection",
            request("OmniConnection", "UPDATE", Some(new), Some(old)),
            always_invalid,
        ));
        assert!(response.allowed);
    }

    #[test]
    fn mismatches_and_undecodable_objects_are_denied_with_reasons() {
        let new = object(json!({"endpoint": "a"}));
        let response = answer(review_with(
            "omnicluster",
            request("OmniConnection", "CREATE", Some(new.clone()), None),
            always_invalid,
        ));
        assert!(!response.allowed);
        assert!(
            response.result.message.contains("validates OmniCluster"),
            "{}",
            response.result.message
        );

        let response = answer(review_with(
            "omniconnection",
            request("OmniConnection", "CREATE", None, None),
            always_invalid,
        ));
        assert!(!response.allowed);
        assert!(response.result.message.contains("without an object"));

        let response = answer(review_with(
            "omniconnection",
            request("OmniConnection", "CREATE", Some(new), None),
            undecodable,
        ));
        assert!(!response.allowed);
        assert_eq!(response.result.code, 400);
        assert!(
            response
                .result
                .message
                .contains("spec.endpoint: invalid type")
        );
    }

    #[test]
    fn name_falls_back_to_the_request_name() {
        let mut new = object(json!({"endpoint": ""}));
        new["metadata"]["name"] = json!("");
        let response = answer(review_with(
            "omniconnection",
            request("OmniConnection", "CREATE", Some(new), None),
            always_invalid,
        ));
        assert!(
            response
                .result
                .message
                .starts_with("OmniConnection.omni.texashpc.com \"from-request\" is invalid")
        );
    }

    #[test]
    fn every_kind_maps_to_its_path_and_back() {
        for kind in api::KINDS {
            assert_eq!(kind_for_segment(&path_for(kind)), Some(kind));
            assert_eq!(kind_for_segment(&kind.to_ascii_lowercase()), Some(kind));
        }
        assert_eq!(kind_for_segment("omnisomething"), None);
    }
}
