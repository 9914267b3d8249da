//! A chart repository's `index.yaml`: which archive holds a chart version, and the digest it
//! must have. Versions are chosen as helm chooses them: an exact match of the written version
//! first, else the newest version a constraint (`^1.2`, `~1.2.3`, `>=1.0, <2`, `1.x`,
//! `1.0 - 1.4`, alternatives with `||`) admits.

use std::collections::BTreeMap;

use serde::Deserialize;

/// What the index says about one chart version.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    #[serde(default)]
    pub(crate) version: String,
    #[serde(default)]
    pub(crate) digest: Option<String>,
    #[serde(default)]
    pub(crate) urls: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct IndexFile {
    #[serde(default)]
    entries: BTreeMap<String, Vec<IndexEntry>>,
}

/// Why the index cannot say where the chart is. Messages name the chart and version from the
/// spec, never text from the index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IndexError {
    #[error("the repository index is not a valid index")]
    Unreadable,
    #[error("the repository index has no chart {0:?}")]
    NoChart(String),
    #[error("the repository index has no version of chart {chart:?} matching {version:?}")]
    NoVersion { chart: String, version: String },
    #[error("chart.version {0:?} is not a version nor a version constraint")]
    BadConstraint(String),
    #[error(
        "the repository index lists no digest for chart {chart:?} {version}, so the archive cannot be verified"
    )]
    NoDigest { chart: String, version: String },
    #[error("the repository index lists no download URL for chart {chart:?} {version}")]
    NoUrl { chart: String, version: String },
}

/// The index entry of `chart` at `version` in the index `bytes` (YAML or JSON).
pub(crate) fn find(bytes: &[u8], chart: &str, version: &str) -> Result<IndexEntry, IndexError> {
    let text = std::str::from_utf8(bytes).map_err(|_| IndexError::Unreadable)?;
    let mut options = serde_saphyr::Options::default();
    // Large public indexes hold tens of thousands of entries; the byte limit of the download
    // bounds the work, aliases stay bounded by the parser's own defaults.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = 50_000_000;
    budget.max_nodes = 20_000_000;
    options.budget = Some(budget);
    let index: IndexFile =
        serde_saphyr::from_str_with_options(text, options).map_err(|_| IndexError::Unreadable)?;
    let entries = index
        .entries
        .get(chart)
        .ok_or_else(|| IndexError::NoChart(chart.to_string()))?;
    let entry = choose(entries, version)
        .map_err(|e| match e {
            IndexError::NoVersion { version, .. } => IndexError::NoVersion {
                chart: chart.to_string(),
                version,
            },
            other => other,
        })?
        .clone();
    let what = || (chart.to_string(), entry.version.clone());
    if entry.digest.as_deref().is_none_or(|d| d.trim().is_empty()) {
        let (chart, version) = what();
        return Err(IndexError::NoDigest { chart, version });
    }
    if entry.urls.is_empty() {
        let (chart, version) = what();
        return Err(IndexError::NoUrl { chart, version });
    }
    Ok(entry)
}

/// The entry `wanted` selects: the exact version written, else the newest admitted by it as a
/// constraint. A `NoVersion` error leaves the chart name for the caller to fill in.
pub(crate) fn choose<'a>(
    entries: &'a [IndexEntry],
    wanted: &str,
) -> Result<&'a IndexEntry, IndexError> {
    let wanted = wanted.trim();
    if let Some(exact) = entries.iter().find(|e| e.version == wanted) {
        return Ok(exact);
    }
    let constraint = Constraint::parse(wanted)?;
    entries
        .iter()
        .filter_map(|e| Some((parse_version(&e.version)?, e)))
        .filter(|(v, _)| constraint.admits(v))
        .max_by(|(a, _), (b, _)| a.cmp(b))
        .map(|(_, e)| e)
        .ok_or_else(|| IndexError::NoVersion {
            chart: String::new(),
            version: wanted.to_string(),
        })
}

/// The newest of `versions` (OCI tags) `wanted` selects, as [`choose`] does for an index.
pub(crate) fn choose_tag(versions: &[String], wanted: &str) -> Result<String, IndexError> {
    let entries: Vec<IndexEntry> = versions
        .iter()
        .map(|v| IndexEntry {
            version: v.clone(),
            ..IndexEntry::default()
        })
        .collect();
    choose(&entries, wanted).map(|e| e.version.clone())
}

/// Whether `wanted` names one exact version rather than a range.
pub(crate) fn is_exact(wanted: &str) -> bool {
    let w = wanted.trim();
    !w.is_empty()
        && !w.contains(['^', '~', '>', '<', '=', '*', ' ', ',', '|'])
        && !w.split('.').any(|part| part.eq_ignore_ascii_case("x"))
}

/// Whether `wanted` is one version (which the index must list as written, or as a
/// constraint of one) or a range the operator can read.
pub(crate) fn is_version_or_range(wanted: &str) -> bool {
    let wanted = wanted.trim();
    (is_exact(wanted) && parse_version(wanted).is_some()) || Constraint::parse(wanted).is_ok()
}

/// A version as helm reads one: semantic, an optional leading `v`, missing minor or patch
/// counted as zero.
fn parse_version(text: &str) -> Option<semver::Version> {
    let t = text.trim().trim_start_matches(['v', 'V']);
    if let Ok(v) = semver::Version::parse(t) {
        return Some(v);
    }
    let (core, rest) = match t.find(['-', '+']) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, ""),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.parse::<u64>().is_err()) {
        return None;
    }
    let mut full = parts.join(".");
    for _ in parts.len()..3 {
        full.push_str(".0");
    }
    semver::Version::parse(&format!("{full}{rest}")).ok()
}

/// Alternatives (`||`) of conjunctions of comparators.
struct Constraint(Vec<semver::VersionReq>);

impl Constraint {
    fn parse(text: &str) -> Result<Constraint, IndexError> {
        let bad = || IndexError::BadConstraint(text.to_string());
        let mut alternatives = Vec::new();
        for alternative in text.split("||") {
            let alternative = alternative.trim();
            if alternative.is_empty() {
                return Err(bad());
            }
            let mut comparators = Vec::new();
            // A hyphen range `a - b` is `>=a, <=b`.
            if let Some((low, high)) = alternative.split_once(" - ") {
                comparators.push(format!(">={}", low.trim().trim_start_matches('v')));
                comparators.push(format!("<={}", high.trim().trim_start_matches('v')));
            } else {
                // Comparators are separated by commas or spaces; an operator may stand apart
                // from its version (`>= 1.2`).
                let mut pending = String::new();
                for token in alternative
                    .split([',', ' '])
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                {
                    if token.chars().all(|c| "<>=~^!".contains(c)) {
                        pending.push_str(token);
                        continue;
                    }
                    let token = format!("{pending}{token}");
                    pending.clear();
                    comparators.push(normalise(&token).ok_or_else(bad)?);
                }
                if !pending.is_empty() {
                    return Err(bad());
                }
            }
            let req = semver::VersionReq::parse(&comparators.join(", ")).map_err(|_| bad())?;
            alternatives.push(req);
        }
        Ok(Constraint(alternatives))
    }

    fn admits(&self, v: &semver::Version) -> bool {
        self.0.iter().any(|req| req.matches(v))
    }
}

/// One Masterminds comparator in the `semver` crate's spelling; `None` for what it cannot
/// express (`!=`).
fn normalise(token: &str) -> Option<String> {
    let (op, version) = match token.find(|c: char| !"<>=~^!".contains(c)) {
        Some(i) => token.split_at(i),
        None => return None,
    };
    let version = version.trim_start_matches(['v', 'V']);
    let op = match op {
        "=<" => "<=",
        "=>" => ">=",
        "~>" => "~",
        "!=" | "!" => return None,
        // Masterminds reads a bare or `=` version with parts left out (`1.2`, `1`) as "that
        // minor (major), any patch (minor)", where the `semver` crate would read a bare one as
        // a caret: `~` says what Masterminds means. A wildcard (`1.2.x`) stays bare; a whole
        // version is exact.
        "" | "=" if version.contains(['x', 'X', '*']) => "",
        "" | "="
            if version
                .split(['-', '+'])
                .next()
                .unwrap_or_default()
                .split('.')
                .count()
                < 3 =>
        {
            "~"
        }
        "" | "=" => "=",
        other => other,
    };
    Some(format!("{op}{version}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(versions: &[&str]) -> Vec<IndexEntry> {
        versions
            .iter()
            .map(|v| IndexEntry {
                version: (*v).to_string(),
                digest: Some("d".into()),
                urls: vec!["u".into()],
            })
            .collect()
    }

    fn pick(versions: &[&str], wanted: &str) -> Option<String> {
        choose(&entries(versions), wanted)
            .ok()
            .map(|e| e.version.clone())
    }

    #[test]
    fn versions_are_chosen_like_helm() {
        let all = [
            "1.0.0",
            "1.2.0",
            "1.2.5",
            "1.10.0",
            "2.0.0",
            "2.1.0-rc.1",
            "v3.0.0",
        ];
        assert_eq!(pick(&all, "1.2.0").as_deref(), Some("1.2.0"));
        assert_eq!(pick(&all, "v3.0.0").as_deref(), Some("v3.0.0"));
        assert_eq!(pick(&all, "3.0.0").as_deref(), Some("v3.0.0"));
        assert_eq!(pick(&all, "^1.2").as_deref(), Some("1.10.0"));
        assert_eq!(pick(&all, "~1.2.0").as_deref(), Some("1.2.5"));
        assert_eq!(pick(&all, ">=1.0, <2").as_deref(), Some("1.10.0"));
        assert_eq!(pick(&all, ">= 1.0 < 1.5").as_deref(), Some("1.2.5"));
        assert_eq!(pick(&all, "1.x").as_deref(), Some("1.10.0"));
        assert_eq!(pick(&all, "*").as_deref(), Some("v3.0.0"));
        assert_eq!(pick(&all, "1.0 - 1.2.0").as_deref(), Some("1.2.0"));
        assert_eq!(pick(&all, "^9 || ~1.2").as_deref(), Some("1.2.5"));
        assert_eq!(pick(&all, "=<1.2.0").as_deref(), Some("1.2.0"));
        assert_eq!(pick(&all, "9.9.9"), None);
        // A bare partial version is Masterminds' "that minor, any patch", not a caret.
        assert_eq!(pick(&all, "1.2").as_deref(), Some("1.2.5"));
        assert_eq!(pick(&all, "=1").as_deref(), Some("1.10.0"));
        assert_eq!(pick(&all, ">=1.2 <2").as_deref(), Some("1.10.0"));
        assert_eq!(pick(&all, "1.2.x").as_deref(), Some("1.2.5"));
        assert_eq!(pick(&all, "1.x.x").as_deref(), Some("1.10.0"));
        assert_eq!(pick(&all, "1.2.0 || 2").as_deref(), Some("2.0.0"));
        assert!(matches!(
            choose(&entries(&all), "!=1.0.0"),
            Err(IndexError::BadConstraint(_))
        ));
        assert!(
            is_exact("1.2.3") && is_exact("1.2.3+build") && !is_exact("^1") && !is_exact("1.x")
        );
        for ok in [
            "1.2.3",
            "v1.2.3",
            "1.2",
            ">=1.2 <2",
            "1.x",
            "^1 || ~2.1",
            "*",
        ] {
            assert!(is_version_or_range(ok), "{ok}");
        }
        for bad in ["latest", "!=1.0.0", ">=", "1.2.3.4", "1 ||"] {
            assert!(!is_version_or_range(bad), "{bad}");
        }
    }

    #[test]
    fn an_entry_needs_a_digest_and_a_url() {
        let index = br#"{"apiVersion":"v1","entries":{"demo":[
            {"name":"demo","version":"0.1.0","digest":"abc","urls":["demo-0.1.0.tgz"]},
            {"name":"demo","version":"0.2.0","urls":["demo-0.2.0.tgz"]}]}}"#;
        assert_eq!(
            find(index, "demo", "0.1.0"),
            Ok(IndexEntry {
                version: "0.1.0".into(),
                digest: Some("abc".into()),
                urls: vec!["demo-0.1.0.tgz".into()],
            })
        );
        assert!(matches!(
            find(index, "demo", "0.2.0"),
            Err(IndexError::NoDigest { .. })
        ));
        assert_eq!(
            find(index, "other", "1"),
            Err(IndexError::NoChart("other".into()))
        );
        assert_eq!(
            find(b"entries: [", "demo", "1"),
            Err(IndexError::Unreadable)
        );
        let yaml = b"apiVersion: v1\nentries:\n  demo:\n  - version: 1.0.0\n    digest: abc\n    urls: [a.tgz]\n    maintainers: [{name: x}]\n";
        assert!(find(yaml, "demo", "^1").is_ok());
    }
}
