//! Omni's ManagementService: service-account kubeconfigs and service-account registration.

use std::time::Duration;

use crate::proto::management::{CreateServiceAccountRequest, KubeconfigRequest};
use crate::state::{StateError, with_deadline};
use crate::transport::Client;

/// gRPC metadata key selecting the cluster of a management call (covered by the signature).
pub(crate) const CONTEXT_HEADER: &str = "context";

/// Why a management call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagementError {
    /// The request was rejected before sending.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Omni answered with an error.
    #[error(transparent)]
    Rpc(#[from] StateError),
    /// Omni answered with an empty kubeconfig.
    #[error("response was empty")]
    EmptyKubeconfig,
}

impl ManagementError {
    /// Whether retrying later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ManagementError::Rpc(e) if e.is_retryable())
    }
}

impl Client {
    /// Mints a service-account kubeconfig for `cluster`: a token for `user` in `groups`, valid
    /// for `ttl`. The returned YAML carries a bearer token — treat it as a secret.
    pub async fn kubeconfig(
        &self,
        cluster: &str,
        ttl: Duration,
        user: &str,
        groups: &[String],
    ) -> Result<Vec<u8>, ManagementError> {
        if cluster.is_empty() {
            return Err(ManagementError::InvalidRequest(
                "cluster name is empty".into(),
            ));
        }
        if user.is_empty() {
            return Err(ManagementError::InvalidRequest("user name is empty".into()));
        }
        if ttl.is_zero() {
            return Err(ManagementError::InvalidRequest(
                "ttl must be positive".into(),
            ));
        }
        let ttl_proto = prost_types::Duration::try_from(ttl)
            .map_err(|_| ManagementError::InvalidRequest("ttl is out of range".into()))?;
        let mut request = tonic::Request::new(KubeconfigRequest {
            service_account: true,
            service_account_ttl: Some(ttl_proto),
            service_account_user: user.to_owned(),
            service_account_groups: groups.to_vec(),
            ..Default::default()
        });
        let context = tonic::metadata::MetadataValue::try_from(cluster).map_err(|_| {
            ManagementError::InvalidRequest("cluster name is not a valid header value".into())
        })?;
        request.metadata_mut().insert(CONTEXT_HEADER, context);
        let mut raw = self.raw_management();
        let response = with_deadline(self.request_timeout(), "kubeconfig", async move {
            Ok(raw.kubeconfig(request).await?.into_inner())
        })
        .await?;
        if response.kubeconfig.is_empty() {
            return Err(ManagementError::EmptyKubeconfig);
        }
        Ok(response.kubeconfig)
    }

    /// Registers a service account with an armored public key (Admin only). `role` of `None`
    /// gives the account the caller's own role. Returns the key ID (its fingerprint).
    pub async fn create_service_account(
        &self,
        name: &str,
        armored_public_key: &str,
        role: Option<&str>,
    ) -> Result<String, ManagementError> {
        let request = tonic::Request::new(CreateServiceAccountRequest {
            armored_pgp_public_key: armored_public_key.to_owned(),
            use_user_role: role.is_none(),
            role: role.unwrap_or_default().to_owned(),
            name: name.to_owned(),
        });
        let mut raw = self.raw_management();
        let response = with_deadline(
            self.request_timeout(),
            "create service account",
            async move { Ok(raw.create_service_account(request).await?.into_inner()) },
        )
        .await?;
        Ok(response.public_key_id)
    }
}
