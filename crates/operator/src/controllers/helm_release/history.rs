//! `status.history`: the last Helm revisions this object made, newest first. Pure.

use crate::api::helm_policies::ReleaseHistoryEntry;
use crate::domain::helm::{HelmStatus, ReleaseInfo};

/// Entries kept when `spec.maxHistory` does not ask for fewer.
pub(crate) const HISTORY_LIMIT: usize = 5;

/// How many entries a release keeps: [`HISTORY_LIMIT`], or `spec.maxHistory` when it is lower
/// (Helm keeps no more revisions than that, and the status should not list what Helm pruned).
pub(crate) fn limit(max_history: Option<i64>) -> usize {
    match max_history.and_then(|h| usize::try_from(h).ok()) {
        Some(h) if h > 0 => h.min(HISTORY_LIMIT),
        _ => HISTORY_LIMIT,
    }
}

/// Records revision `info` (applying inputs `digest`, with the test result `test` when tests
/// ran) in `history`: replaces the entry of the same revision, marks an older `deployed` entry
/// `superseded` when this one is deployed (as Helm does), and keeps the newest `limit`.
pub(crate) fn record(
    history: &mut Vec<ReleaseHistoryEntry>,
    info: &ReleaseInfo,
    digest: &str,
    test: Option<&str>,
    limit: usize,
) {
    history.retain(|e| e.revision != info.revision);
    if info.status == HelmStatus::Deployed {
        for older in history.iter_mut().filter(|e| e.status == "deployed") {
            older.status = HelmStatus::Superseded.to_string();
        }
    }
    history.push(ReleaseHistoryEntry {
        revision: info.revision,
        chart_version: info.chart_version.clone(),
        status: info.status.to_string(),
        digest: digest.to_string(),
        deployed: info
            .last_deployed
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok()),
        test_result: test.map(str::to_string),
    });
    history.sort_by_key(|e| std::cmp::Reverse(e.revision));
    history.truncate(limit);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::at;

    #[test]
    fn newest_first_superseding_and_bounded() {
        let mut h = Vec::new();
        for revision in 1..=7 {
            let info = at("deployed", revision, Some("2026-01-01T00:00:00Z"));
            record(&mut h, &info, &format!("d{revision}"), None, 5);
        }
        let seen: Vec<(i64, &str)> = h.iter().map(|e| (e.revision, e.status.as_str())).collect();
        assert_eq!(
            seen,
            [
                (7, "deployed"),
                (6, "superseded"),
                (5, "superseded"),
                (4, "superseded"),
                (3, "superseded")
            ]
        );
        assert_eq!(h[0].digest, "d7");
        assert_eq!(
            h[0].deployed.map(|t| t.to_string()).as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        // A failed revision leaves the deployed one as it was; a later look updates an entry.
        record(&mut h, &at("failed", 8, None), "d8", Some("Failed"), 5);
        assert_eq!(
            (h[0].status.as_str(), h[1].status.as_str()),
            ("failed", "deployed")
        );
        assert_eq!(h[0].test_result.as_deref(), Some("Failed"));
        record(&mut h, &at("superseded", 8, None), "d8", None, 5);
        assert_eq!(h[0].status, "superseded");
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn max_history_lowers_the_limit_only() {
        assert_eq!(limit(None), 5);
        assert_eq!(limit(Some(0)), 5);
        assert_eq!(limit(Some(2)), 2);
        assert_eq!(limit(Some(20)), 5);
    }
}
