//! Sync planning, apply, delete and status against an in-memory COSI store with Omni's
//! write semantics (versions, owners, phases, finalizers, kind watches). The same behaviours
//! are exercised over real gRPC against omni-sim in `template_sync.rs`; this fake lets the
//! ownership and ordering rules be tested exhaustively and deterministically.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use omni_client::proto::cosi::resource::{Event, EventType, Metadata, Resource, Spec};
use omni_client::proto::specs;
use omni_client::template::{
    DeleteProgress, EventStream, FileResolver, LabelCondition, ResourceRef, StateError,
    StatusError, SyncError, Template, TemplateState, apply, delete_cluster, keys, plan_sync,
    status_cluster, types,
};
use prost::Message as _;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

type Key = (String, String);

#[derive(Default)]
struct Inner {
    store: BTreeMap<Key, Resource>,
    writes: usize,
}

#[derive(Clone)]
struct Fake {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<Event>,
}

fn md(r: &Resource) -> &Metadata {
    r.metadata.as_ref().expect("metadata")
}

fn key(t: &str, id: &str) -> Key {
    (t.to_string(), id.to_string())
}

impl Fake {
    fn new() -> Self {
        Fake {
            inner: Arc::default(),
            events: broadcast::channel(1024).0,
        }
    }

    fn writes(&self) -> usize {
        self.inner.lock().expect("lock").writes
    }

    fn get_now(&self, t: &str, id: &str) -> Option<Resource> {
        self.inner
            .lock()
            .expect("lock")
            .store
            .get(&key(t, id))
            .cloned()
    }

    /// Stores a resource as a controller or the UI would (no write counted).
    fn put(&self, t: &str, id: &str, owner: &str, labels: &[(&str, &str)], spec: Vec<u8>) {
        let r = Resource {
            metadata: Some(Metadata {
                namespace: "default".into(),
                r#type: t.into(),
                id: id.into(),
                version: "1".into(),
                owner: owner.into(),
                phase: "running".into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            spec: Some(Spec {
                proto_spec: spec,
                yaml_spec: String::new(),
            }),
        };
        self.inner.lock().expect("lock").store.insert(key(t, id), r);
    }

    fn modify(&self, t: &str, id: &str, f: impl FnOnce(&mut Resource)) {
        let event = {
            let mut inner = self.inner.lock().expect("lock");
            let r = inner.store.get_mut(&key(t, id)).expect("exists");
            f(r);
            Event {
                resource: Some(r.clone()),
                event_type: EventType::Updated as i32,
                ..Default::default()
            }
        };
        let _ = self.events.send(event);
    }

    fn emit(&self, r: &Resource, kind: EventType) {
        let _ = self.events.send(Event {
            resource: Some(r.clone()),
            event_type: kind as i32,
            ..Default::default()
        });
    }
}

impl TemplateState for Fake {
    async fn get(&self, t: &str, id: &str) -> Result<Option<Resource>, StateError> {
        Ok(self.get_now(t, id))
    }

    async fn list(&self, t: &str, labels: &[LabelCondition]) -> Result<Vec<Resource>, StateError> {
        let inner = self.inner.lock().expect("lock");
        Ok(inner
            .store
            .values()
            .filter(|r| md(r).r#type == t)
            .filter(|r| {
                labels
                    .iter()
                    .all(|c| match (&c.value, md(r).labels.get(&c.key)) {
                        (None, Some(_)) => true,
                        (Some(v), Some(actual)) => v == actual,
                        _ => false,
                    })
            })
            .cloned()
            .collect())
    }

    /// The fake holds only template resources (namespace `default`): no runtime status.
    async fn list_ephemeral(
        &self,
        _: &str,
        _: &[LabelCondition],
    ) -> Result<Vec<Resource>, StateError> {
        Ok(Vec::new())
    }

    async fn create(&self, mut r: Resource) -> Result<(), StateError> {
        let mut inner = self.inner.lock().expect("lock");
        let m = r.metadata.as_mut().expect("metadata");
        let k = key(&m.r#type, &m.id);
        if inner.store.contains_key(&k) {
            return Err(StateError::Conflict("already exists".into()));
        }
        assert_eq!(m.version, "undefined");
        assert_eq!(m.phase, "running");
        m.version = "1".into();
        inner.writes += 1;
        inner.store.insert(k, r.clone());
        drop(inner);
        self.emit(&r, EventType::Created);
        Ok(())
    }

    async fn update(&self, mut r: Resource) -> Result<(), StateError> {
        let mut inner = self.inner.lock().expect("lock");
        let m = r.metadata.as_mut().expect("metadata");
        let current = inner
            .store
            .get(&key(&m.r#type, &m.id))
            .cloned()
            .ok_or_else(|| StateError::NotFound(m.id.clone()))?;
        let cur = md(&current);
        if !cur.owner.is_empty() {
            return Err(StateError::PermissionDenied(format!(
                "owned by {:?}",
                cur.owner
            )));
        }
        if cur.phase != "running" {
            return Err(StateError::Invalid("not in phase running".into()));
        }
        if cur.version != m.version {
            return Err(StateError::Conflict("version".into()));
        }
        let next: u64 = cur.version.parse().expect("numeric version");
        m.version = (next + 1).to_string();
        inner.writes += 1;
        inner.store.insert(key(&m.r#type, &m.id), r.clone());
        drop(inner);
        self.emit(&r, EventType::Updated);
        Ok(())
    }

    async fn teardown(&self, t: &str, id: &str) -> Result<bool, StateError> {
        let mut inner = self.inner.lock().expect("lock");
        let r = inner
            .store
            .get_mut(&key(t, id))
            .ok_or_else(|| StateError::NotFound(id.into()))?;
        let ready = md(r).finalizers.is_empty();
        let changed = md(r).phase != "tearingDown";
        if changed {
            let m = r.metadata.as_mut().expect("metadata");
            m.phase = "tearingDown".into();
            let snapshot = r.clone();
            inner.writes += 1;
            drop(inner);
            self.emit(&snapshot, EventType::Updated);
        }
        Ok(ready)
    }

    async fn destroy(&self, t: &str, id: &str) -> Result<(), StateError> {
        let mut inner = self.inner.lock().expect("lock");
        let r = inner
            .store
            .get(&key(t, id))
            .cloned()
            .ok_or_else(|| StateError::NotFound(id.into()))?;
        if !md(&r).finalizers.is_empty() {
            return Err(StateError::Conflict("pending finalizers".into()));
        }
        inner.store.remove(&key(t, id));
        inner.writes += 1;
        drop(inner);
        self.emit(&r, EventType::Destroyed);
        Ok(())
    }

    async fn watch_kind(&self, t: &str) -> Result<EventStream, StateError> {
        let inner = self.inner.lock().expect("lock");
        let live = BroadcastStream::new(self.events.subscribe());
        let mut initial: Vec<Result<Event, StateError>> = inner
            .store
            .values()
            .filter(|r| md(r).r#type == t)
            .map(|r| {
                Ok(Event {
                    resource: Some(r.clone()),
                    event_type: EventType::Created as i32,
                    ..Default::default()
                })
            })
            .collect();
        initial.push(Ok(Event {
            event_type: EventType::Bootstrapped as i32,
            ..Default::default()
        }));
        drop(inner);
        let t = t.to_string();
        let live = live.filter_map(move |e| {
            let t = t.clone();
            async move {
                match e {
                    Ok(ev) if ev.resource.as_ref().is_some_and(|r| md(r).r#type == t) => {
                        Some(Ok(ev))
                    }
                    Ok(_) => None,
                    Err(_) => Some(Err(StateError::Watch("lagged".into()))),
                }
            }
        });
        Ok(Box::pin(futures::stream::iter(initial).chain(live)))
    }
}

const A: &str = "11111111-1111-1111-1111-111111111111";
const B: &str = "22222222-2222-2222-2222-222222222222";

fn template(extra_workers: bool, disk: &str) -> Template {
    let mut text = format!(
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\npatches:\n  - name: cni\n    inline:\n      cluster:\n        network:\n          cni:\n            name: none\n---\nkind: ControlPlane\nmachines: [{A}]\n---\nkind: Machine\nname: {B}\ninstall:\n  disk: {disk}\nkernelArgs: [console=ttyS0]\n"
    );
    if extra_workers {
        text.push_str(&format!("---\nkind: Workers\nmachines: [{B}]\n"));
    } else {
        text = text.replace(&format!("---\nkind: Machine\nname: {B}\ninstall:\n  disk: {disk}\nkernelArgs: [console=ttyS0]\n"), "");
    }
    Template::parse(&text).expect("parse")
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

async fn sync(state: &Fake, t: &Template) -> Result<Vec<String>, SyncError> {
    let plan = plan_sync(state, t, &FileResolver::default()).await?;
    let mut out = Vec::new();
    apply(state, &plan, far(), &mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn first_sync_creates_in_order_and_second_sync_writes_nothing() {
    let state = Fake::new();
    let out = sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    assert_eq!(
        out,
        [
            "* creating Clusters.omni.sidero.dev(demo)".to_string(),
            format!("* creating ConfigPatches.omni.sidero.dev(000-cm-{B}-install-disk)"),
            "* creating ConfigPatches.omni.sidero.dev(200-cluster-demo-cni)".to_string(),
            "* creating MachineSets.omni.sidero.dev(demo-control-planes)".to_string(),
            "* creating MachineSets.omni.sidero.dev(demo-workers)".to_string(),
            format!("* creating MachineSetNodes.omni.sidero.dev({A})"),
            format!("* creating MachineSetNodes.omni.sidero.dev({B})"),
            format!("* creating KernelArgs.omni.sidero.dev({B})"),
        ]
    );
    let writes = state.writes();
    let plan = plan_sync(
        &state,
        &template(true, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    assert!(plan.is_empty(), "{:?}", plan.lines(true));
    let mut out = Vec::new();
    apply(&state, &plan, far(), &mut out).await.expect("apply");
    assert_eq!(state.writes(), writes);
    assert!(out.is_empty());
}

#[tokio::test]
async fn a_changed_field_updates_only_its_resource() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    let before = state.writes();
    let plan = plan_sync(
        &state,
        &template(true, "/dev/nvme0n1"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    assert!(plan.creates.is_empty() && plan.deletes.is_empty());
    assert_eq!(
        plan.updates,
        [ResourceRef::new(
            types::CONFIG_PATCH,
            format!("000-cm-{B}-install-disk")
        )]
    );
    assert_eq!(
        plan.lines(true),
        [format!(
            "* updating (dry run) ConfigPatches.omni.sidero.dev(000-cm-{B}-install-disk)"
        )]
    );
    let mut out = Vec::new();
    apply(&state, &plan, far(), &mut out).await.expect("apply");
    assert_eq!(state.writes(), before + 1);
    let stored = state
        .get_now(types::CONFIG_PATCH, &format!("000-cm-{B}-install-disk"))
        .expect("patch");
    assert_eq!(md(&stored).version, "2");
    let spec = specs::ConfigPatchSpec::decode(stored.spec.expect("spec").proto_spec.as_slice())
        .expect("decode");
    assert_eq!(
        spec.data,
        "machine:\n    install:\n        disk: /dev/nvme0n1\n"
    );
}

#[tokio::test]
async fn compressed_stored_data_is_rewritten_uncompressed() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    state.modify(types::CONFIG_PATCH, "200-cluster-demo-cni", |r| {
        let spec = r.spec.as_mut().expect("spec");
        spec.proto_spec = specs::ConfigPatchSpec {
            data: String::new(),
            compressed_data: vec![1, 2, 3],
        }
        .encode_to_vec();
    });
    let plan = plan_sync(
        &state,
        &template(true, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    assert_eq!(
        plan.updates,
        [ResourceRef::new(
            types::CONFIG_PATCH,
            "200-cluster-demo-cni"
        )]
    );
}

#[tokio::test]
async fn removed_worker_set_is_torn_down_and_kernel_args_released() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    let plan = plan_sync(
        &state,
        &template(false, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    // The node goes with its set; the machine's patch is deleted; its KernelArgs are released.
    assert_eq!(
        plan.delete_phases,
        vec![
            vec![ResourceRef::new(types::MACHINE_SET, "demo-workers")],
            vec![ResourceRef::new(
                types::CONFIG_PATCH,
                format!("000-cm-{B}-install-disk")
            )],
        ]
    );
    assert_eq!(plan.updates, [ResourceRef::new(types::KERNEL_ARGS, B)]);
    let mut out = Vec::new();
    apply(&state, &plan, far(), &mut out).await.expect("apply");
    assert!(state.get_now(types::MACHINE_SET, "demo-workers").is_none());
    assert!(
        out.contains(&"* destroyed MachineSets.omni.sidero.dev(demo-workers)".to_string()),
        "{out:?}"
    );
    let released = state
        .get_now(types::KERNEL_ARGS, B)
        .expect("kernel args stay");
    assert!(
        !md(&released)
            .annotations
            .contains_key(keys::MANAGED_BY_TEMPLATES)
    );
}

#[tokio::test]
async fn teardown_waits_for_finalizers_then_destroys() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    state.modify(types::MACHINE_SET, "demo-workers", |r| {
        r.metadata.as_mut().expect("md").finalizers = vec!["MachineSetController".into()];
    });
    let plan = plan_sync(
        &state,
        &template(false, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    let releaser = state.clone();
    let task = tokio::spawn(async move {
        let mut out = Vec::new();
        apply(&releaser, &plan, far(), &mut out).await.map(|()| out)
    });
    // Wait until the set is being torn down, then let the "controller" drop its finalizer.
    loop {
        let r = state
            .get_now(types::MACHINE_SET, "demo-workers")
            .expect("set exists");
        if md(&r).phase == "tearingDown" {
            break;
        }
        tokio::task::yield_now().await;
    }
    state.modify(types::MACHINE_SET, "demo-workers", |r| {
        r.metadata.as_mut().expect("md").finalizers.clear();
    });
    let out = task.await.expect("join").expect("apply");
    assert!(state.get_now(types::MACHINE_SET, "demo-workers").is_none());
    assert!(out.contains(&"* destroyed MachineSets.omni.sidero.dev(demo-workers)".to_string()));
}

#[tokio::test]
async fn deadline_bounds_the_wait_for_finalizers() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    state.modify(types::MACHINE_SET, "demo-workers", |r| {
        r.metadata.as_mut().expect("md").finalizers = vec!["stuck".into()];
    });
    let plan = plan_sync(
        &state,
        &template(false, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    let mut out = Vec::new();
    let err = apply(
        &state,
        &plan,
        Instant::now() + Duration::from_millis(50),
        &mut out,
    )
    .await
    .expect_err("deadline");
    assert!(
        matches!(err, SyncError::Deadline { ref waiting_for } if waiting_for.contains("demo-workers")),
        "{err}"
    );
    assert!(out.contains(&"* tearing down MachineSets.omni.sidero.dev(demo-workers)".to_string()));
}

#[tokio::test]
async fn ownership_decides_what_is_deleted() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    let cluster = [(keys::CLUSTER, "demo")];
    let patch = specs::ConfigPatchSpec {
        data: "machine: {}\n".into(),
        ..Default::default()
    }
    .encode_to_vec();
    state.put(
        types::CONFIG_PATCH,
        "500-from-ui",
        "",
        &cluster,
        patch.clone(),
    );
    state.put(
        types::CONFIG_PATCH,
        "600-controller",
        "SomeController",
        &cluster,
        patch.clone(),
    );
    state.put(
        types::MACHINE_SET_NODE,
        "99999999-9999-9999-9999-999999999999",
        "",
        &[
            (keys::CLUSTER, "demo"),
            (keys::MANAGED_BY_MACHINE_SET_NODE_CONTROLLER, ""),
        ],
        Vec::new(),
    );
    state.put(
        types::CONFIG_PATCH,
        "700-other-cluster",
        "",
        &[(keys::CLUSTER, "other")],
        patch,
    );
    let plan = plan_sync(
        &state,
        &template(true, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    assert_eq!(
        plan.deletes,
        [ResourceRef::new(types::CONFIG_PATCH, "500-from-ui")]
    );
    assert!(plan.creates.is_empty() && plan.updates.is_empty());
}

#[tokio::test]
async fn a_controller_owned_resource_with_an_expected_id_is_a_conflict() {
    let state = Fake::new();
    state.put(
        types::CONFIG_PATCH,
        "200-cluster-demo-cni",
        "Other",
        &[(keys::CLUSTER, "elsewhere")],
        Vec::new(),
    );
    let err = plan_sync(
        &state,
        &template(true, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "resource ConfigPatches.omni.sidero.dev(default/200-cluster-demo-cni) already exists for cluster \"elsewhere\", cannot create a conflicting resource for a different cluster"
    );
}

#[tokio::test]
async fn delete_advances_step_by_step() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    state.modify(types::CLUSTER, "demo", |r| {
        r.metadata.as_mut().expect("md").finalizers = vec!["ClusterController".into()];
    });
    let mut out = Vec::new();
    let progress = delete_cluster(&state, "demo", false, &mut out)
        .await
        .expect("step");
    // Everything labelled with the cluster is the server's to cascade: only the Cluster is
    // torn down; the template's KernelArgs are released.
    assert_eq!(
        progress,
        DeleteProgress::InProgress {
            waiting_for: vec![ResourceRef::new(types::CLUSTER, "demo")]
        }
    );
    assert!(out.contains(&format!("* updating KernelArgs.omni.sidero.dev({B})")));
    assert_eq!(
        md(&state.get_now(types::CLUSTER, "demo").expect("c")).phase,
        "tearingDown"
    );
    // Still waiting on the next call.
    let mut out = Vec::new();
    assert!(matches!(
        delete_cluster(&state, "demo", false, &mut out)
            .await
            .expect("step"),
        DeleteProgress::InProgress { .. }
    ));
    // Omni's cluster controller removes the cluster's resources, then its finalizer.
    state
        .inner
        .lock()
        .expect("lock")
        .store
        .retain(|_, r| md(r).labels.get(keys::CLUSTER).map(String::as_str) != Some("demo"));
    state.modify(types::CLUSTER, "demo", |r| {
        r.metadata.as_mut().expect("md").finalizers.clear();
    });
    let mut out = Vec::new();
    assert_eq!(
        delete_cluster(&state, "demo", false, &mut out)
            .await
            .expect("step"),
        DeleteProgress::Done
    );
    assert!(state.get_now(types::CLUSTER, "demo").is_none());
    assert!(out.contains(&"* destroyed Clusters.omni.sidero.dev(demo)".to_string()));
    // Idempotent once gone.
    let before = state.writes();
    let mut out = Vec::new();
    assert_eq!(
        delete_cluster(&state, "demo", false, &mut out)
            .await
            .expect("step"),
        DeleteProgress::Done
    );
    assert_eq!(state.writes(), before);
    assert!(out.is_empty());
}

#[tokio::test]
async fn destroy_machines_removes_disconnected_machines_first() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    state.put(
        types::MACHINE_STATUS,
        B,
        "MachineStatusController",
        &[(keys::CLUSTER, "demo"), (keys::DISCONNECTED, "")],
        Vec::new(),
    );
    state.put(
        types::MACHINE_STATUS,
        A,
        "MachineStatusController",
        &[(keys::CLUSTER, "demo")],
        Vec::new(),
    );
    state.put(types::LINK, A, "", &[], Vec::new());
    state.put(types::LINK, B, "", &[], Vec::new());
    state.put(
        types::CONFIG_PATCH,
        "machine-b",
        "",
        &[(keys::MACHINE, B)],
        Vec::new(),
    );

    let mut out = Vec::new();
    let progress = delete_cluster(&state, "demo", false, &mut out)
        .await
        .expect("step");
    assert_eq!(progress, DeleteProgress::Done);
    assert!(
        state.get_now(types::LINK, B).is_some(),
        "links survive without destroyMachines"
    );

    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("re-sync");
    let mut out = Vec::new();
    let progress = delete_cluster(&state, "demo", true, &mut out)
        .await
        .expect("step");
    assert_eq!(progress, DeleteProgress::Done);
    assert!(
        state.get_now(types::LINK, B).is_none(),
        "disconnected machine's link removed"
    );
    assert!(
        state.get_now(types::LINK, A).is_some(),
        "connected machine kept"
    );
    assert!(state.get_now(types::CONFIG_PATCH, "machine-b").is_none());
    let link_line = out
        .iter()
        .position(|l| l == &format!("* destroyed Links.omni.sidero.dev({B})"))
        .expect("link destroyed");
    let cluster_line = out
        .iter()
        .position(|l| l == "* destroyed Clusters.omni.sidero.dev(demo)")
        .expect("cluster destroyed");
    assert!(link_line < cluster_line, "{out:?}");
}

fn status_spec(phase: i32, ready: bool) -> Vec<u8> {
    specs::ClusterStatusSpec {
        phase,
        ready,
        kubernetes_api_ready: ready,
        machines: Some(specs::Machines {
            total: 2,
            healthy: 2,
            connected: 2,
            requested: 2,
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[tokio::test]
async fn status_reports_health_not_found_and_timeout() {
    let state = Fake::new();
    let err = status_cluster(&state, "demo", far())
        .await
        .expect_err("missing");
    assert!(matches!(err, StatusError::NotFound(ref c) if c == "demo"));

    let running = specs::cluster_status_spec::Phase::Running as i32;
    state.put(
        types::CLUSTER_STATUS,
        "demo",
        "ClusterStatusController",
        &[],
        status_spec(running, true),
    );
    let set = |phase: specs::MachineSetPhase, ready: bool| {
        specs::MachineSetStatusSpec {
            phase: phase as i32,
            ready,
            ..Default::default()
        }
        .encode_to_vec()
    };
    let labels = [(keys::CLUSTER, "demo")];
    state.put(
        types::MACHINE_SET_STATUS,
        "demo-control-planes",
        "C",
        &labels,
        set(specs::MachineSetPhase::Running, true),
    );
    state.put(
        types::MACHINE_SET_STATUS,
        "demo-workers",
        "C",
        &labels,
        set(specs::MachineSetPhase::ScalingUp, false),
    );
    state.put(
        types::KUBERNETES_UPGRADE_STATUS,
        "demo",
        "C",
        &labels,
        specs::KubernetesUpgradeStatusSpec {
            phase: specs::kubernetes_upgrade_status_spec::Phase::Done as i32,
            ..Default::default()
        }
        .encode_to_vec(),
    );
    let health = status_cluster(&state, "demo", far()).await.expect("status");
    assert!(!health.healthy, "a scaling worker set is not healthy");
    assert!(health.ready && health.kubernetes_api_ready);
    assert_eq!(health.phase, "RUNNING");
    assert_eq!(health.machine_sets.len(), 2);
    assert_eq!(health.machine_sets[1].phase, "ScalingUp");
    assert_eq!(health.upgrades.kubernetes_phase.as_deref(), Some("Done"));
    assert!(!health.summary.contains('\n'));
    assert!(
        health
            .summary
            .starts_with("cluster demo is not healthy: phase RUNNING"),
        "{}",
        health.summary
    );

    state.put(
        types::MACHINE_SET_STATUS,
        "demo-workers",
        "C",
        &labels,
        set(specs::MachineSetPhase::Running, true),
    );
    let health = status_cluster(&state, "demo", far()).await.expect("status");
    assert!(health.healthy, "{}", health.summary);
}

struct Hanging;

impl TemplateState for Hanging {
    async fn get(&self, _: &str, _: &str) -> Result<Option<Resource>, StateError> {
        futures::future::pending().await
    }
    async fn list(&self, _: &str, _: &[LabelCondition]) -> Result<Vec<Resource>, StateError> {
        futures::future::pending().await
    }
    async fn list_ephemeral(
        &self,
        _: &str,
        _: &[LabelCondition],
    ) -> Result<Vec<Resource>, StateError> {
        futures::future::pending().await
    }
    async fn create(&self, _: Resource) -> Result<(), StateError> {
        futures::future::pending().await
    }
    async fn update(&self, _: Resource) -> Result<(), StateError> {
        futures::future::pending().await
    }
    async fn teardown(&self, _: &str, _: &str) -> Result<bool, StateError> {
        futures::future::pending().await
    }
    async fn destroy(&self, _: &str, _: &str) -> Result<(), StateError> {
        futures::future::pending().await
    }
    async fn watch_kind(&self, _: &str) -> Result<EventStream, StateError> {
        futures::future::pending().await
    }
}

#[tokio::test]
async fn status_gives_up_at_the_deadline() {
    let err = status_cluster(&Hanging, "demo", Instant::now() + Duration::from_millis(20))
        .await
        .expect_err("timeout");
    assert!(matches!(err, StatusError::Timeout(_)));
}

#[tokio::test]
async fn an_errored_watch_event_fails_the_delete_phase() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    state.modify(types::MACHINE_SET, "demo-workers", |r| {
        r.metadata.as_mut().expect("md").finalizers = vec!["stuck".into()];
    });
    let plan = plan_sync(
        &state,
        &template(false, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    let applier = state.clone();
    let task = tokio::spawn(async move {
        let mut out = Vec::new();
        apply(&applier, &plan, far(), &mut out).await
    });
    loop {
        let r = state
            .get_now(types::MACHINE_SET, "demo-workers")
            .expect("set exists");
        if md(&r).phase == "tearingDown" {
            break;
        }
        tokio::task::yield_now().await;
    }
    // Errored events carry no resource; the fake's per-kind filter needs one to route it.
    let mut carrier = state
        .get_now(types::MACHINE_SET, "demo-workers")
        .expect("set");
    carrier.spec = None;
    let _ = state.events.send(Event {
        resource: Some(carrier),
        event_type: EventType::Errored as i32,
        error: Some("buffer overrun".into()),
        ..Default::default()
    });
    let err = task.await.expect("join").expect_err("watch error");
    assert!(
        err.to_string().contains("watch failed: buffer overrun"),
        "{err}"
    );
}

/// A store that counts how many reads are in flight at once. Each read yields once before it
/// answers, so reads issued together overlap and reads issued one after another never do.
struct Overlap {
    inner: Fake,
    counts: Mutex<(usize, usize)>,
}

impl Overlap {
    fn new(inner: Fake) -> Self {
        Overlap {
            inner,
            counts: Mutex::new((0, 0)),
        }
    }

    /// The most reads that were in flight together since the last call.
    fn take_peak(&self) -> usize {
        std::mem::take(&mut self.counts.lock().expect("lock").1)
    }

    async fn read<T>(&self, read: impl Future<Output = T>) -> T {
        {
            let mut c = self.counts.lock().expect("lock");
            c.0 += 1;
            c.1 = c.1.max(c.0);
        }
        tokio::task::yield_now().await;
        let out = read.await;
        self.counts.lock().expect("lock").0 -= 1;
        out
    }
}

impl TemplateState for Overlap {
    async fn get(&self, t: &str, id: &str) -> Result<Option<Resource>, StateError> {
        self.read(self.inner.get(t, id)).await
    }
    async fn list(&self, t: &str, l: &[LabelCondition]) -> Result<Vec<Resource>, StateError> {
        self.read(self.inner.list(t, l)).await
    }
    async fn list_ephemeral(
        &self,
        t: &str,
        l: &[LabelCondition],
    ) -> Result<Vec<Resource>, StateError> {
        self.read(self.inner.list_ephemeral(t, l)).await
    }
    async fn create(&self, r: Resource) -> Result<(), StateError> {
        self.inner.create(r).await
    }
    async fn update(&self, r: Resource) -> Result<(), StateError> {
        self.inner.update(r).await
    }
    async fn teardown(&self, t: &str, id: &str) -> Result<bool, StateError> {
        self.inner.teardown(t, id).await
    }
    async fn destroy(&self, t: &str, id: &str) -> Result<(), StateError> {
        self.inner.destroy(t, id).await
    }
    async fn watch_kind(&self, t: &str) -> Result<EventStream, StateError> {
        self.inner.watch_kind(t).await
    }
}

/// A plan reads the cluster and the six kinds a template owns together, and a status read its
/// six resources together: one round trip to Omni each, not one per read.
#[tokio::test]
async fn a_plan_and_a_status_read_issue_their_reads_together() {
    let state = Fake::new();
    sync(&state, &template(true, "/dev/sda"))
        .await
        .expect("sync");
    let overlap = Overlap::new(state);
    let plan = plan_sync(
        &overlap,
        &template(true, "/dev/sda"),
        &FileResolver::default(),
    )
    .await
    .expect("plan");
    assert!(plan.is_empty(), "{:?}", plan.lines(true));
    assert_eq!(overlap.take_peak(), 7, "the cluster and six owned kinds");
    // No ClusterStatus in the fake: the read fails, after all six reads were issued.
    let health = status_cluster(&overlap, "demo", far()).await;
    assert!(
        matches!(health, Err(StatusError::NotFound(_))),
        "{health:?}"
    );
    assert_eq!(overlap.take_peak(), 6);
}
