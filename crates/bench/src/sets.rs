//! The fleet-set scenario (`omni-bench --sets`): every OmniCluster carries the label
//! [`SELECTOR_LABEL`], and two sets select them all — an OmniHelmReleaseSet installing the
//! bench chart and an OmniSecretSyncSet copying one pull Secret into the
//! [`SELECTED_NAMESPACES`] workload namespaces its `namespaceSelector` matches (of six in each
//! workload cluster), both with kubeconfigs they mint
//! per cluster (`credentials.mint`) and `rollout.maxUnavailable: 10%`. Each matched cluster thus
//! gets four generated objects: an OmniHelmRelease and an OmniSecretSync, and the
//! OmniKubeconfigExport each of them uses.
//!
//! The cold start and the idle window are the common ones ([`crate::phases`]; the fleet counts
//! as converged once every generated object and both sets are Ready and every workload cluster
//! holds the release and the copy). After them come the set phases, each timed from the bench's
//! edit until the workload clusters show its effect and every object is Ready again, with the
//! operator's writes meanwhile:
//! 1. a **template change** (the chart's values) rolled out 10 % of the clusters at a time;
//! 2. a **relabel** moving every tenth cluster out of the selector (its four objects withdrawn,
//!    the release uninstalled and the copy removed);
//! 3. the same clusters relabelled **back in**.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::emulators::{self, CHART, CHART_VERSION, Emulators};
use crate::fleet::{self, AUTOMATION_GROUP, FleetSpec, NAMESPACE, Object, custom};
use crate::operator::OperatorProcess;
use crate::phases::{self, Writes};

/// The label every OmniCluster carries and the sets select on.
pub const SELECTOR_LABEL: &str = "omni-bench.texashpc.com/fleet";
/// Its value for a selected cluster.
pub const SELECTED: &str = "in";
/// Its value for a cluster relabelled out of the selector.
pub const NOT_SELECTED: &str = "out";
/// The OmniHelmReleaseSet (also the name of every release it installs).
pub const HELM_SET: &str = "bench-addon";
/// The OmniSecretSyncSet.
pub const SECRET_SET: &str = "bench-pull-secret";
/// The source Secret the Secret set copies, and the name of every copy.
pub const PULL_SECRET: &str = "bench-pull-secret";
/// The workload namespace the Helm set installs into.
pub const ADDON_NAMESPACE: &str = "bench-addon";
/// The rollout budget of both sets.
pub const MAX_UNAVAILABLE: &str = "10%";
/// The user the sets' minted kubeconfigs carry (with [`AUTOMATION_GROUP`], which every workload
/// cluster binds).
pub const MINTED_USER: &str = "bench-fleet";
/// Objects a set scenario generates per matched cluster: a release and a sync, and the export
/// each of them uses.
pub const GENERATED_PER_CLUSTER: usize = 4;
/// The chart value the template change edits (`replicas`), before and after.
pub const VALUES_BEFORE: u32 = 1;
/// See [`VALUES_BEFORE`].
pub const VALUES_AFTER: u32 = 2;

/// The custom resources of the set scenario with `matched` clusters selected: both sets and what
/// they generate (0 without the scenario).
pub fn objects_with(spec: &FleetSpec, matched: usize) -> usize {
    if spec.sets {
        2 + GENERATED_PER_CLUSTER * matched
    } else {
        0
    }
}

/// The labels of every OmniCluster (none without the scenario).
pub fn cluster_labels(spec: &FleetSpec) -> Option<Value> {
    spec.sets.then(|| json!({ SELECTOR_LABEL: SELECTED }))
}

/// The clusters the relabel phases move out of the selector and back: every tenth (at least
/// one).
pub fn moved(spec: &FleetSpec) -> Vec<usize> {
    (0..spec.clusters).step_by(10).collect()
}

fn mint() -> Value {
    json!({"mint": {"user": MINTED_USER, "groups": [AUTOMATION_GROUP], "ttl": "24h", "renewBefore": "4h"}})
}

fn selector() -> Value {
    json!({"matchLabels": { SELECTOR_LABEL: SELECTED }})
}

/// The source Secret's data value.
pub fn pull_secret_value() -> &'static str {
    "bench-pull-secret-value"
}

/// The label of the workload namespaces the Secret set copies into.
pub const NAMESPACE_LABEL: &str = "omni-bench.texashpc.com/pull-secret";
/// How many workload namespaces of each cluster carry it.
pub const SELECTED_NAMESPACES: usize = 5;
/// A workload namespace of each cluster without the label: the copy must never land there.
pub const UNSELECTED_NAMESPACE: &str = "bench-ns-other";

/// Name of selected workload namespace `n`.
pub fn selected_namespace(n: usize) -> String {
    format!("bench-ns-{n}")
}

/// Where the Secret set's template puts the copy in each workload cluster: every namespace
/// labelled [`NAMESPACE_LABEL`].
fn copy_target() -> Value {
    json!({"name": PULL_SECRET, "namespaceSelector": {"matchLabels": { NAMESPACE_LABEL: "yes" }}})
}

/// Starts every cluster's workload kube-sim and creates its namespaces: the
/// [`SELECTED_NAMESPACES`] the Secret set selects and [`UNSELECTED_NAMESPACE`]. They exist
/// before the operator starts, as a platform's namespaces would (the sync finds namespaces
/// created later only at its periodic re-check).
pub fn prepare_workloads(emu: &Emulators, spec: &FleetSpec) -> anyhow::Result<()> {
    use omni_sim::WorkloadProvider as _;
    for i in 0..spec.clusters {
        emu.workloads.endpoint(&fleet::cluster_name(i));
        let sim = emulators::workload(emu, i).with_context(|| {
            format!(
                "the workload cluster of {} did not start",
                fleet::cluster_name(i)
            )
        })?;
        let namespaces = (0..SELECTED_NAMESPACES)
            .map(|n| {
                json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": selected_namespace(n), "labels": { NAMESPACE_LABEL: "yes" }}})
            })
            .chain([json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": UNSELECTED_NAMESPACE}})]);
        for namespace in namespaces {
            sim.store()
                .create("", "namespaces", None, namespace)
                .map_err(|e| anyhow::anyhow!("creating a workload namespace: {e}"))?;
        }
    }
    Ok(())
}

/// The source Secret and the two sets, in creation order; `chart_repo` serves the bench chart.
pub fn objects(chart_repo: &str) -> Vec<Object> {
    let source = Object {
        kind: "Secret",
        manifest: json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": PULL_SECRET, "namespace": NAMESPACE},
            "type": "Opaque",
            "stringData": {"value": pull_secret_value()},
        }),
    };
    let helm_set = custom(
        "OmniHelmReleaseSet",
        HELM_SET,
        json!({
            "clusterSelector": selector(),
            "template": {
                "namespace": ADDON_NAMESPACE,
                "createNamespace": true,
                "chart": {
                    "repository": chart_repo,
                    "chart": CHART,
                    "version": CHART_VERSION,
                    "values": {"replicas": VALUES_BEFORE},
                },
                "deletionPolicy": "Uninstall",
            },
            "credentials": mint(),
            "rollout": {"maxUnavailable": MAX_UNAVAILABLE},
        }),
    );
    let secret_set = custom(
        "OmniSecretSyncSet",
        SECRET_SET,
        json!({
            "clusterSelector": selector(),
            "template": {
                "sourceSecretRef": {"name": PULL_SECRET},
                "targetSecretRef": copy_target(),
                "deletionPolicy": "Delete",
            },
            "credentials": mint(),
            "rollout": {"maxUnavailable": MAX_UNAVAILABLE},
        }),
    );
    vec![source, helm_set, secret_set]
}

/// What the fleet should look like: which clusters are out of the selector and which chart
/// value the releases carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// Clusters relabelled out of the selector.
    pub out: BTreeSet<usize>,
    /// The `replicas` value every selected cluster's release renders.
    pub replicas: u32,
}

impl Expect {
    /// Every cluster selected, the values as applied.
    pub fn all() -> Self {
        Self {
            out: BTreeSet::new(),
            replicas: VALUES_BEFORE,
        }
    }

    /// Clusters the selector matches.
    pub fn matched(&self, spec: &FleetSpec) -> usize {
        spec.clusters - self.out.len()
    }

    /// Custom resources of the whole fleet.
    pub fn objects(&self, spec: &FleetSpec) -> usize {
        spec.objects() - GENERATED_PER_CLUSTER * self.out.len()
    }
}

/// What the workload clusters hold of the sets, read from their stores.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reach {
    /// Clusters the selector should match.
    pub matched: usize,
    /// Of them, those whose release renders the expected chart value.
    pub releases: usize,
    /// Of them, those holding the copy with the source's current data in every selected
    /// namespace.
    pub copies: usize,
    /// Clusters out of the selector that still hold a release or a copy, and clusters holding a
    /// copy in a namespace the Secret set does not select.
    pub leftovers: usize,
}

impl Reach {
    /// Whether every matched cluster holds both and no other cluster either.
    pub fn done(&self) -> bool {
        self.releases == self.matched && self.copies == self.matched && self.leftovers == 0
    }
}

/// Reads what the workload clusters hold of the sets (no API requests).
pub fn reach(emu: &Emulators, spec: &FleetSpec, expect: &Expect) -> Reach {
    let source = emu
        .management
        .store()
        .get_object("", "secrets", Some(NAMESPACE), PULL_SECRET)
        .map(|s| s["data"].clone());
    let replicas = json!(expect.replicas.to_string());
    let settings = format!("{HELM_SET}-settings");
    let mut r = Reach {
        matched: expect.matched(spec),
        ..Reach::default()
    };
    for i in 0..spec.clusters {
        let Some(sim) = emulators::workload(emu, i) else {
            continue;
        };
        let store = sim.store();
        let release = store.get_object("", "configmaps", Some(ADDON_NAMESPACE), &settings);
        let copies: Vec<Option<Value>> = (0..SELECTED_NAMESPACES)
            .map(|n| store.get_object("", "secrets", Some(&selected_namespace(n)), PULL_SECRET))
            .collect();
        let stray = store
            .get_object("", "secrets", Some(UNSELECTED_NAMESPACE), PULL_SECRET)
            .is_some();
        if expect.out.contains(&i) {
            r.leftovers +=
                usize::from(release.is_some() || stray || copies.iter().any(Option::is_some));
            continue;
        }
        r.leftovers += usize::from(stray);
        r.releases += usize::from(release.is_some_and(|c| c["data"]["replicas"] == replicas));
        r.copies += usize::from(copies.iter().all(|c| {
            c.as_ref()
                .is_some_and(|c| Some(&c["data"]) == source.as_ref())
        }));
    }
    r
}

/// One timed set phase.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    /// What the bench changed.
    pub name: String,
    /// Seconds from the bench's first edit until the fleet showed it and every object was Ready.
    pub secs: f64,
    /// Whether that happened within the time limit.
    pub converged: bool,
    /// Clusters whose objects the change touched.
    pub clusters: usize,
    /// The operator's writes meanwhile.
    pub writes: Writes,
    /// Its management writes by verb and resource.
    pub management_writes: BTreeMap<String, u64>,
    /// The state when the phase ended.
    pub reach: Reach,
    /// Objects still not Ready when the phase ended (a sample).
    pub waiting: Vec<String>,
}

/// The three set phases.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetPhases {
    /// Objects the sets generated for the whole fleet.
    pub generated: usize,
    /// The template change, the relabel out and back in (a phase after one that did not
    /// converge is not run).
    pub steps: Vec<Step>,
}

impl SetPhases {
    /// The step named `name`.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }
}

/// Name of the template-change step.
pub const TEMPLATE_CHANGE: &str = "template change";
/// Name of the relabel-out step.
pub const RELABEL_OUT: &str = "relabel 10 % out";
/// Name of the relabel-in step.
pub const RELABEL_IN: &str = "relabel 10 % back in";

/// Runs the set phases on the converged fleet; each may take up to `limit`.
pub async fn run(
    emu: &Emulators,
    spec: &FleetSpec,
    operator: &mut OperatorProcess,
    limit: Duration,
) -> anyhow::Result<SetPhases> {
    let mut expect = Expect::all();
    let mut steps = Vec::new();
    let moved = moved(spec);

    expect.replicas = VALUES_AFTER;
    let started = Instant::now();
    let before = phases::writes(emu);
    emulators::api(&emu.client, "OmniHelmReleaseSet")?
        .patch(
            HELM_SET,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"chart": {"values": {"replicas": VALUES_AFTER}}}}}),
            ),
        )
        .await?;
    let step = wait(emu, spec, operator, &expect, (started, before), limit).await?;
    steps.push(step.named(TEMPLATE_CHANGE, spec.clusters));

    for (name, value) in [(RELABEL_OUT, NOT_SELECTED), (RELABEL_IN, SELECTED)] {
        if !steps.last().is_some_and(|s| s.converged) {
            break;
        }
        expect.out = if value == SELECTED {
            BTreeSet::new()
        } else {
            moved.iter().copied().collect()
        };
        let started = Instant::now();
        let before = phases::writes(emu);
        relabel(emu, &moved, value).await?;
        let step = wait(emu, spec, operator, &expect, (started, before), limit).await?;
        steps.push(step.named(name, moved.len()));
    }
    Ok(SetPhases {
        generated: GENERATED_PER_CLUSTER * spec.clusters,
        steps,
    })
}

impl Step {
    fn named(mut self, name: &str, clusters: usize) -> Self {
        self.name = name.to_owned();
        self.clusters = clusters;
        self
    }
}

/// Sets the selector label of `clusters` to `value`, as the bench's user.
async fn relabel(emu: &Emulators, clusters: &[usize], value: &str) -> anyhow::Result<()> {
    let api = emulators::api(&emu.client, "OmniCluster")?;
    let patch = Patch::Merge(json!({"metadata": {"labels": { SELECTOR_LABEL: value }}}));
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(clusters)
        .map(|i| {
            let (api, patch) = (&api, &patch);
            async move {
                api.patch(&fleet::cluster_name(*i), &PatchParams::default(), patch)
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Waits until the fleet matches `expect` with every object Ready (or `limit` passes); the
/// writes are counted from `before`, the time from `started`.
async fn wait(
    emu: &Emulators,
    spec: &FleetSpec,
    operator: &mut OperatorProcess,
    expect: &Expect,
    (started, before): (Instant, (Writes, BTreeMap<String, u64>)),
    limit: Duration,
) -> anyhow::Result<Step> {
    let (progress, reach, converged) = loop {
        operator.check_alive()?;
        let p = phases::custom_resources(emu)?;
        let r = reach(emu, spec, expect);
        let done = p.ready == p.objects && p.objects == expect.objects(spec) && r.done();
        if done || started.elapsed() > limit {
            break (p, r, done);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let secs = started.elapsed().as_secs_f64();
    let (after, after_by) = phases::writes(emu);
    Ok(Step {
        name: String::new(),
        secs,
        converged,
        clusters: 0,
        writes: after.since(&before.0),
        management_writes: delta(&before.1, after_by),
        reach,
        waiting: progress.waiting,
    })
}

/// The counts of `after` that grew since `before`, by how much.
pub fn delta(
    before: &BTreeMap<String, u64>,
    after: BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .into_iter()
        .filter_map(|(k, n)| {
            let d = n - before.get(&k).copied().unwrap_or(0);
            (d > 0).then_some((k, d))
        })
        .collect()
}

/// Fails the run when the operator wrote anything during the idle window of the set scenario.
pub fn ensure_quiet(idle: &phases::Idle) -> anyhow::Result<()> {
    anyhow::ensure!(
        idle.writes_per_minute.total() == 0.0,
        "the operator wrote while the fleet and its sets were idle: {:?} per minute; management writes {:?}",
        idle.writes_per_minute,
        idle.management_writes
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(clusters: usize) -> FleetSpec {
        FleetSpec {
            clusters,
            syncs: 0,
            workload_clusters: 0,
            helm_releases: 0,
            sets: true,
        }
    }

    #[test]
    fn every_tenth_cluster_moves_and_at_least_one() {
        assert_eq!(moved(&spec(4)), vec![0]);
        assert_eq!(moved(&spec(100)).len(), 10);
        assert_eq!(moved(&spec(1000)).len(), 100);
    }

    #[test]
    fn the_fleet_counts_both_sets_and_four_objects_per_matched_cluster() {
        let s = spec(10);
        assert_eq!(s.objects(), 1 + 10 * 4 + 2 + 10 * 4);
        let out = Expect {
            out: [0].into(),
            replicas: VALUES_AFTER,
        };
        assert_eq!(out.objects(&s), s.objects() - 4);
        assert_eq!(objects_with(&FleetSpec { sets: false, ..s }, 10), 0);
    }

    #[test]
    fn clusters_are_labelled_into_both_selectors() {
        let s = spec(2);
        let objects = fleet::objects(&s, "http://omni", Some("http://charts/"));
        let cluster = objects.iter().find(|o| o.kind == "OmniCluster").unwrap();
        assert_eq!(
            cluster.manifest["metadata"]["labels"][SELECTOR_LABEL],
            SELECTED
        );
        for kind in ["OmniHelmReleaseSet", "OmniSecretSyncSet"] {
            let set = objects.iter().find(|o| o.kind == kind).unwrap();
            assert_eq!(
                set.manifest["spec"]["clusterSelector"]["matchLabels"][SELECTOR_LABEL],
                SELECTED
            );
            assert!(set.manifest["spec"]["credentials"]["mint"].is_object());
            assert_eq!(
                set.manifest["spec"]["rollout"]["maxUnavailable"],
                MAX_UNAVAILABLE
            );
        }
        let without = FleetSpec {
            sets: false,
            ..spec(2)
        };
        let without = fleet::objects(&without, "http://omni", None);
        assert!(without.iter().all(|o| !o.kind.ends_with("Set")));
    }

    #[test]
    fn the_sets_pass_admission() {
        // What the bench applies must be what a user could apply.
        let sets: Vec<Object> = objects("http://127.0.0.1:1/")
            .into_iter()
            .filter(|o| o.kind != "Secret")
            .collect();
        assert_eq!(sets.len(), 2);
        for o in sets {
            let v = omni_operator::api::validate_dynamic(o.kind, &o.manifest, None).unwrap();
            assert!(v.is_valid(), "{}: {v:?}", o.kind);
        }
    }

    #[test]
    fn idle_writes_fail_the_set_run() {
        let mut idle = phases::Idle {
            secs: 60.0,
            writes_per_minute: Default::default(),
            management_writes: BTreeMap::new(),
            operator_cpu_secs_per_minute: 0.0,
            operator_rss_mib: 0.0,
            emulator_cpu_secs_per_minute: 0.0,
            omni_connections: 0,
            omni_calls_per_minute: 0.0,
        };
        assert!(ensure_quiet(&idle).is_ok());
        idle.writes_per_minute.workload = 1.0;
        let err = ensure_quiet(&idle).unwrap_err().to_string();
        assert!(err.contains("wrote while"), "{err}");
    }

    #[test]
    fn deltas_keep_only_what_grew() {
        let before: BTreeMap<String, u64> = [("a".to_owned(), 2), ("b".to_owned(), 1)].into();
        let after: BTreeMap<String, u64> = [
            ("a".to_owned(), 2),
            ("b".to_owned(), 4),
            ("c".to_owned(), 1),
        ]
        .into();
        let d = delta(&before, after);
        assert_eq!(
            d,
            BTreeMap::from([("b".to_owned(), 3), ("c".to_owned(), 1)])
        );
    }
}
