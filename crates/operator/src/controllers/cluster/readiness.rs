//! Whether an OmniCluster's purpose is achieved (pure): its template is synced, and Omni
//! reports the cluster running with every machine set ready with all its machines, the
//! Kubernetes API ready, no upgrade in flight and no health check failing. Otherwise the cluster
//! converges (`Reconciling=True`), and the reason says what it waits for, in the user's words:
//! the OmniControlPlane or OmniWorkers a short machine set comes from, not only Omni's ID.

use omni_client::template::{ClusterHealth, MachineSetHealth};

use crate::api::Reason;
use crate::domain::render::RenderedSet;

/// Omni's phase of a machine set, or of an upgrade, that is done.
const DONE: &str = "Done";
/// Omni's state of a health check whose last run failed.
const FAILED_CHECK: &str = "FAILED";

/// What keeps a synced cluster from `Ready`: the reason and the message of `Ready=False`
/// (and `Reconciling=True`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Converging {
    /// Why, as a condition reason.
    pub(crate) reason: Reason,
    /// What is awaited.
    pub(crate) message: String,
}

/// Pure: whether the cluster Omni reports as `health` is Ready (`Ok`, with the message of
/// `Ready=True`), or what it converges towards. `sets` are the machine sets the template
/// declares, with the objects they come from.
pub(crate) fn readiness(
    health: &ClusterHealth,
    sets: &[RenderedSet],
) -> Result<String, Converging> {
    let converging = |reason, message| Err(Converging { reason, message });
    let short = short_sets(health, sets);
    if !short.is_empty() {
        return converging(
            Reason::WaitingForMachines,
            format!("waiting for machines: {}", short.join("; ")),
        );
    }
    let upgrades = upgrades(health);
    if !upgrades.is_empty() {
        return converging(Reason::Upgrading, upgrades.join("; "));
    }
    let unhealthy: Vec<String> = health
        .machine_sets
        .iter()
        .filter(|s| s.machines.healthy < s.machines.total)
        .map(|s| {
            format!(
                "{} has {} of {} machines healthy",
                owner(&s.id, sets),
                s.machines.healthy,
                s.machines.total
            )
        })
        .collect();
    if !unhealthy.is_empty() {
        return converging(
            Reason::WaitingForMachines,
            format!("waiting for machines: {}", unhealthy.join("; ")),
        );
    }
    if !health.kubernetes_api_ready {
        return converging(
            Reason::KubernetesNotReady,
            format!(
                "waiting for the Kubernetes API of cluster {:?}: Omni does not report it ready yet",
                health.cluster
            ),
        );
    }
    let failed = failed_checks(health);
    if !failed.is_empty() {
        return converging(Reason::HealthCheckFailed, failed.join("; "));
    }
    if !health.healthy {
        return converging(
            Reason::ClusterNotRunning,
            format!(
                "Omni does not report the cluster running: {}",
                health.summary
            ),
        );
    }
    Ok(format!(
        "Omni reports cluster {:?} running: {}/{} machines healthy, Kubernetes API ready",
        health.cluster, health.machines.healthy, health.machines.total
    ))
}

/// How the user knows machine set `id`: the OmniControlPlane or OmniWorkers it comes from, or
/// (a set the template no longer declares) its Omni ID.
fn owner(id: &str, sets: &[RenderedSet]) -> String {
    match sets.iter().find(|s| s.id == id) {
        Some(s) => format!("{} {:?}", s.kind, s.name),
        None => format!("Omni machine set {id:?}"),
    }
}

/// The machine sets that lack machines: fewer than they request, none at all, or (declared by
/// the template) without a status in Omni yet; one line each.
fn short_sets(health: &ClusterHealth, sets: &[RenderedSet]) -> Vec<String> {
    let from_class = |id: &str| {
        sets.iter()
            .find(|s| s.id == id)
            .and_then(|s| s.machine_class.as_deref())
            .map(|class| format!(" from machine class {class:?}"))
            .unwrap_or_default()
    };
    let mut short: Vec<String> = health
        .machine_sets
        .iter()
        .filter(|s| s.machines.total < s.machines.requested || s.machines.total == 0)
        .map(|s: &MachineSetHealth| {
            let (who, class) = (owner(&s.id, sets), from_class(&s.id));
            match s.machines.requested {
                0 => format!("{who} has no machines{class}"),
                wanted => format!("{who} has {} of {wanted} machines{class}", s.machines.total),
            }
        })
        .collect();
    short.extend(
        sets.iter()
            .filter(|s| !health.machine_sets.iter().any(|m| m.id == s.id))
            .map(|s| {
                format!(
                    "{} {:?} has no machines yet{}",
                    s.kind,
                    s.name,
                    from_class(&s.id)
                )
            }),
    );
    short
}

/// The upgrades Omni has in flight (or that failed), one line each, followed by the failed
/// health checks (an upgrade commonly fails them for a while); empty without an upgrade.
fn upgrades(health: &ClusterHealth) -> Vec<String> {
    let u = &health.upgrades;
    let mut lines: Vec<String> = [
        ("Kubernetes", &u.kubernetes_phase, &u.kubernetes_error),
        ("Talos", &u.talos_phase, &u.talos_error),
    ]
    .into_iter()
    .filter_map(|(what, phase, error)| {
        let phase = phase.as_deref().filter(|p| *p != DONE)?;
        let mut line = format!("Omni is upgrading {what} (phase {phase})");
        if !error.is_empty() {
            line.push_str(&format!(": {}", first_line(error)));
        }
        Some(line)
    })
    .collect();
    if !lines.is_empty() {
        lines.extend(failed_checks(health));
    }
    lines
}

/// The health checks whose last run failed, one line each.
fn failed_checks(health: &ClusterHealth) -> Vec<String> {
    health
        .health_checks
        .iter()
        .filter(|c| c.state == FAILED_CHECK)
        .map(|c| {
            let mut line = format!("health check {:?} failed", c.id);
            if !c.error.is_empty() {
                line.push_str(&format!(": {}", first_line(&c.error)));
            }
            line
        })
        .collect()
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use omni_client::template::{HealthCheckResult, MachineCounts, Upgrades};

    fn set(id: &str, phase: &str, total: u32, healthy: u32, requested: u32) -> MachineSetHealth {
        MachineSetHealth {
            id: id.into(),
            phase: phase.into(),
            ready: phase == "Running",
            error: String::new(),
            machines: MachineCounts {
                total,
                healthy,
                connected: healthy,
                requested,
            },
        }
    }

    fn running() -> ClusterHealth {
        ClusterHealth {
            cluster: "edge".into(),
            phase: "RUNNING".into(),
            ready: true,
            kubernetes_api_ready: true,
            talos_version: "1.13.2".into(),
            kubernetes_version: "1.35.0".into(),
            manifests: None,
            healthy: true,
            machine_sets: vec![
                set("edge-control-planes", "Running", 1, 1, 1),
                set("edge-gpu", "Running", 2, 2, 2),
            ],
            machines: MachineCounts {
                total: 3,
                healthy: 3,
                connected: 3,
                requested: 3,
            },
            upgrades: Upgrades {
                kubernetes_phase: Some("Done".into()),
                talos_phase: Some("Done".into()),
                ..Upgrades::default()
            },
            health_checks: Vec::new(),
            summary: "cluster edge is healthy".into(),
        }
    }

    fn sets() -> Vec<RenderedSet> {
        vec![
            RenderedSet {
                id: "edge-control-planes".into(),
                kind: "OmniControlPlane",
                name: "edge-cp".into(),
                machine_class: None,
            },
            RenderedSet {
                id: "edge-gpu".into(),
                kind: "OmniWorkers",
                name: "gpu".into(),
                machine_class: Some("gpu-nodes".into()),
            },
        ]
    }

    fn not_ready(health: &ClusterHealth) -> (Reason, String) {
        match readiness(health, &sets()) {
            Ok(m) => panic!("Ready: {m}"),
            Err(c) => (c.reason, c.message),
        }
    }

    #[test]
    fn a_running_cluster_is_ready() {
        assert_eq!(
            readiness(&running(), &sets()),
            Ok(
                "Omni reports cluster \"edge\" running: 3/3 machines healthy, Kubernetes API ready"
                    .to_string()
            )
        );
    }

    /// The starved cluster: `SCALING_UP`, no machines, the API not ready. The reason
    /// names the objects whose sets lack machines, and the machine class they wait on.
    #[test]
    fn a_cluster_starved_of_machines_waits_for_them_by_name() {
        let mut h = running();
        h.phase = "SCALING_UP".into();
        h.ready = false;
        h.healthy = false;
        h.kubernetes_api_ready = false;
        h.machine_sets = vec![
            set("edge-control-planes", "ScalingUp", 0, 0, 0),
            set("edge-gpu", "ScalingUp", 0, 0, 3),
        ];
        assert_eq!(
            not_ready(&h),
            (
                Reason::WaitingForMachines,
                "waiting for machines: OmniControlPlane \"edge-cp\" has no machines; OmniWorkers \"gpu\" has 0 of 3 machines from machine class \"gpu-nodes\"".into()
            )
        );
        // A set Omni has no status for yet counts as one without machines.
        h.machine_sets.truncate(1);
        let (reason, message) = not_ready(&h);
        assert_eq!(reason, Reason::WaitingForMachines);
        assert!(
            message.ends_with(
                "OmniWorkers \"gpu\" has no machines yet from machine class \"gpu-nodes\""
            ),
            "{message}"
        );
    }

    /// Each way a synced cluster is not Ready has its reason; the first in the order below
    /// wins (machines missing, upgrades, machines unhealthy, the API, health checks, the rest).
    #[test]
    fn each_way_of_not_being_ready_has_its_reason() {
        let case = |edit: &dyn Fn(&mut ClusterHealth)| {
            let mut h = running();
            edit(&mut h);
            not_ready(&h)
        };
        assert_eq!(
            case(&|h| {
                h.healthy = false;
                h.upgrades.talos_phase = Some("Upgrading".into());
            }),
            (
                Reason::Upgrading,
                "Omni is upgrading Talos (phase Upgrading)".into()
            )
        );
        assert_eq!(
            case(&|h| {
                h.healthy = false;
                h.upgrades.talos_phase = Some("Upgrading".into());
                h.health_checks = vec![HealthCheckResult {
                    id: "cluster-edge-dns".into(),
                    state: "FAILED".into(),
                    error: "job failed\nmore".into(),
                    output: String::new(),
                    job_namespace: String::new(),
                    job_name: String::new(),
                }];
            })
            .1,
            "Omni is upgrading Talos (phase Upgrading); health check \"cluster-edge-dns\" failed: job failed"
        );
        assert_eq!(
            case(&|h| {
                h.healthy = false;
                h.machine_sets[1] = set("edge-gpu", "ScalingUp", 2, 1, 2);
            }),
            (
                Reason::WaitingForMachines,
                "waiting for machines: OmniWorkers \"gpu\" has 1 of 2 machines healthy".into()
            )
        );
        assert_eq!(
            case(&|h| h.kubernetes_api_ready = false).0,
            Reason::KubernetesNotReady
        );
        assert_eq!(
            case(&|h| h.health_checks = vec![HealthCheckResult {
                id: "cluster-edge-dns".into(),
                state: "FAILED".into(),
                error: String::new(),
                output: String::new(),
                job_namespace: String::new(),
                job_name: String::new(),
            }]),
            (
                Reason::HealthCheckFailed,
                "health check \"cluster-edge-dns\" failed".into()
            )
        );
        assert_eq!(
            case(&|h| {
                h.healthy = false;
                h.phase = "SCALING_DOWN".into();
            }),
            (
                Reason::ClusterNotRunning,
                "Omni does not report the cluster running: cluster edge is healthy".into()
            )
        );
        // A set no longer declared is named by its Omni ID.
        assert_eq!(
            case(&|h| {
                h.machine_sets.push(set("edge-old", "ScalingDown", 1, 0, 0));
            })
            .1,
            "waiting for machines: Omni machine set \"edge-old\" has 0 of 1 machines healthy"
        );
    }
}
