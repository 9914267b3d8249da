//! Fault suite — deleting dependents together. An OmniKubeconfigExport and the OmniHelmRelease
//! and OmniSecretSync that use its kubeconfig Secret are deleted in one go, as a GitOps prune
//! or a namespace deletion does. The release must be uninstalled from the workload cluster and
//! the synced copy removed before the kubeconfig Secret disappears; no object may be stranded
//! with a finalizer it can no longer complete.
//!
//! Before the export held its Secret (the `omni.texashpc.com/kubeconfig-in-use` finalizer), the
//! export's `Delete` policy removed the Secret at once, and the release then waited forever
//! with `MissingSecret` ("restore it, or set spec.deletionPolicy to Orphan"), leaving the
//! release installed in the workload cluster.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::stack::{Dependants, Stack};
use support::{condition, ready, wait_for};

const EXPORT: &str = "prod-kubeconfig";
const RELEASE: &str = "app";
const SYNC: &str = "registry";
const REGISTRY_PASSWORD: &str = "registry-password-0c4e2b9a";
/// Deleted objects whose cleanup works finish in seconds; this is the limit for "stranded".
const DELETION_LIMIT: Duration = Duration::from_secs(60);

/// Creates the export, the release and the sync that uses the exported kubeconfig, and waits
/// until all three are Ready. Returns the minted kubeconfig's token (a secret).
async fn converge(stack: &Stack) -> String {
    stack
        .create_export_with_consumers(
            Dependants {
                export: EXPORT,
                release: RELEASE,
                sync: SYNC,
            },
            REGISTRY_PASSWORD,
        )
        .await;
    for (kind, name) in [
        ("OmniKubeconfigExport", EXPORT),
        ("OmniHelmRelease", RELEASE),
        ("OmniSecretSync", SYNC),
    ] {
        wait_for(&stack.api(kind), name, "Ready", ready).await;
    }
    assert!(release_installed(stack).await, "the release is installed");
    assert!(copy_exists(stack).await, "the copy exists");
    stack
        .exported_token(EXPORT)
        .await
        .unwrap_or_else(|| panic!("the exported kubeconfig has a token"))
}

/// Whether Helm still has records or objects of the release in the workload cluster.
async fn release_installed(stack: &Stack) -> bool {
    let records = Api::<Secret>::namespaced(stack.workload_client.clone(), "default")
        .list(&ListParams::default().labels(&format!("owner=helm,name={RELEASE}")))
        .await
        .unwrap_or_else(|e| panic!("list release records: {e}"));
    let config = Api::<ConfigMap>::namespaced(stack.workload_client.clone(), "default")
        .get_opt(&format!("{RELEASE}-config"))
        .await
        .unwrap_or_else(|e| panic!("get ConfigMap: {e}"));
    !records.items.is_empty() || config.is_some()
}

async fn copy_exists(stack: &Stack) -> bool {
    Api::<Secret>::namespaced(stack.workload_client.clone(), "apps")
        .get_opt("registry-credentials")
        .await
        .unwrap_or_else(|e| panic!("get copy: {e}"))
        .is_some()
}

/// Waits until the export, the release and the sync are gone. Fails early, with the reason,
/// when a dependent reports that its deletion cannot finish (its kubeconfig is gone).
async fn wait_all_gone(stack: &Stack) {
    let until = tokio::time::Instant::now() + DELETION_LIMIT;
    let objects = [
        ("OmniKubeconfigExport", EXPORT),
        ("OmniHelmRelease", RELEASE),
        ("OmniSecretSync", SYNC),
    ];
    loop {
        let mut left = Vec::new();
        for (kind, name) in objects {
            let Some(obj) = stack
                .api(kind)
                .get_opt(name)
                .await
                .unwrap_or_else(|e| panic!("get {kind}: {e}"))
            else {
                continue;
            };
            if let Some((_, reason, message)) = condition(&obj, "Ready")
                && reason == "MissingSecret"
            {
                let export = stack
                    .api("OmniKubeconfigExport")
                    .get_opt(EXPORT)
                    .await
                    .ok()
                    .flatten();
                panic!(
                    "{kind} {name} is stranded: {message}\nexport: {:?} {:?}\nsecret writes: {:?}",
                    export
                        .as_ref()
                        .map(|e| e.metadata.deletion_timestamp.clone()),
                    export.as_ref().and_then(|e| condition(e, "Ready")),
                    stack
                        .mgmt
                        .hooks()
                        .counts()
                        .iter()
                        .filter(|(k, _)| k.resource == "secrets")
                        .collect::<Vec<_>>()
                );
            }
            left.push(format!("{kind} {name}: {:?}", condition(&obj, "Ready")));
        }
        if left.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "still there after {DELETION_LIMIT:?}:\n{}",
            left.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until namespace `stack.ns` is gone; panics listing what is left after
/// [`DELETION_LIMIT`].
async fn wait_namespace_gone(stack: &Stack) {
    let namespaces = Api::<Namespace>::all(stack.client.clone());
    let until = tokio::time::Instant::now() + DELETION_LIMIT;
    while let Some(ns) = namespaces
        .get_opt(&stack.ns)
        .await
        .unwrap_or_else(|e| panic!("get namespace: {e}"))
    {
        if tokio::time::Instant::now() > until {
            let mut left = Vec::new();
            for kind in ["OmniConnection", "OmniCluster", "OmniControlPlane"] {
                for obj in stack
                    .api(kind)
                    .list(&ListParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("list {kind}: {e}"))
                {
                    left.push(format!(
                        "{kind} {}: {:?}",
                        obj.name_any(),
                        condition(&obj, "Ready")
                    ));
                }
            }
            let secrets = Api::<Secret>::namespaced(stack.client.clone(), &stack.ns)
                .list(&ListParams::default())
                .await
                .unwrap_or_else(|e| panic!("list Secrets: {e}"));
            for s in secrets {
                left.push(format!("Secret {}: {:?}", s.name_any(), s.finalizers()));
            }
            panic!(
                "namespace {} never finished deleting ({:?}); left:\n{}",
                stack.ns,
                ns.status,
                left.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn finish(stack: Stack, scenario: &str, token: &str, deletion: Duration) {
    assert!(
        !release_installed(&stack).await,
        "the release was uninstalled from the workload cluster"
    );
    assert!(!copy_exists(&stack).await, "the synced copy was removed");
    let scan = support::leaks::assert_no_secret_leaks(
        &stack.client,
        &[],
        &[
            &stack.omni_key,
            token,
            REGISTRY_PASSWORD,
            support::stack::REPO_PASSWORD,
        ],
    )
    .await;
    support::leaks::report(
        scenario,
        json!({
            "cases": 1,
            "objects_deleted_together": 3,
            "deletion_seconds": deletion.as_secs_f64(),
            "stranded": 0,
            "texts_scanned": scan.texts,
        }),
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitops_prune_of_an_export_and_its_consumers_uninstalls_before_the_secret_goes() {
    let stack = Stack::start("prune").await;
    let operator = stack.start_operator();
    let token = converge(&stack).await;

    // The prune deletes in the worst order: the export first, its consumers right after.
    let started = tokio::time::Instant::now();
    for (kind, name) in [
        ("OmniKubeconfigExport", EXPORT),
        ("OmniHelmRelease", RELEASE),
        ("OmniSecretSync", SYNC),
    ] {
        stack
            .api(kind)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {kind}: {e}"));
    }
    wait_all_gone(&stack).await;
    let deletion = started.elapsed();
    let secret = Api::<Secret>::namespaced(stack.client.clone(), &stack.ns)
        .get_opt(EXPORT)
        .await
        .unwrap_or_else(|e| panic!("get Secret: {e}"));
    assert!(
        secret.is_none(),
        "the export's Delete policy removed its Secret once nothing used it"
    );
    operator.stop().await;
    finish(stack, "dependents: GitOps prune", &token, deletion).await;
}

/// The consumers are deleted first, the export last. A consumer's pass that read it live just
/// before its deletion must not report it stranded when it then finds a dependency gone: the
/// release and the sync re-read themselves and do the deletion instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitops_prune_in_the_other_order_also_uninstalls_first() {
    let stack = Stack::start("prune-reverse").await;
    let operator = stack.start_operator();
    let token = converge(&stack).await;
    let started = tokio::time::Instant::now();
    for (kind, name) in [
        ("OmniHelmRelease", RELEASE),
        ("OmniSecretSync", SYNC),
        ("OmniKubeconfigExport", EXPORT),
    ] {
        stack
            .api(kind)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {kind}: {e}"));
    }
    wait_all_gone(&stack).await;
    let deletion = started.elapsed();
    operator.stop().await;
    finish(
        stack,
        "dependents: GitOps prune, consumers first",
        &token,
        deletion,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_in_use_keeps_its_secret_until_its_consumers_are_gone() {
    let stack = Stack::start("in-use").await;
    let operator = stack.start_operator();
    let token = converge(&stack).await;
    let secrets = Api::<Secret>::namespaced(stack.client.clone(), &stack.ns);

    // Deleting only the export: it waits, saying for whom, and the Secret stays usable.
    stack
        .api("OmniKubeconfigExport")
        .delete(EXPORT, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete export: {e}"));
    let export = wait_for(
        &stack.api("OmniKubeconfigExport"),
        EXPORT,
        "waiting for its consumers",
        |e: &DynamicObject| condition(e, "Ready").is_some_and(|(_, r, _)| r == "Deleting"),
    )
    .await;
    let (_, _, message) = condition(&export, "Ready").unwrap_or_default();
    assert!(
        message.contains(&format!("OmniHelmRelease {RELEASE:?}"))
            && message.contains(&format!("OmniSecretSync {SYNC:?}")),
        "{message}"
    );
    let secret = secrets
        .get(EXPORT)
        .await
        .unwrap_or_else(|e| panic!("the Secret is kept while in use: {e}"));
    assert!(secret.metadata.deletion_timestamp.is_none());

    // Deleting the Secret by hand while it is in use: it stays until nothing uses it.
    secrets
        .delete(EXPORT, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete Secret: {e}"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = secrets
        .get(EXPORT)
        .await
        .unwrap_or_else(|e| panic!("the Secret is held while in use: {e}"));
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        held.finalizers()
            .iter()
            .any(|f| f == "omni.texashpc.com/kubeconfig-in-use"),
        "{:?}",
        held.finalizers()
    );

    // The consumers go; then the Secret and the export follow.
    let started = tokio::time::Instant::now();
    for (kind, name) in [("OmniHelmRelease", RELEASE), ("OmniSecretSync", SYNC)] {
        stack
            .api(kind)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {kind}: {e}"));
    }
    wait_all_gone(&stack).await;
    let deletion = started.elapsed();
    support::wait_gone(&secrets, EXPORT).await;
    operator.stop().await;
    finish(stack, "dependents: export deleted first", &token, deletion).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deletion_uninstalls_and_removes_copies_before_the_kubeconfig_goes() {
    let stack = Stack::start("doomed").await;
    let operator = stack.start_operator();
    let token = converge(&stack).await;

    // kube-sim deletes a namespace like the namespace controller: every object in it is
    // deleted at once; those with finalizers stay until their controllers release them.
    let started = tokio::time::Instant::now();
    Api::<Namespace>::all(stack.client.clone())
        .delete(&stack.ns, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete namespace: {e}"));
    wait_all_gone(&stack).await;
    let deletion = started.elapsed();
    let secret = Api::<Secret>::namespaced(stack.client.clone(), &stack.ns)
        .get_opt(EXPORT)
        .await
        .unwrap_or_else(|e| panic!("get Secret: {e}"));
    assert!(secret.is_none(), "the kubeconfig Secret went last");
    operator.stop().await;
    finish(stack, "dependents: namespace deletion", &token, deletion).await;
}

/// The OmniCluster's deletion needs the Omni key Secret of its OmniConnection, which a namespace
/// deletion deletes at once. The connection holds its key Secret while clusters use it (the
/// finalizer `omni.texashpc.com/omni-key-in-use`); before that hold the cluster stayed
/// `DeleteFailed` ("MissingSecret") and the namespace never finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deletion_with_a_cluster_in_it_finishes() {
    let stack = Stack::start("doomed-whole").await;
    let operator = stack.start_operator();
    let token = converge(&stack).await;
    let started = tokio::time::Instant::now();
    Api::<Namespace>::all(stack.client.clone())
        .delete(&stack.ns, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete namespace: {e}"));
    wait_all_gone(&stack).await;
    wait_namespace_gone(&stack).await;
    let deletion = started.elapsed();
    operator.stop().await;
    finish(
        stack,
        "dependents: whole namespace deletion",
        &token,
        deletion,
    )
    .await;
}
