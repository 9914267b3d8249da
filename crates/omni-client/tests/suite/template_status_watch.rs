//! The status watch against omni-sim over real gRPC: what it reads matches a read from Omni,
//! and a change of a cluster that was read is announced, including a status that appears after
//! the read and a change made while the watches were down.

use crate::template_sim;

use std::time::Duration;

use futures::StreamExt as _;
use futures::channel::mpsc;
use omni_client::proto::specs;
use omni_client::template::{
    FileResolver, StatusError, StatusWatch, Template, apply, plan_sync, status_cluster,
};
use omni_client::transport::Client;
use omni_sim::{Outage, RunningOmniSim};
use tokio::time::Instant;

const A: &str = "11111111-1111-1111-1111-111111111111";
const B: &str = "22222222-2222-2222-2222-222222222222";

/// Generous: the machine is shared and slow; only used as an upper bound for waits.
const WAIT: Duration = Duration::from_secs(60);

async fn start() -> (RunningOmniSim, Client) {
    template_sim::start("status-watch-tests").await
}

async fn sync_demo(client: &Client) {
    let text = format!(
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\n---\nkind: ControlPlane\nmachines: [{A}]\n---\nkind: Workers\nmachines: [{B}]\n"
    );
    let template = Template::parse(&text).expect("parse");
    let plan = plan_sync(&client.raw_state(), &template, &FileResolver::default())
        .await
        .expect("plan");
    let mut out = Vec::new();
    apply(&client.raw_state(), &plan, Instant::now() + WAIT, &mut out)
        .await
        .expect("apply");
}

/// A watch on `client` and the stream of the clusters it announces.
fn watch(client: &Client) -> (StatusWatch, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded();
    let watch = StatusWatch::start(
        client,
        Box::new(move |cluster| {
            let _ = tx.unbounded_send(cluster.to_owned());
        }),
    );
    (watch, rx)
}

async fn until_live(watch: &StatusWatch) {
    let until = Instant::now() + WAIT;
    while !watch.is_live() {
        assert!(Instant::now() < until, "the status watch never went live");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn next_announcement(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(WAIT, rx.next())
        .await
        .expect("no announcement")
        .expect("the watch is gone")
}

async fn healthy_demo(client: &Client) {
    let until = Instant::now() + WAIT;
    loop {
        let h = status_cluster(&client.raw_state(), "demo", Instant::now() + WAIT).await;
        if h.as_ref().is_ok_and(|h| h.healthy) {
            return;
        }
        assert!(Instant::now() < until, "never healthy: {h:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_watched_status_matches_a_read_and_its_change_is_announced() {
    let (sim, client) = start().await;
    sync_demo(&client).await;
    healthy_demo(&client).await;
    let (watch, mut rx) = watch(&client);
    until_live(&watch).await;

    let watched = watch.read("demo").expect("live").expect("status");
    let read = status_cluster(&client.raw_state(), "demo", Instant::now() + WAIT)
        .await
        .expect("status");
    assert_eq!(watched, read);
    assert!(watched.healthy);

    sim.set_machine_set_status("demo-workers", specs::MachineSetPhase::ScalingUp, false)
        .expect("pin set status");
    assert_eq!(next_announcement(&mut rx).await, "demo");
    let watched = watch.read("demo").expect("live").expect("status");
    assert!(!watched.healthy);
    assert!(
        watched.summary.contains("demo-workers ScalingUp not ready"),
        "{}",
        watched.summary
    );
    assert_eq!(
        sim.connections_accepted(),
        1,
        "the watches share the client's connection"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_status_that_appears_after_it_was_read_is_announced() {
    let (sim, client) = start().await;
    let (watch, mut rx) = watch(&client);
    until_live(&watch).await;
    let missing = watch.read("demo").expect("live");
    assert!(
        matches!(missing, Err(StatusError::NotFound(_))),
        "{missing:?}"
    );

    sync_demo(&client).await;
    assert_eq!(next_announcement(&mut rx).await, "demo");
    assert!(watch.read("demo").expect("live").is_ok());
    sim.shutdown().await;
}

#[tokio::test]
async fn a_change_made_while_the_watches_were_down_is_announced_when_they_are_back() {
    let (sim, client) = start().await;
    sync_demo(&client).await;
    healthy_demo(&client).await;
    let (watch, mut rx) = watch(&client);
    until_live(&watch).await;
    assert!(watch.read("demo").expect("live").is_ok_and(|h| h.healthy));

    sim.set_outage(Some(Outage::Unavailable));
    let until = Instant::now() + WAIT;
    while watch.is_live() {
        assert!(Instant::now() < until, "the watch outlived the outage");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        watch.read("demo").is_none(),
        "a watch that is down answers nothing"
    );
    sim.set_cluster_status(
        "demo",
        specs::cluster_status_spec::Phase::ScalingDown,
        false,
    )
    .expect("pin cluster status");
    sim.set_outage(None);

    assert_eq!(next_announcement(&mut rx).await, "demo");
    let watched = watch.read("demo").expect("live again").expect("status");
    assert_eq!(watched.phase, "SCALING_DOWN");
    sim.shutdown().await;
}
