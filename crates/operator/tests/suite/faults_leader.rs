//! Fault suite: a hung management API and leader election. Two embedded operators share one
//! management kube-sim; the leader's Lease renewals hang (a latency rule on `leases`). The
//! leader must stop everything that writes on its behalf (reconciles, Omni calls, helm,
//! workload writes) before the standby can take the Lease over, so the two never write at the
//! same time; and a standby judges the Lease's expiry by its own clock, never by comparing the
//! holder's `renewTime` with it.
//!
//! Timings are scaled down (Lease 4 s, renew deadline 2 s, retry 250 ms) so each test takes
//! seconds; `FAULT_SOAK=1` repeats the hand-over many more times.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use omni_operator::cli::run::run_operator;
use omni_operator::process::leader::{LEASE_NAME, LeaderConfig, LeaderElector};
use serde_json::json;
use support::stack::{CLUSTER, REPO_PASSWORD, Stack, ours};
use support::{kube_sim, ready, wait_for};
use tokio::time::Instant;

const NS: &str = "leader";
/// Longer than any test: a request held this long is simply hung.
const HUNG: Duration = Duration::from_secs(120);

fn leader_config(identity: &str) -> LeaderConfig {
    let mut config = LeaderConfig::new(NS);
    config.identity = identity.to_string();
    config.lease_duration = Duration::from_secs(4);
    config.renew_deadline = Duration::from_secs(2);
    config.retry_period = Duration::from_millis(250);
    config
}

fn soak() -> bool {
    std::env::var("FAULT_SOAK").is_ok_and(|v| v == "1")
}

/// A client of its own for each operator, as two pods have.
fn client_of(sim: &kube_sim::server::RunningKubeSim) -> kube::Client {
    let uri: http::Uri = sim.base_url.parse().unwrap_or_else(|e| panic!("uri: {e}"));
    kube::Client::try_from(kube::Config::new(uri)).unwrap_or_else(|e| panic!("client: {e}"))
}

/// One embedded operator replica with leader election.
struct Replica {
    identity: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Replica {
    fn start(stack: &Stack, identity: &str) -> Replica {
        let mut config = stack.operator_config();
        config.leader = Some(leader_config(identity));
        // Each replica has its own helm state, as each pod has its own emptyDir.
        config.helm_work_dir = stack.helm_work_dir().join(identity);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run_operator(config, client_of(&stack.mgmt), async move {
            let _ = rx.await;
        }));
        Replica {
            identity: identity.to_string(),
            stop: Some(tx),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(support::WAIT, &mut self.task).await;
    }
}

/// The Lease's holder, read from kube-sim's store (no API request, so no latency rule).
fn holder(stack: &Stack) -> Option<String> {
    stack
        .mgmt
        .store()
        .get("coordination.k8s.io", "leases", Some(NS), LEASE_NAME)
        .ok()?
        .pointer("/spec/holderIdentity")?
        .as_str()
        .map(str::to_string)
}

async fn wait_holder(stack: &Stack, identity: &str) {
    let until = Instant::now() + support::WAIT;
    while holder(stack).as_deref() != Some(identity) {
        assert!(Instant::now() < until, "{identity} never took the Lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the operator logged that `identity`'s controllers are gone (identities are of equal
/// length, so none contains another).
fn controllers_stopped(identity: &str) -> bool {
    support::operator_logs()
        .lines()
        .any(|l| l.contains("controllers stopped") && l.contains(identity))
}

/// How one hand-over went: when (in polls of 10 ms) the old leader's controllers were gone and
/// the new leader held the Lease.
struct HandOver {
    stopped_at_poll: usize,
    acquired_at_poll: usize,
    elapsed: Duration,
}

/// Hangs the leader's Lease renewals (and, with it, its release of the Lease) and watches both
/// replicas until the standby holds the Lease. Each poll checks the Lease first and the log
/// second: the old leader logs before it releases, the new one acquires after that, so the
/// order of the polls that first saw each is the order of the events.
async fn hang_renewals_and_watch(stack: &Stack, old: &Replica, new: &Replica) -> HandOver {
    // The holder's renewal and then its release: the standby only reads until it takes over.
    stack
        .mgmt
        .hooks()
        .add_latency(Some("update"), Some("leases"), HUNG, Some(2));
    let start = Instant::now();
    let mut stopped_at_poll = None;
    for poll in 0.. {
        let acquired = holder(stack).as_deref() == Some(new.identity.as_str());
        if stopped_at_poll.is_none() && controllers_stopped(&old.identity) {
            stopped_at_poll = Some(poll);
        }
        if acquired {
            return HandOver {
                stopped_at_poll: stopped_at_poll.unwrap_or(usize::MAX),
                acquired_at_poll: poll,
                elapsed: start.elapsed(),
            };
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} never took over",
            new.identity
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    unreachable!("the poll loop only ends by returning or panicking")
}

fn assert_ordered(hand_over: &HandOver, old: &str, new: &str) {
    assert!(
        hand_over.stopped_at_poll <= hand_over.acquired_at_poll,
        "{new} took the Lease over {:?} after the hang (poll {}) while {old} was still running \
         its controllers (stopped at poll {})",
        hand_over.elapsed,
        hand_over.acquired_at_poll,
        if hand_over.stopped_at_poll == usize::MAX {
            "never".to_string()
        } else {
            hand_over.stopped_at_poll.to_string()
        }
    );
}

async fn wait_old_leader_exits(replica: Replica) {
    let identity = replica.identity.clone();
    let outcome = tokio::time::timeout(Duration::from_secs(30), replica.task)
        .await
        .unwrap_or_else(|_| panic!("{identity} never exited after losing the Lease"))
        .unwrap_or_else(|e| panic!("{identity} task: {e}"));
    let error = outcome.expect_err("losing the Lease ends the operator with an error");
    assert!(
        format!("{error:#}").contains("lost leadership"),
        "{identity}: {error:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_hang_stops_before_a_standby_takes_over() {
    let stack = Stack::start(NS).await;
    let clusters = stack.api("OmniCluster");
    let rounds = if soak() { 20 } else { 2 };
    let mut leader = Replica::start(&stack, "replica000");
    wait_holder(&stack, "replica000").await;
    wait_for(&clusters, CLUSTER, "Ready", ready).await;
    let mut figures = Vec::new();
    for round in 1..=rounds {
        let standby = Replica::start(&stack, &format!("replica{round:03}"));
        // Let the standby see the Lease being renewed.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let hand_over = hang_renewals_and_watch(&stack, &leader, &standby).await;
        assert_ordered(&hand_over, &leader.identity, &standby.identity);
        figures.push(hand_over.elapsed.as_millis() as u64);
        stack.mgmt.hooks().clear_latency();
        wait_old_leader_exits(leader).await;
        leader = standby;
    }
    // The last leader reconciles: a new cluster converges.
    stack
        .create(ours(
            "OmniCluster",
            NS,
            "after",
            json!({
                "connectionRef": {"name": "omni"},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
            }),
        ))
        .await;
    stack
        .create(ours(
            "OmniControlPlane",
            NS,
            "after-cp",
            json!({"clusterRef": {"name": "after"}, "machines": ["aaaaaaaa-0000-4000-8000-000000000002"]}),
        ))
        .await;
    wait_for(&clusters, "after", "Ready", ready).await;
    leader.stop().await;
    let scan = support::leaks::assert_no_secret_leaks(
        &stack.client,
        &[],
        &[&stack.omni_key, REPO_PASSWORD],
    )
    .await;
    support::leaks::report(
        "hung management API: renewals hang, the leader steps down",
        json!({
            "hand_overs": rounds,
            "faults_injected": rounds * 2,
            "takeover_ms": figures,
            "concurrent_writers": 0,
            "texts_scanned": scan.texts,
        }),
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stepping_down_aborts_work_stuck_in_omni_before_the_takeover() {
    let stack = Stack::start(NS).await;
    let clusters = stack.api("OmniCluster");
    let leader = Replica::start(&stack, "stuck-a");
    wait_holder(&stack, "stuck-a").await;
    wait_for(&clusters, CLUSTER, "Ready", ready).await;
    let standby = Replica::start(&stack, "stuck-b");
    // A new cluster whose creation in Omni hangs: the leader's reconcile is in flight.
    stack
        .omni
        .set_latency(omni_sim::methods::CREATE, Duration::from_secs(60));
    let creates = || {
        stack
            .omni
            .call_counts()
            .iter()
            .filter(|((method, _), _)| method == omni_sim::methods::CREATE)
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    let before = creates();
    stack
        .create(ours(
            "OmniCluster",
            NS,
            "stuck",
            json!({
                "connectionRef": {"name": "omni"},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
            }),
        ))
        .await;
    stack
        .create(ours(
            "OmniControlPlane",
            NS,
            "stuck-cp",
            json!({"clusterRef": {"name": "stuck"}, "machines": ["aaaaaaaa-0000-4000-8000-000000000003"]}),
        ))
        .await;
    // Give the leader time to enter the hung call.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hand_over = hang_renewals_and_watch(&stack, &leader, &standby).await;
    assert_ordered(&hand_over, &leader.identity, &standby.identity);
    stack.mgmt.hooks().clear_latency();
    stack
        .omni
        .set_latency(omni_sim::methods::CREATE, Duration::ZERO);
    wait_old_leader_exits(leader).await;
    // The new leader finishes the interrupted work.
    wait_for(&clusters, "stuck", "Ready", ready).await;
    assert!(
        stack
            .omni
            .get(omni_sim::types::ty::CLUSTER, "stuck")
            .is_some(),
        "the cluster was never created in Omni"
    );
    standby.stop().await;
    let scan = support::leaks::assert_no_secret_leaks(
        &stack.client,
        &[],
        &[&stack.omni_key, REPO_PASSWORD],
    )
    .await;
    support::leaks::report(
        "hung management API: the leader's in-flight Omni call is cut at the write fence",
        json!({
            "hand_overs": 1,
            "faults_injected": 3,
            "takeover_ms": hand_over.elapsed.as_millis() as u64,
            "omni_creates": creates() - before,
            "concurrent_writers": 0,
            "texts_scanned": scan.texts,
        }),
    );
    stack.shutdown().await;
}

/// A Lease held by a replica whose clock runs an hour behind: its `renewTime` always looks
/// long expired, yet it renews every 300 ms. A standby must judge expiry by how long it has
/// seen the record unchanged, by its own clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_judges_lease_expiry_by_its_own_clock() {
    support::operator_logs();
    let (sim, client) = kube_sim().await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap_or_else(|e| panic!("{e}"));
    Api::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("namespace: {e}"));
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let an_hour_ago = || jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
    leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    namespace: Some(NS.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("lagging".into()),
                    lease_duration_seconds: Some(2),
                    renew_time: Some(MicroTime(an_hour_ago())),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("create Lease: {e}"));
    let renewer = {
        let leases = leases.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let Ok(mut lease) = leases.get(LEASE_NAME).await else {
                    continue;
                };
                if let Some(spec) = lease.spec.as_mut() {
                    spec.renew_time = Some(MicroTime(an_hour_ago()));
                }
                let _ = leases
                    .replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await;
            }
        })
    };
    let mut config = leader_config("standby");
    config.lease_duration = Duration::from_secs(2);
    let standby = LeaderElector::new(client.clone(), config);
    let watch_for = if soak() { 30 } else { 5 };
    let until = Instant::now() + Duration::from_secs(watch_for);
    let mut attempts = 0;
    while Instant::now() < until {
        let won = standby
            .try_acquire_or_renew(Duration::from_secs(2))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !won,
            "the standby took over a Lease renewed {attempts} attempts ago by a holder whose \
             clock lags"
        );
        attempts += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Once the holder stops renewing, the standby takes over after the Lease duration.
    renewer.abort();
    let _ = renewer.await;
    let stopped = Instant::now();
    while !standby
        .try_acquire_or_renew(Duration::from_secs(2))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    {
        assert!(
            stopped.elapsed() < Duration::from_secs(30),
            "never took over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited = stopped.elapsed();
    assert!(
        waited >= Duration::from_millis(1_500),
        "took over {waited:?} after the last renewal; the Lease lasts 2 s"
    );
    let lease = leases
        .get(LEASE_NAME)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("standby")
    );
    support::leaks::assert_no_secret_leaks(&client, &[], &[]).await;
    support::leaks::report(
        "leader election: expiry by the local clock against a lagging holder",
        json!({"attempts_refused": attempts, "takeover_after_ms": waited.as_millis() as u64}),
    );
    sim.shutdown();
}
