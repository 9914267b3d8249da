//! What the objects that depend on an OmniCluster wait for (pure): a dependant (an export, a
//! secret sync, a Helm release) does not act for the first time before its cluster is `Ready`
//! (or, with `spec.startWhen: KubernetesAPIReady`, before Omni reports the cluster's Kubernetes
//! API ready); a child (OmniControlPlane, OmniWorkers, OmniMachine) is `Ready` once its
//! cluster is. Waiting is `Reconciling`, not a failure: reason `ClusterNotReady`.

use crate::api::OmniCluster;
use crate::api::common::{ConditionStatus, StartWhen, condition_types as ct, find_condition};

/// Pure: why `cluster` is not `Ready` in the words of a dependant's message, or `None` when
/// it is: its `Ready` condition (`True`, whatever the generation: a spec edit in flight does
/// not hold dependants of a cluster that works).
///
/// The message is the same whatever the cluster's own reason: a cluster passes through several
/// reasons on its way to `Ready`, and a message that quoted them rewrote the status of every
/// waiting dependant (and of its three children) at each of them — at a cold start of 1,000
/// clusters with 10,000 syncs, a third of all status writes. Why the cluster is not Ready is
/// on the cluster.
pub(crate) fn not_ready(cluster: &OmniCluster) -> Option<String> {
    let ready = cluster
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, ct::READY));
    if ready.is_some_and(|c| c.status == ConditionStatus::True) {
        return None;
    }
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Some(format!(
        "waiting for OmniCluster {name:?} to become Ready (its status says why it is not)"
    ))
}

/// Pure: why a dependant that has not acted yet (`started` false) waits for `cluster` under
/// `start_when` (the dependant's `spec.startWhen`), or `None` when it may act.
pub(crate) fn start_gate(
    cluster: &OmniCluster,
    start_when: Option<StartWhen>,
    started: bool,
) -> Option<String> {
    if started {
        return None;
    }
    let why = not_ready(cluster)?;
    match start_when.unwrap_or_default() {
        StartWhen::ClusterExists => None,
        StartWhen::ClusterReady => Some(why),
        StartWhen::KubernetesApiReady => {
            let api_ready = cluster
                .status
                .as_ref()
                .and_then(|s| s.kubernetes_api_ready)
                .unwrap_or(false);
            (!api_ready).then(|| {
                format!(
                    "waiting for Omni to report the Kubernetes API of OmniCluster {:?} ready (spec.startWhen: KubernetesAPIReady)",
                    cluster.metadata.name.clone().unwrap_or_default()
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(ready: Option<(&str, &str)>, api_ready: Option<bool>) -> OmniCluster {
        let mut status = serde_json::json!({});
        if let Some((s, reason)) = ready {
            status["conditions"] = serde_json::json!([{
                "type": "Ready", "status": s, "reason": reason, "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]);
        }
        if let Some(api) = api_ready {
            status["kubernetesAPIReady"] = api.into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "edge", "namespace": "ops", "generation": 3},
            "spec": {"connectionRef": {"name": "omni"},
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}},
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_dependant_starts_once_its_cluster_is_ready() {
        let starved = cluster(Some(("False", "WaitingForMachines")), Some(false));
        assert_eq!(
            start_gate(&starved, None, false).as_deref(),
            Some(
                "waiting for OmniCluster \"edge\" to become Ready (its status says why it is not)"
            )
        );
        // The message does not follow the cluster's reason (or its absence): a dependant's
        // status is not rewritten at each step of its cluster's way to Ready.
        for other in [
            None,
            Some(("False", "Reconciling")),
            Some(("Unknown", "Pending")),
        ] {
            assert_eq!(
                start_gate(&cluster(other, None), None, false),
                start_gate(&starved, None, false)
            );
        }
        let ready = cluster(Some(("True", "Running")), Some(true));
        assert_eq!(start_gate(&ready, None, false), None);
        assert_eq!(
            start_gate(&ready, Some(StartWhen::ClusterReady), false),
            None
        );
        // Once it has acted, the cluster's state does not hold it.
        assert_eq!(start_gate(&starved, None, true), None);
    }

    #[test]
    fn a_dependant_that_needs_only_the_api_starts_when_omni_reports_it() {
        let api = Some(StartWhen::KubernetesApiReady);
        let booting = cluster(Some(("False", "KubernetesNotReady")), Some(false));
        assert_eq!(
            start_gate(&booting, api, false).as_deref(),
            Some(
                "waiting for Omni to report the Kubernetes API of OmniCluster \"edge\" ready (spec.startWhen: KubernetesAPIReady)"
            )
        );
        let unhealthy = cluster(Some(("False", "HealthCheckFailed")), Some(true));
        assert_eq!(start_gate(&unhealthy, api, false), None);
        assert!(start_gate(&unhealthy, None, false).is_some());
        // The original's behaviour: as soon as the cluster exists.
        assert_eq!(
            start_gate(&booting, Some(StartWhen::ClusterExists), false),
            None
        );
        // A Ready cluster whose status predates the field counts as ready.
        assert_eq!(
            start_gate(&cluster(Some(("True", "Running")), None), api, false),
            None
        );
    }
}
