//! `helm upgrade`: new inputs, a repair of drift or a failure, or the labels of an adoption.

use super::apply::HelmRun;
use super::outcome::{After, Done, HelmFailure};
use crate::api::OmniHelmRelease;
use crate::domain::helm::HelmStatus;
use crate::domain::helm::args::InstallVerb;

/// Upgrades the release.
pub(crate) async fn upgrade(run: &HelmRun<'_>) -> Result<Done, HelmFailure> {
    run.run(InstallVerb::Upgrade, false, undone).await
}

/// With `atomic`, Helm rolls a failed upgrade back to a working (deployed) revision.
fn undone(r: &OmniHelmRelease, after: &After) -> Option<String> {
    match after {
        After::Release(a) if r.spec.atomic && a.status == HelmStatus::Deployed => Some(format!(
            "rolled back to a working release (now revision {})",
            a.revision
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::{info, release};

    #[test]
    fn a_failed_atomic_upgrade_is_reported_undone_only_when_a_revision_is_deployed() {
        let mut r = release(serde_json::json!({}));
        let rolled_back = After::Release(info("deployed", 4));
        assert_eq!(undone(&r, &rolled_back), None, "not atomic");
        r.spec.atomic = true;
        assert_eq!(
            undone(&r, &rolled_back).as_deref(),
            Some("rolled back to a working release (now revision 4)")
        );
        assert_eq!(undone(&r, &After::Release(info("failed", 4))), None);
        assert_eq!(undone(&r, &After::Gone), None);
        assert_eq!(undone(&r, &After::Unknown), None);
    }
}
