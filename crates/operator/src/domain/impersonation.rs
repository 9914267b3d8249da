//! Reading what an object references as its author's ServiceAccount.
//!
//! Whoever may write an OmniSecretSync, OmniHelmRelease or OmniConnection can name any Secret of
//! its namespace, including ones its author may not read; the operator, which may read them all,
//! would otherwise lend its own identity to the request. With `spec.serviceAccountName` (or the
//! deployment's `--default-service-account`), every read of a referenced Secret is made as that
//! ServiceAccount (`Impersonate-User: system:serviceaccount:<namespace>:<name>`), so an object
//! can use exactly what its ServiceAccount may read: the Kubernetes API server decides, with the
//! namespace's own RBAC. A denied read is reported on the object; it never falls back to the
//! operator's identity. This is Flux's multi-tenancy model.

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;

/// Whose identity reads an object's references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reader {
    /// The operator's own (no ServiceAccount configured).
    Operator,
    /// The ServiceAccount `name` of `namespace`.
    ServiceAccount { namespace: String, name: String },
}

impl Reader {
    /// The reader of an object in `namespace` with `spec.serviceAccountName` `own`, under the
    /// deployment's `--default-service-account` `default`.
    pub(crate) fn of(namespace: &str, own: Option<&str>, default: Option<&str>) -> Reader {
        fn named(n: Option<&str>) -> Option<&str> {
            n.map(str::trim).filter(|n| !n.is_empty())
        }
        match named(own).or(named(default)) {
            Some(name) => Reader::ServiceAccount {
                namespace: namespace.to_string(),
                name: name.to_string(),
            },
            None => Reader::Operator,
        }
    }

    /// The user name the API server sees.
    fn user(&self) -> Option<String> {
        match self {
            Reader::Operator => None,
            Reader::ServiceAccount { namespace, name } => {
                Some(format!("system:serviceaccount:{namespace}:{name}"))
            }
        }
    }
}

impl std::fmt::Display for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reader::Operator => f.write_str("the operator"),
            Reader::ServiceAccount { namespace, name } => {
                write!(f, "ServiceAccount \"{namespace}/{name}\"")
            }
        }
    }
}

/// Why a read as a [`Reader`] failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The API server refused the read (403): the reader may not read it, or the operator may
    /// not impersonate the reader.
    #[error("{reader} may not read {what}: {message}")]
    Denied {
        /// Who read.
        reader: String,
        /// The object, e.g. `Secret "ns/name"`.
        what: String,
        /// The API server's reason.
        message: String,
    },
    /// Another failure of the management API.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// `K` `name` of `namespace` as `reader` reads it: `None` when it does not exist.
pub(crate) async fn get<K>(
    client: &kube::Client,
    reader: &Reader,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, ReadError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let Some(user) = reader.user() else {
        return Ok(kube::Api::<K>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?);
    };
    let url = K::url_path(&(), Some(namespace));
    let mut request = kube::core::Request::new(url)
        .get(name, &kube::api::GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    let value = http::HeaderValue::from_str(&user).map_err(|e| {
        kube::Error::BuildRequest(kube::core::request::Error::Validation(e.to_string()))
    })?;
    request.headers_mut().insert("Impersonate-User", value);
    match client.request::<K>(request).await {
        Ok(obj) => Ok(Some(obj)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 403 => Err(ReadError::Denied {
            reader: reader.to_string(),
            what: format!("{} \"{namespace}/{name}\"", K::kind(&())),
            message: status.message,
        }),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_names_its_reader_else_the_deployment_does() {
        assert_eq!(Reader::of("ns", None, None), Reader::Operator);
        assert_eq!(
            Reader::of("ns", None, Some("tenant")),
            Reader::ServiceAccount {
                namespace: "ns".into(),
                name: "tenant".into()
            }
        );
        assert_eq!(
            Reader::of("ns", Some("own"), Some("tenant"))
                .user()
                .as_deref(),
            Some("system:serviceaccount:ns:own")
        );
        assert_eq!(Reader::of("ns", Some(" "), None), Reader::Operator);
        assert_eq!(
            Reader::of("ns", Some(""), Some("tenant")).to_string(),
            "ServiceAccount \"ns/tenant\""
        );
    }
}
