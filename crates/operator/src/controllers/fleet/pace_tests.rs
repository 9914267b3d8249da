//! A set's status that only moves its counts waits out the pace since the set's last status
//! write (`shared::pace`): the pass writes nothing and comes back when the pace ends, and the
//! pass then writes the counts of that moment. Conditions are written at once.

use std::sync::Arc;
use std::time::Duration;

use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube::{Api, Resource as _, ResourceExt as _};
use serde_json::{Value, json};

use super::SetState;
use crate::api::common::{Condition, ConditionStatus};
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::api::keys::SET_CLUSTER_LABEL;
use crate::api::{OmniCluster, OmniHelmRelease, OmniHelmReleaseSet, Reason};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::decoded::Cached;
use crate::controllers::shared::pace::StatusPacer;
use crate::controllers::shared::pipeline;
use crate::controllers::shared::test_env::{create_json, install_operator_api, kube_sim};

const NS: &str = "paced";
/// Long enough for the test's steps between two passes, even on a busy machine.
const PACE: Duration = Duration::from_secs(2);

fn doc(kind: &str, name: &str, labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1", "kind": kind,
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": spec,
    })
}

fn set_doc() -> Value {
    doc(
        "OmniHelmReleaseSet",
        "apps",
        json!({}),
        json!({
            "clusterSelector": {"matchLabels": {"fleet": "edge"}},
            "template": {"chart": {"repository": "https://charts.example.com", "chart": "demo",
                "version": "1.0.0"}},
            "credentials": {"kubeconfigSecretRef": {"name": "{{ cluster.name }}-kc"}},
        }),
    )
}

fn cluster(name: &str) -> Cached<OmniCluster> {
    let spec = json!({"connectionRef": {"name": "omni"}, "kubernetes": {"version": "v1.35.0"},
        "talos": {"version": "v1.13.2"}});
    let obj = doc("OmniCluster", name, json!({"fleet": "edge"}), spec);
    Cached::new(serde_json::from_value(obj).unwrap_or_else(|e| panic!("{e}")))
}

/// A store whose initial list held `objs`, and its writer for later events.
fn listed<K>(objs: Vec<Cached<K>>) -> (reflector::Store<Cached<K>>, Writer<Cached<K>>)
where
    Cached<K>: kube::Resource<DynamicType = ()> + Clone,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for obj in objs {
        writer.apply_watcher_event(&watcher::Event::InitApply(obj));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (store, writer)
}

/// `release` as its controller leaves it once installed: `Ready` at its generation.
fn installed(mut release: OmniHelmRelease) -> Cached<OmniHelmRelease> {
    let generation = release.meta().generation;
    release.status = Some(OmniHelmReleaseStatus {
        observed_generation: generation,
        conditions: vec![Condition::new(
            "Ready",
            ConditionStatus::True,
            Reason::HelmInstalled,
            "installed",
            generation,
            jiff::Timestamp::UNIX_EPOCH,
        )],
        ..OmniHelmReleaseStatus::default()
    });
    Cached::new(release)
}

fn ready_count(set: &OmniHelmReleaseSet) -> Option<i64> {
    serde_json::to_value(set).ok()?["status"]["ready"].as_i64()
}

#[tokio::test]
async fn a_count_only_status_waits_out_the_pace_and_is_written_after_it() {
    let (sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    create_json(&client, set_doc()).await;
    let sets: Api<OmniHelmReleaseSet> = Api::namespaced(client.clone(), NS);
    let releases: Api<OmniHelmRelease> = Api::namespaced(client.clone(), NS);
    let ctx = Arc::new(Context::for_tests(client.clone(), NS));
    let (clusters, _clusters_writer) = listed(vec![cluster("a"), cluster("b")]);
    let (members, mut members_writer) = listed(Vec::new());
    let (exports, _exports_writer) = listed(Vec::new());
    let state = Arc::new(SetState::<OmniHelmReleaseSet> {
        clusters,
        members,
        exports,
        pacer: StatusPacer::new(PACE),
    });
    let pass = async || {
        let set = sets
            .get("apps")
            .await
            .unwrap_or_else(|e| panic!("get: {e}"));
        pipeline::reconcile(Arc::new(set), ctx.clone(), state.clone())
            .await
            .unwrap_or_else(|e| panic!("pass: {e:?}"))
    };
    let stored_ready = async || {
        let set = sets
            .get("apps")
            .await
            .unwrap_or_else(|e| panic!("get: {e}"));
        ready_count(&set)
    };
    let status_writes = || {
        sim.hooks()
            .writes_to_object("omnihelmreleasesets", Some(NS), "apps")
    };

    // The first pass creates both releases; the next one finds them, none Ready yet, and
    // brings the set's status to that.
    pass().await;
    let created = releases
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list: {e}"))
        .items;
    assert_eq!(created.len(), 2, "one release per cluster");
    for release in &created {
        members_writer.apply_watcher_event(&watcher::Event::Apply(Cached::new(release.clone())));
    }
    pass().await;
    assert_eq!(stored_ready().await, Some(0));
    let writes = status_writes();

    // One of them turns Ready: only the count moves, within the pace of the last write.
    let of_a = created
        .into_iter()
        .find(|r| r.labels().get(SET_CLUSTER_LABEL).map(String::as_str) == Some("a"))
        .unwrap_or_else(|| panic!("no release for cluster a"));
    members_writer.apply_watcher_event(&watcher::Event::Apply(installed(of_a)));
    let held = pass().await;
    assert_ne!(
        held,
        Action::await_change(),
        "the held pass comes back by itself"
    );
    assert_eq!(
        status_writes(),
        writes,
        "a count-only status waits for the pace"
    );
    assert_eq!(stored_ready().await, Some(0));

    // Once the pace has passed, the pass writes the count of then.
    tokio::time::sleep(PACE).await;
    pass().await;
    assert_eq!(stored_ready().await, Some(1));
    assert!(status_writes() > writes);
}
