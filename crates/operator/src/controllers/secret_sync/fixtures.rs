//! Objects the unit tests share.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

use crate::api::OmniSecretSync;

pub(super) fn sync() -> OmniSecretSync {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniSecretSync",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {
            "clusterRef": {"name": "prod"},
            "kubeconfigSecretRef": {"name": "kc", "key": "kubeconfig"},
            "sourceSecretRef": {"name": "src"},
            "targetSecretRef": {"name": "dst", "namespace": "apps"},
            "labels": {"team": "a"},
            "deletionPolicy": "Delete"
        }
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn source() -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("src".into()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            ("a".to_string(), ByteString(b"one".to_vec())),
            ("b".to_string(), ByteString(b"two".to_vec())),
        ])),
        ..Secret::default()
    }
}
