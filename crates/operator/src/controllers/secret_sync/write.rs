//! Writes to the workload cluster: the copy, its namespace, and the conditional delete.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use super::failure::{SecretSyncFailure, workload_failed};
use super::target::{Content, Plan, desired_target, is_owned, plan};
use crate::api::OmniSecretSync;
use crate::domain::delete_guard::{Deleted, delete_observed};

/// A copy that matches the sources; `changed` when this pass wrote it.
pub(crate) struct Synced {
    pub(super) hash: String,
    pub(super) type_: String,
    pub(super) changed: bool,
    /// With `namespaceSelector`: the namespaces holding the copy.
    pub(super) namespaces: Option<Vec<String>>,
}

impl Synced {
    pub(super) fn new(content: &Content, changed: bool, namespaces: Option<Vec<String>>) -> Self {
        Self {
            hash: content.hash(),
            type_: content.type_.clone(),
            changed,
            namespaces,
        }
    }
}

/// Brings the target Secret of `spec.targetSecretRef.namespace` (and, when asked, its
/// namespace) in line with `content`; whether it wrote.
pub(super) async fn sync_target(
    workload: &kube::Client,
    sync: &OmniSecretSync,
    content: &Content,
    cluster_name: &str,
) -> Result<bool, SecretSyncFailure> {
    let target = &sync.spec.target_secret_ref;
    let (ns, name) = (&target.namespace, &target.name);
    if sync.spec.create_namespace {
        ensure_namespace(workload, ns).await?;
    }
    let api: Api<Secret> = Api::namespaced(workload.clone(), ns);
    let existing = api.get_opt(name).await.map_err(workload_failed(format!(
        "get workload Secret \"{ns}/{name}\""
    )))?;
    let desired = desired_target(sync, content, ns, cluster_name);
    converge(&api, sync, existing, desired).await
}

/// Creates workload namespace `ns` if it is missing.
async fn ensure_namespace(workload: &kube::Client, ns: &str) -> Result<(), SecretSyncFailure> {
    let namespaces: Api<Namespace> = Api::all(workload.clone());
    let found = namespaces
        .get_opt(ns)
        .await
        .map_err(workload_failed(format!("get workload namespace {ns:?}")))?;
    if found.is_some() {
        return Ok(());
    }
    let n = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &n).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(workload_failed(format!("create workload namespace {ns:?}"))(e)),
    }
}

/// Brings the workload Secret `existing` (as read; `None`: there is none) to `desired`, the
/// copy of its namespace; whether it wrote. A Secret the sync does not own is left alone.
pub(super) async fn converge(
    api: &Api<Secret>,
    sync: &OmniSecretSync,
    existing: Option<Secret>,
    desired: Secret,
) -> Result<bool, SecretSyncFailure> {
    let ns = desired.metadata.namespace.clone().unwrap_or_default();
    let name = desired.metadata.name.clone().unwrap_or_default();
    let pp = PostParams::default();
    let created = |e| workload_failed(format!("create workload Secret \"{ns}/{name}\""))(e);
    match plan(sync, existing.as_ref(), desired) {
        Plan::NoChange => Ok(false),
        Plan::NotOwned => Err(SecretSyncFailure::TargetNotOwned {
            namespace: ns.clone(),
            name: name.clone(),
        }),
        Plan::Create(s) => {
            api.create(&pp, &s).await.map_err(created)?;
            Ok(true)
        }
        Plan::Update(s) => {
            api.replace(&name, &pp, &s)
                .await
                .map_err(workload_failed(format!(
                    "update workload Secret \"{ns}/{name}\""
                )))?;
            Ok(true)
        }
        Plan::Recreate(s) => {
            // Only the copy that was judged (same uid and resourceVersion) is deleted.
            if let Some(observed) = existing.as_ref() {
                let deleted = delete_observed(api, observed)
                    .await
                    .map_err(workload_failed(format!(
                        "delete workload Secret \"{ns}/{name}\" to change its type"
                    )))?;
                if deleted == Deleted::Changed {
                    return Err(SecretSyncFailure::TargetChanged {
                        namespace: ns.clone(),
                        name: name.clone(),
                    });
                }
            }
            api.create(&pp, &s).await.map_err(created)?;
            Ok(true)
        }
    }
}

/// Deletes the workload Secret `ns/name` if it exists and this sync owns it. The delete is
/// conditional on the checked object ([`delete_observed`]): a Secret replaced in between by one
/// this sync does not own survives.
pub(super) async fn delete_owned(
    workload: &kube::Client,
    sync: &OmniSecretSync,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let api: Api<Secret> = Api::namespaced(workload.clone(), ns);
    // A changed object is read and judged again; three rounds outlast any honest writer.
    for _ in 0..3 {
        let observed = match api.get_opt(name).await {
            Ok(Some(s)) if is_owned(&s, sync) => s,
            Ok(_) => return Ok(()),
            Err(e) => return Err(format!("get workload Secret \"{ns}/{name}\": {e}")),
        };
        match delete_observed(&api, &observed).await {
            Ok(Deleted::Removed | Deleted::Gone) => return Ok(()),
            Ok(Deleted::Changed) => continue,
            Err(e) => return Err(format!("delete workload Secret \"{ns}/{name}\": {e}")),
        }
    }
    Err(format!(
        "workload Secret \"{ns}/{name}\" keeps changing while it is being deleted; retrying"
    ))
}
