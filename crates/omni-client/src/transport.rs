//! Connection to Omni: endpoint URL rules, TLS / h2c channel setup and the signing layer.
//!
//! One [`Client`] owns one lazily-connected tonic [`Channel`] wrapped in [`SigningService`], so
//! every call — unary or streaming — carries fresh `siderov1` signature headers. Cloning a
//! `Client` is cheap and shares the connection.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tonic::body::Body;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::auth::{KeyError, ServiceAccountKey, unix_now};
use crate::proto::cosi::resource::state_client::StateClient;
use crate::proto::management::management_service_client::ManagementServiceClient;

/// Largest message accepted from the server (Omni's own limit).
pub(crate) const MAX_DECODING_MESSAGE_SIZE: usize = 32 * 1024 * 1024;
/// Default deadline of unary calls and `List` streams.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default TCP/TLS connect deadline.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive ping interval (what the Go client uses).
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);

/// Why an endpoint URL cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The URL does not parse.
    #[error("invalid Omni endpoint URL {url:?}: {reason}")]
    Invalid {
        /// The URL as given (endpoints are not secret).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// How the channel talks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransportKind {
    /// TLS with ALPN `h2`.
    Tls,
    /// Cleartext HTTP/2 with prior knowledge (h2c).
    H2c,
}

/// A parsed Omni endpoint: only scheme, host and port matter; any path is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OmniEndpoint {
    kind: TransportKind,
    host: String,
    port: u16,
    display: String,
}

impl OmniEndpoint {
    /// Parses an endpoint URL following the Go client's rules: `https` defaults to port 443 over
    /// TLS; `http` and `grpc` default to port 80 over h2c and display as `grpc://`; any other
    /// scheme is dialled over h2c (port 80 if none) and displayed unchanged.
    pub(crate) fn parse(url: &str) -> Result<Self, EndpointError> {
        let invalid = |reason: &str| EndpointError::Invalid {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = url.trim();
        let uri: http::Uri = trimmed.parse().map_err(|_| invalid("not a URL"))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| invalid("missing scheme (expected https://, http:// or grpc://)"))?
            .to_ascii_lowercase();
        let authority = uri.authority().ok_or_else(|| invalid("missing host"))?;
        if authority.as_str().contains('@') {
            return Err(invalid("user information is not allowed"));
        }
        let host = authority.host().to_owned();
        if host.is_empty() {
            return Err(invalid("missing host"));
        }
        let explicit_port = authority.port_u16();
        let (kind, port, display) = match scheme.as_str() {
            "https" => {
                let port = explicit_port.unwrap_or(443);
                (TransportKind::Tls, port, format!("https://{host}:{port}"))
            }
            "http" | "grpc" => {
                let port = explicit_port.unwrap_or(80);
                (TransportKind::H2c, port, format!("grpc://{host}:{port}"))
            }
            _ => (
                TransportKind::H2c,
                explicit_port.unwrap_or(80),
                trimmed.to_owned(),
            ),
        };
        Ok(Self {
            kind,
            host,
            port,
            display,
        })
    }

    /// The endpoint as the Go client reports it (e.g. `https://omni.example.com:443`).
    pub fn display(&self) -> &str {
        &self.display
    }

    /// TLS or h2c.
    pub(crate) fn kind(&self) -> TransportKind {
        self.kind
    }

    /// Host name or IP literal (IPv6 in brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Port dialled.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn dial_uri(&self) -> String {
        let scheme = match self.kind {
            TransportKind::Tls => "https",
            TransportKind::H2c => "http",
        };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
}

impl fmt::Display for OmniEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

/// Everything needed to build a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Omni API URL (`https://`, `http://` or `grpc://`).
    pub endpoint: String,
    /// The service-account key every call is signed with.
    pub key: ServiceAccountKey,
    /// Skip TLS certificate verification (the connection is still encrypted).
    pub insecure_skip_tls_verify: bool,
    /// Deadline of unary calls and `List` streams; watches have none.
    pub request_timeout: Duration,
    /// Deadline of establishing the TCP/TLS connection.
    pub connect_timeout: Duration,
}

impl ClientConfig {
    /// A configuration with default timeouts and TLS verification on.
    pub fn new(endpoint: impl Into<String>, key: ServiceAccountKey) -> Self {
        Self {
            endpoint: endpoint.into(),
            key,
            insecure_skip_tls_verify: false,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Parses the key string and builds a configuration in one step.
    pub fn from_encoded_key(endpoint: impl Into<String>, key: &str) -> Result<Self, ClientError> {
        Ok(Self::new(endpoint, ServiceAccountKey::parse(key)?))
    }
}

/// Why a [`Client`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint URL is unusable.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The service-account key is unusable.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The channel could not be configured (e.g. TLS setup).
    #[error("could not configure the Omni connection: {0}")]
    Transport(String),
}

/// The signed channel every generated client runs on.
pub(crate) type SignedChannel = SigningService<Channel>;

/// A connection to one Omni instance, authenticated as one service account.
#[derive(Clone)]
pub struct Client {
    endpoint: Arc<OmniEndpoint>,
    channel: SignedChannel,
    request_timeout: Duration,
    fingerprint: Arc<str>,
    teardown_unsupported: Arc<AtomicBool>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint.display())
            .field("key_fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Builds a client. The connection is opened lazily on the first call and re-established
    /// transparently after failures. Must be called inside a Tokio runtime.
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        let endpoint = OmniEndpoint::parse(&config.endpoint)?;
        // The lazy channel spawns its worker task immediately; fail cleanly instead of panicking.
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ClientError::Transport(
                "an Omni client must be created inside a Tokio runtime".to_owned(),
            ));
        }
        let transport = |e: tonic::transport::Error| ClientError::Transport(e.to_string());
        let mut builder = Endpoint::from_shared(endpoint.dial_uri())
            .map_err(transport)?
            .connect_timeout(config.connect_timeout)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if endpoint.kind() == TransportKind::Tls {
            let tls = ClientTlsConfig::new().assume_http2(true);
            builder = if config.insecure_skip_tls_verify {
                builder
                    .tls_config_with_verifier(tls, Arc::new(AcceptAnyServerCert::new()))
                    .map_err(transport)?
            } else {
                builder
                    .tls_config(tls.with_native_roots())
                    .map_err(transport)?
            };
        }
        let fingerprint: Arc<str> = Arc::from(config.key.fingerprint());
        let channel = SigningService::new(builder.connect_lazy(), config.key);
        tracing::debug!(endpoint = %endpoint, key_fingerprint = %fingerprint, "omni client configured");
        Ok(Self {
            endpoint: Arc::new(endpoint),
            channel,
            request_timeout: config.request_timeout,
            fingerprint,
            teardown_unsupported: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The endpoint in the Go client's display form.
    pub fn endpoint(&self) -> &OmniEndpoint {
        &self.endpoint
    }

    /// Deadline applied to unary calls and `List` streams.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Set once the server answered `Teardown` with `UNIMPLEMENTED` (Omni < 1.8); shared by
    /// clones so the fallback is remembered for the life of the connection.
    pub(crate) fn teardown_unsupported(&self) -> &AtomicBool {
        &self.teardown_unsupported
    }

    /// The raw generated COSI State client on the shared signed channel.
    pub fn raw_state(&self) -> StateClient<SignedChannel> {
        StateClient::new(self.channel.clone())
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(MAX_DECODING_MESSAGE_SIZE)
    }

    /// The raw generated ManagementService client on the shared signed channel.
    pub(crate) fn raw_management(&self) -> ManagementServiceClient<SignedChannel> {
        ManagementServiceClient::new(self.channel.clone())
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(MAX_DECODING_MESSAGE_SIZE)
    }
}

/// A tower service that signs each outgoing HTTP/2 request (the gRPC call) before handing it to
/// the inner service. The method is taken from the request path, so streaming calls are signed
/// once, when opened, exactly like unary ones.
#[derive(Clone)]
pub struct SigningService<S> {
    inner: S,
    key: Arc<ServiceAccountKey>,
}

impl<S> SigningService<S> {
    /// Wraps `inner` so every request is signed with `key`.
    pub(crate) fn new(inner: S, key: ServiceAccountKey) -> Self {
        Self {
            inner,
            key: Arc::new(key),
        }
    }
}

impl<S> fmt::Debug for SigningService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningService")
            .field("key_fingerprint", &self.key.fingerprint())
            .finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S> tower::Service<http::Request<Body>> for SigningService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        if let Err(error) = self
            .key
            .sign_headers(&path, request.headers_mut(), unix_now())
        {
            tracing::warn!(method = %path, %error, "could not sign Omni request");
            return Box::pin(async move { Err(Box::new(error) as BoxError) });
        }
        tracing::trace!(method = %path, "signed Omni request");
        let future = self.inner.call(request);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}

/// Accepts any server certificate (`insecureSkipTLSVerify`) while still checking that the
/// handshake is signed by the presented certificate's key, so the session stays encrypted.
#[derive(Debug)]
struct AcceptAnyServerCert {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl AcceptAnyServerCert {
    fn new() -> Self {
        Self {
            algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> OmniEndpoint {
        OmniEndpoint::parse(url).unwrap()
    }

    #[test]
    fn https_defaults_to_443_over_tls() {
        let e = parse("https://omni.example.com");
        assert_eq!(e.kind(), TransportKind::Tls);
        assert_eq!(e.display(), "https://omni.example.com:443");
        assert_eq!(e.dial_uri(), "https://omni.example.com:443");
    }

    #[test]
    fn path_is_ignored_and_explicit_port_kept() {
        let e = parse("https://omni.example.com:8443/some/path?x=1");
        assert_eq!(e.display(), "https://omni.example.com:8443");
        assert_eq!(e.port(), 8443);
    }

    #[test]
    fn http_is_rewritten_to_grpc_h2c() {
        let e = parse("http://omni.local");
        assert_eq!(e.kind(), TransportKind::H2c);
        assert_eq!(e.display(), "grpc://omni.local:80");
        assert_eq!(e.dial_uri(), "http://omni.local:80");
        assert_eq!(
            parse("grpc://127.0.0.1:8099").display(),
            "grpc://127.0.0.1:8099"
        );
        assert_eq!(parse("HTTP://h:1").display(), "grpc://h:1");
    }

    #[test]
    fn ipv6_hosts_keep_brackets() {
        assert_eq!(parse("https://[::1]:9443").display(), "https://[::1]:9443");
    }

    #[test]
    fn other_schemes_are_h2c_and_displayed_unchanged() {
        let e = parse("foo://h:5");
        assert_eq!(e.kind(), TransportKind::H2c);
        assert_eq!(e.display(), "foo://h:5");
    }

    #[test]
    fn building_a_client_outside_a_runtime_is_an_error_not_a_panic() {
        let (key, _, _) = crate::auth::generate_key("t", Duration::from_secs(60)).unwrap();
        let err = Client::new(ClientConfig::new("grpc://127.0.0.1:1", key)).unwrap_err();
        assert!(matches!(err, ClientError::Transport(_)), "{err:?}");
    }

    #[test]
    fn unusable_urls_are_rejected() {
        for url in [
            "",
            "omni.example.com",
            "https://",
            "/just/a/path",
            "https://u:p@h",
        ] {
            assert!(OmniEndpoint::parse(url).is_err(), "{url:?} accepted");
        }
    }
}
