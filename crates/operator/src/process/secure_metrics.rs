//! The `/metrics` endpoint, plain or secured (`--metrics-secure`).
//!
//! Secured, it is served over HTTPS (a certificate from `--metrics-cert-dir`, re-read when it
//! changes, or a self-signed one generated at start) and only to callers the cluster allows:
//! the bearer token is checked with a TokenReview, and the user it names must be allowed
//! `get` on the non-resource URL `/metrics` by a SubjectAccessReview, as with the original
//! operator's `--metrics-secure`. No or an unknown token is a 401, a user without the
//! permission a 403.
//!
//! Decisions are cached per token (keyed by its SHA-256, never the token itself) for a minute
//! when allowed and ten seconds when not, so a Prometheus scraping every 15 s costs two reviews
//! a minute rather than two per scrape, and a newly granted scraper is let in soon. Tokens never
//! reach a log line, an error or a metric label.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

use crate::process::metrics::Metrics;
use crate::process::tls::{self, CertFiles, TlsError};

/// The path served, and the non-resource URL a scraper must be allowed to `get`.
pub(crate) const METRICS_PATH: &str = "/metrics";

/// How long an allowed token is trusted without asking the API server again.
const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refusal (unknown token, missing permission) is remembered: short, so a binding
/// created for a scraper takes effect within a scrape or two.
const DENIED_TTL: Duration = Duration::from_secs(10);
/// Most cached decisions; a flood of distinct tokens cannot grow memory past this.
const MAX_CACHED: usize = 256;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Where the secure endpoint's serving certificate comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecureMetricsConfig {
    /// Directory with the PEM certificate and key (a mounted `kubernetes.io/tls` Secret);
    /// `None` serves a self-signed certificate generated at start.
    pub cert_dir: Option<PathBuf>,
    /// Certificate file name in `cert_dir`.
    pub cert_name: String,
    /// Key file name in `cert_dir`.
    pub key_name: String,
}

/// Why the secure metrics server could not start.
#[derive(Debug, thiserror::Error)]
pub enum SecureMetricsError {
    /// The serving certificate could not be loaded or generated.
    #[error("metrics serving certificate: {0}")]
    Tls(#[from] TlsError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address that failed.
        addr: SocketAddr,
        /// The underlying IO error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a scrape could not be decided (the API server could not be asked). The message names
/// the review, never the token.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewError {
    /// The TokenReview failed.
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] kube::Error),
    /// The SubjectAccessReview failed.
    #[error("SubjectAccessReview failed: {0}")]
    SubjectAccessReview(#[source] kube::Error),
}

/// What the cluster says about one bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// The token's user may get `/metrics`.
    Allowed,
    /// The token is not valid (401).
    Unauthenticated,
    /// The token is valid but its user may not get `/metrics` (403).
    Forbidden {
        /// The user the token authenticates as.
        user: String,
    },
}

/// Decides scrapes with TokenReview and SubjectAccessReview, caching the answers briefly.
pub(crate) struct MetricsGuard {
    client: kube::Client,
    cache: Mutex<HashMap<[u8; 32], (Access, Instant)>>,
}

impl std::fmt::Debug for MetricsGuard {
    // The cache is keyed by token digests; nothing of it is worth printing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsGuard").finish_non_exhaustive()
    }
}

impl MetricsGuard {
    /// A guard asking the API server behind `client` (which needs `create` on
    /// `tokenreviews` and `subjectaccessreviews`).
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Mutex::default(),
        }
    }

    /// Whether `token` may scrape, from the cache or the API server.
    pub(crate) async fn access(&self, token: &str) -> Result<Access, ReviewError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((access, until)) = self.lock().get(&key)
            && *until > now
        {
            return Ok(access.clone());
        }
        let access = self.review(token).await?;
        let ttl = if access == Access::Allowed {
            ALLOWED_TTL
        } else {
            DENIED_TTL
        };
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(key, (access.clone(), now + ttl));
        Ok(access)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Access, Instant)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn review(&self, token: &str) -> Result<Access, ReviewError> {
        let tokens: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = tokens
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::TokenReview)?;
        let Some(status) = reviewed.status.filter(|s| s.authenticated == Some(true)) else {
            return Ok(Access::Unauthenticated);
        };
        let user = status.user.unwrap_or_default();
        let username = user.username.clone().unwrap_or_default();
        let access_reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let question = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answered = access_reviews
            .create(&PostParams::default(), &question)
            .await
            .map_err(ReviewError::SubjectAccessReview)?;
        if answered.status.is_some_and(|s| s.allowed) {
            Ok(Access::Allowed)
        } else {
            Ok(Access::Forbidden { user: username })
        }
    }
}

/// The encoded metrics as an HTTP answer.
fn exposition(metrics: &Metrics) -> Response {
    match metrics.encode() {
        Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics encoding failed".to_string(),
        )
            .into_response(),
    }
}

/// `/metrics` for everyone (the default, plain HTTP).
pub(crate) fn plain_router(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        METRICS_PATH,
        get(move || async move { exposition(&metrics) }),
    )
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "Unauthorized",
    )
        .into_response()
}

async fn guarded_metrics(
    State((guard, metrics)): State<(Arc<MetricsGuard>, Arc<Metrics>)>,
    headers: HeaderMap,
) -> Response {
    let Some(token) = bearer_token(&headers) else {
        return unauthorized();
    };
    match guard.access(token).await {
        Ok(Access::Allowed) => exposition(&metrics),
        Ok(Access::Unauthenticated) => unauthorized(),
        Ok(Access::Forbidden { user }) => (
            StatusCode::FORBIDDEN,
            format!("Authorization denied for user {user:?}: it may not get {METRICS_PATH}"),
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(%error, "cannot authorise a metrics scrape");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "authorization is unavailable; try again",
            )
                .into_response()
        }
    }
}

/// `/metrics` for callers the cluster allows (see the module documentation).
pub(crate) fn secure_router(metrics: Arc<Metrics>, guard: Arc<MetricsGuard>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(guarded_metrics))
        .with_state((guard, metrics))
}

/// Serves the secured endpoint on `addr` until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    config: &SecureMetricsConfig,
    metrics: Arc<Metrics>,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SecureMetricsError> {
    let alpn = vec![b"http/1.1".to_vec()];
    let (tls_config, certificate) = match &config.cert_dir {
        Some(dir) => {
            let files = CertFiles::in_dir(dir, &config.cert_name, &config.key_name);
            let (tls_config, certificate) = tls::reloading_server_config(files, alpn)?;
            (tls_config, Some(certificate))
        }
        None => (tls::self_signed_server_config(alpn)?, None),
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| SecureMetricsError::Bind { addr, source })?;
    tracing::info!(
        %addr,
        self_signed = config.cert_dir.is_none(),
        "secure metrics server listening"
    );
    let router = secure_router(metrics, Arc::new(MetricsGuard::new(client)));
    tls::HttpsServer::new(listener, tls_config, certificate, "metrics")
        .run(router, shutdown)
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bearer_tokens_are_taken() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                value.parse().unwrap_or_else(|e| panic!("{e}")),
            );
            bearer_token(&headers).map(str::to_owned)
        };
        assert_eq!(with("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(with("bearer  abc ").as_deref(), Some("abc"));
        assert_eq!(with("Basic YTpi"), None);
        assert_eq!(with("Bearer "), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
