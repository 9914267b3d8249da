//! Omni's own Go client against omni-sim: an independent cross-check of the emulator.
//!
//! `omni-client-check` (tools/omni-client, built by `scripts/install-test-tools`) links
//! `github.com/siderolabs/omni/client` at the version pinned in tools/omni-client/go.mod and
//! drives it the way omnictl and an operator do: omnictl's connection preamble, list, template
//! sync of two revisions (each followed by a resync that must find nothing to do), read-back,
//! status wait, kubeconfig, template delete, service-account creation; and omnictl's own `get`
//! and `delete` commands, with the ResourceDefinitions and `yaml_spec` they depend on checked
//! against Omni's code. It prints one JSON line
//! per step; the tests check each step's result and what omni-sim's store holds afterwards. Everything else in this suite is our own reading of Omni's protocol; this is
//! Omni's reading of it, so when the two disagree the emulator is what is wrong.
//!
//! The binary: `$OMNI_CLIENT_CHECK_BIN`, else the cache `scripts/install-test-tools` builds it
//! into, keyed by the pinned client version and a digest of the program's sources (computed here
//! exactly as the script does). A missing binary fails the test with that instruction.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use omni_client::proto::specs::ConfigPatchSpec;
use omni_sim::store::{decode_spec, label, meta};
use omni_sim::types::{label as l, ty};
use omni_sim::{FixedWorkloadProvider, OmniSim, PoolMachine, Role};
use serde_json::Value;
use sha2::{Digest, Sha256};

const CLUSTER: &str = "official";
const CONTROL_PLANE: &str = "6c1f4e1a-3b0e-4c8f-9a51-0d2b7e000001";
const WORKERS: [&str; 2] = [
    "6c1f4e1a-3b0e-4c8f-9a51-0d2b7e000002",
    "6c1f4e1a-3b0e-4c8f-9a51-0d2b7e000003",
];
/// The one machine of the pool that machine class `general` selects.
const CLASS_MACHINE: &str = "6c1f4e1a-3b0e-4c8f-9a51-0d2b7e000004";
const CLASS: &str = "general";
const CLASS_LABEL: &str = "omni-client-check/pool";
const WORKLOAD_API: &str = "https://official.kubernetes.invalid:6443";
/// The Go client's module; its required version in tools/omni-client/go.mod keys the cache.
const CLIENT_MODULE: &str = "github.com/siderolabs/omni/client";
const BIN_ENV: &str = "OMNI_CLIENT_CHECK_BIN";

/// tools/omni-client, the program's module.
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/omni-client")
}

/// The version of `module` in a `go.mod`'s `require` lines (block or single-line form), as
/// scripts/install-test-tools reads it.
fn required_version(go_mod: &str, module: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let (name, version) = match words.next()? {
            "require" => (words.next()?, words.next()?),
            name => (name, words.next()?),
        };
        (name == module && version.starts_with('v')).then(|| version.to_string())
    })
}

/// The script's `source_digest`: SHA-256 over go.mod, go.sum and every `*.go`, in byte order of
/// their names, each as its name, a NUL, then its bytes; the first 12 hex digits.
fn source_digest(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".go"))
        .collect();
    names.extend(["go.mod".to_string(), "go.sum".to_string()]);
    names.sort();
    let mut hasher = Sha256::new();
    for name in &names {
        let path = dir.join(name);
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(
            std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display())),
        );
    }
    hex::encode(hasher.finalize())[..12].to_string()
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/omni-operator/test-tools`, as the script computes it.
fn cache_root() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    base.join("omni-operator/test-tools")
}

/// The binary to run; panics (fails the test) with how to get it when it is missing.
fn binary() -> PathBuf {
    let path = match std::env::var_os(BIN_ENV).filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let dir = source_dir();
            let go_mod = dir.join("go.mod");
            let text = std::fs::read_to_string(&go_mod)
                .unwrap_or_else(|e| panic!("reading {}: {e}", go_mod.display()));
            let version = required_version(&text, CLIENT_MODULE)
                .unwrap_or_else(|| panic!("{} does not require {CLIENT_MODULE}", go_mod.display()));
            cache_root()
                .join("omni-client-check")
                .join(format!("{version}-{}", source_digest(&dir)))
                .join("omni-client-check")
        }
    };
    assert!(
        path.is_file(),
        "omni-client-check is missing at {}: run scripts/install-test-tools (or set {BIN_ENV})",
        path.display()
    );
    path
}

/// A revision of the template the test syncs.
struct Revision {
    kubernetes: &'static str,
    tier: &'static str,
    workers: &'static [&'static str],
}

/// The first revision: a manually allocated control plane and workers, a worker set allocated
/// from a machine class, a small cluster patch, a worker patch large enough that the client
/// sends it zstd-compressed, an install disk (a system patch of the first worker's machine),
/// kernel args for the control plane, system extensions, a manifest group and a health check.
const FIRST: Revision = Revision {
    kubernetes: "1.32.3",
    tier: "official-client",
    workers: &WORKERS,
};

/// The second: a Kubernetes upgrade, a changed cluster patch and manifest, one worker fewer.
const SECOND: Revision = Revision {
    kubernetes: "1.33.3",
    tier: "official-client-v2",
    workers: &[WORKERS[0]],
};

fn write_template(dir: &Path, rev: &Revision) -> PathBuf {
    let mut labels = String::new();
    for i in 0..120 {
        labels.push_str(&format!(
            "          example.com/official-client-{i:03}: value-{i:03}\n"
        ));
    }
    let workers: String = rev.workers.iter().map(|w| format!("  - {w}\n")).collect();
    let template = format!(
        "kind: Cluster
name: {CLUSTER}
systemExtensions:
  - siderolabs/iscsi-tools
kubernetes:
  version: v{kubernetes}
  manifests:
    - name: tier-config
      mode: full
      inline:
        - apiVersion: v1
          kind: ConfigMap
          metadata:
            name: official-client
            namespace: default
          data:
            tier: {tier}
  healthchecks:
    - name: nodes
      job: |
        apiVersion: batch/v1
        kind: Job
        spec:
          backoffLimit: 0
          template:
            spec:
              restartPolicy: Never
              containers:
                - name: check
                  image: registry.k8s.io/kubectl:v1.33.3
                  command: [kubectl, get, nodes]
talos:
  version: v1.10.6
patches:
  - name: cluster-tier
    inline:
      machine:
        nodeLabels:
          example.com/tier: {tier}
---
kind: ControlPlane
kernelArgs:
  - console=ttyS0
machines:
  - {CONTROL_PLANE}
---
kind: Workers
machines:
{workers}patches:
  - name: many-labels
    inline:
      machine:
        nodeLabels:
{labels}---
kind: Workers
name: pool
machineClass:
  name: {CLASS}
  size: 1
---
kind: Machine
name: {w0}
install:
  disk: /dev/vda
",
        kubernetes = rev.kubernetes,
        tier = rev.tier,
        w0 = WORKERS[0],
    );
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, template).unwrap();
    path
}

/// What one run of the program did.
struct Run {
    success: bool,
    code: Option<i32>,
    steps: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The result of step `name`, which must have succeeded.
    fn result(&self, name: &str) -> &Value {
        let step = self
            .steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no report of step {name}: {}", self.describe()));
        assert_eq!(step["ok"], true, "step {name} failed: {}", self.describe());
        &step["result"]
    }

    fn describe(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the program with `key` in its environment (never in argv) and the given steps.
async fn run(endpoint: &str, key: &str, template: Option<&Path>, steps: &[&str]) -> Run {
    let mut cmd = tokio::process::Command::new(binary());
    cmd.arg("--endpoint").arg(endpoint);
    if let Some(t) = template {
        cmd.arg("--template").arg(t);
    }
    cmd.args(steps)
        .env("OMNI_SERVICE_ACCOUNT_KEY", key)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    // The program bounds itself (55 s); this only keeps a wedged child from hanging the suite.
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("omni-client-check did not end within 90 s")
        .expect("running omni-client-check");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let steps = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON report line ({e}): {line}\n{stderr}"))
        })
        .collect();
    let run = Run {
        success: out.status.success(),
        code: out.status.code(),
        steps,
        stdout,
        stderr,
    };
    // The key is a credential: it must appear in no output. The kubeconfig's token neither
    // (omni-sim's tokens are JWT-shaped, so they start with a base64url `{"`).
    for text in [&run.stdout, &run.stderr] {
        assert!(!text.contains(key), "the key leaked: {}", run.describe());
        assert!(!text.contains("eyJ"), "a token leaked: {}", run.describe());
    }
    run
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// IDs of kind `t` in omni-sim's store that carry the cluster's label.
fn stored(sim: &omni_sim::RunningOmniSim, t: &str) -> BTreeSet<String> {
    sim.list(t)
        .iter()
        .filter(|r| label(r, l::CLUSTER) == Some(CLUSTER))
        .map(|r| meta(r).id.clone())
        .collect()
}

/// `(id, role)` of each reported machine set.
fn machine_sets(got: &Value) -> BTreeMap<String, String> {
    got["machine_sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["role"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn map_of<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
}

fn owned(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// omni-sim with the pool the template draws from: the manual machines and one machine of class
/// `general`.
async fn start_sim() -> omni_sim::RunningOmniSim {
    let mut builder = OmniSim::builder()
        .workload_provider(Arc::new(FixedWorkloadProvider(WORKLOAD_API.into())))
        .machine_class(CLASS, &[CLASS_LABEL])
        .machine(PoolMachine {
            id: CLASS_MACHINE.into(),
            labels: BTreeMap::from([(CLASS_LABEL.to_string(), String::new())]),
            ..Default::default()
        });
    for id in std::iter::once(CONTROL_PLANE).chain(WORKERS) {
        builder = builder.machine(PoolMachine {
            id: id.into(),
            ..Default::default()
        });
    }
    builder.start().await.unwrap()
}

#[tokio::test]
async fn omnis_own_client_syncs_waits_for_reads_and_deletes_a_template() {
    let bin = binary(); // fail first, and clearly, when the program is not built
    let sim = start_sim().await;
    let key = sim
        .register_service_account("official-client", Role::Operator)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let template = write_template(dir.path(), &FIRST);
    eprintln!("omni-client-check: {}", bin.display());

    let first = run(
        sim.endpoint(),
        &key,
        Some(&template),
        // status before resync and get: allocation from the machine class is asynchronous,
        // and by the time the cluster is healthy the allocated node exists.
        &[
            "connect",
            "list",
            "versions",
            "sync",
            "status",
            "resync",
            "get",
            "kubeconfig",
        ],
    )
    .await;
    eprintln!("first run:\n{}", first.stdout);
    assert!(first.success, "{}", first.describe());
    assert_eq!(first.steps.len(), 8, "{}", first.describe());

    // connect: omnictl's preamble: the server's version, then its notifications (none here).
    let connect = first.result("connect");
    assert_eq!(connect["backend_api_version"], 2, "{connect}");
    assert_eq!(connect["notifications"], 0, "{connect}");

    // list: authenticated, and nothing there yet.
    assert_eq!(strings(&first.result("list")["clusters"]), BTreeSet::new());

    // versions: the seeded catalogue decodes into the client's types with the right flags.
    let versions = first.result("versions");
    let talos: BTreeMap<String, &Value> = versions["talos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_str().unwrap().to_string(), v))
        .collect();
    assert!(strings(&talos["1.10.6"]["kubernetes"]).contains("1.32.3"));
    assert_eq!(talos["1.8.3"]["deprecated"], true);
    assert_eq!(talos["1.14.0"]["unsupported"], true);
    assert_eq!(talos["1.10.6"]["deprecated"], false);
    assert!(strings(&versions["kubernetes"]).contains("1.32.3"));

    // sync: everything the template declares is created, in the client's order, nothing else.
    let workers_set = format!("{CLUSTER}-workers");
    let cp_set = format!("{CLUSTER}-control-planes");
    let pool_set = format!("{CLUSTER}-pool");
    let cluster_patch = format!("200-cluster-{CLUSTER}-cluster-tier");
    let workers_patch = format!("400-{workers_set}-many-labels");
    let disk_patch = format!("000-cm-{}-install-disk", WORKERS[0]);
    let manifests = format!("200-cluster-{CLUSTER}-tier-config");
    let check = format!("cluster-{CLUSTER}-nodes");
    let extensions = format!("schematic-{CLUSTER}");
    let declared: BTreeSet<String> = [
        format!("Clusters.omni.sidero.dev({CLUSTER})"),
        format!("ExtensionsConfigurations.omni.sidero.dev({extensions})"),
        format!("ConfigPatches.omni.sidero.dev({cluster_patch})"),
        format!("ConfigPatches.omni.sidero.dev({workers_patch})"),
        format!("ConfigPatches.omni.sidero.dev({disk_patch})"),
        format!("KubernetesManifestGroups.omni.sidero.dev({manifests})"),
        format!("KubernetesHealthChecks.omni.sidero.dev({check})"),
        format!("MachineSets.omni.sidero.dev({cp_set})"),
        format!("MachineSets.omni.sidero.dev({workers_set})"),
        format!("MachineSets.omni.sidero.dev({pool_set})"),
        format!("MachineSetNodes.omni.sidero.dev({CONTROL_PLANE})"),
        format!("MachineSetNodes.omni.sidero.dev({})", WORKERS[0]),
        format!("MachineSetNodes.omni.sidero.dev({})", WORKERS[1]),
        format!("KernelArgs.omni.sidero.dev({CONTROL_PLANE})"),
    ]
    .into_iter()
    .collect();
    let created: BTreeSet<String> = declared.iter().map(|r| format!("creating {r}")).collect();
    assert_eq!(strings(&first.result("sync")["actions"]), created);

    // resync: what omni-sim returns is what the client wrote, and the node omni-sim allocated
    // from the machine class is recognised as the controller's, not the template's.
    assert_eq!(strings(&first.result("resync")["pending"]), BTreeSet::new());

    // get: the client reads back what it wrote.
    let got = first.result("get");
    assert_eq!(got["cluster"]["talos_version"], "1.10.6");
    assert_eq!(got["cluster"]["kubernetes_version"], "1.32.3");
    assert_eq!(got["cluster"]["managed_by_templates"], true);
    assert_eq!(got["cluster"]["phase"], "running");
    assert_eq!(
        machine_sets(got),
        owned(&[
            (&cp_set, "controlplane"),
            (&workers_set, "worker"),
            (&pool_set, "worker"),
        ])
    );
    let nodes: BTreeMap<String, String> = map_of(&got["machine_set_nodes"]);
    assert_eq!(
        nodes,
        owned(&[
            (CONTROL_PLANE, &cp_set),
            (WORKERS[0], &workers_set),
            (WORKERS[1], &workers_set),
            (CLASS_MACHINE, &pool_set),
        ])
    );
    let patches: BTreeMap<String, bool> = got["config_patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_string(),
                p["compressed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        patches,
        BTreeMap::from([
            (disk_patch.clone(), false),
            (cluster_patch.clone(), false),
            (workers_patch.clone(), true),
        ])
    );
    let got_extensions: BTreeMap<String, Vec<String>> = map_of(&got["extensions"]);
    assert_eq!(
        got_extensions,
        BTreeMap::from([(
            extensions.clone(),
            vec!["siderolabs/iscsi-tools".to_string()]
        )])
    );
    let got_manifests: BTreeMap<String, String> = map_of(&got["manifest_groups"]);
    assert_eq!(got_manifests, owned(&[(&manifests, "FULL")]));
    assert_eq!(
        strings(&got["health_checks"]),
        BTreeSet::from([check.clone()])
    );
    let got_args: BTreeMap<String, Vec<String>> = map_of(&got["kernel_args"]);
    assert_eq!(
        got_args,
        BTreeMap::from([(CONTROL_PLANE.to_string(), vec!["console=ttyS0".to_string()])])
    );

    // status: the client's own health rule (every status RUNNING/ready/Done) was met in time.
    let status = first.result("status");
    assert_eq!(status["phase"], "RUNNING", "{status}");
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["machines"]["total"], 4, "{status}");
    assert_eq!(status["machines"]["healthy"], 4, "{status}");
    assert_eq!(status["kubernetes_upgrade"]["phase"], "Done", "{status}");
    assert_eq!(status["talos_upgrade"]["phase"], "Done", "{status}");

    // kubeconfig: parsed by client-go; it points at the cluster's workload API.
    let kubeconfig = first.result("kubeconfig");
    assert_eq!(kubeconfig["server"], WORKLOAD_API);
    assert_eq!(kubeconfig["has_token"], true);
    assert!(
        kubeconfig["context"].as_str().unwrap().contains(CLUSTER),
        "{kubeconfig}"
    );

    // omni-sim's store holds what the client created, as the client created it.
    let cluster = sim.get(ty::CLUSTER, CLUSTER).expect("cluster stored");
    assert!(
        meta(&cluster)
            .annotations
            .contains_key(l::MANAGED_BY_TEMPLATES),
        "{:?}",
        meta(&cluster)
    );
    assert_eq!(
        stored(&sim, ty::MACHINE_SET),
        BTreeSet::from([cp_set.clone(), workers_set.clone(), pool_set.clone()])
    );
    let machines: BTreeSet<String> = [CONTROL_PLANE, WORKERS[0], WORKERS[1], CLASS_MACHINE]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(stored(&sim, ty::MACHINE_SET_NODE), machines);
    assert_eq!(
        stored(&sim, ty::CONFIG_PATCH),
        BTreeSet::from([disk_patch, cluster_patch.clone(), workers_patch.clone()])
    );
    assert_eq!(
        stored(&sim, ty::MANIFEST_GROUP),
        BTreeSet::from([manifests.clone()])
    );
    assert_eq!(stored(&sim, ty::HEALTH_CHECK), BTreeSet::from([check]));
    assert_eq!(
        stored(&sim, ty::EXTENSIONS_CONFIGURATION),
        BTreeSet::from([extensions])
    );
    let big: ConfigPatchSpec =
        decode_spec(&sim.get(ty::CONFIG_PATCH, &workers_patch).unwrap()).unwrap();
    assert!(
        big.data.is_empty() && !big.compressed_data.is_empty(),
        "the large patch arrives compressed"
    );
    for id in &machines {
        let machine = sim.get(ty::MACHINE_STATUS, id).unwrap();
        assert_eq!(label(&machine, l::CLUSTER), Some(CLUSTER), "{id}");
    }

    // A second revision: updates of the Cluster, a patch and a manifest group, and a
    // scale-down, which the client does itself (teardown, then destroy once the finalizers are
    // gone, as a watch shows them).
    let template = write_template(dir.path(), &SECOND);
    let second = run(
        sim.endpoint(),
        &key,
        Some(&template),
        &["sync", "resync", "get"],
    )
    .await;
    eprintln!("second run:\n{}", second.stdout);
    assert!(second.success, "{}", second.describe());
    let removed = format!("MachineSetNodes.omni.sidero.dev({})", WORKERS[1]);
    assert_eq!(
        strings(&second.result("sync")["actions"]),
        BTreeSet::from([
            format!("updating Clusters.omni.sidero.dev({CLUSTER})"),
            format!("updating ConfigPatches.omni.sidero.dev({cluster_patch})"),
            format!("updating KubernetesManifestGroups.omni.sidero.dev({manifests})"),
            format!("tearing down {removed}"),
            format!("destroyed {removed}"),
        ])
    );
    assert_eq!(
        strings(&second.result("resync")["pending"]),
        BTreeSet::new()
    );
    let got = second.result("get");
    assert_eq!(got["cluster"]["kubernetes_version"], "1.33.3");
    let nodes: BTreeMap<String, String> = map_of(&got["machine_set_nodes"]);
    assert_eq!(
        nodes,
        owned(&[
            (CONTROL_PLANE, &cp_set),
            (WORKERS[0], &workers_set),
            (CLASS_MACHINE, &pool_set),
        ])
    );
    // omni-sim starts the upgrade and reports the removed worker gone a moment after the sync,
    // and the client's wait returns at once for a cluster that is still healthy from before:
    // ask until the status shows the second revision (bounded), so the checks below do not
    // depend on which comes first.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let third = run(sim.endpoint(), &key, Some(&template), &["status"]).await;
        assert!(third.success, "{}", third.describe());
        let status = third.result("status").clone();
        let settled = status["kubernetes_upgrade"]["last_upgrade_version"] == "1.33.3"
            && status["kubernetes_upgrade"]["phase"] == "Done"
            && status["machines"]["total"] == 3;
        if settled || tokio::time::Instant::now() >= deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["phase"], "RUNNING", "{status}");
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["machines"]["total"], 3, "{status}");
    assert_eq!(status["kubernetes_upgrade"]["phase"], "Done", "{status}");
    assert_eq!(
        status["kubernetes_upgrade"]["last_upgrade_version"], "1.33.3",
        "{status}"
    );
    assert_eq!(status["talos_upgrade"]["phase"], "Done", "{status}");
    let tier: ConfigPatchSpec =
        decode_spec(&sim.get(ty::CONFIG_PATCH, &cluster_patch).unwrap()).unwrap();
    assert!(tier.data.contains("official-client-v2"), "{}", tier.data);
    assert!(sim.get(ty::MACHINE_SET_NODE, WORKERS[1]).is_none());
    let freed = sim.get(ty::MACHINE_STATUS, WORKERS[1]).unwrap();
    assert_eq!(
        label(&freed, l::CLUSTER),
        None,
        "the removed worker is free"
    );

    // delete: the client tears everything down, waits for it to go, and reads nothing back.
    let third = run(sim.endpoint(), &key, Some(&template), &["delete", "list"]).await;
    eprintln!("third run:\n{}", third.stdout);
    assert!(third.success, "{}", third.describe());
    let deleted = third.result("delete");
    assert_eq!(strings(&deleted["remaining"]), BTreeSet::new());
    // The client tears down only the Cluster (everything else of it carries the cluster's
    // label) and relies on Omni's teardown cascade for the rest; kernel args, which are the
    // machine's, it only releases from the template (drops their managed-by annotation).
    let kernel_args = format!("KernelArgs.omni.sidero.dev({CONTROL_PLANE})");
    assert_eq!(
        strings(&deleted["actions"]),
        BTreeSet::from([
            format!("updating {kernel_args}"),
            format!("tearing down Clusters.omni.sidero.dev({CLUSTER})"),
            format!("destroyed Clusters.omni.sidero.dev({CLUSTER})"),
        ])
    );
    assert_eq!(strings(&third.result("list")["clusters"]), BTreeSet::new());
    assert!(sim.get(ty::CLUSTER, CLUSTER).is_none());
    assert!(sim.get(ty::CLUSTER_STATUS, CLUSTER).is_none());
    for t in [
        ty::MACHINE_SET,
        ty::MACHINE_SET_NODE,
        ty::CONFIG_PATCH,
        ty::MANIFEST_GROUP,
        ty::HEALTH_CHECK,
        ty::EXTENSIONS_CONFIGURATION,
    ] {
        assert_eq!(stored(&sim, t), BTreeSet::new(), "{t}");
    }
    let args = sim
        .get(ty::KERNEL_ARGS, CONTROL_PLANE)
        .expect("kernel args stay");
    assert!(
        !meta(&args)
            .annotations
            .contains_key(l::MANAGED_BY_TEMPLATES),
        "{:?}",
        meta(&args)
    );
    for id in &machines {
        let machine = sim.get(ty::MACHINE_STATUS, id).unwrap();
        assert_eq!(label(&machine, l::CLUSTER), None, "{id} is free again");
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn omnis_own_client_is_refused_with_a_key_omni_sim_does_not_know() {
    binary();
    let sim = OmniSim::builder().start().await.unwrap();
    // A well-formed key, registered with another instance only.
    let elsewhere = OmniSim::builder().start().await.unwrap();
    let stranger = elsewhere
        .register_service_account("stranger", Role::Admin)
        .unwrap();
    elsewhere.shutdown().await;

    let refused = run(sim.endpoint(), &stranger, None, &["list", "versions"]).await;
    assert!(!refused.success, "{}", refused.describe());
    assert_eq!(refused.code, Some(1), "{}", refused.describe());
    assert_eq!(refused.steps.len(), 1, "the run stops at the first failure");
    let step = &refused.steps[0];
    assert_eq!(step["step"], "list");
    assert_eq!(step["ok"], false);
    let error = step["error"].as_str().unwrap();
    assert!(
        error.contains("Unauthenticated") && error.contains("invalid signature"),
        "{error}"
    );
    assert!(
        refused.stderr.contains("step list failed"),
        "{}",
        refused.describe()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn omnis_own_client_creates_a_service_account_and_uses_its_key() {
    binary();
    let sim = OmniSim::builder().start().await.unwrap();
    let admin = sim
        .register_service_account("official-admin", Role::Admin)
        .unwrap();

    let created = run(sim.endpoint(), &admin, None, &["serviceaccount"]).await;
    assert!(created.success, "{}", created.describe());
    let result = created.result("serviceaccount");
    // The key omnictl's generator made is registered under its fingerprint, as a Reader.
    let id = result["public_key_id"].as_str().unwrap();
    let key = sim
        .store()
        .try_get(omni_sim::types::DEFAULT_NS, ty::PUBLIC_KEY, id)
        .unwrap_or_else(|| panic!("no PublicKey {id}"));
    let spec: omni_client::proto::specs::PublicKeySpec = decode_spec(&key).unwrap();
    assert_eq!(spec.role, "Reader");
    assert_eq!(
        spec.identity.unwrap().email,
        "omni-client-check-reader@serviceaccount.omni.sidero.dev"
    );
    // The new key reads, and its write is refused for its role.
    assert_eq!(result["clusters_seen"], 0);
    let refused = result["write_refused"].as_str().unwrap();
    assert!(
        refused.contains("code = PermissionDenied")
            && refused.contains(r#"insufficient role: "Reader""#),
        "{refused}"
    );
    assert!(sim.get(ty::CLUSTER, "omni-client-check-denied").is_none());
    sim.shutdown().await;
}

/// The rows of a table omnictl printed, each as its cells.
fn table(output: &Value) -> Vec<Vec<String>> {
    output["output"]
        .as_array()
        .unwrap_or_else(|| panic!("not a table: {output}"))
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// The documents (YAML) or objects (JSON) omnictl printed.
fn documents(output: &Value) -> &Vec<Value> {
    output["output"]
        .as_array()
        .unwrap_or_else(|| panic!("no documents: {output}"))
}

#[tokio::test]
async fn omnictl_gets_and_deletes_through_resource_definitions() {
    binary();
    let sim = start_sim().await;
    let key = sim
        .register_service_account("official-omnictl", Role::Operator)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let template = write_template(dir.path(), &FIRST);
    // status first: the set allocated from the machine class exists once the cluster is healthy.
    let synced = run(sim.endpoint(), &key, Some(&template), &["sync", "status"]).await;
    assert!(synced.success, "{}", synced.describe());

    // omnictl's own command code, in the program's process: every type name it is given goes
    // through the ResourceDefinitions, every resource it prints through yaml_spec.
    let ran = run(sim.endpoint(), &key, Some(&template), &["omnictl"]).await;
    eprintln!("omnictl run:\n{}", ran.stdout);
    assert!(ran.success, "{}", ran.describe());
    let commands = ran.result("omnictl")["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 8, "{}", ran.describe());

    // get rd: the definitions themselves, with their aliases column.
    let rd = table(&commands[0]);
    assert_eq!(
        rd[0][..5],
        ["NAMESPACE", "TYPE", "ID", "VERSION", "ALIASES"],
        "{rd:?}"
    );
    let row = rd
        .iter()
        .find(|r| r[2] == "clusters.omni.sidero.dev")
        .unwrap_or_else(|| panic!("no definition of Clusters: {rd:?}"));
    assert_eq!(row[..2], ["meta", "ResourceDefinition"], "{row:?}");
    assert_eq!(row[4], "cluster", "{row:?}");

    // get clusters: the table with the definition's print columns, read from yaml_spec.
    let clusters = table(&commands[1]);
    assert_eq!(
        clusters[0],
        [
            "NAMESPACE",
            "TYPE",
            "ID",
            "VERSION",
            "TALOS VERSION",
            "KUBERNETES VERSION"
        ],
        "{clusters:?}"
    );
    assert_eq!(clusters.len(), 2, "{clusters:?}");
    assert_eq!(
        clusters[1][..3],
        ["default", "Cluster", CLUSTER],
        "{clusters:?}"
    );
    assert_eq!(clusters[1][4..], ["1.10.6", "1.32.3"], "{clusters:?}");

    // get cluster <id> -o json: metadata and the spec under Omni's YAML names.
    let cluster = documents(&commands[2]);
    assert_eq!(cluster.len(), 1, "{cluster:?}");
    assert_eq!(cluster[0]["metadata"]["id"], CLUSTER);
    assert_eq!(cluster[0]["metadata"]["type"], ty::CLUSTER);
    assert_eq!(cluster[0]["spec"]["talosversion"], "1.10.6");
    assert_eq!(cluster[0]["spec"]["kubernetesversion"], "1.32.3");

    // get machinesets -o yaml -l <cluster>: the three sets, the pool's allocation included.
    let sets: BTreeMap<String, &Value> = documents(&commands[3])
        .iter()
        .map(|d| (d["metadata"]["id"].as_str().unwrap().to_string(), d))
        .collect();
    let pool_set = format!("{CLUSTER}-pool");
    assert_eq!(
        sets.keys().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            format!("{CLUSTER}-control-planes"),
            format!("{CLUSTER}-workers"),
            pool_set.clone(),
        ])
    );
    let allocation = &sets[&pool_set]["spec"]["machineallocation"];
    assert_eq!(allocation["name"], CLASS, "{allocation}");
    assert_eq!(allocation["machinecount"], 1, "{allocation}");

    // get clusterstatus <id> -o yaml: a status type; Omni prints enums as their numbers.
    let status = documents(&commands[4]);
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["spec"]["phase"], 3, "RUNNING: {status:?}");
    assert_eq!(status[0]["spec"]["ready"], true, "{status:?}");

    // get talosversions: a type any signature may read.
    let versions = table(&commands[5]);
    assert!(versions.iter().any(|r| r[2] == "1.10.6"), "{versions:?}");

    // delete cluster <id>: TeardownAndDestroy, which waits for the teardown cascade.
    let deleted = &commands[6];
    assert!(
        strings(&deleted["stderr"]).contains(&format!("destroyed {} {CLUSTER}", ty::CLUSTER)),
        "{deleted}"
    );
    assert_eq!(documents(&commands[7]), &Vec::<Value>::new());
    assert!(sim.get(ty::CLUSTER, CLUSTER).is_none());
    assert_eq!(stored(&sim, ty::MACHINE_SET), BTreeSet::new());
    sim.shutdown().await;
}

#[tokio::test]
async fn resource_definitions_and_yaml_specs_are_omnis() {
    binary();
    let sim = start_sim().await;
    let key = sim
        .register_service_account("official-definitions", Role::Operator)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let template = write_template(dir.path(), &FIRST);
    let ran = run(
        sim.endpoint(),
        &key,
        Some(&template),
        &["sync", "status", "definitions", "yamlspec"],
    )
    .await;
    eprintln!("definitions run:\n{}", ran.stdout);
    assert!(ran.success, "{}", ran.describe());

    // Each definition is the one Omni's client makes for its type; omni-sim serves two types
    // Omni v1.9.3's client does not know.
    let definitions = ran.result("definitions");
    let types = strings(&definitions["types"]);
    for t in [
        ty::CLUSTER,
        ty::MACHINE_SET,
        ty::CONFIG_PATCH,
        ty::CLUSTER_STATUS,
        ty::TALOS_VERSION,
        ty::SYS_VERSION,
        ty::RESOURCE_DEFINITION,
    ] {
        assert!(types.contains(t), "{t}: {definitions}");
    }
    assert!(!types.contains(ty::PUBLIC_KEY), "{definitions}");
    assert_eq!(
        strings(&definitions["not_in_client"]),
        BTreeSet::from([
            ty::HEALTH_CHECK_STATUS.to_string(),
            ty::MACHINE_INSTALL_DISK_CONFIG.to_string(),
        ])
    );

    // yaml_spec of everything the key may read is what Omni makes of the same proto_spec.
    let yaml = ran.result("yamlspec");
    let checked: BTreeMap<String, u64> = map_of(&yaml["checked"]);
    for (t, n) in [
        (ty::CLUSTER, 1),
        (ty::MACHINE_SET, 3),
        (ty::MACHINE_SET_NODE, 4),
        (ty::CONFIG_PATCH, 3),
        (ty::KERNEL_ARGS, 1),
        (ty::EXTENSIONS_CONFIGURATION, 1),
        (ty::MANIFEST_GROUP, 1),
        (ty::HEALTH_CHECK, 1),
        (ty::CLUSTER_STATUS, 1),
        (ty::MACHINE_SET_STATUS, 3),
        (ty::CLUSTER_MACHINE_STATUS, 4),
        (ty::MACHINE_STATUS, 4),
        (ty::MANIFESTS_STATUS, 1),
        (ty::RESOURCE_DEFINITION, types.len() as u64),
    ] {
        assert_eq!(checked.get(t), Some(&n), "{t}: {yaml}");
    }
    assert!(checked[ty::TALOS_VERSION] > 0, "{yaml}");
    // Nothing here sets a field newer than the client, so every key is one Omni's YAML has.
    assert_eq!(strings(&yaml["extra_keys"]), BTreeSet::new(), "{yaml}");
    assert_eq!(
        strings(&yaml["refused"]),
        BTreeSet::from([ty::IDENTITY.to_string(), ty::USER.to_string()])
    );
    sim.shutdown().await;
}
