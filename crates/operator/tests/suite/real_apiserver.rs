//! The operator against the real kube-apiserver and etcd (`test-apiserver`; built by
//! `scripts/install-test-tools`, a missing build fails with that instruction): both charts
//! installed by the real helm, the operator run with the chart's arguments and its
//! ServiceAccount's token (exactly the chart's RBAC), its admission webhook registered by the
//! chart and called by the API server over TLS. Omni is omni-sim; workload clusters are kube-sim.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use omni_operator::process::leader::LEASE_NAME;
use serde_json::{Value, json};
use support::real::{self, Deployed, NS, RealCluster};

/// The kinds and plurals of the operator's resources.
const KINDS: &[(&str, &str)] = support::leaks::KINDS;

/// An object of one of our kinds in [`NS`].
fn ours(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

/// `(code, message)` of a refused create.
async fn refused(client: &kube::Client, obj: Value) -> (u16, String) {
    match real::create(client, obj).await {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The charts install with no warning, their CRDs are Established, and the admission cases
/// (schema, CEL, webhook) are answered by the real API server with its own messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_install_cleanly_and_admission_answers_with_the_real_messages() {
    support::operator_logs();
    let cluster = RealCluster::start().await;
    let stderr = cluster.install_crd_chart();
    real::assert_no_warnings("helm install of the CRD chart", &stderr);
    cluster.wait_established().await;
    let deployed = Deployed::start(&cluster, &[], "replica-a").await;
    let admin = cluster.admin.clone();

    // Every sample is admitted (webhook included).
    let samples = real::samples(
        "https://omni.example.com",
        "https://charts.example.com",
        "x",
    );
    assert!(samples.len() >= 8, "{} samples", samples.len());
    for doc in samples {
        let name = format!("{} {}", doc["kind"], doc["metadata"]["name"]);
        real::create(&admin, doc)
            .await
            .unwrap_or_else(|e| panic!("sample {name} refused: {e}"));
    }

    let webhook = |kind: &str| {
        format!(
            "admission webhook \"v{}-v1alpha1.kb.io\" denied the request: ",
            kind.to_lowercase()
        )
    };
    let cp = |name: &str, spec: Value| ours("OmniControlPlane", name, spec);
    let cases: Vec<(Value, String)> = vec![
        // CRD schema: pattern, enum, type, minimum.
        (
            ours("OmniConnection", "c1", json!({"endpoint": "omni.example.com", "auth": {"serviceAccountSecretRef": {"name": "s"}}})),
            r#"OmniConnection.omni.texashpc.com "c1" is invalid: spec.endpoint: Invalid value: "omni.example.com": spec.endpoint in body should match '^(https?|grpc)://.+'"#.into(),
        ),
        (
            ours("OmniKubeconfigExport", "e1", json!({"clusterRef": {"name": "c"}, "targetSecretRef": {"name": "s"},
                "serviceAccount": {"user": "u", "groups": ["g"]}, "ttl": "1h", "deletionPolicy": "Shred"})),
            r#"OmniKubeconfigExport.omni.texashpc.com "e1" is invalid: spec.deletionPolicy: Unsupported value: "Shred": supported values: "Delete", "Orphan""#.into(),
        ),
        (
            cp("cp1", json!({"clusterRef": {"name": "c"}, "machineClass": {"name": "a", "size": true}})),
            r#"OmniControlPlane.omni.texashpc.com "cp1" is invalid: [spec.machineClass.size: Invalid value: "boolean": spec.machineClass.size in body must be of type integer,string: "boolean", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"#.into(),
        ),
        (
            cp("cp2", json!({"clusterRef": {"name": "c"}, "machines": ["11111111-1111-4111-8111-111111111111"],
                "upgradeStrategy": {"type": "Rolling", "rolling": {"maxParallelism": 0}}})),
            r#"OmniControlPlane.omni.texashpc.com "cp2" is invalid: spec.upgradeStrategy.rolling.maxParallelism: Invalid value: 0: spec.upgradeStrategy.rolling.maxParallelism in body should be greater than or equal to 1"#.into(),
        ),
        // CEL rules.
        (
            cp("cp3", json!({"clusterRef": {"name": "c"}})),
            r#"OmniControlPlane.omni.texashpc.com "cp3" is invalid: spec: Invalid value: exactly one of machines or machineClass is required"#.into(),
        ),
        (
            ours("OmniCluster", "cel", json!({"connectionRef": {"name": "omni"}, "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"}, "deletePolicy": {"orphan": true, "destroyMachines": true}})),
            r#"OmniCluster.omni.texashpc.com "cel" is invalid: spec.deletePolicy: Invalid value: orphan and destroyMachines cannot both be true"#.into(),
        ),
        // The webhook (rules only the operator knows), called by the API server over TLS.
        (
            ours("OmniConnection", "blank", json!({"endpoint": "https://omni.example.com", "auth": {"serviceAccountSecretRef": {"name": "  "}}})),
            format!("{}OmniConnection.omni.texashpc.com \"blank\" is invalid: spec.auth.serviceAccountSecretRef.name: Required value: service account Secret name is required", webhook("OmniConnection")),
        ),
        (
            ours("OmniCluster", "interval", json!({"connectionRef": {"name": "omni"}, "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"}, "syncInterval": "1d"})),
            format!("{}OmniCluster.omni.texashpc.com \"interval\" is invalid: spec.syncInterval: Invalid value: \"1d\": syncInterval must be a duration such as 24h, 1h30m or 90s", webhook("OmniCluster")),
        ),
        (
            cp("cp4", json!({"clusterRef": {"name": "c"}, "machines": ["not-a-uuid"]})),
            webhook("OmniControlPlane"),
        ),
        (
            ours("OmniMachine", "not-a-uuid", json!({"clusterRef": {"name": "c"}})),
            webhook("OmniMachine"),
        ),
        (
            ours("OmniWorkers", "w1", json!({"clusterRef": {"name": "c"}, "machineClass": {"name": "gpu", "size": 3},
                "workerSetName": "control-planes"})),
            format!("{}OmniWorkers.omni.texashpc.com \"w1\" is invalid: spec.workerSetName: Invalid value: \"control-planes\": workerSetName is reserved by Omni", webhook("OmniWorkers")),
        ),
        (
            ours("OmniHelmRelease", "h1", json!({"clusterRef": {"name": "c"}, "kubeconfigSecretRef": {"name": "kc"},
                "releaseName": " ms", "chart": {"repository": "https://charts.example.com", "chart": "ms", "version": "1.0.0"}})),
            format!("{}OmniHelmRelease.omni.texashpc.com \"h1\" is invalid: spec.releaseName: Invalid value: \" ms\": releaseName must not include leading or trailing whitespace", webhook("OmniHelmRelease")),
        ),
        (
            ours("OmniSecretSync", "s1", json!({"clusterRef": {"name": "c"}, "kubeconfigSecretRef": {"name": "kc"},
                "sourceSecretRef": {"name": "  "}, "targetSecretRef": {"name": "t", "namespace": "apps"},
                "deletionPolicy": "Delete"})),
            format!("{}OmniSecretSync.omni.texashpc.com \"s1\" is invalid: spec.sourceSecretRef.name: Required value: source Secret name is required", webhook("OmniSecretSync")),
        ),
        (
            ours("OmniKubeconfigExport", "admin", json!({"clusterRef": {"name": "c"}, "targetSecretRef": {"name": "s"},
                "serviceAccount": {"user": "u", "groups": ["system:masters"]}, "ttl": "1h", "deletionPolicy": "Delete"})),
            webhook("OmniKubeconfigExport"),
        ),
    ];
    for (obj, want) in cases {
        let name = format!("{} {}", obj["kind"], obj["metadata"]["name"]);
        // The operator's own offline check agrees wherever it has a rule (the webhook's
        // message is its validate() output, wrapped by the API server).
        let (code, message) = refused(&admin, obj).await;
        assert_eq!(code, 422, "{name}: {message}");
        assert!(
            message == want || (want.ends_with(": ") && message.starts_with(&want)),
            "{name}:\n got  {message}\n want {want}"
        );
    }

    // Re-applying the CRD chart changes nothing and warns about nothing.
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/omni-cluster-operator-crds")
        .display()
        .to_string();
    let stderr = cluster
        .helm(&["upgrade", real::CRD_RELEASE, &chart])
        .expect_ok("helm upgrade of the CRD chart");
    real::assert_no_warnings("helm upgrade of the CRD chart", &stderr);

    // With the operator down (failurePolicy Fail), the chart's matchConditions still let
    // metadata-only updates through (the documented last resort for a stuck finalizer), while
    // spec edits and creates need the webhook.
    deployed.stop().await;
    let clusters: Api<omni_operator::api::OmniCluster> = Api::namespaced(admin.clone(), NS);
    clusters
        .patch(
            "edge-sample",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"team": "platform"}, "finalizers": null}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("a metadata edit needs no webhook: {e}"));
    for result in [
        clusters
            .patch(
                "edge-sample",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"syncInterval": "7m"}})),
            )
            .await
            .map(|_| ()),
        real::create(
            &admin,
            ours(
                "OmniConnection",
                "late",
                json!({"endpoint": "https://omni.example.com",
            "auth": {"serviceAccountSecretRef": {"name": "s"}}}),
            ),
        )
        .await
        .map(|_| ()),
    ] {
        match result {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 500, "{status:?}");
                assert!(
                    status.message.contains("failed calling webhook"),
                    "{}",
                    status.message
                );
            }
            other => panic!("a spec edit or create passed without the webhook: {other:?}"),
        }
    }
}

/// Everything one sample set goes through on the real API server: Ready with the chart's RBAC,
/// status written through `/status` only, quiet once converged, a Lease held and handed over,
/// finalizers and deletion when the namespace is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_reach_ready_and_stay_quiet_with_the_charts_rbac() {
    support::operator_logs();
    let cluster = RealCluster::start().await;
    real::assert_no_warnings(
        "helm install of the CRD chart",
        &cluster.install_crd_chart(),
    );
    cluster.wait_established().await;
    let deployed = Deployed::start(&cluster, &[], "replica-a").await;
    let admin = cluster.admin.clone();

    // Omni and a workload cluster behind it.
    let (workload, workload_client) = support::kube_sim().await;
    let omni = omni_sim::OmniSim::builder()
        .auto_register_machines(true)
        .status_step(Duration::from_millis(20))
        .workload_provider(std::sync::Arc::new(support::WorkloadAt(
            workload.base_url.clone(),
        )))
        .start()
        .await
        .unwrap_or_else(|e| panic!("omni-sim: {e}"));
    let key = omni
        .register_service_account("operator", omni_sim::Role::Operator)
        .unwrap_or_else(|e| panic!("{e}"));
    let repo = support::chart_repo::start_repo("reader", "repo-password-1", None).await;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let docker = json!({"auths": {"ghcr.io": {"auth": "dXNlcjpwYXNz"}}}).to_string();
    for (name, ty, data) in [
        (
            "omni-service-account",
            "Opaque",
            json!({"serviceAccountKey": key}),
        ),
        (
            "repo-credentials",
            "Opaque",
            json!({"username": "reader", "password": "repo-password-1"}),
        ),
        (
            "edge-sample-ghcr",
            "kubernetes.io/dockerconfigjson",
            json!({".dockerconfigjson": docker}),
        ),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS}, "type": ty, "stringData": data,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        secrets
            .create(&Default::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    }
    let samples = real::samples(omni.endpoint(), &repo.url, "repo-credentials");
    for doc in &samples {
        real::create(&admin, doc.clone())
            .await
            .unwrap_or_else(|e| panic!("sample {}: {e}", doc["metadata"]["name"]));
    }

    // Ready, every one.
    let apis: Vec<(String, Api<kube::api::DynamicObject>, String)> = samples
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_string(),
                real::dynamic_api(&admin, d),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    for (kind, api, name) in &apis {
        support::wait_for(api, name, &format!("{kind} Ready"), support::ready).await;
    }

    // Status is written through /status only: every manager that owns status fields does
    // so through the subresource, and the operator never owns a status field of the main
    // resource (the real server would have dropped it).
    for (kind, api, name) in &apis {
        let obj = api.get(name).await.unwrap_or_else(|e| panic!("{e}"));
        for entry in obj.metadata.managed_fields.iter().flatten() {
            let fields = entry
                .fields_v1
                .as_ref()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            if fields.get("f:status").is_some() {
                assert_eq!(
                    entry.subresource.as_deref(),
                    Some("status"),
                    "{kind} {name}: status owned outside /status: {entry:?}"
                );
            }
        }
    }

    // A spec edit is seen and reported (observedGeneration follows).
    let clusters: Api<omni_operator::api::OmniCluster> = Api::namespaced(admin.clone(), NS);
    let edited = clusters
        .patch(
            "edge-sample",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": "4m"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let generation = edited.metadata.generation.unwrap_or_default();
    support::wait_for(
        &clusters,
        "edge-sample",
        "the edit observed and Ready",
        |c| {
            support::ready(c)
                && serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v["status"]["observedGeneration"].as_i64())
                    == Some(generation)
        },
    )
    .await;

    // Quiet: a converged set makes no write. The real server has no write counter: every
    // write to our kinds, Secrets and Events in the namespace shows as a watch event (the
    // detector sees a write of the test's own first).
    let probe = {
        let secrets = secrets.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            secrets
                .patch(
                    "repo-credentials",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"probe": "1"}}})),
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        })
    };
    let seen = quiet_window(&admin, Duration::from_secs(2)).await;
    probe.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        seen.len(),
        1,
        "the detector sees exactly the probe: {seen:#?}"
    );
    let quiet = quiet_window(&admin, Duration::from_secs(10)).await;
    assert!(quiet.is_empty(), "writes while converged: {quiet:#?}");

    // The Lease: replica-a leads; a standby takes over when it stops.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    let holder = |lease: &Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    let lease = support::wait_for(&leases, LEASE_NAME, "held by replica-a", |l| {
        holder(l) == "replica-a"
    })
    .await;
    assert_eq!(holder(&lease), "replica-a");
    let standby = Deployed::start_replica(&cluster, deployed.cert.clone(), &[], "replica-b").await;
    deployed.stop().await;
    support::wait_for(&leases, LEASE_NAME, "taken over by replica-b", |l| {
        holder(l) == "replica-b"
    })
    .await;
    let edited = clusters
        .patch(
            "edge-sample",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": "6m"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let generation = edited.metadata.generation.unwrap_or_default();
    support::wait_for(&clusters, "edge-sample", "the new leader reconciles", |c| {
        serde_json::to_value(c)
            .ok()
            .and_then(|v| v["status"]["observedGeneration"].as_i64())
            == Some(generation)
    })
    .await;

    // Namespace deletion: the namespace turns Terminating; this control plane has no
    // namespace controller, so the test deletes its contents as that controller does, and
    // the operator must finalize every object although it can no longer write Events there.
    Api::<Namespace>::all(admin.clone())
        .delete(NS, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete namespace: {e}"));
    // The sets first, so none generates again what the deletions below remove.
    let sets: &[(&str, &str)] = &[
        ("OmniHelmReleaseSet", "omnihelmreleasesets"),
        ("OmniSecretSyncSet", "omnisecretsyncsets"),
        ("OmniKubeconfigExportSet", "omnikubeconfigexportsets"),
    ];
    for (kind, plural) in sets.iter().chain(KINDS) {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            admin.clone(),
            NS,
            &kube::discovery::ApiResource {
                plural: (*plural).into(),
                ..support::stack::resource(kind)
            },
        );
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {kind}s: {e}"));
    }
    for (kind, api, name) in &apis {
        let until = tokio::time::Instant::now() + support::WAIT;
        while api.get_opt(name).await.ok().flatten().is_some() {
            assert!(
                tokio::time::Instant::now() < until,
                "{kind} {name} never finalized in a terminating namespace"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Each deletion policy did its part: the export with `Delete` removed its Secret, the one
    // with `Orphan` left it; the synced Secret left the workload cluster; the release was
    // uninstalled from it.
    let gone = |name: &'static str| {
        let secrets = secrets.clone();
        async move { secrets.get_opt(name).await.ok().flatten().is_none() }
    };
    assert!(
        gone("edge-sample-automation-kubeconfig").await,
        "Delete policy left the Secret"
    );
    assert!(
        !gone("edge-sample-gitops-kubeconfig").await,
        "Orphan policy removed the Secret"
    );
    let synced: Api<Secret> = Api::namespaced(workload_client.clone(), "flux-system");
    assert!(
        synced
            .get_opt("edge-sample-ghcr")
            .await
            .ok()
            .flatten()
            .is_none(),
        "the synced Secret stayed in the workload cluster"
    );
    let releases: Api<Secret> = Api::namespaced(workload_client.clone(), "kube-system");
    let helm_records = releases
        .list(&ListParams::default().labels("owner=helm"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        helm_records.items.is_empty(),
        "the release stayed installed"
    );
    // The cluster was deleted in Omni (its default deletion policy).
    let until = tokio::time::Instant::now() + support::WAIT;
    while omni
        .get(omni_sim::types::ty::CLUSTER, "edge-sample")
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < until,
            "the Omni cluster remains"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !support::operator_logs().contains(&key),
        "the Omni key appears in the logs"
    );
    standby.stop().await;
    omni.shutdown().await;
    workload.shutdown();
}

/// Watch events on every kind of ours, Secrets and Events in [`NS`] during `hold`, from now:
/// one line per write (`<resource> <TYPE> <name>`).
async fn quiet_window(client: &kube::Client, hold: Duration) -> Vec<String> {
    let mut paths: Vec<String> = KINDS
        .iter()
        .map(|(_, plural)| format!("/apis/omni.texashpc.com/v1alpha1/namespaces/{NS}/{plural}"))
        .collect();
    paths.push(format!("/api/v1/namespaces/{NS}/secrets"));
    paths.push(format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"));
    let mut tasks = Vec::new();
    for path in paths {
        let request = http::Request::get(&path)
            .body(Vec::new())
            .unwrap_or_default();
        let list: Value = client
            .request(request)
            .await
            .unwrap_or_else(|e| panic!("list {path}: {e}"));
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let request = http::Request::get(format!(
                "{path}?watch=true&resourceVersion={rv}&timeoutSeconds={}",
                hold.as_secs()
            ))
            .body(Vec::new())
            .unwrap_or_default();
            let mut seen = Vec::new();
            let Ok(stream) = client.request_events::<Value>(request).await else {
                return vec![format!("{path}: watch failed")];
            };
            let mut stream = std::pin::pin!(stream);
            use futures::StreamExt as _;
            while let Ok(Some(event)) =
                tokio::time::timeout(hold + Duration::from_secs(5), stream.next()).await
            {
                match event {
                    Ok(kube::api::WatchEvent::Bookmark(_)) => {}
                    Ok(e) => seen.push(format!("{path}: {e:?}").chars().take(300).collect()),
                    Err(e) => seen.push(format!("{path}: {e}")),
                }
            }
            seen
        }));
    }
    let mut writes = Vec::new();
    for task in tasks {
        writes.extend(task.await.unwrap_or_default());
    }
    writes
}

/// The operator's workload clients offer HTTP/2 (`api_client::multiplexed_client`): the real
/// API server chooses it in the TLS handshake, and a burst of requests in flight over the one
/// connection is answered in full, creates and lists alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_client_speaks_http2_with_the_real_api_server() {
    let cluster = RealCluster::start().await;
    let ca_pem = cluster.cp.ca_pem();

    // What the real server chooses when offered both, as the workload client offers them.
    let mut tls = std::sync::Arc::unwrap_or_clone(
        kube_sim::tls::client_config_from_pem(ca_pem.as_bytes())
            .unwrap_or_else(|e| panic!("CA: {e}")),
    );
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let authority = cluster.cp.url.trim_start_matches("https://").to_owned();
    let tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .unwrap_or_else(|e| panic!("connect {authority}: {e}"));
    let name =
        rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap_or_else(|e| panic!("{e}"));
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect(name, tcp)
        .await
        .unwrap_or_else(|e| panic!("TLS handshake: {e}"));
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    drop(stream);

    let identity = cluster
        .cp
        .authority
        .client("workload-admin", &["system:masters"])
        .unwrap_or_else(|e| panic!("identity: {e}"));
    let kubeconfig = cluster.cp.kubeconfig_with_certificate(&identity);
    let limits = omni_operator::domain::helm::source::Limits {
        connect: Duration::from_secs(10),
        read: Duration::from_secs(30),
        request: Duration::from_secs(60),
    };
    let client =
        omni_operator::domain::workload::client_from_kubeconfig(kubeconfig.as_bytes(), limits)
            .await
            .unwrap_or_else(|e| panic!("workload client: {e}"));
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let creates = (0..40).map(|i| {
        let secrets = secrets.clone();
        async move {
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": format!("burst-{i}"), "labels": {"burst": "yes"}},
                "stringData": {"n": i.to_string()},
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            secrets.create(&Default::default(), &secret).await
        }
    });
    for created in futures::future::join_all(creates).await {
        created.unwrap_or_else(|e| panic!("create: {e}"));
    }
    let lists = (0..40).map(|_| {
        let secrets = secrets.clone();
        async move {
            secrets
                .list(&ListParams::default().labels("burst=yes"))
                .await
        }
    });
    for listed in futures::future::join_all(lists).await {
        let listed = listed.unwrap_or_else(|e| panic!("list: {e}"));
        assert_eq!(listed.items.len(), 40);
    }
}
