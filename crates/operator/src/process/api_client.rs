//! Kubernetes API clients with a bound on requests in flight.
//!
//! kube-rs speaks HTTP/1.1, one request per connection at a time, and its connection pool opens
//! a new connection whenever every pooled one is busy. A cold start reconciles every object at
//! once, so without a bound the operator held one TLS connection (with its buffers) per request
//! in flight: 780 connections at 100 clusters, and at 1,000 clusters more memory than the
//! machine had (`omni-bench`, docs/performance.md). A request beyond the bound waits for a
//! permit, which costs a few bytes, not a connection. Watches are long-lived and never wait:
//! they hold their own connection for as long as they run.
//!
//! Workload clusters are asked in parallel by the syncs, exports and releases of every cluster,
//! never watched: their clients ([`multiplexed_client`]) offer HTTP/2, as client-go does, so that
//! a workload cluster's requests in flight share one connection instead of one each.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Request, Response};
use kube::client::{Body, ClientBuilder, ConfigExt as _, DynBody};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::buffer::Buffer;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt as _};

/// Requests in flight to the management cluster's API server (watches not counted), unless
/// `--kube-api-max-in-flight` says otherwise.
pub(crate) const MANAGEMENT_MAX_IN_FLIGHT: usize = 32;

/// Requests in flight to one workload cluster's API server.
pub(crate) const WORKLOAD_MAX_IN_FLIGHT: usize = 8;

/// Requests a client queues before its callers wait to hand over more (kube-rs' own figure).
const QUEUE: usize = 1024;

/// A client for `config` with at most `max_in_flight` requests (watches aside) in flight.
pub fn client(config: kube::Config, max_in_flight: usize) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&InFlightLimit::new(max_in_flight))
        .build())
}

/// [`client`] for a server an object names, which may accept connections and never answer:
/// its requests (watches aside) must also complete, waiting for a permit and reading the
/// whole answer included, within `deadline`. It offers HTTP/2 in the TLS handshake (ALPN
/// `h2`, then `http/1.1`). Against a server that accepts it (every Kubernetes API server
/// does), the requests in flight share one connection, where kube-rs' own stack opens one
/// HTTP/1.1 connection per request in flight: at 1,000 clusters, 8 connections to each of 100 workload clusters held about a fifth
/// of the operator's peak heap (docs/performance.md). The rest of the stack is kube-rs' own:
/// its TLS configuration (CA, client certificate, `tls-server-name`), connect and read
/// timeouts, credentials, impersonation headers and retries of throttled requests.
///
/// A proxy is refused rather than ignored: the workload kubeconfigs this is for cannot name one
/// (`domain::kubeconfig`).
pub fn multiplexed_client(
    config: kube::Config,
    max_in_flight: usize,
    deadline: Option<Duration>,
) -> Result<kube::Client, kube::Error> {
    if let Some(proxy_url) = config.proxy_url.clone() {
        return Err(kube::Error::ProxyProtocolUnsupported {
            proxy_url: Box::new(proxy_url),
        });
    }
    // The connector offers `h2` and `http/1.1` in ALPN itself (`enable_http2` below).
    let tls = config.rustls_client_config()?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match &config.tls_server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => https,
    };
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    // HTTP/2 writes a request's HEADERS and DATA frames separately: with Nagle's algorithm the
    // second waits for the server's delayed acknowledgement of the first, which added about
    // 90 ms to every write (`omni-bench`, "source Secret → workload"). client-go sets it too.
    http.set_nodelay(true);
    let mut connector = hyper_timeout::TimeoutConnector::new(
        https.enable_http1().enable_http2().wrap_connector(http),
    );
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper)
        .map_response(|response| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace)
        .with_layer(&InFlightLimit::new(max_in_flight).with_deadline(deadline))
        .build())
}

/// The error of a request that passed its deadline ([`multiplexed_client`]).
#[derive(Debug, thiserror::Error)]
#[error("no complete answer within {}s", .0.as_secs())]
pub struct RequestTimedOut(pub Duration);

/// Whether `err` is a request that passed a time bound: the deadline of
/// [`multiplexed_client`], or kube's connect and read timeouts.
pub fn is_timeout(err: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<RequestTimedOut>()
            || e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// A [`Layer`] bounding the requests in flight through a service, watches aside; a permit is
/// held until the response body has been read to its end or dropped, since the connection is
/// busy until then.
#[derive(Clone)]
pub(crate) struct InFlightLimit {
    permits: Arc<Semaphore>,
    deadline: Option<Duration>,
}

impl InFlightLimit {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
            deadline: None,
        }
    }

    /// Bounds each request (watches aside), from asking for a permit to the end of its body.
    pub(crate) fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }
}

type Inner<S> = Buffer<Request<Body>, <S as Service<Request<Body>>>::Future>;

impl<S, B> Layer<S> for InFlightLimit
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Limited {
            inner: Buffer::new(inner, QUEUE),
            permits: self.permits.clone(),
            deadline: self.deadline,
        }
    }
}

/// The service [`InFlightLimit`] builds.
pub(crate) struct Limited<S: Service<Request<Body>>> {
    inner: Inner<S>,
    permits: Arc<Semaphore>,
    deadline: Option<Duration>,
}

/// Whether `req` opens a watch (`?watch=true`, `?watch=1`), which holds its connection for as
/// long as it runs and must never wait behind short requests.
fn is_watch<T>(req: &Request<T>) -> bool {
    req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

impl<S, B> Service<Request<Body>> for Limited<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
    B: http_body::Body + Unpin + Send + 'static,
{
    type Response = Response<PermitBody<B>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is awaited per request below, after its permit.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let watch = is_watch(&req);
        let permits = (!watch).then(|| self.permits.clone());
        let deadline = self.deadline.filter(|_| !watch);
        let answer = async move {
            let permit = match permits {
                Some(p) => Some(p.acquire_owned().await.map_err(BoxError::from)?),
                None => None,
            };
            let response = inner.oneshot(req).await?;
            Ok::<_, BoxError>((response, permit))
        };
        Box::pin(async move {
            let (response, permit, until) = match deadline {
                None => {
                    let (response, permit) = answer.await?;
                    (response, permit, None)
                }
                Some(d) => {
                    let until = tokio::time::Instant::now() + d;
                    match tokio::time::timeout_at(until, answer).await {
                        Ok(result) => {
                            let (response, permit) = result?;
                            (response, permit, Some((until, d)))
                        }
                        Err(_) => return Err(Box::new(RequestTimedOut(d)) as BoxError),
                    }
                }
            };
            Ok(response.map(|body| PermitBody {
                body,
                permit,
                deadline: until.map(|(at, d)| (Box::pin(tokio::time::sleep_until(at)), d)),
            }))
        })
    }
}

/// A response body holding its request's permit until it ends or is dropped, and failing when
/// the request's deadline passes before its end.
pub(crate) struct PermitBody<B> {
    body: B,
    permit: Option<OwnedSemaphorePermit>,
    deadline: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
}

impl<B> http_body::Body for PermitBody<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Pending = frame
            && let Some((sleep, limit)) = self.deadline.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            let limit = *limit;
            self.permit = None;
            return Poll::Ready(Some(Err(Box::new(RequestTimedOut(limit)))));
        }
        if matches!(frame, Poll::Ready(None)) {
            self.permit = None;
        }
        frame.map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_told_apart_from_other_requests() {
        let req = |uri: &str| Request::get(uri).body(()).unwrap_or_default();
        assert!(is_watch(&req(
            "/api/v1/secrets?watch=true&resourceVersion=1"
        )));
        assert!(is_watch(&req("/apis/x/v1/ys?labelSelector=a&watch=1")));
        assert!(!is_watch(&req("/api/v1/secrets?limit=500")));
        assert!(!is_watch(&req("/api/v1/secrets?watch=false")));
        assert!(!is_watch(&req("/api/v1/namespaces/watch/secrets")));
    }
}
