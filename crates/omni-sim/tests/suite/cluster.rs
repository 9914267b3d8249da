//! Validations (docs/omni-wire.md#write-validations), controller emulation
//! (docs/omni-wire.md#what-omni-sims-controllers-do) and kubeconfig minting
//! (docs/omni-wire.md#service-account-kubeconfigs).

use crate::common;

use common::{Signer, create_req, eventually, res};
use omni_client::proto::cosi::resource::{
    DestroyOptions, DestroyRequest, GetRequest, Resource, TeardownOptions, TeardownRequest,
    UpdateOptions, UpdateRequest, state_client::StateClient,
};
use omni_client::proto::management::{CreateServiceAccountRequest, KubeconfigRequest};
use omni_client::proto::specs::{
    ClusterSpec, ClusterStatusSpec, ConfigPatchSpec, ExtensionsConfigurationSpec, KernelArgsSpec,
    KubernetesHealthCheckSpec, KubernetesManifestGroupSpec, MachineSetNodeSpec, MachineSetPhase,
    MachineSetSpec, MachineSetStatusSpec, cluster_spec, cluster_status_spec,
    kubernetes_manifest_group_spec, machine_set_spec,
};
use omni_sim::store::{decode_spec, meta};
use omni_sim::{OmniSim, PoolMachine, Role, RunningOmniSim, WorkloadEndpoint, WorkloadProvider};
use tonic::Code;

const CLUSTER: &str = "Clusters.omni.sidero.dev";
const MS: &str = "MachineSets.omni.sidero.dev";
const MSN: &str = "MachineSetNodes.omni.sidero.dev";
const CP: &str = "ConfigPatches.omni.sidero.dev";
const L_CLUSTER: &str = "omni.sidero.dev/cluster";
const L_SET: &str = "omni.sidero.dev/machine-set";
const L_CP: &str = "omni.sidero.dev/role-controlplane";
const L_W: &str = "omni.sidero.dev/role-worker";

async fn setup(b: omni_sim::OmniSimBuilder) -> (RunningOmniSim, StateClient<common::Svc>, Signer) {
    // Machine IDs in these tests are not seeded: let them connect.
    let sim = b.auto_register_machines(true).start().await.unwrap();
    let signer = Signer::from_encoded(&sim.register_service_account("ci", Role::Operator).unwrap());
    let client = common::state(sim.endpoint(), signer.proper()).await;
    (sim, client, signer)
}

fn cluster(name: &str, talos: &str, kube: &str) -> Resource {
    res(
        CLUSTER,
        name,
        &[],
        &ClusterSpec {
            talos_version: talos.into(),
            kubernetes_version: kube.into(),
            features: Some(cluster_spec::Features::default()),
            backup_configuration: None,
        },
    )
}

fn set(cluster: &str, id: &str, role: &str, alloc: Option<(&str, u32)>) -> Resource {
    res(
        MS,
        id,
        &[(L_CLUSTER, cluster), (role, "")],
        &MachineSetSpec {
            update_strategy: machine_set_spec::UpdateStrategy::Rolling as i32,
            machine_allocation: alloc.map(|(name, n)| machine_set_spec::MachineAllocation {
                name: name.into(),
                machine_count: n,
                allocation_type: 0,
            }),
            ..Default::default()
        },
    )
}

fn node(cluster: &str, set: &str, role: &str, id: &str) -> Resource {
    res(
        MSN,
        id,
        &[(L_CLUSTER, cluster), (role, ""), (L_SET, set)],
        &MachineSetNodeSpec {},
    )
}

fn patch(cluster: &str, id: &str, data: &str) -> Resource {
    res(
        CP,
        id,
        &[(L_CLUSTER, cluster)],
        &ConfigPatchSpec {
            data: data.into(),
            compressed_data: vec![],
        },
    )
}

async fn invalid(c: &mut StateClient<common::Svc>, r: Resource, needle: &str) {
    let e = c.create(create_req(r)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("failed to validate: "), "{e:?}");
    assert!(e.message().contains(needle), "{needle:?} not in {e:?}");
}

#[tokio::test]
async fn validations() {
    let (sim, mut c, _) = setup(OmniSim::builder().machine_class("gpu", &["gpu"])).await;
    invalid(
        &mut c,
        cluster("bad name", "1.9.5", "1.32.3"),
        "cluster name",
    )
    .await;
    invalid(&mut c, cluster("x", "1.9", "1.32.3"), "talos version").await;
    invalid(&mut c, cluster("x", "1.8.0", "1.32.3"), "not supported").await;
    invalid(&mut c, cluster("x", "1.9.5", "1.35.0"), "not compatible").await;
    // Omni v1.10: the public discovery service can be turned off only for clusters created
    // with Talos 1.14 or newer.
    invalid(
        &mut c,
        res(
            CLUSTER,
            "x",
            &[],
            &ClusterSpec {
                talos_version: "1.13.3".into(),
                kubernetes_version: "1.35.1".into(),
                features: Some(cluster_spec::Features {
                    use_embedded_discovery_service: true,
                    disable_public_discovery_service: true,
                    ..Default::default()
                }),
                backup_configuration: None,
            },
        ),
        "the public discovery service can only be configured for clusters created with Talos 1.14 or newer",
    )
    .await;
    // Omni v1.10's version rules: below the minimum (deprecated) and beyond the newest
    // supported minor (unsupported) are refused for new clusters.
    invalid(
        &mut c,
        cluster("x", "1.8.3", "1.31.7"),
        r#"talos version "1.8.3" is no longer supported"#,
    )
    .await;
    invalid(
        &mut c,
        cluster("x", "1.14.0", "1.35.1"),
        r#"talos version "1.14.0" is not supported by this Omni release"#,
    )
    .await;
    c.create(create_req(cluster("demo", "1.13.3", "1.35.1")))
        .await
        .unwrap();

    // Disk encryption cannot change after create.
    let cur = c
        .get(GetRequest {
            namespace: "default".into(),
            r#type: CLUSTER.into(),
            id: "demo".into(),
            options: None,
        })
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    let mut enc = cur.clone();
    let mut spec: ClusterSpec = decode_spec(&enc).unwrap();
    spec.features.as_mut().unwrap().disk_encryption = true;
    enc.spec.as_mut().unwrap().proto_spec = prost::Message::encode_to_vec(&spec);
    let e = c
        .update(UpdateRequest {
            new_resource: Some(enc),
            options: Some(UpdateOptions::default()),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("disk encryption"));

    // Config patches: forbidden fields, YAML, os:admin.
    invalid(
        &mut c,
        patch("demo", "p1", "cluster:\n  clusterName: evil\n"),
        "cluster.clusterName",
    )
    .await;
    invalid(
        &mut c,
        patch("demo", "p1", "machine:\n  token: x\n"),
        "machine.token",
    )
    .await;
    invalid(&mut c, patch("demo", "p1", "machine: [unclosed\n"), "YAML").await;
    invalid(
        &mut c,
        patch("demo", "p1", "machine:\n  features:\n    kubernetesTalosAPIAccess:\n      allowedRoles: [os:admin]\n"),
        "os:admin",
    )
    .await;
    c.create(create_req(patch("demo", "p1", "machine:\n  install:\n    disk: /dev/vda\n---\ncluster:\n  allowSchedulingOnControlPlanes: true\n")))
        .await
        .unwrap();

    // Machine sets.
    invalid(
        &mut c,
        set("demo", "demo-w", L_W, None).tap(|r| {
            r.metadata.as_mut().unwrap().labels.remove(L_CLUSTER);
        }),
        "omni.sidero.dev/cluster",
    )
    .await;
    invalid(&mut c, set("demo", "other-w", L_W, None), "prefix").await;
    invalid(
        &mut c,
        set("demo", "demo-cp", L_CP, None),
        "demo-control-planes",
    )
    .await;
    invalid(
        &mut c,
        set("demo", "demo-control-planes", L_W, None),
        "must not use",
    )
    .await;
    invalid(
        &mut c,
        set("demo", "demo-w", L_W, None).tap(|r| {
            r.metadata
                .as_mut()
                .unwrap()
                .labels
                .insert(L_CP.into(), String::new());
        }),
        "exactly one",
    )
    .await;
    invalid(
        &mut c,
        set("demo", "demo-w", L_W, Some(("nope", 1))),
        "machine class",
    )
    .await;
    invalid(&mut c, set("ghost", "ghost-w", L_W, None), "does not exist").await;
    c.create(create_req(set("demo", "demo-control-planes", L_CP, None)))
        .await
        .unwrap();
    c.create(create_req(set("demo", "demo-gpu", L_W, Some(("gpu", 1)))))
        .await
        .unwrap();

    // Nodes.
    invalid(&mut c, node("demo", "demo-gpu", L_W, "m1"), "machine class").await;
    invalid(
        &mut c,
        node("demo", "demo-missing", L_W, "m1"),
        "does not exist",
    )
    .await;
    invalid(
        &mut c,
        node("demo", "demo-control-planes", L_CP, "m1").tap(|r| {
            r.metadata
                .as_mut()
                .unwrap()
                .annotations
                .insert("omni.sidero.dev/locked".into(), String::new());
        }),
        "control plane",
    )
    .await;
    c.create(create_req(node("demo", "demo-control-planes", L_CP, "m1")))
        .await
        .unwrap();

    // Kernel args, manifests, health checks, extensions.
    let many: Vec<String> = (0..65).map(|i| format!("a{i}")).collect();
    invalid(
        &mut c,
        res(
            "KernelArgs.omni.sidero.dev",
            "m1",
            &[],
            &KernelArgsSpec { args: many },
        ),
        "too many",
    )
    .await;
    invalid(
        &mut c,
        res(
            "KubernetesManifestGroups.omni.sidero.dev",
            "g",
            &[(L_CLUSTER, "demo")],
            &KubernetesManifestGroupSpec {
                data: "kind: A\napiVersion: v1\n".into(),
                mode: 0,
                compressed_data: vec![],
            },
        ),
        "mode",
    )
    .await;
    let full = kubernetes_manifest_group_spec::Mode::Full as i32;
    invalid(
        &mut c,
        res(
            "KubernetesManifestGroups.omni.sidero.dev",
            "g",
            &[(L_CLUSTER, "demo"), ("omni.sidero.dev/system-manifest", "")],
            &KubernetesManifestGroupSpec {
                data: "kind: A\napiVersion: v1\n".into(),
                mode: full,
                compressed_data: vec![],
            },
        ),
        "system-manifest",
    )
    .await;
    invalid(
        &mut c,
        res(
            "KubernetesManifestGroups.omni.sidero.dev",
            "g",
            &[(L_CLUSTER, "demo")],
            &KubernetesManifestGroupSpec {
                data: "a: [".into(),
                mode: full,
                compressed_data: vec![],
            },
        ),
        "manifests",
    )
    .await;
    invalid(
        &mut c,
        res(
            "KubernetesHealthChecks.omni.sidero.dev",
            "Bad_ID",
            &[(L_CLUSTER, "demo")],
            &KubernetesHealthCheckSpec {
                job: "kind: Job\napiVersion: batch/v1\n".into(),
                interval: None,
            },
        ),
        "cannot be used to build the runner name \"omni-healthcheck-Bad_ID\"",
    )
    .await;
    invalid(
        &mut c,
        res(
            "ExtensionsConfigurations.omni.sidero.dev",
            "schematic-x",
            &[],
            &ExtensionsConfigurationSpec {
                extensions: vec!["siderolabs/iscsi-tools".into()],
            },
        ),
        "omni.sidero.dev/cluster",
    )
    .await;
    sim.shutdown().await;
}

trait Tap: Sized {
    fn tap(self, f: impl FnOnce(&mut Self)) -> Self;
}
impl Tap for Resource {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}

fn status<M: prost::Message + Default>(
    sim: &RunningOmniSim,
    ty: &str,
    id: &str,
) -> Option<(Resource, M)> {
    let r = sim.get(ty, id)?;
    let s = decode_spec(&r).ok()?;
    Some((r, s))
}

#[tokio::test]
async fn cluster_becomes_ready_and_teardown_cascades() {
    let b = OmniSim::builder()
        .machine_class("gpu", &["gpu = yes"])
        .machine(PoolMachine {
            id: "g1".into(),
            labels: [("gpu".into(), "yes".into())].into(),
            disconnected: false,
        })
        .machine(PoolMachine {
            id: "g2".into(),
            labels: [("gpu".into(), "yes".into())].into(),
            disconnected: false,
        })
        .machine(PoolMachine {
            id: "c1".into(),
            labels: Default::default(),
            disconnected: false,
        });
    let (sim, mut c, _) = setup(b).await;
    c.create(create_req(cluster("demo", "1.9.5", "1.32.3")))
        .await
        .unwrap();
    c.create(create_req(set("demo", "demo-control-planes", L_CP, None)))
        .await
        .unwrap();
    c.create(create_req(set("demo", "demo-gpu", L_W, Some(("gpu", 1)))))
        .await
        .unwrap();
    c.create(create_req(node("demo", "demo-control-planes", L_CP, "c1")))
        .await
        .unwrap();
    c.create(create_req(patch(
        "demo",
        "200-cluster-demo-x",
        "machine:\n  env:\n    A: b\n",
    )))
    .await
    .unwrap();

    // Statuses exist with the cluster label and a controller owner.
    for ty in [
        "ClusterStatuses.omni.sidero.dev",
        "ClusterUUIDs.omni.sidero.dev",
        "LoadBalancerStatuses.omni.sidero.dev",
        "KubernetesUpgradeStatuses.omni.sidero.dev",
        "TalosUpgradeStatuses.omni.sidero.dev",
    ] {
        let r = eventually(|| sim.get(ty, "demo")).await;
        assert!(!meta(&r).owner.is_empty(), "{ty}");
        assert_eq!(meta(&r).labels[L_CLUSTER], "demo", "{ty}");
    }
    let cluster_res = eventually(|| {
        sim.get(CLUSTER, "demo")
            .filter(|r| !meta(r).finalizers.is_empty())
    })
    .await;
    assert_eq!(meta(&cluster_res).finalizers, ["ClusterController"]);

    // The cluster becomes RUNNING and ready once sets are allocated.
    let (_, st): (_, ClusterStatusSpec) = eventually(|| {
        status::<ClusterStatusSpec>(&sim, "ClusterStatuses.omni.sidero.dev", "demo")
            .filter(|(_, s)| s.ready)
    })
    .await;
    assert_eq!(st.phase, cluster_status_spec::Phase::Running as i32);
    let (msr, ms): (_, MachineSetStatusSpec) =
        status(&sim, "MachineSetStatuses.omni.sidero.dev", "demo-gpu").unwrap();
    assert_eq!(ms.phase, MachineSetPhase::Running as i32);
    assert_eq!(meta(&msr).labels[L_W], "");
    assert!(
        sim.get(
            "ControlPlaneStatuses.omni.sidero.dev",
            "demo-control-planes"
        )
        .is_some()
    );
    // Exactly one gpu machine was allocated, as a controller-owned node.
    let gpu_nodes: Vec<_> = sim
        .list(MSN)
        .into_iter()
        .filter(|n| meta(n).labels.get(L_SET).map(String::as_str) == Some("demo-gpu"))
        .collect();
    assert_eq!(gpu_nodes.len(), 1);
    assert!(
        meta(&gpu_nodes[0])
            .labels
            .contains_key("omni.sidero.dev/managed-by-machine-set-node-controller")
    );
    assert!(
        sim.get("ClusterMachineStatuses.omni.sidero.dev", "c1")
            .is_some()
    );

    // Once settled, an idle simulator changes nothing (no controller churn).
    let mut feed = sim.store().subscribe();
    let quiet = tokio::time::timeout(std::time::Duration::from_secs(1), feed.recv()).await;
    assert!(
        quiet.is_err(),
        "unexpected store change while idle: {quiet:?}"
    );
    let writes = sim.writes_total();

    // Tests can flip a status; the controllers leave it alone.
    sim.set_cluster_status("demo", cluster_status_spec::Phase::ScalingUp, false)
        .unwrap();

    let flipped =
        eventually(|| status::<ClusterStatusSpec>(&sim, "ClusterStatuses.omni.sidero.dev", "demo"))
            .await;
    assert!(!flipped.1.ready);
    assert_eq!(
        flipped.1.phase,
        cluster_status_spec::Phase::ScalingUp as i32
    );
    assert_eq!(sim.writes_total(), writes);

    // Tear the cluster down: sets, nodes, patches and statuses go, then the finalizer.
    c.teardown(TeardownRequest {
        namespace: "default".into(),
        r#type: CLUSTER.into(),
        id: "demo".into(),
        options: Some(TeardownOptions::default()),
    })
    .await
    .unwrap();
    eventually(|| {
        sim.get(CLUSTER, "demo")
            .filter(|r| meta(r).finalizers.is_empty())
    })
    .await;
    assert!(sim.list(MS).is_empty());
    assert!(sim.list(MSN).is_empty());
    assert!(sim.list(CP).is_empty());
    assert!(
        sim.list("ClusterMachineStatuses.omni.sidero.dev")
            .is_empty()
    );
    assert!(sim.get("ClusterStatuses.omni.sidero.dev", "demo").is_none());
    assert!(sim.get("ClusterUUIDs.omni.sidero.dev", "demo").is_none());
    assert!(!sim.machine_labels("g1").unwrap().contains_key(L_CLUSTER));
    c.destroy(DestroyRequest {
        namespace: "default".into(),
        r#type: CLUSTER.into(),
        id: "demo".into(),
        options: Some(DestroyOptions::default()),
    })
    .await
    .unwrap();
    sim.shutdown().await;
}

#[tokio::test]
async fn destroy_machines_path_objects() {
    let (sim, mut c, _) = setup(OmniSim::builder()).await;
    c.create(create_req(cluster("demo", "1.9.5", "1.32.3")))
        .await
        .unwrap();
    c.create(create_req(set("demo", "demo-control-planes", L_CP, None)))
        .await
        .unwrap();
    c.create(create_req(node("demo", "demo-control-planes", L_CP, "m1")))
        .await
        .unwrap();
    // The machine joins the pool, gets the cluster label and a Link.
    eventually(|| {
        sim.machine_labels("m1")
            .filter(|l| l.get(L_CLUSTER).map(String::as_str) == Some("demo"))
    })
    .await;
    assert!(sim.set_machine_disconnected("m1", true));
    let link = sim.get("Links.omni.sidero.dev", "m1").unwrap();
    assert_eq!(meta(&link).owner, "");
    // Tearing down the Link (owner "") removes the machine from Omni.
    let r = c
        .teardown(TeardownRequest {
            namespace: "default".into(),
            r#type: "Links.omni.sidero.dev".into(),
            id: "m1".into(),
            options: Some(TeardownOptions::default()),
        })
        .await
        .unwrap();
    assert!(r.into_inner().destroy_ready);
    eventually(|| {
        sim.get("MachineStatuses.omni.sidero.dev", "m1")
            .is_none()
            .then_some(())
    })
    .await;
    c.destroy(DestroyRequest {
        namespace: "default".into(),
        r#type: "Links.omni.sidero.dev".into(),
        id: "m1".into(),
        options: Some(DestroyOptions::default()),
    })
    .await
    .unwrap();
    sim.shutdown().await;
}

struct Provider;
impl WorkloadProvider for Provider {
    fn endpoint(&self, cluster: &str) -> WorkloadEndpoint {
        WorkloadEndpoint {
            server: format!("https://127.0.0.1:6443/{cluster}"),
            ca_data: Some(b"CA".to_vec()),
        }
    }
}

fn kreq(user: &str, ttl: Option<i64>) -> KubeconfigRequest {
    KubeconfigRequest {
        service_account: true,
        service_account_ttl: ttl.map(|s| prost_types::Duration {
            seconds: s,
            nanos: 0,
        }),
        service_account_user: user.into(),
        service_account_groups: vec!["system:masters".into()],
        ..Default::default()
    }
}

#[tokio::test]
async fn kubeconfig_rules_and_token() {
    let (sim, mut c, signer) = setup(OmniSim::builder()).await;
    sim.set_workload_provider(std::sync::Arc::new(Provider));
    let reader = Signer::from_encoded(&sim.register_service_account("r", Role::Reader).unwrap());
    let ep = sim.endpoint().to_string();

    let mut m = common::management(&ep, reader.proper(), Some("demo")).await;
    let e = m.kubeconfig(kreq("ops", Some(3600))).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(
        e.message(),
        "unauthorized: access denied: insufficient role: \"Reader\""
    );

    let mut none = common::management(&ep, signer.proper(), None).await;
    let e = none.kubeconfig(kreq("ops", Some(3600))).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "cluster name is not in context")
    );

    let mut m = common::management(&ep, signer.proper(), Some("demo")).await;
    for (req, msg) in [
        (kreq("", Some(3600)), "service account user name is not set"),
        (kreq("ops", None), "service account ttl is not set"),
        (
            kreq("ops", Some(0)),
            "service account ttl is must be positive",
        ),
        (
            kreq("ops", Some(87_600 * 3600 + 1)),
            "service account ttl is too long (max allowed: 87600h0m0s)",
        ),
    ] {
        let e = m.kubeconfig(req).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (Code::InvalidArgument, msg));
    }
    let e = m.kubeconfig(kreq("ops", Some(3600))).await.unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
    assert!(
        e.message().starts_with("failed to get cluster UUID: "),
        "{e:?}"
    );

    c.create(create_req(cluster("demo", "1.9.5", "1.32.3")))
        .await
        .unwrap();
    eventually(|| sim.get("ClusterUUIDs.omni.sidero.dev", "demo")).await;
    let kc = m
        .kubeconfig(kreq("ops", Some(87_600 * 3600)))
        .await
        .unwrap()
        .into_inner()
        .kubeconfig;
    let kc = String::from_utf8(kc).unwrap();
    assert!(
        kc.contains("server: \"https://127.0.0.1:6443/demo\""),
        "{kc}"
    );
    assert!(kc.contains("certificate-authority-data: Q0E="));
    assert!(kc.contains("current-context: \"ci-demo-ops\""));
    let token = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap();
    let claims = omni_sim::token::decode(&serde_json::from_str::<String>(token).unwrap()).unwrap();
    assert_eq!(claims.user, "ops");
    assert_eq!(claims.groups, ["system:masters"]);
    assert_eq!(claims.cluster, "demo");
    assert_eq!(claims.issuer, "omni-ci-service-account-issuer");
    assert_eq!(
        (claims.expires_at - claims.issued_at).get_seconds(),
        87_600 * 3600
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn create_service_account_needs_admin() {
    let sim = OmniSim::builder().start().await.unwrap();
    let admin = Signer::from_encoded(&sim.register_service_account("root", Role::Admin).unwrap());
    let op = Signer::from_encoded(&sim.register_service_account("op", Role::Operator).unwrap());
    let ep = sim.endpoint().to_string();
    // A key without an expiration is refused (Omni requires a lifetime).
    let key = omni_sim::auth::generate_key("new").unwrap();
    let req = CreateServiceAccountRequest {
        armored_pgp_public_key: key.public_armored.clone(),
        use_user_role: false,
        role: "Reader".into(),
        name: "new".into(),
    };
    let mut m = common::management(&ep, op.proper(), None).await;
    assert_eq!(
        m.create_service_account(req.clone())
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
    let mut m = common::management(&ep, admin.proper(), None).await;
    let e = m.create_service_account(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("expiration"), "{e:?}");
    sim.shutdown().await;
}

/// Updates cluster `name` to the given versions.
async fn update_versions(
    c: &mut StateClient<common::Svc>,
    name: &str,
    talos: &str,
    kube: &str,
) -> Result<(), tonic::Status> {
    let cur = c
        .get(GetRequest {
            namespace: "default".into(),
            r#type: CLUSTER.into(),
            id: name.into(),
            options: None,
        })
        .await?
        .into_inner()
        .resource
        .unwrap();
    let mut next = cur.clone();
    let mut spec: ClusterSpec = decode_spec(&next).unwrap();
    spec.talos_version = talos.into();
    spec.kubernetes_version = kube.into();
    next.spec.as_mut().unwrap().proto_spec = prost::Message::encode_to_vec(&spec);
    c.update(UpdateRequest {
        new_resource: Some(next),
        options: Some(UpdateOptions::default()),
    })
    .await
    .map(|_| ())
}

#[tokio::test]
async fn talos_minor_downgrades_are_refused_below_the_version_the_cluster_was_created_with() {
    let (sim, mut c, _) = setup(OmniSim::builder()).await;
    c.create(create_req(cluster("old", "1.9.5", "1.32.3")))
        .await
        .unwrap();
    c.create(create_req(cluster("new", "1.10.6", "1.32.3")))
        .await
        .unwrap();
    // Omni records the creation version (ClusterConfigVersion) once its controllers run.
    for name in ["old", "new"] {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while sim
            .get("ClusterConfigVersions.omni.sidero.dev", name)
            .is_none()
        {
            assert!(std::time::Instant::now() < until, "no ClusterConfigVersion");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    // Created with 1.9: up to 1.10 and back is fine.
    update_versions(&mut c, "old", "1.10.0", "1.32.3")
        .await
        .unwrap();
    update_versions(&mut c, "old", "1.9.5", "1.32.3")
        .await
        .unwrap();
    // Created with 1.10: 1.9 is a downgrade below it.
    let e = update_versions(&mut c, "new", "1.9.5", "1.32.3")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message()
            .contains(r#"downgrading from version "1.10.6" to "1.9.5" is not supported"#),
        "{e:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn the_public_discovery_service_can_be_turned_off_only_with_the_embedded_one() {
    // An Omni release that supports Talos 1.14.
    let (sim, mut c, _) = setup(OmniSim::builder().latest_supported_talos(1, 14)).await;
    let without_public = |embedded: bool| {
        res(
            CLUSTER,
            "d",
            &[],
            &ClusterSpec {
                talos_version: "1.14.0".into(),
                kubernetes_version: "1.35.1".into(),
                features: Some(cluster_spec::Features {
                    use_embedded_discovery_service: embedded,
                    disable_public_discovery_service: true,
                    ..Default::default()
                }),
                backup_configuration: None,
            },
        )
    };
    invalid(
        &mut c,
        without_public(false),
        "the discovery service cannot be disabled entirely",
    )
    .await;
    c.create(create_req(without_public(true))).await.unwrap();
    sim.shutdown().await;
}
