//! The outage fault hook: with `set_outage(Some(..))` every method of the API fails at once,
//! either answering `UNAVAILABLE` or hanging past the client's deadline, until the outage is
//! switched off again. Nothing a call asked for during an outage is applied.

use std::time::Duration;

use futures::StreamExt as _;
use omni_client::proto::specs::MachineClassSpec;
use omni_client::state::{StateError, WatchTarget};
use omni_client::transport::{Client, ClientConfig};
use omni_sim::types::{DEFAULT_NS, ty};
use omni_sim::{OmniSim, Outage, Role, RunningOmniSim};

async fn start() -> (RunningOmniSim, String) {
    let sim = OmniSim::builder().start().await.expect("start omni-sim");
    let key = sim
        .register_service_account("outage", Role::Operator)
        .expect("register");
    (sim, key)
}

fn client(sim: &RunningOmniSim, key: &str, request_timeout: Duration) -> Client {
    let mut config = ClientConfig::from_encoded_key(sim.endpoint(), key).expect("key");
    config.request_timeout = request_timeout;
    Client::new(config).expect("client")
}

fn machine_class(name: &str) -> omni_client::proto::cosi::resource::Resource {
    omni_sim::store::resource(
        ty::MACHINE_CLASS,
        name,
        "",
        Vec::new(),
        &MachineClassSpec {
            match_labels: vec!["rack=a".into()],
            auto_provision: None,
        },
    )
}

fn applied(sim: &RunningOmniSim, verb: &str, id: &str) -> u64 {
    sim.applied_writes()
        .get(&(verb.into(), ty::MACHINE_CLASS.into(), id.into()))
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn an_unavailable_outage_refuses_every_call_and_cuts_open_watches() {
    let (sim, key) = start().await;
    let client = client(&sim, &key, Duration::from_secs(30));
    let state = client.state();
    let mut watch = state
        .watch(&WatchTarget::kind(
            DEFAULT_NS,
            ty::MACHINE_CLASS,
            Vec::new(),
        ))
        .await
        .expect("watch");
    assert!(matches!(
        watch.next().await,
        Some(Ok(omni_client::state::WatchEvent::Bootstrapped))
    ));

    sim.set_outage(Some(Outage::Unavailable));
    assert!(
        matches!(watch.next().await, Some(Err(StateError::Unavailable(_)))),
        "an open watch survived the outage"
    );
    let refused = state.create(machine_class("during"), "").await;
    assert!(
        matches!(refused, Err(StateError::Unavailable(_))),
        "{refused:?}"
    );
    let listed = state.list(DEFAULT_NS, ty::MACHINE_CLASS, &[]).await;
    assert!(
        matches!(listed, Err(StateError::Unavailable(_))),
        "{listed:?}"
    );
    let minted = client
        .kubeconfig("c", Duration::from_secs(60), "u", &[])
        .await;
    assert!(
        matches!(
            minted,
            Err(omni_client::ManagementError::Rpc(StateError::Unavailable(
                _
            )))
        ),
        "{minted:?}"
    );
    assert_eq!(sim.outage_calls(), 3);
    assert_eq!(applied(&sim, "create", "during"), 0);
    assert!(sim.get(ty::MACHINE_CLASS, "during").is_none());

    sim.set_outage(None);
    state
        .create(machine_class("after"), "")
        .await
        .expect("create after the outage");
    assert_eq!(applied(&sim, "create", "after"), 1);
    assert_eq!(sim.outage_calls(), 3, "calls after the outage were counted");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_hung_call_outlasts_the_client_deadline_and_is_never_applied() {
    let (sim, key) = start().await;
    let impatient = client(&sim, &key, Duration::from_millis(300));
    sim.set_outage(Some(Outage::Hang));
    let hung = impatient.state().create(machine_class("hung"), "").await;
    assert!(
        matches!(hung, Err(StateError::DeadlineExceeded(_))),
        "{hung:?}"
    );

    // A patient client's call waits the outage out and then goes through.
    let patient = client(&sim, &key, Duration::from_secs(30)).state();
    let waiting = tokio::spawn(async move { patient.create(machine_class("patient"), "").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a call was answered during a hang");
    assert!(sim.get(ty::MACHINE_CLASS, "patient").is_none());
    sim.set_outage(None);
    waiting
        .await
        .expect("join")
        .expect("create once the outage ended");

    assert_eq!(sim.outage_calls(), 2);
    assert!(
        sim.get(ty::MACHINE_CLASS, "hung").is_none(),
        "the abandoned call was applied"
    );
    assert_eq!(applied(&sim, "create", "hung"), 0);
    assert_eq!(applied(&sim, "create", "patient"), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn applied_writes_count_changes_not_calls() {
    let (sim, key) = start().await;
    let state = client(&sim, &key, Duration::from_secs(30)).state();
    state.create(machine_class("mc"), "").await.expect("create");
    assert!(state.create(machine_class("mc"), "").await.is_err());
    state
        .teardown(DEFAULT_NS, ty::MACHINE_CLASS, "mc", "")
        .await
        .expect("teardown");
    state
        .teardown(DEFAULT_NS, ty::MACHINE_CLASS, "mc", "")
        .await
        .expect("repeated teardown");
    state
        .destroy(DEFAULT_NS, ty::MACHINE_CLASS, "mc", "")
        .await
        .expect("destroy");
    assert_eq!(applied(&sim, "create", "mc"), 1);
    assert_eq!(applied(&sim, "teardown", "mc"), 1);
    assert_eq!(applied(&sim, "destroy", "mc"), 1);
    assert_eq!(sim.writes_total(), 5, "every write call is still counted");
    sim.shutdown().await;
}
