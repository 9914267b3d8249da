//! Every annotation, label and finalizer key the operator reads or writes, in one place, and
//! the one check of the adopt annotation.
//!
//! Keys are part of the API: users put some on their objects (adopt, usable-by), tools select
//! by others (the managed-by label), and every key written on an object outside our kinds (a
//! workload Secret, an Omni cluster, a Helm release) is how a later pass recognises what it
//! wrote. Changing one strands what earlier versions wrote, so each is spelled once.

use kube::api::ObjectMeta;

/// Annotation a user puts on an object to let the operator take over what it finds in place:
/// on an OmniCluster (an Omni cluster it did not create), an OmniHelmRelease (a Helm release it
/// did not install), or a workload or target Secret (for an OmniSecretSync or export).
pub const ADOPT_ANNOTATION: &str = "omni.texashpc.com/adopt";

/// Whether `meta` carries [`ADOPT_ANNOTATION`] set to `"true"`: the user's permission to take
/// over what the object found in place. Any other value (`"yes"`, `"True"`) is no permission.
pub(crate) fn adopt_requested(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ADOPT_ANNOTATION))
        .is_some_and(|value| value == "true")
}

/// Annotation asking for a pass now: any new value runs one (for an OmniHelmRelease including
/// its drift check), and the pass records the value in `status.lastHandledReconcileAt`. Every
/// kind honours it.
pub const RECONCILE_REQUESTED_AT_ANNOTATION: &str = "omni.texashpc.com/reconcile-requested-at";
/// Annotation asking for the kind's action even when nothing changed: one Helm upgrade (or
/// install) of an OmniHelmRelease, one Omni sync with a fresh read of Omni's status for an
/// OmniCluster, one newly minted kubeconfig for an OmniKubeconfigExport, one copy written for an
/// OmniSecretSync. Each new value is acted on once and recorded in `status.lastHandledForceAt`.
pub const FORCE_AT_ANNOTATION: &str = "omni.texashpc.com/force-at";
/// Annotation resetting an OmniHelmRelease's failure counts (its retry budget): each new value
/// lets a release that stopped at `RetriesExhausted` try again, and is recorded in
/// `status.lastHandledResetAt`.
pub const RESET_AT_ANNOTATION: &str = "omni.texashpc.com/reset-at";

/// The value of annotation `key` on `meta`, if it has one.
pub(crate) fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The value of the request annotation `key` on `meta` when it is not `handled` (the value a
/// status recorded): a request not acted on yet.
pub(crate) fn new_request<'a>(
    meta: &'a ObjectMeta,
    key: &str,
    handled: Option<&str>,
) -> Option<&'a str> {
    annotation(meta, key).filter(|token| Some(*token) != handled)
}

/// A kind whose status records the last `force-at` token it acted on.
pub(crate) trait HandlesForce {
    /// The object's metadata, where the request annotation is.
    fn meta(&self) -> &ObjectMeta;
    /// The `force-at` token its status says was handled.
    fn last_handled_force_at(&self) -> Option<&str>;
}

/// The `force-at` request `obj` carries and has not handled yet.
pub(crate) fn force_requested(obj: &impl HandlesForce) -> Option<&str> {
    new_request(obj.meta(), FORCE_AT_ANNOTATION, obj.last_handled_force_at())
}

/// Implements [`HandlesForce`] for kinds whose status has `last_handled_force_at`.
macro_rules! handles_force {
    ($($kind:ty),+) => {$(
        impl HandlesForce for $kind {
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn last_handled_force_at(&self) -> Option<&str> {
                self.status.as_ref().and_then(|s| s.last_handled_force_at.as_deref())
            }
        }
    )+};
}
handles_force!(
    super::OmniCluster,
    super::OmniHelmRelease,
    super::OmniKubeconfigExport,
    super::OmniSecretSync
);

/// Finalizer the operator puts on kinds that own remote or external state.
pub const FINALIZER: &str = "omni.texashpc.com/finalizer";
/// Finalizer from before the API group rename; still honoured on OmniConnection and OmniCluster.
pub(crate) const LEGACY_FINALIZER: &str = "omni.texas-hpc.org/finalizer";
/// Finalizer on an OmniConnection's service-account key Secret while OmniClusters use the
/// connection: a deletion of the Secret (by hand, by a namespace deletion) then waits until
/// the clusters no longer need Omni.
pub(crate) const KEY_IN_USE_FINALIZER: &str = "omni.texashpc.com/omni-key-in-use";
/// Finalizer an OmniKubeconfigExport keeps on the Secret it writes while an OmniHelmRelease or
/// OmniSecretSync still needs it as its kubeconfig (as `kubernetes.io/pvc-protection` does
/// for volumes).
pub(crate) const KUBECONFIG_IN_USE_FINALIZER: &str = "omni.texashpc.com/kubeconfig-in-use";

/// Label that makes a Secret usable by the kinds it names (`.`-separated kind names, e.g.
/// `OmniHelmRelease` or `OmniHelmRelease.OmniSecretSync`), required under
/// `--require-secret-opt-in`.
pub const USABLE_BY_LABEL: &str = "omni.texashpc.com/usable-by";

/// The `app.kubernetes.io/managed-by` label on every Secret the operator writes, and its value
/// (the original implementation's name, which existing Secrets carry).
pub(crate) const MANAGED_BY: (&str, &str) =
    ("app.kubernetes.io/managed-by", "omni-cluster-operator");
/// Label on a Secret the operator writes: the Omni cluster name it belongs to.
pub(crate) const CLUSTER_LABEL: &str = "omni.texashpc.com/cluster";

/// Label on an OmniSecretSync's copy: the sync's UID (its ownership).
pub(crate) const SECRET_SYNC_UID_LABEL: &str = "omni.texashpc.com/secret-sync-uid";
/// Annotation on an OmniSecretSync's copy: the sync's name (ownership of a sync without UID).
pub(crate) const SECRET_SYNC_NAME_ANNOTATION: &str = "omni.texashpc.com/secret-sync-name";
/// Annotation on an OmniSecretSync's copy: `<namespace>/<name>` of the source Secret.
pub(crate) const SECRET_SYNC_SOURCE_ANNOTATION: &str = "omni.texashpc.com/secret-sync-source";
/// Annotation on an OmniSecretSync's copy: the hash of the content copied.
pub(crate) const SECRET_SYNC_HASH_ANNOTATION: &str = "omni.texashpc.com/secret-sync-hash";
/// Annotation on an OmniSecretSync's copy: the version of the content hash (`v1`).
pub(crate) const SECRET_SYNC_CONTENT_ANNOTATION: &str = "omni.texashpc.com/secret-sync-content";

/// Label on an exported kubeconfig Secret: the export's UID (its ownership).
pub(crate) const EXPORT_UID_LABEL: &str = "omni.texashpc.com/kubeconfig-export-uid";
/// Annotation on an exported kubeconfig Secret: the export's name.
pub(crate) const EXPORT_NAME_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-name";
/// Annotation on an exported kubeconfig Secret: the export's namespace.
pub(crate) const EXPORT_NAMESPACE_ANNOTATION: &str =
    "omni.texashpc.com/kubeconfig-export-namespace";
/// Annotation on an exported kubeconfig Secret: the hash of the spec the kubeconfig was minted
/// for (a spec change mints a new one).
pub(crate) const EXPORT_SPEC_HASH_ANNOTATION: &str =
    "omni.texashpc.com/kubeconfig-export-spec-hash";
/// Annotation on an exported kubeconfig Secret: the hash of the credential data.
pub(crate) const KUBECONFIG_HASH_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-hash";
/// Annotation on an exported kubeconfig Secret: when the kubeconfig expires.
pub(crate) const KUBECONFIG_EXPIRATION_ANNOTATION: &str =
    "omni.texashpc.com/kubeconfig-expiration-time";
/// Annotation on an exported kubeconfig Secret: when the kubeconfig was written.
pub(crate) const KUBECONFIG_LAST_ROTATION_ANNOTATION: &str =
    "omni.texashpc.com/kubeconfig-last-rotation-time";
/// Annotation on an exported kubeconfig Secret: the shape last written (`spec.format`), absent
/// for `Kubeconfig`, so a format change removes the keys (and the Argo CD label) of the old one.
pub(crate) const EXPORT_FORMAT_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-format";
/// Annotation on an exported kubeconfig Secret: the label and annotation keys `spec.target`
/// put there (JSON), so a key dropped from the spec is removed and no one else's is.
pub(crate) const EXPORT_TARGET_KEYS_ANNOTATION: &str =
    "omni.texashpc.com/kubeconfig-export-target-keys";
/// Cluster API's label naming the cluster a kubeconfig Secret belongs to (format `ClusterAPI`).
pub(crate) const CAPI_CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Cluster API's Secret type.
pub(crate) const CAPI_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// Argo CD's label marking a Secret as a cluster declaration, and its value (format
/// `ArgoCDCluster`).
pub(crate) const ARGOCD_SECRET_TYPE: (&str, &str) = ("argocd.argoproj.io/secret-type", "cluster");

/// Label naming the shard (the replica set of the operator) that reconciles an object: Flux's
/// `sharding.fluxcd.io/key` in our group. Objects without it belong to the default shard
/// (docs/performance.md, "Sharding").
pub const SHARD_LABEL: &str = "sharding.omni.texashpc.com/key";

/// Label on an object a fleet set generated: the set's kind.
pub const SET_KIND_LABEL: &str = "omni.texashpc.com/set-kind";
/// Label on an object a fleet set generated: the set's name (shortened with a hash when it is
/// longer than a label value may be).
pub const SET_NAME_LABEL: &str = "omni.texashpc.com/set";
/// Label on an object a fleet set generated: the OmniCluster it serves (shortened like the
/// set's name).
pub const SET_CLUSTER_LABEL: &str = "omni.texashpc.com/set-cluster";
/// Label on an object a fleet set left in place with `stopMatchingBehavior: Leave`: the set's
/// UID. The set takes it back only when the cluster matches again.
pub const LEFT_BY_SET_LABEL: &str = "omni.texashpc.com/left-by-set";
/// Annotation on an object a fleet set generated: the hash of the spec the set last gave it,
/// which tells a template change (rolled out in waves) from a hand edit (put back at once).
pub(crate) const SET_SPEC_HASH_ANNOTATION: &str = "omni.texashpc.com/set-spec-hash";

/// Annotation the operator puts on the Omni `Cluster` resource it creates or adopts:
/// `<namespace>/<name>/<uid>` of the OmniCluster. The UID is random per object, so it also
/// tells management clusters (and re-created objects) apart.
pub(crate) const OMNI_OWNER_ANNOTATION: &str = "omni.texashpc.com/owner";
/// Value of Omni's `omni.sidero.dev/managed-by-gitops-tools` annotation on everything the
/// operator writes to Omni: Omni's UI then tells people who manages the resource.
pub(crate) const GITOPS_TOOL: &str = "omni-operator";

/// Annotation a user puts on an OmniCluster to approve a plan the operator holds: its value
/// must equal the plan's hash (`status.plan.hash`); any other value approves nothing.
pub(crate) const APPROVE_PLAN_ANNOTATION: &str = "omni.texashpc.com/approve-plan";

/// Helm release label (kept on helm's storage Secret) holding the UID of the OmniHelmRelease
/// that owns the release. UIDs are random per object and per management cluster, so this names
/// both the object and the management cluster it lives in.
pub(crate) const HELM_OWNER_UID_LABEL: &str = "omni.texashpc.com/owner-uid";
/// Helm release label with the owning OmniHelmRelease's namespace (for people; the UID decides).
pub(crate) const HELM_OWNER_NAMESPACE_LABEL: &str = "omni.texashpc.com/owner-namespace";
/// Helm release label with the owning OmniHelmRelease's name, when it fits a label value (63
/// characters).
pub(crate) const HELM_OWNER_NAME_LABEL: &str = "omni.texashpc.com/owner-name";
/// Helm release label naming the operator process that started the revision: its helm
/// driver's run id, random per process.
pub(crate) const HELM_STARTED_BY_RUN_LABEL: &str = "omni.texashpc.com/started-by-run";
/// Helm release label with the revision number that process started. Helm merges release
/// labels into later revisions, so a revision someone else starts on top of ours (a `helm
/// upgrade` by hand, a rollback) inherits our run label but not a matching revision number.
pub(crate) const HELM_STARTED_REVISION_LABEL: &str = "omni.texashpc.com/started-revision";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_new_until_its_value_is_recorded() {
        let meta = ObjectMeta {
            annotations: Some([(FORCE_AT_ANNOTATION.to_string(), "t1".to_string())].into()),
            ..ObjectMeta::default()
        };
        assert_eq!(new_request(&meta, FORCE_AT_ANNOTATION, None), Some("t1"));
        assert_eq!(
            new_request(&meta, FORCE_AT_ANNOTATION, Some("t0")),
            Some("t1")
        );
        assert_eq!(new_request(&meta, FORCE_AT_ANNOTATION, Some("t1")), None);
        assert_eq!(new_request(&meta, RESET_AT_ANNOTATION, None), None);
    }

    #[test]
    fn adoption_needs_the_annotation_set_to_true() {
        let with = |value: Option<&str>| ObjectMeta {
            annotations: value.map(|v| [(ADOPT_ANNOTATION.to_string(), v.to_string())].into()),
            ..ObjectMeta::default()
        };
        assert!(adopt_requested(&with(Some("true"))));
        assert!(!adopt_requested(&with(Some("True"))));
        assert!(!adopt_requested(&with(Some("yes"))));
        assert!(!adopt_requested(&with(None)));
    }
}
