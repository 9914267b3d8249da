//! Loopback servers the unit tests point clients at: a tarpit (accepts connections and never
//! answers) and a service that does not speak HTTP (answers with a banner and hangs up).

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;

/// A listener on a free loopback port, and its address.
pub(crate) async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    (listener, addr)
}

/// A server that accepts every connection and holds it open without a byte.
pub(crate) async fn tarpit() -> SocketAddr {
    let (listener, addr) = listener().await;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

/// A server that answers every connection with `banner` and closes it.
pub(crate) async fn banner(banner: &'static [u8]) -> SocketAddr {
    let (listener, addr) = listener().await;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(banner).await;
        }
    });
    addr
}
