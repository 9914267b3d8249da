//! `helm install`: a release that does not exist, or was uninstalled with its history kept.

use super::apply::HelmRun;
use super::outcome::{After, Done, HelmFailure};
use crate::api::OmniHelmRelease;
use crate::domain::helm::HelmStatus;
use crate::domain::helm::args::InstallVerb;

/// Installs the release.
pub(crate) async fn install(run: &HelmRun<'_>) -> Result<Done, HelmFailure> {
    // A release uninstalled with its history kept can only be installed again over it.
    let replace = run
        .current
        .is_some_and(|c| c.status == HelmStatus::Uninstalled);
    run.run(InstallVerb::Install, replace, undone).await
}

/// With `atomic`, Helm removes a failed install itself.
fn undone(r: &OmniHelmRelease, after: &After) -> Option<String> {
    (r.spec.atomic && *after == After::Gone).then(|| "Helm removed the failed install".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::{info, release};

    #[test]
    fn a_failed_atomic_install_is_reported_undone_only_when_the_release_is_gone() {
        let mut r = release(serde_json::json!({}));
        assert_eq!(undone(&r, &After::Gone), None, "not atomic");
        r.spec.atomic = true;
        assert_eq!(
            undone(&r, &After::Gone).as_deref(),
            Some("Helm removed the failed install")
        );
        assert_eq!(undone(&r, &After::Release(info("failed", 1))), None);
        assert_eq!(undone(&r, &After::Unknown), None);
    }
}
