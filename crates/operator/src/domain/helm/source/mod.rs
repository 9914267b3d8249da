//! Chart sources: the operator fetches every chart itself and hands helm a verified archive.
//!
//! helm's own fetching shares a content cache between every object of the operator, keyed by
//! the digest an index claims: a tenant's index that names another tenant's digest got the
//! other tenant's private chart out of the cache, and one that names a digest for its own
//! archive poisoned the cache for the other tenant. It also sent repository credentials over
//! plain HTTP and after redirects to other ports, and quoted what any server answered.
//!
//! So the operator fetches the index (or an OCI manifest) and the archive itself, on each
//! install or upgrade, through its own small HTTP client (`net`), which applies the deployment's [`ChartSourcePolicy`]
//! to every request; checks the archive against the digest the index of the repository it came
//! from lists; and writes it into the helm session's private directory. helm then installs a
//! local file: it never reaches a repository, never sees a credential, and its caches are
//! private to the session. There is no cache between passes (a fetch happens only when helm
//! installs or upgrades, which is rare), so nothing fetched for one object can serve another.

pub(crate) mod index;
pub(crate) mod location;
pub(crate) mod net;
pub(crate) mod oci;
pub mod policy;
pub(crate) mod url;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use sha2::Digest as _;

use self::location::ChartLocation;
pub use self::net::Limits;
pub(crate) use self::net::SystemRoots;
use self::net::{Client, Credential};
pub use self::policy::{ChartSourcePolicy, HostPattern};
use super::RepositoryAuth;

/// Largest repository index downloaded.
pub const MAX_INDEX_BYTES: u64 = 64 << 20;
/// Largest chart archive downloaded.
pub const MAX_CHART_BYTES: u64 = 32 << 20;

/// Why no verified archive could be had: refused by the spec or the deployment's policy (nothing
/// was sent), a time bound passed, or the source failed or its archive failed verification.
pub(crate) use self::net::FetchError as SourceError;

/// A fetch request: where, which version, with which credentials and settings.
pub(crate) struct Fetch<'a> {
    /// `spec.chart.repository`.
    pub(crate) repository: &'a str,
    /// `spec.chart.chart`.
    pub(crate) chart: &'a str,
    /// `spec.chart.version`.
    pub(crate) version: &'a str,
    /// `spec.chart.insecure`.
    pub(crate) insecure: bool,
    /// Credentials and CA bundle from `spec.chart.credentialsSecretRef`.
    pub(crate) auth: &'a RepositoryAuth,
    /// The deployment's policy.
    pub(crate) policy: &'a ChartSourcePolicy,
    /// The system's trusted roots (a credentials Secret's `ca.crt` is added to them).
    pub(crate) roots: &'a SystemRoots,
    /// Time bounds of each request.
    pub(crate) limits: Limits,
}

/// A verified archive in the session directory.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    /// The archive's path.
    pub(crate) path: PathBuf,
    /// Its SHA-256 digest (hex).
    pub(crate) digest: String,
}

/// A fetch checked against the spec and the deployment's policy, ready to send requests.
struct Prepared<'a> {
    location: ChartLocation,
    /// "chart repository URL" or "OCI chart REF", for messages.
    source: String,
    client: Client<'a>,
    /// The credentials' `Authorization` value.
    basic: Option<String>,
}

impl<'a> Fetch<'a> {
    /// The checks made before any request: the location, `insecure` against the deployment,
    /// the allowed hosts, credentials only over TLS; then the client that applies the policy
    /// to every request.
    fn prepare(&self) -> Result<Prepared<'a>, SourceError> {
        let location = location::locate(self.repository, self.chart, self.insecure)
            .map_err(|e| SourceError::Refused(e.message))?;
        if self.insecure && !self.policy.allow_insecure {
            return Err(SourceError::Refused(
                "spec.chart.insecure: this operator does not fetch charts insecurely (--allow-insecure-chart-sources=false)".to_string(),
            ));
        }
        let source = match &location {
            ChartLocation::Repository { repository, .. } => {
                format!("chart repository {repository}")
            }
            ChartLocation::Oci { .. } => format!("OCI chart {}", self.chart.trim()),
        };
        let origin = location.origin();
        if !self.policy.allows_host(origin) {
            return Err(SourceError::Refused(format!(
                "{source}: its host is not among the allowed chart sources (--chart-source-allowed-hosts)"
            )));
        }
        let basic = self.basic_auth();
        if basic.is_some() && origin.scheme == url::Scheme::Http && !self.insecure {
            return Err(SourceError::Refused(format!(
                "{source}: credentials are sent only over TLS; use an https:// repository, or set spec.chart.insecure: true to send them over plain HTTP"
            )));
        }
        let tls = net::tls_config(self.roots, self.auth.ca_bundle.as_deref())
            .map_err(|e| SourceError::Refused(format!("chart credentials Secret: {e}")))?;
        let client = Client {
            policy: self.policy,
            limits: self.limits,
            tls,
            insecure: self.insecure,
        };
        Ok(Prepared {
            location,
            source,
            client,
            basic,
        })
    }

    /// The version a range (`>=1.2 <2`, `1.x`, `^1`) selects now: the newest the repository's
    /// index lists (an OCI registry's tags) that the range admits. An exact version is itself,
    /// and nothing is requested for it. The archive is not downloaded: [`Fetch::run`] does that
    /// with the version this returns, when helm is to install it.
    pub(crate) async fn resolve(&self) -> Result<String, SourceError> {
        if index::is_exact(self.version) {
            return Ok(self.version.trim().to_string());
        }
        let p = self.prepare()?;
        match &p.location {
            ChartLocation::Repository { repository, name } => {
                let credentials = credentials_for(repository, p.basic.clone());
                let (_, body) = self
                    .index(&p.client, repository, &credentials)
                    .await
                    .map_err(|(step, e)| in_words(&p.source, step, e))?;
                index::find(&body, name, self.version)
                    .map(|entry| entry.version)
                    .map_err(|e| {
                        in_words(
                            &p.source,
                            "read the index",
                            SourceError::Failed(e.to_string()),
                        )
                    })
            }
            ChartLocation::Oci {
                registry,
                repository,
            } => oci::resolve(
                &p.client,
                registry,
                repository,
                self.version,
                p.basic.clone(),
            )
            .await
            .map_err(|e| in_words(&p.source, e.step, e.error)),
        }
    }

    /// Fetches and verifies the chart, and writes it to `dir/chart.tgz`.
    pub(crate) async fn run(&self, dir: &Path) -> Result<Fetched, SourceError> {
        let Prepared {
            location,
            source,
            client,
            basic,
        } = self.prepare()?;
        let (archive, digest) = match &location {
            ChartLocation::Repository { repository, name } => self
                .repository_chart(&client, repository, name, basic)
                .await
                .map_err(|(step, e)| in_words(&source, step, e))?,
            ChartLocation::Oci {
                registry,
                repository,
            } => {
                let pulled = oci::pull(
                    &client,
                    registry,
                    repository,
                    self.version,
                    basic,
                    MAX_CHART_BYTES,
                )
                .await
                .map_err(|e| in_words(&source, e.step, e.error))?;
                (pulled.archive, pulled.digest)
            }
        };
        let path = dir.join("chart.tgz");
        super::write_private(&path, &archive)
            .map_err(|e| SourceError::Failed(format!("{source}: cannot store the chart: {e}")))?;
        Ok(Fetched { path, digest })
    }

    /// The `Authorization` value of the credentials, if there are any.
    fn basic_auth(&self) -> Option<String> {
        if self.auth.username.is_none() && self.auth.password.is_none() {
            return None;
        }
        let pair = format!(
            "{}:{}",
            self.auth.username.as_deref().unwrap_or_default(),
            self.auth.password.as_deref().unwrap_or_default()
        );
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        ))
    }

    /// The index of `repository` (the directory its files are relative to, and the index's
    /// bytes), requested with `credentials`.
    async fn index(
        &self,
        client: &Client<'_>,
        repository: &url::Url,
        credentials: &[Credential],
    ) -> Result<(url::Url, Vec<u8>), (&'static str, SourceError)> {
        let base = repository.as_directory();
        let step = "read the index";
        let index_url = base
            .join("index.yaml")
            .map_err(|_| (step, SourceError::Failed("unusable URL".into())))?;
        let index = client
            .get(
                &index_url,
                credentials,
                "application/yaml, application/json, */*",
                MAX_INDEX_BYTES,
            )
            .await
            .map_err(|e| (step, e))?;
        if !index.status.is_success() {
            return Err((step, SourceError::Failed(oci::status_text(index.status))));
        }
        Ok((base, index.body))
    }

    /// The index of `repository`, the entry of chart `name`, and its verified archive.
    async fn repository_chart(
        &self,
        client: &Client<'_>,
        repository: &url::Url,
        name: &str,
        basic: Option<String>,
    ) -> Result<(Vec<u8>, String), (&'static str, SourceError)> {
        let credentials = credentials_for(repository, basic);
        let (base, index) = self.index(client, repository, &credentials).await?;
        let step = "read the index";
        let entry = index::find(&index, name, self.version)
            .map_err(|e| (step, SourceError::Failed(e.to_string())))?;
        let expected = entry
            .digest
            .as_deref()
            .unwrap_or_default()
            .trim()
            .trim_start_matches("sha256:")
            .to_ascii_lowercase();
        let step = "download the chart the index lists";
        let archive_url = entry.urls.first().and_then(|u| base.join(u).ok()).ok_or((
            step,
            SourceError::Failed("the index lists an unusable URL".into()),
        ))?;
        let archive = client
            .get(
                &archive_url,
                &credentials,
                "application/gzip, */*",
                MAX_CHART_BYTES,
            )
            .await
            .map_err(|e| (step, e))?;
        if !archive.status.is_success() {
            return Err((step, SourceError::Failed(oci::status_text(archive.status))));
        }
        let digest = hex::encode(sha2::Sha256::digest(&archive.body));
        if digest != expected {
            return Err((
                step,
                SourceError::Failed(
                    "the download does not have the digest the repository's index lists; it was not installed".into(),
                ),
            ));
        }
        Ok((archive.body, digest))
    }
}

/// The credentials of `repository`: they belong to its origin and go nowhere else.
fn credentials_for(repository: &url::Url, basic: Option<String>) -> Vec<Credential> {
    basic
        .map(|header| Credential {
            origin: repository.as_directory().origin.clone(),
            header,
        })
        .into_iter()
        .collect()
}

/// A failed `step` of fetching from `source`, in the operator's words.
fn in_words(source: &str, step: &str, error: SourceError) -> SourceError {
    match error {
        SourceError::Refused(m) => SourceError::Refused(format!("{source}: {step}: {m}")),
        SourceError::TimedOut(m) => SourceError::TimedOut(format!("{source}: {step}: {m}")),
        SourceError::Failed(m) => SourceError::Failed(format!("{source}: {step}: {m}")),
    }
}
