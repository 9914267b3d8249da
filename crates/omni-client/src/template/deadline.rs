//! Deadlines for the template operations.
//!
//! The generated State client waits for an answer as long as the connection lives, and an Omni
//! that accepts connections but never answers (overloaded, stuck behind a proxy) keeps it alive
//! forever: a [`plan_sync`](super::plan_sync) over it would never return, and a controller
//! running it would never reconcile that object again. [`DeadlineState`] bounds every call by
//! the client's request timeout and by the deadline of the whole operation, so a hung Omni
//! turns into a [`StateError::DeadlineExceeded`] the caller reports and retries.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::state::{EventStream, LabelCondition, StateError, TemplateState};
use crate::proto::cosi::resource::Resource;
use crate::proto::cosi::resource::state_client::StateClient;
use crate::transport::{Client, SignedChannel};

/// A [`TemplateState`] whose every call ends in time: none takes longer than `call_timeout`,
/// and none runs past `deadline` (the deadline of the whole sync, delete step or status read).
/// Watches are bounded until they are open; waiting on their events is bounded by the
/// operation itself (e.g. [`apply`](super::apply)'s deadline).
#[derive(Debug, Clone)]
pub struct DeadlineState<S> {
    inner: S,
    call_timeout: Duration,
    deadline: Instant,
}

impl<S: TemplateState> DeadlineState<S> {
    /// Bounds each call of `inner` by `call_timeout` and all of them by `deadline`.
    pub(crate) fn new(inner: S, call_timeout: Duration, deadline: Instant) -> Self {
        Self {
            inner,
            call_timeout,
            deadline,
        }
    }

    /// When the whole operation must be over.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    async fn bounded<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, StateError>>,
    ) -> Result<T, StateError> {
        let per_call = Instant::now() + self.call_timeout;
        let until = per_call.min(self.deadline);
        match tokio::time::timeout_at(until, call).await {
            Ok(result) => result,
            Err(_) if until == per_call => Err(StateError::DeadlineExceeded(format!(
                "Omni did not answer {what} within {:?}",
                self.call_timeout
            ))),
            Err(_) => Err(StateError::DeadlineExceeded(format!(
                "Omni did not answer {what} before the operation's deadline"
            ))),
        }
    }
}

impl<S: TemplateState> TemplateState for DeadlineState<S> {
    async fn get(&self, resource_type: &str, id: &str) -> Result<Option<Resource>, StateError> {
        self.bounded("get", self.inner.get(resource_type, id)).await
    }

    async fn list(
        &self,
        resource_type: &str,
        labels: &[LabelCondition],
    ) -> Result<Vec<Resource>, StateError> {
        self.bounded("list", self.inner.list(resource_type, labels))
            .await
    }

    async fn list_ephemeral(
        &self,
        resource_type: &str,
        labels: &[LabelCondition],
    ) -> Result<Vec<Resource>, StateError> {
        self.bounded("list", self.inner.list_ephemeral(resource_type, labels))
            .await
    }

    async fn create(&self, resource: Resource) -> Result<(), StateError> {
        self.bounded("create", self.inner.create(resource)).await
    }

    async fn update(&self, resource: Resource) -> Result<(), StateError> {
        self.bounded("update", self.inner.update(resource)).await
    }

    async fn teardown(&self, resource_type: &str, id: &str) -> Result<bool, StateError> {
        self.bounded("teardown", self.inner.teardown(resource_type, id))
            .await
    }

    async fn destroy(&self, resource_type: &str, id: &str) -> Result<(), StateError> {
        self.bounded("destroy", self.inner.destroy(resource_type, id))
            .await
    }

    async fn watch_kind(&self, resource_type: &str) -> Result<EventStream, StateError> {
        self.bounded("watch", self.inner.watch_kind(resource_type))
            .await
    }
}

impl Client {
    /// The template operations' view of this client's State API, every call bounded by the
    /// client's request timeout and all of them by `deadline`. Use this rather than
    /// [`Client::raw_state`] for [`plan_sync`](super::plan_sync), [`apply`](super::apply),
    /// [`delete_cluster`](super::delete_cluster) and [`status_cluster`](super::status_cluster).
    pub fn template_state(&self, deadline: Instant) -> DeadlineState<StateClient<SignedChannel>> {
        DeadlineState::new(self.raw_state(), self.request_timeout(), deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A State that never answers, like a hung Omni.
    struct Hung;

    impl TemplateState for Hung {
        async fn get(&self, _: &str, _: &str) -> Result<Option<Resource>, StateError> {
            std::future::pending().await
        }
        async fn list(&self, _: &str, _: &[LabelCondition]) -> Result<Vec<Resource>, StateError> {
            std::future::pending().await
        }
        async fn list_ephemeral(
            &self,
            _: &str,
            _: &[LabelCondition],
        ) -> Result<Vec<Resource>, StateError> {
            std::future::pending().await
        }
        async fn create(&self, _: Resource) -> Result<(), StateError> {
            std::future::pending().await
        }
        async fn update(&self, _: Resource) -> Result<(), StateError> {
            std::future::pending().await
        }
        async fn teardown(&self, _: &str, _: &str) -> Result<bool, StateError> {
            std::future::pending().await
        }
        async fn destroy(&self, _: &str, _: &str) -> Result<(), StateError> {
            std::future::pending().await
        }
        async fn watch_kind(&self, _: &str) -> Result<EventStream, StateError> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_hung_call_ends_at_the_call_timeout() {
        let timeout = Duration::from_millis(200);
        let state = DeadlineState::new(Hung, timeout, Instant::now() + Duration::from_secs(600));
        let started = Instant::now();
        let err = state.get("Clusters.omni.sidero.dev", "c").await;
        assert_eq!(
            err,
            Err(StateError::DeadlineExceeded(
                "Omni did not answer get within 200ms".into()
            ))
        );
        assert!(started.elapsed() >= timeout);
    }

    #[tokio::test]
    async fn no_call_runs_past_the_operation_deadline() {
        let deadline = Instant::now() + Duration::from_millis(200);
        let state = DeadlineState::new(Hung, Duration::from_secs(600), deadline);
        let err = state.teardown("Clusters.omni.sidero.dev", "c").await;
        assert!(
            matches!(&err, Err(StateError::DeadlineExceeded(m)) if m.contains("operation's deadline")),
            "{err:?}"
        );
        assert!(Instant::now() >= deadline);
    }
}
