//! Bounds of every duration field of the CRDs and the rules for `file:` paths, as admission
//! (the webhook) and `omni-operator validate` apply them: each failure names the field.
//!
//! Duration fields: OmniCluster `spec.syncInterval` and
//! `spec.features.backupConfiguration.interval`; OmniHelmRelease `spec.timeout` and
//! `spec.driftCheckInterval`; OmniKubeconfigExport `spec.ttl` and `spec.renewBefore`.
//! (OmniConnection, OmniControlPlane, OmniWorkers, OmniMachine and OmniSecretSync have none;
//! the OmniSecretSync resync interval is the operator flag `--secret-sync-resync-interval`.)

use omni_operator::api::{self, Validation};
use serde_json::{Value, json};

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "omni-cluster-operator-system", "uid": "u-1", "generation": 1},
        "spec": spec,
    })
}

fn cluster(extra: Value) -> Value {
    let mut spec = json!({
        "connectionRef": {"name": "omni"},
        "kubernetes": {"version": "v1.35.0"},
        "talos": {"version": "v1.13.2"},
    });
    for (k, v) in extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    object("OmniCluster", "edge", spec)
}

fn helm_release(extra: Value) -> Value {
    let mut spec = json!({
        "clusterRef": {"name": "edge"},
        "kubeconfigSecretRef": {"name": "edge-kc"},
        "chart": {"repository": "https://charts.example.com/", "chart": "app", "version": "1.0.0"},
    });
    for (k, v) in extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    object("OmniHelmRelease", "edge-app", spec)
}

fn export(ttl: &str, renew_before: Option<&str>) -> Value {
    let mut spec = json!({
        "clusterRef": {"name": "edge"},
        "targetSecretRef": {"name": "edge-kc"},
        "serviceAccount": {"user": "edge-automation", "groups": ["cluster-automation"]},
        "ttl": ttl,
        "deletionPolicy": "Delete",
    });
    if let Some(rb) = renew_before {
        spec["renewBefore"] = json!(rb);
    }
    object("OmniKubeconfigExport", "edge-kc", spec)
}

fn run(obj: &Value) -> Validation {
    let kind = obj["kind"].as_str().expect("kind");
    api::validate_dynamic(kind, obj, None).unwrap_or_else(|e| panic!("decode failed: {e}"))
}

fn errors(obj: &Value) -> Vec<String> {
    run(obj).errors.iter().map(ToString::to_string).collect()
}

fn assert_clean(obj: &Value) {
    assert_eq!(errors(obj), Vec::<String>::new(), "{obj}");
}

fn assert_only_error(obj: &Value, want: &str) {
    assert_eq!(errors(obj), vec![want.to_string()]);
}

#[test]
fn sync_interval_is_zero_or_at_least_ten_seconds() {
    assert_clean(&cluster(json!({"syncInterval": "0"})));
    assert_clean(&cluster(json!({"syncInterval": "10s"})));
    assert_clean(&cluster(json!({"syncInterval": "24h"})));
    for short in ["1s", "9.999s", "500ms", "1ns"] {
        assert_only_error(
            &cluster(json!({"syncInterval": short})),
            &format!(
                r#"spec.syncInterval: Invalid value: "{short}": syncInterval must be 0 (the default, 5m) or at least 10s"#
            ),
        );
    }
}

#[test]
fn durations_beyond_the_go_range_are_refused_naming_the_field() {
    // 2562048h is just past i64 nanoseconds (about 292 years).
    assert_only_error(
        &cluster(json!({"syncInterval": "2562048h"})),
        r#"spec.syncInterval: Invalid value: "2562048h": syncInterval must be a duration such as 24h, 1h30m or 90s"#,
    );
    assert_only_error(
        &helm_release(json!({"driftCheckInterval": "99999999999999999999s"})),
        r#"spec.driftCheckInterval: Invalid value: "99999999999999999999s": driftCheckInterval must be a duration such as 24h, 1h30m or 90s"#,
    );
    assert_only_error(
        &export("2562048h", None),
        r#"spec.ttl: Invalid value: "2562048h": ttl must be a duration such as 24h, 1h30m or 90s"#,
    );
    assert_only_error(
        &cluster(json!({"features": {"backupConfiguration": {"interval": "2562048h"}}})),
        r#"spec.features.backupConfiguration.interval: Invalid value: "2562048h": interval must be a duration such as 24h, 1h30m or 90s"#,
    );
}

#[test]
fn backup_interval_is_a_non_negative_duration() {
    assert_clean(&cluster(
        json!({"features": {"backupConfiguration": {"interval": "0"}}}),
    ));
    assert_clean(&cluster(
        json!({"features": {"backupConfiguration": {"interval": "1h"}}}),
    ));
    assert_only_error(
        &cluster(json!({"features": {"backupConfiguration": {"interval": "-1h"}}})),
        r#"spec.features.backupConfiguration.interval: Invalid value: "-1h": interval must not be negative"#,
    );
    assert_only_error(
        &cluster(json!({"features": {"backupConfiguration": {"interval": "daily"}}})),
        r#"spec.features.backupConfiguration.interval: Invalid value: "daily": interval must be a duration such as 24h, 1h30m or 90s"#,
    );
}

#[test]
fn helm_timeout_is_at_most_one_hour() {
    assert_clean(&helm_release(json!({"timeout": "1h"})));
    assert_clean(&helm_release(json!({"timeout": "59m59s"})));
    for long in ["1h0m1s", "61m", "24h"] {
        assert_only_error(
            &helm_release(json!({"timeout": long})),
            &format!(r#"spec.timeout: Invalid value: "{long}": timeout must be at most 1h"#),
        );
    }
}

#[test]
fn drift_check_interval_is_zero_or_at_least_ten_seconds() {
    assert_clean(&helm_release(json!({"driftCheckInterval": "0"})));
    assert_clean(&helm_release(json!({"driftCheckInterval": "10s"})));
    assert_only_error(
        &helm_release(json!({"driftCheckInterval": "2s"})),
        r#"spec.driftCheckInterval: Invalid value: "2s": driftCheckInterval must be 0 (no periodic check) or at least 10s"#,
    );
}

#[test]
fn kubeconfig_rotation_is_at_most_every_ten_seconds() {
    assert_clean(&export("10s", None));
    assert_clean(&export("1h", Some("59m50s")));
    assert_only_error(
        &export("9s", None),
        r#"spec.ttl: Invalid value: "9s": ttl must be at least 10s"#,
    );
    assert_only_error(
        &export("24h", Some("23h59m59s")),
        r#"spec.renewBefore: Invalid value: "23h59m59s": renewBefore must leave at least 10s between rotations (ttl minus renewBefore)"#,
    );
}

#[test]
fn file_paths_with_parent_segments_are_rejected() {
    let detail =
        "must not contain \"..\" segments: files are read only inside the operator's template root";
    assert_only_error(
        &cluster(json!({"patches": [{"file": "../secret.yaml"}]})),
        &format!(r#"spec.patches[0].file: Invalid value: "../secret.yaml": {detail}"#),
    );
    assert_only_error(
        &cluster(
            json!({"kubernetes": {"version": "v1.35.0", "manifests": [{"name": "m", "file": "a/../../b.yaml"}]}}),
        ),
        &format!(r#"spec.kubernetes.manifests[0].file: Invalid value: "a/../../b.yaml": {detail}"#),
    );
    for (kind, name, spec) in [
        (
            "OmniControlPlane",
            "edge-cp",
            json!({"clusterRef": {"name": "edge"}, "machines": ["11111111-1111-4111-8111-111111111111"], "patches": [{"file": "x/../y.yaml"}]}),
        ),
        (
            "OmniWorkers",
            "edge-w",
            json!({"clusterRef": {"name": "edge"}, "machineClass": {"name": "gpu", "size": 3}, "patches": [{"file": "x/../y.yaml"}]}),
        ),
        (
            "OmniMachine",
            "11111111-1111-4111-8111-111111111111",
            json!({"clusterRef": {"name": "edge"}, "patches": [{"file": "x/../y.yaml"}]}),
        ),
    ] {
        assert_eq!(
            errors(&object(kind, name, spec)),
            vec![format!(
                r#"spec.patches[0].file: Invalid value: "x/../y.yaml": {detail}"#
            )],
            "{kind}"
        );
    }
    // A name that merely contains dots is fine.
    assert_clean(&cluster(
        json!({"patches": [{"file": "patches/..hidden/a..b.yaml"}]}),
    ));
    assert_only_error(
        &cluster(json!({"templateRoot": "/srv/templates/../.."})),
        r#"spec.templateRoot: Invalid value: "/srv/templates/../..": must not contain ".." segments: it may only narrow the operator's template root"#,
    );
}

#[test]
fn absolute_file_paths_only_warn() {
    let v = run(&cluster(
        json!({"patches": [{"file": "/srv/templates/p.yaml"}]}),
    ));
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    assert_eq!(
        v.warnings,
        vec![
            "spec.patches[0].file: \"/srv/templates/p.yaml\" is an absolute path; it is read only if it lies inside the operator's template root (prefer a path relative to it)"
                .to_string()
        ]
    );
    let v = run(&cluster(
        json!({"kubernetes": {"version": "v1.35.0", "manifests": [{"name": "m", "file": "/etc/passwd"}]}}),
    ));
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    assert!(
        v.warnings.iter().any(|w| w
            .starts_with("spec.kubernetes.manifests[0].file: \"/etc/passwd\" is an absolute path")),
        "{:?}",
        v.warnings
    );
}
