//! Signature verification (docs/omni-wire.md#what-the-server-checks) and role checks
//! (docs/omni-wire.md#who-may-read-and-write-what) of the simulator.

use crate::common;

use std::sync::Arc;

use common::{Signer, Tamper, now, set};
use omni_client::proto::cosi::resource::{GetRequest, ListOptions, ListRequest};
use omni_client::proto::specs::ClusterStatusSpec;
use omni_sim::{OmniSim, Outcome, Role, methods};
use tonic::Code;

const LIST: &str = "/cosi.resource.State/List";

fn list_req(ty: &str) -> ListRequest {
    ListRequest {
        namespace: "default".into(),
        r#type: ty.into(),
        options: Some(ListOptions::default()),
    }
}

async fn list_status(endpoint: &str, tamper: Tamper) -> Result<(), tonic::Status> {
    let mut c = common::state(endpoint, tamper).await;
    let mut stream = c
        .list(list_req("Clusters.omni.sidero.dev"))
        .await?
        .into_inner();
    while stream.message().await?.is_some() {}
    Ok(())
}

fn assert_invalid_signature(r: Result<(), tonic::Status>) {
    let e = r.expect_err("request must be rejected");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert_eq!(e.message(), "invalid signature");
}

#[tokio::test]
async fn signature_checks() {
    let sim = OmniSim::builder().start().await.unwrap();
    let signer = Signer::from_encoded(&sim.register_service_account("ci", Role::Operator).unwrap());
    let ep = sim.endpoint().to_string();

    // A correctly signed call succeeds.
    list_status(&ep, signer.proper()).await.unwrap();

    // No signature at all.
    assert_invalid_signature(list_status(&ep, Arc::new(|_, _| {})).await);

    // Payload tampered after signing (one byte changed).
    let s = signer.clone();
    assert_invalid_signature(
        list_status(
            &ep,
            Arc::new(move |m, h| {
                let ts = now();
                let payload = Signer::payload(m, None, ts);
                let sig = s.sign(payload.as_bytes());
                set(h, "x-sidero-timestamp", &ts.to_string());
                set(h, "x-sidero-payload", &payload.replacen("null", "nulL", 1));
                set(h, "x-sidero-signature", &s.header(&sig));
            }),
        )
        .await,
    );

    // Stale timestamp: 6 minutes old.
    let s = signer.clone();
    assert_invalid_signature(
        list_status(&ep, Arc::new(move |m, h| s.sign_headers(m, h, now() - 360))).await,
    );
    // 4 minutes old is within the allowed skew.
    let s = signer.clone();
    list_status(&ep, Arc::new(move |m, h| s.sign_headers(m, h, now() - 240)))
        .await
        .unwrap();

    // Signature made for another method.
    let s = signer.clone();
    assert_invalid_signature(
        list_status(
            &ep,
            Arc::new(move |_, h| s.sign_headers("/cosi.resource.State/Get", h, now())),
        )
        .await,
    );

    // `"context":[]` instead of null.
    let s = signer.clone();
    assert_invalid_signature(
        list_status(
            &ep,
            Arc::new(move |m, h| {
                let ts = now();
                let payload =
                    Signer::payload(m, None, ts).replace("\"context\":null", "\"context\":[]");
                let sig = s.sign(payload.as_bytes());
                set(h, "x-sidero-timestamp", &ts.to_string());
                set(h, "x-sidero-payload", &payload);
                set(h, "x-sidero-signature", &s.header(&sig));
            }),
        )
        .await,
    );

    // A header sent but not signed (runtime) is a mismatch.
    let s = signer.clone();
    assert_invalid_signature(
        list_status(
            &ep,
            Arc::new(move |m, h| {
                s.sign_headers(m, h, now());
                set(h, "runtime", "Talos");
            }),
        )
        .await,
    );

    // Unknown fingerprint: a key that was never registered.
    let stranger = Signer::from_encoded(&omni_sim::auth::generate_key("stranger").unwrap().encoded);
    assert_invalid_signature(list_status(&ep, stranger.proper()).await);

    // Fewer than four fields is an error, not a crash; the server keeps serving.
    let s = signer.clone();
    assert_invalid_signature(
        list_status(
            &ep,
            Arc::new(move |m, h| {
                s.sign_headers(m, h, now());
                let header = format!("siderov1 {} {}", s.name, s.fingerprint);
                set(h, "x-sidero-signature", &header);
            }),
        )
        .await,
    );
    // Wrong version tag.
    let s = signer.clone();
    assert_invalid_signature(
        list_status(
            &ep,
            Arc::new(move |m, h| {
                s.sign_headers(m, h, now());
                let v = h["x-sidero-signature"]
                    .to_str()
                    .unwrap()
                    .replacen("siderov1", "siderov2", 1);
                set(h, "x-sidero-signature", &v);
            }),
        )
        .await,
    );
    list_status(&ep, signer.proper()).await.unwrap();

    assert!(sim.call_count(LIST, Outcome::Error(Code::Unauthenticated)) >= 9);
    assert_eq!(sim.call_count(LIST, Outcome::Ok), 3);
    sim.shutdown().await;
}

#[tokio::test]
async fn expired_key_is_rejected() {
    let sim = OmniSim::builder().start().await.unwrap();
    let key = omni_sim::auth::generate_key("old").unwrap();
    let past = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
    sim.register_public_key("old", &key.public_armored, Role::Admin, Some(past))
        .unwrap();
    let signer = Signer::from_encoded(&key.encoded);
    assert_invalid_signature(list_status(sim.endpoint(), signer.proper()).await);
    sim.shutdown().await;
}

fn gpg(home: &std::path::Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("/usr/bin/gpg")
        .arg("--homedir")
        .arg(home)
        .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gpg must be installed");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "gpg {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[tokio::test]
async fn gnupg_signature_is_accepted() {
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        home.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let params = "Key-Type: eddsa\nKey-Curve: ed25519\nKey-Usage: sign\nName-Real: t\nName-Comment: test\nName-Email: t@serviceaccount.omni.sidero.dev\nExpire-Date: 1d\n%no-protection\n%commit\n";
    gpg(home.path(), &["--gen-key"], Some(params.as_bytes()));
    let armored = String::from_utf8(gpg(home.path(), &["--armor", "--export"], None)).unwrap();
    let colons =
        String::from_utf8(gpg(home.path(), &["--with-colons", "--fingerprint"], None)).unwrap();
    let fpr = colons
        .lines()
        .find(|l| l.starts_with("fpr:"))
        .and_then(|l| l.split(':').nth(9))
        .unwrap()
        .to_lowercase();

    let sim = OmniSim::builder().start().await.unwrap();
    let registered = sim
        .register_public_key("t", &armored, Role::Reader, None)
        .unwrap();
    assert_eq!(registered, fpr);

    let sign_with_gpg = |payload: &str| -> String {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("payload");
        std::fs::write(&p, payload).unwrap();
        let sig_path = dir.path().join("payload.sig");
        gpg(
            home.path(),
            &[
                "--detach-sign",
                "--output",
                sig_path.to_str().unwrap(),
                p.to_str().unwrap(),
            ],
            None,
        );
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(sig_path).unwrap())
    };
    let tamper = |flip: bool| -> Tamper {
        let ts = now();
        let payload = Signer::payload(LIST, None, ts);
        let sig = sign_with_gpg(&payload);
        let sent = if flip {
            payload.replacen("null", "nulL", 1)
        } else {
            payload
        };
        let header = format!("siderov1 t {fpr} {sig}");
        Arc::new(move |_, h| {
            set(h, "x-sidero-timestamp", &ts.to_string());
            set(h, "x-sidero-payload", &sent);
            set(h, "x-sidero-signature", &header);
        })
    };
    list_status(sim.endpoint(), tamper(false)).await.unwrap();
    assert_invalid_signature(list_status(sim.endpoint(), tamper(true)).await);
    sim.shutdown().await;
}

#[tokio::test]
async fn roles_are_enforced() {
    let sim = OmniSim::builder().start().await.unwrap();
    let reader = Signer::from_encoded(&sim.register_service_account("r", Role::Reader).unwrap());
    let operator =
        Signer::from_encoded(&sim.register_service_account("o", Role::Operator).unwrap());
    let none = Signer::from_encoded(&sim.register_service_account("n", Role::None).unwrap());
    let ep = sim.endpoint().to_string();

    let cluster = common::res(
        "Clusters.omni.sidero.dev",
        "demo",
        &[],
        &omni_client::proto::specs::ClusterSpec {
            kubernetes_version: "1.32.3".into(),
            talos_version: "1.9.5".into(),
            ..Default::default()
        },
    );
    // Reader can read but not write.
    list_status(&ep, reader.proper()).await.unwrap();
    let mut c = common::state(&ep, reader.proper()).await;
    let e = c
        .create(common::create_req(cluster.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(
        e.message(),
        "failed to validate: unauthorized: access denied: insufficient role: \"Reader\""
    );
    // None cannot read clusters but may read the version catalogue.
    assert_eq!(
        list_status(&ep, none.proper()).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    let mut c = common::state(&ep, none.proper()).await;
    c.get(GetRequest {
        namespace: "default".into(),
        r#type: "TalosVersions.omni.sidero.dev".into(),
        id: "1.9.5".into(),
        options: None,
    })
    .await
    .unwrap();

    // Operator writes; status types are read-only; PublicKeys are not reachable.
    let mut c = common::state(&ep, operator.proper()).await;
    c.create(common::create_req(cluster)).await.unwrap();
    let status = common::res(
        "ClusterStatuses.omni.sidero.dev",
        "other",
        &[],
        &ClusterStatusSpec::default(),
    );
    let e = c.create(common::create_req(status)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("only read access is permitted"),
        "{e:?}"
    );
    let e = c
        .get(GetRequest {
            namespace: "default".into(),
            r#type: "PublicKeys.omni.sidero.dev".into(),
            id: operator.fingerprint.clone(),
            options: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("access is not permitted"));

    // Injected failures hit after authentication, then stop.
    sim.inject_failure(methods::LIST, Code::Unavailable, 1);
    assert_eq!(
        list_status(&ep, operator.proper())
            .await
            .unwrap_err()
            .code(),
        Code::Unavailable
    );
    list_status(&ep, operator.proper()).await.unwrap();
    // Three write attempts (rejected ones count too).
    assert_eq!(sim.writes_total(), 3);
    sim.shutdown().await;
}

#[tokio::test]
async fn injected_clock_drives_key_expiry_and_skew() {
    let start = jiff::Timestamp::now();
    let clock = omni_sim::ManualClock::new(start);
    let sim = OmniSim::builder()
        .clock(Arc::new(clock.clone()))
        .start()
        .await
        .unwrap();
    let key = omni_sim::auth::generate_key("short").unwrap();
    let expiry = start + jiff::SignedDuration::from_hours(1);
    sim.register_public_key("short", &key.public_armored, Role::Reader, Some(expiry))
        .unwrap();
    let signer = Signer::from_encoded(&key.encoded);
    let at = |t: jiff::Timestamp| -> Tamper {
        let s = signer.clone();
        Arc::new(move |m, h| s.sign_headers(m, h, t.as_second()))
    };
    list_status(sim.endpoint(), at(start)).await.unwrap();
    // The server clock, not the wall clock, decides skew: 10 minutes later the same
    // timestamp is stale, a fresh one is fine.
    clock.advance(jiff::SignedDuration::from_mins(10));
    assert_invalid_signature(list_status(sim.endpoint(), at(start)).await);
    list_status(sim.endpoint(), at(clock_now(&clock)))
        .await
        .unwrap();
    // Past the registered expiration every request fails.
    clock.advance(jiff::SignedDuration::from_hours(1));
    assert_invalid_signature(list_status(sim.endpoint(), at(clock_now(&clock))).await);
    sim.shutdown().await;
}

fn clock_now(c: &omni_sim::ManualClock) -> jiff::Timestamp {
    omni_sim::Clock::now(c)
}

#[tokio::test]
async fn the_name_a_key_claims_is_ignored_the_registered_account_decides() {
    // Omni identifies the caller by the key's fingerprint alone; the name in the signature
    // header (a key's `name`) is not checked against the account the key is registered to.
    let sim = OmniSim::builder().start().await.unwrap();
    let mut reader =
        Signer::from_encoded(&sim.register_service_account("r", Role::Reader).unwrap());
    let mut operator =
        Signer::from_encoded(&sim.register_service_account("o", Role::Operator).unwrap());
    // Each key claims to be the other account.
    reader.name = "o".into();
    operator.name = "r".into();
    let ep = sim.endpoint().to_string();
    let cluster = |name: &str| {
        common::res(
            "Clusters.omni.sidero.dev",
            name,
            &[],
            &omni_client::proto::specs::ClusterSpec {
                kubernetes_version: "1.32.3".into(),
                talos_version: "1.9.5".into(),
                ..Default::default()
            },
        )
    };
    let mut c = common::state(&ep, operator.proper()).await;
    c.create(common::create_req(cluster("by-operator")))
        .await
        .expect("the Operator's key writes whatever name it claims");
    let mut c = common::state(&ep, reader.proper()).await;
    let e = c
        .create(common::create_req(cluster("by-reader")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().ends_with("insufficient role: \"Reader\""),
        "{e:?}"
    );
    sim.shutdown().await;
}
