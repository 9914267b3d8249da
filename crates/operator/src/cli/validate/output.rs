//! What `validate` found, and the three ways it prints it: lines for people and editors
//! (`text`), one JSON document for scripts (`json`), GitHub Actions workflow commands that
//! annotate the pull request (`github`).

use serde::Serialize;

use crate::cli::manifests::Position;

/// How findings are printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `FILE:LINE:COL: KIND/NAME: FIELD: message`, problems on stdout, warnings on stderr.
    #[default]
    Text,
    /// One JSON document on stdout: every finding and the summary.
    Json,
    /// GitHub Actions annotations (`::error file=…,line=…,col=…::…`) on stdout.
    Github,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Severity {
    /// The API server or the admission webhook would refuse the object, or the operator could
    /// not act on it.
    Error,
    /// Accepted, but worth a look.
    Warning,
}

/// The object a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Subject {
    /// `kind` as written (`<no kind>` when missing).
    pub(crate) kind: String,
    /// `metadata.namespace`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) namespace: Option<String>,
    /// `metadata.name` (or `generateName`), `<unnamed>` when missing.
    pub(crate) name: String,
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// One problem or warning, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    /// Error or warning.
    pub(crate) severity: Severity,
    /// The input, as given on the command line (`-` for stdin).
    pub(crate) file: String,
    /// 1-based line in the input.
    pub(crate) line: u32,
    /// 1-based column in the input.
    pub(crate) column: u32,
    /// The object, unless the document could not be read as one.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) subject: Option<Subject>,
    /// The field path (`spec.ttl`), when the finding is about one field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) field: Option<String>,
    /// What is wrong, without the field path.
    pub(crate) message: String,
}

impl Finding {
    pub(crate) fn new(
        severity: Severity,
        file: &str,
        at: Position,
        subject: Option<&Subject>,
        field: Option<String>,
        message: String,
    ) -> Self {
        Self {
            severity,
            file: file.to_string(),
            line: at.line,
            column: at.column,
            subject: subject.cloned(),
            field,
            message,
        }
    }

    /// The finding after its position: `KIND/NAME: FIELD: message`, with `warning: ` before
    /// the message of a warning.
    fn text_body(&self) -> String {
        let mut out = String::new();
        if let Some(subject) = &self.subject {
            out.push_str(&format!("{subject}: "));
        }
        if self.severity == Severity::Warning {
            out.push_str("warning: ");
        }
        if let Some(field) = &self.field {
            out.push_str(&format!("{field}: "));
        }
        out.push_str(&self.message);
        out
    }

    /// `FILE:LINE:COL: KIND/NAME: FIELD: message`.
    pub(crate) fn text(&self) -> String {
        format!(
            "{}:{}:{}: {}",
            self.file,
            self.line,
            self.column,
            self.text_body()
        )
    }

    /// A GitHub Actions workflow command that annotates the line.
    pub(crate) fn github(&self) -> String {
        let command = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut properties = format!(
            "file={},line={},col={}",
            github_property(&self.file),
            self.line,
            self.column
        );
        if let Some(subject) = &self.subject {
            properties.push_str(&format!(",title={}", github_property(&subject.to_string())));
        }
        let mut message = String::new();
        if let Some(field) = &self.field {
            message.push_str(&format!("{field}: "));
        }
        message.push_str(&self.message);
        format!("::{command} {properties}::{}", github_data(&message))
    }
}

/// Escapes a workflow command's message as the Actions runner unescapes it.
fn github_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a workflow command's property value (`,` and `:` end it otherwise).
fn github_property(text: &str) -> String {
    github_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// Everything one run found.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Report {
    /// Problems and warnings, in input order, then by position.
    pub(crate) findings: Vec<Finding>,
    /// Inputs read.
    pub(crate) files: usize,
    /// Objects of this API group that were validated.
    pub(crate) checked: usize,
    /// Objects of other API groups that were skipped.
    pub(crate) skipped: usize,
}

impl Report {
    pub(crate) fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
    }

    pub(crate) fn warnings(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
    }

    /// The one-line summary printed on stderr.
    pub(crate) fn summary(&self) -> String {
        format!(
            "validated {} object(s) in {} file(s), skipped {} other document(s): {} problem(s), {} warning(s)",
            self.checked,
            self.files,
            self.skipped,
            self.errors().count(),
            self.warnings().count()
        )
    }

    /// What goes to stdout and to stderr in `format`.
    pub(crate) fn render(&self, format: Format) -> (String, String) {
        let mut stdout = String::new();
        let mut stderr = String::new();
        match format {
            Format::Text => {
                for finding in self.errors() {
                    stdout.push_str(&finding.text());
                    stdout.push('\n');
                }
                for finding in self.warnings() {
                    stderr.push_str(&finding.text());
                    stderr.push('\n');
                }
            }
            Format::Json => {
                let document = serde_json::json!({
                    "findings": self.findings,
                    "summary": {
                        "files": self.files,
                        "objects": self.checked,
                        "skipped": self.skipped,
                        "errors": self.errors().count(),
                        "warnings": self.warnings().count(),
                    },
                });
                stdout.push_str(&format!("{document:#}\n"));
            }
            Format::Github => {
                for finding in &self.findings {
                    stdout.push_str(&finding.github());
                    stdout.push('\n');
                }
            }
        }
        stderr.push_str(&self.summary());
        stderr.push('\n');
        (stdout, stderr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(severity: Severity) -> Finding {
        Finding::new(
            severity,
            "clusters/a,b.yaml",
            Position { line: 7, column: 3 },
            Some(&Subject {
                kind: "OmniCluster".into(),
                namespace: Some("omni".into()),
                name: "edge".into(),
            }),
            Some("spec.syncInterval".into()),
            "Invalid value: \"1s\": 100% wrong\nreally".into(),
        )
    }

    #[test]
    fn text_lines_read_like_compiler_output() {
        assert_eq!(
            finding(Severity::Error).text(),
            "clusters/a,b.yaml:7:3: OmniCluster/edge: spec.syncInterval: Invalid value: \"1s\": 100% wrong\nreally"
        );
        assert_eq!(
            finding(Severity::Warning).text(),
            "clusters/a,b.yaml:7:3: OmniCluster/edge: warning: spec.syncInterval: Invalid value: \"1s\": 100% wrong\nreally"
        );
    }

    #[test]
    fn github_annotations_escape_as_the_runner_expects() {
        assert_eq!(
            finding(Severity::Error).github(),
            "::error file=clusters/a%2Cb.yaml,line=7,col=3,title=OmniCluster/edge::spec.syncInterval: Invalid value: \"1s\": 100%25 wrong%0Areally"
        );
        assert!(
            finding(Severity::Warning)
                .github()
                .starts_with("::warning file=")
        );
    }

    #[test]
    fn json_carries_every_finding_and_the_summary() {
        let report = Report {
            findings: vec![finding(Severity::Error), finding(Severity::Warning)],
            files: 1,
            checked: 1,
            skipped: 0,
        };
        let (stdout, stderr) = report.render(Format::Json);
        let parsed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(parsed["summary"]["errors"], 1);
        assert_eq!(parsed["summary"]["warnings"], 1);
        assert_eq!(parsed["findings"][0]["severity"], "error");
        assert_eq!(parsed["findings"][0]["line"], 7);
        assert_eq!(parsed["findings"][0]["kind"], "OmniCluster");
        assert_eq!(parsed["findings"][0]["namespace"], "omni");
        assert_eq!(parsed["findings"][0]["field"], "spec.syncInterval");
        assert_eq!(parsed["findings"][1]["severity"], "warning");
        assert!(stderr.starts_with("validated 1 object(s) in 1 file(s)"));
    }
}
