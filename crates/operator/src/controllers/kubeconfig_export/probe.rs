//! The usability probe of a stored kubeconfig (docs/parity.md#reusing-a-stored-kubeconfig): is it
//! rejected outright by the workload API server?
//!
//! The original probes on every reconcile, each time with a new client and TLS handshake, and
//! every change of an OmniCluster's conditions reconciles all its exports. Here a kubeconfig the
//! server accepted, or that Omni minted, is trusted for [`PROBE_MEMORY`] without another probe
//! ([`Accepted`]): a burst of reconciles, and the one our own Secret write causes, costs the
//! workload API server nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Bound of the usability probe against the workload API server.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a kubeconfig known to be accepted is trusted without another probe.
pub(crate) const PROBE_MEMORY: Duration = Duration::from_secs(300);

/// What the workload API server said about a kubeconfig.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It answered with the kubeconfig's credentials.
    Accepted,
    /// The kubeconfig cannot be used, or the server answered 401 or 403: replace it.
    Rejected,
    /// No answer (timeout, network): keep the stored kubeconfig, probe again next time.
    Inconclusive,
}

/// Probes `kubeconfig` against its workload API server. The stored Secret may have been
/// adopted or edited by anyone who can write Secrets, so its kubeconfig is checked like any
/// other ([`crate::domain::kubeconfig`]): one that asks for a command or a file is never used, only
/// replaced.
///
/// Only a verdict is logged above `debug`: a rejected kubeconfig is replaced (`info`); a probe
/// that cannot reach the server or times out keeps the stored kubeconfig and is repeated at the
/// next reconcile, so it is no failure (`debug`).
pub(super) async fn probe(kubeconfig: &[u8]) -> Verdict {
    let limits = crate::domain::helm::source::Limits {
        connect: PROBE_TIMEOUT,
        read: PROBE_TIMEOUT,
        request: PROBE_TIMEOUT,
    };
    let client = match crate::domain::workload::client_from_kubeconfig(kubeconfig, limits).await {
        Ok(c) => c,
        Err(err) => {
            tracing::info!(error = %err, "stored kubeconfig is unusable; exporting a new one");
            return Verdict::Rejected;
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Verdict::Accepted,
        Ok(Err(kube::Error::Api(s))) if s.code == 401 || s.code == 403 => {
            tracing::info!(
                code = s.code,
                "the workload API server refuses the stored kubeconfig; exporting a new one"
            );
            Verdict::Rejected
        }
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "kubeconfig probe inconclusive; keeping the stored kubeconfig");
            Verdict::Inconclusive
        }
        Err(_) => {
            tracing::debug!("kubeconfig probe timed out; keeping the stored kubeconfig");
            Verdict::Inconclusive
        }
    }
}

/// Kubeconfigs known to be accepted, by the hash of their Secret data (`kubeconfigHash`), with
/// the time they were last known so. Entries older than [`PROBE_MEMORY`] are dropped as new ones
/// come, so the map holds about one entry per export probed or minted in the last window. The
/// export controller keeps one; the key is a hash of the credential itself, so exports cannot
/// mistake one another's.
#[derive(Debug, Default)]
pub(crate) struct Accepted {
    state: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    since: HashMap<String, jiff::Timestamp>,
    /// Size at which the next sweep of old entries runs (amortised O(1) per insert).
    sweep_at: usize,
}

/// Whether `since` is within [`PROBE_MEMORY`] before `now` (a clock that went back is not).
fn recent(since: jiff::Timestamp, now: jiff::Timestamp) -> bool {
    let age = now.duration_since(since);
    !age.is_negative() && Duration::try_from(age).is_ok_and(|age| age < PROBE_MEMORY)
}

impl Accepted {
    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the kubeconfig hashed `hash` was known accepted within [`PROBE_MEMORY`].
    pub(super) fn recently(&self, hash: &str, now: jiff::Timestamp) -> bool {
        self.lock().since.get(hash).is_some_and(|t| recent(*t, now))
    }

    /// Records that the kubeconfig hashed `hash` is accepted at `now`.
    pub(super) fn remember(&self, hash: String, now: jiff::Timestamp) {
        let mut m = self.lock();
        if m.since.len() >= m.sweep_at {
            m.since.retain(|_, t| recent(*t, now));
            m.sweep_at = (m.since.len() * 2).max(1024);
        }
        m.since.insert(hash, now);
    }

    /// How many kubeconfigs are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().since.len()
    }
}

/// Whether the stored kubeconfig (`bytes`, its data hashed `hash`) may be kept: known accepted
/// within [`PROBE_MEMORY`], or not rejected by a probe now.
pub(super) async fn keep_stored(
    memory: &Accepted,
    hash: &str,
    bytes: &[u8],
    now: jiff::Timestamp,
) -> bool {
    if memory.recently(hash, now) {
        return true;
    }
    match probe(bytes).await {
        Verdict::Accepted => {
            memory.remember(hash.to_string(), now);
            true
        }
        Verdict::Inconclusive => true,
        Verdict::Rejected => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(s)
    }

    #[test]
    fn an_accepted_kubeconfig_is_trusted_for_the_window_only() {
        let memory = Accepted::default();
        assert!(!memory.recently("h", at(0)), "never probed");
        memory.remember("h".into(), at(100));
        assert!(memory.recently("h", at(100)));
        assert!(memory.recently("h", at(399)));
        assert!(!memory.recently("h", at(400)), "the window is over");
        assert!(!memory.recently("h", at(99)), "a clock that went back");
        assert!(!memory.recently("other", at(100)), "another kubeconfig");
    }

    #[test]
    fn old_entries_are_dropped_as_new_ones_come() {
        let memory = Accepted::default();
        for i in 0..1024 {
            memory.remember(format!("old-{i}"), at(0));
        }
        memory.remember("new".into(), at(1000));
        assert_eq!(memory.len(), 1, "the sweep dropped every stale entry");
        assert!(memory.recently("new", at(1000)));
    }

    /// A workload API server that cannot be reached leaves the stored kubeconfig in place and is
    /// probed again next time: no failure, so under the operator's default filter nothing of it
    /// is logged above `debug` (kube-client's own ERROR line for the request is filtered out).
    #[tokio::test(flavor = "current_thread")]
    async fn an_unreachable_server_is_inconclusive_and_logged_at_debug() {
        let capture = crate::trace_capture::this_thread(&format!(
            "{},omni_operator=debug",
            crate::process::telemetry::DEFAULT_FILTER
        ));
        // Port 1 on loopback: the connection is refused at once.
        let kubeconfig = b"apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:1'}\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n- name: u\n  user: {token: t}\n";
        assert_eq!(probe(kubeconfig).await, Verdict::Inconclusive);
        let text = capture.text();
        assert!(
            text.contains("DEBUG") && text.contains("kubeconfig probe inconclusive"),
            "{text}"
        );
        assert!(!text.contains("ERROR") && !text.contains("WARN"), "{text}");
    }

    /// A remembered kubeconfig is not probed: this one would be rejected (it asks for a
    /// command), yet is kept while the memory says it was accepted.
    #[tokio::test]
    async fn a_remembered_kubeconfig_costs_no_probe() {
        let exec = b"apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:1'}\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n- name: u\n  user:\n    exec: {command: /bin/true, apiVersion: client.authentication.k8s.io/v1}\n";
        let memory = Accepted::default();
        assert!(
            !keep_stored(&memory, "h", exec, at(0)).await,
            "probed: an exec kubeconfig is rejected"
        );
        memory.remember("h".into(), at(0));
        assert!(keep_stored(&memory, "h", exec, at(10)).await);
        assert!(
            !keep_stored(&memory, "h", exec, at(300)).await,
            "probed again once the window is over"
        );
    }
}
