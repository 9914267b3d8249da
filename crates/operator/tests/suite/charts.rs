//! The Helm charts against the code they package: the CRD chart must hold exactly what
//! `omni-operator crds` generates, and the operator chart's webhook configuration, RBAC and
//! container arguments must match the kinds, webhook paths and flags of the binary.
//!
//! Rendering uses the real helm binary: `$HELM_BIN`, else `<repo>/.cache/test-tools/bin/helm`
//! (installed by `scripts/install-test-tools`).

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use omni_operator::api;
use omni_operator::process::webhook;
use serde_json::Value;
use support::of_kind;

const NAMESPACE: &str = "omni-cluster-operator-system";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn crd_dir() -> PathBuf {
    repo().join("charts/omni-cluster-operator-crds/crds")
}

fn operator_chart() -> PathBuf {
    repo().join("charts/omni-cluster-operator")
}

/// `helm template` of the operator chart with `--set` arguments, as parsed documents.
fn render(sets: &[&str]) -> Vec<Value> {
    support::render_operator_chart(NAMESPACE, sets)
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn manager_args(docs: &[Value]) -> Vec<String> {
    let deployments = of_kind(docs, "Deployment");
    assert_eq!(deployments.len(), 1, "one Deployment");
    let containers = deployments[0]["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    let manager = containers
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("manager container");
    strings(&manager["args"])
}

#[test]
fn crd_chart_matches_generated_crds() {
    let regenerate = "regenerate with: cargo run -p omni-operator -- crds --output-dir charts/omni-cluster-operator-crds/crds";
    let crds = api::crds();
    assert_eq!(crds.len(), 11, "eleven kinds");
    let mut expected_files = BTreeSet::new();
    for crd in &crds {
        let name = api::crd_file_name(crd);
        let path = crd_dir().join(&name);
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} unreadable ({e}); {regenerate}", path.display()));
        let generated = api::crd_yaml(crd).expect("CRD serialises");
        assert!(
            on_disk == generated,
            "{} is out of date with the API types; {regenerate}",
            path.display()
        );
        expected_files.insert(name);
    }
    let present: BTreeSet<String> = std::fs::read_dir(crd_dir())
        .expect("crds directory")
        .map(|entry| {
            entry
                .expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let extra: Vec<_> = present.difference(&expected_files).collect();
    assert!(
        extra.is_empty(),
        "files in the CRD chart that no kind generates: {extra:?}; delete them and {regenerate}"
    );
}

#[test]
fn webhook_configuration_validates_every_kind_at_the_served_path() {
    let docs = render(&[]);
    let configs = of_kind(&docs, "ValidatingWebhookConfiguration");
    assert_eq!(configs.len(), 1);
    let hooks = configs[0]["webhooks"].as_array().expect("webhooks");
    assert_eq!(hooks.len(), api::KINDS.len());
    for crd in api::crds() {
        let kind = &crd.spec.names.kind;
        let path = webhook::path_for(kind);
        let hook = hooks
            .iter()
            .find(|h| h["clientConfig"]["service"]["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no webhook entry for {kind} at {path}"));
        assert!(
            webhook::kind_for_segment(&path) == Some(kind.as_str()),
            "the server routes {path} to {kind}"
        );
        let rules = hook["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 1, "{kind}");
        assert_eq!(
            strings(&rules[0]["resources"]),
            [crd.spec.names.plural.as_str()]
        );
        assert_eq!(strings(&rules[0]["apiGroups"]), [api::GROUP]);
        assert_eq!(strings(&rules[0]["apiVersions"]), [api::VERSION]);
        assert_eq!(strings(&rules[0]["operations"]), ["CREATE", "UPDATE"]);
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(strings(&hook["admissionReviewVersions"]), ["v1"]);
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(
            hook["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], NAMESPACE,
            "namespaced mode validates only the release namespace"
        );
    }
}

#[test]
fn manager_rbac_covers_every_kind_in_both_modes() {
    for (sets, role_kind) in [
        (&[][..], "Role"),
        (&["watch.clusterWide=true"][..], "ClusterRole"),
    ] {
        let docs = render(sets);
        let role = of_kind(&docs, role_kind)
            .into_iter()
            .find(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-manager-role"))
            })
            .unwrap_or_else(|| panic!("no manager {role_kind} with {sets:?}"));
        let granted = |group: &str, resource: &str, verb: &str| {
            role["rules"].as_array().expect("rules").iter().any(|rule| {
                strings(&rule["apiGroups"]).iter().any(|g| g == group)
                    && strings(&rule["resources"]).iter().any(|r| r == resource)
                    && strings(&rule["verbs"]).iter().any(|v| v == verb)
            })
        };
        for crd in api::crds() {
            let plural = &crd.spec.names.plural;
            for verb in ["get", "list", "watch", "update", "patch"] {
                assert!(
                    granted(api::GROUP, plural, verb),
                    "{plural} {verb} ({sets:?})"
                );
            }
            assert!(granted(api::GROUP, &format!("{plural}/status"), "patch"));
            assert!(granted(
                api::GROUP,
                &format!("{plural}/finalizers"),
                "update"
            ));
        }
        for verb in ["get", "create", "update", "delete", "watch"] {
            assert!(granted("", "secrets", verb), "secrets {verb}");
        }
        // The ConfigMaps of chart values are watched and read, never written.
        for verb in ["get", "list", "watch"] {
            assert!(granted("", "configmaps", verb), "configmaps {verb}");
        }
        for verb in ["create", "update", "patch", "delete"] {
            assert!(!granted("", "configmaps", verb), "configmaps {verb}");
        }
        assert!(granted("", "events", "create"));
        assert!(granted("events.k8s.io", "events", "create"));
        let binding_kind = format!("{role_kind}Binding");
        assert!(
            of_kind(&docs, &binding_kind)
                .iter()
                .any(|b| b["roleRef"]["name"] == role["metadata"]["name"]),
            "manager {binding_kind} ({sets:?})"
        );
    }
}

/// The operator may impersonate ServiceAccounts (to read what objects reference as their
/// authors), only those named when a list is given, and nothing else: no users, no groups.
#[test]
fn the_operator_may_impersonate_service_accounts_only() {
    let impersonation_rules = |sets: &[&str], kind: &str| -> Vec<Value> {
        let docs = render(sets);
        of_kind(&docs, kind)
            .into_iter()
            .filter(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-manager-role"))
            })
            .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
            .filter(|rule| strings(&rule["verbs"]).iter().any(|v| v == "impersonate"))
            .collect()
    };
    for (sets, kind) in [
        (&[][..], "Role"),
        (&["watch.clusterWide=true"][..], "ClusterRole"),
    ] {
        let rules = impersonation_rules(sets, kind);
        assert_eq!(rules.len(), 1, "{sets:?}: {rules:?}");
        assert_eq!(strings(&rules[0]["resources"]), ["serviceaccounts"]);
        assert_eq!(strings(&rules[0]["apiGroups"]), [""]);
        assert!(rules[0]["resourceNames"].is_null());
    }
    let named = impersonation_rules(&["impersonation.serviceAccountNames={omni-tenant}"], "Role");
    assert_eq!(strings(&named[0]["resourceNames"]), ["omni-tenant"]);
    assert!(impersonation_rules(&["impersonation.enabled=false"], "Role").is_empty());
    let (ok, _, stderr) = helm(&[
        "template",
        "x",
        &operator_chart().to_string_lossy(),
        "--set",
        "impersonation.enabled=false",
        "--set",
        "impersonation.defaultServiceAccount=tenant",
    ]);
    assert!(!ok && stderr.contains("impersonation.enabled"), "{stderr}");
}

#[test]
fn webhook_switch_and_port_reach_the_server() {
    let off = render(&["webhook.enabled=false"]);
    assert!(of_kind(&off, "ValidatingWebhookConfiguration").is_empty());
    assert!(of_kind(&off, "Certificate").is_empty());
    assert!(of_kind(&off, "Issuer").is_empty());
    assert!(!of_kind(&off, "Service").iter().any(|s| {
        s["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-webhook-service"))
    }));
    let args = manager_args(&off);
    assert!(
        args.contains(&"--webhook-enabled=false".to_string()),
        "{args:?}"
    );

    let moved = render(&["webhook.port=10250"]);
    let args = manager_args(&moved);
    assert!(
        args.contains(&"--webhook-bind-address=:10250".to_string()),
        "{args:?}"
    );
}

/// The Deployment's arguments must be accepted by `omni-operator run` exactly as the binary
/// parses them, in each supported configuration.
#[test]
fn deployment_arguments_parse_as_run_flags() {
    use clap::Args as _;
    for sets in [
        &[][..],
        &["webhook.enabled=false"][..],
        &["watch.clusterWide=true"][..],
        &["metrics.enabled=false", "helmBinary=/usr/local/bin/helm"][..],
        &["helmMaxConcurrent=8", "secretSyncResyncInterval=0"][..],
        &["kubeApiMaxInFlight=64", "maxConcurrentReconciles=0"][..],
        &["metrics.secure=true"][..],
        &["metrics.secure=true", "metrics.certSecretName=metrics-tls"][..],
        &[
            "watch.clusterWide=true",
            "secretAccess.requireOptIn=true",
            "secretAccess.allowCrossNamespaceExport=true",
        ][..],
        // The lockdown profile of the chart README.
        &[
            "impersonation.defaultServiceAccount=omni-tenant",
            "impersonation.serviceAccountNames={omni-tenant}",
            "exportPolicy.allowClusterAdmin=false",
            "exportPolicy.maxTTL=24h",
            "exportPolicy.privilegedIdentities={platform:admins,oidc:ops}",
            "chartSources.denyPrivateNetworks=true",
            "chartSources.allowInsecure=false",
            "chartSources.allowedHosts={charts.example.com,*.registry.example.com:8443}",
            "timeouts.read=20s",
            "maxReconcilesPerTarget=8",
        ][..],
    ] {
        let docs = render(sets);
        let mut argv = vec!["omni-operator".to_string()];
        argv.extend(manager_args(&docs));
        assert_eq!(argv.get(1).map(String::as_str), Some("run"));
        // The global --log-format flag of the binary (declared on its top-level parser).
        let command = clap::Command::new("omni-operator")
            .arg(
                clap::Arg::new("log-format")
                    .long("log-format")
                    .global(true)
                    .value_parser(["json", "text"]),
            )
            .subcommand(omni_operator::cli::run::Args::augment_args(
                clap::Command::new("run"),
            ));
        for (value, flag) in [
            ("secretAccess.requireOptIn=true", "--require-secret-opt-in"),
            (
                "secretAccess.allowCrossNamespaceExport=true",
                "--allow-cross-namespace-export",
            ),
        ] {
            assert_eq!(
                sets.contains(&value),
                argv.contains(&flag.to_string()),
                "{flag}"
            );
        }
        let cluster_wide = sets.contains(&"watch.clusterWide=true");
        if !cluster_wide {
            // The Deployment provides the namespace through POD_NAMESPACE (the flag's env var).
            argv.push(format!("--namespace={NAMESPACE}"));
        }
        if let Err(error) = command.try_get_matches_from(&argv) {
            panic!(
                "`omni-operator run` rejects the chart's arguments {argv:?} ({sets:?}): {error}"
            );
        }
    }
}

/// Leaf keys of `values.schema.json` (objects with declared properties are descended into).
fn schema_leaves(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(properties) = schema["properties"].as_object() {
        for (key, child) in properties {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            if child["properties"].is_object() {
                schema_leaves(child, &path, out);
            } else {
                out.push(path);
            }
        }
    }
}

#[test]
fn every_value_is_in_values_yaml_the_schema_and_the_readme() {
    let chart = operator_chart();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart.join("values.schema.json")).expect("schema"),
    )
    .expect("schema is JSON");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(schema["additionalProperties"], false);
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart.join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let readme = std::fs::read_to_string(chart.join("README.md")).expect("README.md");

    let mut leaves = Vec::new();
    schema_leaves(&schema, "", &mut leaves);
    // `global` is Helm's, not ours; it is allowed but never set here.
    leaves.retain(|leaf| leaf != "global");
    assert!(leaves.len() > 40, "{leaves:?}");
    for leaf in &leaves {
        let pointer = format!("/{}", leaf.replace('.', "/"));
        assert!(
            values.pointer(&pointer).is_some(),
            "{leaf} is in the schema but has no default in values.yaml"
        );
        assert!(
            readme.contains(&format!("| `{leaf}` |")),
            "{leaf} is not documented in the chart README's values table"
        );
    }
    // And nothing in values.yaml escapes the schema (helm would reject the defaults).
    let top: BTreeSet<&str> = values
        .as_object()
        .expect("values map")
        .keys()
        .map(String::as_str)
        .collect();
    for key in top {
        assert!(
            schema["properties"][key].is_object(),
            "values.yaml key {key} is missing from values.schema.json"
        );
    }
}

/// `values.schema.json` refuses values the operator would refuse at start-up, so a typo fails
/// `helm install` instead of crash-looping the pod.
#[test]
fn the_values_schema_rejects_what_the_operator_would_refuse() {
    for (set, field) in [
        ("helmMaxConcurrent=0", "helmMaxConcurrent"),
        ("helmMaxConcurrent=100", "helmMaxConcurrent"),
        ("kubeApiMaxInFlight=0", "kubeApiMaxInFlight"),
        ("maxConcurrentReconciles=-1", "maxConcurrentReconciles"),
        ("maxConcurrentReconciles=5000", "maxConcurrentReconciles"),
        (
            "secretSyncResyncInterval=5minutes",
            "secretSyncResyncInterval",
        ),
        ("secretSyncResyncInterval=7", "secretSyncResyncInterval"),
        ("noSuchValue=1", "noSuchValue"),
    ] {
        let output = Command::new(support::helm_bin())
            .arg("template")
            .arg("omni-cluster-operator")
            .arg(operator_chart())
            .args(["--namespace", NAMESPACE, "--set", set])
            .output()
            .expect("run helm");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{set} was accepted");
        assert!(stderr.contains(field), "{set}: {stderr}");
    }
    for good in ["secretSyncResyncInterval=1h30m", "helmMaxConcurrent=64"] {
        render(&[good]);
    }
}

/// `helm <args>` with the real helm binary: (success, stdout, stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(support::helm_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run helm: {e}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A values file written for the Go operator's chart, passed to ours unchanged: each key is
/// accepted, mapped (with a deprecation note) or refused by name, as docs/migration.md says.
#[test]
fn original_chart_values_are_accepted_mapped_or_refused() {
    let chart = operator_chart();
    let chart = chart.to_string_lossy();
    let fixture = repo().join("crates/operator/tests/fixtures/original-chart-values.yaml");
    let original = std::fs::read_to_string(&fixture).unwrap_or_else(|e| panic!("fixture: {e}"));

    // Unchanged, it is refused, and the error names exactly the keys that cannot apply.
    let path = fixture.to_string_lossy();
    let (ok, _, stderr) = helm(&["template", "x", &chart, "-f", &path]);
    assert!(
        !ok,
        "the original's terminationGracePeriodSeconds: 10 must be refused"
    );
    let complaints: Vec<&str> = stderr.lines().filter(|l| l.starts_with("- at ")).collect();
    assert_eq!(
        complaints,
        ["- at '/terminationGracePeriodSeconds': minimum: got 10, want 23"],
        "{stderr}"
    );

    // With the schema satisfied, the Go operator's image is still refused, by name.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let schema_ok = original.replace(
        "terminationGracePeriodSeconds: 10",
        "terminationGracePeriodSeconds: 30",
    );
    let schema_ok_path = dir.path().join("schema-ok.yaml");
    std::fs::write(&schema_ok_path, &schema_ok).unwrap_or_else(|e| panic!("write: {e}"));
    let (ok, _, stderr) = helm(&[
        "template",
        "x",
        &chart,
        "-f",
        &schema_ok_path.to_string_lossy(),
    ]);
    assert!(
        !ok && stderr
            .contains("ghcr.io/texas-hpc/omni-cluster-operator is the Go operator's image"),
        "{stderr}"
    );

    // With the refused keys changed as migration.md says, it installs; the deprecated
    // healthProbe.bindAddress is mapped onto the flag and the notes warn about it.
    let fixed = schema_ok.replace(
        "  repository: ghcr.io/texas-hpc/omni-cluster-operator\n",
        "",
    );
    let fixed_path = dir.path().join("values.yaml");
    std::fs::write(&fixed_path, fixed).unwrap_or_else(|e| panic!("write: {e}"));
    let fixed_path = fixed_path.to_string_lossy();
    let (ok, stdout, stderr) = helm(&[
        "install",
        "x",
        &chart,
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "-f",
        &fixed_path,
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("- --health-probe-bind-address=:8081"),
        "bindAddress is passed on"
    );
    assert!(
        stdout.contains("DEPRECATED: healthProbe.bindAddress"),
        "the notes warn about the deprecated key"
    );
    // The original's secure metrics on :8443 stay what they were.
    assert!(
        stdout.contains("- --metrics-secure=true"),
        "metrics.secure is honoured"
    );
    assert!(stdout.contains("- --metrics-bind-address=:8443"));
    // A bindAddress that disagrees with the probe port would make every probe fail: refused.
    let (ok, _, stderr) = helm(&[
        "template",
        "x",
        &chart,
        "-f",
        &fixed_path,
        "--set",
        "healthProbe.bindAddress=:9999",
    ]);
    assert!(
        !ok && stderr.contains("healthProbe.bindAddress"),
        "{stderr}"
    );
}

/// The release workflow cannot run here, but what it names must exist: the Dockerfile, both
/// chart directories, the binary, and a CHANGELOG section it publishes as release notes.
#[test]
fn the_release_workflow_builds_what_a_release_ships() {
    let path = repo().join(".github/workflows/release.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let workflow: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("YAML: {e}"));
    assert_eq!(workflow["on"]["push"]["tags"][0], "v*.*.*");
    let jobs = workflow["jobs"]
        .as_object()
        .unwrap_or_else(|| panic!("jobs"));
    for job in ["test", "image", "charts", "binaries", "github-release"] {
        assert!(jobs.contains_key(job), "job {job}");
    }
    assert!(repo().join("Dockerfile").is_file());
    for chart in ["omni-cluster-operator-crds", "omni-cluster-operator"] {
        assert!(
            text.contains(chart) && repo().join("charts").join(chart).is_dir(),
            "{chart}"
        );
    }
    assert!(text.contains("-p omni-operator --bin omni-operator"));
    assert!(text.contains("platforms: linux/amd64,linux/arm64"));
    assert!(text.contains("sbom: true") && text.contains("cosign sign"));
    let changelog = std::fs::read_to_string(repo().join("CHANGELOG.md")).unwrap_or_default();
    assert!(
        changelog.contains("\n## "),
        "CHANGELOG has version sections"
    );
}

/// The metric families the operator registers (`# TYPE` lines of an empty registry).
fn registered_metrics() -> BTreeSet<String> {
    let text = omni_operator::process::metrics::Metrics::new()
        .encode()
        .expect("encode metrics");
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every `omni_operator_*` name in `text`, reduced to its family (without the `_total`,
/// `_bucket`, `_sum` and `_count` sample suffixes).
fn metric_families_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("omni_operator_") {
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(&name);
        found.insert(family.to_string());
    }
    found
}

fn named<'a>(docs: &'a [Value], kind: &str, suffix: &str) -> Option<&'a Value> {
    of_kind(docs, kind).into_iter().find(|d| {
        d["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with(suffix))
    })
}

#[test]
fn metrics_are_plain_by_default_and_the_monitoring_objects_are_opt_in() {
    let docs = render(&[]);
    assert!(
        !manager_args(&docs)
            .iter()
            .any(|a| a.starts_with("--metrics-secure")),
        "plain HTTP unless asked for"
    );
    let service = named(&docs, "Service", "-metrics-service").expect("metrics Service");
    assert_eq!(service["spec"]["ports"][0]["name"], "http-metrics");
    let reader = named(&docs, "ClusterRole", "-metrics-reader").expect("metrics-reader role");
    assert_eq!(
        reader["rules"],
        serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    assert!(named(&docs, "ClusterRole", "-metrics-auth-role").is_none());
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(of_kind(&docs, kind).is_empty(), "{kind} is opt-in");
    }
    assert!(named(&docs, "ConfigMap", "-dashboard").is_none());
    let without_rbac = render(&["metrics.rbac.enabled=false", "metrics.secure=true"]);
    assert!(named(&without_rbac, "ClusterRole", "-metrics-reader").is_none());
    assert!(named(&without_rbac, "ClusterRole", "-metrics-auth-role").is_none());
}

#[test]
fn secure_metrics_let_the_operator_review_tokens_and_the_service_monitor_use_https() {
    let docs = render(&["metrics.secure=true", "metrics.serviceMonitor.enabled=true"]);
    let args = manager_args(&docs);
    assert!(
        args.contains(&"--metrics-secure=true".to_string()),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--metrics-cert-dir")),
        "self-signed without a Secret: {args:?}"
    );
    let auth = named(&docs, "ClusterRole", "-metrics-auth-role").expect("metrics-auth role");
    assert_eq!(
        auth["rules"],
        serde_json::json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}
        ])
    );
    let binding = named(&docs, "ClusterRoleBinding", "-metrics-auth-rolebinding").expect("binding");
    assert_eq!(binding["roleRef"]["name"], auth["metadata"]["name"]);
    let account = of_kind(&docs, "ServiceAccount")[0]["metadata"]["name"].clone();
    assert_eq!(binding["subjects"][0]["name"], account);
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);

    let service = named(&docs, "Service", "-metrics-service").expect("metrics Service");
    let monitor = &of_kind(&docs, "ServiceMonitor")[0];
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["port"], "https");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "30s");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
    // The selector picks the metrics Service only (the webhook Service has the same app labels).
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (key, value) in selector {
        assert_eq!(&service["metadata"]["labels"][key], value, "{key}");
    }
    let webhook = named(&docs, "Service", "-webhook-service").expect("webhook Service");
    assert!(
        selector
            .iter()
            .any(|(k, v)| &webhook["metadata"]["labels"][k] != v),
        "the ServiceMonitor must not select the webhook Service"
    );
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"][0],
        NAMESPACE
    );
}

#[test]
fn a_metrics_certificate_secret_is_mounted_and_verified_by_the_service_monitor() {
    let docs = render(&[
        "metrics.secure=true",
        "metrics.certSecretName=operator-metrics-tls",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.interval=15s",
        "metrics.serviceMonitor.labels.release=kube-prometheus",
    ]);
    let args = manager_args(&docs);
    let dir = args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-cert-dir="))
        .expect("--metrics-cert-dir");
    let pod = &of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .and_then(|v| {
            v.iter()
                .find(|v| v["secret"]["secretName"] == "operator-metrics-tls")
        })
        .expect("metrics certificate volume");
    let mounts = pod["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts");
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == volume["name"] && m["mountPath"] == dir),
        "{mounts:?}"
    );
    let monitor = &of_kind(&docs, "ServiceMonitor")[0];
    assert_eq!(monitor["metadata"]["labels"]["release"], "kube-prometheus");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["interval"], "15s");
    assert_eq!(
        endpoint["tlsConfig"]["ca"]["secret"],
        serde_json::json!({"name": "operator-metrics-tls", "key": "ca.crt"})
    );
    assert!(endpoint["tlsConfig"]["insecureSkipVerify"].is_null());
}

/// The alerts of docs/operations.md, over metrics the operator really exports.
#[test]
fn the_prometheus_rule_holds_the_documented_alerts() {
    let docs = render(&[
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.labels.release=kube-prometheus",
    ]);
    let rule = &of_kind(&docs, "PrometheusRule")[0];
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus");
    let alerts = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    let exprs: Vec<String> = alerts
        .iter()
        .map(|a| a["expr"].as_str().expect("expr").to_string())
        .collect();
    for documented in [
        "omni_operator_resource_info{ready=\"False\",suspended=\"false\"} == 1",
        "rate(omni_operator_reconcile_errors_total[15m])",
        "omni_operator_kubeconfig_expiry_seconds < 3600",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(documented)),
            "{documented} in {exprs:?}"
        );
    }
    for alert in alerts {
        assert!(alert["for"].is_string(), "{alert}");
        // Helm must leave Prometheus's own templating in the annotations alone.
        let summary = alert["annotations"]["summary"].as_str().expect("summary");
        assert!(summary.contains("{{ $labels."), "{summary}");
    }
    let registered = registered_metrics();
    for family in metric_families_in(&exprs.join("\n")) {
        assert!(registered.contains(&family), "{family} is not exported");
    }
}

#[test]
fn the_grafana_dashboard_charts_every_operator_metric() {
    let docs = render(&["metrics.grafanaDashboard.enabled=true"]);
    let config_map = named(&docs, "ConfigMap", "-dashboard").expect("dashboard ConfigMap");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let data = config_map["data"].as_object().expect("data");
    assert_eq!(data.len(), 1);
    let (file, text) = data.iter().next().expect("one file");
    assert!(file.ends_with(".json"), "{file}");
    let dashboard: Value = serde_json::from_str(text.as_str().expect("text"))
        .unwrap_or_else(|e| panic!("the dashboard is not JSON: {e}"));
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut queries = String::new();
    for panel in panels {
        assert!(panel["title"].is_string(), "{panel}");
        for target in panel["targets"].as_array().expect("targets") {
            queries.push_str(target["expr"].as_str().expect("expr"));
            queries.push('\n');
        }
    }
    assert_eq!(metric_families_in(&queries), registered_metrics());
}
