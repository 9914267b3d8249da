//! What a Helm run needs from the management cluster and the spec: the checked kubeconfig,
//! repository credentials, the release request (resolved once per pass), and the timing
//! knobs.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use super::ownership::owner_labels;
use super::state::HelmState;
use crate::api::{OmniHelmRelease, Reason};
use crate::controllers::kubeconfig_export::writing_export;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::Error;
use crate::domain::helm::source::SourceError;
use crate::domain::helm::{ChartSource, ReleaseRequest, RepositoryAuth};
use crate::domain::impersonation::{self, ReadError, Reader};
use crate::domain::kubeconfig::WorkloadKubeconfig;
use crate::domain::secret_policy::{self, SecretUse};

const KIND: &str = "OmniHelmRelease";

/// Fallback for a drift check interval that does not parse (the spec check rejects it first).
const DEFAULT_DRIFT_CHECK: Duration = Duration::from_secs(300);
/// Fallback for a timeout that does not parse (the spec check rejects it first).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Why an input could not be obtained; each kind knows its condition reason, the message is
/// the condition's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Problem {
    /// A Secret, or a key in it, does not exist.
    #[error("{0}")]
    MissingSecret(String),
    /// The kubeconfig Secret does not exist yet, and an OmniKubeconfigExport writes it.
    #[error("{0}")]
    KubeconfigPending(String),
    /// The release's ServiceAccount may not read a Secret it references (named in the
    /// message).
    #[error("{0}")]
    AccessDenied(String),
    /// An input is unusable or refused by the Secret policy.
    #[error("{0}")]
    Invalid(String),
    /// No usable helm binary.
    #[error("{0}")]
    HelmUnavailable(String),
    /// A request to a server the object names passed its time bound.
    #[error("{0}")]
    TimedOut(String),
    /// The chart could not be fetched or failed its verification.
    #[error("{0}")]
    ChartUnavailable(String),
    /// A values source that is not optional, or its key, does not exist (`spec.chart.valuesFrom`).
    #[error("{0}")]
    ValuesSourceMissing(String),
}

impl From<SourceError> for Problem {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Refused(m) => Self::Invalid(m),
            SourceError::TimedOut(m) => Self::TimedOut(m),
            SourceError::Failed(m) => Self::ChartUnavailable(m),
        }
    }
}

impl Problem {
    /// The condition reason this problem is reported under.
    pub(crate) fn reason(&self) -> Reason {
        match self {
            Self::MissingSecret(_) => Reason::MissingSecret,
            Self::KubeconfigPending(_) => Reason::KubeconfigPending,
            Self::AccessDenied(_) => Reason::AccessDenied,
            Self::Invalid(_) => Reason::ValidationFailed,
            Self::HelmUnavailable(_) => Reason::HelmUnavailable,
            Self::TimedOut(_) => Reason::Timeout,
            Self::ChartUnavailable(_) => Reason::ChartFetchFailed,
            Self::ValuesSourceMissing(_) => Reason::ValuesSourceMissing,
        }
    }

    /// The same problem with its message rewritten by `f` (e.g. to say what it blocks).
    pub(crate) fn map_message(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::MissingSecret(m) => Self::MissingSecret(f(m)),
            Self::KubeconfigPending(m) => Self::KubeconfigPending(f(m)),
            Self::AccessDenied(m) => Self::AccessDenied(f(m)),
            Self::Invalid(m) => Self::Invalid(f(m)),
            Self::HelmUnavailable(m) => Self::HelmUnavailable(f(m)),
            Self::TimedOut(m) => Self::TimedOut(f(m)),
            Self::ChartUnavailable(m) => Self::ChartUnavailable(f(m)),
            Self::ValuesSourceMissing(m) => Self::ValuesSourceMissing(f(m)),
        }
    }
}

/// A release's kubeconfig: as read from its Secret, and checked.
pub(crate) struct Kubeconfig {
    /// The Secret's bytes (for the workload client cache, which the syncs of the same Secret
    /// share).
    raw: Vec<u8>,
    /// What helm and the operator use, built from the checked fields.
    pub(crate) checked: WorkloadKubeconfig,
}

/// Reads and checks the kubeconfig (messages: docs/parity.md#reading-the-kubeconfig).
pub(crate) async fn kubeconfig(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
) -> Result<Result<Kubeconfig, Problem>, Error> {
    let ns = r.namespace().unwrap_or_default();
    let (name, key) = (
        &r.spec.kubeconfig_secret_ref.name,
        &r.spec.kubeconfig_secret_ref.key,
    );
    let Some(secret) =
        (match read_as_reader::<Secret>(ctx, state, r, name, "spec.kubeconfigSecretRef").await? {
            Ok(s) => s,
            Err(problem) => return Ok(Err(problem)),
        })
    else {
        return Ok(Err(match writing_export(&state.exports, &ns, name) {
            Some(export) => Problem::KubeconfigPending(format!(
                "kubeconfig Secret \"{ns}/{name}\" is not written yet; OmniKubeconfigExport {export:?} writes it"
            )),
            None => {
                Problem::MissingSecret(format!("kubeconfig Secret \"{ns}/{name}\" does not exist"))
            }
        }));
    };
    let Some(bytes) = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .filter(|b| !b.0.is_empty())
        .map(|b| b.0.clone())
    else {
        return Ok(Err(Problem::MissingSecret(format!(
            "kubeconfig Secret \"{ns}/{name}\" does not contain key {key:?}"
        ))));
    };
    if let Some(reason) = secret_policy::refusal(
        &state.secret_policy,
        &secret,
        KIND,
        SecretUse::Kubeconfig,
        &[],
    ) {
        return Ok(Err(Problem::Invalid(reason)));
    }
    // Helm gets the kubeconfig the operator writes from the checked fields, never these bytes:
    // no exec, auth provider or file path reaches it. Errors name fields and positions only.
    Ok(match crate::domain::kubeconfig::parse(&bytes) {
        Ok(checked) => Ok(Kubeconfig {
            raw: bytes,
            checked,
        }),
        Err(e) => Err(Problem::Invalid(format!(
            "kubeconfig Secret \"{ns}/{name}\" key {key:?} is invalid: {e}"
        ))),
    })
}

/// `Err(TimedOut)` when the workload API server does not answer `/version` within the
/// operator's time bounds, checked before any helm process starts: helm's own client has no
/// read timeout, and a server that accepts connections and never answers held a helm process,
/// one of the few the operator runs, for minutes per try. Any other answer (an error included)
/// leaves the judgement to helm.
pub(crate) async fn reachable(
    state: &HelmState,
    r: &OmniHelmRelease,
    kubeconfig: &Kubeconfig,
) -> Result<(), Problem> {
    let ns = r.namespace().unwrap_or_default();
    let k = &r.spec.kubeconfig_secret_ref;
    let Ok(client) = workload_client(state, r, kubeconfig).await else {
        return Ok(());
    };
    match client.apiserver_version().await {
        Err(e) if crate::process::api_client::is_timeout(&e) => Err(Problem::TimedOut(format!(
            "the workload API server of kubeconfig Secret \"{ns}/{}\" did not answer in time ({e}; bounds: --connect-timeout, --read-timeout, --request-timeout); no helm process was started",
            k.name
        ))),
        _ => Ok(()),
    }
}

/// The client of the workload cluster of `kubeconfig`, as read (with the release's identity)
/// and checked in this pass; shared with the other objects of the same kubeconfig Secret.
pub(crate) async fn workload_client(
    state: &HelmState,
    r: &OmniHelmRelease,
    kubeconfig: &Kubeconfig,
) -> Result<kube::Client, String> {
    let ns = r.namespace().unwrap_or_default();
    let k = &r.spec.kubeconfig_secret_ref;
    let cache_key = format!("{ns}/{}/{}", k.name, k.key);
    state.workload.client_for(cache_key, &kubeconfig.raw).await
}

/// `K` `name` of the release's namespace (a Secret, or a ConfigMap of values), read as the
/// release's ServiceAccount (when it or the deployment names one): `Err` names the reference
/// `field` when the read is denied.
pub(super) async fn read_as_reader<K>(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
    name: &str,
    field: &str,
) -> Result<Result<Option<K>, Problem>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let ns = r.namespace().unwrap_or_default();
    let reader = Reader::of(
        &ns,
        r.spec.service_account_name.as_deref(),
        state.default_service_account.as_deref(),
    );
    match impersonation::get::<K>(&ctx.client, &reader, &ns, name).await {
        Ok(secret) => Ok(Ok(secret)),
        Err(e @ ReadError::Denied { .. }) => {
            Ok(Err(Problem::AccessDenied(format!("{e} ({field})"))))
        }
        Err(ReadError::Api(e)) => Err(e.into()),
    }
}

/// Repository credentials and CA bundle from `spec.chart.credentialsSecretRef`.
pub(crate) async fn repository_auth(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
) -> Result<Result<RepositoryAuth, Problem>, Error> {
    let Some(cref) = &r.spec.chart.credentials_secret_ref else {
        return Ok(Ok(RepositoryAuth::default()));
    };
    let ns = r.namespace().unwrap_or_default();
    let field = "spec.chart.credentialsSecretRef";
    let Some(secret) = (match read_as_reader::<Secret>(ctx, state, r, &cref.name, field).await? {
        Ok(s) => s,
        Err(problem) => return Ok(Err(problem)),
    }) else {
        return Ok(Err(Problem::MissingSecret(format!(
            "chart credentials Secret \"{ns}/{}\" does not exist",
            cref.name
        ))));
    };
    // Before anything is sent to the repository: the Omni key and service-account tokens never
    // serve as credentials.
    if let Some(reason) = secret_policy::check(
        &ctx.client,
        &state.secret_policy,
        &secret,
        KIND,
        SecretUse::RepositoryCredentials,
    )
    .await?
    {
        return Ok(Err(Problem::Invalid(reason)));
    }
    let data = secret.data.unwrap_or_default();
    let text = |key: &str| -> Result<Option<String>, Problem> {
        match data.get(key).filter(|b| !b.0.is_empty()) {
            None => Ok(None),
            Some(b) => String::from_utf8(b.0.clone()).map(Some).map_err(|_| {
                Problem::Invalid(format!(
                    "chart credentials Secret \"{ns}/{}\" key {key:?} is not UTF-8",
                    cref.name
                ))
            }),
        }
    };
    let auth = (|| {
        Ok(RepositoryAuth {
            username: text(&cref.username_key)?,
            password: text(&cref.password_key)?,
            ca_bundle: data
                .get(&cref.ca_key)
                .filter(|b| !b.0.is_empty())
                .map(|b| b.0.clone()),
        })
    })();
    Ok(auth)
}

/// The release `r` describes, resolved once per pass: every look at it and every action on it
/// (status, labels, history, install, upgrade, rollback, uninstall) takes this request.
/// Its values are `spec.chart.values` alone: what a pass that read no values source (a
/// deletion, a test) works with.
pub(crate) fn request(r: &OmniHelmRelease) -> ReleaseRequest {
    request_at(r, r.spec.chart.version.trim(), r.spec.chart.values.clone())
}

/// [`request`] at `chart_version`, the version a range in `spec.chart.version` resolved to in
/// this pass: the inputs' digest names that version, so a newly published version that the
/// range admits is a change of the inputs (an upgrade, a fresh retry budget). `values` are the
/// chart values of this pass (`values_from::chart_values`): the digest covers them, so a
/// changed values source is a change of the inputs too.
pub(crate) fn request_at(
    r: &OmniHelmRelease,
    chart_version: &str,
    values: serde_json::Value,
) -> ReleaseRequest {
    let spec = &r.spec;
    let release_name = r.effective_release_name();
    let chart = ChartSource::from_spec(&spec.chart.repository, &spec.chart.chart);
    let chart_version = chart_version.to_string();
    ReleaseRequest {
        lock_key: release_key(r, &release_name),
        digest: input_digest(r, &release_name, &chart, &chart_version, &values),
        release_name,
        namespace: spec.namespace.clone(),
        chart,
        chart_version,
        values,
        create_namespace: spec.create_namespace,
        wait: spec.wait,
        wait_for_jobs: spec.wait_for_jobs,
        timeout: timeout_of(r),
        atomic: spec.atomic,
        disable_hooks: spec.disable_hooks,
        skip_crds: spec.skip_crds,
        max_history: spec
            .max_history
            .and_then(|h| u32::try_from(h).ok())
            .unwrap_or(0),
        owner_labels: owner_labels(r),
    }
}

/// The helm lock key. It names the release in its workload cluster rather than this object, so
/// two objects pointing at the same release never run helm on it at the same time.
fn release_key(r: &OmniHelmRelease, release_name: &str) -> String {
    format!(
        "{}/{}/{}/{}",
        r.namespace().unwrap_or_default(),
        r.spec.kubeconfig_secret_ref.name,
        r.spec.namespace,
        release_name
    )
}

/// Digest of the inputs that define the release. Deliberately excludes the kubeconfig bytes
/// (a rotation must not upgrade) and operation knobs like `wait` or `timeout`. Its encoding is
/// kept stable: a status records the digest last applied, and any change of it would upgrade
/// every release once. `values` are the merged chart values, which without `valuesFrom` are
/// `spec.chart.values` as written: the digest of such a release is unchanged. Only the digest
/// is kept, never the values: they may come from a Secret.
fn input_digest(
    r: &OmniHelmRelease,
    release_name: &str,
    chart: &ChartSource,
    chart_version: &str,
    values: &serde_json::Value,
) -> String {
    let spec = &r.spec;
    let source = match chart {
        ChartSource::Repository { url, chart } => {
            serde_json::json!({"repository": url, "chart": chart})
        }
        ChartSource::Oci { reference } => serde_json::json!({"oci": reference}),
    };
    // serde_json maps are sorted, so the encoding (and digest) is stable.
    let inputs = serde_json::json!({
        "clusterRef": spec.cluster_ref.name,
        "kubeconfigSecret": spec.kubeconfig_secret_ref.name,
        "kubeconfigKey": spec.kubeconfig_secret_ref.key,
        "releaseName": release_name,
        "namespace": spec.namespace,
        "source": source,
        "version": chart_version,
        "values": values,
        "skipCRDs": spec.skip_crds,
    });
    hex::encode(Sha256::digest(inputs.to_string().as_bytes()))
}

/// `spec.timeout`, at most 1h even when a longer one was stored without admission.
fn timeout_of(r: &OmniHelmRelease) -> Duration {
    let most = crate::api::duration::MAX_TIMEOUT
        .to_std()
        .unwrap_or(DEFAULT_TIMEOUT);
    r.spec
        .timeout
        .duration()
        .ok()
        .and_then(|t| t.to_std())
        .unwrap_or(DEFAULT_TIMEOUT)
        .min(most)
}

/// How long a healthy release is left alone before the next look for drift
/// (`spec.driftCheckInterval`), or `None` when only a change wakes it (`0`). An interval below
/// `floor` (stored without admission) is raised to it.
pub(crate) fn drift_interval(r: &OmniHelmRelease, floor: Duration) -> Option<Duration> {
    match r.drift_check_interval() {
        Ok(Some(interval)) => Some(crate::api::duration::clamp_interval(interval, floor)),
        Ok(None) => None,
        Err(_) => Some(DEFAULT_DRIFT_CHECK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::release;
    use kube::runtime::controller::Action;

    /// The next look at a healthy `r`, unspread.
    fn drift_check(r: &OmniHelmRelease, floor: Duration, spread: f64) -> Action {
        super::super::outcome::recheck(r, floor, spread)
    }

    fn release_key(r: &OmniHelmRelease) -> String {
        request(r).lock_key
    }

    fn timeout_of(r: &OmniHelmRelease) -> Duration {
        request(r).timeout
    }

    /// The digest covers the values of the pass (a changed values source upgrades), and a
    /// release without sources digests `spec.chart.values` as it always did.
    #[test]
    fn the_digest_covers_the_merged_values() {
        let r = release(serde_json::json!({}));
        let spec_values = r.spec.chart.values.clone();
        let version = r.spec.chart.version.clone();
        assert_eq!(
            request_at(&r, &version, spec_values).digest,
            request(&r).digest
        );
        let merged = serde_json::json!({"from": "a values Secret"});
        let other = request_at(&r, &version, merged.clone());
        assert_ne!(other.digest, request(&r).digest);
        assert_eq!(other.values, merged, "helm gets the merged values");
    }

    #[test]
    fn release_key_names_the_release_in_its_cluster() {
        let a = release(serde_json::json!({}));
        let mut b = a.clone();
        b.metadata.name = Some("other-object".into());
        b.spec.release_name = Some("app".into());
        assert_eq!(release_key(&a), release_key(&b));
        let mut c = a.clone();
        c.spec.kubeconfig_secret_ref.name = "other-cluster".into();
        assert_ne!(release_key(&a), release_key(&c));
    }

    #[test]
    fn drift_check_interval_drives_the_requeue() {
        let floor = Duration::from_secs(10);
        let mut r = release(serde_json::json!({}));
        assert_eq!(
            drift_check(&r, floor, 1.0),
            Action::requeue(Duration::from_secs(300))
        );
        r.spec.drift_check_interval = "30s".into();
        assert_eq!(
            drift_check(&r, floor, 1.0),
            Action::requeue(Duration::from_secs(30))
        );
        r.spec.drift_check_interval = "0".into();
        assert_eq!(drift_check(&r, floor, 1.0), Action::await_change());
    }

    #[test]
    fn stored_intervals_and_timeouts_that_bypassed_admission_are_clamped() {
        let floor = Duration::from_secs(10);
        let mut r = release(serde_json::json!({}));
        r.spec.drift_check_interval = "1ms".into();
        assert_eq!(drift_check(&r, floor, 1.0), Action::requeue(floor));
        r.spec.timeout = "100h".into();
        assert_eq!(timeout_of(&r), Duration::from_secs(3600));
        r.spec.timeout = "90s".into();
        assert_eq!(timeout_of(&r), Duration::from_secs(90));
    }
}
