//! Failing and waiting objects are quiet: once an object reports a failure, it writes its status
//! again only when the status content changes (a new attempt time alone is not a change), its
//! own status write never triggers another reconcile, and retries of Omni, helm and workload
//! clusters follow the backoff (5 s · 2ⁿ) or the documented re-check interval.
//!
//! Before this was fixed, a failing pass stamped a fresh `lastAttemptTime`, whose write was a
//! watch event on the object itself: an OmniHelmRelease waiting for its kubeconfig rewrote its
//! status thousands of times in 30 s, and an OmniCluster that Omni refused sent ~100 rejected
//! writes to Omni per second. Every failure reason the operator can reach in this environment is
//! held for one window (60 s; `QUIET_WINDOW_SECS` overrides) with all of them failing at once.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::RunningKubeSim;
use omni_operator::api::OmniCluster;
use omni_operator::controllers::backoff_delay;
use omni_operator::domain::tenancy::{Tenancy, Timeouts};
use serde_json::{Value, json};
use support::chart_server::{ChartServer, Entry, Serve, digest, index, package};
use support::env::{Env, KEY_FIELD, KEY_SECRET, NS};
use support::{condition, create_json, helm_bin, kube_sim, ready, wait_for};

const GROUP: &str = "omni.texashpc.com";
/// gRPC `Unavailable`, as omni-sim's failure hook takes it.
const UNAVAILABLE: i32 = 14;

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    support::free_addr().port()
}

/// A helm wrapper that logs each invocation's first argument (the command) to `log`, so the
/// test can count how often the operator ran helm.
fn counting_helm(dir: &Path, log: &Path) -> PathBuf {
    let script = dir.join("helm");
    let text = format!(
        "#!/bin/sh\necho \"$1\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        helm_bin().display()
    );
    std::fs::write(&script, text).unwrap_or_else(|e| panic!("write helm wrapper: {e}"));
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    script
}

/// Helm commands that change a release (what a retry of a failing release runs).
fn helm_changes(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| matches!(*l, "install" | "upgrade" | "rollback" | "uninstall"))
        .count()
}

/// An object of one of the operator's kinds in the test namespace.
fn ours(kind: &str, name: &str, spec: Value) -> Value {
    support::stack::ours(kind, NS, name, spec)
}

/// One failing or waiting object: its plural resource, name, the status and reason of `Ready`
/// it must hold, and whether it only waits (for its cluster, machines, a resume): then it makes
/// no write and no Event at all while it waits.
#[derive(Debug, Clone, Copy)]
struct Case {
    resource: &'static str,
    name: &'static str,
    ready: &'static str,
    reason: &'static str,
    waits: bool,
}

const fn case(resource: &'static str, name: &'static str, reason: &'static str) -> Case {
    Case {
        resource,
        name,
        ready: "False",
        reason,
        waits: false,
    }
}

/// An object that waits for its cluster or its machines (`Reconciling=True`).
const fn waiting(resource: &'static str, name: &'static str, reason: &'static str) -> Case {
    Case {
        waits: true,
        ..case(resource, name, reason)
    }
}

/// A suspended object that never reported: `Ready` unknown, reason `Suspended`.
const fn suspended(resource: &'static str, name: &'static str) -> Case {
    Case {
        ready: "Unknown",
        ..waiting(resource, name, "Suspended")
    }
}

/// Every failure this test holds: (plural, name, reason).
const CASES: &[Case] = &[
    case("omniconnections", "unreachable", "ConnectionFailed"),
    case("omniconnections", "keyless", "MissingSecret"),
    case("omniclusters", "lonely", "MissingConnection"),
    case("omniclusters", "negative", "ValidationFailed"),
    case("omniclusters", "typo", "OmniRejected"),
    case("omniclusters", "unreadable", "StatusFailed"),
    case("omniclusters", "stranded", "DeleteFailed"),
    // Held plans wait for a person, as quietly as failures.
    case("omniclusters", "guarded", "ApprovalRequired"),
    case("omniclusters", "observer", "PlanOnly"),
    case("omniclusters", "adoptee", "AdoptionDiff"),
    case("omnicontrolplanes", "astray-cp", "MissingCluster"),
    case("omnikubeconfigexports", "lost", "MissingCluster"),
    case("omnikubeconfigexports", "grabby", "TargetNotOwned"),
    case("omnikubeconfigexports", "refused", "ExportFailed"),
    case("omnikubeconfigexports", "overlong", "ValidationFailed"),
    case("omnikubeconfigexports", "abroad", "ValidationFailed"),
    case("omnisecretsyncs", "sourceless", "MissingSecret"),
    case("omnisecretsyncs", "clusterless", "MissingCluster"),
    case("omnisecretsyncs", "offline", "SyncFailed"),
    case("omnisecretsyncs", "squatted", "TargetNotOwned"),
    case("omnisecretsyncs", "garbage", "ValidationFailed"),
    case("omnisecretsyncs", "tarpitted", "Timeout"),
    case("omnisecretsyncs", "denied", "AccessDenied"),
    // A namespace selector with a Secret in its way in one namespace, and a data template that
    // fails: as quiet as a single target.
    case("omnisecretsyncs", "crowded", "TargetNotOwned"),
    case("omnisecretsyncs", "miswritten", "TemplateFailed"),
    // A namespace selector with nothing to do: its re-checks (every `RESYNC`) write nothing,
    // to the management cluster or the workload cluster ([`SPREAD_COPIES`]).
    Case {
        resource: "omnisecretsyncs",
        name: "spread",
        ready: "True",
        reason: "Synced",
        waits: true,
    },
    case("omnihelmreleases", "waiting", "MissingSecret"),
    case("omnihelmreleases", "homeless", "MissingCluster"),
    case("omnihelmreleases", "malformed", "ValidationFailed"),
    case("omnihelmreleases", "unfetchable", "ChartFetchFailed"),
    case("omnihelmreleases", "cleartext", "ValidationFailed"),
    case("omnihelmreleases", "tarpitted", "Timeout"),
    case("omnihelmreleases", "undeletable", "MissingSecret"),
    // Sets whose generated object fails, whose template does not render, or whose name is
    // taken: as quiet as the objects they generate.
    case("omnihelmreleasesets", "fleet-waiting", "SetProgressing"),
    case("omnihelmreleases", "fleet-waiting-healthy", "MissingSecret"),
    case("omnisecretsyncsets", "fleet-typo", "TemplateFailed"),
    case(
        "omnikubeconfigexportsets",
        "fleet-squatted",
        "NameCollision",
    ),
    // Waiting states: a cluster whose machine went away, its child and dependants waiting for
    // its Ready, and suspended objects.
    waiting("omniclusters", "starved", "WaitingForMachines"),
    waiting("omnicontrolplanes", "starved-cp", "ClusterNotReady"),
    waiting("omnikubeconfigexports", "early", "ClusterNotReady"),
    waiting("omnisecretsyncs", "eager", "ClusterNotReady"),
    waiting("omnihelmreleases", "impatient", "ClusterNotReady"),
    suspended("omnikubeconfigexports", "paused-export"),
    suspended("omnisecretsyncs", "paused-sync"),
    suspended("omnihelmreleases", "paused-release"),
    // Releases that wait: for a dependency, for their cluster's health, after a spent budget.
    case("omnihelmreleases", "dependant", "DependencyNotReady"),
    case("omnihelmreleases", "gated", "ClusterNotHealthy"),
    case("omnihelmreleases", "spent", "RetriesExhausted"),
];

/// How often the syncs re-check their copies here: several idle passes of `spread` fall into
/// the window.
const RESYNC: Duration = Duration::from_secs(5);

/// The workload copies of the namespace-selector syncs (namespace, name): never written
/// during the window.
const SPREAD_COPIES: &[(&str, &str)] = &[
    ("crowd-ok", "crowded-copy"),
    ("crowd", "spread-copy"),
    ("crowd-ok", "spread-copy"),
];

/// The releases of [`CASES`] that wait rather than retry: they make no write at all.
const WAITING: [&str; 3] = ["dependant", "gated", "spent"];

/// How many retries the backoff allows in `window` at the fastest jitter (0.8).
fn backoff_steps(window: Duration) -> u64 {
    let mut elapsed = Duration::ZERO;
    let mut steps = 0;
    loop {
        elapsed += backoff_delay(steps as u32 + 1, 0.8);
        if elapsed > window {
            return steps;
        }
        steps += 1;
    }
}

fn window() -> Duration {
    let secs = std::env::var("QUIET_WINDOW_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

fn dynamic(client: &kube::Client, resource: &str) -> Api<DynamicObject> {
    let kind = match resource {
        "omniconnections" => "OmniConnection",
        "omniclusters" => "OmniCluster",
        "omnicontrolplanes" => "OmniControlPlane",
        "omnikubeconfigexports" => "OmniKubeconfigExport",
        "omnisecretsyncs" => "OmniSecretSync",
        "omnihelmreleases" => "OmniHelmRelease",
        "omnihelmreleasesets" => "OmniHelmReleaseSet",
        "omnisecretsyncsets" => "OmniSecretSyncSet",
        "omnikubeconfigexportsets" => "OmniKubeconfigExportSet",
        other => panic!("no kind for {other}"),
    };
    let ar = ApiResource {
        group: GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{GROUP}/v1alpha1"),
        kind: kind.into(),
        plural: resource.into(),
    };
    Api::namespaced_with(client.clone(), NS, &ar)
}

fn ready_reason(obj: &DynamicObject) -> Option<(String, String)> {
    condition(obj, "Ready").map(|(s, r, _)| (s, r))
}

async fn wait_reason(client: &kube::Client, c: Case) -> DynamicObject {
    wait_for(&dynamic(client, c.resource), c.name, c.reason, |o| {
        ready_reason(o) == Some((c.ready.into(), c.reason.into()))
    })
    .await
}

/// Events about `name` so far, counting each repetition of a series.
async fn events_about(client: &kube::Client, name: &str) -> u64 {
    Api::<K8sEvent>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"))
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u64))
        .sum()
}

/// The shared environment (its OmniConnection `omni` is the one healthy connection) plus a
/// workload cluster, a tarpit (a workload API server that accepts and never answers) and the
/// log of the helm commands the operator ran.
struct Quiet {
    env: Env,
    workload: RunningKubeSim,
    _tarpit: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// A repository serving chart `demo` 0.1.0, for a release whose Helm run itself fails.
    repo: ChartServer,
    helm_log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Quiet {
    async fn start() -> Quiet {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let helm_log = dir.path().join("helm.log");
        // Short time bounds, so the tarpit's objects reach their failure before the window.
        let tenancy = Tenancy {
            timeouts: Timeouts {
                connect: Duration::from_secs(3),
                read: Duration::from_secs(3),
                request: Duration::from_secs(6),
                ..Timeouts::default()
            },
            ..Tenancy::default()
        };
        let env = Env::builder()
            .helm(
                counting_helm(dir.path(), &helm_log),
                dir.path().join("work"),
            )
            .tenancy(tenancy)
            // So that what a ServiceAccount may not read is denied (the operator stays admin).
            .rbac()
            .secret_sync_resync(RESYNC)
            .start()
            .await;
        let (tarpit, held) = support::chart_server::tarpit().await;
        let repo = ChartServer::start(Serve::default()).await;
        let chart = package("demo", "0.1.0", "hello");
        repo.put(
            "/index.yaml",
            index(&[Entry {
                name: "demo",
                version: "0.1.0",
                digest: &digest(&chart),
                url: "demo-0.1.0.tgz",
            }]),
            "application/yaml",
        );
        repo.put("/demo-0.1.0.tgz", chart, "application/gzip");
        let (workload, workload_client) = kube_sim().await;
        let apps: Namespace = serde_json::from_value(json!({"metadata": {"name": "apps"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        Api::<Namespace>::all(workload_client.clone())
            .create(&PostParams::default(), &apps)
            .await
            .unwrap_or_else(|e| panic!("workload namespace: {e}"));
        // Two namespaces a namespace selector matches.
        for name in ["crowd", "crowd-ok"] {
            let ns: Namespace = serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {"quiet-pull": "yes"}}}),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            Api::<Namespace>::all(workload_client.clone())
                .create(&PostParams::default(), &ns)
                .await
                .unwrap_or_else(|e| panic!("workload namespace: {e}"));
        }
        // Secrets in the workload cluster that no OmniSecretSync created.
        for (ns, name) in [("apps", "squatted-copy"), ("crowd", "crowded-copy")] {
            let squatter: Secret = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns},
                "stringData": {"owner": "someone else"},
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            Api::<Secret>::namespaced(workload_client.clone(), ns)
                .create(&PostParams::default(), &squatter)
                .await
                .unwrap_or_else(|e| panic!("squatter: {e}"));
        }
        let kubeconfig = |server: String| {
            Kubeconfig::new(server, "admin", Credential::Token("workload-token".into()))
                .to_yaml()
                .unwrap_or_else(|e| panic!("kubeconfig: {e}"))
        };
        for (name, data) in [
            ("source", json!({"password": "copied"})),
            (
                "workload-kubeconfig",
                json!({"kubeconfig": kubeconfig(workload.base_url.clone())}),
            ),
            (
                "offline-kubeconfig",
                json!({"kubeconfig": kubeconfig(format!("http://127.0.0.1:{}", closed_port()))}),
            ),
            (
                "garbage-kubeconfig",
                json!({"kubeconfig": "not: [a kubeconfig"}),
            ),
            (
                "tarpit-kubeconfig",
                json!({"kubeconfig": kubeconfig(format!("http://{tarpit}"))}),
            ),
            (
                "repo-credentials",
                json!({"username": "reader", "password": "repo-password"}),
            ),
            // An export target that the operator did not create.
            ("grabby-target", json!({"kubeconfig": "hand-made"})),
        ] {
            env.create_secret(name, data).await;
        }
        Quiet {
            env,
            workload,
            _tarpit: held,
            repo,
            helm_log,
            _dir: dir,
        }
    }

    /// Creates every failing object of [`CASES`] (and what they need), deletes the ones whose
    /// failure is a blocked deletion, and waits until each reports its reason.
    async fn fail_everything(&self) {
        let c = &self.env.client;
        let auth = json!({"serviceAccountSecretRef": {"name": KEY_SECRET, "key": KEY_FIELD}});
        create_json(
            c,
            ours(
                "OmniConnection",
                "unreachable",
                json!({
                    "endpoint": format!("http://127.0.0.1:{}", closed_port()), "auth": auth,
                }),
            ),
        )
        .await;
        create_json(c, ours("OmniConnection", "keyless", json!({
            "endpoint": self.env.omni.endpoint(),
            "auth": {"serviceAccountSecretRef": {"name": "no-such-secret", "key": "serviceAccountKey"}},
        }))).await;

        let cluster = |name: &str, extra: Value| {
            let mut spec = json!({
                "connectionRef": {"name": "omni"},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
                "syncInterval": "5m",
            });
            if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
                s.extend(e);
            }
            ours("OmniCluster", name, spec)
        };
        let control_plane = |cluster: &str, machine: &str| {
            ours(
                "OmniControlPlane",
                &format!("{cluster}-cp"),
                json!({
                    "clusterRef": {"name": cluster}, "machines": [machine],
                }),
            )
        };
        create_json(c, cluster("healthy", json!({}))).await;
        create_json(
            c,
            control_plane("healthy", "aaaaaaaa-0000-4000-8000-000000000001"),
        )
        .await;
        create_json(
            c,
            cluster("lonely", json!({"connectionRef": {"name": "nope"}})),
        )
        .await;
        create_json(c, cluster("negative", json!({"syncInterval": "-1m"}))).await;
        create_json(c, cluster("typo", json!({"talos": {"version": "v1.99.0"}}))).await;
        create_json(
            c,
            control_plane("typo", "aaaaaaaa-0000-4000-8000-000000000002"),
        )
        .await;
        create_json(c, cluster("unreadable", json!({"syncInterval": "1s"}))).await;
        create_json(
            c,
            control_plane("unreadable", "aaaaaaaa-0000-4000-8000-000000000003"),
        )
        .await;
        create_json(
            c,
            cluster("stranded", json!({"connectionRef": {"name": "gone"}})),
        )
        .await;
        // ApprovalRequired: a synced cluster whose patch is then removed.
        create_json(
            c,
            cluster(
                "guarded",
                json!({"changePolicy": {"destructive": "RequireApproval"},
                       "patches": [{"name": "p", "inline": {"machine": {}}}]}),
            ),
        )
        .await;
        create_json(
            c,
            control_plane("guarded", "aaaaaaaa-0000-4000-8000-000000000004"),
        )
        .await;
        // PlanOnly: observe-only, never synced.
        create_json(
            c,
            cluster("observer", json!({"changePolicy": {"mode": "Plan"}})),
        )
        .await;
        create_json(
            c,
            control_plane("observer", "aaaaaaaa-0000-4000-8000-000000000005"),
        )
        .await;
        // AdoptionDiff: an existing Omni cluster that differs from the manifests.
        self.env.omni.put(support::foreign_cluster("adoptee"));
        let mut adoptee = cluster("adoptee", json!({}));
        adoptee["metadata"]["annotations"] = json!({"omni.texashpc.com/adopt": "true"});
        create_json(c, adoptee).await;
        create_json(
            c,
            control_plane("adoptee", "aaaaaaaa-0000-4000-8000-000000000006"),
        )
        .await;
        create_json(c, ours("OmniControlPlane", "astray-cp", json!({
            "clusterRef": {"name": "ghost"}, "machines": ["aaaaaaaa-0000-4000-8000-000000000009"],
        }))).await;

        let export = |name: &str, cluster: &str, target: &str| {
            ours(
                "OmniKubeconfigExport",
                name,
                json!({
                    "clusterRef": {"name": cluster},
                    "targetSecretRef": {"name": target},
                    "serviceAccount": {"user": format!("{name}-user"), "groups": ["automation"]},
                    "ttl": "24h",
                    "renewBefore": "4h",
                    "deletionPolicy": "Delete",
                }),
            )
        };
        create_json(c, export("lost", "ghost", "lost-target")).await;
        create_json(c, export("grabby", "healthy", "grabby-target")).await;
        let mut overlong = export("overlong", "healthy", "overlong-target");
        overlong["spec"]["ttl"] = "87600h".into();
        create_json(c, overlong).await;
        let mut abroad = export("abroad", "healthy", "abroad-target");
        abroad["spec"]["targetSecretRef"]["namespace"] = "elsewhere".into();
        create_json(c, abroad).await;

        let sync = |name: &str, cluster: &str, source: &str, kubeconfig: &str| {
            ours(
                "OmniSecretSync",
                name,
                json!({
                    "clusterRef": {"name": cluster},
                    "kubeconfigSecretRef": {"name": kubeconfig, "key": "kubeconfig"},
                    "sourceSecretRef": {"name": source},
                    "targetSecretRef": {"name": format!("{name}-copy"), "namespace": "apps"},
                    "deletionPolicy": "Delete",
                }),
            )
        };
        create_json(
            c,
            sync(
                "sourceless",
                "healthy",
                "no-such-source",
                "workload-kubeconfig",
            ),
        )
        .await;
        create_json(
            c,
            sync("clusterless", "ghost", "source", "workload-kubeconfig"),
        )
        .await;
        create_json(
            c,
            sync("offline", "healthy", "source", "offline-kubeconfig"),
        )
        .await;
        create_json(
            c,
            sync("squatted", "healthy", "source", "workload-kubeconfig"),
        )
        .await;
        create_json(
            c,
            sync("garbage", "healthy", "source", "garbage-kubeconfig"),
        )
        .await;
        create_json(
            c,
            sync("tarpitted", "healthy", "source", "tarpit-kubeconfig"),
        )
        .await;
        let mut denied = sync("denied", "healthy", "source", "workload-kubeconfig");
        denied["spec"]["serviceAccountName"] = "nobody".into();
        create_json(c, denied).await;
        let selected = json!({"matchLabels": {"quiet-pull": "yes"}});
        for name in ["crowded", "spread"] {
            let mut spread = sync(name, "healthy", "source", "workload-kubeconfig");
            spread["spec"]["targetSecretRef"] =
                json!({"name": format!("{name}-copy"), "namespaceSelector": selected});
            create_json(c, spread).await;
        }
        let mut miswritten = sync("miswritten", "healthy", "source", "workload-kubeconfig");
        miswritten["spec"]["data"] =
            json!([{"key": "k", "template": "{{ sources.source.no_such_key }}"}]);
        create_json(c, miswritten).await;

        let release = |name: &str, cluster: &str, kubeconfig: &str, extra: Value| {
            let mut spec = json!({
                "clusterRef": {"name": cluster},
                "kubeconfigSecretRef": {"name": kubeconfig},
                "namespace": "default",
                "chart": {
                    "repository": format!("http://127.0.0.1:{}/charts", closed_port()),
                    "chart": "demo",
                    "version": "0.1.0",
                },
            });
            if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
                s.extend(e);
            }
            ours("OmniHelmRelease", name, spec)
        };
        create_json(
            c,
            release("waiting", "healthy", "not-yet-exported", json!({})),
        )
        .await;
        create_json(
            c,
            release("homeless", "ghost", "workload-kubeconfig", json!({})),
        )
        .await;
        create_json(
            c,
            release(
                "malformed",
                "healthy",
                "workload-kubeconfig",
                json!({"timeout": "0s"}),
            ),
        )
        .await;
        create_json(
            c,
            release("unfetchable", "healthy", "workload-kubeconfig", json!({})),
        )
        .await;
        create_json(
            c,
            release("undeletable", "healthy", "vanished-kubeconfig", json!({})),
        )
        .await;
        create_json(
            c,
            release(
                "cleartext",
                "healthy",
                "workload-kubeconfig",
                json!({"chart": {
                    "repository": format!("http://127.0.0.1:{}/charts", closed_port()),
                    "chart": "demo", "version": "0.1.0",
                    "credentialsSecretRef": {"name": "repo-credentials"},
                }}),
            ),
        )
        .await;
        create_json(
            c,
            release(
                "dependant",
                "healthy",
                "workload-kubeconfig",
                json!({"dependsOn": [{"name": "waiting"}]}),
            ),
        )
        .await;
        create_json(
            c,
            release(
                "gated",
                "lonely",
                "workload-kubeconfig",
                // Past the start gate (its cluster never syncs), held by the health gate.
                json!({"startWhen": "ClusterExists", "clusterHealth": {"require": "Running"}}),
            ),
        )
        .await;
        // Its one install attempt fails (the chart is fetched and verified, but its namespace
        // does not exist in the workload cluster), with no retry allowed. A chart that cannot
        // be fetched would not do: a fetch failure spends no budget (no Helm ran).
        create_json(
            c,
            release(
                "spent",
                "healthy",
                "workload-kubeconfig",
                json!({
                    "namespace": "no-such-namespace",
                    "chart": {"repository": self.repo.url, "chart": "demo", "version": "0.1.0"},
                    "install": {"remediation": {"retries": 0}},
                }),
            ),
        )
        .await;
        create_json(
            c,
            release("tarpitted", "healthy", "tarpit-kubeconfig", json!({})),
        )
        .await;

        // StatusFailed: once synced, Omni's ClusterStatus becomes undecodable (pinned so Omni's
        // controllers leave it alone).
        let clusters = Api::<OmniCluster>::namespaced(c.clone(), NS);
        wait_for(&clusters, "unreadable", "Ready", ready).await;
        support::make_cluster_status_unreadable(&self.env.omni, "unreadable");
        // ExportFailed: Omni refuses to mint kubeconfigs from now on.
        self.env
            .omni
            .inject_failure(omni_sim::methods::KUBECONFIG, UNAVAILABLE.into(), 1_000_000);
        wait_for(&clusters, "healthy", "Ready", ready).await;
        create_json(c, export("refused", "healthy", "refused-target")).await;

        wait_for(&clusters, "guarded", "Ready", ready).await;
        dynamic(c, "omniclusters")
            .patch(
                "guarded",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"patches": []}})),
            )
            .await
            .unwrap_or_else(|e| panic!("remove the patch: {e}"));

        // Waiting for machines: a cluster whose one machine disconnects once it runs; then its
        // dependants, which wait for its Ready before they first act.
        let starved_machine = "aaaaaaaa-0000-4000-8000-000000000007";
        create_json(c, cluster("starved", json!({}))).await;
        create_json(c, control_plane("starved", starved_machine)).await;
        wait_for(&clusters, "starved", "Ready", ready).await;
        assert!(
            self.env
                .omni
                .set_machine_disconnected(starved_machine, true)
        );
        wait_reason(c, waiting("omniclusters", "starved", "WaitingForMachines")).await;
        create_json(c, export("early", "starved", "early-target")).await;
        create_json(c, sync("eager", "starved", "source", "workload-kubeconfig")).await;
        create_json(
            c,
            release("impatient", "starved", "workload-kubeconfig", json!({})),
        )
        .await;
        // Suspended from the start, on a Ready cluster.
        let mut paused = export("paused-export", "healthy", "paused-target");
        paused["spec"]["suspend"] = json!(true);
        create_json(c, paused).await;
        let mut paused = sync("paused-sync", "healthy", "source", "workload-kubeconfig");
        paused["spec"]["suspend"] = json!(true);
        create_json(c, paused).await;
        create_json(
            c,
            release(
                "paused-release",
                "healthy",
                "workload-kubeconfig",
                json!({"suspend": true}),
            ),
        )
        .await;

        // Blocked deletions: the cluster's connection and the release's kubeconfig are missing.
        for (resource, name) in [
            ("omniclusters", "stranded"),
            ("omnihelmreleases", "undeletable"),
        ] {
            let api = dynamic(c, resource);
            wait_for(&api, name, "a first failure", |o| {
                ready_reason(o).is_some_and(|(s, _)| s == "False")
            })
            .await;
            api.delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("delete {name}: {e}"));
        }
        self.fail_sets().await;
        for case in CASES {
            wait_reason(c, *case).await;
        }
    }

    /// The failing sets, all selecting the cluster `healthy`.
    async fn fail_sets(&self) {
        let c = &self.env.client;
        dynamic(c, "omniclusters")
            .patch(
                "healthy",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"labels": {"fleet": "quiet"}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("label healthy: {e}"));
        let selector = json!({"matchLabels": {"fleet": "quiet"}});
        let waiting = json!({"name": "not-yet-exported"});
        create_json(
            c,
            ours(
                "OmniHelmReleaseSet",
                "fleet-waiting",
                json!({
                    "clusterSelector": selector,
                    "template": {
                        "namespace": "apps",
                        "chart": {"repository": "http://127.0.0.1:1", "chart": "demo", "version": "1.0.0"},
                    },
                    "credentials": {"kubeconfigSecretRef": waiting},
                }),
            ),
        )
        .await;
        create_json(
            c,
            ours(
                "OmniSecretSyncSet",
                "fleet-typo",
                json!({
                    "clusterSelector": selector,
                    "template": {
                        "sourceSecretRef": {"name": "source"},
                        "targetSecretRef": {"name": "{{ cluster.nmae }}", "namespace": "apps"},
                        "deletionPolicy": "Delete",
                    },
                    "credentials": {"kubeconfigSecretRef": waiting},
                }),
            ),
        )
        .await;
        // The name the export set would generate for `healthy`, taken by an export of its own.
        create_json(
            c,
            ours(
                "OmniKubeconfigExport",
                "fleet-squatted-healthy",
                json!({
                    "clusterRef": {"name": "lonely"},
                    "targetSecretRef": {"name": "squatter-target"},
                    "serviceAccount": {"user": "automation", "groups": ["automation"]},
                    "ttl": "24h",
                    "deletionPolicy": "Delete",
                }),
            ),
        )
        .await;
        create_json(
            c,
            ours(
                "OmniKubeconfigExportSet",
                "fleet-squatted",
                json!({
                    "clusterSelector": selector,
                    "template": {
                        "targetSecretRef": {"name": "{{ cluster.name }}-registration"},
                        "serviceAccount": {"user": "argocd", "groups": ["argocd"]},
                        "ttl": "24h",
                        "format": "ArgoCDCluster",
                    },
                }),
            ),
        )
        .await;
    }

    async fn shutdown(self) {
        self.env.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_objects_write_only_when_their_status_changes() {
    let env = Quiet::start().await;
    env.fail_everything().await;
    // Let reconciles queued while the fixtures were created run out.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut events_before = Vec::new();
    for case in CASES {
        events_before.push(events_about(&env.env.client, case.name).await);
    }
    env.env.kube.hooks().reset();
    env.workload.hooks().reset();
    let omni_writes = env.env.omni.writes_total();
    let omni_mints = env.env.omni.call_count(
        omni_sim::methods::KUBECONFIG,
        omni_sim::Outcome::Error(UNAVAILABLE.into()),
    );
    let helm_runs = helm_changes(&env.helm_log);

    let window = window();
    tokio::time::sleep(window).await;

    // One write for a status that really changed (e.g. a retry with a new error text) plus one
    // per backoff step is the most a failing object may cost.
    let bound = 1 + backoff_steps(window);
    let mut loud = Vec::new();
    for (case, before) in CASES.iter().zip(events_before) {
        let writes = env
            .env
            .kube
            .hooks()
            .writes_to_object(case.resource, Some(NS), case.name);
        let events = events_about(&env.env.client, case.name).await - before;
        if writes > bound || events > writes {
            loud.push(format!(
                "{}/{} ({}): {writes} writes, {events} Events in {window:?}",
                case.resource, case.name, case.reason
            ));
        }
        let now = dynamic(&env.env.client, case.resource)
            .get(case.name)
            .await
            .unwrap_or_else(|e| panic!("get {}: {e}", case.name));
        assert_eq!(
            ready_reason(&now),
            Some((case.ready.into(), case.reason.into())),
            "{} left its failure during the window",
            case.name
        );
        if case.waits && (writes > 0 || events > 0) {
            loud.push(format!(
                "{}/{} waits ({}) but made {writes} writes and {events} Events in {window:?}",
                case.resource, case.name, case.reason
            ));
        }
    }
    assert!(
        loud.is_empty(),
        "failing objects are not quiet (bound {bound} writes per object):\n{}",
        loud.join("\n")
    );
    for (ns, name) in SPREAD_COPIES {
        let writes = env
            .workload
            .hooks()
            .writes_to_object("secrets", Some(ns), name);
        assert_eq!(
            writes, 0,
            "{ns}/{name} was written {writes} times while in sync"
        );
    }
    // Waiting for another object, or for a spec change after a spent budget, retries
    // nothing: not a single write.
    for name in WAITING {
        let writes = env
            .env
            .kube
            .hooks()
            .writes_to_object("omnihelmreleases", Some(NS), name);
        assert_eq!(writes, 0, "{name} wrote {writes} times while waiting");
    }
    let omni_writes = env.env.omni.writes_total() - omni_writes;
    assert!(
        omni_writes <= bound,
        "{omni_writes} Omni writes for one refused cluster in {window:?} (bound {bound})"
    );
    let omni_mints = env.env.omni.call_count(
        omni_sim::methods::KUBECONFIG,
        omni_sim::Outcome::Error(UNAVAILABLE.into()),
    ) - omni_mints;
    assert!(
        omni_mints <= bound,
        "{omni_mints} refused kubeconfig requests in {window:?} (bound {bound})"
    );
    let helm_runs = helm_changes(&env.helm_log) - helm_runs;
    assert!(
        helm_runs as u64 <= bound,
        "helm ran {helm_runs} release commands for one failing release in {window:?} (bound {bound})"
    );
    env.shutdown().await;
}

#[test]
fn the_backoff_allows_four_retries_a_minute() {
    assert_eq!(backoff_steps(Duration::from_secs(60)), 4);
    assert_eq!(backoff_steps(Duration::from_secs(3)), 0);
}
