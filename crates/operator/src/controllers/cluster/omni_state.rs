//! Omni's view of a cluster in its status: phase, machine counts, versions, health checks and
//! manifest sync state, copied from what Omni reports (values only, no timestamps, so a read
//! that finds nothing new leaves the status as it was).

use omni_client::template::{ClusterHealth, HealthCheckResult, ManifestGroupSync};

use crate::api::cluster::{
    HealthCheckStatus, MachineSetState, ManifestGroupState, ManifestGroupSyncState, ManifestsState,
    OUT_OF_SYNC_MANIFESTS_LISTED, OmniClusterStatus, OutOfSyncManifest,
};

/// Longest Omni output kept in status.
pub(crate) const MAX_OUTPUT: usize = 4096;

/// Trims whitespace and cuts to at most [`MAX_OUTPUT`] bytes on a character boundary (the
/// original could split a UTF-8 character).
pub(crate) fn trim_output(text: &str) -> String {
    let t = text.trim();
    let mut end = t.len().min(MAX_OUTPUT);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].to_string()
}

/// Omni's health-check results as status entries (empty strings left out).
fn health_check_statuses(results: &[HealthCheckResult]) -> Vec<HealthCheckStatus> {
    let text = |s: &str| (!s.is_empty()).then(|| trim_output(s));
    results
        .iter()
        .map(|r| HealthCheckStatus {
            id: r.id.clone(),
            state: r.state.clone(),
            error: text(&r.error),
            output: text(&r.output),
            job_namespace: text(&r.job_namespace),
            job_name: text(&r.job_name),
        })
        .collect()
}

/// Copies Omni's summary, health checks, phase, machine counts, versions and manifest sync
/// state into the typed status. Only Omni's values go in (no timestamps), so a status read that
/// finds nothing new leaves the status as it was.
pub(super) fn omni_state(status: &mut OmniClusterStatus, health: &ClusterHealth) {
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    status.last_status_output = Some(trim_output(&health.summary));
    status.health_checks = health_check_statuses(&health.health_checks);
    status.omni_phase = Some(health.phase.clone());
    status.ready_machines = Some(format!(
        "{}/{}",
        health.machines.healthy, health.machines.total
    ));
    status.talos_version = text(&health.talos_version);
    status.kubernetes_upgrade_phase = health.upgrades.kubernetes_phase.clone();
    status.talos_upgrade_phase = health.upgrades.talos_phase.clone();
    status.kubernetes_version = text(&health.kubernetes_version);
    status.kubernetes_api_ready = Some(health.kubernetes_api_ready);
    status.machine_sets = health
        .machine_sets
        .iter()
        .map(|s| MachineSetState {
            id: s.id.clone(),
            phase: s.phase.clone(),
            ready: s.ready,
            ready_machines: s.machines.healthy,
            total_machines: s.machines.total,
        })
        .collect();
    status.manifests = health.manifests.as_ref().map(|m| ManifestsState {
        applied: m.out_of_sync == 0,
        total: m.total,
        out_of_sync: m.out_of_sync,
        last_error: trim_output(&m.last_error),
        groups: m
            .groups
            .iter()
            .map(|g| ManifestGroupState {
                id: g.id.clone(),
                phase: g.phase.clone(),
            })
            .collect(),
        out_of_sync_groups: m
            .groups
            .iter()
            .filter(|g| g.phase != "APPLIED" || !g.out_of_sync.is_empty())
            .map(out_of_sync_group)
            .collect(),
    });
}

/// A manifest group Omni has not applied as declared, with the first of its manifests that
/// are not applied (bounded, so a large group cannot grow the status without limit).
fn out_of_sync_group(g: &ManifestGroupSync) -> ManifestGroupSyncState {
    let mode = match g.mode.as_str() {
        "ONE_TIME" => "one-time",
        _ => "full",
    };
    ManifestGroupSyncState {
        id: g.id.clone(),
        phase: g.phase.clone(),
        mode: mode.to_string(),
        total: g.total,
        out_of_sync: u32::try_from(g.out_of_sync.len()).unwrap_or(u32::MAX),
        manifests: g
            .out_of_sync
            .iter()
            .take(OUT_OF_SYNC_MANIFESTS_LISTED)
            .map(|m| OutOfSyncManifest {
                kind: m.kind.clone(),
                namespace: (!m.namespace.is_empty()).then(|| m.namespace.clone()),
                name: m.name.clone(),
                phase: m.phase.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_trimmed_and_cut_on_a_character_boundary() {
        assert_eq!(trim_output("  ok \n"), "ok");
        let long = "é".repeat(3000); // 6000 bytes
        let cut = trim_output(&long);
        assert!(cut.len() <= MAX_OUTPUT);
        assert_eq!(cut.len(), 4096);
        let odd = format!("a{}", "é".repeat(3000));
        let cut = trim_output(&odd);
        assert_eq!(cut.len(), 4095);
    }
}
