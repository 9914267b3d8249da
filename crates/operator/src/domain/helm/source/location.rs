//! Where an OmniHelmRelease's chart comes from, checked before anything is fetched: a chart
//! name in an HTTP(S) repository, or an `oci://` reference. A name is a name whatever helm
//! version runs: no path (`/abs`, `../x`), no `..`, no URL of another scheme. helm 3 installs a
//! chart directory from the operator's own filesystem when given a path, and its errors tell
//! files, directories and missing paths apart.

use super::url::{Origin, Scheme, Url};

/// A checked chart location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChartLocation {
    /// Chart `name` in the HTTP(S) repository at `repository`.
    Repository { repository: Url, name: String },
    /// Chart `repository` (its path, e.g. `org/charts/app`) in the OCI registry at `registry`.
    Oci {
        registry: Origin,
        repository: String,
    },
}

impl ChartLocation {
    /// The origin a fetch starts at, whose credentials these are.
    pub(crate) fn origin(&self) -> &Origin {
        match self {
            ChartLocation::Repository { repository, .. } => &repository.origin,
            ChartLocation::Oci { registry, .. } => registry,
        }
    }
}

/// A spec field that does not name a chart location; `message` names the field and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct LocationError {
    /// `spec.chart.chart` or `spec.chart.repository`.
    pub(crate) field: &'static str,
    /// `field "value" detail`.
    pub(crate) message: String,
    /// What the value must be, for admission's field errors (which show the value).
    pub(crate) detail: &'static str,
}

fn error(field: &'static str, value: &str, detail: &'static str) -> LocationError {
    LocationError {
        field,
        message: format!("{field} {value:?} {detail}"),
        detail,
    }
}

/// Longest chart name accepted (a Kubernetes label value holds 63; helm's own limit on names of
/// charts is far above any real one).
const MAX_NAME: usize = 250;

/// The one refusal of a chart name, the same text whatever is wrong with it, so it never tells
/// what the operator's filesystem holds.
fn not_a_name(chart: &str) -> LocationError {
    error(
        "spec.chart.chart",
        chart,
        "must be a chart name (letters, digits, '.', '_' and '-', without '..') or an oci:// reference",
    )
}

/// Checks `chart` as a chart name in a repository.
pub(crate) fn check_name(chart: &str) -> Result<(), LocationError> {
    let ok = !chart.is_empty()
        && chart.len() <= MAX_NAME
        && chart.starts_with(|c: char| c.is_ascii_alphanumeric())
        && chart
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !chart.contains("..");
    if ok { Ok(()) } else { Err(not_a_name(chart)) }
}

/// Checks `chart` as written in the spec: a name, or a whole `oci://` reference.
pub(crate) fn check_chart(chart: &str) -> Result<(), LocationError> {
    let chart = chart.trim();
    if chart.starts_with("oci://") {
        parse_oci(chart, false).map(|_| ())
    } else {
        check_name(chart)
    }
}

/// Checks the repository URL of a repository chart.
pub(crate) fn check_repository(repository: &str) -> Result<Url, LocationError> {
    Url::parse(repository).map_err(|_| {
        error(
            "spec.chart.repository",
            repository,
            "must be an http:// or https:// URL without user name, password or fragment (credentials belong in chart.credentialsSecretRef)",
        )
    })
}

/// The location the spec fields name. `insecure` makes an `oci://` registry plain HTTP.
pub(crate) fn locate(
    repository: &str,
    chart: &str,
    insecure: bool,
) -> Result<ChartLocation, LocationError> {
    let chart = chart.trim();
    if chart.starts_with("oci://") {
        return parse_oci(chart, insecure);
    }
    check_name(chart)?;
    Ok(ChartLocation::Repository {
        repository: check_repository(repository)?,
        name: chart.to_string(),
    })
}

/// A path component of an OCI repository name (the distribution spec's grammar).
fn oci_component(c: &str) -> bool {
    let bytes = c.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    // Separators: one '.', one or two '_', or any number of '-', between alphanumerics.
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if alnum(b) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.chars().all(|s| s == '-');
        if !ok {
            return false;
        }
    }
    true
}

fn parse_oci(reference: &str, insecure: bool) -> Result<ChartLocation, LocationError> {
    let invalid = || {
        error(
            "spec.chart.chart",
            reference,
            "must be an oci://host[:port]/path reference (lower-case path, no tag or digest: the version comes from chart.version)",
        )
    };
    let rest = reference.strip_prefix("oci://").ok_or_else(invalid)?;
    let (authority, path) = rest.split_once('/').ok_or_else(invalid)?;
    if authority.contains('@') || path.contains(['@', '?', '#', ':']) {
        return Err(invalid());
    }
    let scheme = if insecure {
        Scheme::Http
    } else {
        Scheme::Https
    };
    let registry = Url::parse(&format!(
        "{}://{authority}/",
        if insecure { "http" } else { "https" }
    ))
    .map_err(|_| invalid())?
    .origin;
    if registry.scheme != scheme || !path.split('/').all(oci_component) {
        return Err(invalid());
    }
    Ok(ChartLocation::Oci {
        registry,
        repository: path.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_names() {
        for ok in ["metrics-server", "demo", "my_chart.v2", "A1"] {
            assert_eq!(check_chart(ok), Ok(()), "{ok}");
        }
        let refusals: Vec<String> = [
            "/etc",
            "/nonexistent",
            "../x",
            "./demo",
            "a/b",
            "..",
            "a..b",
            "-g",
            "file:///etc",
            "https://evil.example/x.tgz",
            "C:\\x",
            "",
        ]
        .iter()
        .map(|bad| {
            let e = check_chart(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.field, "spec.chart.chart");
            e.message.replace(&format!("{bad:?}"), "CHART")
        })
        .collect();
        assert!(refusals.windows(2).all(|w| w[0] == w[1]), "{refusals:#?}");
    }

    #[test]
    fn oci_references_are_host_and_lower_case_path() {
        let oci = |s: &str, insecure| locate("https://ignored", s, insecure);
        assert_eq!(
            oci("oci://ghcr.io/org/charts/app", false),
            Ok(ChartLocation::Oci {
                registry: Url::parse("https://ghcr.io")
                    .map(|u| u.origin)
                    .unwrap_or_else(|e| panic!("{e}")),
                repository: "org/charts/app".into(),
            })
        );
        let plain = oci("oci://127.0.0.1:5000/charts/app", true);
        assert!(
            matches!(&plain, Ok(ChartLocation::Oci { registry, .. }) if registry.scheme == Scheme::Http && registry.port == 5000),
            "{plain:?}"
        );
        for bad in [
            "oci://ghcr.io",
            "oci://ghcr.io/",
            "oci://ghcr.io/org/App",
            "oci://ghcr.io/org/app:1.0",
            "oci://ghcr.io/org/app@sha256:00",
            "oci://u:p@ghcr.io/org/app",
            "oci://ghcr.io/org/../app",
            "oci://ghcr.io/org//app",
            "oci://ghcr.io/org/app?x=1",
            "oci:///etc",
        ] {
            assert!(oci(bad, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn repository_charts_need_an_http_repository() {
        assert!(matches!(
            locate("https://charts.example.com/stable", "app", false),
            Ok(ChartLocation::Repository { .. })
        ));
        for bad in ["oci://ghcr.io/org", "file:///charts", "https://u:p@h/"] {
            let e = locate(bad, "app", false)
                .err()
                .unwrap_or_else(|| panic!("{bad}"));
            assert_eq!(e.field, "spec.chart.repository", "{bad}");
        }
    }
}
