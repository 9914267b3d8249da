//! Every reason the operator writes into a condition or an Event, as one type.
//!
//! A reason is part of the API: users alert on it, `kubectl get` shows it, scripts wait for
//! it. So each one is defined here once, with the sentence that explains it, and nowhere
//! else: a failure type names the variant it is reported under, never a string. The reference
//! table in `docs/operations.md` ("Every reason") lists exactly these variants with these
//! sentences; the docs coverage test compares the two.

/// Declares [`Reason`] with its spelling and its one-sentence meaning per variant.
macro_rules! reasons {
    ($($(#[doc = $doc:literal])+ $variant:ident = $text:literal,)*) => {
        /// Why a condition has its status, or why an Event was published (the `reason`
        /// field of both).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $($(#[doc = $doc])+ $variant,)*
        }

        impl Reason {
            /// Every reason, in declaration order.
            pub const ALL: &[Reason] = &[$(Reason::$variant,)*];

            /// The reason as it is written (CamelCase).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $text,)*
                }
            }

            /// What the reason means, one sentence (its documentation).
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Reason::$variant => concat!($($doc),+).trim(),)*
                }
            }
        }
    };
}

reasons! {
    /// The object found the OmniCluster it names.
    Accepted = "Accepted",
    /// The OmniConnection reached Omni with its service-account key.
    ConnectionReady = "ConnectionReady",
    /// Omni could not be reached, or refused the key.
    ConnectionFailed = "ConnectionFailed",
    /// Omni answered, but speaks a backend API version this operator cannot translate for.
    UnsupportedOmniApi = "UnsupportedOmniAPI",
    /// The object waits for what depends on it to go before its deletion can finish.
    Deleting = "Deleting",
    /// A deletion step failed; it is retried.
    DeleteFailed = "DeleteFailed",
    /// A deletion left an Omni cluster in place that this OmniCluster did not create (Event).
    DeleteSkipped = "DeleteSkipped",
    /// The OmniCluster the object names does not exist.
    MissingCluster = "MissingCluster",
    /// The OmniConnection the cluster names does not exist, or could not be read.
    MissingConnection = "MissingConnection",
    /// A Secret the object names, or a key in it, does not exist or is empty.
    MissingSecret = "MissingSecret",
    /// The ServiceAccount whose identity reads the object's references may not read a Secret it names; the message names the reference. Only a change of RBAC or of the spec helps (`Stalled=True`); it is looked at again every minute.
    AccessDenied = "AccessDenied",
    /// Not exactly one OmniControlPlane names the cluster.
    MissingTemplate = "MissingTemplate",
    /// The spec, the rendered template or an input breaks a rule; the message names the field.
    ValidationFailed = "ValidationFailed",
    /// The stored object does not decode as its kind (it bypassed the CRD schema).
    InvalidObject = "InvalidObject",
    /// The rendered cluster template passed validation.
    Validated = "Validated",
    /// The desired state reached its destination (Omni, or the workload cluster).
    Synced = "Synced",
    /// Writing the desired state to its destination failed; it is retried.
    SyncFailed = "SyncFailed",
    /// A server the object names (a workload API server, a chart source) did not answer within the operator's time bounds; it is retried.
    Timeout = "Timeout",
    /// The template is synced, but Omni's view of the cluster could not be read.
    StatusFailed = "StatusFailed",
    /// Omni refused the template as invalid (an unsupported or incompatible version, a rule Omni enforces); only a spec change can fix it (`Stalled=True`).
    OmniRejected = "OmniRejected",
    /// Omni reports the cluster running: every machine set ready with all its machines healthy, the Kubernetes API ready, no upgrade in flight and no health check failing.
    Running = "Running",
    /// A machine set has fewer machines than it asks for, or some are not healthy yet; the message names the set's OmniControlPlane or OmniWorkers and the counts (`Reconciling=True`).
    WaitingForMachines = "WaitingForMachines",
    /// Omni is upgrading the cluster's Talos or Kubernetes version (`Reconciling=True`).
    Upgrading = "Upgrading",
    /// Omni does not report the cluster's Kubernetes API ready yet (`Reconciling=True`).
    KubernetesNotReady = "KubernetesNotReady",
    /// A Kubernetes health check of the cluster failed in its last run; Omni runs it again (`Reconciling=True`).
    HealthCheckFailed = "HealthCheckFailed",
    /// Omni reports the cluster in a phase other than running, or not ready, for a reason not listed above (`Reconciling=True`).
    ClusterNotRunning = "ClusterNotRunning",
    /// Omni has not yet created what the object waits for (a new cluster's status, the cluster a kubeconfig is minted for); it is looked at again (`Reconciling=True`).
    WaitingForOmni = "WaitingForOmni",
    /// The OmniCluster the object names is not Ready yet: a dependant waits for it before it first acts (`spec.startWhen`), a child is Ready once its cluster is (`Reconciling=True`).
    ClusterNotReady = "ClusterNotReady",
    /// The kubeconfig Secret the object names is not there yet, and an OmniKubeconfigExport of its namespace writes it: the object waits for the export (`Reconciling=True`).
    KubeconfigPending = "KubeconfigPending",
    /// `spec.suspend` is set: the operator leaves the object's target alone, and `Ready` keeps its last state (`Suspended=True`).
    Suspended = "Suspended",
    /// The operator could not finish the pass (a watch not ready, a Helm failure); it is retried.
    ReconcileFailed = "ReconcileFailed",
    /// The target exists and was not created by this object; it is left unchanged until the object is annotated to adopt it.
    TargetNotOwned = "TargetNotOwned",
    /// The kubeconfig is current in its Secret.
    Exported = "Exported",
    /// The kubeconfig could not be minted or written; it is retried.
    ExportFailed = "ExportFailed",
    /// An existing Secret received a freshly minted kubeconfig (Event).
    KubeconfigRotated = "KubeconfigRotated",
    /// Helm installed the release.
    HelmInstalled = "HelmInstalled",
    /// Helm upgraded the release.
    HelmUpgraded = "HelmUpgraded",
    /// Helm uninstalled the release of a deleted object (Event).
    HelmUninstalled = "HelmUninstalled",
    /// The operator has no usable helm binary.
    HelmUnavailable = "HelmUnavailable",
    /// The chart could not be fetched from its repository or registry, or failed its digest check; the message says which, in the operator's words.
    ChartFetchFailed = "ChartFetchFailed",
    /// A Helm operation younger than its timeout holds the release; it is looked at again later.
    ReleasePending = "ReleasePending",
    /// The release has been pending longer than its timeout and is not recovered automatically.
    ReleaseStuck = "ReleaseStuck",
    /// A release left pending was rolled back or uninstalled to recover it (Event).
    StuckReleaseRecovered = "StuckReleaseRecovered",
    /// A failed atomic install or upgrade was undone by Helm (Event).
    RolledBack = "RolledBack",
    /// A deletion left a Helm release in place that this object does not own (Event).
    UninstallSkipped = "UninstallSkipped",
    /// An existing Helm release was taken over on the adopt annotation (Event).
    Adopted = "Adopted",
    /// A release the operator had applied changed behind its back: applied again, or (live objects under `driftDetection.mode: Warn`) reported in the `Drifted` condition (Event).
    DriftDetected = "DriftDetected",
    /// Live objects of a release that differed from it were put back without a new Helm revision (Event, and `Drifted=False`).
    DriftCorrected = "DriftCorrected",
    /// A release named in `spec.dependsOn` is not Ready at its current generation; no Helm runs until it is.
    DependencyNotReady = "DependencyNotReady",
    /// The OmniCluster is not in the state `spec.clusterHealth.require` asks for; installs and upgrades wait.
    ClusterNotHealthy = "ClusterNotHealthy",
    /// A ConfigMap or Secret named in `spec.chart.valuesFrom` without `optional: true`, or its key, does not exist; no Helm runs until it does (its creation wakes the release).
    ValuesSourceMissing = "ValuesSourceMissing",
    /// Every retry `spec.install.remediation` or `spec.upgrade.remediation` allows failed; no Helm runs until the spec or chart changes or the reset annotation is set.
    RetriesExhausted = "RetriesExhausted",
    /// A failed install or upgrade was uninstalled or rolled back by its remediation policy (Event).
    Remediated = "Remediated",
    /// Every test hook of the release passed (`TestSuccess`).
    TestSucceeded = "TestSucceeded",
    /// A test hook of the release failed or did not finish (`TestSuccess`).
    TestFailed = "TestFailed",
    /// A plan that would destroy something in Omni (the cluster's deletion included) waits, all of it, for the annotation `omni.texashpc.com/approve-plan` to carry its hash.
    ApprovalRequired = "ApprovalRequired",
    /// An Omni cluster being adopted differs from the manifests; nothing is written to Omni until they match or the plan is approved.
    AdoptionDiff = "AdoptionDiff",
    /// `spec.changePolicy.mode` is `Plan`: a pending plan is shown in `status.plan` and never written to Omni.
    PlanOnly = "PlanOnly",
    /// A plan released by the approval annotation was applied; the note names its hash (Event).
    PlanApplied = "PlanApplied",
    /// Every object the set generates exists and is Ready at the set's current template.
    SetReady = "SetReady",
    /// The set is creating, updating or withdrawing generated objects, or waits for them to turn Ready; the message names the clusters still failing.
    SetProgressing = "SetProgressing",
    /// A rollout wave has objects that are not Ready at their new template; the next waves wait (the message names the clusters).
    RolloutStalled = "RolloutStalled",
    /// A template could not be rendered: a set's for a cluster (the message names the cluster), or an OmniSecretSync's `data` template; the message names the field and the line, never a value.
    TemplateFailed = "TemplateFailed",
    /// An object of the name the set would generate exists and was not generated by it; it is left unchanged (the message names it).
    NameCollision = "NameCollision",
    /// A change set was written to Omni; the note counts the changes per resource type (Event).
    ChangesApplied = "ChangesApplied",
}

impl Reason {
    /// The reason spelled `text`, if it is one.
    pub fn of(text: &str) -> Option<Reason> {
        Reason::ALL.iter().copied().find(|r| r.as_str() == text)
    }

    /// Whether `Ready=False` for this reason reports a step of an object converging by itself
    /// (Omni provisioning the cluster, machines joining, an upgrade rolling, a cluster or an
    /// export a dependant follows): a new object's first status with such a reason, and a
    /// change from one such step to the next, are progress, shown in the status, and publish
    /// no Event (`shared::status::event_worthy`). A failure, a stall, a missing reference and
    /// turning Ready or not still do.
    pub const fn marks_progress(self) -> bool {
        matches!(
            self,
            Reason::WaitingForOmni
                | Reason::WaitingForMachines
                | Reason::Upgrading
                | Reason::KubernetesNotReady
                | Reason::ClusterNotRunning
                | Reason::ClusterNotReady
                | Reason::KubeconfigPending
        )
    }

    /// Whether a condition that is not healthy for this reason waits for a person's decision
    /// (a plan held for approval or shown only) rather than reporting a failure: its Event is
    /// `Normal`, not a `Warning`.
    pub const fn awaits_a_person(self) -> bool {
        matches!(
            self,
            Reason::ApprovalRequired | Reason::AdoptionDiff | Reason::PlanOnly
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition's or Event's `reason` field holds the text of a [`Reason`].
impl PartialEq<Reason> for String {
    fn eq(&self, reason: &Reason) -> bool {
        self == reason.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_is_spelled_once() {
        let mut texts: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), Reason::ALL.len());
        assert!(
            texts
                .iter()
                .all(|t| t.chars().all(|c| c.is_ascii_alphanumeric()))
        );
        for reason in Reason::ALL {
            assert_eq!(Reason::of(reason.as_str()), Some(*reason));
        }
        assert_eq!(Reason::of("Ready"), None);
    }

    /// Only a plan held for a person is waiting; every other reason keeps its Event type from
    /// the condition's health.
    #[test]
    fn only_held_plans_await_a_person() {
        let waiting: Vec<Reason> = Reason::ALL
            .iter()
            .copied()
            .filter(|r| r.awaits_a_person())
            .collect();
        assert_eq!(
            waiting,
            [
                Reason::ApprovalRequired,
                Reason::AdoptionDiff,
                Reason::PlanOnly
            ]
        );
    }
}
