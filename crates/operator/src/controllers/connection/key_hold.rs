//! The hold on an OmniConnection's key Secret while OmniClusters use the connection.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ListParams;

use crate::api::keys;
use crate::api::{OmniCluster, OmniConnection};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::Error;
use crate::controllers::shared::finalizer::set_secret_finalizers;

/// Whether a connection's hold is on `secret`.
pub(crate) fn holds_key(secret: &kube::api::ObjectMeta) -> bool {
    secret
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == keys::KEY_IN_USE_FINALIZER)
}

/// Pure: the key Secrets of `connections` that clusters need (those of connections that at
/// least one of `clusters` references).
pub(crate) fn needed_keys(
    connections: &[OmniConnection],
    clusters: &[OmniCluster],
) -> BTreeSet<String> {
    connections
        .iter()
        .filter(|conn| {
            clusters.iter().any(|c| {
                c.spec.connection_ref.name == conn.name_any() && c.namespace() == conn.namespace()
            })
        })
        .map(|conn| conn.spec.auth.service_account_secret_ref.name.clone())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Per namespace, the needed key Secrets as of the last complete sweep of its Secrets.
///
/// A hold can only become unneeded when the needed set changes (the last cluster of a
/// connection went, a connection names another Secret, a connection went), so the sweep, which
/// lists every Secret of the namespace, runs only then, and once per namespace after a start.
/// It ran on every connection pass: with 10,000 Secrets that was the largest allocation of a
/// cold start.
#[derive(Debug, Default)]
pub(crate) struct SweptKeys(Mutex<HashMap<String, BTreeSet<String>>>);

impl SweptKeys {
    /// Whether the holds of `ns` were swept for exactly `needed`.
    fn swept_for(&self, ns: &str, needed: &BTreeSet<String>) -> bool {
        let swept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        swept.get(ns) == Some(needed)
    }

    fn record(&self, ns: &str, needed: BTreeSet<String>) {
        let mut swept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        swept.insert(ns.to_string(), needed);
    }
}

/// Puts the hold on the key Secrets of `ns` that its clusters need and lifts it from those no
/// longer needed (the last cluster went, a connection now names another Secret, the connection
/// is gone). A Secret being deleted takes no new finalizer; one held goes once it is released.
pub(super) async fn sync_key_holds(
    ctx: &Context,
    swept: &SweptKeys,
    ns: &str,
) -> Result<(), Error> {
    let lp = ListParams::default();
    let connections = ctx.api::<OmniConnection>(ns).list(&lp).await?.items;
    let clusters = ctx.api::<OmniCluster>(ns).list(&lp).await?.items;
    let needed = needed_keys(&connections, &clusters);
    let secrets = ctx.api::<Secret>(ns);
    for name in &needed {
        if let Some(secret) = secrets.get_opt(name).await?
            && secret.metadata.deletion_timestamp.is_none()
            && !holds_key(&secret.metadata)
        {
            let mut list = secret.finalizers().to_vec();
            list.push(keys::KEY_IN_USE_FINALIZER.to_string());
            set_secret_finalizers(&secrets, &secret.metadata, list).await?;
        }
    }
    if swept.swept_for(ns, &needed) {
        return Ok(());
    }
    // Metadata alone: the namespace may hold thousands of Secrets, and only finalizers matter.
    for secret in secrets.list_metadata(&lp).await? {
        if holds_key(&secret.metadata) && !needed.contains(&secret.name_any()) {
            let rest = secret
                .finalizers()
                .iter()
                .filter(|f| *f != keys::KEY_IN_USE_FINALIZER)
                .cloned()
                .collect();
            set_secret_finalizers(&secrets, &secret.metadata, rest).await?;
        }
    }
    swept.record(ns, needed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::connection::fixtures::{cluster, conn};

    #[test]
    fn a_sweep_is_due_whenever_the_needed_keys_differ_from_the_last_sweep() {
        let swept = SweptKeys::default();
        let k = BTreeSet::from(["k".to_string()]);
        assert!(!swept.swept_for("ns", &BTreeSet::new()), "never swept");
        swept.record("ns", k.clone());
        assert!(swept.swept_for("ns", &k));
        assert!(
            !swept.swept_for("ns", &BTreeSet::new()),
            "the last cluster went"
        );
        assert!(!swept.swept_for("other", &k), "per namespace");
    }

    #[test]
    fn only_key_secrets_of_connections_that_clusters_use_are_needed() {
        let used = conn();
        let mut idle = conn();
        idle.metadata.name = Some("idle".into());
        idle.spec.auth.service_account_secret_ref.name = "idle-key".into();
        let clusters = [cluster("a", "omni"), cluster("b", "omni")];
        assert_eq!(
            needed_keys(&[used.clone(), idle.clone()], &clusters),
            BTreeSet::from(["k".to_string()])
        );
        // The last cluster gone: nothing needs a key any more.
        assert!(needed_keys(&[used.clone(), idle], &[]).is_empty());
        // A cluster of another namespace does not count.
        let mut elsewhere = cluster("c", "omni");
        elsewhere.metadata.namespace = Some("other".into());
        assert!(needed_keys(&[used], &[elsewhere]).is_empty());
    }
}
