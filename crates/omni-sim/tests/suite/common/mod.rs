//! Test helpers: a minimal `siderov1` signer written for these tests (independent of
//! omni-client) and signed tonic clients for the simulator.
#![allow(dead_code)]

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use omni_client::proto::cosi::resource::state_client::StateClient;
use omni_client::proto::cosi::resource::{CreateOptions, CreateRequest, Metadata, Resource, Spec};
use omni_client::proto::management::management_service_client::ManagementServiceClient;
use pgp::composed::{Deserializable, DetachedSignature, SignedSecretKey};
use pgp::crypto::hash::HashAlgorithm;
use pgp::ser::Serialize as _;
use pgp::types::{KeyDetails as _, Password};
use tonic::transport::Channel;

pub type Tamper = Arc<dyn Fn(&str, &mut http::HeaderMap) + Send + Sync>;

/// A service-account signer.
#[derive(Clone)]
pub struct Signer {
    pub name: String,
    pub fingerprint: String,
    key: Arc<SignedSecretKey>,
}

impl Signer {
    /// Decodes an `OMNI_SERVICE_ACCOUNT_KEY` value.
    pub fn from_encoded(encoded: &str) -> Self {
        let json: serde_json::Value =
            serde_json::from_slice(&STANDARD.decode(encoded.trim()).unwrap()).unwrap();
        let name = json["name"].as_str().unwrap().to_string();
        let armored = json["pgp_key"].as_str().unwrap();
        let (key, _) = SignedSecretKey::from_string(armored).unwrap();
        let fingerprint = hex::encode(key.fingerprint().as_bytes());
        Self {
            name,
            fingerprint,
            key: Arc::new(key),
        }
    }

    /// The exact payload bytes of docs/omni-wire.md#signed-payload.
    pub fn payload(method: &str, context: Option<&str>, ts: i64) -> String {
        let ctx = match context {
            Some(c) => format!("[{}]", serde_json::Value::String(c.into())),
            None => "null".into(),
        };
        format!(
            "{{\"headers\":{{\"authorization\":null,\"cluster\":null,\"context\":{ctx},\"fieldSelectors\":null,\"namespace\":null,\"nodes\":null,\"runtime\":null,\"selectors\":null,\"uid\":null,\"x-sidero-timestamp\":[\"{ts}\"]}},\"method\":\"{method}\"}}"
        )
    }

    /// base64 of a binary detached signature over `data`.
    pub fn sign(&self, data: &[u8]) -> String {
        let sig = DetachedSignature::sign_binary_data(
            rand::thread_rng(),
            &self.key.primary_key,
            &Password::empty(),
            HashAlgorithm::Sha256,
            data,
        )
        .unwrap();
        STANDARD.encode(sig.to_bytes().unwrap())
    }

    pub fn header(&self, sig_b64: &str) -> String {
        format!("siderov1 {} {} {}", self.name, self.fingerprint, sig_b64)
    }

    /// Signs a request the way the Go client does, at `ts`.
    pub fn sign_headers(&self, method: &str, headers: &mut http::HeaderMap, ts: i64) {
        let context = headers
            .get("context")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let payload = Self::payload(method, context.as_deref(), ts);
        let sig = self.sign(payload.as_bytes());
        set(headers, "x-sidero-timestamp", &ts.to_string());
        set(headers, "x-sidero-payload", &payload);
        set(headers, "x-sidero-signature", &self.header(&sig));
    }

    /// A tamper hook that signs correctly.
    pub fn proper(&self) -> Tamper {
        let s = self.clone();
        Arc::new(move |m, h| s.sign_headers(m, h, now()))
    }
}

pub fn set(headers: &mut http::HeaderMap, k: &'static str, v: &str) {
    headers.insert(k, http::HeaderValue::from_str(v).unwrap());
}

pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

type Hook = Arc<dyn Fn(&mut http::Request<tonic::body::Body>) + Send + Sync>;

/// A channel that lets the test set request headers just before sending.
#[derive(Clone)]
pub struct Svc {
    inner: Channel,
    hook: Hook,
}

impl tower::Service<http::Request<tonic::body::Body>> for Svc {
    type Response = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Response;
    type Error = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Error;
    type Future = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        (self.hook)(&mut req);
        self.inner.call(req)
    }
}

pub async fn channel(endpoint: &str, tamper: Tamper, extra: Vec<(&'static str, String)>) -> Svc {
    let inner = Channel::from_shared(endpoint.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    Svc {
        inner,
        hook: Arc::new(move |req| {
            for (k, v) in &extra {
                set(req.headers_mut(), k, v);
            }
            let method = req.uri().path().to_string();
            tamper(&method, req.headers_mut());
        }),
    }
}

pub async fn state(endpoint: &str, tamper: Tamper) -> StateClient<Svc> {
    StateClient::new(channel(endpoint, tamper, vec![]).await)
}

pub async fn management(
    endpoint: &str,
    tamper: Tamper,
    cluster: Option<&str>,
) -> ManagementServiceClient<Svc> {
    let extra = cluster
        .map(|c| vec![("context", c.to_string())])
        .unwrap_or_default();
    ManagementServiceClient::new(channel(endpoint, tamper, extra).await)
}

/// A resource ready for Create (version undefined, phase running, owner "").
pub fn res<M: prost::Message>(ty: &str, id: &str, labels: &[(&str, &str)], spec: &M) -> Resource {
    Resource {
        metadata: Some(Metadata {
            namespace: "default".into(),
            r#type: ty.into(),
            id: id.into(),
            version: "undefined".into(),
            phase: "running".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }),
        spec: Some(Spec {
            proto_spec: spec.encode_to_vec(),
            yaml_spec: String::new(),
        }),
    }
}

pub fn create_req(r: Resource) -> CreateRequest {
    CreateRequest {
        resource: Some(r),
        options: Some(CreateOptions {
            owner: String::new(),
        }),
    }
}

/// Polls `f` until it returns `Some`, for up to 30 s (the machine is loaded; never a timing
/// assertion, only a generous upper bound).
pub async fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..600 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("condition not reached within 30s");
}
