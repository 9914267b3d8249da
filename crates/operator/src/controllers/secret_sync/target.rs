//! The workload copy as a sync wants it, and what to do with the one that is there (pure).

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::api::OmniSecretSync;
use crate::api::keys;
use crate::domain::fleet_template::ClusterFacts;
use crate::domain::secret_data::{self, DataError};

/// Lowercase hex SHA-256 of `{"version":"v1","type":..,"data":{key: base64}}` (keys sorted;
/// empty data is `null`).
pub(crate) fn content_hash(type_: &str, data: &BTreeMap<String, ByteString>) -> String {
    let encoded: Option<BTreeMap<&str, String>> = (!data.is_empty()).then(|| {
        data.iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    base64::engine::general_purpose::STANDARD.encode(&v.0),
                )
            })
            .collect()
    });
    // Field order matters for the hash; build the text by hand rather than rely on map order.
    let payload = format!(
        "{{\"version\":\"v1\",\"type\":{},\"data\":{}}}",
        serde_json::Value::String(type_.to_string()),
        serde_json::to_string(&encoded).unwrap_or_else(|_| "null".into())
    );
    hex::encode(Sha256::digest(payload.as_bytes()))
}

/// Whether `secret` belongs to `sync`: by UID label when the sync has a UID, else by name
/// annotation.
pub(crate) fn is_owned(secret: &Secret, sync: &OmniSecretSync) -> bool {
    match sync.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => {
            secret
                .labels()
                .get(keys::SECRET_SYNC_UID_LABEL)
                .map(String::as_str)
                == Some(uid)
        }
        _ => {
            secret.annotations().get(keys::SECRET_SYNC_NAME_ANNOTATION)
                == sync.metadata.name.as_ref()
        }
    }
}

/// What the copy holds, whichever namespace it is written to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Content {
    /// The Secret type.
    pub(crate) type_: String,
    /// The keys and values.
    pub(crate) data: BTreeMap<String, ByteString>,
    /// The source Secrets, `namespace/name` joined by `,` (the source annotation).
    pub(crate) sources: String,
}

impl Content {
    /// The copy's content from the sources the pass read (by handle): the type is
    /// `spec.type`, else the type of `sourceSecretRef`, else `Opaque`.
    pub(crate) fn of(
        sync: &OmniSecretSync,
        sources: &BTreeMap<String, Secret>,
        cluster: &ClusterFacts,
    ) -> Result<Self, DataError> {
        let data_of = sources
            .iter()
            .map(|(handle, s)| (handle.clone(), s.data.clone().unwrap_or_default()))
            .collect();
        let data = secret_data::desired_data(&sync.spec, &data_of, cluster)?;
        let source_type = sync
            .spec
            .source_secret_ref
            .as_ref()
            .and_then(|r| sources.get(&r.name))
            .and_then(|s| s.type_.clone());
        let type_ = sync
            .spec
            .type_
            .clone()
            .or(source_type)
            .unwrap_or_else(|| "Opaque".to_string());
        let namespace = sync.namespace().unwrap_or_default();
        let mut names: Vec<&str> = sync
            .spec
            .source_refs()
            .into_iter()
            .map(|(_, name, _)| name)
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        names.retain(|name| seen.insert(*name));
        let sources = names
            .iter()
            .map(|name| format!("{namespace}/{name}"))
            .collect::<Vec<_>>()
            .join(",");
        Ok(Self {
            type_,
            data,
            sources,
        })
    }

    /// The content hash ([`content_hash`]).
    pub(crate) fn hash(&self) -> String {
        content_hash(&self.type_, &self.data)
    }
}

/// The target Secret as this sync wants it in workload namespace `namespace`
/// (docs/parity.md#the-workload-copy).
pub(crate) fn desired_target(
    sync: &OmniSecretSync,
    content: &Content,
    namespace: &str,
    cluster_name: &str,
) -> Secret {
    let hash = content.hash();
    let mut labels = sync.spec.labels.clone().unwrap_or_default();
    labels.insert(keys::MANAGED_BY.0.into(), keys::MANAGED_BY.1.into());
    labels.insert(
        keys::SECRET_SYNC_UID_LABEL.into(),
        sync.metadata.uid.clone().unwrap_or_default(),
    );
    labels.insert(keys::CLUSTER_LABEL.into(), cluster_name.into());
    let mut annotations = sync.spec.annotations.clone().unwrap_or_default();
    annotations.insert(keys::SECRET_SYNC_NAME_ANNOTATION.into(), sync.name_any());
    annotations.insert(
        keys::SECRET_SYNC_SOURCE_ANNOTATION.into(),
        content.sources.clone(),
    );
    annotations.insert(keys::SECRET_SYNC_HASH_ANNOTATION.into(), hash);
    annotations.insert(keys::SECRET_SYNC_CONTENT_ANNOTATION.into(), "v1".into());
    Secret {
        metadata: ObjectMeta {
            name: Some(sync.spec.target_secret_ref.name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some(content.type_.clone()),
        data: (!content.data.is_empty()).then(|| content.data.clone()),
        ..Secret::default()
    }
}

/// What to do with the workload cluster's target Secret.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Plan {
    /// It does not exist: create it.
    Create(Secret),
    /// It already matches.
    NoChange,
    /// Update it to this object (third-party labels/annotations kept).
    Update(Secret),
    /// The type differs (immutable): delete and create.
    Recreate(Secret),
    /// It exists and belongs to someone else: leave it alone.
    NotOwned,
}

/// Pure: compare the existing target with the desired one.
pub(super) fn plan(sync: &OmniSecretSync, existing: Option<&Secret>, desired: Secret) -> Plan {
    let Some(existing) = existing else {
        return Plan::Create(desired);
    };
    if !is_owned(existing, sync) && !keys::adopt_requested(&existing.metadata) {
        return Plan::NotOwned;
    }
    if existing.type_ != desired.type_ {
        return Plan::Recreate(desired);
    }
    let mut merged = existing.clone();
    let labels = merged.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(desired.metadata.labels.clone().unwrap_or_default());
    let annotations = merged
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.extend(desired.metadata.annotations.clone().unwrap_or_default());
    // Adoption is a one-time permission; once owned, the marker has done its job.
    annotations.remove(keys::ADOPT_ANNOTATION);
    merged.data = desired.data.clone();
    if merged.data.is_none() && existing.data.as_ref().is_some_and(BTreeMap::is_empty) {
        merged.data = existing.data.clone();
    }
    merged.string_data = None;
    if merged.metadata.labels == existing.metadata.labels
        && merged.metadata.annotations == existing.metadata.annotations
        && merged.data.clone().unwrap_or_default() == existing.data.clone().unwrap_or_default()
    {
        Plan::NoChange
    } else {
        Plan::Update(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::secret_sync::fixtures::{source, sync};

    fn content(s: &OmniSecretSync) -> Content {
        let sources = BTreeMap::from([("src".to_string(), source())]);
        Content::of(s, &sources, &ClusterFacts::default()).unwrap_or_else(|e| panic!("{e:?}"))
    }

    /// Without `data`, the copy is the source's data and type, the hash and the source
    /// annotation as before `data` existed.
    #[test]
    fn without_data_the_content_is_the_sources() {
        let s = sync();
        let c = content(&s);
        assert_eq!(Some(c.data.clone()), source().data);
        assert_eq!(c.type_, "Opaque");
        assert_eq!(c.sources, "ns/src");
        let desired = desired_target(&s, &c, "apps", "prod");
        assert_eq!(
            desired
                .annotations()
                .get(keys::SECRET_SYNC_HASH_ANNOTATION)
                .map(String::as_str),
            Some(c.hash().as_str())
        );
    }

    #[test]
    fn hash_matches_the_documented_payload() {
        let data = source().data.unwrap_or_default();
        let expected = hex::encode(Sha256::digest(
            br#"{"version":"v1","type":"Opaque","data":{"a":"b25l","b":"dHdv"}}"#,
        ));
        assert_eq!(content_hash("Opaque", &data), expected);
        let empty = hex::encode(Sha256::digest(
            br#"{"version":"v1","type":"Opaque","data":null}"#,
        ));
        assert_eq!(content_hash("Opaque", &BTreeMap::new()), empty);
    }

    #[test]
    fn unowned_target_is_left_alone_unless_adoptable() {
        let s = sync();
        let desired = desired_target(&s, &content(&s), "apps", "prod");
        let mut foreign = Secret {
            metadata: ObjectMeta {
                name: Some("dst".into()),
                namespace: Some("apps".into()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            ..Secret::default()
        };
        assert_eq!(plan(&s, Some(&foreign), desired.clone()), Plan::NotOwned);
        foreign.metadata.annotations = Some(BTreeMap::from([(
            keys::ADOPT_ANNOTATION.to_string(),
            "true".to_string(),
        )]));
        let Plan::Update(updated) = plan(&s, Some(&foreign), desired) else {
            panic!("adoptable target must be updated");
        };
        assert!(is_owned(&updated, &s));
        assert!(!updated.annotations().contains_key(keys::ADOPT_ANNOTATION));
    }

    #[test]
    fn update_keeps_third_party_metadata_and_idle_is_no_change() {
        let s = sync();
        let desired = desired_target(&s, &content(&s), "apps", "prod");
        let Plan::Create(created) = plan(&s, None, desired.clone()) else {
            panic!("missing target must be created");
        };
        assert_eq!(created.labels().get("team").map(String::as_str), Some("a"));
        assert_eq!(
            created
                .labels()
                .get(keys::SECRET_SYNC_UID_LABEL)
                .map(String::as_str),
            Some("u-1")
        );
        let mut live = created.clone();
        live.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("other".into(), "x".into());
        assert_eq!(plan(&s, Some(&live), desired.clone()), Plan::NoChange);
        live.data = Some(BTreeMap::from([(
            "a".to_string(),
            ByteString(b"drift".to_vec()),
        )]));
        let Plan::Update(fixed) = plan(&s, Some(&live), desired.clone()) else {
            panic!("drift must be corrected");
        };
        assert_eq!(fixed.labels().get("other").map(String::as_str), Some("x"));
        assert_eq!(fixed.data, source().data);
        live.type_ = Some("kubernetes.io/tls".into());
        assert!(matches!(plan(&s, Some(&live), desired), Plan::Recreate(_)));
    }
}
