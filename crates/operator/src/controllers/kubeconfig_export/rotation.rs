//! When a kubeconfig expires and is rotated, and whether the stored one can be reused: pure
//! functions of times, the spec and the stored Secret.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::duration::GoDuration;
use crate::api::keys;
use crate::api::kubeconfig_export::ExportFormat;
use crate::domain::export_format;

fn signed(d: GoDuration) -> jiff::SignedDuration {
    jiff::SignedDuration::from_nanos(d.as_nanos())
}

/// `now` cut to whole seconds: annotation times are second-precision.
pub(crate) fn whole_seconds(now: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
}

/// The next rotation of a kubeconfig expiring at `expiration`: `renew_before` earlier, or at
/// expiry without it.
fn next_rotation(expiration: jiff::Timestamp, renew_before: Option<GoDuration>) -> jiff::Timestamp {
    match renew_before {
        Some(rb) if rb.is_positive() => expiration.saturating_sub(signed(rb)).unwrap_or(expiration),
        _ => expiration,
    }
}

/// Expiration and next rotation for a kubeconfig written at `now` (docs/parity.md#rotation).
pub(crate) fn rotation_times(
    now: jiff::Timestamp,
    ttl: GoDuration,
    renew_before: Option<GoDuration>,
) -> (jiff::Timestamp, jiff::Timestamp) {
    let expiration = now.saturating_add(signed(ttl)).unwrap_or(now);
    (expiration, next_rotation(expiration, renew_before))
}

/// Whether rotation is due (boundary inclusive).
pub(crate) fn rotation_due(now: jiff::Timestamp, next: jiff::Timestamp) -> bool {
    now >= next
}

/// Requeue delay until `next`; `None` when already due.
pub(crate) fn requeue_after(now: jiff::Timestamp, next: jiff::Timestamp) -> Option<Duration> {
    let d = next.duration_since(now);
    (d.is_positive())
        .then(|| Duration::try_from(d).ok())
        .flatten()
}

/// The next reconcile of an exported kubeconfig: at its next rotation, but never sooner than
/// `floor` — a ttl barely longer than renewBefore (stored without admission) must not mint
/// kubeconfigs in a loop.
pub(crate) fn rotation_delay(
    now: jiff::Timestamp,
    next: jiff::Timestamp,
    floor: Duration,
) -> Duration {
    requeue_after(now, next)
        .unwrap_or(Duration::ZERO)
        .max(floor)
}

/// What the stored Secret says about the current kubeconfig, if it can be reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// Hash of the stored kubeconfig.
    pub(crate) hash: String,
    /// Its expiration.
    pub(crate) expiration: jiff::Timestamp,
    /// When it was written, if recorded.
    pub(crate) last_rotation: Option<jiff::Timestamp>,
    /// When it should be rotated.
    pub(crate) next_rotation: jiff::Timestamp,
}

/// Pure part of reuse (docs/parity.md#reusing-a-stored-kubeconfig, before the probe): the stored
/// data of the shape
/// `format` (`key` is the kubeconfig key of the `Kubeconfig` shape).
pub(crate) fn reusable(
    secret: &Secret,
    format: ExportFormat,
    key: &str,
    spec_hash: &str,
    renew_before: Option<GoDuration>,
    now: jiff::Timestamp,
) -> Option<Stored> {
    let data: BTreeMap<String, &[u8]> = secret
        .data
        .as_ref()?
        .iter()
        .map(|(k, v)| (k.clone(), v.0.as_slice()))
        .collect();
    let a = secret.annotations();
    if a.get(keys::EXPORT_SPEC_HASH_ANNOTATION).map(String::as_str) != Some(spec_hash) {
        return None;
    }
    let hash = export_format::data_hash(format, key, &data)?;
    if a.get(keys::KUBECONFIG_HASH_ANNOTATION) != Some(&hash) {
        return None;
    }
    let expiration: jiff::Timestamp = a
        .get(keys::KUBECONFIG_EXPIRATION_ANNOTATION)?
        .parse()
        .ok()?;
    let last_rotation = match a.get(keys::KUBECONFIG_LAST_ROTATION_ANNOTATION) {
        Some(t) => Some(t.parse().ok()?),
        None => None,
    };
    let next_rotation = next_rotation(expiration, renew_before);
    if rotation_due(now, next_rotation) {
        return None;
    }
    Some(Stored {
        hash,
        expiration,
        last_rotation,
        next_rotation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn sha256_hex(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }
    use k8s_openapi::ByteString;

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(s)
    }

    #[test]
    fn rotation_maths() {
        let h = 3600;
        let (exp, next) = rotation_times(
            at(0),
            GoDuration::from_secs(24 * h),
            Some(GoDuration::from_secs(4 * h)),
        );
        assert_eq!(exp, at(24 * h));
        assert_eq!(next, at(20 * h));
        assert_eq!(
            requeue_after(at(0), next),
            Some(Duration::from_secs(20 * 3600))
        );
        let (_, no_renew) = rotation_times(at(0), GoDuration::from_secs(h), None);
        assert_eq!(no_renew, at(h));
        assert!(rotation_due(at(20 * h), next));
        assert!(!rotation_due(at(20 * h - 1), next));
        assert_eq!(requeue_after(at(20 * h), next), None);
    }

    /// The next reconcile is at the rotation, floored so a due or nearly due rotation cannot
    /// mint in a loop.
    #[test]
    fn the_next_reconcile_is_the_rotation_but_never_sooner_than_the_floor() {
        let floor = Duration::from_secs(10);
        let cases = [
            ("well ahead", at(0), at(3600), Duration::from_secs(3600)),
            ("closer than the floor", at(0), at(3), floor),
            ("due now", at(50), at(50), floor),
            ("overdue", at(90), at(50), floor),
        ];
        for (case, now, next, want) in cases {
            assert_eq!(rotation_delay(now, next, floor), want, "{case}");
        }
    }

    #[test]
    fn stored_kubeconfig_reuse_rules() {
        let kc = b"apiVersion: v1\nkind: Config\n".to_vec();
        let mut s = Secret {
            data: Some(BTreeMap::from([(
                "kubeconfig".to_string(),
                ByteString(kc.clone()),
            )])),
            ..Secret::default()
        };
        s.metadata.annotations = Some(BTreeMap::from([
            (
                keys::EXPORT_SPEC_HASH_ANNOTATION.to_string(),
                "spec".to_string(),
            ),
            (
                keys::KUBECONFIG_HASH_ANNOTATION.to_string(),
                sha256_hex(&kc),
            ),
            (
                keys::KUBECONFIG_EXPIRATION_ANNOTATION.to_string(),
                at(100).to_string(),
            ),
        ]));
        let rb = Some(GoDuration::from_secs(20));
        let kubeconfig = ExportFormat::Kubeconfig;
        let stored = reusable(&s, kubeconfig, "kubeconfig", "spec", rb, at(10));
        assert_eq!(stored.map(|x| x.next_rotation), Some(at(80)));
        assert_eq!(
            reusable(&s, kubeconfig, "kubeconfig", "spec", rb, at(80)),
            None,
            "due at the boundary"
        );
        assert_eq!(
            reusable(&s, kubeconfig, "kubeconfig", "other", rb, at(10)),
            None,
            "spec changed"
        );
        assert_eq!(
            reusable(&s, kubeconfig, "other", "spec", rb, at(10)),
            None,
            "key missing"
        );
    }
}
