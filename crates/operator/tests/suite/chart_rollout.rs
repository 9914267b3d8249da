//! Rolling the operator out to a team: the aggregated viewer and editor roles, the chart's
//! refusal to install without cert-manager when it needs it (real helm against kube-sim), and
//! the bring-your-own-certificate recipe of docs/install.md, run as written and checked the
//! way the API server checks the webhook's certificate.

use crate::support;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use omni_operator::process::webhook::{Server, WebhookConfig};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use support::of_kind;

const NAMESPACE: &str = "omni-cluster-operator-system";
/// Generous bound for one step on a loaded machine; never a timing assertion.
const STEP: Duration = Duration::from_secs(60);

fn role<'a>(docs: &'a [Value], name: &str) -> &'a Value {
    of_kind(docs, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no ClusterRole {name}"))
}

fn plurals() -> Vec<Value> {
    omni_operator::api::crds()
        .iter()
        .map(|c| json!(c.spec.names.plural))
        .collect()
}

#[test]
fn viewer_and_editor_cover_every_kind_and_aggregate_into_the_built_in_roles() {
    let docs = support::render_operator_chart(NAMESPACE, &[]);
    let viewer = role(&docs, "omni-cluster-operator-viewer");
    let labels = &viewer["metadata"]["labels"];
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert!(
        labels
            .get("rbac.authorization.k8s.io/aggregate-to-edit")
            .is_none()
    );
    assert_eq!(viewer["rules"][0]["resources"], json!(plurals()));
    assert_eq!(viewer["rules"][0]["verbs"], json!(["get", "list", "watch"]));

    let editor = role(&docs, "omni-cluster-operator-editor");
    let labels = &editor["metadata"]["labels"];
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-admin"],
        "true"
    );
    assert_eq!(editor["rules"][0]["resources"], json!(plurals()));
    for verb in ["create", "update", "patch", "delete"] {
        assert!(
            editor["rules"][0]["verbs"]
                .as_array()
                .unwrap()
                .contains(&json!(verb)),
            "{verb}"
        );
    }
    // Neither lends access to Secrets: the built-in `view` must stay Secret-free.
    for r in [viewer, editor] {
        for rule in r["rules"].as_array().unwrap() {
            assert_eq!(rule["apiGroups"], json!(["omni.texashpc.com"]), "{rule}");
        }
    }

    let off = support::render_operator_chart(NAMESPACE, &["rbac.aggregatedRoles.create=false"]);
    assert!(
        of_kind(&off, "ClusterRole")
            .iter()
            .all(|r| !r["metadata"]["name"].as_str().unwrap().ends_with("-viewer"))
    );
}

/// `helm install --dry-run=server` of the operator chart against kube-sim, with `sets`.
fn dry_run_install(sim: &kube_sim::server::RunningKubeSim, sets: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::write_kubeconfig(sim, dir.path(), None);
    let mut command = Command::new(support::helm_bin());
    command
        .args(["install", "omni-cluster-operator"])
        .arg(support::repo().join("charts/omni-cluster-operator"))
        .args(["--namespace", "default", "--dry-run=server"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("HELM_CACHE_HOME", dir.path().join("cache"))
        .env("HELM_CONFIG_HOME", dir.path().join("config"))
        .env("HELM_DATA_HOME", dir.path().join("data"));
    for set in sets {
        command.args(["--set", set]);
    }
    let out = command.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cert_manager_the_chart_says_what_to_do() {
    let (sim, client) = support::kube_sim().await;
    let sim = tokio::task::spawn_blocking(move || {
        let (ok, out) = dry_run_install(&sim, &[]);
        assert!(!ok, "{out}");
        assert!(
            out.contains("install cert-manager or set certManager.enabled=false"),
            "{out}"
        );
        // Bringing one's own certificate needs no cert-manager.
        let (ok, out) = dry_run_install(
            &sim,
            &[
                "certManager.enabled=false",
                "webhook.certSecretName=webhook-tls",
            ],
        );
        assert!(ok, "{out}");
        sim
    })
    .await
    .unwrap();

    // With cert-manager's CRDs served, the default install goes through.
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for (kind, plural) in [("Certificate", "certificates"), ("Issuer", "issuers")] {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "metadata": {"name": format!("{plural}.cert-manager.io")},
            "spec": {
                "group": "cert-manager.io",
                "names": {"kind": kind, "plural": plural},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        }))
        .unwrap();
        crds.create(&Default::default(), &crd).await.unwrap();
    }
    let certificates: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
            "certificates",
        ),
    );
    let until = tokio::time::Instant::now() + STEP;
    while certificates.list(&Default::default()).await.is_err() {
        assert!(tokio::time::Instant::now() < until, "CRD never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::task::spawn_blocking(move || {
        let (ok, out) = dry_run_install(&sim, &[]);
        assert!(ok, "{out}");
    })
    .await
    .unwrap();
}

/// The shell block of docs/install.md marked `byo-certificate-recipe`.
fn recipe() -> String {
    let install = std::fs::read_to_string(support::repo().join("docs/install.md")).unwrap();
    let after = install
        .split("<!-- byo-certificate-recipe")
        .nth(1)
        .expect("docs/install.md marks the recipe");
    let block = after
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a sh block after the marker");
    block.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bring_your_own_certificate_recipe_makes_a_certificate_the_api_server_accepts() {
    let dir = tempfile::tempdir().unwrap();
    // kubectl is the cluster's business; record what the recipe asks of it.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("kubectl");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\n",
            dir.path().join("kubectl.log").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-euc")
        .arg(recipe())
        .current_dir(dir.path())
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the recipe fails:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubectl = std::fs::read_to_string(dir.path().join("kubectl.log")).unwrap();
    assert!(
        kubectl.contains(&format!(
            "-n {NAMESPACE} create secret tls omni-operator-webhook-tls --cert=tls.crt --key=tls.key"
        )),
        "{kubectl}"
    );

    // The webhook serves the recipe's certificate; a client verifying as the API server does
    // (the CA bundle, the Service's DNS name) completes the handshake.
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(dir.path().join(f), certs.join(f)).unwrap();
    }
    let server = Server::bind(&WebhookConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        cert_dir: certs,
        ..WebhookConfig::default()
    })
    .await
    .expect("the webhook loads the recipe's certificate");
    let addr = server.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    for cert in rustls_pemfile::certs(&mut ca.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let host = format!("omni-cluster-operator-webhook-service.{NAMESPACE}.svc");
    assert!(host.len() > 64, "the name does not fit a common name");
    for name in [host.clone(), format!("{host}.cluster.local")] {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(
            STEP,
            connector.connect(ServerName::try_from(name.clone()).unwrap(), tcp),
        )
        .await
        .expect("handshake in time")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Any other name is refused: the certificate names the Service, nothing else.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let other = ServerName::try_from("other.omni-cluster-operator-system.svc").unwrap();
    assert!(connector.connect(other, tcp).await.is_err());
    let _ = stop.send(());
    let _ = task.await;
}
