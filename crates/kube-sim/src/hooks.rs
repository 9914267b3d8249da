//! Test hooks: per-(verb, resource, subresource, user) request counters, so
//! tests can assert e.g. "no writes while idle"; injected failures (counted, or a seeded random
//! share of requests) and latency; cutting open watch streams and expiring watch resumptions.
//! Every hook is off until a test turns it on.

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

/// Fails a share of the matching requests, drawn from the hooks' seeded generator.
#[derive(Clone, Debug)]
struct RandomFailure {
    /// Verbs to match; empty matches any.
    verbs: Vec<String>,
    /// Plural resource to match; None matches any.
    resource: Option<String>,
    code: u16,
    probability: f64,
}

/// Seeded random faults: the rules and the generator they draw from.
#[derive(Debug)]
struct RandomFaults {
    failures: Vec<RandomFailure>,
    /// `(resource or any, probability)` of answering a resumed watch with 410 Gone.
    expired_resumes: Vec<(Option<String>, f64)>,
    /// splitmix64 state: the same seed and the same request sequence give the same faults.
    state: u64,
}

impl RandomFaults {
    /// A uniform draw in `[0, 1)`.
    fn draw(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
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
    random: Mutex<RandomFaults>,
    /// Injected failures by HTTP code (410 counts expired watch resumptions).
    injected: Mutex<BTreeMap<u16, u64>>,
    cuts: tokio::sync::broadcast::Sender<Option<String>>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            counts: Mutex::default(),
            object_writes: Mutex::default(),
            failures: Mutex::default(),
            latency: Mutex::default(),
            random: Mutex::new(RandomFaults {
                failures: Vec::new(),
                expired_resumes: Vec::new(),
                state: 0,
            }),
            injected: Mutex::default(),
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

    /// Restarts the generator of the random faults from `seed` (it starts from 0), so a
    /// failing run can be repeated.
    pub fn seed_random_faults(&self, seed: u64) {
        self.random.lock().unwrap_or_else(|p| p.into_inner()).state = seed;
    }

    /// Fails each request matching one of `verbs` (empty: any verb) and `resource` (`None`:
    /// any) with probability `probability`, answering a Status of `code`. The rules share one
    /// draw per request and cover disjoint shares of it, so 0.2 of 409 plus 0.05 of 503 fail
    /// 25 % of the matching requests. Counted [`Hooks::fail_next`] rules take precedence.
    pub fn fail_randomly(
        &self,
        verbs: &[&str],
        resource: Option<&str>,
        code: u16,
        probability: f64,
    ) {
        self.random
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failures
            .push(RandomFailure {
                verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
                resource: resource.map(str::to_owned),
                code,
                probability: probability.clamp(0.0, 1.0),
            });
    }

    /// Answers a watch that resumes from a resourceVersion (of `resource`, or any when `None`)
    /// with 410 Gone, with probability `probability`, as a server whose watch cache no longer
    /// holds that version does; clients must list again.
    pub fn expire_watch_resumes(&self, resource: Option<&str>, probability: f64) {
        self.random
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .expired_resumes
            .push((resource.map(str::to_owned), probability.clamp(0.0, 1.0)));
    }

    /// Removes every random fault rule (the generator keeps its state).
    pub fn clear_random_faults(&self) {
        let mut random = self.random.lock().unwrap_or_else(|p| p.into_inner());
        random.failures.clear();
        random.expired_resumes.clear();
    }

    /// How many failures were injected so far, by HTTP code (410: expired watch resumptions).
    pub fn injected_failures(&self) -> BTreeMap<u16, u64> {
        self.injected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn record_injected(&self, code: u16) {
        *self
            .injected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(code)
            .or_insert(0) += 1;
    }

    /// Whether a watch of `resource` resuming from a resourceVersion is to be answered 410.
    pub fn take_expired_resume(&self, resource: &str) -> bool {
        let mut random = self.random.lock().unwrap_or_else(|p| p.into_inner());
        let probability: f64 = random
            .expired_resumes
            .iter()
            .filter(|(r, _)| r.as_deref().is_none_or(|r| r == resource))
            .map(|(_, p)| p)
            .sum();
        if probability <= 0.0 || random.draw() >= probability {
            return false;
        }
        drop(random);
        self.record_injected(410);
        true
    }

    /// Consumes one matching failure, returning its code: a counted rule first, else a
    /// random one.
    pub fn take_failure(
        &self,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Option<u16> {
        let code = self
            .take_counted_failure(verb, resource, namespace, name)
            .or_else(|| self.take_random_failure(verb, resource))?;
        self.record_injected(code);
        Some(code)
    }

    fn take_counted_failure(
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

    fn take_random_failure(&self, verb: &str, resource: &str) -> Option<u16> {
        let mut random = self.random.lock().unwrap_or_else(|p| p.into_inner());
        let matching: Vec<(u16, f64)> = random
            .failures
            .iter()
            .filter(|r| {
                (r.verbs.is_empty() || r.verbs.iter().any(|v| v == verb))
                    && r.resource.as_deref().is_none_or(|r| r == resource)
            })
            .map(|r| (r.code, r.probability))
            .collect();
        if matching.is_empty() {
            return None;
        }
        let mut draw = random.draw();
        for (code, probability) in matching {
            if draw < probability {
                return Some(code);
            }
            draw -= probability;
        }
        None
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

    /// How many of `n` requests the random rules fail, by code.
    fn failures_of(hooks: &Hooks, verb: &str, resource: &str, n: usize) -> BTreeMap<u16, usize> {
        let mut seen = BTreeMap::new();
        for _ in 0..n {
            if let Some(code) = hooks.take_failure(verb, resource, Some("ns"), Some("x")) {
                *seen.entry(code).or_insert(0) += 1;
            }
        }
        seen
    }

    #[test]
    fn random_failures_hit_their_share_of_matching_requests_only() {
        let hooks = Hooks::default();
        hooks.seed_random_faults(7);
        hooks.fail_randomly(&["update", "patch"], None, 409, 0.2);
        hooks.fail_randomly(&[], Some("configmaps"), 503, 0.05);
        let seen = failures_of(&hooks, "patch", "configmaps", 10_000);
        let share = |code| seen.get(&code).copied().unwrap_or(0) as f64 / 10_000.0;
        assert!((share(409) - 0.2).abs() < 0.02, "{seen:?}");
        assert!((share(503) - 0.05).abs() < 0.01, "{seen:?}");
        // Reads match only the rule without verbs, and only on its resource.
        let reads = failures_of(&hooks, "get", "configmaps", 10_000);
        assert_eq!(reads.get(&409), None);
        assert!(reads.get(&503).is_some_and(|n| *n > 300), "{reads:?}");
        assert!(failures_of(&hooks, "get", "secrets", 1_000).is_empty());
        let injected = hooks.injected_failures();
        assert_eq!(
            injected.get(&409).copied(),
            seen.get(&409).map(|n| *n as u64)
        );
        hooks.clear_random_faults();
        assert!(failures_of(&hooks, "patch", "configmaps", 1_000).is_empty());
    }

    #[test]
    fn the_same_seed_injects_the_same_faults() {
        let run = || {
            let hooks = Hooks::default();
            hooks.seed_random_faults(42);
            hooks.fail_randomly(&[], None, 500, 0.3);
            (0..200)
                .map(|_| hooks.take_failure("create", "pods", None, None).is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn counted_failures_come_before_random_ones() {
        let hooks = Hooks::default();
        hooks.fail_randomly(&[], None, 503, 1.0);
        hooks.fail_next("create", "pods", None, None, 409, 1);
        assert_eq!(hooks.take_failure("create", "pods", None, None), Some(409));
        assert_eq!(hooks.take_failure("create", "pods", None, None), Some(503));
    }

    #[test]
    fn watch_resumptions_expire_by_resource() {
        let hooks = Hooks::default();
        assert!(!hooks.take_expired_resume("pods"));
        hooks.expire_watch_resumes(Some("pods"), 1.0);
        assert!(hooks.take_expired_resume("pods"));
        assert!(!hooks.take_expired_resume("secrets"));
        assert_eq!(hooks.injected_failures().get(&410), Some(&1));
    }
}
