//! The URLs chart fetches use: absolute `http`/`https` URLs without user info, resolved the way
//! a browser (and helm) resolves a relative reference against its base.

use std::fmt;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Scheme, host and port: where credentials may be sent (the repository's, and only it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Origin {
    pub(crate) scheme: Scheme,
    /// Lower-case host name, or an IP literal (IPv6 without brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Origin {
    /// `host:port` as a connection or TLS name wants it (IPv6 in brackets).
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.scheme.default_port() {
            write!(f, "{}://{host}", self.scheme.as_str())
        } else {
            write!(f, "{}://{host}:{}", self.scheme.as_str(), self.port)
        }
    }
}

/// An absolute `http(s)` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    pub(crate) origin: Origin,
    /// Path (starting with `/`) and query, percent-encoded as received.
    pub(crate) path_and_query: String,
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.origin, self.path_and_query)
    }
}

/// Why a URL is unusable. Messages describe the problem, never repeat the text (which may come
/// from a remote server).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UrlError {
    #[error("is not an absolute http:// or https:// URL")]
    NotHttp,
    #[error("carries a user name or password; put credentials in chart.credentialsSecretRef")]
    UserInfo,
    #[error("has a fragment")]
    Fragment,
}

impl Url {
    /// Parses an absolute `http://` or `https://` URL.
    pub(crate) fn parse(text: &str) -> Result<Url, UrlError> {
        let text = text.trim();
        if text.contains('#') {
            return Err(UrlError::Fragment);
        }
        let uri: http::Uri = text.parse().map_err(|_| UrlError::NotHttp)?;
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::Http,
            Some(s) if s.eq_ignore_ascii_case("https") => Scheme::Https,
            _ => return Err(UrlError::NotHttp),
        };
        let authority = uri.authority().ok_or(UrlError::NotHttp)?;
        if authority.as_str().contains('@') {
            return Err(UrlError::UserInfo);
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if host.is_empty() {
            return Err(UrlError::NotHttp);
        }
        let port = authority.port_u16().unwrap_or(scheme.default_port());
        let path_and_query = uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".to_string());
        Ok(Url {
            origin: Origin { scheme, host, port },
            path_and_query,
        })
    }

    /// The path without the query.
    pub(crate) fn path(&self) -> &str {
        self.path_and_query
            .split('?')
            .next()
            .unwrap_or(&self.path_and_query)
    }

    /// This URL as a directory (its path ending in `/`, no query): what a repository URL is
    /// to the relative references in its index.
    pub(crate) fn as_directory(&self) -> Url {
        let mut path = self.path().to_string();
        if !path.ends_with('/') {
            path.push('/');
        }
        Url {
            origin: self.origin.clone(),
            path_and_query: path,
        }
    }

    /// `reference` resolved against this URL (RFC 3986 §5.2: absolute, scheme-relative,
    /// absolute-path and relative-path references, dot segments removed).
    pub(crate) fn join(&self, reference: &str) -> Result<Url, UrlError> {
        let reference = reference.trim();
        if reference.contains('#') {
            return Err(UrlError::Fragment);
        }
        if let Some((scheme, _)) = reference.split_once("://")
            && !scheme.contains(['/', '?'])
        {
            return Url::parse(reference);
        }
        if let Some(rest) = reference.strip_prefix("//") {
            let scheme = self.origin.scheme.as_str();
            return Url::parse(&format!("{scheme}://{rest}"));
        }
        let (path, query) = match reference.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (reference, None),
        };
        let merged = if path.is_empty() {
            self.path().to_string()
        } else if path.starts_with('/') {
            path.to_string()
        } else {
            let base = self.path();
            let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{path}")
        };
        let mut path_and_query = remove_dot_segments(&merged);
        if let Some(q) = query {
            path_and_query.push('?');
            path_and_query.push_str(q);
        } else if path.is_empty()
            && let Some((_, q)) = self.path_and_query.split_once('?')
        {
            path_and_query.push('?');
            path_and_query.push_str(q);
        }
        // Re-parse, so characters a URL may not hold are refused here.
        Url::parse(&format!("{}{path_and_query}", self.origin))
    }
}

/// RFC 3986 §5.2.4: `.` and `..` segments removed (never above the root).
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if joined.starts_with('/') {
        joined
    } else {
        format!("/{joined}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_absolute_http_urls_only() {
        let u = url("HTTPS://Charts.Example.com:8443/stable?x=1");
        assert_eq!(u.origin.scheme, Scheme::Https);
        assert_eq!(u.origin.host, "charts.example.com");
        assert_eq!(u.origin.port, 8443);
        assert_eq!(u.path_and_query, "/stable?x=1");
        assert_eq!(u.to_string(), "https://charts.example.com:8443/stable?x=1");
        assert_eq!(url("http://[::1]/x").origin.authority(), "[::1]:80");
        assert_eq!(url("https://h").path_and_query, "/");
        for bad in [
            "oci://r/c",
            "file:///etc",
            "/abs",
            "../x",
            "h/x",
            "ftp://h/x",
            "",
        ] {
            assert_eq!(Url::parse(bad), Err(UrlError::NotHttp), "{bad}");
        }
        assert_eq!(Url::parse("https://u:p@h/x"), Err(UrlError::UserInfo));
        assert_eq!(Url::parse("https://h/x#y"), Err(UrlError::Fragment));
    }

    #[test]
    fn relative_references_resolve_like_helm() {
        let repo = url("https://h/charts").as_directory();
        assert_eq!(repo.to_string(), "https://h/charts/");
        let join = |r: &str| repo.join(r).map(|u| u.to_string());
        assert_eq!(
            join("app-1.0.0.tgz").as_deref(),
            Ok("https://h/charts/app-1.0.0.tgz")
        );
        assert_eq!(
            join("../other/a.tgz").as_deref(),
            Ok("https://h/other/a.tgz")
        );
        assert_eq!(join("../../../../a.tgz").as_deref(), Ok("https://h/a.tgz"));
        assert_eq!(join("/root.tgz").as_deref(), Ok("https://h/root.tgz"));
        assert_eq!(
            join("//cdn.example/a.tgz").as_deref(),
            Ok("https://cdn.example/a.tgz")
        );
        assert_eq!(
            join("http://elsewhere:81/a.tgz").as_deref(),
            Ok("http://elsewhere:81/a.tgz")
        );
        assert_eq!(
            join("a.tgz?sig=1").as_deref(),
            Ok("https://h/charts/a.tgz?sig=1")
        );
        assert!(join("file:///etc/passwd").is_err());
        assert!(join("a b.tgz").is_err());
        let page = url("https://h/charts/index.yaml");
        assert_eq!(
            page.join("./x.tgz").map(|u| u.to_string()).as_deref(),
            Ok("https://h/charts/x.tgz")
        );
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        assert_eq!(url("https://h/a").origin, url("https://H:443/b").origin);
        assert_ne!(url("https://h/a").origin, url("https://h:8443/a").origin);
        assert_ne!(url("https://h/a").origin, url("http://h/a").origin);
    }
}
