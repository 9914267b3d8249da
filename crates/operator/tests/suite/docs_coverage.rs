//! The reference documentation covers what the code can do: every condition and Event reason
//! the operator can emit (the type `api::Reason`), every field of every CRD, and every `run`
//! flag and environment variable. A new reason, field or flag without its documentation fails
//! here. (Chart values are checked against the chart README in `charts.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::{Args as _, Command};
use omni_operator::api::Reason;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn doc(name: &str) -> String {
    let path = repo().join("docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The rows of the "Every reason" table of docs/operations.md: reason → meaning.
fn documented_reasons() -> BTreeMap<String, String> {
    let operations = doc("operations.md");
    let (_, section) = operations
        .split_once("\n### Every reason\n")
        .unwrap_or_else(|| panic!("docs/operations.md has no \"### Every reason\" section"));
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
            let reason = cells.first().copied().unwrap_or_default().trim_matches('`');
            let meaning = cells.get(1).copied().unwrap_or_default();
            (reason.to_string(), meaning.to_string())
        })
        .collect()
}

/// The reference lists every reason the operator can write into a condition or an Event (the
/// variants of `api::Reason`), each with the meaning the type gives it, and nothing else.
#[test]
fn the_reason_reference_lists_every_reason_and_nothing_else() {
    let code: BTreeMap<String, String> = Reason::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), r.meaning().to_string()))
        .collect();
    assert_eq!(documented_reasons(), code);
}

/// Every reason the table of reasons by kind in docs/operations.md names is one the operator
/// writes.
#[test]
fn the_operations_guide_names_no_reason_the_operator_does_not_write() {
    let operations = doc("operations.md");
    let reasons: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    let (_, by_kind) = operations
        .split_once("| Kind | Reasons |")
        .unwrap_or_else(|| panic!("docs/operations.md has no table of reasons by kind"));
    let table: Vec<&str> = by_kind
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    let named: BTreeSet<&str> = table
        .iter()
        .flat_map(|row| row.rsplit('|').nth(1).map(code_spans).unwrap_or_default())
        // Reasons are CamelCase words; the table also names verbs (`list`) and fields.
        .filter(|span| {
            span.starts_with(|c: char| c.is_ascii_uppercase())
                && span.chars().all(|c| c.is_ascii_alphanumeric())
        })
        .collect();
    let unknown: Vec<&&str> = named.iter().filter(|n| !reasons.contains(**n)).collect();
    assert!(
        unknown.is_empty(),
        "reasons docs/operations.md lists by kind that the operator never writes: {unknown:?}"
    );
    assert!(named.contains("ReleaseStuck"), "the scan found {named:?}");
}

/// Every property name below `spec` and `status` of a CRD schema, as `path` (dotted).
fn schema_fields(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(props) = schema["properties"].as_object() {
        for (name, sub) in props {
            let path = format!("{prefix}.{name}");
            out.push(path.clone());
            schema_fields(sub, &path, out);
        }
    }
    if schema["items"].is_object() {
        schema_fields(&schema["items"], prefix, out);
    }
    if let Some(more) = schema["additionalProperties"].as_object() {
        schema_fields(&Value::Object(more.clone()), prefix, out);
    }
}

/// The texts between backticks in a Markdown document.
fn code_spans(markdown: &str) -> Vec<&str> {
    markdown.split('`').skip(1).step_by(2).collect()
}

/// Whether a code span names the field `path` (`spec.a.b`): the whole path or a longer one
/// through it, its name alone, or its name as the end or start of a shorter dotted path
/// (`.b` / `b.c` in a table that introduces `spec.a` above).
fn documents(spans: &[&str], path: &str) -> bool {
    let leaf = path.rsplit('.').next().unwrap_or_default();
    spans.iter().any(|s| {
        *s == leaf
            || s.contains(path)
            || s.ends_with(&format!(".{leaf}"))
            || s.starts_with(&format!("{leaf}."))
    })
}

#[test]
fn every_crd_field_is_in_the_reference() {
    // The field reference is docs/resources.md; other pages explain, it lists.
    let reference = doc("resources.md");
    let spans = code_spans(&reference);
    let mut missing = Vec::new();
    for crd in omni_operator::api::crds() {
        let crd = serde_json::to_value(&crd).unwrap_or_else(|e| panic!("crd: {e}"));
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let root = &version["schema"]["openAPIV3Schema"]["properties"];
            let mut fields = Vec::new();
            for top in ["spec", "status"] {
                schema_fields(&root[top], top, &mut fields);
            }
            for path in fields {
                if !documents(&spans, &path) {
                    missing.push(format!("{kind} {path}"));
                }
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "CRD fields the reference never names: {missing:#?}"
    );
}

#[test]
fn every_run_flag_and_environment_variable_is_in_operations() {
    let operations = doc("operations.md");
    let run = omni_operator::cli::run::Args::augment_args(Command::new("run"));
    let mut missing = Vec::new();
    for arg in run.get_arguments() {
        if arg.is_hide_set() {
            continue;
        }
        if let Some(long) = arg.get_long()
            && !operations.contains(&format!("`--{long}"))
        {
            missing.push(format!("--{long}"));
        }
        if let Some(env) = arg.get_env()
            && !operations.contains(&format!("`{}`", env.to_string_lossy()))
        {
            missing.push(env.to_string_lossy().into_owned());
        }
    }
    // Process-wide settings outside `run`'s own arguments.
    for global in ["`--log-format", "`LOG_FORMAT`", "`RUST_LOG`"] {
        if !operations.contains(global) {
            missing.push(global.trim_matches('`').to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "`omni-operator run` settings missing from docs/operations.md: {missing:?}"
    );
}
