//! The HTTP client of chart fetches. It is small on purpose: every request it makes passes the
//! deployment's [`ChartSourcePolicy`] first, hop by hop.
//!
//! - Each URL (the first and every redirect) must be on an allowed host; its name is resolved
//!   here and the operator connects only to the addresses it checked, so a name that resolves
//!   to a denied range is refused before anything is sent, and a second resolution cannot
//!   change the answer (no DNS rebinding between check and use).
//! - A credential is bound to one origin (scheme, host, port) and attached only to requests to
//!   it: never after a redirect elsewhere, never over plain HTTP unless the object said
//!   `insecure: true` and the deployment honours it. A redirect from https to http is refused.
//! - Connecting (TCP and TLS), waiting for each read and the whole request are bounded in time;
//!   bodies are bounded in size.
//! - Errors describe what failed in the operator's own words and never repeat what the remote
//!   sent (no status text, no body, no header value, no redirect target): a fetch must not be an
//!   oracle for services behind the operator.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncWrite};

use super::policy::ChartSourcePolicy;
use super::url::{Origin, Scheme, Url};

/// Redirects followed before a fetch gives up.
const MAX_REDIRECTS: usize = 5;

/// Time bounds of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Resolving the name and establishing TCP and TLS.
    pub connect: Duration,
    /// Silence tolerated while waiting for the answer or the next part of its body.
    pub read: Duration,
    /// The whole request, redirects included.
    pub request: Duration,
}

/// A credential (a whole `Authorization` value) and the one origin it may be sent to.
#[derive(Clone)]
pub(crate) struct Credential {
    pub(crate) origin: Origin,
    pub(crate) header: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Why a request did not produce an answer. Messages are the operator's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FetchError {
    /// The deployment's policy or the object's own settings forbid it: nothing was sent.
    #[error("{0}")]
    Refused(String),
    /// A time bound passed.
    #[error("{0}")]
    TimedOut(String),
    /// The server could not be reached or did not answer usably.
    #[error("{0}")]
    Failed(String),
}

/// An answer: its status, headers and (for a success) body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

/// The client of one fetch.
pub(crate) struct Client<'a> {
    pub(crate) policy: &'a ChartSourcePolicy,
    pub(crate) limits: Limits,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    /// Credentials may travel over plain HTTP (the object's `insecure`, honoured by the
    /// deployment).
    pub(crate) insecure: bool,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The system's trusted roots, read on the first fetch that needs them and kept by whoever
/// fetches (the release controller's state), not in a process-wide static.
#[derive(Debug, Default)]
pub(crate) struct SystemRoots(OnceLock<rustls::RootCertStore>);

impl SystemRoots {
    /// The roots, read from the system the first time.
    fn get(&self) -> &rustls::RootCertStore {
        self.0.get_or_init(|| {
            let mut store = rustls::RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = store.add(cert);
            }
            store
        })
    }
}

/// The TLS configuration of a fetch: the system's roots plus `ca_pem` (the credentials
/// Secret's `ca.crt`), HTTP/1.1 only.
pub(crate) fn tls_config(
    system: &SystemRoots,
    ca_pem: Option<&[u8]>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = system.get().clone();
    if let Some(pem) = ca_pem {
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut &pem[..]) {
            let cert = cert.map_err(|_| "ca.crt is not a PEM certificate bundle".to_string())?;
            roots
                .add(cert)
                .map_err(|_| "ca.crt holds a certificate that cannot serve as a CA".to_string())?;
            added += 1;
        }
        if added == 0 {
            return Err("ca.crt holds no PEM certificate".to_string());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

impl Client<'_> {
    /// GETs `url` with `accept`, following redirects, attaching each credential only to its own
    /// origin. A success body longer than `max` bytes is refused; other answers come back
    /// without their body for the caller to judge.
    pub(crate) async fn get(
        &self,
        url: &Url,
        credentials: &[Credential],
        accept: &str,
        max: u64,
    ) -> Result<Response, FetchError> {
        let deadline = self.limits.request;
        match tokio::time::timeout(deadline, self.follow(url, credentials, accept, max)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::TimedOut(format!(
                "no complete answer within {}s",
                deadline.as_secs()
            ))),
        }
    }

    async fn follow(
        &self,
        url: &Url,
        credentials: &[Credential],
        accept: &str,
        max: u64,
    ) -> Result<Response, FetchError> {
        let mut current = url.clone();
        for hop in 0..=MAX_REDIRECTS {
            let what = if hop == 0 { "the URL" } else { "a redirect" };
            if !self.policy.allows_host(&current.origin) {
                return Err(FetchError::Refused(format!(
                    "{what} names a host outside the allowed chart sources (--chart-source-allowed-hosts)"
                )));
            }
            let auth = credentials
                .iter()
                .find(|c| c.origin == current.origin)
                .map(|c| c.header.as_str());
            if auth.is_some() && current.origin.scheme == Scheme::Http && !self.insecure {
                return Err(FetchError::Refused(
                    "credentials are sent only over TLS; set spec.chart.insecure: true to send them over plain HTTP".to_string(),
                ));
            }
            let response = self.request(&current, auth, accept, max).await?;
            if !response.status.is_redirection() || response.status == StatusCode::NOT_MODIFIED {
                return Ok(response);
            }
            let location = response
                .headers
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| FetchError::Failed("a redirect without a target".to_string()))?;
            let next = current
                .join(location)
                .map_err(|_| FetchError::Failed("a redirect to an unusable URL".to_string()))?;
            if current.origin.scheme == Scheme::Https && next.origin.scheme == Scheme::Http {
                return Err(FetchError::Refused(
                    "a redirect from https to plain http, which is not followed".to_string(),
                ));
            }
            current = next;
        }
        Err(FetchError::Failed(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// The addresses of `origin` this fetch may connect to: all of them, once checked.
    async fn resolve(&self, origin: &Origin) -> Result<Vec<SocketAddr>, FetchError> {
        let addrs: Vec<SocketAddr> = match origin.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, origin.port)],
            Err(_) => {
                let lookup = tokio::net::lookup_host((origin.host.as_str(), origin.port));
                match tokio::time::timeout(self.limits.connect, lookup).await {
                    Ok(Ok(found)) => found.collect(),
                    Ok(Err(_)) => {
                        return Err(FetchError::Failed("the host name does not resolve".into()));
                    }
                    Err(_) => {
                        return Err(FetchError::TimedOut(format!(
                            "resolving the host name took longer than {}s",
                            self.limits.connect.as_secs()
                        )));
                    }
                }
            }
        };
        if addrs.is_empty() {
            return Err(FetchError::Failed("the host name does not resolve".into()));
        }
        // One denied address refuses them all: a name answering with a public and a private
        // address must not get a second chance.
        if addrs.iter().any(|a| self.policy.denies_address(a.ip())) {
            return Err(FetchError::Refused(
                "the host is on a loopback, link-local or private network, which this operator does not contact (--chart-source-deny-private-networks)".to_string(),
            ));
        }
        Ok(addrs)
    }

    /// TCP (and TLS) to one of `addrs`, within the connect bound.
    async fn connect(
        &self,
        origin: &Origin,
        addrs: &[SocketAddr],
    ) -> Result<Box<dyn Io>, FetchError> {
        let attempt = async {
            let mut refused = false;
            let mut tcp = None;
            for addr in addrs {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(stream) => {
                        tcp = Some(stream);
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => refused = true,
                    Err(_) => {}
                }
            }
            let tcp = tcp.ok_or_else(|| {
                FetchError::Failed(if refused {
                    "the connection was refused".to_string()
                } else {
                    "the host could not be reached".to_string()
                })
            })?;
            let _ = tcp.set_nodelay(true);
            if origin.scheme == Scheme::Http {
                return Ok(Box::new(tcp) as Box<dyn Io>);
            }
            let name = rustls::pki_types::ServerName::try_from(origin.host.clone())
                .map_err(|_| FetchError::Failed("the host is not a valid TLS name".into()))?;
            let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| FetchError::Failed(tls_failure(&e)))?;
            Ok(Box::new(tls) as Box<dyn Io>)
        };
        match tokio::time::timeout(self.limits.connect, attempt).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::TimedOut(format!(
                "connecting took longer than {}s",
                self.limits.connect.as_secs()
            ))),
        }
    }

    /// One request, no redirects followed.
    async fn request(
        &self,
        url: &Url,
        auth: Option<&str>,
        accept: &str,
        max: u64,
    ) -> Result<Response, FetchError> {
        let addrs = self.resolve(&url.origin).await?;
        let io = self.connect(&url.origin, &addrs).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake::<
            _,
            http_body_util::Empty<Bytes>,
        >(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| FetchError::Failed(http_failure(&e)))?;
        let driver = tokio::spawn(connection);
        let host = if url.origin.port == default_port(url.origin.scheme) {
            host_header(&url.origin.host)
        } else {
            url.origin.authority()
        };
        let mut request = http::Request::get(url.path_and_query.as_str())
            .header(http::header::HOST, host)
            .header(http::header::USER_AGENT, "omni-operator")
            .header(http::header::ACCEPT, accept);
        if let Some(auth) = auth {
            request = request.header(http::header::AUTHORIZATION, auth);
        }
        let request = request
            .body(http_body_util::Empty::new())
            .map_err(|_| FetchError::Failed("the URL cannot be requested".into()))?;
        let read = self.limits.read;
        let answer = tokio::time::timeout(read, sender.send_request(request)).await;
        let result = match answer {
            Err(_) => Err(FetchError::TimedOut(format!(
                "no answer within {}s",
                read.as_secs()
            ))),
            Ok(Err(e)) => Err(FetchError::Failed(http_failure(&e))),
            Ok(Ok(response)) => read_response(response, read, max).await,
        };
        driver.abort();
        result
    }
}

fn default_port(scheme: Scheme) -> u16 {
    match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    }
}

fn host_header(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// The status and headers of `response`, and its body when it is a success (at most `max`
/// bytes, each part within `read`).
async fn read_response(
    response: http::Response<hyper::body::Incoming>,
    read: Duration,
    max: u64,
) -> Result<Response, FetchError> {
    let (parts, mut body) = response.into_parts();
    let mut bytes = Vec::new();
    if parts.status.is_success() {
        if let Some(length) = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && length > max
        {
            return Err(too_large(max));
        }
        loop {
            let frame = match tokio::time::timeout(read, body.frame()).await {
                Err(_) => {
                    return Err(FetchError::TimedOut(format!(
                        "the answer stalled for more than {}s",
                        read.as_secs()
                    )));
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(FetchError::Failed(http_failure(&e))),
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                if (bytes.len() + data.len()) as u64 > max {
                    return Err(too_large(max));
                }
                bytes.extend_from_slice(&data);
            }
        }
    }
    Ok(Response {
        status: parts.status,
        headers: parts.headers,
        body: bytes,
    })
}

fn too_large(max: u64) -> FetchError {
    FetchError::Failed(format!("the answer is larger than {} MiB", max >> 20))
}

/// What went wrong on the HTTP level, by kind only: hyper's messages can quote the answer
/// (`malformed HTTP status code "…"`).
fn http_failure(e: &hyper::Error) -> String {
    if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        "the server did not answer with HTTP".to_string()
    } else if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        "the connection closed before a complete answer".to_string()
    } else if e.is_timeout() {
        "the server took too long".to_string()
    } else {
        "the connection failed".to_string()
    }
}

/// A TLS failure in the operator's words (rustls's own error names what it checked, never
/// what the server sent).
fn tls_failure(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(c)) => {
            format!(
                "the server's TLS certificate is not trusted ({c:?}); add its CA to ca.crt of the credentials Secret"
            )
        }
        Some(other) => format!("the TLS handshake failed ({})", tls_kind(other)),
        None => "the TLS handshake failed".to_string(),
    }
}

fn tls_kind(e: &rustls::Error) -> &'static str {
    match e {
        rustls::Error::AlertReceived(_) => "the server refused it",
        rustls::Error::NoCertificatesPresented => "the server presented no certificate",
        rustls::Error::PeerIncompatible(_) => "no protocol in common",
        rustls::Error::PeerMisbehaved(_) | rustls::Error::InvalidMessage(_) => {
            "the server does not speak TLS correctly"
        }
        _ => "an error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(policy: &ChartSourcePolicy) -> Client<'_> {
        Client {
            policy,
            limits: Limits {
                connect: Duration::from_secs(5),
                read: Duration::from_millis(500),
                request: Duration::from_secs(5),
            },
            tls: tls_config(&SystemRoots::default(), None).unwrap_or_else(|e| panic!("{e}")),
            insecure: false,
        }
    }

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_tarpit_times_out_on_read_and_a_banner_is_never_quoted() {
        let (tarpit, banner) = (
            crate::domain::test_servers::tarpit().await,
            crate::domain::test_servers::banner(b"-ERR internal-redis\r\n").await,
        );
        let policy = ChartSourcePolicy::default();
        let c = client(&policy);
        let index = |addr| url(&format!("http://{addr}/index.yaml"));
        let tarpit = c.get(&index(tarpit), &[], "*/*", 1024).await;
        assert!(matches!(tarpit, Err(FetchError::TimedOut(_))), "{tarpit:?}");
        let banner = c.get(&index(banner), &[], "*/*", 1024).await;
        let message = format!("{banner:?}");
        assert!(matches!(banner, Err(FetchError::Failed(_))), "{message}");
        assert!(!message.contains("internal-redis"), "{message}");
    }

    #[tokio::test]
    async fn denied_hosts_and_addresses_are_refused_before_connecting() {
        let (listener, addr) = crate::domain::test_servers::listener().await;
        let target = url(&format!("http://{addr}/index.yaml"));
        let strict = ChartSourcePolicy {
            deny_private_networks: true,
            ..ChartSourcePolicy::default()
        };
        let denied = client(&strict).get(&target, &[], "*/*", 1024).await;
        assert!(matches!(denied, Err(FetchError::Refused(_))), "{denied:?}");
        let listed = ChartSourcePolicy {
            allowed_hosts: vec![
                super::super::policy::HostPattern::parse("charts.example.com")
                    .unwrap_or_else(|e| panic!("{e}")),
            ],
            ..ChartSourcePolicy::default()
        };
        let outside = client(&listed).get(&target, &[], "*/*", 1024).await;
        assert!(
            matches!(outside, Err(FetchError::Refused(_))),
            "{outside:?}"
        );
        // Nothing connected.
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "a connection reached the server");
    }

    #[tokio::test]
    async fn credentials_never_travel_over_plain_http_unless_insecure() {
        let policy = ChartSourcePolicy::default();
        let target = url("http://127.0.0.1:1/index.yaml");
        let credential = Credential {
            origin: target.origin.clone(),
            header: "Basic c2VjcmV0".into(),
        };
        let refused = client(&policy)
            .get(&target, std::slice::from_ref(&credential), "*/*", 1024)
            .await;
        assert!(
            matches!(refused, Err(FetchError::Refused(_))),
            "{refused:?}"
        );
        let insecure = Client {
            insecure: true,
            ..client(&policy)
        };
        let tried = insecure.get(&target, &[credential], "*/*", 1024).await;
        assert!(matches!(tried, Err(FetchError::Failed(_))), "{tried:?}");
    }
}
