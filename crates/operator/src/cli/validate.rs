//! `omni-operator validate -f FILE...`: checks manifests offline with the same rules the
//! admission webhook applies, so problems surface in CI before anything reaches a cluster.
//!
//! Each object is checked against its CRD schema (what the API server enforces: types,
//! required fields, enums, patterns, bounds, unknown fields, CEL rules) and then with the
//! admission rules.
//!
//! Output contract (relied on by scripts): one line per problem on stdout,
//! `FILE:DOC KIND/NAME: FIELD: message` (DOC is the 1-based index among the file's non-empty
//! documents); warnings on stderr as `FILE:DOC KIND/NAME: warning: message`; a one-line summary
//! on stderr; exit status 1 when any problem was found, else 0. Documents of other API groups
//! are skipped.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::api::{self, ValidateError};

/// Arguments of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file to check (multi-document YAML), or a directory whose `.yaml`/`.yml`/`.json`
    /// files are all checked; repeat for several, `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

/// What checking a set of files found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// Problem lines (`FILE:DOC KIND/NAME: FIELD: message`).
    pub problems: Vec<String>,
    /// Warning lines (`FILE:DOC KIND/NAME: warning: message`).
    pub warnings: Vec<String>,
    /// Objects of this API group that were validated.
    pub checked: usize,
    /// Documents of other API groups that were skipped.
    pub skipped: usize,
}

impl Report {
    /// The one-line summary printed on stderr.
    pub(crate) fn summary(&self, files: usize) -> String {
        format!(
            "validated {} object(s) in {} file(s), skipped {} other document(s): {} problem(s), {} warning(s)",
            self.checked,
            files,
            self.skipped,
            self.problems.len(),
            self.warnings.len()
        )
    }
}

/// Runs the subcommand.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut report = Report::default();
    let mut stdin_used = false;
    let mut files = 0;
    for path in &args.files {
        if path.as_os_str() == "-" {
            anyhow::ensure!(!stdin_used, "stdin (-) can be given only once");
            stdin_used = true;
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("read stdin")?;
            check_text("-", &text, &mut report);
            files += 1;
            continue;
        }
        let paths = if path.is_dir() {
            manifest_files(path)?
        } else {
            vec![path.clone()]
        };
        for file in paths {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read {}", file.display()))?;
            check_text(&file.display().to_string(), &text, &mut report);
            files += 1;
        }
    }
    for line in &report.problems {
        println!("{line}");
    }
    for line in &report.warnings {
        eprintln!("{line}");
    }
    eprintln!("{}", report.summary(files));
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The `.yaml`, `.yml` and `.json` files directly inside `dir`, sorted by name (the order
/// `kubectl apply -f DIR` uses).
fn manifest_files(dir: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("read directory {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("read directory {}", dir.display()))?
            .path();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if matches!(ext, "yaml" | "yml" | "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Checks every document of one file's text, adding to `report`. `label` names the file in
/// output lines.
pub(crate) fn check_text(label: &str, text: &str, report: &mut Report) {
    for (index, doc) in split_documents(text).into_iter().enumerate() {
        let at = format!("{label}:{}", index + 1);
        let value: serde_json::Value = match serde_saphyr::from_str(doc) {
            Ok(value) => value,
            Err(e) => {
                report.problems.push(format!(
                    "{at}: invalid YAML: {}",
                    first_line(&e.to_string())
                ));
                continue;
            }
        };
        check_document(&at, &value, report);
    }
}

fn check_document(at: &str, value: &serde_json::Value, report: &mut Report) {
    let Some(object) = value.as_object() else {
        report.problems.push(format!(
            "{at}: document is not a Kubernetes object (expected a mapping)"
        ));
        return;
    };
    let api_version = object
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let kind = object
        .get("kind")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if group != api::GROUP {
        report.skipped += 1;
        return;
    }
    let meta = object.get("metadata");
    let name = meta
        .and_then(|m| m.get("name").or_else(|| m.get("generateName")))
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .unwrap_or("<unnamed>");
    let subject = format!(
        "{at} {}/{name}",
        if kind.is_empty() { "<no kind>" } else { kind }
    );
    report.checked += 1;
    if version != api::VERSION {
        report.problems.push(format!(
            "{subject}: apiVersion: unsupported version {version:?}; this operator serves {}/{}",
            api::GROUP,
            api::VERSION
        ));
        return;
    }
    // What the API server checks from the CRD schema comes first, then the webhook rules.
    let mut problems: Vec<String> = api::schema_check::check(kind, value)
        .iter()
        .map(|e| format!("{subject}: {e}"))
        .collect();
    let schema_failed = !problems.is_empty();
    match api::validate_dynamic(kind, value, None) {
        Ok(validation) => {
            problems.extend(validation.errors.iter().map(|e| format!("{subject}: {e}")));
            report.warnings.extend(
                validation
                    .warnings
                    .iter()
                    .map(|w| format!("{subject}: warning: {w}")),
            );
        }
        Err(ValidateError::UnknownKind(_)) => problems.push(format!(
            "{subject}: kind: unknown kind {kind:?} in {}; expected one of {}",
            api::GROUP,
            api::KINDS.join(", ")
        )),
        // The schema errors already say why the object does not decode.
        Err(ValidateError::Decode { .. }) if schema_failed => {}
        Err(ValidateError::Decode { message, .. }) => problems.push(format!(
            "{subject}: cannot decode: {}",
            first_line(&message)
        )),
    }
    report.problems.extend(problems);
}

/// Splits a YAML stream into its documents, dropping ones that hold only comments or
/// whitespace. Document markers are `---` lines at column 0 (optionally followed by content or
/// a comment); `...` end markers are dropped.
pub fn split_documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_marker = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        if is_marker {
            docs.push(&text[start..offset]);
            // Keep content that follows the marker on the same line (`--- !tag` or `--- {a: 1}`).
            start = if bare == "---" {
                offset + line.len()
            } else {
                offset + 3
            };
        } else if bare == "..." {
            docs.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&text[start..]);
    docs.into_iter().filter(|doc| has_content(doc)).collect()
}

fn has_content(doc: &str) -> bool {
    doc.lines().any(|line| {
        let t = line.trim();
        !t.is_empty() && !t.starts_with('#') && !t.starts_with('%')
    })
}

fn first_line(message: &str) -> &str {
    message
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(message)
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_and_drops_empty_ones() {
        let text = "---\n# only a comment\n---\na: 1\n---\n\n---\nb: 2\n...\n";
        assert_eq!(split_documents(text), vec!["a: 1\n", "b: 2\n"]);
        assert_eq!(split_documents("a: 1"), vec!["a: 1"]);
        assert_eq!(split_documents("--- {a: 1}\n"), vec![" {a: 1}\n"]);
        // A marker must start the line; indented dashes belong to a block scalar.
        assert_eq!(split_documents("a: |\n  ---\n  x\n").len(), 1);
    }

    #[test]
    fn skips_other_groups_and_flags_unknown_kinds() {
        let mut report = Report::default();
        check_text(
            "f.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\napiVersion: omni.texashpc.com/v1alpha1\nkind: OmniThing\nmetadata: {name: x}\nspec: {}\n",
            &mut report,
        );
        assert_eq!(report.skipped, 1);
        assert_eq!(report.checked, 1);
        assert_eq!(report.problems.len(), 1);
        assert!(
            report.problems[0]
                .starts_with("f.yaml:2 OmniThing/x: kind: unknown kind \"OmniThing\"")
        );
    }

    #[test]
    fn other_versions_of_our_group_are_problems() {
        let mut report = Report::default();
        let text = "apiVersion: omni.texashpc.com/v1\nkind: OmniCluster\nmetadata: {name: c}\n";
        check_text("v.yaml", text, &mut report);
        assert_eq!(report.checked, 1);
        assert_eq!(
            report.problems,
            vec![
                "v.yaml:1 OmniCluster/c: apiVersion: unsupported version \"v1\"; this operator serves omni.texashpc.com/v1alpha1"
            ]
        );
    }

    #[test]
    fn yaml_syntax_errors_name_file_and_document() {
        let mut report = Report::default();
        check_text("bad.yaml", "a: 1\n---\nkey: [unclosed\n", &mut report);
        assert_eq!(
            report.skipped, 1,
            "a mapping without our apiVersion is someone else's"
        );
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(
            report.problems[0].starts_with("bad.yaml:2: invalid YAML: "),
            "{:?}",
            report.problems
        );
        let mut report = Report::default();
        check_text(
            "list.yaml",
            "- 1
- 2
",
            &mut report,
        );
        assert_eq!(
            report.problems,
            vec!["list.yaml:1: document is not a Kubernetes object (expected a mapping)"]
        );
    }
}
