//! Label selectors in `kubectl` syntax, with the API server's rules for keys and values: a
//! field of ours (an OmniHelmRelease's drift ignore rules, parsed by admission and matched by
//! the controller) and the sharding flag (`process::shard`) read them with this one parser.

use std::collections::BTreeMap;

use super::cluster::is_dns1123_subdomain;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    /// `key=value` or `key==value`.
    Equals(String, String),
    /// `key!=value` (also true when the label is absent).
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    Absent(String),
}

/// A parsed selector: every requirement must hold. The empty selector selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `text`; the error says what is wrong, in words.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_terms(text)? {
            requirements
                .push(requirement(&term).map_err(|problem| format!("{term:?}: {problem}"))?);
        }
        Ok(Self(requirements))
    }

    /// The one value the selector requires of label `key` (`key=v`, `key==v` or
    /// `key in (v)`), if exactly one requirement asks for exactly one value of it.
    pub(crate) fn only_value_of(&self, key: &str) -> Option<&str> {
        let mut named = self.0.iter().filter_map(|r| match r {
            Requirement::Equals(k, v) if k == key => Some(v.as_str()),
            Requirement::In(k, vs) if k == key && vs.len() == 1 => Some(vs[0].as_str()),
            _ => None,
        });
        let value = named.next()?;
        named.next().is_none().then_some(value)
    }

    /// Whether the selector only excludes objects that carry label `key` (true when empty).
    pub(crate) fn only_excludes(&self, key: &str) -> bool {
        self.0
            .iter()
            .all(|r| matches!(r, Requirement::Absent(k) if k == key))
    }

    /// Whether `labels` satisfy every requirement.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::Absent(k) => !labels.contains_key(k),
        })
    }
}

/// The comma-separated terms of `text`, trimmed, commas inside `( … )` kept; none for an empty
/// text.
fn split_terms(text: &str) -> Result<Vec<String>, String> {
    let mut terms = Vec::new();
    let (mut depth, mut current) = (0usize, String::new());
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "unbalanced \")\"".to_string())?;
            }
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if depth != 0 {
        return Err("unbalanced \"(\"".to_string());
    }
    terms.push(current);
    let terms: Vec<String> = terms.iter().map(|t| t.trim().to_string()).collect();
    if terms.len() == 1 && terms[0].is_empty() {
        return Ok(Vec::new());
    }
    if terms.iter().any(String::is_empty) {
        return Err("empty requirement between commas".to_string());
    }
    Ok(terms)
}

fn requirement(term: &str) -> Result<Requirement, String> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::Absent(label_key(key.trim())?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            label_key(k.trim())?,
            value(v.trim())?,
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(label_key(k.trim())?, value(v.trim())?));
    }
    let words: Vec<&str> = term.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words.as_slice() {
        let rest = rest.trim();
        let (op, list) = if let Some(list) = rest.strip_prefix("notin") {
            ("notin", list)
        } else if let Some(list) = rest.strip_prefix("in") {
            ("in", list)
        } else {
            return Err(
                "not a requirement (key, !key, key=value, key!=value, key in (…), key notin (…))"
                    .to_string(),
            );
        };
        let list = list
            .trim()
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .ok_or_else(|| format!("the values of {op} go in parentheses"))?;
        let mut values = Vec::new();
        for v in list.split(',').map(str::trim) {
            let v = value(v)?;
            if !values.contains(&v) {
                values.push(v);
            }
        }
        let key = label_key(key)?;
        return Ok(if op == "in" {
            Requirement::In(key, values)
        } else {
            Requirement::NotIn(key, values)
        });
    }
    Ok(Requirement::Exists(label_key(term)?))
}

/// A label key as the API server accepts one: an optional DNS-subdomain prefix and `/`, then
/// a name of at most 63 characters (letters, digits, `-`, `_`, `.`; alphanumeric at both ends).
fn label_key(key: &str) -> Result<String, String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns1123_subdomain(prefix) {
                return Err(format!("key prefix {prefix:?} is not a DNS subdomain"));
            }
            name
        }
        None => key,
    };
    if name.is_empty() || !is_label_value(name) {
        return Err(format!("{key:?} is not a label key"));
    }
    Ok(key.to_string())
}

/// A label value: empty, or at most 63 characters of letters, digits, `-`, `_` and `.`,
/// alphanumeric at both ends.
fn value(v: &str) -> Result<String, String> {
    if v.is_empty() || is_label_value(v) {
        Ok(v.to_string())
    } else {
        Err(format!("{v:?} is not a label value"))
    }
}

fn is_label_value(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.len() <= 63
        && s.chars()
            .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_requirement_matches_as_kubectl_does() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("env", "prod")]);
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("env in (prod, staging)", true),
            ("env notin (prod)", false),
            ("missing notin (prod)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,env in (prod),!legacy", true),
            ("app=web,env in (dev)", false),
        ];
        for (text, expected) in cases {
            let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(selector.matches(&l), expected, "{text}");
        }
    }

    #[test]
    fn malformed_selectors_are_refused_with_a_reason() {
        for bad in [
            "app=web,",
            "env in prod",
            "env in (a",
            "a b c",
            "=x",
            "app=w b",
            // Keys and values no object can carry (the API server's rules).
            "-app=web",
            "app-=web",
            "a/b/c",
            "x/=1",
            "Example.com/app",
            "app=-web",
            "app=Ünicode",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
        let err = LabelSelector::parse("app=web,tier=!").unwrap_err();
        assert!(
            err.contains("tier=!") && err.contains("label value"),
            "{err}"
        );
        assert!(LabelSelector::parse("example.com/app=web,app=,app.kubernetes.io/name").is_ok());
    }

    #[test]
    fn the_one_value_a_selector_requires_and_a_selector_that_only_excludes() {
        let one = |text: &str| {
            LabelSelector::parse(text)
                .unwrap()
                .only_value_of("k")
                .map(str::to_owned)
        };
        assert_eq!(one("k=a"), Some("a".into()));
        assert_eq!(one("k in (a), x=y"), Some("a".into()));
        assert_eq!(one("k in (a, b)"), None);
        assert_eq!(one("k=a, k=b"), None);
        assert_eq!(one("k!=a"), None);
        let excludes = |text: &str| LabelSelector::parse(text).unwrap().only_excludes("k");
        assert!(excludes("") && excludes("!k"));
        assert!(!excludes("!k, x") && !excludes("!x"));
    }
}
