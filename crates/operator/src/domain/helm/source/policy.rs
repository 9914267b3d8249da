//! The deployment's rules for where charts may come from: an allow-list of repository hosts and
//! an optional deny of loopback, link-local and private addresses, checked on every URL a fetch
//! would touch (the repository, each chart URL an index lists, each redirect, a registry's token
//! service) before anything is sent to it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::url::Origin;

/// A host pattern of the allow-list: `charts.example.com`, `*.example.com` (any subdomain, not
/// the domain itself), an IP literal, each optionally with `:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses a pattern; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let text = text.trim();
        let (host, port) = match text.rsplit_once(':') {
            // An IPv6 literal needs brackets to carry a port.
            Some((h, p)) if !h.contains(':') || h.ends_with(']') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| format!("{text:?}: the port must be a number"))?;
                (h, Some(port))
            }
            _ => (text, None),
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let (wildcard, bare) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, host),
        };
        let valid = !bare.is_empty()
            && (bare.parse::<IpAddr>().is_ok()
                || bare.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                }));
        if !valid || (wildcard && bare.parse::<IpAddr>().is_ok()) {
            return Err(format!(
                "{text:?} is not a host pattern (host, *.domain or IP, optionally :port)"
            ));
        }
        Ok(HostPattern {
            host: bare,
            wildcard,
            port,
        })
    }

    fn matches(&self, origin: &Origin) -> bool {
        let host_ok = if self.wildcard {
            origin
                .host
                .strip_suffix(&self.host)
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.'))
        } else {
            origin.host == self.host
        };
        host_ok && self.port.is_none_or(|p| p == origin.port)
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// Where charts may come from (flags `--chart-source-allowed-hosts`,
/// `--chart-source-deny-private-networks`, `--allow-insecure-chart-sources`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartSourcePolicy {
    /// Hosts a fetch may touch; empty allows any.
    pub allowed_hosts: Vec<HostPattern>,
    /// Refuse hosts that resolve to loopback, link-local, private, shared (CGNAT), unique-local,
    /// unspecified or multicast addresses (off by default: air-gapped users serve charts from
    /// private networks).
    pub deny_private_networks: bool,
    /// Honour `spec.chart.insecure: true` (credentials over plain HTTP, plain-HTTP registries).
    pub allow_insecure: bool,
}

impl Default for ChartSourcePolicy {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            deny_private_networks: false,
            allow_insecure: true,
        }
    }
}

impl ChartSourcePolicy {
    /// Whether the allow-list admits `origin`.
    pub(crate) fn allows_host(&self, origin: &Origin) -> bool {
        self.allowed_hosts.is_empty() || self.allowed_hosts.iter().any(|p| p.matches(origin))
    }

    /// Whether a connection to `addr` is refused.
    pub(crate) fn denies_address(&self, addr: IpAddr) -> bool {
        self.deny_private_networks && is_private(addr)
    }
}

/// Loopback, link-local, private (RFC 1918), shared (RFC 6598), unique-local, unspecified,
/// broadcast or multicast, including IPv4 addresses written as IPv6 (mapped, compatible,
/// NAT64).
pub(crate) fn is_private(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => private_v6(v6),
    }
}

fn private_v4(a: Ipv4Addr) -> bool {
    let [b0, b1, ..] = a.octets();
    a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || b0 == 0
        || (b0 == 100 && (64..128).contains(&b1))
}

fn private_v6(a: Ipv6Addr) -> bool {
    let segments = a.segments();
    if let Some(v4) = a.to_ipv4_mapped() {
        return private_v4(v4);
    }
    // NAT64 (64:ff9b::/96) and the deprecated IPv4-compatible form (::a.b.c.d).
    let embedded = || {
        let [.., hi, lo] = segments;
        Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))
    };
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || (segments[..6] == [0; 6] && !a.is_loopback() && !a.is_unspecified())
    {
        return private_v4(embedded());
    }
    a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00
        || (segments[0] & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::helm::source::url::Url;

    fn origin(u: &str) -> Origin {
        Url::parse(u).unwrap_or_else(|e| panic!("{e}")).origin
    }

    #[test]
    fn host_patterns_match_hosts_subdomains_and_ports() {
        let p = |s: &str| HostPattern::parse(s).unwrap_or_else(|e| panic!("{e}"));
        assert!(p("charts.example.com").matches(&origin("https://Charts.example.com/x")));
        assert!(!p("charts.example.com").matches(&origin("https://evil-charts.example.com/")));
        assert!(p("*.example.com").matches(&origin("https://a.b.example.com/")));
        assert!(!p("*.example.com").matches(&origin("https://example.com/")));
        assert!(!p("*.example.com").matches(&origin("https://badexample.com/")));
        assert!(p("127.0.0.1:8080").matches(&origin("http://127.0.0.1:8080/")));
        assert!(!p("127.0.0.1:8080").matches(&origin("http://127.0.0.1:8081/")));
        assert!(p("[::1]").matches(&origin("http://[::1]:9/")));
        assert!(p("[::1]:9").matches(&origin("http://[::1]:9/")));
        assert_eq!(p("*.Example.com:443").to_string(), "*.example.com:443");
        for bad in ["", "*.", "a b", "h:x", "*.10.0.0.1", "https://h"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
        let open = ChartSourcePolicy::default();
        assert!(open.allows_host(&origin("https://anything/")));
    }

    #[test]
    fn private_ranges_are_told_apart_from_public_ones() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::7f00:1",
            "ff02::1",
        ] {
            let addr: IpAddr = private.parse().unwrap_or_else(|e| panic!("{e}"));
            assert!(is_private(addr), "{private}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "100.128.0.1",
        ] {
            let addr: IpAddr = public.parse().unwrap_or_else(|e| panic!("{e}"));
            assert!(!is_private(addr), "{public}");
        }
        let strict = ChartSourcePolicy {
            deny_private_networks: true,
            ..ChartSourcePolicy::default()
        };
        assert!(
            strict.denies_address(
                "127.0.0.1"
                    .parse()
                    .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
            )
        );
        assert!(!ChartSourcePolicy::default().denies_address(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
}
