//! The live table: every Omni object in the sandbox namespace with its Ready condition.

use kube::api::ListParams;
use serde_json::Value;

use crate::samples::api_for;

/// The kinds shown, in the order the samples introduce them.
pub const KINDS: [&str; 11] = [
    "OmniConnection",
    "OmniCluster",
    "OmniControlPlane",
    "OmniWorkers",
    "OmniMachine",
    "OmniKubeconfigExport",
    "OmniHelmRelease",
    "OmniSecretSync",
    "OmniKubeconfigExportSet",
    "OmniHelmReleaseSet",
    "OmniSecretSyncSet",
];

/// One object's readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// `True`, `False` or `Unknown` (no condition yet, or status older than the spec).
    pub ready: String,
    /// Reason of the Ready condition.
    pub reason: String,
    /// Message of the Ready condition.
    pub message: String,
}

impl Row {
    /// Ready and describing the current generation.
    pub fn is_ready(&self) -> bool {
        self.ready == "True"
    }
}

fn row(kind: &str, obj: &Value) -> Row {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let generation = obj["metadata"]["generation"].as_i64();
    let observed = obj["status"]["observedGeneration"].as_i64();
    let ready = obj["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match ready {
        Some(c) if observed.is_some() && observed == generation => Row {
            kind: kind.to_owned(),
            name,
            ready: text(&c["status"]),
            reason: text(&c["reason"]),
            message: text(&c["message"]),
        },
        _ => Row {
            kind: kind.to_owned(),
            name,
            ready: "Unknown".into(),
            reason: "Reconciling".into(),
            message: "waiting for the operator".into(),
        },
    }
}

/// Reads every object of our kinds.
pub async fn rows(client: &kube::Client) -> anyhow::Result<Vec<Row>> {
    let mut out = Vec::new();
    for kind in KINDS {
        let list = api_for(client, kind).list(&ListParams::default()).await?;
        for obj in list.items {
            out.push(row(kind, &serde_json::to_value(&obj)?));
        }
    }
    Ok(out)
}

/// The table as text.
pub fn render(rows: &[Row]) -> String {
    let w_kind = rows.iter().map(|r| r.kind.len()).max().unwrap_or(4).max(4);
    let w_name = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "{:<w_kind$}  {:<w_name$}  {:<7}  REASON\n",
        "KIND", "NAME", "READY"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<w_kind$}  {:<w_name$}  {:<7}  {}\n",
            r.kind, r.name, r.ready, r.reason
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stale_status_is_not_ready() {
        let obj = json!({"metadata": {"name": "a", "generation": 2},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True", "reason": "Synced"}]}});
        assert!(!row("OmniCluster", &obj).is_ready());
        let obj = json!({"metadata": {"name": "a", "generation": 2},
            "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True", "reason": "Synced"}]}});
        let r = row("OmniCluster", &obj);
        assert!(r.is_ready());
        assert!(render(&[r]).contains("OmniCluster  a     True     Synced"));
    }
}
