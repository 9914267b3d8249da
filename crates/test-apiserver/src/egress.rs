//! Cluster networking for the API server's calls to Services (admission webhooks), which here run
//! on loopback ports of the test process.
//!
//! The API server resolves a webhook's `service` reference to the Service's ClusterIP and dials
//! it through its "cluster" egress selector. The control plane configures that egress as
//! HTTP CONNECT over a Unix socket served here: each `CONNECT <clusterIP>:<port>` is looked up
//! among the Services (as kube-proxy would) and tunnelled to the loopback address registered for
//! that Service and port. TLS stays end to end between the API server and the webhook, which is
//! verified against its `caBundle` for the name `<service>.<namespace>.svc`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixListener, UnixStream};

/// `(namespace, service, port)` → where that Service's port is served in this test process.
pub(crate) type Routes = Arc<Mutex<HashMap<(String, String, u16), SocketAddr>>>;

/// Longest CONNECT request head accepted.
const MAX_HEAD: usize = 8 * 1024;

/// Serves CONNECT requests on `socket` until the task is aborted.
pub(crate) fn serve(
    socket: &Path,
    routes: Routes,
    admin: kube::Client,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = UnixListener::bind(socket)?;
    Ok(tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let routes = routes.clone();
            let admin = admin.clone();
            tokio::spawn(async move {
                // A failed tunnel is the API server's to report (the webhook call fails).
                let _ = tunnel(stream, routes, admin).await;
            });
        }
    }))
}

async fn tunnel(
    mut stream: UnixStream,
    routes: Routes,
    admin: kube::Client,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_HEAD || stream.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let target = head
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("CONNECT "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    let Some(addr) = resolve(&target, &routes, &admin).await else {
        stream
            .write_all(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
            .await?;
        return Ok(());
    };
    let mut upstream = match TcpStream::connect(addr).await {
        Ok(upstream) => upstream,
        Err(_) => {
            stream
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                .await?;
            return Ok(());
        }
    };
    stream
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    tokio::io::copy_bidirectional(&mut stream, &mut upstream).await?;
    Ok(())
}

/// The registered address behind `host:port`: a ClusterIP (found among the Services) or a
/// `<service>.<namespace>.svc` name.
async fn resolve(target: &str, routes: &Routes, admin: &kube::Client) -> Option<SocketAddr> {
    let (host, port) = target.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let key = match host.strip_suffix(".svc").and_then(|h| h.split_once('.')) {
        Some((name, namespace)) => (namespace.to_string(), name.to_string(), port),
        None => {
            let request = http::Request::get("/api/v1/services")
                .body(Vec::new())
                .ok()?;
            let services: Value = admin.request(request).await.ok()?;
            let service = services["items"].as_array()?.iter().find(|s| {
                let spec = &s["spec"];
                spec["clusterIP"] == host
                    || spec["clusterIPs"]
                        .as_array()
                        .is_some_and(|ips| ips.iter().any(|ip| ip == host))
            })?;
            let text = |k: &str| service["metadata"][k].as_str().map(str::to_string);
            (text("namespace")?, text("name")?, port)
        }
    };
    routes.lock().ok()?.get(&key).copied()
}
