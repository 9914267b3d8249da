//! Transport fidelity (docs/omni-wire.md#transport): content-type gate, gzip, TLS, and the
//! `omni-sim` binary.

use crate::common;

use common::Signer;
use omni_client::proto::cosi::resource::{ListOptions, ListRequest};
use omni_sim::{OmniSim, Role, TlsIdentity, methods};
use tonic::codec::CompressionEncoding;

fn list_req() -> ListRequest {
    ListRequest {
        namespace: "default".into(),
        r#type: "Clusters.omni.sidero.dev".into(),
        options: Some(ListOptions::default()),
    }
}

#[tokio::test]
async fn gzip_requests_and_the_content_type_gate() {
    let sim = OmniSim::builder().start().await.unwrap();
    let signer = Signer::from_encoded(&sim.register_service_account("ci", Role::Reader).unwrap());
    let mut c = common::state(sim.endpoint(), signer.proper())
        .await
        .send_compressed(CompressionEncoding::Gzip);
    let mut s = c.list(list_req()).await.unwrap().into_inner();
    while s.message().await.unwrap().is_some() {}

    // An HTTP/2 request that is not gRPC never reaches the services.
    let mut ch = tonic::transport::Channel::from_shared(sim.endpoint().to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("{}{}", sim.endpoint(), methods::LIST))
        .header("content-type", "application/json")
        .body(tonic::body::Body::empty())
        .unwrap();
    std::future::poll_fn(|cx| tower::Service::poll_ready(&mut ch, cx))
        .await
        .unwrap();
    let resp = tower::Service::call(&mut ch, req).await.unwrap();
    assert_eq!(resp.status(), http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(sim.call_counts().values().sum::<u64>(), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn tls_endpoint() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = cert.cert.pem();
    let sim = OmniSim::builder()
        .tls(TlsIdentity {
            cert_pem: cert_pem.clone().into_bytes(),
            key_pem: cert.signing_key.serialize_pem().into_bytes(),
        })
        .start()
        .await
        .unwrap();
    assert!(sim.endpoint().starts_with("https://127.0.0.1:"));
    let signer = Signer::from_encoded(&sim.register_service_account("ci", Role::Reader).unwrap());
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(cert_pem))
        .domain_name("localhost");
    let ch = tonic::transport::Channel::from_shared(sim.endpoint().to_string())
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let tamper = signer.proper();
    let svc = tower::ServiceBuilder::new()
        .map_request(move |mut req: http::Request<tonic::body::Body>| {
            let m = req.uri().path().to_string();
            tamper(&m, req.headers_mut());
            req
        })
        .service(ch);
    let mut c = omni_client::proto::cosi::resource::state_client::StateClient::new(svc);
    let mut s = c.list(list_req()).await.unwrap().into_inner();
    while s.message().await.unwrap().is_some() {}
    sim.shutdown().await;
}

#[tokio::test]
async fn binary_writes_a_private_key_file_and_serves() {
    use std::io::BufRead as _;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_omni-sim"))
        .args(["--listen", "127.0.0.1:0", "--key-out"])
        .arg(&key_file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let endpoint = line
        .trim()
        .strip_prefix("omni-sim listening on ")
        .unwrap()
        .to_string();
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let signer = Signer::from_encoded(&std::fs::read_to_string(&key_file).unwrap());
    assert_eq!(signer.name, "omni-sim");
    let mut c = common::state(&endpoint, signer.proper()).await;
    let mut s = c.list(list_req()).await.unwrap().into_inner();
    while s.message().await.unwrap().is_some() {}
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn a_connect_latency_delays_each_new_connection_before_it_is_served() {
    let sim = OmniSim::builder().start().await.unwrap();
    let signer = Signer::from_encoded(&sim.register_service_account("ci", Role::Reader).unwrap());
    let delay = std::time::Duration::from_millis(300);
    sim.set_connect_latency(delay);

    let started = std::time::Instant::now();
    let mut c = common::state(sim.endpoint(), signer.proper()).await;
    let mut s = c.list(list_req()).await.unwrap().into_inner();
    while s.message().await.unwrap().is_some() {}
    // A lower bound only: the first answer cannot come before the connection is served.
    assert!(
        started.elapsed() >= delay,
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(sim.connections_accepted(), 1);
    sim.shutdown().await;
}
