//! `helm test` after an install or upgrade (`spec.test`): its result goes in the status, and a
//! failing test counts as a failed install or upgrade unless `spec.test.ignoreFailures`.

use std::time::Duration;

use super::apply::HelmRun;
use super::outcome::HelmFailure;
use crate::domain::helm::args::InstallVerb;
use crate::domain::helm::{ReleaseInfo, TestRun};

/// Runs the release's tests after `verb` deployed revision `info`, when `spec.test.enable`:
/// `Ok(None)` when tests are off, `Ok(Some)` when they passed or their failure is ignored.
pub(crate) async fn after(
    run: &HelmRun<'_>,
    verb: InstallVerb,
    info: &ReleaseInfo,
) -> Result<Option<TestRun>, HelmFailure> {
    let Some(test) = run.r.spec.test.as_ref().filter(|t| t.enable) else {
        return Ok(None);
    };
    let timeout = test
        .timeout
        .as_ref()
        .and_then(|t| t.duration().ok())
        .and_then(|t| t.to_std())
        .filter(|t| !t.is_zero())
        .unwrap_or(run.req.timeout)
        .min(Duration::from_secs(3600));
    let name = &run.req.release_name;
    // Tests that cannot be run (or read back) did not pass.
    let tests = match run.session.test(run.req, timeout).await {
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
