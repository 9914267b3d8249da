use super::*;
use crate::api::keys;
use kube::config::Kubeconfig;

fn at(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(s)
}

#[test]
fn the_written_secret_carries_the_hold_once() {
    let export: OmniKubeconfigExport = serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniKubeconfigExport",
        "metadata": {"name": "e", "namespace": "ns", "uid": "u1"},
        "spec": {
            "clusterRef": {"name": "c"}, "targetSecretRef": {"name": "kc"},
            "serviceAccount": {"user": "u", "groups": ["g"]}, "ttl": "1h", "deletionPolicy": "Delete",
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let data = BTreeMap::from([("kubeconfig".to_string(), b"k".to_vec())]);
    let kc = ExportFormat::Kubeconfig;
    let first = build_target(&export, None, "c", "h", kc, &data, at(10), at(0));
    assert!(holds(&first));
    let again = build_target(&export, Some(&first), "c", "h", kc, &data, at(10), at(0));
    assert_eq!(
        again.finalizers(),
        [keys::KUBECONFIG_IN_USE_FINALIZER.to_string()]
    );
}

#[test]
fn context_namespace_is_set_on_the_current_context() {
    let kc = "apiVersion: v1\nkind: Config\ncurrent-context: a\ncontexts:\n- name: a\n  context:\n    cluster: c\n    user: u\nclusters: []\nusers: []\n";
    let out = with_context_namespace(kc.as_bytes(), "team").unwrap_or_else(|e| panic!("{e}"));
    let parsed =
        Kubeconfig::from_yaml(&String::from_utf8_lossy(&out)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        parsed.contexts[0]
            .context
            .as_ref()
            .and_then(|c| c.namespace.clone()),
        Some("team".to_string())
    );
    let missing = "apiVersion: v1\nkind: Config\ncurrent-context: zz\ncontexts: []\n";
    assert_eq!(
        with_context_namespace(missing.as_bytes(), "team"),
        Err(r#"generated kubeconfig current context "zz" was not found"#.to_string())
    );
}

fn export_in(format: &str) -> OmniKubeconfigExport {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniKubeconfigExport",
        "metadata": {"name": "e", "namespace": "ns", "uid": "u1"},
        "spec": {
            "clusterRef": {"name": "c"}, "targetSecretRef": {"name": "kc"},
            "serviceAccount": {"user": "u", "groups": ["g"]}, "ttl": "1h",
            "deletionPolicy": "Delete", "format": format,
        },
        "status": {"targetSecretRef": "kc", "targetSecretKey": "kubeconfig"},
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn keys(s: &Secret) -> Vec<String> {
    s.data.iter().flatten().map(|(k, _)| k.clone()).collect()
}

#[test]
fn a_format_change_replaces_the_old_shape_and_keeps_other_keys() {
    let kc = b"apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: c\n  cluster:\n    server: https://w.example\ncontexts:\n- name: w\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: t}\n";
    let shape = |format| {
        export_format::secret_data(format, "kubeconfig", "c", kc).unwrap_or_else(|e| panic!("{e}"))
    };
    let write = |format: ExportFormat, existing: Option<&Secret>| {
        let mut s = build_target(
            &export_in(format.as_str()),
            existing,
            "c",
            "h",
            format,
            &shape(format),
            at(10),
            at(0),
        );
        s.data
            .get_or_insert_with(BTreeMap::new)
            .insert("notes".into(), ByteString(b"mine".to_vec()));
        s
    };
    let plain = write(ExportFormat::Kubeconfig, None);
    assert_eq!(keys(&plain), ["kubeconfig", "notes"]);
    assert!(
        !plain
            .annotations()
            .contains_key(keys::EXPORT_FORMAT_ANNOTATION)
    );

    let argo = write(ExportFormat::ArgoCdCluster, Some(&plain));
    assert_eq!(keys(&argo), ["config", "name", "notes", "server"]);
    assert_eq!(
        argo.labels()
            .get("argocd.argoproj.io/secret-type")
            .map(String::as_str),
        Some("cluster")
    );
    assert_eq!(
        argo.annotations().get(keys::KUBECONFIG_HASH_ANNOTATION),
        export_format::data_hash(
            ExportFormat::ArgoCdCluster,
            "kubeconfig",
            &shape(ExportFormat::ArgoCdCluster)
        )
        .as_ref()
    );

    let flux = write(ExportFormat::FluxValue, Some(&argo));
    assert_eq!(keys(&flux), ["notes", "value"]);
    assert!(!flux.labels().contains_key("argocd.argoproj.io/secret-type"));
    assert_eq!(
        flux.annotations()
            .get(keys::EXPORT_FORMAT_ANNOTATION)
            .map(String::as_str),
        Some("FluxValue")
    );

    let back = write(ExportFormat::Kubeconfig, Some(&flux));
    assert_eq!(keys(&back), ["kubeconfig", "notes"]);
    assert!(
        !back
            .annotations()
            .contains_key(keys::EXPORT_FORMAT_ANNOTATION)
    );
}

#[test]
fn a_secret_the_export_does_not_own_loses_no_key_to_a_format_change() {
    let mut theirs = Secret::default();
    theirs.metadata.annotations = Some(BTreeMap::from([(
        keys::EXPORT_FORMAT_ANNOTATION.to_string(),
        "ArgoCDCluster".to_string(),
    )]));
    theirs.data = Some(BTreeMap::from([(
        "name".to_string(),
        ByteString(b"theirs".to_vec()),
    )]));
    let data = BTreeMap::from([("value".to_string(), b"k".to_vec())]);
    let adopted = build_target(
        &export_in("FluxValue"),
        Some(&theirs),
        "c",
        "h",
        ExportFormat::FluxValue,
        &data,
        at(10),
        at(0),
    );
    assert_eq!(keys(&adopted), ["name", "value"]);
}
