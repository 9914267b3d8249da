//! Test hooks: per-(verb, resource, subresource, user) request counters, so
//! tests can assert e.g. "no writes while idle".

use std::collections::BTreeMap;
use std::sync::Mutex;

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

/// Request counters and fault injection shared by the server and the test.
#[derive(Debug, Default)]
pub struct Hooks {
    counts: Mutex<BTreeMap<CounterKey, u64>>,
    failures: Mutex<Vec<FailRule>>,
}

impl Hooks {
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
    }
}
