//! Cross-checks of our OpenPGP handling against GnuPG (docs/omni-wire.md#testing-signatures): keys
//! made by gpg load with the right fingerprint, our signatures verify with `gpg --verify`, and
//! gpg's detached signatures verify with our helper. These tests fail (never skip) when gpg is
//! missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use omni_client::auth::{
    self, KeyError, ServiceAccountKey, SignatureError, encode_key, generate_key, signed_payload,
    verify_signature,
};

/// A throw-away GnuPG home; the agent it spawns is stopped on drop.
struct GnuPg {
    home: tempfile::TempDir,
}

impl GnuPg {
    fn new() -> Self {
        let home = tempfile::Builder::new()
            .prefix("gpg")
            .tempdir_in("/tmp")
            .expect("temp GNUPGHOME");
        Self { home }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.home.path().join(name)
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("gpg")
            .arg("--homedir")
            .arg(self.home.path())
            .args([
                "--batch",
                "--no-tty",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(args)
            .output()
            .expect("gpg must be installed (Debian package gnupg) for these tests")
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "gpg {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8 gpg output")
    }

    /// Batch-generates an Ed25519 signing key and returns its lowercase fingerprint.
    fn generate(&self, name: &str, protected: bool) -> String {
        let protection = if protected {
            "Passphrase: secret\n"
        } else {
            "%no-protection\n"
        };
        let spec = format!(
            "Key-Type: eddsa\nKey-Curve: ed25519\nKey-Usage: sign\nName-Real: {name}\n\
             Name-Comment: test\nName-Email: {name}@serviceaccount.omni.sidero.dev\n\
             Expire-Date: 1d\n{protection}%commit\n"
        );
        let spec_path = self.path("keyspec");
        std::fs::write(&spec_path, spec).expect("write key spec");
        let output = Command::new("gpg")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--batch", "--no-tty", "--gen-key"])
            .arg(&spec_path)
            .output()
            .expect("gpg must be installed (Debian package gnupg) for these tests");
        assert!(
            output.status.success(),
            "gpg --gen-key failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let colons = self.ok(&["--with-colons", "--list-secret-keys", name]);
        let fpr = colons
            .lines()
            .find(|l| l.starts_with("fpr:"))
            .and_then(|l| l.split(':').nth(9))
            .expect("fpr line");
        fpr.to_ascii_lowercase()
    }

    fn export_secret(&self, fingerprint: &str) -> String {
        self.ok(&["--armor", "--export-secret-keys", fingerprint])
    }

    fn export_public(&self, fingerprint: &str) -> String {
        self.ok(&["--armor", "--export", fingerprint])
    }

    fn import(&self, armored: &str) {
        let file = self.path("import.asc");
        std::fs::write(&file, armored).expect("write key");
        self.ok(&["--import", path_str(&file)]);
    }

    fn verify(&self, signature: &[u8], payload: &[u8]) -> Output {
        let sig = self.path("payload.sig");
        let data = self.path("payload.json");
        std::fs::write(&sig, signature).expect("write sig");
        std::fs::write(&data, payload).expect("write payload");
        self.run(&["--verify", path_str(&sig), path_str(&data)])
    }
}

impl Drop for GnuPg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--kill", "gpg-agent"])
            .output();
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

fn cosi_payload() -> String {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        auth::TIMESTAMP_HEADER,
        http::HeaderValue::from_static("1767225600"),
    );
    signed_payload("/cosi.resource.State/Create", &headers)
}

#[test]
fn gpg_generated_key_loads_with_its_name_and_fingerprint() {
    let gpg = GnuPg::new();
    let fingerprint = gpg.generate("t", false);
    let armored = gpg.export_secret(&fingerprint);
    let key = ServiceAccountKey::parse(&encode_key("t", &armored)).expect("gpg key loads");
    assert_eq!(key.name(), "t");
    assert_eq!(key.identity(), "t@serviceaccount.omni.sidero.dev");
    assert_eq!(key.fingerprint(), fingerprint);
    let remaining =
        key.expiration().expect("1d expiry").as_second() - jiff::Timestamp::now().as_second();
    assert!(
        (80_000..=86_400).contains(&remaining),
        "remaining {remaining}"
    );
}

#[test]
fn signatures_made_with_a_gpg_key_verify_with_gpg() {
    let gpg = GnuPg::new();
    let fingerprint = gpg.generate("t", false);
    let key = ServiceAccountKey::parse(&encode_key("t", &gpg.export_secret(&fingerprint)))
        .expect("gpg key loads");
    let payload = cosi_payload();
    let header = key.signature_header(payload.as_bytes()).expect("sign");
    let fields: Vec<&str> = header.split(' ').collect();
    assert_eq!(fields.len(), 4, "{header}");
    assert_eq!(&fields[..3], ["siderov1", "t", fingerprint.as_str()]);
    let signature = STANDARD.decode(fields[3]).expect("base64 signature");
    let verified = gpg.verify(&signature, payload.as_bytes());
    assert!(
        verified.status.success(),
        "gpg --verify rejected our signature: {}",
        String::from_utf8_lossy(&verified.stderr)
    );
    let mut tampered = payload.into_bytes();
    tampered[3] ^= 0x20;
    assert!(!gpg.verify(&signature, &tampered).status.success());
}

#[test]
fn signatures_made_with_our_generated_key_verify_with_gpg() {
    let gpg = GnuPg::new();
    let (key, public, _) = generate_key("ci-bot", Duration::from_secs(3600)).expect("generate");
    gpg.import(&public);
    let colons = gpg.ok(&["--with-colons", "--list-keys", key.fingerprint()]);
    assert!(
        colons.contains("ci-bot (omni-client) <ci-bot@serviceaccount.omni.sidero.dev>"),
        "{colons}"
    );
    // gpg reports the expiry it read from our self-signature (field 7 of the pub line).
    let expires: i64 = colons
        .lines()
        .find(|l| l.starts_with("pub:"))
        .and_then(|l| l.split(':').nth(6))
        .and_then(|v| v.parse().ok())
        .expect("gpg sees an expiry");
    assert_eq!(Some(expires), key.expiration().map(|t| t.as_second()));
    let payload = cosi_payload();
    let signature = key.sign_payload(payload.as_bytes()).expect("sign");
    let verified = gpg.verify(&signature, payload.as_bytes());
    assert!(
        verified.status.success(),
        "gpg --verify rejected our signature: {}",
        String::from_utf8_lossy(&verified.stderr)
    );
}

#[test]
fn gpg_detached_signatures_verify_with_our_helper() {
    let gpg = GnuPg::new();
    let fingerprint = gpg.generate("t", false);
    let public = gpg.export_public(&fingerprint);
    let payload = cosi_payload();
    let data = gpg.path("data.json");
    let sig = gpg.path("data.sig");
    std::fs::write(&data, &payload).expect("write payload");
    gpg.ok(&["--detach-sign", "--output", path_str(&sig), path_str(&data)]);
    let signature = std::fs::read(&sig).expect("read sig");
    verify_signature(&public, payload.as_bytes(), &signature).expect("gpg signature verifies");

    let mut flipped = payload.clone().into_bytes();
    flipped[20] ^= 1;
    assert_eq!(
        verify_signature(&public, &flipped, &signature),
        Err(SignatureError::Mismatch)
    );
    let other_method = payload.replace("State/Create", "State/Update");
    assert_eq!(
        verify_signature(&public, other_method.as_bytes(), &signature),
        Err(SignatureError::Mismatch)
    );
    let empty_context = payload.replace(r#""context":null"#, r#""context":[]"#);
    assert_ne!(empty_context, payload);
    assert_eq!(
        verify_signature(&public, empty_context.as_bytes(), &signature),
        Err(SignatureError::Mismatch)
    );

    // A clear-text (type 0x01) signature is not what Omni signs.
    let text_sig = gpg.path("data.txt.sig");
    gpg.ok(&[
        "--textmode",
        "--detach-sign",
        "--output",
        path_str(&text_sig),
        path_str(&data),
    ]);
    let text_signature = std::fs::read(&text_sig).expect("read sig");
    assert_eq!(
        verify_signature(&public, payload.as_bytes(), &text_signature),
        Err(SignatureError::WrongSignatureType)
    );
}

#[test]
fn rsa_keys_verify_but_sha1_signatures_are_refused() {
    let gpg = GnuPg::new();
    let spec_path = gpg.path("rsaspec");
    std::fs::write(
        &spec_path,
        "Key-Type: RSA\nKey-Length: 2048\nKey-Usage: sign\nName-Real: r\n\
         Name-Email: r@serviceaccount.omni.sidero.dev\nExpire-Date: 1d\n%no-protection\n%commit\n",
    )
    .expect("write spec");
    gpg.ok(&["--gen-key", path_str(&spec_path)]);
    let colons = gpg.ok(&[
        "--with-colons",
        "--list-keys",
        "r@serviceaccount.omni.sidero.dev",
    ]);
    let fingerprint = colons
        .lines()
        .find(|l| l.starts_with("fpr:"))
        .and_then(|l| l.split(':').nth(9))
        .expect("fpr line")
        .to_owned();
    let public = gpg.export_public(&fingerprint);
    let payload = cosi_payload();
    let data = gpg.path("data.json");
    std::fs::write(&data, &payload).expect("write payload");
    for (digest, expected) in [("SHA256", Ok(())), ("SHA1", Err(SignatureError::WeakHash))] {
        let sig = gpg.path(&format!("data.{digest}.sig"));
        gpg.ok(&[
            "--digest-algo",
            digest,
            "--detach-sign",
            "--output",
            path_str(&sig),
            path_str(&data),
        ]);
        let signature = std::fs::read(&sig).expect("read sig");
        assert_eq!(
            verify_signature(&public, payload.as_bytes(), &signature),
            expected,
            "{digest}"
        );
    }
}

#[test]
fn passphrase_protected_gpg_keys_are_rejected() {
    let gpg = GnuPg::new();
    let fingerprint = gpg.generate("locked", true);
    let output = Command::new("gpg")
        .arg("--homedir")
        .arg(gpg.home.path())
        .args([
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "secret",
            "--armor",
            "--export-secret-keys",
            &fingerprint,
        ])
        .output()
        .expect("gpg");
    assert!(output.status.success());
    let armored = String::from_utf8(output.stdout).expect("utf-8");
    let err = ServiceAccountKey::parse(&encode_key("locked", &armored)).unwrap_err();
    assert!(matches!(err, KeyError::BadPgpKey(_)), "{err:?}");
}
