//! Pure construction of helm command lines: every argv the driver runs is built here.
//!
//! Kept free of IO so the flag differences between helm 3 and helm 4 are unit-tested without a
//! helm binary. Paths to the private kubeconfig and values files are passed in by the caller.

use std::path::Path;
use std::time::Duration;

use super::{HelmFlavor, ReleaseRequest, Revision};

/// Where the per-call private files live.
#[derive(Clone, Debug)]
pub struct CallFiles<'a> {
    /// Private kubeconfig (mode 0600).
    pub kubeconfig: &'a Path,
    /// Values file (JSON is valid YAML).
    pub values: &'a Path,
    /// Private `repositories.yaml` for this call.
    pub(crate) repository_config: &'a Path,
    /// Private repository index cache for this call.
    pub(crate) repository_cache: &'a Path,
    /// Private OCI registry credentials file for this call.
    pub(crate) registry_config: &'a Path,
}

/// Formats a duration the way helm's flag parser (Go `time.ParseDuration`) accepts it.
pub(crate) fn go_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{millis}ms")
    }
}

/// Flags every call that talks to the workload cluster shares. User-supplied values are joined
/// to their flag with `=` so that a value starting with `-` can never be read as a flag.
pub(crate) fn common_flags(files: &CallFiles<'_>, namespace: &str) -> Vec<String> {
    vec![
        "--kubeconfig".into(),
        files.kubeconfig.display().to_string(),
        format!("--namespace={namespace}"),
        "--repository-config".into(),
        files.repository_config.display().to_string(),
        "--repository-cache".into(),
        files.repository_cache.display().to_string(),
        "--registry-config".into(),
        files.registry_config.display().to_string(),
    ]
}

/// Which verb an install-or-upgrade call uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InstallVerb {
    /// `helm install` (no release history).
    Install,
    /// `helm upgrade` (history exists).
    Upgrade,
}

impl InstallVerb {
    /// The helm verb.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            InstallVerb::Install => "install",
            InstallVerb::Upgrade => "upgrade",
        }
    }
}

/// Ends the flags: every later argument is positional, so a release or chart name that starts
/// with `-` (both come from the custom resource) is never parsed as a helm flag.
pub(crate) const END_OF_FLAGS: &str = "--";

/// `--labels` value for the release's ownership labels (`key=value` pairs joined by commas;
/// keys and values are label-safe, so they contain neither `,` nor `=`).
fn labels_flag(labels: &[(String, String)]) -> Option<String> {
    if labels.is_empty() {
        return None;
    }
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Some(format!("--labels={}", pairs.join(",")))
}

/// `helm install|upgrade ... -- NAME ARCHIVE` for the given flavor, creating `revision`.
/// `archive` is the chart the operator fetched and verified ([`super::source`]): helm reads a
/// local file and never reaches a repository, so neither `--repo`, `--version` nor credentials
/// are passed.
pub(crate) fn install_or_upgrade(
    verb: InstallVerb,
    flavor: HelmFlavor,
    request: &ReleaseRequest,
    revision: &Revision,
    files: &CallFiles<'_>,
    archive: &Path,
) -> Vec<String> {
    let mut args = vec![verb.as_str().to_string()];
    args.extend(common_flags(files, &request.namespace));
    // Helm merges these into the labels of the previous revision on upgrade, so they always
    // name the current owner (see docs/helm.md, "Ownership").
    let all_labels: Vec<(String, String)> = request
        .owner_labels
        .iter()
        .chain(&revision.labels)
        .cloned()
        .collect();
    args.extend(labels_flag(&all_labels));
    args.extend([
        "--values".into(),
        files.values.display().to_string(),
        "--timeout".into(),
        go_duration(request.timeout),
        "--output".into(),
        "json".into(),
    ]);
    if verb == InstallVerb::Install && request.create_namespace {
        args.push("--create-namespace".into());
    }
    if verb == InstallVerb::Install && revision.replace {
        args.push("--replace".into());
    }
    if verb == InstallVerb::Upgrade {
        // The values of the spec are the whole truth: never merge in a previous release's values.
        args.push("--reset-values".into());
        if request.max_history > 0 {
            args.push("--history-max".into());
            args.push(request.max_history.to_string());
        }
        if request.atomic {
            args.push("--cleanup-on-fail".into());
        }
    }
    if request.disable_hooks {
        args.push("--no-hooks".into());
    }
    if request.skip_crds {
        args.push("--skip-crds".into());
    }
    args.extend(wait_flags(flavor, request.wait, request.wait_for_jobs));
    if request.atomic {
        args.push(
            match flavor {
                HelmFlavor::V4 => "--rollback-on-failure",
                HelmFlavor::V3 => "--atomic",
            }
            .into(),
        );
    }
    args.extend([
        END_OF_FLAGS.into(),
        request.release_name.clone(),
        archive.display().to_string(),
    ]);
    args
}

/// Wait flags: helm 4 names a strategy (`watcher` waits for readiness, `hookOnly` only for hooks);
/// helm 3 has a boolean `--wait` and waits for hooks by default.
pub(crate) fn wait_flags(flavor: HelmFlavor, wait: bool, wait_for_jobs: bool) -> Vec<String> {
    let mut args = Vec::new();
    match (flavor, wait) {
        (HelmFlavor::V4, true) => args.push("--wait=watcher".into()),
        (HelmFlavor::V4, false) => args.push("--wait=hookOnly".into()),
        (HelmFlavor::V3, true) => args.push("--wait".into()),
        (HelmFlavor::V3, false) => {}
    }
    if wait && wait_for_jobs {
        args.push("--wait-for-jobs".into());
    }
    args
}

/// `helm uninstall NAME ...`.
pub(crate) fn uninstall(
    flavor: HelmFlavor,
    request: &ReleaseRequest,
    files: &CallFiles<'_>,
) -> Vec<String> {
    let mut args = vec!["uninstall".to_string()];
    args.extend(common_flags(files, &request.namespace));
    args.extend(["--timeout".into(), go_duration(request.timeout)]);
    if request.disable_hooks {
        args.push("--no-hooks".into());
    }
    if flavor == HelmFlavor::V4 {
        // helm 3 only learned this flag in later minor versions; for it "not found" is
        // recognised from the error text instead.
        args.push("--ignore-not-found".into());
        if request.wait {
            args.push("--wait=watcher".into());
        }
    } else if request.wait {
        args.push("--wait".into());
    }
    args.extend([END_OF_FLAGS.into(), request.release_name.clone()]);
    args
}

/// `helm rollback NAME REVISION ...`.
pub(crate) fn rollback(
    flavor: HelmFlavor,
    request: &ReleaseRequest,
    revision: i64,
    files: &CallFiles<'_>,
) -> Vec<String> {
    let mut args = vec!["rollback".to_string()];
    args.extend(common_flags(files, &request.namespace));
    args.extend(["--timeout".into(), go_duration(request.timeout)]);
    args.extend(wait_flags(flavor, request.wait, false));
    args.extend([
        END_OF_FLAGS.into(),
        request.release_name.clone(),
        revision.to_string(),
    ]);
    args
}

/// A read-only call `verb` on the release, its JSON output (`--output json`), with `extra`
/// flags.
fn read_call(
    verb: &[&str],
    extra: &[&str],
    request: &ReleaseRequest,
    files: &CallFiles<'_>,
) -> Vec<String> {
    let mut args: Vec<String> = verb.iter().map(|v| v.to_string()).collect();
    args.extend(common_flags(files, &request.namespace));
    args.extend(["--output".into(), "json".into()]);
    args.extend(extra.iter().map(|e| e.to_string()));
    args.extend([END_OF_FLAGS.into(), request.release_name.clone()]);
    args
}

/// `helm status -o json -- NAME`.
pub(crate) fn status(request: &ReleaseRequest, files: &CallFiles<'_>) -> Vec<String> {
    read_call(&["status"], &[], request, files)
}

/// `helm get metadata -o json -- NAME`: the newest revision's metadata, including the release
/// labels (helm keeps them as labels of its storage Secret, not in `status` output).
pub(crate) fn metadata(request: &ReleaseRequest, files: &CallFiles<'_>) -> Vec<String> {
    read_call(&["get", "metadata"], &[], request, files)
}

/// `helm history -o json --max 32 -- NAME`.
pub(crate) fn history(request: &ReleaseRequest, files: &CallFiles<'_>) -> Vec<String> {
    read_call(&["history"], &["--max", "32"], request, files)
}

/// `helm test --timeout T -- NAME`: runs the release's test hooks and waits for them.
pub(crate) fn test(
    request: &ReleaseRequest,
    timeout: Duration,
    files: &CallFiles<'_>,
) -> Vec<String> {
    let mut args = vec!["test".to_string()];
    args.extend(common_flags(files, &request.namespace));
    args.extend(["--timeout".into(), go_duration(timeout)]);
    args.extend([END_OF_FLAGS.into(), request.release_name.clone()]);
    args
}

/// `helm get manifest -- NAME`: the rendered objects of the newest revision (hooks left out),
/// as YAML documents.
pub(crate) fn manifest(request: &ReleaseRequest, files: &CallFiles<'_>) -> Vec<String> {
    let mut args = vec!["get".to_string(), "manifest".into()];
    args.extend(common_flags(files, &request.namespace));
    args.extend([END_OF_FLAGS.into(), request.release_name.clone()]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::helm::ChartSource;
    use std::path::PathBuf;

    const ARCHIVE: &str = "/w/chart.tgz";

    fn request() -> ReleaseRequest {
        ReleaseRequest {
            lock_key: "ns/kc/kube-system/metrics-server".into(),
            digest: "d".into(),
            release_name: "metrics-server".into(),
            namespace: "kube-system".into(),
            chart: ChartSource::Repository {
                url: "https://charts.example.com/".into(),
                chart: "metrics-server".into(),
            },
            chart_version: "3.13.0".into(),
            values: serde_json::json!({"replicas": 2}),
            create_namespace: true,
            wait: true,
            wait_for_jobs: true,
            timeout: Duration::from_secs(300),
            atomic: true,
            disable_hooks: false,
            skip_crds: true,
            max_history: 5,
            owner_labels: vec![("omni.texashpc.com/owner-uid".into(), "u-1".into())],
        }
    }

    /// The arguments after `--`: what helm reads as positional.
    fn positionals(args: &[String]) -> &[String] {
        let end = args
            .iter()
            .position(|a| a == END_OF_FLAGS)
            .unwrap_or_else(|| panic!("no `--` in {args:?}"));
        &args[end + 1..]
    }

    fn with_files<T>(f: impl FnOnce(&CallFiles<'_>) -> T) -> T {
        let (k, v, rc, rca, reg) = (
            PathBuf::from("/w/kubeconfig"),
            PathBuf::from("/w/values.json"),
            PathBuf::from("/w/repositories.yaml"),
            PathBuf::from("/w/repository-cache"),
            PathBuf::from("/w/registry.json"),
        );
        f(&CallFiles {
            kubeconfig: &k,
            values: &v,
            repository_config: &rc,
            repository_cache: &rca,
            registry_config: &reg,
        })
    }

    fn has_pair(args: &[String], flag: &str, value: &str) -> bool {
        args.windows(2).any(|w| w[0] == flag && w[1] == value)
    }

    #[test]
    fn durations_use_go_syntax() {
        assert_eq!(go_duration(Duration::from_secs(300)), "300s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn helm4_install_uses_strategy_flags_and_rollback_on_failure() {
        let args = with_files(|f| {
            install_or_upgrade(
                InstallVerb::Install,
                HelmFlavor::V4,
                &request(),
                &Revision::default(),
                f,
                Path::new(ARCHIVE),
            )
        });
        assert_eq!(args[0], "install");
        assert_eq!(positionals(&args), ["metrics-server", ARCHIVE]);
        // helm reads the verified archive: it is told of no repository, version or credential.
        assert!(!args.iter().any(|a| a.starts_with("--repo=")
            || a.starts_with("--version")
            || a.starts_with("--username")
            || a.starts_with("--ca-file")));
        assert!(args.contains(&"--namespace=kube-system".to_string()));
        assert!(args.contains(&"--labels=omni.texashpc.com/owner-uid=u-1".to_string()));
        assert!(has_pair(&args, "--kubeconfig", "/w/kubeconfig"));
        assert!(has_pair(&args, "--timeout", "300s"));
        assert!(args.contains(&"--wait=watcher".to_string()));
        assert!(args.contains(&"--wait-for-jobs".to_string()));
        assert!(args.contains(&"--rollback-on-failure".to_string()));
        assert!(args.contains(&"--create-namespace".to_string()));
        assert!(args.contains(&"--skip-crds".to_string()));
        assert!(!args.contains(&"--atomic".to_string()));
        // Install has no history limit or cleanup flag.
        assert!(!args.contains(&"--history-max".to_string()));
        assert!(!args.contains(&"--cleanup-on-fail".to_string()));
    }

    #[test]
    fn helm3_upgrade_uses_boolean_wait_and_atomic() {
        let args = with_files(|f| {
            install_or_upgrade(
                InstallVerb::Upgrade,
                HelmFlavor::V3,
                &request(),
                &Revision::default(),
                f,
                Path::new(ARCHIVE),
            )
        });
        assert_eq!(args[0], "upgrade");
        assert_eq!(positionals(&args), ["metrics-server", ARCHIVE]);
        assert!(args.contains(&"--wait".to_string()));
        assert!(args.contains(&"--atomic".to_string()));
        assert!(args.contains(&"--cleanup-on-fail".to_string()));
        assert!(args.contains(&"--reset-values".to_string()));
        assert!(has_pair(&args, "--history-max", "5"));
        assert!(!args.contains(&"--create-namespace".to_string()));
        assert!(!args.iter().any(|a| a.starts_with("--wait=")));
    }

    /// A revision's own labels follow the owner's in one `--labels`; `--replace` is an
    /// install's alone.
    #[test]
    fn a_revision_adds_its_marks_and_an_install_may_replace_kept_history() {
        let revision = Revision {
            labels: vec![("omni.texashpc.com/started-revision".into(), "4".into())],
            replace: true,
        };
        let (install, upgrade) = with_files(|f| {
            let archive = Path::new(ARCHIVE);
            let run =
                |verb| install_or_upgrade(verb, HelmFlavor::V4, &request(), &revision, f, archive);
            (run(InstallVerb::Install), run(InstallVerb::Upgrade))
        });
        let labels =
            "--labels=omni.texashpc.com/owner-uid=u-1,omni.texashpc.com/started-revision=4";
        assert!(install.contains(&labels.to_string()), "{install:?}");
        assert!(upgrade.contains(&labels.to_string()), "{upgrade:?}");
        assert!(install.contains(&"--replace".to_string()));
        assert!(!upgrade.contains(&"--replace".to_string()));
    }

    #[test]
    fn no_wait_means_hooks_only() {
        assert_eq!(
            wait_flags(HelmFlavor::V4, false, true),
            vec!["--wait=hookOnly"]
        );
        assert!(wait_flags(HelmFlavor::V3, false, true).is_empty());
    }

    #[test]
    fn names_from_the_spec_are_positional_even_when_they_look_like_flags() {
        let mut hostile = request();
        hostile.release_name = "--kubeconfig=/etc/operator".into();
        hostile.chart = ChartSource::Repository {
            url: "https://charts.example.com/".into(),
            chart: "--post-renderer=sh".into(),
        };
        hostile.chart_version = "-1".into();
        hostile.namespace = "--debug".into();
        with_files(|f| {
            for verb in [InstallVerb::Install, InstallVerb::Upgrade] {
                let args = install_or_upgrade(
                    verb,
                    HelmFlavor::V4,
                    &hostile,
                    &Revision::default(),
                    f,
                    Path::new(ARCHIVE),
                );
                assert_eq!(positionals(&args), ["--kubeconfig=/etc/operator", ARCHIVE]);
                assert!(args.contains(&"--namespace=--debug".to_string()));
            }
            let named = ReleaseRequest {
                release_name: "-x".into(),
                namespace: "ns".into(),
                timeout: Duration::from_secs(1),
                wait: false,
                ..request()
            };
            assert_eq!(positionals(&status(&named, f)), ["-x"]);
            assert_eq!(positionals(&metadata(&named, f)), ["-x"]);
            assert_eq!(positionals(&history(&named, f)), ["-x"]);
            let rb = rollback(HelmFlavor::V4, &named, 2, f);
            assert_eq!(positionals(&rb), ["-x", "2"]);
            let un = uninstall(HelmFlavor::V3, &named, f);
            assert_eq!(positionals(&un), ["-x"]);
        });
    }

    /// The request of release `app` in namespace `apps`, with `timeout`, `disable_hooks` and
    /// `wait` as given.
    fn app(timeout: Duration, disable_hooks: bool, wait: bool) -> ReleaseRequest {
        ReleaseRequest {
            release_name: "app".into(),
            namespace: "apps".into(),
            timeout,
            disable_hooks,
            wait,
            ..request()
        }
    }

    #[test]
    fn uninstall_ignores_missing_release_on_helm4() {
        let args = with_files(|f| {
            uninstall(
                HelmFlavor::V4,
                &app(Duration::from_secs(60), true, false),
                f,
            )
        });
        assert_eq!(args[0], "uninstall");
        assert_eq!(positionals(&args), ["app"]);
        assert!(args.contains(&"--ignore-not-found".to_string()));
        assert!(args.contains(&"--no-hooks".to_string()));
        let v3 = with_files(|f| {
            uninstall(
                HelmFlavor::V3,
                &app(Duration::from_secs(60), false, false),
                f,
            )
        });
        assert!(!v3.contains(&"--ignore-not-found".to_string()));
    }

    #[test]
    fn status_history_rollback_request_json() {
        with_files(|f| {
            let req = app(Duration::from_secs(30), false, true);
            assert!(has_pair(&status(&req, f), "--output", "json"));
            assert!(has_pair(&history(&req, f), "--output", "json"));
            let rb = rollback(HelmFlavor::V4, &req, 3, f);
            assert_eq!(rb[0], "rollback");
            assert_eq!(positionals(&rb), ["app", "3"]);
            assert!(rb.contains(&"--wait=watcher".to_string()));
        });
    }
}
