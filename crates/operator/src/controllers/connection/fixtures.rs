//! Objects the unit tests share.

use crate::api::{OmniCluster, OmniConnection};

pub(super) fn conn() -> OmniConnection {
    let mut c: OmniConnection = serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniConnection",
        "metadata": {"name": "omni", "namespace": "ns", "generation": 3},
        "spec": {"endpoint": "https://omni.example", "auth": {"serviceAccountSecretRef": {"name": "k", "key": "serviceAccountKey"}}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    c.status = None;
    c
}

pub(super) fn cluster(name: &str, connection: &str) -> OmniCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"connectionRef": {"name": connection}, "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}
