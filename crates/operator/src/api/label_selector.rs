//! Label selectors in `kubectl` syntax, as a field of ours spells them (an OmniHelmRelease's
//! drift ignore rules): parsed once by admission, matched by the controller.

use std::collections::BTreeMap;

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
            requirements.push(requirement(&term)?);
        }
        Ok(Self(requirements))
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
/// text. Also the sharding flag's parser (`process::shard`).
pub(crate) fn split_terms(text: &str) -> Result<Vec<String>, String> {
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
            return Err(format!(
                "{term:?} is not a requirement (key, !key, key=value, key!=value, key in (…), key notin (…))"
            ));
        };
        let list = list
            .trim()
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .ok_or_else(|| format!("{term:?}: the values of {op} go in parentheses"))?;
        let values = list
            .split(',')
            .map(|v| value(v.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let key = label_key(key)?;
        return Ok(if op == "in" {
            Requirement::In(key, values)
        } else {
            Requirement::NotIn(key, values)
        });
    }
    Ok(Requirement::Exists(label_key(term)?))
}

/// A label key: an optional DNS prefix and `/`, then a name of at most 63 characters.
fn label_key(key: &str) -> Result<String, String> {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && key.len() <= 317;
    if ok {
        Ok(key.to_string())
    } else {
        Err(format!("{key:?} is not a label key"))
    }
}

/// A label value: at most 63 characters of letters, digits, `-`, `_` and `.`.
fn value(v: &str) -> Result<String, String> {
    if v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(v.to_string())
    } else {
        Err(format!("{v:?} is not a label value"))
    }
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
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }
}
