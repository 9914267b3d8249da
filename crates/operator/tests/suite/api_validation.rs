//! Admission rules of every kind: each rule has a passing and a failing case, and failures
//! must name the field path with the Kubernetes error type and the exact parity message
//! (docs/parity.md#admission-messages).

use omni_operator::api::{self, FieldErrorKind, ValidateError, Validation, schema_check};
use serde_json::{Value, json};

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "omni-cluster-operator-system", "uid": "u-1", "generation": 1},
        "spec": spec,
    })
}

fn connection() -> Value {
    object(
        "OmniConnection",
        "omni",
        json!({"endpoint": "https://omni.example.com", "auth": {"serviceAccountSecretRef": {"name": "omni-sa", "key": "serviceAccountKey"}}}),
    )
}

fn cluster() -> Value {
    object(
        "OmniCluster",
        "edge",
        json!({
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0", "manifests": [{"name": "ns", "mode": "full", "inline": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}]}]},
            "talos": {"version": "v1.13.2"},
            "patches": [{"name": "p", "inline": {"machine": {}}}],
            "syncInterval": "5m",
        }),
    )
}

fn control_plane() -> Value {
    object(
        "OmniControlPlane",
        "edge-cp",
        json!({"clusterRef": {"name": "edge"}, "machines": ["11111111-1111-4111-8111-111111111111"]}),
    )
}

fn workers() -> Value {
    object(
        "OmniWorkers",
        "edge-workers",
        json!({"clusterRef": {"name": "edge"}, "machineClass": {"name": "gpu", "size": 3}}),
    )
}

fn machine() -> Value {
    object(
        "OmniMachine",
        "11111111-1111-4111-8111-111111111111",
        json!({"clusterRef": {"name": "edge"}, "install": {"disk": "/dev/nvme0n1"}}),
    )
}

fn export() -> Value {
    object(
        "OmniKubeconfigExport",
        "edge-kc",
        json!({
            "clusterRef": {"name": "edge"},
            "targetSecretRef": {"name": "edge-kc"},
            "serviceAccount": {"user": "edge-automation", "groups": ["cluster-automation"]},
            "ttl": "24h",
            "renewBefore": "4h",
            "deletionPolicy": "Delete",
        }),
    )
}

fn helm_release() -> Value {
    object(
        "OmniHelmRelease",
        "edge-ms",
        json!({
            "clusterRef": {"name": "edge"},
            "kubeconfigSecretRef": {"name": "edge-kc"},
            "chart": {"repository": "https://kubernetes-sigs.github.io/metrics-server/", "chart": "metrics-server", "version": "3.13.0", "values": {"replicas": 2}},
        }),
    )
}

fn secret_sync() -> Value {
    object(
        "OmniSecretSync",
        "edge-ghcr",
        json!({
            "clusterRef": {"name": "edge"},
            "kubeconfigSecretRef": {"name": "edge-kc"},
            "sourceSecretRef": {"name": "ghcr"},
            "targetSecretRef": {"name": "ghcr", "namespace": "flux-system"},
            "deletionPolicy": "Delete",
        }),
    )
}

fn kind_of(obj: &Value) -> String {
    obj["kind"].as_str().unwrap().to_string()
}

fn run(obj: &Value) -> Validation {
    api::validate_dynamic(&kind_of(obj), obj, None).unwrap_or_else(|e| panic!("decode failed: {e}"))
}

fn run_update(old: &Value, new: &Value) -> Validation {
    api::validate_dynamic(&kind_of(new), new, Some(old))
        .unwrap_or_else(|e| panic!("decode failed: {e}"))
}

fn errors(obj: &Value) -> Vec<String> {
    run(obj).errors.iter().map(ToString::to_string).collect()
}

/// Sets `spec.<path>` (dotted) to `value`, creating objects on the way; `Value::Null` removes it.
fn with(mut obj: Value, path: &str, value: Value) -> Value {
    let mut cur = &mut obj["spec"];
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        cur = &mut cur[*part];
    }
    let last = parts[parts.len() - 1];
    if value.is_null() {
        cur.as_object_mut().unwrap().remove(last);
    } else {
        cur[last] = value;
    }
    obj
}

fn assert_clean(obj: &Value) {
    let v = run(obj);
    assert!(
        v.errors.is_empty(),
        "expected no errors, got {:?}",
        v.errors.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
}

fn assert_only_error(obj: &Value, want: &str) {
    assert_eq!(errors(obj), vec![want.to_string()]);
}

/// A value outside an enum of the CRD schema (the policies, `format`): the API server refuses
/// it naming the field before any webhook runs (as `omni-operator validate` does, from the
/// same schema), and the typed field does not decode it, so no admission rule is needed.
fn assert_schema_refuses(obj: &Value, want: &str) {
    let kind = kind_of(obj);
    let schema: Vec<String> = schema_check::check(&kind, obj)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(schema, [want]);
    let field = want.split(": ").next().unwrap_or_default();
    match api::validate_dynamic(&kind, obj, None) {
        Err(ValidateError::Decode { message, .. }) => {
            assert!(
                message.starts_with(&format!("{field}: unknown variant")),
                "the decoder names the field: {message}"
            );
        }
        other => panic!("a value the schema refuses decoded: {other:?}"),
    }
}

#[test]
fn base_objects_are_valid() {
    for obj in [
        connection(),
        cluster(),
        control_plane(),
        workers(),
        machine(),
        export(),
        helm_release(),
        secret_sync(),
    ] {
        assert_clean(&obj);
    }
}

// ---- OmniConnection (docs/parity.md#admission-messages) ----

#[test]
fn connection_secret_ref_must_not_be_blank() {
    assert_only_error(
        &with(
            connection(),
            "auth.serviceAccountSecretRef.name",
            json!("  "),
        ),
        "spec.auth.serviceAccountSecretRef.name: Required value: service account Secret name is required",
    );
    assert_only_error(
        &with(connection(), "auth.serviceAccountSecretRef.key", json!("")),
        "spec.auth.serviceAccountSecretRef.key: Required value: service account Secret key is required",
    );
    let v = run(&with(
        connection(),
        "auth.serviceAccountSecretRef.key",
        json!("custom"),
    ));
    assert!(v.is_valid());
    assert_eq!(v.errors[..], []);
}

#[test]
fn connection_warns_on_insecure_tls() {
    assert!(run(&connection()).warnings.is_empty());
    let v = run(&with(connection(), "insecureSkipTLSVerify", json!(true)));
    assert!(v.is_valid());
    assert_eq!(
        v.warnings,
        vec!["insecureSkipTLSVerify disables Omni endpoint TLS certificate verification"]
    );
}

// ---- OmniCluster (docs/parity.md#admission-messages) ----

#[test]
fn cluster_delete_policy_orphan_excludes_destroy_machines() {
    assert_clean(&with(cluster(), "deletePolicy", json!({"orphan": true})));
    assert_clean(&with(
        cluster(),
        "deletePolicy",
        json!({"destroyMachines": true}),
    ));
    let v = run(&with(
        cluster(),
        "deletePolicy",
        json!({"orphan": true, "destroyMachines": true}),
    ));
    assert_eq!(v.errors.len(), 1);
    assert_eq!(v.errors[0].path, "spec.deletePolicy");
    assert!(matches!(v.errors[0].kind, FieldErrorKind::Invalid { .. }));
    assert_eq!(
        v.errors[0].detail,
        "orphan and destroyMachines cannot both be true"
    );
}

#[test]
fn cluster_sync_interval() {
    assert_clean(&with(cluster(), "syncInterval", json!("0")));
    assert_clean(&with(cluster(), "syncInterval", json!("1h30m")));
    assert_only_error(
        &with(cluster(), "syncInterval", json!("-1m")),
        r#"spec.syncInterval: Invalid value: "-1m": syncInterval must not be negative"#,
    );
    assert_only_error(
        &with(cluster(), "syncInterval", json!("1d")),
        r#"spec.syncInterval: Invalid value: "1d": syncInterval must be a duration such as 24h, 1h30m or 90s"#,
    );
}

#[test]
fn cluster_patches_need_exactly_one_source() {
    assert_clean(&with(
        cluster(),
        "patches",
        json!([{"file": "patches/a.yaml"}, {"inline": {"a": 1}}]),
    ));
    assert_eq!(
        errors(&with(
            cluster(),
            "patches",
            json!([{"name": "empty"}, {"file": "a.yaml", "inline": {"a": 1}}])
        )),
        vec![
            "spec.patches[0]: Required value: patch requires exactly one of file or inline",
            r#"spec.patches[1]: Invalid value: "a.yaml": patch must not set both file and inline"#,
        ]
    );
}

#[test]
fn cluster_manifests_need_exactly_one_source() {
    assert_clean(&with(
        cluster(),
        "kubernetes.manifests",
        json!([{"name": "f", "file": "m.yaml"}]),
    ));
    assert_eq!(
        errors(&with(
            cluster(),
            "kubernetes.manifests",
            json!([{"name": "none", "inline": []}, {"name": "both", "file": "m.yaml", "inline": [{"kind": "X"}]}])
        )),
        vec![
            "spec.kubernetes.manifests[0]: Required value: manifest requires exactly one of file or inline",
            r#"spec.kubernetes.manifests[1]: Invalid value: "m.yaml": manifest must not set both file and inline"#,
        ]
    );
    // Duplicate names are a render-time failure, not an admission one (docs/parity.md#omnicluster).
    assert_clean(&with(
        cluster(),
        "kubernetes.manifests",
        json!([{"name": "dup", "file": "a.yaml"}, {"name": "dup", "file": "b.yaml"}]),
    ));
}

#[test]
fn cluster_kernel_args_warn() {
    assert!(run(&cluster()).warnings.is_empty());
    let v = run(&with(cluster(), "kernelArgs", json!(["console=ttyS0"])));
    assert!(v.is_valid());
    assert_eq!(
        v.warnings,
        vec![
            "cluster-level kernelArgs are valid only when every machine set uses static machines instead of machineClass"
        ]
    );
}

#[test]
fn cluster_helpers() {
    let c: api::OmniCluster = serde_json::from_value(cluster()).unwrap();
    assert_eq!(c.effective_cluster_name(), "edge");
    assert_eq!(c.sync_interval().to_string(), "5m0s");
    let c: api::OmniCluster = serde_json::from_value(with(
        with(cluster(), "clusterName", json!("remote")),
        "syncInterval",
        json!("0"),
    ))
    .unwrap();
    assert_eq!(c.effective_cluster_name(), "remote");
    assert_eq!(
        c.sync_interval().to_string(),
        "5m0s",
        "non-positive interval falls back to 5m"
    );
}

// ---- Machine sets (docs/parity.md#admission-messages) ----

#[test]
fn machine_class_size() {
    for size in [json!(1), json!("unlimited"), json!("infinity"), json!("∞")] {
        assert_clean(&with(workers(), "machineClass.size", size));
    }
    assert_only_error(
        &with(workers(), "machineClass.size", json!(0)),
        r#"spec.machineClass.size: Invalid value: "0": machineClass size must be greater than zero"#,
    );
    assert_only_error(
        &with(
            control_plane(),
            "machineClass",
            json!({"name": "c", "size": -2}),
        ),
        r#"spec.machineClass.size: Invalid value: "-2": machineClass size must be greater than zero"#,
    );
    assert_only_error(
        &with(workers(), "machineClass.size", json!("lots")),
        r#"spec.machineClass.size: Unsupported value: "lots": supported values: "unlimited", "infinity", "∞""#,
    );
}

#[test]
fn machine_ids_must_be_unique_uuids() {
    assert_clean(&with(
        control_plane(),
        "machines",
        json!([
            "urn:uuid:11111111-1111-4111-8111-111111111111",
            "{22222222-2222-4222-8222-222222222222}",
            "33333333333343338333333333333333"
        ]),
    ));
    assert_only_error(
        &with(
            control_plane(),
            "machines",
            json!(["11111111-1111-4111-8111-111111111111", "node-1"]),
        ),
        r#"spec.machines[1]: Invalid value: "node-1": machine ID must be a UUID"#,
    );
    let id = "11111111-1111-4111-8111-111111111111";
    assert_eq!(
        errors(&with(
            with(workers(), "machineClass", Value::Null),
            "machines",
            json!([id, "22222222-2222-4222-8222-222222222222", id])
        )),
        vec![
            format!(r#"spec.machines[0]: Duplicate value: "{id}""#),
            format!(r#"spec.machines[2]: Duplicate value: "{id}""#),
        ]
    );
}

#[test]
fn machine_set_patches_and_kernel_args() {
    assert_only_error(
        &with(control_plane(), "patches", json!([{}])),
        "spec.patches[0]: Required value: patch requires exactly one of file or inline",
    );
    assert_clean(&with(
        control_plane(),
        "kernelArgs",
        json!(["console=ttyS0"]),
    ));
    assert_only_error(
        &with(workers(), "kernelArgs", json!(["console=ttyS0", "quiet"])),
        r#"spec.kernelArgs: Invalid value: "console=ttyS0 quiet": kernelArgs are supported only for static machine sets"#,
    );
    assert!(
        run(&with(control_plane(), "kernelArgs", json!(["a"])))
            .warnings
            .is_empty(),
        "machine sets never warn"
    );
}

#[test]
fn workers_reserved_name() {
    assert_clean(&with(workers(), "workerSetName", json!("gpu-workers")));
    assert_only_error(
        &with(workers(), "workerSetName", json!("control-planes")),
        r#"spec.workerSetName: Invalid value: "control-planes": workerSetName is reserved by Omni"#,
    );
    // An empty workerSetName falls back to metadata.name, checked only at render time.
    let mut obj = workers();
    obj["metadata"]["name"] = json!("control-planes");
    assert_clean(&obj);
    let w: api::OmniWorkers = serde_json::from_value(obj).unwrap();
    assert_eq!(w.effective_worker_set_name(), "control-planes");
}

// ---- OmniMachine (docs/parity.md#admission-messages) ----

#[test]
fn machine_id_must_be_a_uuid() {
    let mut named = machine();
    named["metadata"]["name"] = json!("edge-worker-0");
    assert_only_error(
        &named,
        r#"spec.machineID: Invalid value: "edge-worker-0": machineID must be a UUID; set spec.machineID when metadata.name is not the Omni machine ID"#,
    );
    let fixed = with(
        named,
        "machineID",
        json!("22222222-2222-4222-8222-222222222222"),
    );
    assert_clean(&fixed);
    let m: api::OmniMachine = serde_json::from_value(fixed).unwrap();
    assert_eq!(
        m.effective_machine_id(),
        "22222222-2222-4222-8222-222222222222"
    );
    assert_only_error(
        &with(machine(), "patches", json!([{"file": "a", "inline": {}}])),
        r#"spec.patches[0]: Invalid value: "a": patch must not set both file and inline"#,
    );
}

// ---- OmniKubeconfigExport (docs/parity.md#admission-messages) ----

#[test]
fn export_references_must_not_be_blank() {
    assert_only_error(
        &with(export(), "clusterRef.name", json!(" ")),
        "spec.clusterRef.name: Required value: clusterRef.name is required",
    );
    assert_only_error(
        &with(export(), "targetSecretRef.name", json!("")),
        "spec.targetSecretRef.name: Required value: target Secret name is required",
    );
    assert_only_error(
        &with(export(), "targetSecretRef.namespace", json!(" ")),
        "spec.targetSecretRef.namespace: Required value: target Secret namespace must not be blank",
    );
    assert_clean(&with(export(), "targetSecretRef.namespace", json!("other")));
    assert_only_error(
        &with(export(), "contextNamespace", json!("")),
        "spec.contextNamespace: Required value: context namespace must not be blank",
    );
    assert_clean(&with(export(), "contextNamespace", json!("apps")));
    assert_only_error(
        &with(export(), "targetSecretRef.key", json!(" ")),
        "spec.targetSecretRef.key: Required value: target Secret key must not be blank",
    );
}

#[test]
fn export_service_account() {
    assert_only_error(
        &with(export(), "serviceAccount.user", json!("")),
        "spec.serviceAccount.user: Required value: service account user is required",
    );
    assert_only_error(
        &with(export(), "serviceAccount.groups", json!([])),
        "spec.serviceAccount.groups: Required value: at least one service account group is required",
    );
    assert_only_error(
        &with(export(), "serviceAccount.groups", json!(["a", " "])),
        "spec.serviceAccount.groups[1]: Required value: service account group must not be blank",
    );
    assert_eq!(
        errors(&with(
            export(),
            "serviceAccount.groups",
            json!(["ops", "dev", " ops"])
        )),
        vec![
            r#"spec.serviceAccount.groups[0]: Duplicate value: "ops""#,
            r#"spec.serviceAccount.groups[2]: Duplicate value: "ops""#
        ]
    );
}

#[test]
fn export_cluster_admin_needs_opt_in() {
    let admin = with(
        export(),
        "serviceAccount.groups",
        json!(["ops", "system:masters"]),
    );
    let v = run(&admin);
    assert_eq!(
        v.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec![
            "spec.serviceAccount.groups[1]: Forbidden: system:masters requires serviceAccount.allowClusterAdmin: true"
        ]
    );
    assert!(v.warnings.is_empty());
    let v = run(&with(
        admin,
        "serviceAccount.allowClusterAdmin",
        json!(true),
    ));
    assert!(v.is_valid());
    assert_eq!(
        v.warnings,
        vec!["system:masters exports a cluster-admin kubeconfig into the management cluster"]
    );
    // Opting in without asking for the group is not worth a warning.
    assert!(
        run(&with(
            export(),
            "serviceAccount.allowClusterAdmin",
            json!(true)
        ))
        .warnings
        .is_empty()
    );
}

#[test]
fn export_durations() {
    assert_clean(&with(export(), "renewBefore", Value::Null));
    assert_only_error(
        &with(export(), "ttl", json!("0s")),
        r#"spec.ttl: Invalid value: "0s": ttl must be greater than zero"#,
    );
    assert_only_error(
        &with(export(), "ttl", json!("-1h")),
        r#"spec.ttl: Invalid value: "-1h": ttl must be greater than zero"#,
    );
    assert_only_error(
        &with(export(), "ttl", json!("1d")),
        r#"spec.ttl: Invalid value: "1d": ttl must be a duration such as 24h, 1h30m or 90s"#,
    );
    assert_only_error(
        &with(export(), "renewBefore", json!("0")),
        r#"spec.renewBefore: Invalid value: "0": renewBefore must be greater than zero"#,
    );
    assert_only_error(
        &with(export(), "renewBefore", json!("24h")),
        r#"spec.renewBefore: Invalid value: "24h": renewBefore must be less than ttl"#,
    );
    assert_only_error(
        &with(export(), "renewBefore", json!("1440m1s")),
        r#"spec.renewBefore: Invalid value: "1440m1s": renewBefore must be less than ttl"#,
    );
    // The rotation-interval floor (10s between rotations) is covered in api_bounds.rs.
    assert_clean(&with(export(), "renewBefore", json!("23h59m50s")));
    assert_only_error(
        &with(export(), "renewBefore", json!("4 hours")),
        r#"spec.renewBefore: Invalid value: "4 hours": renewBefore must be a duration such as 24h, 1h30m or 90s"#,
    );
}

#[test]
fn export_deletion_policy() {
    assert_clean(&with(export(), "deletionPolicy", json!("Orphan")));
    assert_schema_refuses(
        &with(export(), "deletionPolicy", json!("")),
        r#"spec.deletionPolicy: Unsupported value: "": supported values: "Delete", "Orphan""#,
    );
    assert_schema_refuses(
        &with(export(), "deletionPolicy", json!("delete")),
        r#"spec.deletionPolicy: Unsupported value: "delete": supported values: "Delete", "Orphan""#,
    );
}

#[test]
fn export_format_is_one_of_the_three_shapes_and_owns_its_keys() {
    for format in ["Kubeconfig", "ArgoCDCluster", "FluxValue"] {
        assert_clean(&with(export(), "format", json!(format)));
    }
    assert_schema_refuses(
        &with(export(), "format", json!("argocd")),
        r#"spec.format: Unsupported value: "argocd": supported values: "Kubeconfig", "ArgoCDCluster", "FluxValue", "ClusterAPI""#,
    );
    // The key names the kubeconfig in the Kubeconfig shape only.
    let keyed = with(
        export(),
        "targetSecretRef.key",
        json!("workload.kubeconfig"),
    );
    assert_clean(&with(keyed.clone(), "format", json!("Kubeconfig")));
    assert_only_error(
        &with(keyed.clone(), "format", json!("FluxValue")),
        r#"spec.targetSecretRef.key: Invalid value: "workload.kubeconfig": targetSecretRef.key applies only to format Kubeconfig; format FluxValue writes the keys its consumer reads"#,
    );
}

/// The controller checks stored exports with the webhook's own rules (see the unit tests of
/// `api::kubeconfig_export::validate`); what remains of its own are the effective defaults.
#[test]
fn export_defaults_the_key_and_the_namespace() {
    let e: api::OmniKubeconfigExport = serde_json::from_value(export()).unwrap();
    assert_eq!(e.effective_target_key(), "kubeconfig");
    assert_eq!(
        e.effective_target_namespace(),
        "omni-cluster-operator-system"
    );
    assert_eq!(e.spec.ttl.duration().unwrap().to_string(), "24h0m0s");
}

// ---- OmniHelmRelease (docs/parity.md#admission-messages) ----

#[test]
fn helm_release_rules() {
    let cases: &[(&str, Value, &str)] = &[
        (
            "clusterRef.name",
            json!(""),
            "spec.clusterRef.name: Required value: clusterRef.name is required",
        ),
        (
            "kubeconfigSecretRef.name",
            json!(" "),
            "spec.kubeconfigSecretRef.name: Required value: kubeconfig Secret name is required",
        ),
        (
            "kubeconfigSecretRef.key",
            json!(""),
            "spec.kubeconfigSecretRef.key: Required value: kubeconfig Secret key must not be blank",
        ),
        (
            "releaseName",
            json!(" ms"),
            r#"spec.releaseName: Invalid value: " ms": releaseName must not include leading or trailing whitespace"#,
        ),
        (
            "namespace",
            json!("kube-system "),
            r#"spec.namespace: Invalid value: "kube-system ": namespace must not include leading or trailing whitespace"#,
        ),
        (
            "chart.repository",
            json!(""),
            "spec.chart.repository: Required value: chart.repository is required unless chart.chart is an oci:// reference",
        ),
        (
            "chart.repository",
            json!("charts.example.com"),
            r#"spec.chart.repository: Invalid value: "charts.example.com": chart.repository must be an absolute URL"#,
        ),
        (
            "chart.chart",
            json!(" "),
            "spec.chart.chart: Required value: chart.chart is required",
        ),
        (
            "chart.version",
            json!(""),
            "spec.chart.version: Required value: chart.version is required",
        ),
        (
            "chart.version",
            json!("!=1.0.0"),
            r#"spec.chart.version: Invalid value: "!=1.0.0": chart.version must be a version or a range of versions (e.g. 1.2.3, >=1.2 <2, 1.x, ^1.2, ~1.2.3)"#,
        ),
        (
            "timeout",
            json!("0s"),
            r#"spec.timeout: Invalid value: "0s": timeout must be greater than zero"#,
        ),
        (
            "timeout",
            json!("5 minutes"),
            r#"spec.timeout: Invalid value: "5 minutes": timeout must be a duration such as 24h, 1h30m or 90s"#,
        ),
        (
            "maxHistory",
            json!(-1),
            r#"spec.maxHistory: Invalid value: "-1": maxHistory must not be negative"#,
        ),
        (
            "chart.values",
            json!([1, 2]),
            r#"spec.chart.values: Invalid value: "[1,2]": helm release values must be a JSON object"#,
        ),
        (
            "chart.values",
            json!(null),
            r#"spec.chart.values: Invalid value: "null": helm release values must be a JSON object"#,
        ),
    ];
    for (path, value, want) in cases {
        let obj = if value.is_null() {
            let mut o = helm_release();
            o["spec"]["chart"]["values"] = Value::Null;
            o
        } else {
            with(helm_release(), path, value.clone())
        };
        assert_only_error(&obj, want);
    }
    for (path, value) in [
        ("releaseName", json!("metrics-server")),
        ("namespace", json!("kube-system")),
        ("chart.chart", json!("oci://ghcr.io/example/charts/app")),
        ("timeout", json!("90s")),
        ("maxHistory", json!(0)),
        ("deletionPolicy", json!("Orphan")),
        ("chart.values", json!({})),
    ] {
        assert_clean(&with(helm_release(), path, value));
    }
    for value in ["Delete", ""] {
        assert_schema_refuses(
            &with(helm_release(), "deletionPolicy", json!(value)),
            &format!(
                r#"spec.deletionPolicy: Unsupported value: "{value}": supported values: "Uninstall", "Orphan""#
            ),
        );
    }
}

/// Admission warns only about what the user should change: a valid release, or sync, is
/// applied without a warning (the original warned on every apply that they write to the
/// workload cluster, which is what they are for).
#[test]
fn a_valid_release_or_sync_is_applied_without_a_warning() {
    assert_eq!(run(&helm_release()).warnings, Vec::<String>::new());
    assert_eq!(run(&secret_sync()).warnings, Vec::<String>::new());
}

// ---- OmniSecretSync (docs/parity.md#admission-messages) ----

#[test]
fn secret_sync_rules() {
    let cases: &[(&str, Value, &str)] = &[
        (
            "clusterRef.name",
            json!(""),
            "spec.clusterRef.name: Required value: clusterRef.name is required",
        ),
        (
            "kubeconfigSecretRef.name",
            json!(""),
            "spec.kubeconfigSecretRef.name: Required value: kubeconfig Secret name is required",
        ),
        (
            "kubeconfigSecretRef.key",
            json!(" "),
            "spec.kubeconfigSecretRef.key: Required value: kubeconfig Secret key must not be blank",
        ),
        (
            "sourceSecretRef.name",
            json!(""),
            "spec.sourceSecretRef.name: Required value: source Secret name is required",
        ),
        (
            "targetSecretRef.name",
            json!(""),
            "spec.targetSecretRef.name: Required value: target Secret name is required",
        ),
        (
            "targetSecretRef.namespace",
            json!(" "),
            "spec.targetSecretRef.namespace: Required value: target Secret namespace is required",
        ),
        (
            "type",
            json!(" "),
            r#"spec.type: Invalid value: " ": type must not be blank"#,
        ),
    ];
    for (path, value, want) in cases {
        assert_only_error(&with(secret_sync(), path, value.clone()), want);
    }
    for value in ["", "Uninstall"] {
        assert_schema_refuses(
            &with(secret_sync(), "deletionPolicy", json!(value)),
            &format!(
                r#"spec.deletionPolicy: Unsupported value: "{value}": supported values: "Delete", "Orphan""#
            ),
        );
    }
    assert_clean(&with(
        secret_sync(),
        "type",
        json!("kubernetes.io/dockerconfigjson"),
    ));
}

#[test]
fn secret_sync_kubeconfig_ref_is_immutable() {
    let old = secret_sync();
    assert!(
        run_update(
            &old,
            &with(secret_sync(), "targetSecretRef.name", json!("other"))
        )
        .is_valid()
    );
    let moved = with(
        with(
            secret_sync(),
            "kubeconfigSecretRef.name",
            json!("other-cluster"),
        ),
        "kubeconfigSecretRef.key",
        json!("k"),
    );
    assert_eq!(
        run_update(&old, &moved)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![
            "spec.kubeconfigSecretRef.name: Forbidden: kubeconfigSecretRef.name is immutable",
            "spec.kubeconfigSecretRef.key: Forbidden: kubeconfigSecretRef.key is immutable",
        ]
    );
    // Spelling out the default key is not a change.
    assert!(
        run_update(
            &old,
            &with(
                secret_sync(),
                "kubeconfigSecretRef.key",
                json!("kubeconfig")
            )
        )
        .is_valid()
    );
    // Creation has no old object, so any reference is fine.
    assert!(run(&moved).is_valid());
}

#[test]
fn helm_release_name_and_deletion_policy_have_defaults() {
    let r: api::OmniHelmRelease = serde_json::from_value(helm_release()).unwrap();
    assert_eq!(r.effective_release_name(), "edge-ms");
    assert_eq!(
        r.spec.deletion_policy,
        api::helm_release::HelmDeletionPolicy::Uninstall
    );
}

// ---- dynamic dispatch ----

#[test]
fn unknown_kind_and_decode_failures_are_errors_not_panics() {
    assert!(
        matches!(api::validate_dynamic("OmniThing", &connection(), None), Err(ValidateError::UnknownKind(k)) if k == "OmniThing")
    );
    let missing_ttl = with(export(), "ttl", Value::Null);
    match api::validate_dynamic("OmniKubeconfigExport", &missing_ttl, None) {
        Err(ValidateError::Decode { kind, message }) => {
            assert_eq!(kind, "OmniKubeconfigExport");
            assert!(message.contains("ttl"), "{message}");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
    let wrong_type = with(workers(), "machines", json!("not-a-list"));
    assert!(matches!(
        api::validate_dynamic("OmniWorkers", &wrong_type, None),
        Err(ValidateError::Decode { .. })
    ));
    let err = api::validate_dynamic("OmniWorkers", &wrong_type, None)
        .unwrap_err()
        .to_string();
    // The machine-set fields are flattened into the spec, so the path ends at `spec`.
    assert!(
        err.starts_with("cannot decode OmniWorkers: spec: invalid type"),
        "the message names where the error is: {err}"
    );
}

#[test]
fn cluster_name_is_immutable_once_the_omni_cluster_is_managed() {
    let mut old = with(cluster(), "clusterName", json!("prod"));
    // Before the controller recorded a name, a change is still allowed.
    let renamed = with(cluster(), "clusterName", json!("staging"));
    assert!(run_update(&old, &renamed).errors.is_empty());
    old["status"] = json!({"clusterName": "prod"});
    let errors: Vec<String> = run_update(&old, &renamed)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        vec![
            "spec.clusterName: Forbidden: clusterName is immutable once the Omni cluster is managed (status.clusterName is \"prod\"); create a new OmniCluster instead"
                .to_string()
        ]
    );
    // Dropping clusterName falls back to metadata.name: also a rename.
    let unnamed = with(cluster(), "clusterName", Value::Null);
    assert_eq!(run_update(&old, &unnamed).errors.len(), 1);
    // Unchanged name, other changes: fine.
    let same = with(old.clone(), "syncInterval", json!("10m"));
    assert!(run_update(&old, &same).errors.is_empty());
}

#[test]
fn patches_omni_refuses_are_refused_at_admission_with_omnis_reason() {
    let secret_key = "LS0tLS1CRUdJTiBQUklWQVRF";
    assert_eq!(
        errors(&with(
            cluster(),
            "patches",
            json!([
                {"name": "ca", "inline": {"cluster": {"ca": {"crt": "x", "key": secret_key}}}},
                {"name": "sa", "inline": {"cluster": {"serviceAccount": {"key": secret_key}}}},
                {"name": "apiserver-ca", "inline": "apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\n"},
                {"name": "aggregator-ca", "inline": [{"machine": {}}, {"apiVersion": "v1alpha1", "kind": "KubeAggregatorCAConfig"}]},
                {"name": "issuer", "inline": {"apiVersion": "v1alpha1", "kind": "KubeServiceAccountConfig", "issuer": {"privateKey": secret_key}}},
            ])
        )),
        vec![
            r#"spec.patches[0].inline: Forbidden: overriding "cluster.ca" is not allowed in the config patch"#,
            r#"spec.patches[1].inline: Forbidden: overriding "cluster.serviceAccount" is not allowed in the config patch"#,
            r#"spec.patches[2].inline: Forbidden: the "KubeAPIServerCAConfig" document is not allowed in the config patch"#,
            r#"spec.patches[3].inline: Forbidden: the "KubeAggregatorCAConfig" document is not allowed in the config patch"#,
            r#"spec.patches[4].inline: Forbidden: overriding "issuer.privateKey" is not allowed in the config patch"#,
        ]
    );
    // Machine sets and machines follow the same rules; allowed neighbours pass.
    assert_eq!(
        errors(&with(
            machine(),
            "patches",
            json!([{"name": "ca", "inline": {"cluster": {"ca": {"crt": "x"}}}}])
        )),
        vec![
            r#"spec.patches[0].inline: Forbidden: overriding "cluster.ca" is not allowed in the config patch"#
        ]
    );
    assert_clean(&with(
        cluster(),
        "patches",
        json!([{"name": "sa-issuer", "inline": {"apiVersion": "v1alpha1", "kind": "KubeServiceAccountConfig", "issuer": {"url": "https://x"}}}]),
    ));
}

#[test]
fn machine_install_needs_exactly_one_of_disk_and_selector() {
    assert_clean(&with(machine(), "install", json!({"disk": "/dev/sda"})));
    assert_clean(&with(
        machine(),
        "install",
        json!({"diskSelector": "disk.transport == \"nvme\""}),
    ));
    assert_eq!(
        errors(&with(machine(), "install", json!({}))),
        vec!["spec.install: Required value: install requires exactly one of disk or diskSelector"]
    );
    assert_eq!(
        errors(&with(
            machine(),
            "install",
            json!({"disk": "/dev/sda", "diskSelector": "true"})
        )),
        vec![
            r#"spec.install.diskSelector: Invalid value: "true": install.disk and install.diskSelector are mutually exclusive"#
        ]
    );
}

fn job(namespace: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": namespace},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
               "containers": [{"name": "check", "image": "busybox", "command": ["true"]}]}}}})
}

#[test]
fn cluster_health_checks_follow_omni_rules() {
    assert_clean(&with(
        cluster(),
        "kubernetes.healthChecks",
        json!([
            {"name": "dns", "job": job("checks"), "interval": "1m"},
            {"idOverride": "custom-check", "file": "checks/etcd.yaml"},
            {"name": "text", "job": "apiVersion: batch/v1\nkind: Job\n", "interval": "0"},
        ]),
    ));
    assert_eq!(
        errors(&with(
            cluster(),
            "kubernetes.healthChecks",
            json!([
                {"job": job("checks")},
                {"name": "both", "job": job("checks"), "file": "a.yaml"},
                {"name": "neither"},
                {"name": "pod", "job": {"apiVersion": "v1", "kind": "Pod"}},
                {"name": "fast", "job": job("checks"), "interval": "2s"},
                {"name": "Upper", "job": job("checks")},
                {"name": "dns", "job": job("checks")},
                {"idOverride": "cluster-edge-dns", "job": job("checks")},
                {"name": "up", "file": "../etc/passwd"},
            ])
        )),
        vec![
            "spec.kubernetes.healthChecks[0].name: Required value: health check requires name or idOverride",
            r#"spec.kubernetes.healthChecks[1]: Invalid value: "a.yaml": health check must not set both job and file"#,
            "spec.kubernetes.healthChecks[2]: Required value: health check requires exactly one of job or file",
            r#"spec.kubernetes.healthChecks[3].job.kind: Invalid value: "Pod": healthcheck job manifest must be a Kubernetes Job (kind: Job)"#,
            r#"spec.kubernetes.healthChecks[4].interval: Invalid value: "2s": healthcheck interval must be at least 5s"#,
            r#"spec.kubernetes.healthChecks[5].name: Invalid value: "cluster-edge-Upper": healthcheck ID "cluster-edge-Upper" cannot be used to build the runner name "omni-healthcheck-cluster-edge-Upper": it must be a lowercase RFC 1123 subdomain"#,
            r#"spec.kubernetes.healthChecks[7].name: Duplicate value: "cluster-edge-dns""#,
            r#"spec.kubernetes.healthChecks[8].file: Invalid value: "../etc/passwd": must not contain ".." segments: files are read only inside the operator's template root"#,
        ]
    );
}

#[test]
fn cluster_manifests_take_labels_and_a_yaml_string() {
    assert_clean(&with(
        cluster(),
        "kubernetes.manifests",
        json!([{"name": "s", "labels": {"a": "b"}, "annotations": {"c": "d"},
                "inline": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n"}]),
    ));
    assert_eq!(
        errors(&with(
            cluster(),
            "kubernetes.manifests",
            json!([
                {"name": "blank", "inline": "  "},
                {"name": "secret", "inline": "apiVersion: v1\nkind: Secret\n---\nstringData: {password: hunter2}\n"},
                {"name": "number", "inline": 3},
                {"name": "list", "inline": [{"kind": "Namespace"}]},
            ])
        )),
        vec![
            "spec.kubernetes.manifests[0]: Required value: manifest requires exactly one of file or inline",
            r#"spec.kubernetes.manifests[1].inline: Invalid value: "": document 1 is not a Kubernetes object (apiVersion and kind are required)"#,
            r#"spec.kubernetes.manifests[2].inline: Invalid value: "": inline must be a list of Kubernetes objects or a multi-document YAML string"#,
            r#"spec.kubernetes.manifests[3].inline: Invalid value: "": document 0 is not a Kubernetes object (apiVersion and kind are required)"#,
        ]
    );
}

#[test]
fn a_patch_given_as_a_yaml_string_is_checked_like_a_mapping() {
    assert_clean(&with(
        cluster(),
        "patches",
        json!([{"name": "text", "inline": "machine:\n  network:\n    hostname: a\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n"}]),
    ));
    assert_only_error(
        &with(
            cluster(),
            "patches",
            json!([{"name": "ca", "inline": "machine: {}\n---\napiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\n"}]),
        ),
        r#"spec.patches[0].inline: Forbidden: the "KubeAPIServerCAConfig" document is not allowed in the config patch"#,
    );
}

#[test]
fn disabling_the_public_discovery_service_follows_omni_rules() {
    let features = |talos: &str, embedded: bool| {
        with(
            with(cluster(), "talos.version", json!(talos)),
            "features",
            json!({"disablePublicDiscoveryService": true, "useEmbeddedDiscoveryService": embedded}),
        )
    };
    assert_clean(&features("v1.14.0", true));
    assert_clean(&with(
        cluster(),
        "features",
        json!({"disablePublicDiscoveryService": false, "enableNodeAuditSkip": true}),
    ));
    assert_eq!(
        errors(&features("v1.13.2", false)),
        vec![
            r#"spec.features.disablePublicDiscoveryService: Invalid value: "true": the public discovery service can only be configured for clusters created with Talos 1.14 or newer (spec.talos.version is v1.13.2)"#,
            r#"spec.features.disablePublicDiscoveryService: Invalid value: "true": the discovery service cannot be disabled entirely: keep the public discovery service enabled or enable the embedded discovery service"#,
        ]
    );
}

#[test]
fn talos_version_rules_of_omni_1_10() {
    // A new cluster needs Talos 1.9.0 or newer (Omni v1.10's minimum).
    assert_clean(&with(cluster(), "talos.version", json!("v1.9.0")));
    assert_only_error(
        &with(cluster(), "talos.version", json!("v1.8.3")),
        r#"spec.talos.version: Invalid value: "v1.8.3": talos version "1.8.3" is no longer supported: Omni refuses Talos releases older than v1.9.0 for new clusters"#,
    );
    // Adopting an existing Omni cluster that runs an old release only warns.
    let mut adopting = with(cluster(), "talos.version", json!("v1.8.3"));
    adopting["metadata"]["annotations"] = json!({"omni.texashpc.com/adopt": "true"});
    let v = run(&adopting);
    assert!(v.is_valid(), "{:?}", v.errors);
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    // Updates keep a deprecated release (Omni allows patch upgrades within it) ...
    let old = with(cluster(), "talos.version", json!("v1.8.2"));
    let new = with(cluster(), "talos.version", json!("v1.8.3"));
    assert!(run_update(&old, &new).is_valid());
    // ... and a lower minor only warns: Omni decides against the version the cluster was
    // created with, which the operator cannot see.
    let old = with(cluster(), "talos.version", json!("v1.13.2"));
    let new = with(cluster(), "talos.version", json!("v1.10.6"));
    let v = run_update(&old, &new);
    assert!(v.is_valid(), "{:?}", v.errors);
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("lowers the Talos minor version")),
        "{:?}",
        v.warnings
    );
}
