//! `omni-operator validate -f FILE...`: checks manifests offline with the rules the API server
//! and the admission webhook apply, and what the operator would refuse once the objects are
//! together, so problems surface in CI before anything reaches a cluster.
//!
//! Each object is checked, all in one pass: its `metadata` as the API server checks every
//! object (name, namespace, labels, annotations), its CRD schema (types, required fields,
//! enums, patterns, bounds, unknown fields, CEL rules), and the admission rules. A field the
//! schema already refuses is not reported again by the admission rules, so one mistake is
//! one line. Then the objects are checked together (see `cross`). `kind: List` documents are
//! expanded; documents of other API groups are skipped.
//!
//! Output contract (relied on by scripts, see `output`): with `--format text`, one line per
//! problem on stdout, `FILE:LINE:COL: KIND/NAME: FIELD: message`, warnings on stderr as
//! `FILE:LINE:COL: KIND/NAME: warning: message`; a one-line summary on stderr in every format;
//! exit status 1 when any problem was found, else 0.

mod cross;
mod metadata;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

pub use output::Format;
use output::{Finding, Report, Severity, Subject};

use crate::api::validation::FieldError;
use crate::api::{self, ValidateError};
use crate::cli::manifests::{self, Entry, Input, Manifest};

/// Arguments of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file to check (multi-document YAML), or a directory whose `.yaml`/`.yml`/`.json`
    /// files are all checked; repeat for several, `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// How to print what was found: `text` (`FILE:LINE:COL: …` lines), `json` (one document
    /// for scripts) or `github` (GitHub Actions annotations).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// The manifests are not everything that will be applied: a child whose OmniCluster, or a
    /// cluster whose OmniControlPlane, is not among them is not a problem.
    #[arg(long)]
    pub partial: bool,
}

/// Runs the subcommand.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let inputs = manifests::read_inputs(&args.files)?;
    let report = check_inputs(&inputs, args.partial);
    let (stdout, stderr) = report.render(args.format);
    print!("{stdout}");
    eprint!("{stderr}");
    Ok(if report.errors().next().is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Splits a YAML stream into its documents, dropping ones that hold only comments or
/// whitespace. Document markers are `---` lines at column 0 (optionally followed by content or
/// a comment); `...` end markers are dropped.
pub fn split_documents(text: &str) -> Vec<&str> {
    manifests::split_documents(text)
}

/// Checks every object of `inputs`, alone and together.
pub(crate) fn check_inputs(inputs: &[Input], partial: bool) -> Report {
    let mut report = Report {
        files: inputs.len(),
        ..Report::default()
    };
    let parsed: Vec<Vec<Entry>> = inputs
        .iter()
        .map(|input| manifests::entries(&input.text))
        .collect();
    let mut checked = Vec::new();
    for (input, entries) in inputs.iter().zip(&parsed) {
        for entry in entries {
            match entry {
                Entry::Unreadable { position, message } => report.findings.push(Finding::new(
                    Severity::Error,
                    &input.label,
                    *position,
                    None,
                    None,
                    message.clone(),
                )),
                Entry::NotAnObject { position } => report.findings.push(Finding::new(
                    Severity::Error,
                    &input.label,
                    *position,
                    None,
                    None,
                    manifests::NOT_AN_OBJECT.to_string(),
                )),
                Entry::Object(manifest) => {
                    if let Some(object) = check_object(&input.label, manifest, &mut report) {
                        checked.push(object);
                    }
                }
            }
        }
    }
    report.findings.extend(cross::check(&checked, partial));
    // Input order, then top to bottom: what editors and CI annotators expect.
    let order: Vec<&str> = inputs.iter().map(|i| i.label.as_str()).collect();
    report
        .findings
        .sort_by_key(|f| (order.iter().position(|l| *l == f.file), f.line, f.column));
    report
}

/// Checks one object alone, adding its findings to `report`; returns it for the cross-object
/// checks when it is one of our kinds.
fn check_object<'a>(
    file: &'a str,
    manifest: &'a Manifest,
    report: &mut Report,
) -> Option<cross::Checked<'a>> {
    let value = &manifest.value;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let api_version = text(&value["apiVersion"]);
    let kind = text(&value["kind"]);
    let (group, version) = api_version
        .split_once('/')
        .unwrap_or(("", api_version.as_str()));
    if group != api::GROUP {
        report.skipped += 1;
        return None;
    }
    report.checked += 1;
    let meta = &value["metadata"];
    let subject = Subject {
        kind: if kind.is_empty() {
            "<no kind>".into()
        } else {
            kind.clone()
        },
        namespace: meta["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(String::from),
        name: [&meta["name"], &meta["generateName"]]
            .into_iter()
            .filter_map(Value::as_str)
            .find(|n| !n.is_empty())
            .unwrap_or("<unnamed>")
            .to_string(),
    };
    let positions = &manifest.positions;
    let mut findings = Vec::new();
    let mut error = |at: &str, e: &FieldError| {
        findings.push(Finding::new(
            Severity::Error,
            file,
            positions.of(at),
            Some(&subject),
            Some(e.path.clone()),
            e.body(),
        ));
    };
    let known = version == api::VERSION && api::KINDS.contains(&kind.as_str());
    if version != api::VERSION {
        error(
            "apiVersion",
            &FieldError::invalid(
                "apiVersion",
                &api_version,
                format!(
                    "unsupported version {version:?}; this operator serves {}/{}",
                    api::GROUP,
                    api::VERSION
                ),
            ),
        );
    } else if !api::KINDS.contains(&kind.as_str()) {
        error(
            "kind",
            &FieldError::not_supported("kind", &kind, &api::KINDS),
        );
    } else {
        for (e, at) in metadata::check(value) {
            error(&at, &e);
        }
        let (errors, warnings) = spec_problems(&kind, value);
        for e in &errors {
            error(&e.path, e);
        }
        for warning in warnings {
            let (field, message) = split_field(&warning);
            findings.push(Finding::new(
                Severity::Warning,
                file,
                field.map_or(positions.root(), |f| positions.of(f)),
                Some(&subject),
                field.map(String::from),
                message.to_string(),
            ));
        }
    }
    let clean = findings.iter().all(|f| f.severity != Severity::Error);
    report.findings.extend(findings);
    // What is not one of our kinds at our version has no relations to check.
    known.then_some(cross::Checked {
        file,
        manifest,
        subject,
        clean,
    })
}

/// The problems of `object`'s spec under its CRD schema and the admission rules, one per
/// field, and the admission warnings.
fn spec_problems(kind: &str, object: &Value) -> (Vec<FieldError>, Vec<String>) {
    let mut errors = api::schema_check::check(kind, object);
    // The admission rules run on a copy the schema's shapes fit, so what they say is not
    // held back until the schema problems are fixed.
    let (decodable, stand_ins) = api::schema_check::decodable(kind, object);
    let under = |path: &str, root: &str| {
        path == root
            || path
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with(['.', '[']))
    };
    match api::validate_dynamic(kind, &decodable, None) {
        Ok(validation) => {
            let admission: Vec<FieldError> = validation
                .errors
                .into_iter()
                // Said about a stand-in, not about the user's input.
                .filter(|e| !stand_ins.iter().any(|s| under(&e.path, s)))
                // One problem per field: where the schema already refuses the field, the
                // admission rule is the same rule in other words (or about a value that will
                // change anyway).
                .filter(|e| !errors.iter().any(|s| s.path == e.path))
                .collect();
            let mut seen = Vec::new();
            for e in admission {
                if !seen.contains(&e) {
                    seen.push(e.clone());
                    errors.push(e);
                }
            }
            (errors, validation.warnings)
        }
        // The schema errors already say why the object does not decode.
        Err(ValidateError::Decode { .. }) if !errors.is_empty() => (errors, Vec::new()),
        Err(ValidateError::Decode { message, .. }) => {
            let (field, message) = split_field(&message);
            let path = field.unwrap_or("spec").to_string();
            errors.push(FieldError::invalid(
                path,
                "",
                format!("cannot decode: {message}"),
            ));
            (errors, Vec::new())
        }
        Err(ValidateError::UnknownKind(_)) => (errors, Vec::new()),
    }
}

/// `spec.x[1].y: message` → (`spec.x[1].y`, `message`); a text that does not start with a
/// field path of an object has no field.
fn split_field(text: &str) -> (Option<&str>, &str) {
    match text.split_once(": ") {
        Some((field, rest))
            if ["spec.", "metadata."].iter().any(|p| field.starts_with(p))
                && !field.contains(' ') =>
        {
            (Some(field), rest)
        }
        _ => (None, text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Report {
        check_inputs(
            &[Input {
                label: "f.yaml".into(),
                text: text.into(),
            }],
            false,
        )
    }

    fn lines(report: &Report) -> Vec<String> {
        report.findings.iter().map(Finding::text).collect()
    }

    #[test]
    fn skips_other_groups_and_flags_unknown_kinds() {
        let report = check(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\napiVersion: omni.texashpc.com/v1alpha1\nkind: OmniThing\nmetadata: {name: x}\nspec: {}\n",
        );
        assert_eq!(report.skipped, 1);
        assert_eq!(report.checked, 1);
        assert_eq!(report.findings.len(), 1);
        assert!(
            lines(&report)[0]
                .starts_with("f.yaml:6:1: OmniThing/x: kind: Unsupported value: \"OmniThing\": supported values: \"OmniConnection\""),
            "{:?}",
            lines(&report)
        );
    }

    #[test]
    fn other_versions_of_our_group_are_problems() {
        let report =
            check("apiVersion: omni.texashpc.com/v1\nkind: OmniCluster\nmetadata: {name: c}\n");
        assert_eq!(report.checked, 1);
        assert_eq!(
            lines(&report),
            vec![
                "f.yaml:1:1: OmniCluster/c: apiVersion: Invalid value: \"omni.texashpc.com/v1\": unsupported version \"v1\"; this operator serves omni.texashpc.com/v1alpha1"
            ]
        );
    }

    #[test]
    fn yaml_syntax_errors_have_their_position() {
        let report = check("a: 1\n---\nkey: [unclosed\n");
        assert_eq!(
            report.skipped, 1,
            "a mapping without our apiVersion is someone else's"
        );
        assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
        assert!(
            lines(&report)[0].starts_with("f.yaml:3:"),
            "{:?}",
            lines(&report)
        );
        assert!(lines(&report)[0].contains(": invalid YAML: "));
        assert_eq!(
            lines(&check("- 1\n- 2\n")),
            vec!["f.yaml:1:1: document is not a Kubernetes object (expected a mapping)"]
        );
    }

    #[test]
    fn the_cel_rule_and_the_admission_rule_say_it_once() {
        let report = check(
            "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniCluster\nmetadata: {name: c}\nspec:\n  connectionRef: {name: omni}\n  kubernetes: {version: v1.35.0}\n  talos: {version: v1.13.2}\n  deletePolicy:\n    orphan: true\n    destroyMachines: true\n---\napiVersion: omni.texashpc.com/v1alpha1\nkind: OmniControlPlane\nmetadata: {name: c-cp}\nspec:\n  clusterRef: {name: c}\n  machines: [11111111-1111-1111-1111-111111111111]\n",
        );
        let found = lines(&report);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("f.yaml:8:3: OmniCluster/c: spec.deletePolicy: Invalid value: "),
            "{found:?}"
        );
        assert!(found[0].ends_with("orphan and destroyMachines cannot both be true"));
    }

    const CLUSTER: &str = "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniCluster\nmetadata: {name: edge}\nspec:\n  connectionRef: {name: omni}\n  kubernetes: {version: v1.35.0}\n  talos: {version: v1.13.2}\n";
    const CONTROL_PLANE: &str = "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniControlPlane\nmetadata: {name: edge-cp}\nspec:\n  clusterRef: {name: edge}\n  machines: [11111111-1111-1111-1111-111111111111]\n";

    #[test]
    fn a_complete_cluster_passes() {
        let report = check(&format!("{CLUSTER}---\n{CONTROL_PLANE}"));
        assert!(report.findings.is_empty(), "{:?}", lines(&report));
        assert_eq!(report.checked, 2);
    }

    #[test]
    fn schema_and_admission_problems_come_in_one_run() {
        // The enum value breaks decoding; the admission rule on ttl is still reported.
        let text = "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniKubeconfigExport\nmetadata: {name: kc}\nspec:\n  clusterRef: {name: edge}\n  targetSecretRef: {name: kc}\n  serviceAccount: {user: ci, groups: [ci]}\n  ttl: 1d\n  deletionPolicy: Keep\n";
        let report = check_inputs(
            &[Input {
                label: "f.yaml".into(),
                text: text.into(),
            }],
            true,
        );
        assert_eq!(
            lines(&report),
            vec![
                "f.yaml:8:3: OmniKubeconfigExport/kc: spec.ttl: Invalid value: \"1d\": ttl must be a duration such as 24h, 1h30m or 90s",
                "f.yaml:9:3: OmniKubeconfigExport/kc: spec.deletionPolicy: Unsupported value: \"Keep\": supported values: \"Delete\", \"Orphan\"",
            ]
        );
    }

    #[test]
    fn a_cluster_without_a_control_plane_is_a_problem_unless_partial() {
        let found = lines(&check(CLUSTER));
        assert_eq!(
            found,
            vec![
                "f.yaml:1:1: OmniCluster/edge: expected exactly one OmniControlPlane referencing default/edge, found 0: add an OmniControlPlane with spec.clusterRef.name: edge (pass --partial if it is defined elsewhere)"
            ]
        );
        let partial = check_inputs(
            &[Input {
                label: "f.yaml".into(),
                text: CLUSTER.into(),
            }],
            true,
        );
        assert!(partial.findings.is_empty());
        let two = check(&format!(
            "{CLUSTER}---\n{CONTROL_PLANE}---\n{}",
            CONTROL_PLANE.replace("edge-cp", "edge-cp2")
        ));
        assert_eq!(
            lines(&two),
            vec![
                "f.yaml:1:1: OmniCluster/edge: expected exactly one OmniControlPlane referencing default/edge, found 2"
            ]
        );
    }

    #[test]
    fn children_of_a_missing_cluster_and_duplicates_are_problems() {
        let text = format!(
            "{CONTROL_PLANE}---\n{}---\n{CLUSTER}---\n{CONTROL_PLANE}",
            CONTROL_PLANE
                .replace("{name: edge}", "{name: core}")
                .replace("edge-cp", "core-cp")
        );
        let found = lines(&check(&text));
        assert_eq!(
            found,
            vec![
                "f.yaml:12:16: OmniControlPlane/core-cp: spec.clusterRef.name: Invalid value: \"core\": no OmniCluster \"core\" in namespace default among the given manifests (pass --partial if it is defined elsewhere)",
                "f.yaml:25:12: OmniControlPlane/edge-cp: metadata.name: Duplicate value: \"edge-cp\": OmniControlPlane default/edge-cp is already defined at f.yaml:3:12; the later one would replace it",
            ],
        );
    }

    const NAMESPACE: &str = "{apiVersion: v1, kind: Namespace, metadata: {name: x}}";

    #[test]
    fn render_problems_are_reported_on_the_cluster() {
        let cluster = format!(
            "{CLUSTER}  kubernetes:\n    version: v1.35.0\n    manifests:\n      - {{name: a, inline: [{NAMESPACE}]}}\n      - {{name: a, inline: [{NAMESPACE}]}}\n"
        )
        .replace("  kubernetes: {version: v1.35.0}\n", "");
        let found = lines(&check(&format!("{cluster}---\n{CONTROL_PLANE}")));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(
                "f.yaml:1:1: OmniCluster/edge: duplicate Kubernetes manifest name \"a\""
            ),
            "{found:?}"
        );
    }

    #[test]
    fn child_kinds_are_the_kinds_with_a_cluster_ref() {
        for crd in api::crds() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            let has_ref =
                !schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["clusterRef"]
                    .is_null();
            let kind = crd.spec.names.kind.as_str();
            assert_eq!(cross::child_kinds().contains(&kind), has_ref, "{kind}");
        }
    }

    #[test]
    fn split_field_only_takes_object_paths() {
        assert_eq!(split_field("spec.a[1]: bad"), (Some("spec.a[1]"), "bad"));
        assert_eq!(split_field("insecure: bad"), (None, "insecure: bad"));
        assert_eq!(split_field("spec.a is bad: x"), (None, "spec.a is bad: x"));
    }
}
