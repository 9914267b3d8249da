//! Whose a release is, and which operator process started its newest revision: pure decisions
//! from the release labels (`helm get metadata`), Helm's view and the stored status.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::OmniHelmRelease;
use crate::api::keys;
use crate::api::keys::{
    HELM_OWNER_NAME_LABEL, HELM_OWNER_NAMESPACE_LABEL, HELM_OWNER_UID_LABEL,
    HELM_STARTED_BY_RUN_LABEL, HELM_STARTED_REVISION_LABEL,
};
use crate::domain::helm::{ReleaseInfo, ReleaseRequest};

/// The labels marking the revision `revision` as started by the operator process `run_id`.
pub(crate) fn run_labels(run_id: &str, revision: i64) -> Vec<(String, String)> {
    vec![
        (HELM_STARTED_BY_RUN_LABEL.to_string(), run_id.to_string()),
        (
            HELM_STARTED_REVISION_LABEL.to_string(),
            revision.to_string(),
        ),
    ]
}

/// Who started the newest revision of a release, as its labels tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Starter {
    /// This operator process.
    ThisRun,
    /// An earlier operator process. Leader election fences every earlier leader before a new
    /// one starts, and its helm processes die with it, so nothing still works on the revision.
    EarlierRun,
    /// Unmarked or inherited marks: someone else (a person, another tool, a rollback), or an
    /// operator version that did not mark revisions.
    Unknown,
}

/// Pure decision of [`Starter`] from the newest revision's labels and Helm's view of it.
pub(crate) fn starter(
    labels: &BTreeMap<String, String>,
    info: &ReleaseInfo,
    run_id: &str,
) -> Starter {
    match (
        labels.get(HELM_STARTED_BY_RUN_LABEL),
        labels.get(HELM_STARTED_REVISION_LABEL),
    ) {
        (Some(run), Some(revision)) if *revision == info.revision.to_string() => {
            if run == run_id {
                Starter::ThisRun
            } else {
                Starter::EarlierRun
            }
        }
        _ => Starter::Unknown,
    }
}

/// The ownership labels this object puts on every revision it installs or upgrades.
pub(crate) fn owner_labels(r: &OmniHelmRelease) -> Vec<(String, String)> {
    let Some(uid) = r.metadata.uid.as_deref().filter(|u| !u.is_empty()) else {
        return Vec::new();
    };
    let mut labels = vec![(HELM_OWNER_UID_LABEL.to_string(), uid.to_string())];
    if let Some(ns) = r.metadata.namespace.as_deref() {
        labels.push((HELM_OWNER_NAMESPACE_LABEL.to_string(), ns.to_string()));
    }
    let name = r.name_any();
    // Object names may be 253 characters long, label values only 63.
    if name.len() <= 63 {
        labels.push((HELM_OWNER_NAME_LABEL.to_string(), name));
    }
    labels
}

/// Whose an existing release is, as far as this OmniHelmRelease is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// Labelled with this object's UID.
    Owned,
    /// Unlabelled, but installed by this object before releases were labelled: its stored
    /// status records a successful Helm run for this very target at the current revision.
    InstalledBeforeLabels,
    /// Labelled as another OmniHelmRelease's (described for the message).
    OwnedByOther(String),
    /// Not installed by any OmniHelmRelease we know of (e.g. `helm install` by hand).
    Unowned,
}

impl Ownership {
    /// Whether this object may upgrade, roll back or uninstall the release unasked.
    pub(crate) fn is_ours(&self) -> bool {
        matches!(self, Ownership::Owned | Ownership::InstalledBeforeLabels)
    }

    /// "belongs to …" / "was not installed by this OmniHelmRelease", for messages.
    pub(crate) fn whose(&self) -> String {
        match self {
            Ownership::OwnedByOther(who) => format!("belongs to {who}"),
            _ => "was not installed by this OmniHelmRelease".to_string(),
        }
    }
}

/// Pure ownership decision on the release `req` of `r` from its labels (`helm get metadata`),
/// Helm's view of it and this object's stored status.
pub(crate) fn ownership(
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    labels: &BTreeMap<String, String>,
    info: &ReleaseInfo,
) -> Ownership {
    let own_uid = r.metadata.uid.as_deref().filter(|u| !u.is_empty());
    match labels.get(HELM_OWNER_UID_LABEL) {
        Some(uid) if Some(uid.as_str()) == own_uid => Ownership::Owned,
        Some(uid) => Ownership::OwnedByOther(
            match (
                labels.get(HELM_OWNER_NAMESPACE_LABEL),
                labels.get(HELM_OWNER_NAME_LABEL),
            ) {
                (Some(ns), Some(name)) => format!("OmniHelmRelease {ns}/{name} (uid {uid})"),
                _ => format!("another OmniHelmRelease (uid {uid})"),
            },
        ),
        None if installed_before_labels(r, req, info) => Ownership::InstalledBeforeLabels,
        None => Ownership::Unowned,
    }
}

/// Recognises a release this object installed with an operator version that did not label
/// releases yet: the stored status must name the same target (release, namespace, kubeconfig
/// Secret and key) and Helm's current revision, and record a successful apply (the digest).
/// The status is only written by the operator (status subresource), and any refusal clears the
/// digest, so an object pointed at someone else's release never matches.
fn installed_before_labels(r: &OmniHelmRelease, req: &ReleaseRequest, info: &ReleaseInfo) -> bool {
    let Some(s) = &r.status else {
        return false;
    };
    s.last_applied_digest.is_some()
        && s.release_name.as_deref() == Some(req.release_name.as_str())
        && s.namespace.as_deref() == Some(req.namespace.as_str())
        && s.kubeconfig_secret_ref.as_deref() == Some(r.spec.kubeconfig_secret_ref.name.as_str())
        && s.kubeconfig_secret_key.as_deref() == Some(r.spec.kubeconfig_secret_ref.key.as_str())
        && s.release_revision == Some(info.revision)
}

/// What this object may do with the release it found, decided once per pass, before anything
/// may change the release (a recovery, an install or an upgrade).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Ours (or there is no release to claim): change it freely. Tells who started its newest
    /// revision, which decides whether a `pending-*` revision was abandoned.
    Ours(Starter),
    /// Someone else's, taken over because the user asked ([`keys::ADOPT_ANNOTATION`]). It stays
    /// someone else's until our install or upgrade has labelled it, so it is never recovered
    /// at once as abandoned.
    Adopting,
    /// Someone else's, and left alone.
    Refused(Ownership),
}

/// Pure claim on the existing release `req` from its labels and Helm's view of it.
pub(crate) fn claim(
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    labels: &BTreeMap<String, String>,
    info: &ReleaseInfo,
    run_id: &str,
) -> Claim {
    let o = ownership(r, req, labels, info);
    if o.is_ours() {
        Claim::Ours(starter(labels, info, run_id))
    } else if keys::adopt_requested(&r.metadata) {
        Claim::Adopting
    } else {
        Claim::Refused(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::helm_release::OmniHelmReleaseStatus;
    use crate::controllers::helm_release::inputs::request;
    use crate::controllers::helm_release::test_support::{info, labels, release};

    #[test]
    fn a_release_is_ours_by_uid_label_or_by_a_status_from_before_labels() {
        let mut r = release(serde_json::json!({}));
        r.metadata.uid = Some("uid-a".into());
        let deployed = info("deployed", 2);
        let stamped = labels(&[(HELM_OWNER_UID_LABEL, "uid-a"), ("owner", "helm")]);
        assert_eq!(
            ownership(&r, &request(&r), &stamped, &deployed),
            Ownership::Owned
        );
        let other = labels(&[
            (HELM_OWNER_UID_LABEL, "uid-b"),
            (HELM_OWNER_NAMESPACE_LABEL, "ns"),
            (HELM_OWNER_NAME_LABEL, "second"),
        ]);
        assert_eq!(
            ownership(&r, &request(&r), &other, &deployed),
            Ownership::OwnedByOther("OmniHelmRelease ns/second (uid uid-b)".into())
        );
        // `helm install` by hand: no label, no status.
        assert_eq!(
            ownership(&r, &request(&r), &labels(&[]), &deployed),
            Ownership::Unowned
        );
        // Installed by this object before releases were labelled.
        r.status = Some(OmniHelmReleaseStatus {
            last_applied_digest: Some(request(&r).digest),
            release_revision: Some(2),
            release_name: Some("app".into()),
            namespace: Some("default".into()),
            kubeconfig_secret_ref: Some("kc".into()),
            kubeconfig_secret_key: Some(r.spec.kubeconfig_secret_ref.key.clone()),
            ..OmniHelmReleaseStatus::default()
        });
        assert_eq!(
            ownership(&r, &request(&r), &labels(&[]), &deployed),
            Ownership::InstalledBeforeLabels
        );
        // ...but not once Helm is at a revision the status never saw,
        assert_eq!(
            ownership(&r, &request(&r), &labels(&[]), &info("deployed", 3)),
            Ownership::Unowned
        );
        // nor when the object now points at another release, nor for another owner's label.
        let mut moved = r.clone();
        moved.spec.release_name = Some("other".into());
        assert_eq!(
            ownership(&moved, &request(&moved), &labels(&[]), &deployed),
            Ownership::Unowned
        );
        assert!(!ownership(&r, &request(&r), &other, &deployed).is_ours());
    }

    #[test]
    fn owner_labels_name_the_object_and_fit_label_values() {
        let mut r = release(serde_json::json!({}));
        assert!(owner_labels(&r).is_empty(), "no UID, nothing to claim with");
        r.metadata.uid = Some("uid-a".into());
        assert_eq!(
            owner_labels(&r),
            vec![
                (HELM_OWNER_UID_LABEL.to_string(), "uid-a".to_string()),
                (HELM_OWNER_NAMESPACE_LABEL.to_string(), "ns".to_string()),
                (HELM_OWNER_NAME_LABEL.to_string(), "app".to_string()),
            ]
        );
        r.metadata.name = Some("n".repeat(64));
        assert!(
            owner_labels(&r)
                .iter()
                .all(|(k, _)| k != HELM_OWNER_NAME_LABEL)
        );
    }

    #[test]
    fn the_starter_of_a_revision_is_told_by_its_run_and_revision_labels() {
        let pending_rev = info("pending-upgrade", 4);
        let marked = |run: &str, revision: &str| {
            labels(&[
                (HELM_OWNER_UID_LABEL, "uid-a"),
                (HELM_STARTED_BY_RUN_LABEL, run),
                (HELM_STARTED_REVISION_LABEL, revision),
            ])
        };
        assert_eq!(
            starter(&marked("run-b", "4"), &pending_rev, "run-b"),
            Starter::ThisRun
        );
        assert_eq!(
            starter(&marked("run-a", "4"), &pending_rev, "run-b"),
            Starter::EarlierRun
        );
        // Helm carried revision 3's labels into revision 4 (someone else's upgrade, a rollback).
        assert_eq!(
            starter(&marked("run-a", "3"), &pending_rev, "run-b"),
            Starter::Unknown
        );
        assert_eq!(
            starter(
                &labels(&[(HELM_OWNER_UID_LABEL, "uid-a")]),
                &pending_rev,
                "run-b"
            ),
            Starter::Unknown
        );
        assert_eq!(
            run_labels("run-b", 5),
            [
                (HELM_STARTED_BY_RUN_LABEL.to_string(), "run-b".to_string()),
                (HELM_STARTED_REVISION_LABEL.to_string(), "5".to_string()),
            ]
        );
    }

    #[test]
    fn an_adopted_release_is_claimed_without_trusting_its_run_marks() {
        let mut r = release(serde_json::json!({}));
        r.metadata.uid = Some("uid-a".into());
        let pending_rev = info("pending-upgrade", 4);
        let ours = labels(&[
            (HELM_OWNER_UID_LABEL, "uid-a"),
            (HELM_STARTED_BY_RUN_LABEL, "run-a"),
            (HELM_STARTED_REVISION_LABEL, "4"),
        ]);
        assert_eq!(
            claim(&r, &request(&r), &ours, &pending_rev, "run-b"),
            Claim::Ours(Starter::EarlierRun)
        );
        // Someone else's release with marks of an earlier run: refused, or adopted on request
        // (and then never treated as abandoned by us).
        let theirs = labels(&[
            (HELM_OWNER_UID_LABEL, "uid-b"),
            (HELM_STARTED_BY_RUN_LABEL, "run-a"),
            (HELM_STARTED_REVISION_LABEL, "4"),
        ]);
        assert_eq!(
            claim(&r, &request(&r), &theirs, &pending_rev, "run-b"),
            Claim::Refused(Ownership::OwnedByOther(
                "another OmniHelmRelease (uid uid-b)".into()
            ))
        );
        r.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(keys::ADOPT_ANNOTATION.into(), "true".into());
        assert_eq!(
            claim(&r, &request(&r), &theirs, &pending_rev, "run-b"),
            Claim::Adopting
        );
    }
}
