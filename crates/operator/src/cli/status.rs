//! `omni-operator status`: the fleet at a glance, read from the management cluster — which
//! clusters are not running, which objects are not Ready and why, which exported kubeconfigs
//! expire soon. It reads the objects' status only (what the operator last wrote); it talks to
//! neither Omni nor the workload clusters.
//!
//! Output: `--output table` (default) prints one section per finding kind and a summary line;
//! `--output json` prints one document for scripts (the `Summary` below). The exit status is 0
//! when the summary could be read, whatever it says.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde::Serialize;
use serde_json::Value;

use crate::api::{self, GROUP, VERSION};

/// Arguments of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig of the management cluster (default: `$KUBECONFIG`, `~/.kube/config`, or the
    /// in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace to summarise (default: the kubeconfig context's namespace).
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Summarise every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// `table` for people, `json` for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Report exported kubeconfigs that expire within this time (a Go duration). The default
    /// is the shipped alert's: rotation normally replaces a kubeconfig well before that.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_window)]
    pub expiring_within: Duration,
}

/// How the summary is printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Sections of aligned columns.
    #[default]
    Table,
    /// One JSON document.
    Json,
}

fn parse_window(value: &str) -> Result<Duration, String> {
    let d = api::duration::GoDuration::parse(value).map_err(|e| e.to_string())?;
    if d.is_negative() {
        return Err(format!("{value:?} is negative"));
    }
    d.to_std()
        .ok_or_else(|| format!("{value:?} is out of range"))
}

/// Runs the subcommand.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .with_context(|| format!("use kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("find the management cluster (pass --kubeconfig)")?,
    };
    let scope = if args.all_namespaces {
        None
    } else {
        Some(
            args.namespace
                .clone()
                .unwrap_or_else(|| config.default_namespace.clone()),
        )
    };
    let client = kube::Client::try_from(config).context("connect to the Kubernetes API")?;
    let objects = list_all(&client, scope.as_deref()).await;
    let summary = Summary::of(
        scope.as_deref(),
        &objects,
        jiff::Timestamp::now(),
        args.expiring_within,
    );
    match args.output {
        Output::Table => print!("{}", summary.table()),
        Output::Json => println!("{:#}", serde_json::to_value(&summary)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// The objects of every kind in scope, or why a kind could not be listed.
async fn list_all(client: &kube::Client, namespace: Option<&str>) -> Vec<Listed> {
    let mut out = Vec::new();
    for crd in api::crds() {
        let names = &crd.spec.names;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, VERSION, &names.kind),
            &names.plural,
        );
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let listed = api
            .list(&ListParams::default())
            .await
            .map(|list| {
                list.items
                    .into_iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect()
            })
            .map_err(|e| e.to_string());
        out.push(Listed {
            kind: names.kind.clone(),
            objects: listed,
        });
    }
    out
}

/// The objects of one kind, or why they could not be listed.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// Kind.
    pub(crate) kind: String,
    /// The objects as JSON, or the error listing them.
    pub(crate) objects: Result<Vec<Value>, String>,
}

/// The fleet summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Summary {
    /// The namespace summarised; absent for every namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) namespace: Option<String>,
    /// Objects per kind, and how many of them are Ready (or Accepted, for children).
    pub(crate) kinds: Vec<KindCount>,
    /// OmniClusters whose cluster is not up as Omni reports it.
    pub(crate) clusters_not_running: Vec<ClusterRow>,
    /// Objects whose Ready (children: Accepted) condition is not True.
    pub(crate) not_ready: Vec<NotReadyRow>,
    /// Exported kubeconfigs expiring within the window.
    pub(crate) expiring_kubeconfigs: Vec<ExpiryRow>,
    /// The window, in seconds.
    pub(crate) expiring_within_seconds: u64,
    /// Kinds that could not be listed, with the API server's answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) errors: Vec<String>,
}

/// One kind's count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct KindCount {
    pub(crate) kind: String,
    pub(crate) total: usize,
    pub(crate) ready: usize,
}

/// A cluster that is not running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterRow {
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Omni's phase (`SCALING_UP`, ...), empty before Omni reported one.
    pub(crate) phase: String,
    /// Healthy/total machines, as Omni counts them.
    pub(crate) ready_machines: String,
    /// Machine sets Omni does not report ready.
    pub(crate) machine_sets_not_ready: Vec<String>,
}

/// An object whose main condition is not True.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct NotReadyRow {
    pub(crate) kind: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// `Ready`, or `Accepted` for the children of a cluster.
    pub(crate) condition: String,
    /// `False`, `Unknown`, or `Missing` when the operator has not written it yet.
    pub(crate) status: String,
    pub(crate) reason: String,
    pub(crate) message: String,
    /// `Suspended=True`: the operator leaves it alone on purpose.
    pub(crate) suspended: bool,
}

/// An exported kubeconfig that expires soon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExpiryRow {
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// The Secret holding it.
    pub(crate) secret: String,
    /// `status.expirationTime`.
    pub(crate) expires: String,
    /// Seconds until then (negative: expired).
    pub(crate) expires_in_seconds: i64,
    /// `status.nextRotationTime`, when the operator plans to replace it.
    pub(crate) next_rotation: String,
}

/// Kinds whose main condition is `Accepted` rather than `Ready`.
const CHILD_KINDS: [&str; 3] = ["OmniControlPlane", "OmniWorkers", "OmniMachine"];

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

impl Summary {
    /// Summarises `listed` as of `now`.
    pub(crate) fn of(
        namespace: Option<&str>,
        listed: &[Listed],
        now: jiff::Timestamp,
        expiring_within: Duration,
    ) -> Self {
        let mut summary = Summary {
            namespace: namespace.map(String::from),
            expiring_within_seconds: expiring_within.as_secs(),
            ..Summary::default()
        };
        for Listed { kind, objects } in listed {
            let objects = match objects {
                Ok(objects) => objects,
                Err(e) => {
                    summary.errors.push(format!("cannot list {kind}: {e}"));
                    continue;
                }
            };
            let main = if CHILD_KINDS.contains(&kind.as_str()) {
                "Accepted"
            } else {
                "Ready"
            };
            let mut count = KindCount {
                kind: kind.clone(),
                total: objects.len(),
                ready: 0,
            };
            for object in objects {
                let namespace = text(&object["metadata"]["namespace"]);
                let name = text(&object["metadata"]["name"]);
                match condition(object, main) {
                    Some(c) if c["status"] == "True" => count.ready += 1,
                    found => summary.not_ready.push(NotReadyRow {
                        kind: kind.clone(),
                        namespace: namespace.clone(),
                        name: name.clone(),
                        condition: main.to_string(),
                        status: found.map_or("Missing".into(), |c| text(&c["status"])),
                        reason: found.map(|c| text(&c["reason"])).unwrap_or_default(),
                        message: found.map(|c| text(&c["message"])).unwrap_or_default(),
                        suspended: condition(object, "Suspended")
                            .is_some_and(|c| c["status"] == "True"),
                    }),
                }
                match kind.as_str() {
                    "OmniCluster" => {
                        if let Some(row) = cluster_not_running(object, namespace, name) {
                            summary.clusters_not_running.push(row);
                        }
                    }
                    "OmniKubeconfigExport" => {
                        if let Some(row) = expiring(object, namespace, name, now, expiring_within) {
                            summary.expiring_kubeconfigs.push(row);
                        }
                    }
                    _ => {}
                }
            }
            summary.kinds.push(count);
        }
        summary
            .expiring_kubeconfigs
            .sort_by_key(|r| r.expires_in_seconds);
        summary
    }

    /// The table output.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        let scope = self
            .namespace
            .as_deref()
            .map_or("all namespaces".to_string(), |ns| format!("namespace {ns}"));
        let clusters = self.kinds.iter().find(|k| k.kind == "OmniCluster");
        let total: usize = self.kinds.iter().map(|k| k.total).sum();
        out.push_str(&format!(
            "{total} object(s) in {scope}: {} cluster(s), {} not running; {} object(s) not Ready; {} kubeconfig(s) expiring within {:#}\n",
            clusters.map_or(0, |c| c.total),
            self.clusters_not_running.len(),
            self.not_ready.len(),
            self.expiring_kubeconfigs.len(),
            jiff::SignedDuration::from_secs(
                i64::try_from(self.expiring_within_seconds).unwrap_or(i64::MAX)
            ),
        ));
        out.push_str(&self.not_running_table());
        out.push_str(&self.not_ready_table());
        out.push_str(&self.expiring_table());
        for error in &self.errors {
            out.push_str(&format!("\nerror: {error}\n"));
        }
        out
    }

    /// The clusters not running (empty when there is none).
    fn not_running_table(&self) -> String {
        let mut out = String::new();
        if self.clusters_not_running.is_empty() {
            return out;
        }
        out.push_str("\nCLUSTERS NOT RUNNING\n");
        let rows: Vec<Vec<String>> = self
            .clusters_not_running
            .iter()
            .map(|r| {
                vec![
                    r.namespace.clone(),
                    r.name.clone(),
                    or_dash(&r.phase),
                    or_dash(&r.ready_machines),
                    or_dash(&r.machine_sets_not_ready.join(",")),
                ]
            })
            .collect();
        out.push_str(&columns(
            &["NAMESPACE", "NAME", "PHASE", "MACHINES", "SETS NOT READY"],
            &rows,
        ));
        out
    }

    /// The objects not Ready (empty when there is none).
    fn not_ready_table(&self) -> String {
        let mut out = String::new();
        if self.not_ready.is_empty() {
            return out;
        }
        out.push_str("\nNOT READY\n");
        let rows: Vec<Vec<String>> = self
            .not_ready
            .iter()
            .map(|r| {
                let mut reason = or_dash(&r.reason);
                if r.suspended {
                    reason.push_str(" (suspended)");
                }
                vec![
                    r.namespace.clone(),
                    r.kind.clone(),
                    r.name.clone(),
                    format!("{}={}", r.condition, r.status),
                    reason,
                    r.message.lines().next().unwrap_or_default().to_string(),
                ]
            })
            .collect();
        out.push_str(&columns(
            &[
                "NAMESPACE",
                "KIND",
                "NAME",
                "CONDITION",
                "REASON",
                "MESSAGE",
            ],
            &rows,
        ));
        out
    }

    /// The kubeconfigs expiring soon (empty when there is none).
    fn expiring_table(&self) -> String {
        let mut out = String::new();
        if self.expiring_kubeconfigs.is_empty() {
            return out;
        }
        out.push_str("\nKUBECONFIGS EXPIRING SOON\n");
        let rows: Vec<Vec<String>> = self
            .expiring_kubeconfigs
            .iter()
            .map(|r| {
                vec![
                    r.namespace.clone(),
                    r.name.clone(),
                    or_dash(&r.secret),
                    r.expires.clone(),
                    if r.expires_in_seconds < 0 {
                        "expired".to_string()
                    } else {
                        format!(
                            "{:#}",
                            jiff::SignedDuration::from_secs(r.expires_in_seconds)
                        )
                    },
                    or_dash(&r.next_rotation),
                ]
            })
            .collect();
        out.push_str(&columns(
            &[
                "NAMESPACE",
                "NAME",
                "SECRET",
                "EXPIRES",
                "IN",
                "NEXT ROTATION",
            ],
            &rows,
        ));
        out
    }
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
}

/// Left-aligned columns separated by three spaces, as `kubectl get` prints them.
fn columns(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}   "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A cluster is running when Omni says `RUNNING` with every machine healthy and every
/// machine set ready.
fn cluster_not_running(object: &Value, namespace: String, name: String) -> Option<ClusterRow> {
    let status = &object["status"];
    let phase = text(&status["omniPhase"]);
    let ready_machines = text(&status["readyMachines"]);
    let machines_ok = ready_machines
        .split_once('/')
        .is_some_and(|(ready, total)| ready == total && !total.is_empty());
    let sets_not_ready: Vec<String> = status["machineSets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["ready"] != true)
        .map(|s| text(&s["id"]))
        .collect();
    if phase == "RUNNING" && machines_ok && sets_not_ready.is_empty() {
        return None;
    }
    Some(ClusterRow {
        namespace,
        name,
        phase,
        ready_machines,
        machine_sets_not_ready: sets_not_ready,
    })
}

fn expiring(
    object: &Value,
    namespace: String,
    name: String,
    now: jiff::Timestamp,
    within: Duration,
) -> Option<ExpiryRow> {
    let status = &object["status"];
    let expires = text(&status["expirationTime"]);
    let at: jiff::Timestamp = expires.parse().ok()?;
    let left = at.duration_since(now);
    let window = jiff::SignedDuration::try_from(within).unwrap_or(jiff::SignedDuration::MAX);
    if left > window {
        return None;
    }
    Some(ExpiryRow {
        namespace,
        name,
        secret: text(&status["targetSecretRef"]),
        expires,
        expires_in_seconds: left.as_secs(),
        next_rotation: text(&status["nextRotationTime"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed(kind: &str, objects: Vec<Value>) -> Listed {
        Listed {
            kind: kind.into(),
            objects: Ok(objects),
        }
    }

    fn ready(status: &str, reason: &str) -> Value {
        json!([{"type": "Ready", "status": status, "reason": reason, "message": format!("{reason} message")}])
    }

    fn fleet() -> Vec<Listed> {
        vec![
            listed(
                "OmniCluster",
                vec![
                    json!({"metadata": {"namespace": "omni", "name": "up"}, "status": {
                        "conditions": ready("True", "Synced"), "omniPhase": "RUNNING", "readyMachines": "3/3",
                        "machineSets": [{"id": "up-control-planes", "ready": true}]}}),
                    json!({"metadata": {"namespace": "omni", "name": "starved"}, "status": {
                        "conditions": ready("True", "Synced"), "omniPhase": "SCALING_UP", "readyMachines": "0/0",
                        "machineSets": [{"id": "starved-control-planes", "ready": false}]}}),
                    json!({"metadata": {"namespace": "omni", "name": "new"}}),
                ],
            ),
            listed(
                "OmniWorkers",
                vec![
                    json!({"metadata": {"namespace": "omni", "name": "w"}, "status": {
                    "conditions": [{"type": "Accepted", "status": "False", "reason": "MissingCluster", "message": "waiting"}]}}),
                ],
            ),
            listed(
                "OmniKubeconfigExport",
                vec![
                    json!({"metadata": {"namespace": "omni", "name": "soon"}, "status": {
                        "conditions": ready("True", "Exported"), "targetSecretRef": "soon-kc",
                        "expirationTime": "2026-01-01T10:00:00Z", "nextRotationTime": "2026-01-01T08:00:00Z"}}),
                    json!({"metadata": {"namespace": "omni", "name": "later"}, "status": {
                        "conditions": ready("True", "Exported"), "expirationTime": "2026-02-01T00:00:00Z"}}),
                    json!({"metadata": {"namespace": "omni", "name": "gone"}, "status": {
                        "conditions": [
                            {"type": "Ready", "status": "False", "reason": "ExportFailed", "message": "m"},
                            {"type": "Suspended", "status": "True", "reason": "Suspended", "message": ""}],
                        "expirationTime": "2025-12-31T00:00:00Z"}}),
                ],
            ),
            Listed {
                kind: "OmniHelmRelease".into(),
                objects: Err("forbidden".into()),
            },
        ]
    }

    fn summary() -> Summary {
        Summary::of(
            Some("omni"),
            &fleet(),
            "2026-01-01T00:00:00Z".parse().unwrap(),
            Duration::from_secs(72 * 3600),
        )
    }

    #[test]
    fn clusters_not_running_objects_not_ready_and_expiring_kubeconfigs() {
        let s = summary();
        let names = |rows: Vec<&str>| rows.into_iter().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            s.clusters_not_running
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>(),
            names(vec!["starved", "new"])
        );
        assert_eq!(
            s.clusters_not_running[0].machine_sets_not_ready,
            vec!["starved-control-planes"]
        );
        let not_ready: Vec<(String, String, String, String)> = s
            .not_ready
            .iter()
            .map(|r| {
                (
                    r.kind.clone(),
                    r.name.clone(),
                    r.status.clone(),
                    r.reason.clone(),
                )
            })
            .collect();
        assert_eq!(
            not_ready,
            vec![
                (
                    "OmniCluster".into(),
                    "new".into(),
                    "Missing".into(),
                    "".into()
                ),
                (
                    "OmniWorkers".into(),
                    "w".into(),
                    "False".into(),
                    "MissingCluster".into()
                ),
                (
                    "OmniKubeconfigExport".into(),
                    "gone".into(),
                    "False".into(),
                    "ExportFailed".into()
                ),
            ]
        );
        assert!(s.not_ready[2].suspended && !s.not_ready[1].suspended);
        assert_eq!(
            s.expiring_kubeconfigs
                .iter()
                .map(|r| (r.name.clone(), r.expires_in_seconds))
                .collect::<Vec<_>>(),
            vec![("gone".to_string(), -86400), ("soon".to_string(), 36000)]
        );
        assert_eq!(s.errors, vec!["cannot list OmniHelmRelease: forbidden"]);
        assert_eq!(
            s.kinds[0],
            KindCount {
                kind: "OmniCluster".into(),
                total: 3,
                ready: 2
            }
        );
    }

    #[test]
    fn the_table_has_a_headline_and_a_section_per_finding() {
        let table = summary().table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "7 object(s) in namespace omni: 3 cluster(s), 2 not running; 3 object(s) not Ready; 2 kubeconfig(s) expiring within 72h"
        );
        assert!(table.contains("\nCLUSTERS NOT RUNNING\nNAMESPACE   NAME      PHASE        MACHINES   SETS NOT READY\nomni        starved   SCALING_UP   0/0        starved-control-planes\nomni        new       -            -          -\n"), "{table}");
        assert!(table.contains("omni        OmniWorkers            w      Accepted=False   MissingCluster             waiting\n"), "{table}");
        assert!(
            table.contains(
                "OmniKubeconfigExport   gone   Ready=False      ExportFailed (suspended)   m\n"
            ),
            "{table}"
        );
        assert!(
            table.contains("soon   soon-kc   2026-01-01T10:00:00Z   10h"),
            "{table}"
        );
        assert!(
            table.contains("gone   -         2025-12-31T00:00:00Z   expired"),
            "{table}"
        );
        assert!(
            table.ends_with("\nerror: cannot list OmniHelmRelease: forbidden\n"),
            "{table}"
        );
    }

    #[test]
    fn json_names_every_part() {
        let value = serde_json::to_value(summary()).unwrap();
        assert_eq!(value["namespace"], "omni");
        assert_eq!(value["clustersNotRunning"][0]["readyMachines"], "0/0");
        assert_eq!(value["notReady"][1]["reason"], "MissingCluster");
        assert_eq!(value["expiringKubeconfigs"][1]["expiresInSeconds"], 36000);
        assert_eq!(value["expiringWithinSeconds"], 259200);
    }

    #[test]
    fn the_window_is_a_go_duration() {
        assert_eq!(parse_window("72h"), Ok(Duration::from_secs(72 * 3600)));
        assert!(parse_window("-1h").is_err());
        assert!(parse_window("3 days").is_err());
    }
}
