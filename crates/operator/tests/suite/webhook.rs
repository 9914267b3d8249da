//! The admission webhook over real HTTPS on 127.0.0.1: AdmissionReview in, verdict out, with a
//! serving certificate signed by a test CA that the client trusts, rotated on disk mid-test.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper_util::rt::TokioIo;
use omni_operator::process::webhook::{self, Server, WebhookConfig};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

/// Generous bound for any single network step on a loaded machine; never a timing assertion.
const STEP: Duration = Duration::from_secs(60);

struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

fn new_ca() -> Ca {
    let key = rcgen::KeyPair::generate().expect("ca key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "webhook test CA");
    let issuer = rcgen::CertifiedIssuer::self_signed(params, key).expect("ca cert");
    Ca { issuer }
}

/// A serving certificate for 127.0.0.1 / localhost signed by `ca`: (cert PEM, key PEM, cert DER).
fn serving_cert(ca: &Ca, common_name: &str) -> (String, String, Vec<u8>) {
    let key = rcgen::KeyPair::generate().expect("leaf key");
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("leaf params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    let cert = params.signed_by(&key, &*ca.issuer).expect("leaf cert");
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

/// Writes the pair the way the kubelet updates a mounted Secret: new files renamed into place.
fn install_cert(dir: &Path, cert: &str, key: &str) {
    for (name, contents) in [("tls.crt", cert), ("tls.key", key)] {
        let staging = dir.join(format!(".{name}.new"));
        std::fs::write(&staging, contents).expect("write staging file");
        std::fs::rename(&staging, dir.join(name)).expect("rename into place");
    }
}

struct Running {
    addr: SocketAddr,
    connector: TlsConnector,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
    dir_path: std::path::PathBuf,
    ca: Ca,
}

impl Running {
    async fn start() -> Self {
        Running::start_with(None).await
    }

    /// A server that reads stored objects with `client`, when given.
    async fn start_with(client: Option<kube::Client>) -> Self {
        let ca = new_ca();
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key, _) = serving_cert(&ca, "first");
        install_cert(dir.path(), &cert, &key);
        let config = WebhookConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            cert_dir: dir.path().to_path_buf(),
            cert_name: "tls.crt".to_string(),
            key_name: "tls.key".to_string(),
        };
        let mut server = Server::bind(&config).await.expect("bind webhook server");
        if let Some(client) = client {
            server = server.with_client(client);
        }
        let addr = server.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));

        let mut roots = rustls::RootCertStore::empty();
        for der in rustls_pemfile::certs(&mut ca.issuer.pem().as_bytes()) {
            roots.add(der.expect("ca pem")).expect("trust ca");
        }
        let mut client_config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
        // Every request must do a full handshake, so that the certificate actually served is seen
        // (a resumed session reports the certificate of the original one).
        client_config.resumption = rustls::client::Resumption::disabled();
        Self {
            addr,
            connector: TlsConnector::from(Arc::new(client_config)),
            stop: Some(stop),
            task,
            dir_path: dir.path().to_path_buf(),
            _dir: dir,
            ca,
        }
    }

    /// One request on a fresh TLS connection: (HTTP status, body, server leaf certificate DER).
    async fn post_raw(&self, path: &str, body: String) -> (u16, Vec<u8>, Vec<u8>) {
        let tcp = tokio::time::timeout(STEP, TcpStream::connect(self.addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let name = ServerName::try_from("127.0.0.1").expect("server name");
        let tls = tokio::time::timeout(STEP, self.connector.connect(name, tcp))
            .await
            .expect("handshake in time")
            .expect("TLS handshake with the test CA");
        let leaf: Vec<u8> = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|der: &CertificateDer<'_>| der.to_vec())
            .expect("server certificate");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("http handshake");
        tokio::spawn(connection);
        let request = http::Request::post(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("request");
        let response = tokio::time::timeout(STEP, sender.send_request(request))
            .await
            .expect("response in time")
            .expect("response");
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(Body::new(response.into_body()), 1 << 24)
            .await
            .expect("body");
        (status, bytes.to_vec(), leaf)
    }

    /// Posts an AdmissionReview and returns its `response` object.
    async fn review(&self, kind: &str, review: Value) -> Value {
        let (status, body, _) = self
            .post_raw(&webhook::path_for(kind), review.to_string())
            .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let out: Value = serde_json::from_slice(&body).expect("JSON AdmissionReview");
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(out["kind"], "AdmissionReview");
        out["response"].clone()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(STEP, &mut self.task)
            .await
            .expect("server stops after shutdown")
            .expect("server task");
    }
}

fn connection(name: &str, secret_name: &str, insecure: bool) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniConnection",
        "metadata": {"name": name, "namespace": "omni-system", "uid": "c0ffee00-0000-4000-8000-000000000001"},
        "spec": {
            "endpoint": "https://omni.example.com",
            "auth": {"serviceAccountSecretRef": {"name": secret_name, "key": "serviceAccountKey"}},
            "insecureSkipTLSVerify": insecure
        }
    })
}

fn release(name: &str, depends_on: &[&str]) -> Value {
    let depends_on: Vec<Value> = depends_on.iter().map(|n| json!({"name": n})).collect();
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniHelmRelease",
        "metadata": {"name": name, "namespace": "omni-system"},
        "spec": {
            "clusterRef": {"name": "c"},
            "kubeconfigSecretRef": {"name": "c-kubeconfig"},
            "namespace": "apps",
            "chart": {"repository": "https://charts.example.com", "chart": "demo", "version": "1.0.0"},
            "dependsOn": depends_on,
        }
    })
}

fn admission(kind: &str, operation: &str, object: Option<Value>, old: Option<Value>) -> Value {
    let name = object
        .as_ref()
        .or(old.as_ref())
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_string();
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "3f1d2a5e-1111-4222-8333-444455556666",
            "kind": {"group": "omni.texashpc.com", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "omni.texashpc.com", "version": "v1alpha1", "resource": format!("{}s", kind.to_lowercase())},
            "name": name,
            "namespace": "omni-system",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_object_is_allowed_and_uid_echoed() {
    let server = Running::start().await;
    let response = server
        .review(
            "OmniConnection",
            admission(
                "OmniConnection",
                "CREATE",
                Some(connection("omni", "omni-key", false)),
                None,
            ),
        )
        .await;
    assert_eq!(response["uid"], "3f1d2a5e-1111-4222-8333-444455556666");
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("warnings").is_none(), "{response}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_object_is_rejected_naming_the_field() {
    let server = Running::start().await;
    let response = server
        .review(
            "OmniConnection",
            admission(
                "OmniConnection",
                "CREATE",
                Some(connection("omni", "  ", false)),
                None,
            ),
        )
        .await;
    assert_eq!(response["allowed"], false, "{response}");
    let status = &response["status"];
    assert_eq!(status["code"], 422, "{response}");
    assert_eq!(status["reason"], "Invalid", "{response}");
    assert_eq!(
        status["message"],
        "OmniConnection.omni.texashpc.com \"omni\" is invalid: \
         spec.auth.serviceAccountSecretRef.name: Required value: service account Secret name is required",
        "{response}"
    );
    let causes = status["details"]["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 1, "{response}");
    assert_eq!(causes[0]["field"], "spec.auth.serviceAccountSecretRef.name");
    assert_eq!(causes[0]["reason"], "FieldValueRequired");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_errors_are_bracketed_like_the_api_server() {
    let server = Running::start().await;
    let mut object = connection("omni", "", false);
    object["spec"]["auth"]["serviceAccountSecretRef"]["key"] = json!("");
    let response = server
        .review(
            "OmniConnection",
            admission(
                "OmniConnection",
                "UPDATE",
                Some(object),
                Some(connection("omni", "k", false)),
            ),
        )
        .await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(
        response["status"]["message"],
        "OmniConnection.omni.texashpc.com \"omni\" is invalid: [\
         spec.auth.serviceAccountSecretRef.name: Required value: service account Secret name is required, \
         spec.auth.serviceAccountSecretRef.key: Required value: service account Secret key is required]",
        "{response}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_are_returned_with_an_allowed_verdict() {
    let server = Running::start().await;
    let response = server
        .review(
            "OmniConnection",
            admission(
                "OmniConnection",
                "CREATE",
                Some(connection("omni", "omni-key", true)),
                None,
            ),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        response["warnings"],
        json!(["insecureSkipTLSVerify disables Omni endpoint TLS certificate verification"]),
        "{response}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_update_of_an_invalid_stored_object_is_allowed() {
    let server = Running::start().await;
    // Stored before a stricter rule existed: blank Secret name.
    let old = connection("omni", "", false);
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!(["omni.texashpc.com/finalizer"]);
    new["metadata"]["labels"] = json!({"team": "platform"});
    new["status"] = json!({"observedGeneration": 3});
    let response = server
        .review(
            "OmniConnection",
            admission("OmniConnection", "UPDATE", Some(new), Some(old.clone())),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");

    // The same stored object with a spec edit is still validated and rejected.
    let mut edited = old.clone();
    edited["spec"]["endpoint"] = json!("https://omni2.example.com");
    let response = server
        .review(
            "OmniConnection",
            admission("OmniConnection", "UPDATE", Some(edited), Some(old)),
        )
        .await;
    assert_eq!(response["allowed"], false, "{response}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_of_an_object_being_deleted_is_allowed() {
    let server = Running::start().await;
    let mut old = connection("omni", "", false);
    old["metadata"]["finalizers"] = json!(["omni.texashpc.com/finalizer"]);
    old["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!([]);
    // Even a spec change rides along with the finalizer removal without being blocked.
    new["spec"]["endpoint"] = json!("https://elsewhere.example.com");
    let response = server
        .review(
            "OmniConnection",
            admission("OmniConnection", "UPDATE", Some(new), Some(old.clone())),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");

    let response = server
        .review(
            "OmniConnection",
            admission("OmniConnection", "DELETE", None, Some(old)),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificate_is_served_without_restart() {
    let server = Running::start().await;
    let review = admission(
        "OmniConnection",
        "DELETE",
        None,
        Some(connection("omni", "k", false)),
    );
    let path = webhook::path_for("OmniConnection");
    let (status, _, first_leaf) = server.post_raw(&path, review.to_string()).await;
    assert_eq!(status, 200);

    let (cert, key, second_der) = serving_cert(&server.ca, "second");
    assert_ne!(first_leaf, second_der);
    install_cert(&server.dir_path, &cert, &key);

    // The files are re-read in the background (handshakes never read them), within seconds.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, leaf) = server.post_raw(&path, review.to_string()).await;
        assert_eq!(status, 200);
        if leaf == second_der {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate is never served"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    server.stop().await;
}

/// A client that sends its headers and then trickles (here: stalls) its body is answered 408
/// and cut off, instead of holding a connection task for ever. Before the request deadline the
/// server waited indefinitely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stalls_its_body_is_cut_off() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = Running::start().await;
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    let mut tls = server.connector.connect(name, tcp).await.expect("TLS");
    let path = webhook::path_for("OmniConnection");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"kind\""
    );
    tls.write_all(head.as_bytes()).await.expect("write");
    tls.flush().await.expect("flush");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(45), tls.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the server still waits for the body after 45 s"
    );
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_clear_answers() {
    let server = Running::start().await;
    let path = webhook::path_for("OmniConnection");

    let (status, body, _) = server.post_raw(&path, "{not json".to_string()).await;
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&body).contains("AdmissionReview"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    let (status, _, _) = server
        .post_raw(
            "/validate-omni-texashpc-com-v1alpha1-nothing",
            "{}".to_string(),
        )
        .await;
    assert_eq!(status, 404);

    // An OmniCluster review sent to the OmniConnection webhook.
    let mut cluster = connection("c", "k", false);
    cluster["kind"] = json!("OmniCluster");
    let response = server
        .review(
            "OmniConnection",
            admission("OmniCluster", "CREATE", Some(cluster), None),
        )
        .await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 400, "{response}");
    assert!(
        response["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("OmniCluster")),
        "{response}"
    );

    // A review without a request.
    let response = server
        .review(
            "OmniConnection",
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        )
        .await;
    assert_eq!(response["allowed"], false, "{response}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_served_at_its_path() {
    let mut paths: Vec<String> = omni_operator::api::KINDS
        .iter()
        .map(|kind| webhook::path_for(kind))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/validate-omni-texashpc-com-v1alpha1-omnicluster",
            "/validate-omni-texashpc-com-v1alpha1-omniconnection",
            "/validate-omni-texashpc-com-v1alpha1-omnicontrolplane",
            "/validate-omni-texashpc-com-v1alpha1-omnihelmrelease",
            "/validate-omni-texashpc-com-v1alpha1-omnihelmreleaseset",
            "/validate-omni-texashpc-com-v1alpha1-omnikubeconfigexport",
            "/validate-omni-texashpc-com-v1alpha1-omnikubeconfigexportset",
            "/validate-omni-texashpc-com-v1alpha1-omnimachine",
            "/validate-omni-texashpc-com-v1alpha1-omnisecretsync",
            "/validate-omni-texashpc-com-v1alpha1-omnisecretsyncset",
            "/validate-omni-texashpc-com-v1alpha1-omniworkers",
        ]
    );
    let server = Running::start().await;
    for kind in omni_operator::api::KINDS {
        let mut old = connection("x", "k", false);
        old["kind"] = json!(kind);
        // A DELETE needs no valid object, so this exercises only routing and kind matching.
        let response = server
            .review(kind, admission(kind, "DELETE", None, Some(old)))
            .await;
        assert_eq!(response["allowed"], true, "{kind}: {response}");
    }
    server.stop().await;
}

#[tokio::test]
async fn server_refuses_to_start_without_a_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = WebhookConfig {
        bind: SocketAddr::from(([127, 0, 0, 1], 0)),
        cert_dir: dir.path().to_path_buf(),
        ..WebhookConfig::default()
    };
    let error = Server::bind(&config)
        .await
        .err()
        .expect("missing certificate is an error");
    assert!(error.to_string().contains("tls.crt"), "{error}");
}

/// The shipped samples are what users apply first; each must pass admission as a CREATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_is_admitted() {
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&samples)
        .expect("config/samples")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    let server = Running::start().await;
    let mut kinds_seen = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("sample");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("sample YAML");
        for doc in docs
            .into_iter()
            .filter(|d| d["apiVersion"] == "omni.texashpc.com/v1alpha1")
        {
            let kind = doc["kind"].as_str().expect("kind").to_string();
            let response = server
                .review(&kind, admission(&kind, "CREATE", Some(doc), None))
                .await;
            assert_eq!(
                response["allowed"],
                true,
                "{} is rejected: {response}",
                file.display()
            );
            kinds_seen.insert(kind);
        }
    }
    assert_eq!(
        kinds_seen.len(),
        omni_operator::api::KINDS.len(),
        "a sample of every kind: {kinds_seen:?}"
    );
    server.stop().await;
}

/// A `dependsOn` cycle spans objects: the webhook reads the stored releases of the namespace
/// and refuses the release that closes one, naming it; a chain without a cycle is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_closing_a_dependency_cycle_is_refused_naming_it() {
    let (_sim, client) = crate::support::kube_sim().await;
    crate::support::install_operator_api(&client, "omni-system").await;
    crate::support::create_json(&client, release("a", &["b"])).await;
    crate::support::create_json(&client, release("b", &["c"])).await;
    let server = Running::start_with(Some(client)).await;
    let closing = admission(
        "OmniHelmRelease",
        "CREATE",
        Some(release("c", &["a"])),
        None,
    );
    let response = server.review("OmniHelmRelease", closing).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 422, "{response}");
    assert_eq!(
        response["status"]["message"],
        "OmniHelmRelease.omni.texashpc.com \"c\" is invalid: spec.dependsOn[0].name: Invalid value: \"a\": dependency cycle c → a → b → c",
        "{response}"
    );
    let chain = admission(
        "OmniHelmRelease",
        "CREATE",
        Some(release("d", &["a"])),
        None,
    );
    let response = server.review("OmniHelmRelease", chain).await;
    assert_eq!(response["allowed"], true, "{response}");
    server.stop().await;
}
