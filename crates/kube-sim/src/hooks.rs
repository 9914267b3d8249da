//! Test hooks: per-(verb, resource, subresource, user) request counters, so
//! tests can assert e.g. "no writes while idle"; injected failures and latency; cutting open
//! watch streams.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// The key requests are counted under.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CounterKey {
    /// Verb (get, list, watch, create, update, patch, delete, deletecollection).
    pub verb: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource, if any.
    pub subresource: Option<String>,
    /// Authenticated user name.
    pub user: String,
}

impl CounterKey {
    /// Whether the verb changes state.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// One named object: `(plural resource, namespace, name)`; the namespace is empty for
/// cluster-scoped objects.
type ObjectKey = (String, String, String);

/// Fails the next `remaining` requests that match.
#[derive(Clone, Debug)]
pub struct FailRule {
    /// Verb to match.
    pub verb: String,
    /// Plural resource to match.
    pub resource: String,
    /// Namespace to match; None matches any.
    pub namespace: Option<String>,
    /// Object name to match; None matches any.
    pub name: Option<String>,
    /// HTTP code of the injected Status.
    pub code: u16,
    /// How many more requests fail.
    pub remaining: u32,
}

/// Delays matching requests.
#[derive(Clone, Debug)]
struct LatencyRule {
    verb: Option<String>,
    resource: Option<String>,
    delay: Duration,
    remaining: Option<u32>,
}

/// Request counters and fault injection shared by the server and the test.
#[derive(Debug)]
pub struct Hooks {
    counts: Mutex<BTreeMap<CounterKey, u64>>,
    object_writes: Mutex<BTreeMap<ObjectKey, u64>>,
    failures: Mutex<Vec<FailRule>>,
    latency: Mutex<Vec<LatencyRule>>,
    cuts: tokio::sync::broadcast::Sender<Option<String>>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            counts: Mutex::default(),
            object_writes: Mutex::default(),
            failures: Mutex::default(),
            latency: Mutex::default(),
            cuts: tokio::sync::broadcast::channel(16).0,
        }
    }
}

impl Hooks {
    /// Ends every open watch stream now (only those of `resource` when given), as a restarted
    /// API server or a dropped connection would; clients must resume from their last
    /// resourceVersion.
    pub fn cut_watches(&self, resource: Option<&str>) {
        // No receivers simply means no open watches.
        let _ = self.cuts.send(resource.map(str::to_owned));
    }

    pub(crate) fn subscribe_cuts(&self) -> tokio::sync::broadcast::Receiver<Option<String>> {
        self.cuts.subscribe()
    }

    /// Delays requests matching `verb` and `resource` (`None` matches any) by `delay`, for the
    /// next `times` requests (`None`: until [`Hooks::clear_latency`]).
    pub fn add_latency(
        &self,
        verb: Option<&str>,
        resource: Option<&str>,
        delay: Duration,
        times: Option<u32>,
    ) {
        self.latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LatencyRule {
                verb: verb.map(str::to_owned),
                resource: resource.map(str::to_owned),
                delay,
                remaining: times,
            });
    }

    /// Removes every latency rule.
    pub fn clear_latency(&self) {
        self.latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The delay for one request (the sum of matching rules), consuming counted rules.
    pub fn take_latency(&self, verb: &str, resource: &str) -> Duration {
        let mut rules = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let mut total = Duration::ZERO;
        for rule in rules.iter_mut() {
            if rule.verb.as_deref().is_none_or(|v| v == verb)
                && rule.resource.as_deref().is_none_or(|r| r == resource)
                && rule.remaining != Some(0)
            {
                total += rule.delay;
                if let Some(n) = rule.remaining.as_mut() {
                    *n -= 1;
                }
            }
        }
        rules.retain(|r| r.remaining != Some(0));
        total
    }

    /// Fails the next `times` requests matching verb and resource (and
    /// namespace/name when given) with a Status of `code`.
    pub fn fail_next(
        &self,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        code: u16,
        times: u32,
    ) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(FailRule {
                verb: verb.to_string(),
                resource: resource.to_string(),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                code,
                remaining: times,
            });
    }

    /// Consumes one matching failure, returning its code.
    pub fn take_failure(
        &self,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Option<u16> {
        let mut rules = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let rule = rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.verb == verb
                && r.resource == resource
                && r.namespace.as_deref().is_none_or(|n| Some(n) == namespace)
                && r.name.as_deref().is_none_or(|n| Some(n) == name)
        })?;
        rule.remaining -= 1;
        let code = rule.code;
        rules.retain(|r| r.remaining > 0);
        Some(code)
    }

    /// Records one request.
    pub fn count(&self, key: CounterKey) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *c.entry(key).or_insert(0) += 1;
    }

    /// Records one write request to the named object `name` (any verb, any subresource), so
    /// tests can bound the writes one object receives while others are busy.
    pub fn count_object_write(&self, resource: &str, namespace: Option<&str>, name: &str) {
        let key = (
            resource.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        let mut c = self.object_writes.lock().unwrap_or_else(|p| p.into_inner());
        *c.entry(key).or_insert(0) += 1;
    }

    /// Write requests served for the object `name` of `resource` in `namespace` (any
    /// subresource, any user; creates count once the request names the object).
    pub fn writes_to_object(&self, resource: &str, namespace: Option<&str>, name: &str) -> u64 {
        let key = (
            resource.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        self.object_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .copied()
            .unwrap_or(0)
    }

    /// A snapshot of all counters.
    pub fn counts(&self) -> BTreeMap<CounterKey, u64> {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Total write requests (create/update/patch/delete/deletecollection).
    pub fn writes_total(&self) -> u64 {
        self.counts()
            .iter()
            .filter(|(k, _)| k.is_write())
            .map(|(_, n)| n)
            .sum()
    }

    /// Total read requests (get/list/watch).
    pub fn reads_total(&self) -> u64 {
        self.counts()
            .iter()
            .filter(|(k, _)| !k.is_write())
            .map(|(_, n)| n)
            .sum()
    }

    /// Writes to one resource (any subresource).
    pub fn writes_to(&self, resource: &str) -> u64 {
        self.counts()
            .iter()
            .filter(|(k, _)| k.is_write() && k.resource == resource)
            .map(|(_, n)| n)
            .sum()
    }

    /// Clears all counters.
    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.object_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_rules_match_add_up_and_run_out() {
        let hooks = Hooks::default();
        hooks.add_latency(
            Some("get"),
            Some("configmaps"),
            Duration::from_millis(100),
            Some(1),
        );
        hooks.add_latency(None, Some("configmaps"), Duration::from_millis(10), None);
        assert_eq!(hooks.take_latency("list", "secrets"), Duration::ZERO);
        assert_eq!(
            hooks.take_latency("get", "configmaps"),
            Duration::from_millis(110)
        );
        // The counted rule is used up; the open-ended one stays until cleared.
        assert_eq!(
            hooks.take_latency("get", "configmaps"),
            Duration::from_millis(10)
        );
        hooks.clear_latency();
        assert_eq!(hooks.take_latency("get", "configmaps"), Duration::ZERO);
    }
}
