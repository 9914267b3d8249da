//! Pulling a chart from an OCI registry (the distribution API, as `helm pull oci://…` does): the
//! tag for the version (listing tags for a constraint), the manifest, then the chart layer,
//! whose digest the manifest names and the download must have. Registries that ask for a
//! token (`WWW-Authenticate: Bearer realm=…`) get the credentials at their token service, and
//! the token goes back to the registry only.

use sha2::Digest as _;

use super::index::{choose_tag, is_exact};
use super::net::{Client, Credential, FetchError, Response};
use super::url::{Origin, Url};

/// Media type of a helm chart layer.
const CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// Media types a chart manifest is served as.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json";
/// Largest manifest, tag list or token answer read.
const MAX_DOCUMENT: u64 = 4 << 20;

/// Why a pull failed; `step` says what was being fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{step}: {error}")]
pub(crate) struct PullError {
    pub(crate) step: &'static str,
    pub(crate) error: FetchError,
}

fn failed(step: &'static str, detail: impl Into<String>) -> PullError {
    PullError {
        step,
        error: FetchError::Failed(detail.into()),
    }
}

/// A pulled chart: its archive and the digest it was verified against.
pub(crate) struct Pulled {
    pub(crate) archive: Vec<u8>,
    pub(crate) digest: String,
}

/// The session of one pull: the registry's credentials and the token its token service
/// handed out.
struct Session<'a> {
    client: &'a Client<'a>,
    registry: &'a Origin,
    repository: &'a str,
    basic: Option<String>,
    token: Option<String>,
}

/// Pulls chart `repository` at `version` from `registry`, with `basic` (a whole `Authorization`
/// value) as the registry's credentials.
pub(crate) async fn pull(
    client: &Client<'_>,
    registry: &Origin,
    repository: &str,
    version: &str,
    basic: Option<String>,
    max_chart: u64,
) -> Result<Pulled, PullError> {
    let mut s = Session::new(client, registry, repository, basic);
    let tag = s.tag(version).await?;
    let hex = s.chart_layer(&tag, max_chart).await?;
    let blob = s
        .get(
            "download the chart",
            &format!("blobs/sha256:{hex}"),
            "application/octet-stream",
            max_chart,
        )
        .await?;
    if hex::encode(sha2::Sha256::digest(&blob.body)) != hex {
        return Err(failed(
            "download the chart",
            "the download does not have the digest its manifest names",
        ));
    }
    Ok(Pulled {
        archive: blob.body,
        digest: hex,
    })
}

/// The version of chart `repository` in `registry` that `version` selects: the newest tag a
/// range admits, in semver's spelling (`+`, where the tag has `_`).
pub(crate) async fn resolve(
    client: &Client<'_>,
    registry: &Origin,
    repository: &str,
    version: &str,
    basic: Option<String>,
) -> Result<String, PullError> {
    let mut s = Session::new(client, registry, repository, basic);
    Ok(s.tag(version).await?.replace('_', "+"))
}

impl<'a> Session<'a> {
    /// A session without a token yet.
    fn new(
        client: &'a Client<'a>,
        registry: &'a Origin,
        repository: &'a str,
        basic: Option<String>,
    ) -> Self {
        Self {
            client,
            registry,
            repository,
            basic,
            token: None,
        }
    }

    /// The tag of chart `version`: the version itself when it is exact, else the newest listed
    /// tag the constraint admits (OCI tags spell semver's `+` as `_`).
    async fn tag(&mut self, version: &str) -> Result<String, PullError> {
        if is_exact(version) {
            return Ok(version.trim().replace('+', "_"));
        }
        let step = "list the chart's tags";
        let listed = self
            .get(step, "tags/list", "application/json", MAX_DOCUMENT)
            .await?;
        #[derive(serde::Deserialize)]
        struct Tags {
            #[serde(default)]
            tags: Vec<String>,
        }
        let tags: Tags = serde_json::from_slice(&listed.body)
            .map_err(|_| failed(step, "the answer is not a tag list"))?;
        let versions: Vec<String> = tags.tags.iter().map(|t| t.replace('_', "+")).collect();
        Ok(choose_tag(&versions, version)
            .map_err(|e| failed(step, e.to_string()))?
            .replace('+', "_"))
    }

    /// The sha256 digest (hex) of the helm chart layer the manifest of `tag` names, whose size
    /// is at most `max_chart`.
    async fn chart_layer(&mut self, tag: &str, max_chart: u64) -> Result<String, PullError> {
        let step = "read the chart's manifest";
        let manifest = self
            .get(
                step,
                &format!("manifests/{tag}"),
                MANIFEST_TYPES,
                MAX_DOCUMENT,
            )
            .await?;
        #[derive(serde::Deserialize)]
        struct Layer {
            #[serde(rename = "mediaType", default)]
            media_type: String,
            #[serde(default)]
            digest: String,
            #[serde(default)]
            size: u64,
        }
        #[derive(serde::Deserialize)]
        struct Manifest {
            #[serde(default)]
            layers: Vec<Layer>,
        }
        let manifest: Manifest = serde_json::from_slice(&manifest.body)
            .map_err(|_| failed(step, "the answer is not an OCI manifest"))?;
        let layer = manifest
            .layers
            .iter()
            .find(|l| l.media_type == CHART_LAYER)
            .ok_or_else(|| failed(step, "the manifest holds no helm chart layer"))?;
        let hex = layer
            .digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| failed(step, "the chart layer has no sha256 digest"))?
            .to_ascii_lowercase();
        if layer.size > max_chart {
            return Err(failed(
                "download the chart",
                format!("the chart is larger than {} MiB", max_chart >> 20),
            ));
        }
        Ok(hex)
    }
}

impl Session<'_> {
    /// GETs `/v2/<repository>/<rest>` with the registry's credentials, fetching a token when
    /// the registry asks for one.
    async fn get(
        &mut self,
        step: &'static str,
        rest: &str,
        accept: &str,
        max: u64,
    ) -> Result<Response, PullError> {
        let url = Url::parse(&format!("{}/v2/{}/{rest}", self.registry, self.repository))
            .map_err(|_| failed(step, "the registry URL is unusable"))?;
        let mut asked_for_token = false;
        loop {
            let credentials: Vec<Credential> = match (&self.token, &self.basic) {
                (Some(token), _) => vec![Credential {
                    origin: self.registry.clone(),
                    header: format!("Bearer {token}"),
                }],
                (None, Some(basic)) if asked_for_token => vec![Credential {
                    origin: self.registry.clone(),
                    header: basic.clone(),
                }],
                _ => Vec::new(),
            };
            let response = self
                .client
                .get(&url, &credentials, accept, max)
                .await
                .map_err(|error| PullError { step, error })?;
            if response.status.is_success() {
                return Ok(response);
            }
            if response.status == http::StatusCode::UNAUTHORIZED && !asked_for_token {
                asked_for_token = true;
                if let Some(challenge) = bearer_challenge(&response.headers) {
                    self.token = Some(self.fetch_token(step, &challenge).await?);
                }
                continue;
            }
            return Err(failed(step, status_text(response.status)));
        }
    }

    /// A token from the registry's token service, asked with the registry's credentials.
    async fn fetch_token(&self, step: &'static str, c: &Challenge) -> Result<String, PullError> {
        let realm = Url::parse(&self.registry.to_string())
            .and_then(|base| base.join(&c.realm))
            .map_err(|_| failed(step, "the registry names an unusable token service"))?;
        let scope = c
            .scope
            .clone()
            .unwrap_or_else(|| format!("repository:{}:pull", self.repository));
        let mut query = format!("scope={}", encode(&scope));
        if let Some(service) = &c.service {
            query = format!("service={}&{query}", encode(service));
        }
        let separator = if realm.path_and_query.contains('?') {
            '&'
        } else {
            '?'
        };
        let token_url = Url {
            path_and_query: format!("{}{separator}{query}", realm.path_and_query),
            ..realm
        };
        let credentials: Vec<Credential> = self
            .basic
            .iter()
            .map(|basic| Credential {
                origin: token_url.origin.clone(),
                header: basic.clone(),
            })
            .collect();
        let response = self
            .client
            .get(&token_url, &credentials, "application/json", MAX_DOCUMENT)
            .await
            .map_err(|error| PullError {
                step: "log in to the registry",
                error,
            })?;
        if !response.status.is_success() {
            return Err(failed(
                "log in to the registry",
                status_text(response.status),
            ));
        }
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&response.body).map_err(|_| {
            failed(
                "log in to the registry",
                "the token service's answer is not a token",
            )
        })?;
        token
            .token
            .or(token.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                failed(
                    "log in to the registry",
                    "the token service handed out no token",
                )
            })
    }
}

/// A status in the operator's words: the code and its standard reason (never the server's
/// reason phrase).
pub(crate) fn status_text(status: http::StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("the server answered HTTP {} ({reason})", status.as_u16()),
        None => format!("the server answered HTTP {}", status.as_u16()),
    }
}

/// What a `WWW-Authenticate: Bearer …` challenge asks for.
struct Challenge {
    realm: String,
    service: Option<String>,
    scope: Option<String>,
}

fn bearer_challenge(headers: &http::HeaderMap) -> Option<Challenge> {
    let value = headers.get(http::header::WWW_AUTHENTICATE)?.to_str().ok()?;
    let (scheme, params) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    let mut scope = None;
    let mut rest = params;
    while !rest.trim().is_empty() {
        let (key, after) = rest.trim_start_matches([',', ' ']).split_once('=')?;
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "realm" => realm = Some(value.to_string()),
            "service" => service = Some(value.to_string()),
            "scope" => scope = Some(value.to_string()),
            _ => {}
        }
        rest = after;
    }
    Some(Challenge {
        realm: realm?,
        service,
        scope,
    })
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_parsed() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:org/app:pull""#,
            ),
        );
        let c = bearer_challenge(&headers).unwrap_or_else(|| panic!("parsed"));
        assert_eq!(c.realm, "https://auth.example/token");
        assert_eq!(c.service.as_deref(), Some("registry.example"));
        assert_eq!(c.scope.as_deref(), Some("repository:org/app:pull"));
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static(r#"Basic realm="registry""#),
        );
        assert!(bearer_challenge(&headers).is_none());
        assert_eq!(
            encode("repository:org/app:pull"),
            "repository%3Aorg%2Fapp%3Apull"
        );
        assert_eq!(
            status_text(http::StatusCode::UNAUTHORIZED),
            "the server answered HTTP 401 (Unauthorized)"
        );
    }
}
