//! What a Helm run needs from the management cluster and the spec: the checked kubeconfig,
//! repository credentials, the release request, and the timing knobs.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::KIND;
use super::ownership::owner_labels;
use crate::api::OmniHelmRelease;
use crate::api::Reason;
use crate::controllers::{Context, Error};
use crate::helm::{ChartSource, ReleaseRequest, RepositoryAuth};
use crate::secret_policy::{self, SecretUse};

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
    /// An input is unusable or refused by the Secret policy.
    #[error("{0}")]
    Invalid(String),
    /// No usable helm binary.
    #[error("{0}")]
    HelmUnavailable(String),
}

impl Problem {
    /// The condition reason this problem is reported under.
    pub(crate) fn reason(&self) -> Reason {
        match self {
            Self::MissingSecret(_) => Reason::MissingSecret,
            Self::Invalid(_) => Reason::ValidationFailed,
            Self::HelmUnavailable(_) => Reason::HelmUnavailable,
        }
    }

    /// The same problem with its message rewritten by `f` (e.g. to say what it blocks).
    pub(crate) fn map_message(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::MissingSecret(m) => Self::MissingSecret(f(m)),
            Self::Invalid(m) => Self::Invalid(f(m)),
            Self::HelmUnavailable(m) => Self::HelmUnavailable(f(m)),
        }
    }
}

/// Reads and checks the kubeconfig (parity §7.3 step 5 messages).
pub(crate) async fn kubeconfig(
    ctx: &Context,
    r: &OmniHelmRelease,
) -> Result<Result<Vec<u8>, Problem>, Error> {
    let ns = r.namespace().unwrap_or_default();
    let (name, key) = (
        &r.spec.kubeconfig_secret_ref.name,
        &r.spec.kubeconfig_secret_ref.key,
    );
    let Some(secret) = ctx.api::<Secret>(&ns).get_opt(name).await? else {
        return Ok(Err(Problem::MissingSecret(format!(
            "kubeconfig Secret \"{ns}/{name}\" does not exist"
        ))));
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
        &ctx.secret_policy,
        &secret,
        KIND,
        SecretUse::Kubeconfig,
        &[],
    ) {
        return Ok(Err(Problem::Invalid(reason)));
    }
    // Helm gets the kubeconfig the operator writes from the checked fields, never these bytes:
    // no exec, auth provider or file path reaches it. Errors name fields and positions only.
    Ok(match crate::kubeconfig::parse(&bytes) {
        Ok(checked) => Ok(checked.to_bytes()),
        Err(e) => Err(Problem::Invalid(format!(
            "kubeconfig Secret \"{ns}/{name}\" key {key:?} is invalid: {e}"
        ))),
    })
}

/// Repository credentials and CA bundle from `spec.chart.credentialsSecretRef`.
pub(crate) async fn repository_auth(
    ctx: &Context,
    r: &OmniHelmRelease,
) -> Result<Result<RepositoryAuth, Problem>, Error> {
    let Some(cref) = &r.spec.chart.credentials_secret_ref else {
        return Ok(Ok(RepositoryAuth::default()));
    };
    let ns = r.namespace().unwrap_or_default();
    let Some(secret) = ctx.api::<Secret>(&ns).get_opt(&cref.name).await? else {
        return Ok(Err(Problem::MissingSecret(format!(
            "chart credentials Secret \"{ns}/{}\" does not exist",
            cref.name
        ))));
    };
    // Before anything is sent to the repository: the Omni key and service-account tokens never
    // serve as credentials.
    if let Some(reason) = secret_policy::check(
        &ctx.client,
        &ctx.secret_policy,
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

/// The install or upgrade request the spec describes.
pub(crate) fn request(r: &OmniHelmRelease) -> ReleaseRequest {
    let spec = &r.spec;
    ReleaseRequest {
        release_name: r.effective_release_name(),
        namespace: spec.namespace.clone(),
        chart: ChartSource::from_spec(&spec.chart.repository, &spec.chart.chart),
        chart_version: spec.chart.version.trim().to_string(),
        values: spec.chart.values.clone(),
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
        replace: false,
        owner_labels: owner_labels(r),
    }
}

/// The helm lock key. It names the release in its workload cluster rather than this object, so
/// two objects pointing at the same release never run helm on it at the same time.
pub(crate) fn release_key(r: &OmniHelmRelease) -> String {
    format!(
        "{}/{}/{}/{}",
        r.namespace().unwrap_or_default(),
        r.spec.kubeconfig_secret_ref.name,
        r.spec.namespace,
        r.effective_release_name()
    )
}

/// `spec.timeout`, at most 1h even when a longer one was stored without admission.
pub(crate) fn timeout_of(r: &OmniHelmRelease) -> Duration {
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

/// When to look at a healthy release again (`spec.driftCheckInterval`; `0` = only on change).
/// An interval below `floor` (stored without admission) is raised to it; `spread` scales it
/// (see [`crate::controllers::periodic`]).
pub(crate) fn drift_check(r: &OmniHelmRelease, floor: Duration, spread: f64) -> Action {
    let interval = match r.drift_check_interval() {
        Ok(Some(interval)) => crate::api::duration::clamp_interval(interval, floor),
        Ok(None) => return Action::await_change(),
        Err(_) => DEFAULT_DRIFT_CHECK,
    };
    Action::requeue(interval.mul_f64(spread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::release;

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
