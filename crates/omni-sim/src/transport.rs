//! Connection handling: HTTP/2 only (h2c prior knowledge, or TLS with ALPN `h2`), served with
//! hyper directly rather than tonic's server.
//!
//! Why not `tonic::transport::Server`: it enforces the client's `grpc-timeout` itself and answers
//! `CANCELLED "Timeout expired"`, whereas Omni's grpc-go server lets the client's own deadline
//! fire (`DEADLINE_EXCEEDED`). Clients must see the latter to classify timeouts correctly.

use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::service::Routes;

use crate::server::{GrpcGate, GrpcGateLayer};

/// Builds a rustls acceptor advertising `h2` from PEM material.
pub(crate) fn tls_acceptor(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<tokio_rustls::TlsAcceptor, String> {
    let certs = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid certificate PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate in PEM".into());
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| format!("invalid key PEM: {e}"))?
        .ok_or_else(|| "no private key in PEM".to_string())?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| e.to_string())?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

async fn serve_conn<IO>(io: IO, svc: GrpcGate<Routes>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let mut svc = svc.clone();
        async move {
            let req = req.map(tonic::body::Body::new);
            std::future::poll_fn(|cx| {
                <GrpcGate<Routes> as tower::Service<http::Request<tonic::body::Body>>>::poll_ready(
                    &mut svc, cx,
                )
            })
            .await?;
            tower::Service::call(&mut svc, req).await
        }
    });
    let result = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Delay added to every accepted connection before it is served (a test and benchmark knob,
/// zero by default): a real Omni is a network round trip and a TLS handshake away, so a client
/// that opens a connection per call pays for it there, and should here.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectLatency(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl ConnectLatency {
    /// Sets the delay (zero removes it).
    pub(crate) fn set(&self, delay: std::time::Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.0.store(micros, std::sync::atomic::Ordering::Relaxed);
    }

    /// The current delay.
    pub(crate) fn get(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

async fn delay_connection(delay: std::time::Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// Accepts connections (counting them in `connections`, delaying each by `connect_latency`) until `shutdown` flips, then closes
/// every open connection.
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Routes,
    tls: Option<tokio_rustls::TlsAcceptor>,
    connections: std::sync::Arc<std::sync::atomic::AtomicU64>,
    connect_latency: ConnectLatency,
    mut shutdown: watch::Receiver<bool>,
) {
    let svc = tower::Layer::layer(&GrpcGateLayer, routes);
    let mut conns: JoinSet<()> = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            a = listener.accept() => a,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Usually descriptor exhaustion: back off instead of spinning on the error.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Each write goes out at once, as Omni's Go server sends it (Go sets TCP_NODELAY on
        // every TCP connection): with Nagle's algorithm an answer's DATA frame waited for the
        // client's delayed acknowledgement of its HEADERS frame.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let svc = svc.clone();
        let delay = connect_latency.get();
        match &tls {
            None => {
                conns.spawn(async move {
                    delay_connection(delay).await;
                    serve_conn(stream, svc).await;
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    delay_connection(delay).await;
                    match acceptor.accept(stream).await {
                        Ok(tls) => serve_conn(tls, svc).await,
                        Err(e) => tracing::debug!(error = %e, "TLS handshake failed"),
                    }
                });
            }
        }
    }
    conns.shutdown().await;
}
