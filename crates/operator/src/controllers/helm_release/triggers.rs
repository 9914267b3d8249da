//! What of an OmniHelmRelease wakes the releases related to it by `spec.dependsOn`: its
//! readiness wakes its dependants, its deletion the releases it depends on.

use futures::{Stream, StreamExt as _};
use kube::runtime::reflector::ObjectRef;

use super::state::DEPENDENCY;
use crate::api::OmniHelmRelease;
use crate::api::common::{condition_types as ct, find_condition};
use crate::controllers::shared::decoded::{Cached, cached_ref};
use crate::controllers::shared::index::{RefIndex, namespace_of};
use crate::controllers::shared::triggers::{
    Deletions, Triggers, changes_from, deletion_mark, hash_of, own_change,
};
use crate::controllers::shared::watches::WatchEvent;

/// The releases among `events` (a subscription to the releases' shared watch) whose change
/// matters to the releases related to them: first sightings, deletions, and a change of what
/// a dependant reads of its dependency (its generation and the generation its status reports,
/// `Ready`'s status, the deletion mark, its cluster) or of its own `dependsOn`. Messages, times
/// and the rest of a status write wake nobody.
pub(crate) fn dependency_changes(
    events: impl Stream<Item = WatchEvent<OmniHelmRelease>> + Send + 'static,
) -> impl Stream<Item = Triggers<OmniHelmRelease>> + Send + 'static {
    changes_from(
        events,
        |cached: &Cached<OmniHelmRelease>| match cached.decoded() {
            Some(r) => readiness(r),
            None => own_change(cached),
        },
        Deletions::Pass,
    )
    .map(Ok)
}

/// A hash of what a dependant reads of `r`, and of what `r` depends on.
fn readiness(r: &OmniHelmRelease) -> u64 {
    let status = r.status.as_ref();
    let ready = status
        .and_then(|s| find_condition(&s.conditions, ct::READY))
        .map(|c| c.status);
    let depends_on: Vec<&String> = r.spec.depends_on.iter().map(|d| &d.name).collect();
    hash_of((
        r.metadata.generation,
        status.and_then(|s| s.observed_generation),
        ready.map(|s| s.as_str()),
        deletion_mark(&r.metadata),
        &r.spec.cluster_ref.name,
        depends_on,
    ))
}

/// The releases to wake for a change of `r`: those depending on it, and, while it is being
/// deleted (or gone), those it depends on, whose deletion may wait for it.
pub(crate) fn related(
    index: &RefIndex<OmniHelmRelease>,
    r: &Cached<OmniHelmRelease>,
) -> Vec<ObjectRef<Cached<OmniHelmRelease>>> {
    let mut refs = index.referring_to(DEPENDENCY, r);
    if let Some(d) = r.decoded()
        && d.metadata.deletion_timestamp.is_some()
    {
        let ns = namespace_of(d);
        refs.extend(
            d.spec
                .depends_on
                .iter()
                .map(|dep| cached_ref(&dep.name, Some(&ns))),
        );
    }
    refs
}
