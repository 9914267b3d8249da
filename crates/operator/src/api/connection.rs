//! OmniConnection: how to reach one Omni instance and which service-account key to use.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, ServiceAccountSecretRef, conditions_schema, date_time_schema, is_blank,
};
use super::validation::{FieldError, Validation};

/// Desired state of an OmniConnection: an Omni endpoint plus the Secret holding its
/// service-account key. Many OmniClusters in the namespace may share one connection.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniConnection",
    plural = "omniconnections",
    singular = "omniconnection",
    namespaced,
    status = "OmniConnectionStatus",
    shortname = "oconn",
    category = "omni",
    doc = "Connection to a Sidero Omni instance, authenticated with a service-account key stored in a Secret.",
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".spec.endpoint"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OmniConnectionSpec {
    /// Omni API URL; must start with `https://`, `http://` or `grpc://`.
    #[schemars(regex(pattern = r"^(https?|grpc)://.+"))]
    pub endpoint: String,
    /// Credentials used to authenticate to Omni.
    pub auth: OmniConnectionAuth,
    /// Skip verification of Omni's TLS certificate. Only for test installations.
    #[serde(
        default,
        rename = "insecureSkipTLSVerify",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub insecure_skip_tls_verify: bool,
    /// ServiceAccount (same namespace) whose identity reads the Secrets this object references:
    /// the operator impersonates it, so the object can use only what the ServiceAccount may
    /// read. Unset: the operator's `--default-service-account`, else the operator's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,
}

/// Omni authentication settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniConnectionAuth {
    /// Secret (same namespace) whose key holds only the base64 Omni service-account key, as
    /// `OMNI_SERVICE_ACCOUNT_KEY` would.
    pub service_account_secret_ref: ServiceAccountSecretRef,
}

/// Observed state of an OmniConnection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniConnectionStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Reachable`, `Ready` and `Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Name of this connection (for symmetry with the kinds that reference it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_ref: Option<String>,
    /// Endpoint that was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// When Omni was last pinged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_check_time: Option<jiff::Timestamp>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// Admission rules for OmniConnection (create and update alike).
pub fn validate(new: &OmniConnection, _old: Option<&OmniConnection>) -> Validation {
    let mut v = Validation::new();
    if let Some(e) =
        super::common::service_account_name_error(new.spec.service_account_name.as_deref())
    {
        v.push(e);
    }
    let secret = &new.spec.auth.service_account_secret_ref;
    if is_blank(&secret.name) {
        v.push(FieldError::required(
            "spec.auth.serviceAccountSecretRef.name",
            "service account Secret name is required",
        ));
    }
    if is_blank(&secret.key) {
        v.push(FieldError::required(
            "spec.auth.serviceAccountSecretRef.key",
            "service account Secret key is required",
        ));
    }
    if new.spec.insecure_skip_tls_verify {
        v.warn("insecureSkipTLSVerify disables Omni endpoint TLS certificate verification");
    }
    v
}
