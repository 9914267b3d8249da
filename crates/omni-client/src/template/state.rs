//! The slice of the COSI State API the template operations need, as a trait, plus its
//! implementation over the generated gRPC client.
//!
//! Keeping the operations generic over [`TemplateState`] lets the planning logic be tested
//! against an in-memory store and run over any transport (signed channel, plain h2c in tests).

use std::future::Future;
use std::pin::Pin;

use futures::{Stream, StreamExt};
use tonic::codegen::{Body, Bytes, StdError};

use super::translate::NAMESPACE;
use crate::proto::cosi::resource::{
    self as cosi, CreateOptions, CreateRequest, DestroyOptions, DestroyRequest, Event, GetOptions,
    GetRequest, LabelQuery, LabelTerm, ListOptions, ListRequest, Resource, TeardownOptions,
    TeardownRequest, UpdateOptions, UpdateRequest, WatchOptions, WatchRequest,
    label_term::Operation, state_client::StateClient,
};

/// A failed State call, classified the way the template operations need.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The resource does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Create of an existing resource, or a version / finalizer conflict.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Permission denied (role too low, or the resource is owned by a controller).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// Omni rejected the write (validation failure or wrong phase).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The request signature was not accepted.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The server could not be reached or failed otherwise.
    #[error("{code}: {message}")]
    Rpc {
        /// gRPC status code name.
        code: String,
        /// Server message.
        message: String,
    },
    /// A watch stream reported an error event.
    #[error("watch failed: {0}")]
    Watch(String),
    /// The call did not finish in time (Omni's `DEADLINE_EXCEEDED`, or the caller's own
    /// deadline: see [`DeadlineState`](super::DeadlineState)).
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
}

impl From<tonic::Status> for StateError {
    fn from(status: tonic::Status) -> Self {
        let message = status.message().to_string();
        match status.code() {
            tonic::Code::NotFound => StateError::NotFound(message),
            tonic::Code::AlreadyExists | tonic::Code::FailedPrecondition => {
                StateError::Conflict(message)
            }
            tonic::Code::PermissionDenied => StateError::PermissionDenied(message),
            tonic::Code::InvalidArgument => StateError::Invalid(message),
            tonic::Code::Unauthenticated => StateError::Unauthenticated(message),
            tonic::Code::DeadlineExceeded => StateError::DeadlineExceeded(message),
            code => StateError::Rpc {
                code: format!("{code:?}"),
                message,
            },
        }
    }
}

/// A label condition: `key = value`, or key present when `value` is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelCondition {
    /// Label key.
    pub key: String,
    /// Required value; `None` only requires the key to exist.
    pub value: Option<String>,
}

impl LabelCondition {
    /// `key = value`.
    pub(crate) fn equal(key: &str, value: &str) -> Self {
        LabelCondition {
            key: key.into(),
            value: Some(value.into()),
        }
    }

    /// `key` exists.
    pub(crate) fn exists(key: &str) -> Self {
        LabelCondition {
            key: key.into(),
            value: None,
        }
    }
}

fn label_query(conditions: &[LabelCondition]) -> Vec<LabelQuery> {
    if conditions.is_empty() {
        return Vec::new();
    }
    vec![LabelQuery {
        terms: conditions
            .iter()
            .map(|c| LabelTerm {
                key: c.key.clone(),
                op: if c.value.is_some() {
                    Operation::Equal as i32
                } else {
                    Operation::Exists as i32
                },
                value: c.value.iter().cloned().collect(),
                invert: false,
            })
            .collect(),
    }]
}

/// A stream of watch events (the server's empty "ready" message already consumed).
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, StateError>> + Send>>;

/// The State calls the template operations make; all in namespace `default`, owner `""`,
/// except [`TemplateState::list_ephemeral`] for Omni's runtime-only status resources.
pub trait TemplateState: Send + Sync {
    /// Get one resource; `Ok(None)` when it does not exist.
    fn get(
        &self,
        resource_type: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<Resource>, StateError>> + Send;

    /// List resources of a type whose labels match every condition.
    fn list(
        &self,
        resource_type: &str,
        labels: &[LabelCondition],
    ) -> impl Future<Output = Result<Vec<Resource>, StateError>> + Send;

    /// List resources of a type in namespace `ephemeral` (where Omni keeps runtime-only status
    /// such as `KubernetesHealthCheckStatus`) whose labels match every condition.
    fn list_ephemeral(
        &self,
        resource_type: &str,
        labels: &[LabelCondition],
    ) -> impl Future<Output = Result<Vec<Resource>, StateError>> + Send;

    /// Create with owner `""`.
    fn create(&self, resource: Resource) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Update with owner `""` and expected phase `running`.
    fn update(&self, resource: Resource) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Start tearing down; `Ok(true)` when no finalizers are left (ready to destroy).
    fn teardown(
        &self,
        resource_type: &str,
        id: &str,
    ) -> impl Future<Output = Result<bool, StateError>> + Send;

    /// Destroy (fails while finalizers remain).
    fn destroy(
        &self,
        resource_type: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Watch a whole kind, existing resources first (bootstrap), then changes.
    fn watch_kind(
        &self,
        resource_type: &str,
    ) -> impl Future<Output = Result<EventStream, StateError>> + Send;
}

impl<T> TemplateState for StateClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body> + Clone + Send + Sync + 'static,
    T::Future: Send,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    async fn get(&self, resource_type: &str, id: &str) -> Result<Option<Resource>, StateError> {
        let request = GetRequest {
            namespace: NAMESPACE.into(),
            r#type: resource_type.into(),
            id: id.into(),
            options: Some(GetOptions {}),
        };
        match StateClient::get(&mut self.clone(), request).await {
            Ok(response) => Ok(response.into_inner().resource),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
            Err(status) => Err(status.into()),
        }
    }

    async fn list(
        &self,
        resource_type: &str,
        labels: &[LabelCondition],
    ) -> Result<Vec<Resource>, StateError> {
        list_in(self, NAMESPACE, resource_type, labels).await
    }

    async fn list_ephemeral(
        &self,
        resource_type: &str,
        labels: &[LabelCondition],
    ) -> Result<Vec<Resource>, StateError> {
        list_in(self, super::api::EPHEMERAL_NAMESPACE, resource_type, labels).await
    }

    async fn create(&self, resource: Resource) -> Result<(), StateError> {
        let request = CreateRequest {
            resource: Some(resource),
            options: Some(CreateOptions {
                owner: String::new(),
            }),
        };
        StateClient::create(&mut self.clone(), request).await?;
        Ok(())
    }

    async fn update(&self, resource: Resource) -> Result<(), StateError> {
        let request = UpdateRequest {
            new_resource: Some(resource),
            options: Some(UpdateOptions {
                owner: String::new(),
                expected_phase: Some("running".into()),
            }),
        };
        StateClient::update(&mut self.clone(), request).await?;
        Ok(())
    }

    async fn teardown(&self, resource_type: &str, id: &str) -> Result<bool, StateError> {
        let request = TeardownRequest {
            namespace: NAMESPACE.into(),
            r#type: resource_type.into(),
            id: id.into(),
            options: Some(TeardownOptions {
                owner: String::new(),
            }),
        };
        match StateClient::teardown(&mut self.clone(), request).await {
            Ok(response) => Ok(response.into_inner().destroy_ready),
            // Omni before 1.8 has no Teardown RPC: set the phase with an Update instead.
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                teardown_by_update(self, resource_type, id).await
            }
            Err(status) => Err(status.into()),
        }
    }

    async fn destroy(&self, resource_type: &str, id: &str) -> Result<(), StateError> {
        let request = DestroyRequest {
            namespace: NAMESPACE.into(),
            r#type: resource_type.into(),
            id: id.into(),
            options: Some(DestroyOptions {
                owner: String::new(),
            }),
        };
        StateClient::destroy(&mut self.clone(), request).await?;
        Ok(())
    }

    async fn watch_kind(&self, resource_type: &str) -> Result<EventStream, StateError> {
        let request = WatchRequest {
            namespace: NAMESPACE.into(),
            r#type: resource_type.into(),
            id: None,
            options: Some(WatchOptions {
                bootstrap_contents: true,
                ..Default::default()
            }),
            api_version: 1,
        };
        let mut stream = StateClient::watch(&mut self.clone(), request)
            .await?
            .into_inner();
        // The server answers with an empty message once it has subscribed; waiting for it means
        // no change made after this call returns can be missed. Events in that first message
        // (a server without the marker) are kept.
        let first = stream.message().await?.map(|r| r.event).unwrap_or_default();
        // One response may carry several events (aggregated watches); flatten.
        let rest = stream.flat_map(|item| {
            let batch: Vec<Result<Event, StateError>> = match item {
                Ok(response) => response.event.into_iter().map(Ok).collect(),
                Err(status) => vec![Err(StateError::from(status))],
            };
            futures::stream::iter(batch)
        });
        let events = futures::stream::iter(first.into_iter().map(Ok)).chain(rest);
        Ok(Box::pin(events))
    }
}

/// `List` in `namespace`, collecting the stream.
async fn list_in<T>(
    client: &StateClient<T>,
    namespace: &str,
    resource_type: &str,
    labels: &[LabelCondition],
) -> Result<Vec<Resource>, StateError>
where
    T: tonic::client::GrpcService<tonic::body::Body> + Clone + Send + Sync + 'static,
    T::Future: Send,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    let request = ListRequest {
        namespace: namespace.into(),
        r#type: resource_type.into(),
        options: Some(ListOptions {
            label_query: label_query(labels),
            id_query: None,
        }),
    };
    let mut stream = StateClient::list(&mut client.clone(), request)
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(item) = stream.message().await? {
        if let Some(resource) = item.resource {
            out.push(resource);
        }
    }
    Ok(out)
}

/// Teardown for servers without the RPC: read, flip the phase to `tearingDown` with an
/// Update, retrying when the version moved underneath; ready when no finalizers remain.
async fn teardown_by_update<S: TemplateState>(
    state: &S,
    resource_type: &str,
    id: &str,
) -> Result<bool, StateError> {
    const ATTEMPTS: usize = 5;
    let mut last = StateError::Conflict(format!("{resource_type}({id}) kept changing"));
    for _ in 0..ATTEMPTS {
        let Some(mut current) = state.get(resource_type, id).await? else {
            return Err(StateError::NotFound(format!("{resource_type}({id})")));
        };
        let Some(metadata) = current.metadata.as_mut() else {
            return Err(StateError::NotFound(format!("{resource_type}({id})")));
        };
        let ready = metadata.finalizers.is_empty();
        if metadata.phase == "tearingDown" {
            return Ok(ready);
        }
        metadata.phase = "tearingDown".into();
        match state.update(current).await {
            Ok(()) => return Ok(ready),
            Err(e @ StateError::Conflict(_)) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Event type of a watch event.
pub(crate) fn event_type(event: &Event) -> cosi::EventType {
    cosi::EventType::try_from(event.event_type).unwrap_or(cosi::EventType::Noop)
}
