//! omni-sim as the template tests start it, and a client of it with the operator's role.

use std::time::Duration;

use omni_client::transport::{Client, ClientConfig};
use omni_sim::{OmniSim, Role, RunningOmniSim};

/// omni-sim whose statuses step every 20 ms, where machines named by static IDs connect without
/// being seeded, and a client authenticated as the Operator-role service account `account`.
pub async fn start(account: &str) -> (RunningOmniSim, Client) {
    let sim = OmniSim::builder()
        .auto_register_machines(true)
        .status_step(Duration::from_millis(20))
        .start()
        .await
        .expect("start omni-sim");
    let key = sim
        .register_service_account(account, Role::Operator)
        .expect("register");
    let client = Client::new(ClientConfig::from_encoded_key(sim.endpoint(), &key).expect("key"))
        .expect("client");
    (sim, client)
}
