//! Compiled regular expressions, kept by pattern: the API server compiles a CRD's `pattern`s
//! and its name rules once, and so must kube-sim. Compiling them on every write was the largest
//! single cost of a benchmark's emulators (a sixth of their CPU at 1,000 clusters).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;

/// Patterns kept at most; a store whose CRDs name more starts over (a bound, not an LRU: no
/// real schema set comes near it).
const CAPACITY: usize = 4096;

static COMPILED: LazyLock<Mutex<HashMap<String, Option<Regex>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// `pattern` compiled, or `None` when it is not a valid regular expression.
pub(crate) fn compiled(pattern: &str) -> Option<Regex> {
    let mut compiled = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(re) = compiled.get(pattern) {
        return re.clone();
    }
    if compiled.len() >= CAPACITY {
        compiled.clear();
    }
    let re = Regex::new(pattern).ok();
    compiled.insert(pattern.to_owned(), re.clone());
    re
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_is_compiled_once_and_an_invalid_one_stays_invalid() {
        let first = compiled("^a+$").expect("valid");
        assert!(first.is_match("aaa") && !first.is_match("ab"));
        let again = compiled("^a+$").expect("valid");
        assert_eq!(first.as_str(), again.as_str());
        assert!(compiled("(unclosed").is_none());
        assert!(compiled("(unclosed").is_none());
    }
}
