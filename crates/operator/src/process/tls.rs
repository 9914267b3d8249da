//! Serving-certificate handling shared by the operator's HTTPS servers (admission webhook, and
//! any other listener that serves a PEM certificate from disk).
//!
//! Certificates are read from a directory of PEM files (the layout of a mounted
//! `kubernetes.io/tls` Secret) and re-read whenever their contents change, so a certificate
//! rotated by cert-manager is served from the next TLS handshake on without a restart.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, pki_types::CertificateDer};

/// Why a certificate/key pair could not be loaded or a TLS configuration built.
///
/// Messages name files, never their contents: the key file holds a private key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file that failed.
        path: PathBuf,
        /// The underlying IO error.
        #[source]
        source: io::Error,
    },
    /// A file is not well-formed PEM.
    #[error("{} is not valid PEM: {source}", path.display())]
    Pem {
        /// The file that failed.
        path: PathBuf,
        /// The PEM parser's error.
        #[source]
        source: io::Error,
    },
    /// The certificate file contains no `CERTIFICATE` block.
    #[error("{} contains no PEM certificate", path.display())]
    NoCertificate {
        /// The certificate file.
        path: PathBuf,
    },
    /// The key file contains no private key block.
    #[error("{} contains no PEM private key", path.display())]
    NoPrivateKey {
        /// The key file.
        path: PathBuf,
    },
    /// The key is unsupported or does not belong to the certificate.
    #[error("{} and {} are not a usable certificate/key pair: {source}", cert.display(), key.display())]
    KeyPair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why rustls refused the pair.
        #[source]
        source: rustls::Error,
    },
    /// A self-signed certificate could not be generated.
    #[error("cannot generate a self-signed serving certificate: {0}")]
    Generate(String),
    /// rustls refused the server configuration (protocol versions).
    #[error("cannot build the TLS server configuration: {0}")]
    Config(#[source] rustls::Error),
}

/// Where a serving certificate chain and its private key live on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CertFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl CertFiles {
    /// The files `cert_name` and `key_name` inside `dir` (for a mounted TLS Secret:
    /// `tls.crt` and `tls.key`).
    pub(crate) fn in_dir(dir: &Path, cert_name: &str, key_name: &str) -> Self {
        Self {
            cert: dir.join(cert_name),
            key: dir.join(key_name),
        }
    }
}

/// The crypto provider all operator TLS uses (ring), chosen explicitly so that no process-wide
/// default has to be installed.
pub(crate) fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a PEM certificate chain and private key into a rustls [`CertifiedKey`], checking that
/// the key matches the leaf certificate. `files` is only used to name the inputs in errors.
pub(crate) fn parse_certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    files: &CertFiles,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Pem {
            path: files.cert.clone(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|source| TlsError::Pem {
            path: files.key.clone(),
            source,
        })?
        .ok_or_else(|| TlsError::NoPrivateKey {
            path: files.key.clone(),
        })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|source| TlsError::KeyPair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    })
}

/// The last successfully loaded pair and the file contents it came from.
struct Loaded {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    key: Arc<CertifiedKey>,
}

/// A rustls certificate resolver that serves the pair in [`CertFiles`] and picks up changes to
/// the files on the next handshake.
///
/// The files are compared by content rather than modification time: they are small, handshakes
/// are rare for an admission webhook, and content comparison cannot miss a rewrite that lands
/// within the filesystem's timestamp granularity. When the new files do not parse (for example
/// the certificate was replaced but the key not yet), the previous pair keeps being served and
/// the next handshake tries again.
pub(crate) struct ReloadingCertResolver {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Loaded>,
}

impl fmt::Debug for ReloadingCertResolver {
    // Deliberately omits the loaded PEM bytes: one of them is a private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCertResolver")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ReloadingCertResolver {
    /// Loads `files`; fails when they cannot be served now, so a misconfigured server fails at
    /// start-up instead of on its first request.
    pub(crate) fn new(files: CertFiles, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let cert_pem = read(&files.cert)?;
        let key_pem = read(&files.key)?;
        let key = Arc::new(parse_certified_key(&cert_pem, &key_pem, &files, &provider)?);
        Ok(Self {
            files,
            provider,
            loaded: Mutex::new(Loaded {
                cert_pem,
                key_pem,
                key,
            }),
        })
    }

    /// Re-reads the files and, when they changed and parse, makes them current.
    /// Returns whether a new pair was loaded. On error the previous pair stays current.
    pub(crate) fn refresh(&self) -> Result<bool, TlsError> {
        let cert_pem = read(&self.files.cert)?;
        let key_pem = read(&self.files.key)?;
        let mut loaded = self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if loaded.cert_pem == cert_pem && loaded.key_pem == key_pem {
            return Ok(false);
        }
        let key = parse_certified_key(&cert_pem, &key_pem, &self.files, &self.provider)?;
        *loaded = Loaded {
            cert_pem,
            key_pem,
            key: Arc::new(key),
        };
        Ok(true)
    }

    /// The pair loaded last, without touching the disk.
    pub(crate) fn loaded(&self) -> Arc<CertifiedKey> {
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .key
            .clone()
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    /// Serves the pair loaded last: a handshake never waits for file IO (a slow or hung volume
    /// must not stall TLS). The owner refreshes it off the handshake path ([`Self::refresh`]).
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.loaded())
    }
}

/// A rustls server configuration serving `files` (reloaded on change), without client
/// authentication, offering the given ALPN protocols (e.g. `[b"http/1.1".to_vec()]`).
/// The resolver is returned too: its owner calls [`ReloadingCertResolver::refresh`] periodically.
pub(crate) fn reloading_server_config(
    files: CertFiles,
    alpn_protocols: Vec<Vec<u8>>,
) -> Result<(Arc<ServerConfig>, Arc<ReloadingCertResolver>), TlsError> {
    let provider = crypto_provider();
    let resolver = Arc::new(ReloadingCertResolver::new(files, provider.clone())?);
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    config.alpn_protocols = alpn_protocols;
    Ok((Arc::new(config), resolver))
}

/// How long a client may take to complete the TLS handshake or send request headers; keeps a
/// stalled connection from holding a task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long in-flight requests may run after shutdown was requested.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Most connections served at once; further clients wait in the listen backlog. The API
/// server and Prometheus keep a few connections each; thousands only come from a flood.
const MAX_CONNECTIONS: usize = 256;

/// How often the serving certificate files are re-read (off the handshake path).
const CERT_REFRESH: Duration = Duration::from_secs(5);

/// A rustls server configuration with one fixed, freshly generated self-signed certificate for
/// `localhost` and `127.0.0.1` (what a server without a certificate directory serves, as the
/// original operator's metrics endpoint did). Clients must skip verification or pin it.
pub(crate) fn self_signed_server_config(
    alpn_protocols: Vec<Vec<u8>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let generated = || -> Result<(String, String), rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let cert =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?
                .self_signed(&key)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let (cert_pem, key_pem) = generated().map_err(|e| TlsError::Generate(e.to_string()))?;
    let provider = crypto_provider();
    let names = CertFiles {
        cert: PathBuf::from("<generated certificate>"),
        key: PathBuf::from("<generated key>"),
    };
    let key = parse_certified_key(cert_pem.as_bytes(), key_pem.as_bytes(), &names, &provider)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)));
    config.alpn_protocols = alpn_protocols;
    Ok(Arc::new(config))
}

/// An HTTPS/1.1 server of an axum router: bounded connections, handshake and header timeouts,
/// a bounded drain on shutdown, and (when serving files) the certificate re-read every few
/// seconds off the handshake path. The admission webhook and the secure metrics endpoint use
/// it.
pub(crate) struct HttpsServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    certificate: Option<Arc<ReloadingCertResolver>>,
    name: &'static str,
}

impl HttpsServer {
    /// A server on the bound `listener`; `certificate` is refreshed while it runs. `name`
    /// (e.g. `webhook`) labels its log lines.
    pub(crate) fn new(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        certificate: Option<Arc<ReloadingCertResolver>>,
        name: &'static str,
    ) -> Self {
        Self {
            listener,
            acceptor: TlsAcceptor::from(config),
            certificate,
            name,
        }
    }

    /// The address actually bound (useful with port 0).
    pub(crate) fn local_addr(&self) -> Result<std::net::SocketAddr, io::Error> {
        self.listener.local_addr()
    }

    /// Serves `router` until `shutdown` completes, then lets in-flight requests finish
    /// (bounded).
    pub(crate) async fn run(self, router: Router, shutdown: impl Future<Output = ()>) {
        let service = TowerToHyperService::new(router);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut connections = JoinSet::new();
        let refresher = self
            .certificate
            .clone()
            .map(|certificate| tokio::spawn(refresh_certificate(certificate)));
        let name = self.name;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept(), if connections.len() < MAX_CONNECTIONS => {
                    let (tcp, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(error) => {
                            // Usually descriptor exhaustion; back off instead of spinning.
                            tracing::warn!(%error, server = name, "accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    connections.spawn(serve_connection(
                        self.acceptor.clone(),
                        tcp,
                        peer,
                        service.clone(),
                        stop_rx.clone(),
                        name,
                    ));
                }
            }
        }
        drop(self.listener);
        if let Some(refresher) = refresher {
            refresher.abort();
        }
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                server = name,
                "connections still open after the shutdown grace period"
            );
            connections.abort_all();
        }
    }
}

/// Re-reads the serving certificate every [`CERT_REFRESH`] on a blocking thread, so handshakes
/// never read files; a renewed certificate (cert-manager rewrites the Secret volume) is served
/// within that period.
async fn refresh_certificate(certificate: Arc<ReloadingCertResolver>) {
    loop {
        tokio::time::sleep(CERT_REFRESH).await;
        let c = certificate.clone();
        match tokio::task::spawn_blocking(move || c.refresh()).await {
            Ok(Ok(true)) => tracing::info!("serving certificate reloaded"),
            Ok(Ok(false)) | Err(_) => {}
            Ok(Err(error)) => tracing::warn!(
                %error,
                "serving certificate changed but cannot be loaded; keeping the previous one"
            ),
        }
    }
}

async fn serve_connection(
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    service: TowerToHyperService<Router>,
    mut stop: watch::Receiver<bool>,
    name: &'static str,
) {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, server = name, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, server = name, "TLS handshake timed out");
            return;
        }
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = async { stop.wait_for(|stop| *stop).await.map(|_| ()) } => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%peer, %error, server = name, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    fn write_pair(dir: &Path, cert: &str, key: &str) -> CertFiles {
        std::fs::write(dir.join("tls.crt"), cert).expect("write cert");
        std::fs::write(dir.join("tls.key"), key).expect("write key");
        CertFiles::in_dir(dir, "tls.crt", "tls.key")
    }

    /// The pair a resolver loads from `files` at start-up.
    fn load(files: &CertFiles) -> Result<Arc<CertifiedKey>, TlsError> {
        ReloadingCertResolver::new(files.clone(), crypto_provider()).map(|r| r.loaded())
    }

    #[test]
    fn loads_a_matching_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = self_signed("a.example");
        let files = write_pair(dir.path(), &cert, &key);
        let loaded = load(&files).expect("load");
        assert_eq!(loaded.cert.len(), 1);
    }

    #[test]
    fn rejects_mismatched_key_and_names_files_not_contents() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, _) = self_signed("a.example");
        let (_, other_key) = self_signed("b.example");
        let files = write_pair(dir.path(), &cert, &other_key);
        let error = load(&files).expect_err("mismatch");
        assert!(matches!(error, TlsError::KeyPair { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains("tls.key"), "{message}");
        assert!(!message.contains("PRIVATE KEY"), "{message}");
    }

    #[test]
    fn missing_or_empty_files_are_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = CertFiles::in_dir(dir.path(), "tls.crt", "tls.key");
        assert!(matches!(load(&files), Err(TlsError::Read { .. })));
        let (cert, _) = self_signed("a.example");
        let files = write_pair(dir.path(), &cert, "");
        assert!(matches!(load(&files), Err(TlsError::NoPrivateKey { .. })));
        let (_, key) = self_signed("a.example");
        let files = write_pair(dir.path(), "", &key);
        assert!(matches!(load(&files), Err(TlsError::NoCertificate { .. })));
    }

    #[test]
    fn a_handshake_never_reads_the_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cert, key) = self_signed("webhook.example");
        let files = write_pair(dir.path(), &cert, &key);
        let resolver = ReloadingCertResolver::new(files.clone(), crypto_provider())
            .unwrap_or_else(|e| panic!("{e}"));
        let first = resolver.loaded();
        // Files gone (a volume being remounted): handshakes keep being served from memory.
        std::fs::remove_file(&files.cert).unwrap_or_else(|e| panic!("{e}"));
        let served = resolver.loaded();
        assert!(Arc::ptr_eq(&first, &served));
        assert!(
            resolver.refresh().is_err(),
            "a refresh does see the missing file"
        );
        assert!(
            Arc::ptr_eq(&first, &resolver.loaded()),
            "and keeps the old pair"
        );
    }

    #[test]
    fn resolver_picks_up_new_files_and_keeps_old_pair_on_bad_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert1, key1) = self_signed("one.example");
        let files = write_pair(dir.path(), &cert1, &key1);
        let resolver = ReloadingCertResolver::new(files, crypto_provider()).expect("resolver");
        let first = resolver.loaded();
        assert!(!resolver.refresh().expect("unchanged"));

        let (cert2, key2) = self_signed("two.example");
        write_pair(dir.path(), &cert2, &key2);
        assert!(resolver.refresh().expect("changed"));
        let second = resolver.loaded();
        assert_ne!(first.cert, second.cert);

        // Half-rotated: new certificate, old key. The previous good pair keeps being served.
        let (cert3, _) = self_signed("three.example");
        std::fs::write(dir.path().join("tls.crt"), cert3).expect("write");
        assert!(resolver.refresh().is_err());
        assert_eq!(resolver.loaded().cert, second.cert);
        assert!(!format!("{resolver:?}").contains("PRIVATE"));
    }
}
