//! The COSI `State` API over a signed [`Client`]: get, list, watch, create, update, teardown and
//! destroy, with errors classified by gRPC code and message (docs/omni-wire.md#errors).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;

use futures::{Stream, StreamExt};

use crate::proto::cosi::resource::{
    CreateOptions, CreateRequest, DestroyOptions, DestroyRequest, Event, EventType, GetOptions,
    GetRequest, LabelQuery, LabelTerm, ListOptions, ListRequest, Resource, TeardownOptions,
    TeardownRequest, UpdateOptions, UpdateRequest, WatchOptions, WatchRequest, label_term,
};
use crate::transport::Client;

/// Phase of a live resource.
pub(crate) const PHASE_RUNNING: &str = "running";
/// Phase of a resource being torn down.
pub(crate) const PHASE_TEARING_DOWN: &str = "tearingDown";
/// Version string the server uses for "no version" (tombstones; send it on create).
pub(crate) const VERSION_UNDEFINED: &str = "undefined";

/// A failed State call, classified by gRPC code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The resource does not exist (`NOT_FOUND`).
    #[error("not found: {0}")]
    NotFound(String),
    /// Optimistic-concurrency conflict or pending finalizers (`FAILED_PRECONDITION`).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The resource is not in the expected phase (`INVALID_ARGUMENT ... is not in phase`).
    #[error("phase conflict: {0}")]
    PhaseConflict(String),
    /// The resource is owned by a controller (`PERMISSION_DENIED ... is owned by`).
    #[error("owner conflict: {0}")]
    OwnerConflict(String),
    /// Create of an existing resource (`ALREADY_EXISTS`).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// Omni rejected the resource (`INVALID_ARGUMENT`, usually `failed to validate: ...`).
    #[error("validation failed: {0}")]
    Validation(String),
    /// The request signature was not accepted (`UNAUTHENTICATED`); final, never retried.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The account's role is too low (`PERMISSION_DENIED`).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The server could not be reached (`UNAVAILABLE`).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The call did not finish in time (`DEADLINE_EXCEEDED` or the client's own deadline).
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// A watch reported an `ERRORED` event; the stream is finished.
    #[error("watch failed: {0}")]
    WatchFailed(String),
    /// Any other gRPC failure.
    #[error("{code:?}: {message}")]
    Other {
        /// gRPC status code.
        code: tonic::Code,
        /// Server message.
        message: String,
    },
}

impl StateError {
    /// Whether retrying later (after re-reading, for conflicts) can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            StateError::Unavailable(_)
            | StateError::DeadlineExceeded(_)
            | StateError::Conflict(_)
            | StateError::WatchFailed(_) => true,
            StateError::Other { code, .. } => matches!(
                code,
                tonic::Code::Aborted | tonic::Code::ResourceExhausted | tonic::Code::Internal
            ),
            _ => false,
        }
    }

    /// `true` for [`StateError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, StateError::NotFound(_))
    }

    /// The gRPC code this error corresponds to.
    pub fn code(&self) -> tonic::Code {
        match self {
            StateError::NotFound(_) => tonic::Code::NotFound,
            StateError::Conflict(_) => tonic::Code::FailedPrecondition,
            StateError::PhaseConflict(_) | StateError::Validation(_) => {
                tonic::Code::InvalidArgument
            }
            StateError::OwnerConflict(_) | StateError::PermissionDenied(_) => {
                tonic::Code::PermissionDenied
            }
            StateError::AlreadyExists(_) => tonic::Code::AlreadyExists,
            StateError::Unauthenticated(_) => tonic::Code::Unauthenticated,
            StateError::Unavailable(_) => tonic::Code::Unavailable,
            StateError::DeadlineExceeded(_) => tonic::Code::DeadlineExceeded,
            StateError::WatchFailed(_) => tonic::Code::Aborted,
            StateError::Other { code, .. } => *code,
        }
    }
}

impl From<tonic::Status> for StateError {
    fn from(status: tonic::Status) -> Self {
        let message = status.message().to_owned();
        match status.code() {
            tonic::Code::NotFound => StateError::NotFound(message),
            tonic::Code::AlreadyExists => StateError::AlreadyExists(message),
            // The EULA gate shares the code with version conflicts but is not a conflict.
            tonic::Code::FailedPrecondition if message.contains("EULA") => StateError::Other {
                code: tonic::Code::FailedPrecondition,
                message,
            },
            tonic::Code::FailedPrecondition => StateError::Conflict(message),
            tonic::Code::InvalidArgument if message.contains("is not in phase") => {
                StateError::PhaseConflict(message)
            }
            tonic::Code::InvalidArgument => StateError::Validation(message),
            tonic::Code::PermissionDenied if message.contains("is owned by") => {
                StateError::OwnerConflict(message)
            }
            tonic::Code::PermissionDenied => StateError::PermissionDenied(message),
            tonic::Code::Unauthenticated => StateError::Unauthenticated(message),
            tonic::Code::Unavailable => StateError::Unavailable(message),
            tonic::Code::DeadlineExceeded => StateError::DeadlineExceeded(message),
            code => StateError::Other { code, message },
        }
    }
}

/// `key = value` label term.
pub fn label_equal(key: &str, value: &str) -> LabelTerm {
    LabelTerm {
        key: key.to_owned(),
        op: label_term::Operation::Equal as i32,
        value: vec![value.to_owned()],
        invert: false,
    }
}

/// `key` exists label term.
pub fn label_exists(key: &str) -> LabelTerm {
    LabelTerm {
        key: key.to_owned(),
        op: label_term::Operation::Exists as i32,
        value: Vec::new(),
        invert: false,
    }
}

/// One query AND-ing `terms`, or no query at all for an empty slice (matches everything).
fn label_queries(terms: &[LabelTerm]) -> Vec<LabelQuery> {
    if terms.is_empty() {
        Vec::new()
    } else {
        vec![LabelQuery {
            terms: terms.to_vec(),
        }]
    }
}

/// What a watch observes.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchTarget {
    /// Every resource of a type in a namespace.
    Kind {
        /// Namespace.
        namespace: String,
        /// COSI type.
        resource_type: String,
        /// Send `CREATED` for existing resources, then `BOOTSTRAPPED`.
        bootstrap: bool,
        /// Label terms (AND); empty = all.
        labels: Vec<LabelTerm>,
    },
    /// One resource (the first event is its current state or a `DESTROYED` tombstone).
    Single {
        /// Namespace.
        namespace: String,
        /// COSI type.
        resource_type: String,
        /// Resource ID.
        id: String,
    },
}

impl WatchTarget {
    /// A kind watch with bootstrap contents.
    pub fn kind(namespace: &str, resource_type: &str, labels: Vec<LabelTerm>) -> Self {
        WatchTarget::Kind {
            namespace: namespace.to_owned(),
            resource_type: resource_type.to_owned(),
            bootstrap: true,
            labels,
        }
    }

    /// A single-resource watch.
    pub fn single(namespace: &str, resource_type: &str, id: &str) -> Self {
        WatchTarget::Single {
            namespace: namespace.to_owned(),
            resource_type: resource_type.to_owned(),
            id: id.to_owned(),
        }
    }

    fn request(&self) -> WatchRequest {
        match self {
            WatchTarget::Kind {
                namespace,
                resource_type,
                bootstrap,
                labels,
            } => WatchRequest {
                namespace: namespace.clone(),
                r#type: resource_type.clone(),
                id: None,
                options: Some(WatchOptions {
                    bootstrap_contents: *bootstrap,
                    label_query: label_queries(labels),
                    ..Default::default()
                }),
                api_version: 1,
            },
            WatchTarget::Single {
                namespace,
                resource_type,
                id,
            } => WatchRequest {
                namespace: namespace.clone(),
                r#type: resource_type.clone(),
                id: Some(id.clone()),
                options: Some(WatchOptions::default()),
                api_version: 1,
            },
        }
    }
}

/// One decoded watch event.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// The resource appeared (or started matching the label filter, or bootstrap contents).
    Created(Resource),
    /// The resource changed; `old` is the previous version when the server sent it.
    Updated {
        /// New state.
        resource: Resource,
        /// Previous state.
        old: Option<Box<Resource>>,
    },
    /// The resource is gone (or stopped matching). For single watches of a missing resource
    /// this is a tombstone: see [`is_tombstone`].
    Destroyed(Resource),
    /// All bootstrap contents of a kind watch were sent.
    Bootstrapped,
}

/// `true` when a resource is a tombstone (metadata only, version `undefined`).
pub fn is_tombstone(resource: &Resource) -> bool {
    resource
        .metadata
        .as_ref()
        .is_none_or(|m| m.version == VERSION_UNDEFINED)
}

/// A stream of watch events. It ends with `Err(StateError::WatchFailed)` after an `ERRORED`
/// event, or with the transport error that broke it.
pub(crate) type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, StateError>> + Send>>;

/// The COSI State API of one [`Client`].
#[derive(Clone, Debug)]
pub struct State {
    client: Client,
}

impl Client {
    /// The COSI State API on this client's connection.
    pub fn state(&self) -> State {
        State {
            client: self.clone(),
        }
    }

    /// Checks the connection and credentials by listing Clusters (Reader role suffices);
    /// returns the endpoint's display form, as the Go operator reports it.
    pub async fn ping(&self) -> Result<String, StateError> {
        self.state()
            .list(
                crate::resources::NAMESPACE,
                crate::template::types::CLUSTER,
                &[],
            )
            .await?;
        Ok(self.endpoint().display().to_owned())
    }
}

impl State {
    async fn deadline<T, F>(&self, what: &str, call: F) -> Result<T, StateError>
    where
        F: Future<Output = Result<T, StateError>>,
    {
        with_deadline(self.client.request_timeout(), what, call).await
    }

    /// Deadlines are enforced on the client only: a tonic server answers an expired
    /// `grpc-timeout` with `CANCELLED`, racing the client's own `DEADLINE_EXCEEDED`.
    /// Dropping the call on timeout resets the HTTP/2 stream, which cancels the server side.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        tonic::Request::new(message)
    }

    /// Reads one resource.
    pub async fn get(
        &self,
        namespace: &str,
        resource_type: &str,
        id: &str,
    ) -> Result<Resource, StateError> {
        let request = self.request(GetRequest {
            namespace: namespace.to_owned(),
            r#type: resource_type.to_owned(),
            id: id.to_owned(),
            options: Some(GetOptions {}),
        });
        let mut raw = self.client.raw_state();
        self.deadline("get", async move {
            let response = raw.get(request).await?.into_inner();
            response
                .resource
                .ok_or_else(|| missing_resource("get response"))
        })
        .await
    }

    /// Reads one resource, mapping "not found" to `None`.
    pub async fn get_optional(
        &self,
        namespace: &str,
        resource_type: &str,
        id: &str,
    ) -> Result<Option<Resource>, StateError> {
        match self.get(namespace, resource_type, id).await {
            Ok(resource) => Ok(Some(resource)),
            Err(StateError::NotFound(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Lists resources of a type whose labels match all `labels` terms (empty = all).
    pub async fn list(
        &self,
        namespace: &str,
        resource_type: &str,
        labels: &[LabelTerm],
    ) -> Result<Vec<Resource>, StateError> {
        let request = self.request(ListRequest {
            namespace: namespace.to_owned(),
            r#type: resource_type.to_owned(),
            options: Some(ListOptions {
                label_query: label_queries(labels),
                id_query: None,
            }),
        });
        let mut raw = self.client.raw_state();
        self.deadline("list", async move {
            let mut stream = raw.list(request).await?.into_inner();
            let mut resources = Vec::new();
            while let Some(item) = stream.message().await? {
                if let Some(resource) = item.resource {
                    resources.push(resource);
                }
            }
            Ok(resources)
        })
        .await
    }

    /// Creates a resource with `owner` (`""` for user-owned). Send version `undefined`,
    /// phase `running`; the server assigns version 1 and returns what it stored.
    pub async fn create(&self, resource: Resource, owner: &str) -> Result<Resource, StateError> {
        let request = self.request(CreateRequest {
            resource: Some(resource),
            options: Some(CreateOptions {
                owner: owner.to_owned(),
            }),
        });
        let mut raw = self.client.raw_state();
        self.deadline("create", async move {
            raw.create(request)
                .await?
                .into_inner()
                .resource
                .ok_or_else(|| missing_resource("create response"))
        })
        .await
    }

    /// Replaces a resource. Its metadata version must equal the stored one (else
    /// [`StateError::Conflict`]); `expected_phase` (usually `Some("running")`) guards against
    /// updating something being torn down (else [`StateError::PhaseConflict`]). Labels,
    /// annotations and finalizers are replaced wholesale, so send what you read.
    pub async fn update(
        &self,
        resource: Resource,
        owner: &str,
        expected_phase: Option<&str>,
    ) -> Result<Resource, StateError> {
        let request = self.request(UpdateRequest {
            new_resource: Some(resource),
            options: Some(UpdateOptions {
                owner: owner.to_owned(),
                expected_phase: expected_phase.map(str::to_owned),
            }),
        });
        let mut raw = self.client.raw_state();
        self.deadline("update", async move {
            raw.update(request)
                .await?
                .into_inner()
                .resource
                .ok_or_else(|| missing_resource("update response"))
        })
        .await
    }

    /// Starts tearing a resource down; returns `true` when no finalizers remain (it can be
    /// destroyed now). Servers without the `Teardown` RPC get the equivalent Get + Update.
    pub async fn teardown(
        &self,
        namespace: &str,
        resource_type: &str,
        id: &str,
        owner: &str,
    ) -> Result<bool, StateError> {
        if !self.client.teardown_unsupported().load(Ordering::Relaxed) {
            let request = self.request(TeardownRequest {
                namespace: namespace.to_owned(),
                r#type: resource_type.to_owned(),
                id: id.to_owned(),
                options: Some(TeardownOptions {
                    owner: owner.to_owned(),
                }),
            });
            let mut raw = self.client.raw_state();
            let result = self
                .deadline("teardown", async move {
                    Ok(raw.teardown(request).await?.into_inner().destroy_ready)
                })
                .await;
            match result {
                Err(StateError::Other {
                    code: tonic::Code::Unimplemented,
                    ..
                }) => {
                    // Omni before 1.8: remember, and use the update-based fallback from now on.
                    tracing::debug!("Teardown RPC unimplemented; falling back to Update");
                    self.client
                        .teardown_unsupported()
                        .store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        self.teardown_by_update(namespace, resource_type, id, owner)
            .await
    }

    async fn teardown_by_update(
        &self,
        namespace: &str,
        resource_type: &str,
        id: &str,
        owner: &str,
    ) -> Result<bool, StateError> {
        // Bounded so a resource that keeps changing cannot spin forever.
        const ATTEMPTS: usize = 10;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let mut resource = self.get(namespace, resource_type, id).await?;
            let metadata = resource
                .metadata
                .as_mut()
                .ok_or_else(|| missing_resource("resource metadata"))?;
            if metadata.phase == PHASE_TEARING_DOWN {
                return Ok(metadata.finalizers.is_empty());
            }
            metadata.phase = PHASE_TEARING_DOWN.to_owned();
            let metadata_owner = metadata.owner.clone();
            let request_owner = if owner.is_empty() {
                metadata_owner.as_str()
            } else {
                owner
            };
            match self
                .update(resource, request_owner, Some(PHASE_RUNNING))
                .await
            {
                Ok(stored) => {
                    return Ok(stored
                        .metadata
                        .as_ref()
                        .is_none_or(|m| m.finalizers.is_empty()));
                }
                Err(StateError::Conflict(message)) => last = Some(message),
                Err(error) => return Err(error),
            }
        }
        Err(StateError::Conflict(last.unwrap_or_default()))
    }

    /// Removes a resource. Fails with [`StateError::Conflict`] while finalizers remain.
    pub async fn destroy(
        &self,
        namespace: &str,
        resource_type: &str,
        id: &str,
        owner: &str,
    ) -> Result<(), StateError> {
        let request = self.request(DestroyRequest {
            namespace: namespace.to_owned(),
            r#type: resource_type.to_owned(),
            id: id.to_owned(),
            options: Some(DestroyOptions {
                owner: owner.to_owned(),
            }),
        });
        let mut raw = self.client.raw_state();
        self.deadline("destroy", async move {
            raw.destroy(request).await?;
            Ok(())
        })
        .await
    }

    /// Opens a watch. Returns once the server has subscribed (its empty "ready" message was
    /// received), so no change made after this returns can be missed. Watches have no deadline;
    /// drop the stream to cancel.
    pub async fn watch(&self, target: &WatchTarget) -> Result<WatchStream, StateError> {
        let request = tonic::Request::new(target.request());
        let mut raw = self.client.raw_state();
        let stream = self
            .deadline("watch", async move {
                let mut stream = raw.watch(request).await?.into_inner();
                let first = stream.message().await?;
                Ok::<_, StateError>((first, stream))
            })
            .await
            .map(|(first, stream)| {
                // A server without the marker sends events in the first message: keep them.
                let first = first.map(|r| r.event).unwrap_or_default();
                futures::stream::iter(first.into_iter().map(Ok)).chain(stream.flat_map(|item| {
                    let batch: Vec<Result<Event, StateError>> = match item {
                        Ok(response) => response.event.into_iter().map(Ok).collect(),
                        Err(status) => vec![Err(StateError::from(status))],
                    };
                    futures::stream::iter(batch)
                }))
            })?
            .boxed();
        let events = futures::stream::unfold((stream, false), |(mut stream, done)| async move {
            if done {
                return None;
            }
            loop {
                match stream.next().await? {
                    Err(error) => return Some((Err(error), (stream, true))),
                    Ok(event) => match decode_event(event) {
                        Ok(Some(decoded)) => return Some((Ok(decoded), (stream, false))),
                        Ok(None) => continue,
                        // ERRORED ends the useful life of the stream.
                        Err(error) => return Some((Err(error), (stream, true))),
                    },
                }
            }
        });
        Ok(Box::pin(events))
    }
}

/// Decodes one raw event; `Ok(None)` for events callers never need (`NOOP`).
fn decode_event(event: Event) -> Result<Option<WatchEvent>, StateError> {
    let kind = EventType::try_from(event.event_type).unwrap_or(EventType::Noop);
    let resource = || event.resource.clone().unwrap_or_default();
    match kind {
        EventType::Created => Ok(Some(WatchEvent::Created(resource()))),
        EventType::Updated => Ok(Some(WatchEvent::Updated {
            resource: resource(),
            old: event.old.clone().map(Box::new),
        })),
        EventType::Destroyed => Ok(Some(WatchEvent::Destroyed(resource()))),
        EventType::Bootstrapped => Ok(Some(WatchEvent::Bootstrapped)),
        EventType::Errored => Err(StateError::WatchFailed(
            event
                .error
                .clone()
                .unwrap_or_else(|| "watch errored".to_owned()),
        )),
        EventType::Noop => Ok(None),
    }
}

fn missing_resource(what: &str) -> StateError {
    StateError::Other {
        code: tonic::Code::Internal,
        message: format!("server sent a {what} without a resource"),
    }
}

/// Runs `call` with a client-side deadline, so a stalled connection cannot hang the caller even
/// when the server ignores `grpc-timeout`.
pub(crate) async fn with_deadline<T, F>(
    timeout: std::time::Duration,
    what: &str,
    call: F,
) -> Result<T, StateError>
where
    F: Future<Output = Result<T, StateError>>,
{
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(StateError::DeadlineExceeded(format!(
            "{what} did not finish within {timeout:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::cosi::resource::Metadata;

    fn status(code: tonic::Code, message: &str) -> StateError {
        StateError::from(tonic::Status::new(code, message))
    }

    #[test]
    fn errors_are_classified_by_code_and_message() {
        use tonic::Code;
        assert!(matches!(
            status(Code::NotFound, "x"),
            StateError::NotFound(_)
        ));
        assert!(matches!(
            status(Code::AlreadyExists, "resource exists"),
            StateError::AlreadyExists(_)
        ));
        assert!(matches!(
            status(
                Code::FailedPrecondition,
                r#"update conflict: expected version "3", actual version "4""#
            ),
            StateError::Conflict(_)
        ));
        assert!(matches!(
            status(
                Code::FailedPrecondition,
                "EULA has not been accepted; visit the UI"
            ),
            StateError::Other {
                code: Code::FailedPrecondition,
                ..
            }
        ));
        assert!(matches!(
            status(
                Code::InvalidArgument,
                "resource Clusters.omni.sidero.dev(default/a@3) is not in phase running"
            ),
            StateError::PhaseConflict(_)
        ));
        assert!(matches!(
            status(Code::InvalidArgument, "failed to validate: bad"),
            StateError::Validation(_)
        ));
        assert!(matches!(
            status(
                Code::PermissionDenied,
                r#"resource x is owned by "ClusterController""#
            ),
            StateError::OwnerConflict(_)
        ));
        assert!(matches!(
            status(
                Code::PermissionDenied,
                "failed to validate: unauthorized: access denied: insufficient role: \"Reader\""
            ),
            StateError::PermissionDenied(_)
        ));
        assert!(matches!(
            status(Code::Unauthenticated, "invalid signature"),
            StateError::Unauthenticated(_)
        ));
        assert!(matches!(
            status(Code::Unavailable, "down"),
            StateError::Unavailable(_)
        ));
        assert!(matches!(
            status(Code::DeadlineExceeded, "slow"),
            StateError::DeadlineExceeded(_)
        ));
        assert!(matches!(
            status(Code::Unimplemented, "no"),
            StateError::Other {
                code: Code::Unimplemented,
                ..
            }
        ));
    }

    #[test]
    fn retryability_separates_transient_from_permanent_failures() {
        use tonic::Code;
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::FailedPrecondition,
            Code::Aborted,
        ] {
            assert!(status(code, "x").is_retryable(), "{code:?}");
        }
        for code in [
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::NotFound,
            Code::InvalidArgument,
            Code::AlreadyExists,
            Code::Unimplemented,
        ] {
            assert!(!status(code, "x").is_retryable(), "{code:?}");
        }
    }

    #[test]
    fn codes_round_trip() {
        for code in [
            tonic::Code::NotFound,
            tonic::Code::AlreadyExists,
            tonic::Code::Unauthenticated,
            tonic::Code::Unavailable,
            tonic::Code::Unknown,
        ] {
            assert_eq!(status(code, "m").code(), code);
        }
    }

    #[test]
    fn label_terms_match_what_the_go_client_sends() {
        let eq = label_equal("omni.sidero.dev/cluster", "demo");
        assert_eq!(eq.op, label_term::Operation::Equal as i32);
        assert_eq!(eq.value, vec!["demo".to_owned()]);
        let ex = label_exists("omni.sidero.dev/disconnected");
        assert_eq!(ex.op, label_term::Operation::Exists as i32);
        assert!(ex.value.is_empty());
        assert!(label_queries(&[]).is_empty());
        assert_eq!(label_queries(&[eq, ex]).len(), 1);
    }

    #[test]
    fn watch_requests_use_api_version_1_and_no_options_on_single_watches() {
        let kind = WatchTarget::kind("default", "Clusters.omni.sidero.dev", vec![]).request();
        assert_eq!(kind.api_version, 1);
        assert_eq!(kind.id, None);
        assert!(kind.options.as_ref().is_some_and(|o| o.bootstrap_contents));
        let single =
            WatchTarget::single("default", "ClusterStatuses.omni.sidero.dev", "a").request();
        assert_eq!(single.id.as_deref(), Some("a"));
        assert!(
            single
                .options
                .as_ref()
                .is_some_and(|o| !o.bootstrap_contents && o.label_query.is_empty())
        );
    }

    #[test]
    fn events_decode_including_tombstones_and_errors() {
        let tombstone = Resource {
            metadata: Some(Metadata {
                id: "a".into(),
                version: VERSION_UNDEFINED.into(),
                ..Default::default()
            }),
            spec: None,
        };
        let destroyed = Event {
            resource: Some(tombstone.clone()),
            event_type: EventType::Destroyed as i32,
            ..Default::default()
        };
        match decode_event(destroyed) {
            Ok(Some(WatchEvent::Destroyed(r))) => assert!(is_tombstone(&r)),
            other => panic!("{other:?}"),
        }
        let errored = Event {
            resource: None,
            event_type: EventType::Errored as i32,
            error: Some("buffer overrun".into()),
            ..Default::default()
        };
        assert_eq!(
            decode_event(errored),
            Err(StateError::WatchFailed("buffer overrun".into()))
        );
        let noop = Event {
            event_type: EventType::Noop as i32,
            ..Default::default()
        };
        assert_eq!(decode_event(noop), Ok(None));
        assert_eq!(
            decode_event(Event {
                event_type: EventType::Bootstrapped as i32,
                ..Default::default()
            }),
            Ok(Some(WatchEvent::Bootstrapped))
        );
    }
}
