//! The fault suite's secret scan: every text the operator produced that a user or an attacker
//! could read — its log lines, Events, the status of every custom resource, and errors the test
//! collected — must contain none of the secret values the scenario used.

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use kube::discovery::ApiResource;

/// The plurals of every kind the operator serves (their `.status` is scanned).
pub const KINDS: &[(&str, &str)] = &[
    ("OmniConnection", "omniconnections"),
    ("OmniCluster", "omniclusters"),
    ("OmniControlPlane", "omnicontrolplanes"),
    ("OmniWorkers", "omniworkers"),
    ("OmniMachine", "omnimachines"),
    ("OmniKubeconfigExport", "omnikubeconfigexports"),
    ("OmniSecretSync", "omnisecretsyncs"),
    ("OmniHelmRelease", "omnihelmreleases"),
];

/// What one scan covered, so a scenario can report its figures.
#[derive(Debug, Default, Clone, Copy)]
pub struct LeakScan {
    pub texts: usize,
    pub bytes: usize,
    pub secrets: usize,
}

/// Scans the operator's log (as captured by `support::operator_logs`, which must have been
/// called before the operator started), every Event in both Event APIs, the status of every
/// custom resource in `client`'s cluster and the `extra` texts (errors the test saw) for each
/// value in `secrets`; panics naming where a secret was found (never the secret itself).
/// Values shorter than 8 bytes are ignored: they would match by accident.
pub async fn assert_no_secret_leaks(
    client: &kube::Client,
    extra: &[String],
    secrets: &[&str],
) -> LeakScan {
    let mut texts: Vec<(String, String)> = vec![("operator log".into(), super::operator_logs())];
    let events: Api<Event> = Api::all(client.clone());
    for e in events
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list events: {e}"))
    {
        let name = e.metadata.name.clone().unwrap_or_default();
        texts.push((
            format!("Event {name}"),
            serde_json::to_string(&e).unwrap_or_default(),
        ));
    }
    let core_events: Api<CoreEvent> = Api::all(client.clone());
    for e in core_events
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list core events: {e}"))
    {
        let name = e.metadata.name.clone().unwrap_or_default();
        texts.push((
            format!("core Event {name}"),
            serde_json::to_string(&e).unwrap_or_default(),
        ));
    }
    for (kind, plural) in KINDS {
        let ar = ApiResource {
            group: "omni.texashpc.com".into(),
            version: "v1alpha1".into(),
            api_version: "omni.texashpc.com/v1alpha1".into(),
            kind: (*kind).into(),
            plural: (*plural).into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue; // the CRD is not installed in this scenario
        };
        for obj in list {
            let name = format!(
                "{kind} {}/{} status",
                obj.metadata.namespace.clone().unwrap_or_default(),
                obj.metadata.name.clone().unwrap_or_default()
            );
            texts.push((name, obj.data["status"].to_string()));
        }
    }
    for (i, e) in extra.iter().enumerate() {
        texts.push((format!("collected error #{i}"), e.clone()));
    }
    let secrets: Vec<&str> = secrets.iter().copied().filter(|s| s.len() >= 8).collect();
    for (origin, text) in &texts {
        for (i, secret) in secrets.iter().enumerate() {
            assert!(
                !text.contains(secret),
                "secret value #{i} appears in {origin}"
            );
        }
    }
    LeakScan {
        texts: texts.len(),
        bytes: texts.iter().map(|(_, t)| t.len()).sum(),
        secrets: secrets.len(),
    }
}

/// Appends one scenario's figures as a JSON line to `$FAULT_REPORT` when it is set, so a run of
/// the fault suite can be summarised in docs/reliability.md.
pub fn report(scenario: &str, figures: serde_json::Value) {
    let Ok(path) = std::env::var("FAULT_REPORT") else {
        return;
    };
    let line = serde_json::json!({"scenario": scenario, "figures": figures}).to_string();
    use std::io::Write as _;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(f, "{line}");
    }
}
