//! The real kubectl (v1.35) against kube-sim. Needs `scripts/install-test-tools` (or
//! `KUBECTL_BIN`); the tests fail, not skip, when it is missing.

use crate::auth_probe;
use crate::tools;

use auth_probe::AuthProbe;
use kube_sim::auth::Identity;
use kube_sim::kubeconfig::{Credential, Kubeconfig};

#[tokio::test]
async fn kubectl_reads_our_kubeconfigs_and_speaks_tls_with_certificates_and_tokens() {
    let probe = AuthProbe::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cert = probe
        .ca
        .issue_client("kube-sim-admin", &["system:masters"])
        .unwrap();
    let admin = dir.path().join("admin.kubeconfig");
    Kubeconfig::new(
        probe.url(),
        "kube-sim-admin",
        Credential::ClientCertificate {
            cert_pem: cert.cert_pem.clone(),
            key_pem: cert.key_pem.clone(),
        },
    )
    .with_ca_pem(probe.ca.cert_pem())
    .write(&admin)
    .unwrap();
    let out = tools::run("kubectl", &admin, dir.path(), &["version", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.35.0-kube-sim");

    probe.auth.add_token("t-alice", Identity::new("alice", &[]));
    let alice = dir.path().join("alice.kubeconfig");
    let token_config = Kubeconfig::new(probe.url(), "alice", Credential::Token("t-alice".into()))
        .with_ca_pem(probe.ca.cert_pem());
    token_config.write(&alice).unwrap();
    let out = tools::run("kubectl", &alice, dir.path(), &["get", "--raw", "/whoami"]).await;
    let me: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(me["username"], "alice");

    // A token the server does not know: kubectl reports the 401 and exits non-zero.
    let bad = dir.path().join("bad.kubeconfig");
    let mut wrong = token_config.clone();
    wrong.credential = Credential::Token("nope".into());
    wrong.write(&bad).unwrap();
    let out = tools::run("kubectl", &bad, dir.path(), &["get", "--raw", "/version"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("Unauthorized") || out.stderr.contains("provide credentials"),
        "{}",
        out.stderr
    );
}
