//! Parsing of helm's JSON output (`status -o json`, `install|upgrade -o json`, `history -o json`).

use std::fmt;

use serde::{Deserialize, Deserializer};

/// A release's (or one revision's) status as helm reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum HelmStatus {
    /// `deployed`: the current revision, in place.
    Deployed,
    /// `failed`: the last operation on it failed.
    Failed,
    /// `pending-install`: an install is running, or died while running.
    PendingInstall,
    /// `pending-upgrade`: an upgrade is running, or died while running.
    PendingUpgrade,
    /// `pending-rollback`: a rollback is running, or died while running.
    PendingRollback,
    /// `uninstalling`: an uninstall is running.
    Uninstalling,
    /// `uninstalled`: uninstalled with its history kept.
    Uninstalled,
    /// `superseded`: an earlier revision, replaced by a later one.
    Superseded,
    /// `unknown`, as helm itself may say.
    #[default]
    Unknown,
    /// A status this operator does not know (a newer helm), kept as written.
    Other(String),
}

impl HelmStatus {
    /// The status helm printed as `text`.
    pub fn parse(text: &str) -> Self {
        match text {
            "deployed" => Self::Deployed,
            "failed" => Self::Failed,
            "pending-install" => Self::PendingInstall,
            "pending-upgrade" => Self::PendingUpgrade,
            "pending-rollback" => Self::PendingRollback,
            "uninstalling" => Self::Uninstalling,
            "uninstalled" => Self::Uninstalled,
            "superseded" => Self::Superseded,
            "unknown" => Self::Unknown,
            other => Self::Other(other.to_string()),
        }
    }

    /// The status as helm writes it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Deployed => "deployed",
            Self::Failed => "failed",
            Self::PendingInstall => "pending-install",
            Self::PendingUpgrade => "pending-upgrade",
            Self::PendingRollback => "pending-rollback",
            Self::Uninstalling => "uninstalling",
            Self::Uninstalled => "uninstalled",
            Self::Superseded => "superseded",
            Self::Unknown => "unknown",
            Self::Other(text) => text,
        }
    }

    /// Whether helm holds the release in one of its `pending-*` states, in which it refuses
    /// new operations until it is rolled back or the lock is otherwise cleared.
    pub fn is_pending(&self) -> bool {
        matches!(
            self,
            Self::PendingInstall | Self::PendingUpgrade | Self::PendingRollback
        )
    }
}

impl fmt::Display for HelmStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for HelmStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::parse(&String::deserialize(deserializer)?))
    }
}

/// The state of a release as helm reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseInfo {
    /// Release name.
    pub name: String,
    /// Release namespace.
    pub namespace: String,
    /// Revision number (1 for a fresh install).
    pub revision: i64,
    /// Helm's status of the release.
    pub status: HelmStatus,
    /// Chart name.
    pub chart: String,
    /// Chart version.
    pub(crate) chart_version: String,
    /// Helm's description of the last operation (e.g. the failure reason).
    pub description: String,
    /// When this revision was deployed (RFC 3339, as helm prints it).
    pub last_deployed: Option<String>,
}

#[derive(Deserialize)]
struct RawRelease {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    version: i64,
    #[serde(default)]
    info: RawInfo,
    #[serde(default)]
    chart: RawChart,
}

#[derive(Default, Deserialize)]
struct RawInfo {
    #[serde(default)]
    status: HelmStatus,
    #[serde(default)]
    description: String,
    #[serde(default)]
    last_deployed: Option<String>,
}

#[derive(Default, Deserialize)]
struct RawChart {
    #[serde(default)]
    metadata: RawChartMetadata,
}

#[derive(Default, Deserialize)]
struct RawChartMetadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

/// Parses a release object (`helm status -o json`, or the output of install/upgrade with
/// `-o json`). Helm may print warnings before the JSON on stdout; parsing starts at the first `{`.
pub fn parse_release(stdout: &str) -> Result<ReleaseInfo, serde_json::Error> {
    let json = stdout.find('{').map_or(stdout, |start| &stdout[start..]);
    let raw: RawRelease = serde_json::from_str(json.trim())?;
    Ok(ReleaseInfo {
        name: raw.name,
        namespace: raw.namespace,
        revision: raw.version,
        status: raw.info.status,
        chart: raw.chart.metadata.name,
        chart_version: raw.chart.metadata.version,
        description: raw.info.description,
        last_deployed: raw.info.last_deployed,
    })
}

/// One test hook of a release and the phase of its last run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestHook {
    /// The hook's name (its Pod or Job).
    pub name: String,
    /// `Succeeded`, `Failed`, `Running`, or `Unknown` when it never ran.
    pub phase: String,
}

#[derive(Deserialize)]
struct RawHooks {
    #[serde(default)]
    hooks: Vec<RawHook>,
}

#[derive(Deserialize)]
struct RawHook {
    #[serde(default)]
    name: String,
    #[serde(default)]
    events: Vec<String>,
    #[serde(default)]
    last_run: RawRun,
}

#[derive(Default, Deserialize)]
struct RawRun {
    #[serde(default)]
    phase: String,
}

/// The test hooks of a release (`helm status -o json`, hooks whose events include `test`).
pub fn parse_test_hooks(stdout: &str) -> Result<Vec<TestHook>, serde_json::Error> {
    let json = stdout.find('{').map_or(stdout, |start| &stdout[start..]);
    let raw: RawHooks = serde_json::from_str(json.trim())?;
    Ok(raw
        .hooks
        .into_iter()
        .filter(|h| h.events.iter().any(|e| e == "test"))
        .map(|h| TestHook {
            name: h.name,
            phase: if h.last_run.phase.is_empty() {
                "Unknown".to_string()
            } else {
                h.last_run.phase
            },
        })
        .collect())
}

/// One line of `helm history -o json`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct HistoryEntry {
    /// Revision number.
    pub revision: i64,
    /// Status of that revision.
    #[serde(default)]
    pub status: HelmStatus,
    /// `<chart>-<version>`.
    #[serde(default)]
    pub chart: String,
    /// What helm did in that revision.
    #[serde(default)]
    pub description: String,
}

/// Parses `helm history -o json`.
pub fn parse_history(stdout: &str) -> Result<Vec<HistoryEntry>, serde_json::Error> {
    let json = stdout.find('[').map_or(stdout, |start| &stdout[start..]);
    serde_json::from_str(json.trim())
}

#[derive(Deserialize)]
struct RawMetadata {
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
}

/// The `labels` of `helm get metadata -o json` (an absent field is no labels).
pub fn parse_labels(
    stdout: &str,
) -> Result<std::collections::BTreeMap<String, String>, serde_json::Error> {
    let json = stdout.find('{').map_or(stdout, |start| &stdout[start..]);
    let raw: RawMetadata = serde_json::from_str(json.trim())?;
    Ok(raw.labels)
}

/// Whether helm's error text says the release does not exist.
pub fn is_release_not_found(stderr: &str) -> bool {
    let lower = stderr.to_ascii_lowercase();
    lower.contains("release: not found") || lower.contains("release not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_json() {
        let out = r#"{"name":"app","info":{"first_deployed":"2026-01-01T00:00:00Z","last_deployed":"2026-01-02T00:00:00Z","deleted":"","description":"Upgrade complete","status":"deployed"},"chart":{"metadata":{"name":"demo","version":"0.2.0","appVersion":"1"}},"version":2,"namespace":"apps"}"#;
        let info = parse_release(out).unwrap();
        assert_eq!(info.name, "app");
        assert_eq!(info.namespace, "apps");
        assert_eq!(info.revision, 2);
        assert_eq!(info.status, HelmStatus::Deployed);
        assert_eq!(info.chart, "demo");
        assert_eq!(info.chart_version, "0.2.0");
        assert_eq!(info.description, "Upgrade complete");
        assert_eq!(info.last_deployed.as_deref(), Some("2026-01-02T00:00:00Z"));
        assert!(!info.status.is_pending());
    }

    #[test]
    fn skips_warnings_before_json() {
        let out = "WARNING: something\n{\"name\":\"a\",\"version\":1,\"info\":{\"status\":\"pending-install\"}}";
        let info = parse_release(out).unwrap();
        assert_eq!(info.revision, 1);
        assert!(info.status.is_pending());
    }

    #[test]
    fn rejects_non_json() {
        assert!(parse_release("Error: nothing").is_err());
    }

    #[test]
    fn parses_test_hooks() {
        // As helm 4.1 prints them after `helm test` (a hook that never ran has an empty phase).
        let out = r#"{"name":"demo","hooks":[{"name":"demo-test","kind":"Pod","events":["test"],"last_run":{"started_at":"2026-12-07T03:39:01Z","completed_at":"2026-12-07T03:39:05Z","phase":"Succeeded"}},{"name":"demo-pre","kind":"Job","events":["pre-install"],"last_run":{"phase":"Succeeded"}},{"name":"demo-other","kind":"Pod","events":["test"],"last_run":{"phase":""}}],"version":1}"#;
        let hooks = parse_test_hooks(out).unwrap();
        assert_eq!(
            hooks,
            vec![
                TestHook {
                    name: "demo-test".into(),
                    phase: "Succeeded".into()
                },
                TestHook {
                    name: "demo-other".into(),
                    phase: "Unknown".into()
                },
            ]
        );
        assert!(parse_test_hooks(r#"{"name":"x"}"#).unwrap().is_empty());
    }

    #[test]
    fn parses_history() {
        let out = r#"[{"revision":1,"updated":"x","status":"superseded","chart":"demo-0.1.0","app_version":"1","description":"Install complete"},{"revision":2,"updated":"y","status":"deployed","chart":"demo-0.2.0","app_version":"1","description":"Upgrade complete"}]"#;
        let history = parse_history(out).unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[1].revision, 2);
        assert_eq!(history[1].status, HelmStatus::Deployed);
    }

    #[test]
    fn parses_metadata_labels() {
        // As helm 4.1 prints it for a release installed with `--labels team=a`.
        let out = r#"{"name":"demo","chart":"demo","version":"0.1.0","appVersion":"","labels":{"modifiedAt":"1795531857","name":"demo","owner":"helm","status":"deployed","team":"a","version":"1"},"namespace":"default","revision":1,"status":"deployed","deployedAt":"2026-11-24T14:50:57Z","applyMethod":"ssa"}"#;
        let labels = parse_labels(out).unwrap();
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(labels.get("owner").map(String::as_str), Some("helm"));
        assert!(parse_labels(r#"{"name":"x"}"#).unwrap().is_empty());
        assert!(parse_labels("Error").is_err());
    }

    #[test]
    fn statuses_read_back_as_helm_writes_them() {
        for text in [
            "deployed",
            "failed",
            "pending-install",
            "pending-upgrade",
            "pending-rollback",
            "uninstalling",
            "uninstalled",
            "superseded",
            "unknown",
            "something-newer",
        ] {
            let status = HelmStatus::parse(text);
            assert_eq!(status.as_str(), text);
            assert_eq!(status.is_pending(), text.starts_with("pending-"), "{text}");
        }
        assert_eq!(
            HelmStatus::parse("something-newer"),
            HelmStatus::Other("something-newer".into())
        );
    }

    #[test]
    fn recognises_not_found() {
        assert!(is_release_not_found("Error: release: not found"));
        assert!(is_release_not_found(
            "Error: uninstall: Release not loaded: app: release: not found"
        ));
        assert!(!is_release_not_found("Error: timed out"));
    }
}
