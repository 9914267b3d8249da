//! What must hold before a pass runs Helm at all: the releases it depends on are Ready at their
//! current generation (`spec.dependsOn`), and the OmniCluster is as healthy as
//! `spec.clusterHealth` asks. Pure functions of the objects the pass read; a shut gate is a
//! [`HelmFailure`] the status reports without a Helm call, and the pass is woken again by the
//! object it waits for (the release index, the cluster's typed status), never by polling.

use super::outcome::HelmFailure;
use crate::api::cluster::OmniClusterStatus;
use crate::api::common::{ConditionStatus, condition_types as ct, find_condition};
use crate::api::helm_policies::{ClusterHealthRequirement, cycle_text, dependency_cycle};
use crate::api::{OmniCluster, OmniHelmRelease};
use crate::controllers::shared::decoded::Cached;

/// One dependency as the release cache holds it.
pub(crate) type Dependency = Option<std::sync::Arc<Cached<OmniHelmRelease>>>;

/// Pure: the gate `r`'s dependencies shut, if they shut one. `lookup` finds a release of `r`'s
/// namespace by name (`None` when it does not exist). A cycle through `r` and a dependency
/// that targets another OmniCluster are spec problems (`InvalidSpec`); any other dependency
/// that is not Ready at its current generation keeps `r` waiting, naming the first.
pub(crate) fn dependencies(
    r: &OmniHelmRelease,
    lookup: impl Fn(&str) -> Dependency,
) -> Option<HelmFailure> {
    if r.spec.depends_on.is_empty() {
        return None;
    }
    let own_name = r.metadata.name.clone().unwrap_or_default();
    let depends_on = |name: &str| -> Vec<String> {
        if name == own_name {
            return r.spec.depends_on.iter().map(|d| d.name.clone()).collect();
        }
        match lookup(name).as_deref() {
            Some(Cached::Decoded(d)) => d.spec.depends_on.iter().map(|d| d.name.clone()).collect(),
            _ => Vec::new(),
        }
    };
    if let Some(cycle) = dependency_cycle(&own_name, depends_on) {
        return Some(HelmFailure::InvalidSpec(format!(
            "spec.dependsOn: dependency cycle {}",
            cycle_text(&cycle)
        )));
    }
    for (i, dependency) in r.spec.depends_on.iter().enumerate() {
        let waiting = |why: String| HelmFailure::DependencyNotReady {
            name: dependency.name.clone(),
            why,
        };
        let found = lookup(&dependency.name);
        let d = match found.as_deref() {
            None => return Some(waiting("does not exist".to_string())),
            Some(Cached::Undecodable(_)) => {
                return Some(waiting(
                    "cannot be read (its stored object does not decode)".into(),
                ));
            }
            Some(Cached::Decoded(d)) => d,
        };
        if d.spec.cluster_ref.name != r.spec.cluster_ref.name {
            return Some(HelmFailure::InvalidSpec(format!(
                "spec.dependsOn[{i}]: OmniHelmRelease {:?} targets OmniCluster {:?}, this release {:?}; dependencies order releases within one workload cluster",
                dependency.name, d.spec.cluster_ref.name, r.spec.cluster_ref.name
            )));
        }
        if let Some(why) = not_ready(d) {
            return Some(waiting(why));
        }
    }
    None
}

/// Why the release `d` does not count as Ready for its dependants, if it does not.
fn not_ready(d: &OmniHelmRelease) -> Option<String> {
    if d.metadata.deletion_timestamp.is_some() {
        return Some("is being deleted".to_string());
    }
    let generation = d.metadata.generation;
    let status = d.status.as_ref();
    let ready = status.and_then(|s| find_condition(&s.conditions, ct::READY));
    match ready {
        None => Some("has not reported yet".to_string()),
        Some(c) if c.status != ConditionStatus::True => Some(format!(
            "is not Ready ({}: {})",
            c.reason,
            first_line(&c.message)
        )),
        Some(_) if status.and_then(|s| s.observed_generation) != generation => Some(format!(
            "has not reported on its generation {} yet",
            generation.unwrap_or_default()
        )),
        Some(_) => None,
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Pure: the gate `cluster` shuts when it is not as healthy as `r` requires before an install
/// or upgrade, naming the first part that is not.
pub(crate) fn cluster_health(r: &OmniHelmRelease, cluster: &OmniCluster) -> Option<HelmFailure> {
    let require = r
        .spec
        .cluster_health
        .as_ref()
        .map_or(ClusterHealthRequirement::None, |g| g.require);
    let problem = match require {
        ClusterHealthRequirement::None => None,
        ClusterHealthRequirement::Running => not_running(cluster.status.as_ref()),
        ClusterHealthRequirement::Ready => {
            not_running(cluster.status.as_ref()).or_else(|| not_ready_cluster(cluster))
        }
    };
    problem.map(|what| HelmFailure::ClusterNotHealthy {
        cluster: r.spec.cluster_ref.name.clone(),
        require,
        what,
    })
}

/// What keeps Omni's view of the cluster from "running, not being upgraded", if anything.
fn not_running(status: Option<&OmniClusterStatus>) -> Option<String> {
    let Some(phase) = status.and_then(|s| s.omni_phase.as_deref()) else {
        return Some("Omni has not reported its state yet".to_string());
    };
    // An upgrade is named first: Omni reports the cluster's phase as other than running while
    // it upgrades, and the upgrade is what a person waits for.
    for (what, upgrade) in status.iter().flat_map(|s| {
        [
            ("Kubernetes", &s.kubernetes_upgrade_phase),
            ("Talos", &s.talos_upgrade_phase),
        ]
    }) {
        match upgrade.as_deref() {
            None | Some("Done") => {}
            Some("Failed") => return Some(format!("its {what} upgrade failed")),
            Some(other) => return Some(format!("a {what} upgrade is in flight ({other})")),
        }
    }
    (phase != "RUNNING").then(|| format!("Omni reports phase {phase}"))
}

/// What keeps a running cluster from `Ready`: the OmniCluster's own `Ready`, a machine set not
/// ready with all its machines, a failed health check.
fn not_ready_cluster(cluster: &OmniCluster) -> Option<String> {
    let status = cluster.status.as_ref()?;
    match find_condition(&status.conditions, ct::READY) {
        Some(c) if c.status == ConditionStatus::True => {}
        Some(c) => return Some(format!("the OmniCluster is not Ready ({})", c.reason)),
        None => return Some("the OmniCluster has not reported yet".to_string()),
    }
    if let Some(set) = status
        .machine_sets
        .iter()
        .find(|s| !s.ready || s.phase != "Running" || s.ready_machines < s.total_machines)
    {
        return Some(format!(
            "machine set {} is {} with {}/{} machines ready",
            set.id, set.phase, set.ready_machines, set.total_machines
        ));
    }
    status
        .health_checks
        .iter()
        .find(|h| h.state == "FAILED")
        .map(|h| format!("health check {} failed", h.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Reason;
    use crate::api::cluster::HealthCheckStatus;
    use crate::api::common::Condition;
    use crate::api::helm_release::OmniHelmReleaseStatus;
    use crate::controllers::helm_release::test_support::release;

    fn ready_release(name: &str, generation: i64, ready: bool) -> OmniHelmRelease {
        let mut r = release(serde_json::json!({}));
        r.metadata.name = Some(name.into());
        r.metadata.generation = Some(generation);
        r.status = Some(OmniHelmReleaseStatus {
            observed_generation: Some(generation),
            conditions: vec![Condition::new(
                ct::READY,
                ready.into(),
                if ready {
                    Reason::HelmInstalled
                } else {
                    Reason::ReconcileFailed
                },
                "m",
                Some(generation),
                jiff::Timestamp::UNIX_EPOCH,
            )],
            ..OmniHelmReleaseStatus::default()
        });
        r
    }

    fn depending(on: &[&str]) -> OmniHelmRelease {
        let mut r = release(serde_json::json!({}));
        r.metadata.name = Some("me".into());
        r.spec.depends_on = on
            .iter()
            .map(|n| crate::api::common::LocalObjectReference {
                name: n.to_string(),
            })
            .collect();
        r
    }

    fn lookup(objects: Vec<OmniHelmRelease>) -> impl Fn(&str) -> Dependency {
        move |name: &str| {
            objects
                .iter()
                .find(|o| o.metadata.name.as_deref() == Some(name))
                .map(|o| std::sync::Arc::new(Cached::new(o.clone())))
        }
    }

    fn reason(shut: Option<HelmFailure>) -> Option<String> {
        use crate::controllers::shared::error::Failure as _;
        shut.map(|f| format!("{}: {f}", f.reason()))
    }

    #[test]
    fn a_release_waits_for_each_dependency_to_be_ready_at_its_generation() {
        let me = depending(&["a", "b"]);
        let a = ready_release("a", 2, true);
        assert_eq!(
            reason(dependencies(&me, lookup(vec![a.clone()]))).as_deref(),
            Some(
                "DependencyNotReady: waiting for OmniHelmRelease \"b\" (spec.dependsOn), which does not exist"
            )
        );
        let b = ready_release("b", 1, false);
        assert!(
            reason(dependencies(&me, lookup(vec![a.clone(), b]))).is_some_and(|m| m
                .starts_with("DependencyNotReady: waiting for OmniHelmRelease \"b\" (spec.dependsOn), which is not Ready (ReconcileFailed"))
        );
        let mut stale = ready_release("b", 1, true);
        stale.metadata.generation = Some(2);
        assert!(
            reason(dependencies(&me, lookup(vec![a.clone(), stale])))
                .is_some_and(|m| m.contains("has not reported on its generation 2 yet"))
        );
        let b = ready_release("b", 3, true);
        assert_eq!(reason(dependencies(&me, lookup(vec![a, b]))), None);
        assert_eq!(reason(dependencies(&depending(&[]), lookup(vec![]))), None);
    }

    #[test]
    fn a_cycle_and_a_dependency_in_another_cluster_are_spec_problems() {
        let me = depending(&["a"]);
        let mut a = ready_release("a", 1, true);
        a.spec.depends_on = vec![crate::api::common::LocalObjectReference { name: "me".into() }];
        assert_eq!(
            reason(dependencies(&me, lookup(vec![a]))).as_deref(),
            Some("ValidationFailed: spec.dependsOn: dependency cycle me → a → me")
        );
        let mut elsewhere = ready_release("a", 1, true);
        elsewhere.spec.cluster_ref.name = "other".into();
        assert!(
            reason(dependencies(&me, lookup(vec![elsewhere])))
                .is_some_and(|m| m.starts_with("ValidationFailed: spec.dependsOn[0]: OmniHelmRelease \"a\" targets OmniCluster \"other\""))
        );
    }

    fn cluster(status: serde_json::Value) -> OmniCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"connectionRef": {"name": "omni"}, "talos": {"version": "v1.11.5"}, "kubernetes": {"version": "v1.34.2"}},
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn healthy() -> serde_json::Value {
        serde_json::json!({
            "conditions": [{"type": "Ready", "status": "True", "reason": "Synced", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "omniPhase": "RUNNING",
            "kubernetesUpgradePhase": "Done",
            "talosUpgradePhase": "Done",
            "machineSets": [{"id": "c-control-planes", "phase": "Running", "ready": true, "readyMachines": 1, "totalMachines": 1}],
        })
    }

    #[test]
    fn the_health_gate_names_the_first_part_that_is_not_as_required() {
        let gated = |require: &str| {
            let mut r = release(serde_json::json!({}));
            r.spec.cluster_health =
                serde_json::from_value(serde_json::json!({"require": require})).ok();
            r
        };
        let check = |require: &str, status: serde_json::Value| {
            reason(cluster_health(&gated(require), &cluster(status)))
        };
        assert_eq!(check("Ready", healthy()), None);
        assert_eq!(check("None", serde_json::json!({})), None);
        assert_eq!(
            reason(cluster_health(
                &release(serde_json::json!({})),
                &cluster(serde_json::json!({}))
            )),
            None,
            "no gate without spec.clusterHealth"
        );
        let mut upgrading = healthy();
        upgrading["talosUpgradePhase"] = "Upgrading".into();
        assert_eq!(
            check("Running", upgrading.clone()).as_deref(),
            Some(
                "ClusterNotHealthy: waiting for OmniCluster \"c\" to be Running: a Talos upgrade is in flight (Upgrading)"
            )
        );
        assert!(check("Ready", upgrading).is_some());
        assert!(
            check("Running", serde_json::json!({}))
                .is_some_and(|m| m.ends_with("Omni has not reported its state yet"))
        );
        let mut scaling = healthy();
        scaling["omniPhase"] = "SCALING_UP".into();
        assert!(
            check("Running", scaling).is_some_and(|m| m.ends_with("Omni reports phase SCALING_UP"))
        );
        let mut set_down = healthy();
        set_down["machineSets"][0]["readyMachines"] = 0.into();
        assert_eq!(
            check("Running", set_down.clone()),
            None,
            "Running asks nothing of machines"
        );
        assert!(check("Ready", set_down).is_some_and(|m| {
            m.ends_with("machine set c-control-planes is Running with 0/1 machines ready")
        }));
        let mut failed_check = healthy();
        failed_check["healthChecks"] = serde_json::to_value(vec![HealthCheckStatus {
            id: "cluster-c-ready".into(),
            state: "FAILED".into(),
            ..HealthCheckStatus::default()
        }])
        .unwrap_or_default();
        assert!(
            check("Ready", failed_check)
                .is_some_and(|m| m.ends_with("health check cluster-c-ready failed"))
        );
        let mut not_ready = healthy();
        not_ready["conditions"][0]["status"] = "False".into();
        not_ready["conditions"][0]["reason"] = "StatusFailed".into();
        assert!(
            check("Ready", not_ready)
                .is_some_and(|m| m.ends_with("the OmniCluster is not Ready (StatusFailed)"))
        );
    }
}
