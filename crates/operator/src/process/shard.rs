//! Sharding: which of the operator's objects this replica set reconciles (`--watch-label-selector`)
//! and the names that keep shards apart (the Lease, the field manager).
//!
//! The convention is Flux's: objects carry the label [`keys::SHARD_LABEL`] naming their shard;
//! each shard's Deployment runs with `--watch-label-selector sharding.omni.texashpc.com/key=NAME`,
//! and the default shard with `!sharding.omni.texashpc.com/key`, so it takes every object
//! without the label. The selector filters the watches of the kinds that only this shard reads
//! and gates every reconcile (docs/performance.md, "Sharding"; docs/decisions.md).

use std::collections::BTreeMap;

use crate::api::cluster::is_dns1123_label;
use crate::api::keys;
use crate::api::label_selector::LabelSelector;

/// The selector of this replica set, as given and parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shard {
    /// The selector as the API server receives it; `None` reconciles every object.
    text: Option<String>,
    selector: LabelSelector,
    /// The one shard the selector names, if it names one.
    name: Option<String>,
}

/// Why a `--watch-label-selector` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label selector {selector:?}: {problem}")]
pub struct SelectorError {
    selector: String,
    problem: String,
}

impl Shard {
    /// Every object: no selector (one replica set, today's default).
    pub fn all() -> Self {
        Self::default()
    }

    /// Parses a label selector in the API server's syntax: comma-separated terms `k=v`,
    /// `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k`. An empty one selects all.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self::all());
        }
        let selector = LabelSelector::parse(text).map_err(|problem| SelectorError {
            selector: text.to_owned(),
            problem,
        })?;
        let name = selector.only_value_of(keys::SHARD_LABEL).map(str::to_owned);
        Ok(Self {
            text: Some(text.to_owned()),
            selector,
            name,
        })
    }

    /// The selector text for list and watch requests; `None` selects every object.
    pub fn selector(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// Whether this replica set reconciles an object with these labels.
    pub fn owns(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }

    /// The shard's name: the one value of [`keys::SHARD_LABEL`] the selector asks for
    /// (`key=NAME`, `key==NAME` or `key in (NAME)`), if it asks for exactly one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The leader-election Lease name of this shard when none is given: today's name on the
    /// default shard (no selector, or one that only excludes labelled objects), so an upgrade
    /// keeps its Lease; `omni-operator-shard-NAME` on a named shard. Any other selector must
    /// name its Lease (`--leader-election-id`): two replica sets must never share one by
    /// accident, nor split one fleet's objects under one Lease.
    pub fn default_lease_name(&self) -> Result<String, String> {
        if self.is_default_shard() {
            return Ok(crate::process::leader::LEASE_NAME.to_owned());
        }
        match self.name() {
            Some(name) if is_dns1123_label(name) && name.len() <= 63 - SHARD_PREFIX.len() => {
                Ok(format!("{SHARD_PREFIX}{name}"))
            }
            Some(name) => Err(format!(
                "shard name {name:?} cannot be part of a Lease name; pass --leader-election-id"
            )),
            None => Err(format!(
                "--watch-label-selector {:?} names no single shard; pass --leader-election-id",
                self.text.as_deref().unwrap_or_default()
            )),
        }
    }

    /// The program name this replica's requests carry (User-Agent, hence the field manager
    /// recorded in `managedFields`): `omni-operator`, or `omni-operator-shard-NAME` on a named
    /// shard, so an object's writers show which shard wrote it.
    pub fn program_name(&self) -> String {
        match self.name() {
            Some(name) if !self.is_default_shard() => format!("{SHARD_PREFIX}{name}"),
            _ => "omni-operator".to_owned(),
        }
    }

    /// No selector, or only "no shard label".
    fn is_default_shard(&self) -> bool {
        self.selector.only_excludes(keys::SHARD_LABEL)
    }
}

const SHARD_PREFIX: &str = "omni-operator-shard-";

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const KEY: &str = keys::SHARD_LABEL;

    #[test]
    fn a_named_shard_owns_its_label_and_the_default_shard_the_unlabelled() {
        let shard1 = Shard::parse(&format!("{KEY}=shard1")).unwrap();
        let default = Shard::parse(&format!("!{KEY}")).unwrap();
        let (mine, other, none) = (
            labels(&[(KEY, "shard1")]),
            labels(&[(KEY, "shard2"), ("app", "x")]),
            labels(&[("app", "x")]),
        );
        assert!(shard1.owns(&mine) && !shard1.owns(&other) && !shard1.owns(&none));
        assert!(!default.owns(&mine) && !default.owns(&other) && default.owns(&none));
        assert!(Shard::all().owns(&mine) && Shard::all().owns(&none));
        assert_eq!(shard1.name(), Some("shard1"));
        assert_eq!(default.name(), None);
    }

    #[test]
    fn every_selector_form_parses() {
        let s = Shard::parse("region in (x, y), b notin (z), c!=1, d==2, e=3, f, !g").unwrap();
        let l = labels(&[
            ("region", "y"),
            ("b", "q"),
            ("c", "2"),
            ("d", "2"),
            ("e", "3"),
            ("f", ""),
        ]);
        assert!(s.owns(&l));
        let mut l2 = l.clone();
        l2.insert("g".into(), "1".into());
        assert!(!s.owns(&l2));
        assert_eq!(
            s.selector(),
            Some("region in (x, y), b notin (z), c!=1, d==2, e=3, f, !g")
        );
        assert_eq!(Shard::parse("  ").unwrap(), Shard::all());
        assert_eq!(
            Shard::parse(&format!("{KEY} in (blue)")).unwrap().name(),
            Some("blue")
        );
    }

    #[test]
    fn malformed_selectors_are_refused_naming_the_term() {
        for bad in [
            "a in x",
            "a in (x",
            "a,,b",
            "a=b c",
            "-a=b",
            "x/=1",
            "a=Ünicode",
            "a in (b))",
        ] {
            let err = Shard::parse(bad).err().map(|e| e.to_string());
            assert!(err.is_some(), "{bad} was accepted");
        }
        let err = Shard::parse("a=1,b=!").unwrap_err().to_string();
        assert!(err.contains("b=!"), "{err}");
    }

    #[test]
    fn lease_and_manager_names_keep_shards_apart_and_the_default_shard_unchanged() {
        let default = Shard::parse(&format!("!{KEY}")).unwrap();
        assert_eq!(
            default.default_lease_name().unwrap(),
            crate::process::leader::LEASE_NAME
        );
        assert_eq!(
            Shard::all().default_lease_name().unwrap(),
            crate::process::leader::LEASE_NAME
        );
        assert_eq!(default.program_name(), "omni-operator");
        let shard1 = Shard::parse(&format!("{KEY}=shard1")).unwrap();
        assert_eq!(
            shard1.default_lease_name().unwrap(),
            "omni-operator-shard-shard1"
        );
        assert_eq!(shard1.program_name(), "omni-operator-shard-shard1");
        for unnamed in ["team=a", "sharding.omni.texashpc.com/key in (a,b)"] {
            let err = Shard::parse(unnamed).unwrap().default_lease_name();
            assert!(
                err.unwrap_err().contains("--leader-election-id"),
                "{unnamed}"
            );
        }
        let upper = Shard::parse(&format!("{KEY}=Shard_1")).unwrap();
        assert!(upper.default_lease_name().is_err());
    }
}
