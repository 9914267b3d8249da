//! `helm test` after an install or upgrade (`spec.test`): its result goes in the status, and a
//! failing test counts as a failed install or upgrade unless `spec.test.ignoreFailures`.

use std::time::Duration;

use super::outcome::HelmFailure;
use crate::api::OmniHelmRelease;
use crate::domain::helm::args::InstallVerb;
use crate::domain::helm::{ReleaseInfo, ReleaseRequest, ReleaseSession, TestRun};

/// Runs the tests of `r`'s release after `verb` deployed revision `info`, when
/// `spec.test.enable`: `Ok(None)` when tests are off, `Ok(Some)` when they passed or their
/// failure is ignored.
pub(crate) async fn after(
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    session: &ReleaseSession,
    verb: InstallVerb,
    info: &ReleaseInfo,
) -> Result<Option<TestRun>, HelmFailure> {
    let Some(test) = r.spec.test.as_ref().filter(|t| t.enable) else {
        return Ok(None);
    };
    let timeout = test
        .timeout
        .as_ref()
        .and_then(|t| t.duration().ok())
        .and_then(|t| t.to_std())
        .filter(|t| !t.is_zero())
        .unwrap_or(req.timeout)
        .min(Duration::from_secs(3600));
    let name = &req.release_name;
    // Tests that cannot be run (or read back) did not pass.
    let tests = match session.test(req, timeout).await {
        Ok(tests) => tests,
        Err(err) => TestRun {
            failure: Some(err.to_string()),
            hooks: Vec::new(),
        },
    };
    match &tests.failure {
        Some(failure) if !test.ignore_failures => Err(HelmFailure::TestFailed {
            verb,
            info: info.clone(),
            message: format!(
                "helm test of release {name:?} revision {} failed: {failure}",
                info.revision
            ),
            tests,
        }),
        _ => Ok(Some(tests)),
    }
}
