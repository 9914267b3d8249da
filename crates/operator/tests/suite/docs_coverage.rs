//! The reference documentation covers what the code can do: every condition and Event reason
//! the operator can emit, every field of every CRD, and every `run` flag and environment
//! variable. A new reason, field or flag without its documentation fails here. (Chart values
//! are checked against the chart README in `charts.rs`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::{Args as _, Command};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn doc(name: &str) -> String {
    let path = repo().join("docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `NAME` and `"Value"` of a line `pub const NAME: &str = "Value";` (any visibility).
fn str_const(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().split_once("const ")?.1;
    let (name, rest) = rest.split_once(": &str = \"")?;
    let value = rest.strip_suffix("\";")?;
    Some((name, value))
}

/// Every reason the operator can write into a condition or an Event: the shared
/// `api::common::reasons` module plus each controller's `*REASON*` constants.
fn reasons_in_code() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&repo().join("crates/operator/src"), &mut files);
    let mut reasons = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let mut in_reasons_module = false;
        for line in text.lines() {
            if line.starts_with("pub mod reasons {") {
                in_reasons_module = true;
                continue;
            }
            if in_reasons_module && line.starts_with('}') {
                in_reasons_module = false;
            }
            // Unit tests are at the end of each file; their constants are not emitted.
            if line.starts_with("#[cfg(test)]") {
                break;
            }
            if let Some((name, value)) = str_const(line)
                && (in_reasons_module || name.contains("REASON"))
            {
                reasons.insert(value.to_string());
            }
        }
    }
    reasons
}

#[test]
fn reasons_are_found_by_the_scan() {
    // Guards the scan itself: a refactor that moves the constants must not silently empty it.
    let reasons = reasons_in_code();
    for known in [
        "SyncFailed",
        "TargetNotOwned",
        "InvalidObject",
        "ReleaseStuck",
        "KubeconfigRotated",
    ] {
        assert!(reasons.contains(known), "{known} not found in {reasons:?}");
    }
}

#[test]
fn every_reason_is_documented() {
    let docs = doc("resources.md") + &doc("operations.md");
    let missing: Vec<String> = reasons_in_code()
        .into_iter()
        .filter(|r| !docs.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "reasons the code can emit but docs/resources.md and docs/operations.md do not name: {missing:?}"
    );
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
