//! Deletes that cannot hit a replaced object.
//!
//! The operator decides to delete an object (an export's target Secret, a synced copy in a
//! workload cluster) after reading it and checking that it owns it. Between that read and the
//! delete, someone may delete the object and create another one under the same name, which the
//! operator does not own. A delete by name would remove the newcomer; [`delete_observed`] sends
//! the observed `uid` and `resourceVersion` as preconditions, so the API server deletes only
//! the object that was checked, unchanged.

use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// What [`delete_observed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deleted {
    /// The observed object was deleted.
    Removed,
    /// Nothing by that name exists any more.
    Gone,
    /// The object under that name is not the one observed (replaced or changed since); it was
    /// left alone. Read it again and decide afresh.
    Changed,
}

/// Deletes `observed` through `api` only if the object under its name still has the observed
/// `uid` and `resourceVersion`.
pub(crate) async fn delete_observed<K>(api: &Api<K>, observed: &K) -> Result<Deleted, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: observed.uid(),
            resource_version: observed.resource_version(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&observed.name_any(), &params).await {
        Ok(_) => Ok(Deleted::Removed),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deleted::Gone),
        // 409 Conflict is how the API server reports a failed precondition.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Deleted::Changed),
        Err(e) => Err(e),
    }
}
