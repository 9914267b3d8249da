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

/// Request counters shared by the server and the test.
#[derive(Debug, Default)]
pub struct Hooks {
    counts: Mutex<BTreeMap<CounterKey, u64>>,
}

impl Hooks {
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
