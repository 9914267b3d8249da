//! TLS for the emulated API server: an in-memory certificate authority, serving and client
//! certificates, the rustls server configuration, connection acceptance that keeps the peer's
//! client certificate, and CA-bundle loading for outgoing (admission webhook) calls.
//!
//! The real API server authenticates X.509 client certificates signed by its client CA but does
//! not *require* one (bearer tokens work on the same port), so the server configuration requests
//! a certificate and verifies it against the CA when one is offered.

use std::fmt;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Errors from certificate generation, TLS configuration and handshakes.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate or key generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// The rustls configuration was rejected (bad certificate, key or verifier).
    #[error("TLS configuration failed: {0}")]
    Config(#[from] rustls::Error),
    /// The client-certificate verifier could not be built from the CA.
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// A PEM bundle held no usable certificate or was malformed.
    #[error("invalid PEM: {0}")]
    Pem(String),
    /// The TLS handshake with a client failed.
    #[error("TLS handshake failed: {0}")]
    Handshake(#[source] std::io::Error),
    /// A client certificate asked for more groups than can be encoded (see [`ClientIdentity`]).
    #[error("a client certificate carries at most {MAX_CERT_GROUPS} groups, {0} were requested")]
    TooManyGroups(usize),
    /// A certificate's DER could not be parsed far enough to read its subject.
    #[error("malformed certificate: {0}")]
    Malformed(&'static str),
}

/// The most groups (`O=` attributes) a generated client certificate can carry.
///
/// rcgen stores one value per attribute type, so the second group is written under the same OID
/// through a custom attribute type; users needing more groups authenticate with a token instead.
pub const MAX_CERT_GROUPS: usize = 2;

/// A certificate and its private key, both PEM encoded.
///
/// `Debug` omits the key so it cannot leak into logs.
#[derive(Clone)]
pub struct CertifiedKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The PKCS#8 private key, PEM.
    pub key_pem: String,
    /// The PKCS#8 private key, DER.
    key_der: Vec<u8>,
}

impl CertifiedKey {
    /// The private key as rustls wants it.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// The certificate as rustls wants it.
    pub fn certificate(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.cert_der.clone())
    }
}

impl fmt::Debug for CertifiedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertifiedKey")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The user and groups a client certificate asserts (`CN` and `O` of its subject), exactly as
/// the Kubernetes x509 authenticator reads them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientIdentity {
    /// `CN`: the user name.
    pub common_name: String,
    /// Every `O`: the groups, in certificate order.
    pub organizations: Vec<String>,
}

/// An in-memory certificate authority that signs the serving certificate and client certificates.
pub struct CertificateAuthority {
    params: CertificateParams,
    key: KeyPair,
    cert: CertifiedKey,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert.cert_pem)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Generates a fresh self-signed CA (ECDSA P-256) whose subject CN is `common_name`.
    pub fn generate(common_name: &str) -> Result<Self, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let cert = CertifiedKey {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        };
        Ok(Self { params, key, cert })
    }

    /// The CA certificate, PEM: what clients put in `certificate-authority-data` / `caBundle`.
    pub fn cert_pem(&self) -> &str {
        &self.cert.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.certificate()
    }

    /// A root store holding only this CA.
    pub fn root_store(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.add(self.cert_der())?;
        Ok(roots)
    }

    /// Issues a serving certificate valid for `hosts` (DNS names or IP addresses).
    pub fn issue_server(&self, hosts: &[&str]) -> Result<CertifiedKey, TlsError> {
        let mut params =
            CertificateParams::new(hosts.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>())?;
        if let Some(first) = hosts.first() {
            params.distinguished_name.push(DnType::CommonName, *first);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(&params)
    }

    /// Issues the usual API-server serving certificate: `localhost`, `127.0.0.1` and `::1`.
    pub fn issue_localhost_server(&self) -> Result<CertifiedKey, TlsError> {
        self.issue_server(&["localhost", "127.0.0.1", "::1"])
    }

    /// Issues a client certificate for `user` in `groups` (`CN=user`, one `O=` per group).
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<CertifiedKey, TlsError> {
        if groups.len() > MAX_CERT_GROUPS {
            return Err(TlsError::TooManyGroups(groups.len()));
        }
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for (i, group) in groups.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                // Same OID (2.5.4.10) under a distinct map key, see MAX_CERT_GROUPS.
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            params
                .distinguished_name
                .push(ty, DnValue::Utf8String((*group).to_owned()));
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(&params)
    }

    fn sign(&self, params: &CertificateParams) -> Result<CertifiedKey, TlsError> {
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(CertifiedKey {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        })
    }

    /// A server configuration presenting `serving` and verifying optional client certificates
    /// against this CA; ALPN offers `h2` and `http/1.1` like the real API server.
    pub fn server_config(
        &self,
        serving: &CertifiedKey,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        server_config(serving, Some(self.root_store()?))
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration presenting `serving`; when `client_roots` is given, client
/// certificates are requested (not required) and verified against it.
pub fn server_config(
    serving: &CertifiedKey,
    client_roots: Option<RootCertStore>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let builder = match client_roots {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_single_cert(vec![serving.certificate()], serving.private_key())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The leaf client certificate (DER) a TLS peer presented and the CA verified.
///
/// The server puts it into each request's extensions so the authenticator can read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate(pub Arc<Vec<u8>>);

impl PeerCertificate {
    /// The identity (`CN`, `O`s) the certificate asserts.
    pub fn identity(&self) -> Result<ClientIdentity, TlsError> {
        client_identity(&self.0)
    }
}

/// Accepts TLS connections and reports the verified client certificate, if any.
#[derive(Clone)]
pub struct TlsServer {
    acceptor: TlsAcceptor,
}

impl fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsServer").finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Wraps a server configuration.
    pub fn new(config: Arc<rustls::ServerConfig>) -> Self {
        Self {
            acceptor: TlsAcceptor::from(config),
        }
    }

    /// Completes the handshake on `tcp`; returns the stream and the peer's leaf certificate.
    pub async fn accept(
        &self,
        tcp: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, Option<PeerCertificate>), TlsError> {
        let stream = self
            .acceptor
            .accept(tcp)
            .await
            .map_err(TlsError::Handshake)?;
        let peer = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| PeerCertificate(Arc::new(leaf.to_vec())));
        Ok((stream, peer))
    }
}

/// Parses every certificate in a PEM bundle (such as a webhook's decoded `caBundle`).
pub fn certificates_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut reader = pem;
    let certs = rustls_pemfile::certs(&mut reader)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Pem("no CERTIFICATE block found".to_owned()));
    }
    Ok(certs)
}

/// A root store holding every certificate of a PEM bundle.
pub fn root_store_from_pem(pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates_from_pem(pem)? {
        roots.add(cert)?;
    }
    Ok(roots)
}

/// A client configuration trusting exactly the certificates of a PEM bundle, offering
/// `http/1.1` only (webhook calls are plain request/response).
pub fn client_config_from_pem(ca_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    client_config(root_store_from_pem(ca_pem)?, None)
}

/// A client configuration trusting `roots`, optionally presenting a client certificate.
pub fn client_config(
    roots: RootCertStore,
    identity: Option<&CertifiedKey>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => builder.with_client_auth_cert(vec![id.certificate()], id.private_key())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Reads `CN` and every `O` from a certificate's subject.
///
/// A tiny DER walk instead of a full X.509 parser: the path to the subject is fixed
/// (Certificate → TBSCertificate → \[version\], serial, signature, issuer, validity, subject).
pub fn client_identity(cert_der: &[u8]) -> Result<ClientIdentity, TlsError> {
    const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
    const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

    let (cert, _) = der_read(cert_der, 0x30)?;
    let (tbs, _) = der_read(cert, 0x30)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = der_read(rest, 0xa0)?.1;
    }
    rest = der_read(rest, 0x02)?.1; // serialNumber
    rest = der_read(rest, 0x30)?.1; // signature AlgorithmIdentifier
    rest = der_read(rest, 0x30)?.1; // issuer
    rest = der_read(rest, 0x30)?.1; // validity
    let (mut subject, _) = der_read(rest, 0x30)?;

    let mut identity = ClientIdentity::default();
    while !subject.is_empty() {
        let (mut set, after) = der_read(subject, 0x31)?;
        subject = after;
        while !set.is_empty() {
            let (attr, after) = der_read(set, 0x30)?;
            set = after;
            let (oid, value) = der_read(attr, 0x06)?;
            let (tag, text, _) = der_any(value)?;
            // UTF8String, PrintableString, IA5String, TeletexString: all ASCII-compatible here.
            if !matches!(tag, 0x0c | 0x13 | 0x16 | 0x14) {
                continue;
            }
            let text = String::from_utf8_lossy(text).into_owned();
            if oid == OID_CN {
                identity.common_name = text;
            } else if oid == OID_O {
                identity.organizations.push(text);
            }
        }
    }
    Ok(identity)
}

/// Reads one TLV with the expected tag; returns (contents, remainder).
fn der_read(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), TlsError> {
    let (found, contents, rest) = der_any(input)?;
    if found != tag {
        return Err(TlsError::Malformed("unexpected DER tag"));
    }
    Ok((contents, rest))
}

/// Reads one TLV of any tag; returns (tag, contents, remainder).
fn der_any(input: &[u8]) -> Result<(u8, &[u8], &[u8]), TlsError> {
    let truncated = TlsError::Malformed("truncated DER");
    let (&tag, rest) = input.split_first().ok_or(truncated)?;
    let (&first, mut rest) = rest
        .split_first()
        .ok_or(TlsError::Malformed("truncated DER"))?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(TlsError::Malformed("bad DER length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(TlsError::Malformed("truncated DER"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_certificate_subject_round_trips_user_and_groups() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let cert = ca
            .issue_client("alice", &["dev", "system:masters"])
            .unwrap();
        let id = client_identity(&cert.cert_der).unwrap();
        assert_eq!(id.common_name, "alice");
        assert_eq!(id.organizations, vec!["dev", "system:masters"]);

        let none = ca.issue_client("bob", &[]).unwrap();
        let id = client_identity(&none.cert_der).unwrap();
        assert_eq!(id.common_name, "bob");
        assert!(id.organizations.is_empty());
    }

    #[test]
    fn too_many_groups_is_an_error_not_a_silent_truncation() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        assert!(matches!(
            ca.issue_client("carol", &["a", "b", "c"]),
            Err(TlsError::TooManyGroups(3))
        ));
    }

    #[test]
    fn garbage_is_rejected_by_the_subject_reader() {
        assert!(client_identity(&[0x30, 0x05, 0x01]).is_err());
        assert!(client_identity(&[]).is_err());
    }

    #[test]
    fn pem_bundle_loading_requires_a_certificate() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let roots = root_store_from_pem(ca.cert_pem().as_bytes()).unwrap();
        assert_eq!(roots.len(), 1);
        assert!(root_store_from_pem(b"not pem").is_err());
    }

    #[test]
    fn debug_output_never_contains_the_private_key() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let cert = ca.issue_client("alice", &[]).unwrap();
        let shown = format!("{cert:?} {ca:?}");
        assert!(!shown.contains(cert.key_pem.trim()));
        assert!(!shown.contains("PRIVATE KEY"));
    }

    #[tokio::test]
    async fn handshake_exposes_the_verified_client_certificate_and_allows_none() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let serving = ca.issue_localhost_server().unwrap();
        let server = TlsServer::new(ca.server_config(&serving).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            let mut peers = Vec::new();
            for _ in 0..2 {
                let (tcp, _) = listener.accept().await.unwrap();
                let (_stream, peer) = server.accept(tcp).await.unwrap();
                peers.push(peer);
            }
            peers
        });

        let alice = ca.issue_client("alice", &["team"]).unwrap();
        for identity in [Some(&alice), None] {
            let config = client_config(ca.root_store().unwrap(), identity).unwrap();
            let connector = tokio_rustls::TlsConnector::from(config);
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let stream = connector.connect(name, tcp).await.unwrap();
            // TLS 1.3 clients finish before the server reads the certificate; flush both ways.
            let (_, conn) = stream.get_ref();
            assert_eq!(conn.alpn_protocol(), Some(&b"http/1.1"[..]));
            drop(stream);
        }
        let peers = accept.await.unwrap();
        let first = peers[0].as_ref().expect("client certificate seen");
        assert_eq!(first.identity().unwrap().common_name, "alice");
        assert!(peers[1].is_none());
    }

    #[tokio::test]
    async fn a_certificate_from_another_ca_is_refused() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let other = CertificateAuthority::generate("other-ca").unwrap();
        let serving = ca.issue_localhost_server().unwrap();
        let server = TlsServer::new(ca.server_config(&serving).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            server.accept(tcp).await.map(|(_, peer)| peer)
        });
        let mallory = other.issue_client("mallory", &["system:masters"]).unwrap();
        let config = client_config(ca.root_store().unwrap(), Some(&mallory)).unwrap();
        let connector = tokio_rustls::TlsConnector::from(config);
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        // With TLS 1.3 the client may see success before the server rejects; the server decides.
        let _ = connector.connect(name, tcp).await;
        assert!(accept.await.unwrap().is_err());
    }
}
