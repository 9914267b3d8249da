//! End to end: the ValidatingWebhookConfiguration rendered by the operator chart (real helm),
//! interpreted by kube-sim's admission dispatcher the way the API server interprets it (rule and
//! namespace matching, service resolution, TLS to `<service>.<namespace>.svc` trusting
//! `caBundle`), calling the real webhook server over HTTPS.
//!
//! helm: `$HELM_BIN`, else `<repo>/.cache/test-tools/bin/helm` (run `scripts/install-test-tools`).

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use kube_sim::admission::{AdmissionRequest, Operation, ReviewUser, WebhookDispatcher};
use omni_operator::process::webhook::{Server, WebhookConfig};
use serde_json::{Value, json};
use tokio::sync::oneshot;

const NAMESPACE: &str = "omni-cluster-operator-system";
const SERVICE: &str = "omni-cluster-operator-webhook-service";
/// Generous bound for one admission call on a loaded machine; never a timing assertion.
const STEP: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The chart's webhook configuration for a user-provided certificate signed by `ca_pem`.
fn rendered_configuration(ca_pem: &str, extra_sets: &[&str]) -> Value {
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut command = Command::new(support::helm_bin());
    command
        .arg("template")
        .arg("omni-cluster-operator")
        .arg(repo().join("charts/omni-cluster-operator"))
        .args(["--namespace", NAMESPACE])
        .args(["--set", "certManager.enabled=false"])
        .args(["--set", "webhook.certSecretName=webhook-tls"])
        .args(["--set", &format!("webhook.caBundle={ca_bundle}")])
        .args(["--show-only", "templates/webhook.yaml"]);
    for set in extra_sets {
        command.args(["--set", set]);
    }
    let output = command.output().expect("run helm");
    assert!(
        output.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("rendered YAML");
    docs.into_iter()
        .find(|doc| doc["kind"] == "ValidatingWebhookConfiguration")
        .expect("a ValidatingWebhookConfiguration")
}

struct Cluster {
    dispatcher: WebhookDispatcher,
    configurations: Vec<Value>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _certs: tempfile::TempDir,
}

impl Cluster {
    async fn start(extra_sets: &[&str]) -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");

        // What cert-manager or the user would put in the TLS Secret: a certificate for the
        // Service's cluster DNS name, which the API server verifies.
        let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
        let leaf = rcgen::CertificateParams::new(vec![format!("{SERVICE}.{NAMESPACE}.svc")])
            .expect("leaf params")
            .signed_by(&leaf_key, &*ca)
            .expect("leaf");
        let certs = tempfile::tempdir().expect("tempdir");
        std::fs::write(certs.path().join("tls.crt"), leaf.pem()).expect("write cert");
        std::fs::write(certs.path().join("tls.key"), leaf_key.serialize_pem()).expect("write key");

        let server = Server::bind(&WebhookConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            cert_dir: certs.path().to_path_buf(),
            ..WebhookConfig::default()
        })
        .await
        .expect("webhook server");
        let addr = server.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));

        let dispatcher = WebhookDispatcher::new();
        dispatcher.register_service(NAMESPACE, SERVICE, 443, addr);
        Self {
            dispatcher,
            configurations: vec![rendered_configuration(&ca.pem(), extra_sets)],
            stop: Some(stop),
            task,
            _certs: certs,
        }
    }

    async fn admit(
        &self,
        operation: Operation,
        object: Option<Value>,
        old: Option<Value>,
    ) -> Result<Vec<String>, kube_sim::admission::Rejection> {
        let reference = object.as_ref().or(old.as_ref()).expect("an object");
        let kind = reference["kind"].as_str().expect("kind").to_string();
        let namespace = reference["metadata"]["namespace"]
            .as_str()
            .expect("namespace")
            .to_string();
        let request = AdmissionRequest {
            operation,
            group: "omni.texashpc.com".to_string(),
            version: "v1alpha1".to_string(),
            resource: plural(&kind),
            subresource: String::new(),
            kind,
            namespaced: true,
            name: reference["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            namespace,
            object,
            old_object: old,
            dry_run: false,
            options: None,
            user: ReviewUser {
                username: "alice".to_string(),
                ..ReviewUser::default()
            },
            namespace_labels: Some(BTreeMap::new()),
        };
        tokio::time::timeout(STEP, self.dispatcher.admit(&self.configurations, &request))
            .await
            .expect("admission answered in time")
    }

    /// Stops the webhook server (the operator is down); the API server keeps the configuration.
    async fn stop_server(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(STEP, &mut self.task)
            .await
            .expect("server stops")
            .expect("server task");
    }

    async fn stop(mut self) {
        if self.stop.is_some() {
            self.stop_server().await;
        }
    }
}

fn plural(kind: &str) -> String {
    omni_operator::api::crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .map(|crd| crd.spec.names.plural)
        .unwrap_or_else(|| panic!("unknown kind {kind}"))
}

fn connection(namespace: &str, secret_name: &str, insecure: bool) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniConnection",
        "metadata": {"name": "omni", "namespace": namespace},
        "spec": {
            "endpoint": "https://omni.example.com",
            "auth": {"serviceAccountSecretRef": {"name": secret_name, "key": "serviceAccountKey"}},
            "insecureSkipTLSVerify": insecure
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_webhook_rejects_invalid_objects_in_the_release_namespace() {
    let cluster = Cluster::start(&[]).await;
    let rejection = cluster
        .admit(
            Operation::Create,
            Some(connection(NAMESPACE, "", false)),
            None,
        )
        .await
        .expect_err("invalid connection is refused");
    assert_eq!(rejection.code, 422);
    assert_eq!(rejection.reason, "Invalid");
    assert_eq!(
        rejection.message,
        "admission webhook \"vomniconnection-v1alpha1.kb.io\" denied the request: \
         OmniConnection.omni.texashpc.com \"omni\" is invalid: \
         spec.auth.serviceAccountSecretRef.name: Required value: service account Secret name is required"
    );

    let warnings = cluster
        .admit(
            Operation::Create,
            Some(connection(NAMESPACE, "omni-key", true)),
            None,
        )
        .await
        .expect("valid connection is admitted");
    assert_eq!(
        warnings,
        ["insecureSkipTLSVerify disables Omni endpoint TLS certificate verification"]
    );

    // Namespaced mode: other namespaces are not the operator's business.
    cluster
        .admit(
            Operation::Create,
            Some(connection("somewhere-else", "", false)),
            None,
        )
        .await
        .expect("objects outside the release namespace are not sent to the webhook");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_webhook_never_blocks_finalizer_removal() {
    let cluster = Cluster::start(&[]).await;
    let mut stored = connection(NAMESPACE, "", false);
    stored["metadata"]["finalizers"] = json!(["omni.texashpc.com/finalizer"]);
    let mut released = stored.clone();
    released["metadata"]["finalizers"] = json!([]);
    cluster
        .admit(Operation::Update, Some(released), Some(stored.clone()))
        .await
        .expect("finalizer removal from an invalid object is admitted");

    let mut edited = stored.clone();
    edited["spec"]["endpoint"] = json!("https://other.example.com");
    cluster
        .admit(Operation::Update, Some(edited), Some(stored))
        .await
        .expect_err("a spec edit of an invalid object is still validated");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_chart_validates_every_namespace() {
    let cluster = Cluster::start(&["watch.clusterWide=true"]).await;
    let rejection = cluster
        .admit(
            Operation::Create,
            Some(connection("team-a", "", false)),
            None,
        )
        .await
        .expect_err("cluster-wide mode validates other namespaces too");
    assert_eq!(rejection.code, 422);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_webhook_admits_every_sample() {
    let cluster = Cluster::start(&[]).await;
    let samples = repo().join("config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&samples)
        .expect("config/samples")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    let mut admitted = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("sample");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("sample YAML");
        for mut doc in docs
            .into_iter()
            .filter(|d| d["apiVersion"] == "omni.texashpc.com/v1alpha1")
        {
            if doc["metadata"]["namespace"].is_null() {
                doc["metadata"]["namespace"] = json!(NAMESPACE);
            }
            if let Err(rejection) = cluster.admit(Operation::Create, Some(doc), None).await {
                panic!("{} is refused: {}", file.display(), rejection.message);
            }
            admitted += 1;
        }
    }
    assert!(admitted >= 8, "{admitted} sample objects");
    cluster.stop().await;
}

/// The documented last resort for a stuck deletion: with the operator down, remove the finalizer
/// by hand. failurePolicy is `Fail`, so a webhook call would be refused while its server is
/// unreachable; the chart's matchConditions keep updates that change no spec away from it, so
/// finalizer and label edits go through and only spec edits still need the (absent) webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_operator_down_finalizers_and_labels_can_still_be_edited() {
    let mut cluster = Cluster::start(&[]).await;
    cluster.stop_server().await;
    let mut stored = connection(NAMESPACE, "omni-key", false);
    stored["metadata"]["finalizers"] = json!(["omni.texashpc.com/finalizer"]);
    stored["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");

    let mut released = stored.clone();
    released["metadata"]["finalizers"] = json!([]);
    cluster
        .admit(Operation::Update, Some(released), Some(stored.clone()))
        .await
        .expect("finalizer removal needs no webhook");

    let mut relabelled = stored.clone();
    relabelled["metadata"]
        .as_object_mut()
        .map(|m| m.remove("deletionTimestamp"));
    let unlabelled = relabelled.clone();
    relabelled["metadata"]["labels"] = json!({"team": "platform"});
    cluster
        .admit(
            Operation::Update,
            Some(relabelled),
            Some(unlabelled.clone()),
        )
        .await
        .expect("a label edit needs no webhook");

    let mut edited = unlabelled.clone();
    edited["spec"]["endpoint"] = json!("https://other.example.com");
    let refused = cluster
        .admit(Operation::Update, Some(edited), Some(unlabelled))
        .await
        .expect_err("a spec edit still goes to the webhook, which is down");
    assert_eq!(refused.code, 500, "{refused:?}");
    cluster
        .admit(
            Operation::Create,
            Some(connection(NAMESPACE, "x", false)),
            None,
        )
        .await
        .expect_err("creates always go to the webhook");
}

/// An object of `kind` in the release namespace with one inline config patch.
fn with_patch(kind: &str, name: &str, spec: Value, inline: Value) -> Value {
    let mut spec = spec;
    spec["patches"] = json!([{"name": "p", "inline": inline}]);
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_webhook_refuses_config_patches_omni_forbids_with_omnis_reason() {
    let cluster = Cluster::start(&[]).await;
    let machine = "11111111-1111-4111-8111-111111111111";
    let key = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t";
    // Every kind that carries patches, each with another rule of Omni v1.10.
    let cases = [
        (
            with_patch(
                "OmniCluster",
                "edge",
                json!({"connectionRef": {"name": "omni"}, "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}),
                json!({"cluster": {"ca": {"crt": "Y2VydA==", "key": key}}}),
            ),
            r#"overriding "cluster.ca" is not allowed in the config patch"#,
        ),
        (
            with_patch(
                "OmniControlPlane",
                "edge-cp",
                json!({"clusterRef": {"name": "edge"}, "machines": [machine]}),
                json!("apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\n"),
            ),
            r#"the "KubeAPIServerCAConfig" document is not allowed in the config patch"#,
        ),
        (
            with_patch(
                "OmniWorkers",
                "edge-workers",
                json!({"clusterRef": {"name": "edge"}, "machineClass": {"name": "gpu", "size": 3}}),
                json!({"apiVersion": "v1alpha1", "kind": "KubeServiceAccountConfig", "issuer": {"privateKey": key}}),
            ),
            r#"overriding "issuer.privateKey" is not allowed in the config patch"#,
        ),
        (
            with_patch(
                "OmniMachine",
                machine,
                json!({"clusterRef": {"name": "edge"}}),
                json!({"cluster": {"serviceAccount": {"key": key}}}),
            ),
            r#"overriding "cluster.serviceAccount" is not allowed in the config patch"#,
        ),
    ];
    for (object, reason) in cases {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let rejection = cluster
            .admit(Operation::Create, Some(object), None)
            .await
            .expect_err("a forbidden patch is refused");
        assert_eq!(
            (rejection.code, rejection.reason.as_str()),
            (422, "Invalid")
        );
        assert!(
            rejection.message.starts_with("admission webhook \"")
                && rejection
                    .message
                    .contains(&format!("denied the request: {kind}.omni.texashpc.com \""))
                && rejection
                    .message
                    .ends_with(&format!("spec.patches[0].inline: Forbidden: {reason}")),
            "{kind}: {}",
            rejection.message
        );
        assert!(!rejection.message.contains(key), "{}", rejection.message);
    }
    cluster.stop().await;
}
