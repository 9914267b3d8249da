//! Who a minted kubeconfig may authenticate as, and for how long: the policy for the identities
//! OmniKubeconfigExport and `omni-operator omni kubeconfig` ask Omni for.
//!
//! The user docs promise that `system:masters` is minted only with
//! `serviceAccount.allowClusterAdmin: true`. A guard on one group name is bypassed by naming any
//! other identity the workload API server trusts as much: `system:kube-controller-manager`,
//! `system:node:<name>`, `kubeadm:cluster-admins`. So every identity in [`is_builtin_privileged`]
//! (and every one a deployment adds with `--privileged-identity`) is treated exactly like
//! `system:masters`.
//!
//! Two layers decide:
//! - the object's own rules ([`builtin_refusals`], run by admission, `omni-operator validate` and
//!   the controller alike): a built-in privileged identity needs `allowClusterAdmin: true`;
//! - the deployment ([`IdentityPolicy`], from the operator's flags, applied by the controller):
//!   whether `allowClusterAdmin` is honoured at all (`--allow-cluster-admin-exports`), the
//!   identities it adds (`--privileged-identity`) and the longest TTL (`--max-export-ttl`). A
//!   field the tenant writes can therefore never have the last word.

use std::time::Duration;

/// The group every authenticated user belongs to: the one `system:` name that grants nothing.
const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// The group kubeadm binds to `cluster-admin` (since Kubernetes 1.29 the admin kubeconfig's).
const KUBEADM_CLUSTER_ADMINS: &str = "kubeadm:cluster-admins";

/// Default of `--max-export-ttl`: one year.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(8760 * 3600);

/// Whether the workload API server trusts `name` (a user or group) like a cluster admin: every
/// `system:` name except `system:authenticated` (the control-plane components, nodes, service
/// accounts, `system:masters`, …) and `kubeadm:cluster-admins`.
pub fn is_builtin_privileged(name: &str) -> bool {
    let name = name.trim();
    (name.starts_with("system:") && name != AUTHENTICATED_GROUP) || name == KUBEADM_CLUSTER_ADMINS
}

/// One identity of a mint request and where it was written (`spec.serviceAccount.user`,
/// `--group`, …).
#[derive(Debug, Clone)]
pub struct Named<'a> {
    /// The field or flag the name comes from.
    pub field: std::borrow::Cow<'a, str>,
    /// The user or group name.
    pub name: &'a str,
}

/// A mint request: the identities asked for, the consent to cluster admin and the lifetime,
/// each with the field or flag it comes from so that refusals can name it.
#[derive(Debug, Clone)]
pub struct MintRequest<'a> {
    /// The user, then every group.
    pub identities: Vec<Named<'a>>,
    /// The field or flag that consents to a cluster-admin identity
    /// (`spec.serviceAccount.allowClusterAdmin`, `--allow-cluster-admin`).
    pub consent_field: &'a str,
    /// How a refusal tells the author to consent (`serviceAccount.allowClusterAdmin: true`,
    /// `--allow-cluster-admin`).
    pub consent_hint: &'a str,
    /// Whether it is set.
    pub allow_cluster_admin: bool,
    /// The field or flag of the lifetime (`spec.ttl`, `--ttl`).
    pub ttl_field: &'a str,
    /// The lifetime asked for.
    pub ttl: Duration,
}

/// A refusal: the field it is about and why (naming what would allow it: a field or, for a
/// deployment rule, the flag). Displayed as `field: detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The field or flag refused.
    pub field: String,
    /// Why.
    pub detail: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail)
    }
}

/// The object's own rule, the same in every deployment: each built-in privileged identity
/// without consent is refused, naming its field.
pub fn builtin_refusals(request: &MintRequest<'_>) -> Vec<Refusal> {
    if request.allow_cluster_admin {
        return Vec::new();
    }
    request
        .identities
        .iter()
        .filter(|id| is_builtin_privileged(id.name))
        .map(|id| {
            let name = id.name.trim();
            let like = if name == "system:masters" {
                String::new()
            } else {
                " (it is trusted like system:masters)".to_string()
            };
            Refusal {
                field: id.field.to_string(),
                detail: format!("{name}{like} requires {}", request.consent_hint),
            }
        })
        .collect()
}

/// The deployment's policy for minted identities (operator flags `--allow-cluster-admin-exports`,
/// `--privileged-identity` and `--max-export-ttl`; for `omni-operator omni kubeconfig` its own
/// `--privileged-identity` and `--max-ttl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityPolicy {
    /// Whether a consent to cluster admin is honoured at all (default: yes, as documented).
    pub honour_allow_cluster_admin: bool,
    /// Identities the deployment treats like `system:masters` besides the built-in ones.
    pub privileged: Vec<String>,
    /// The longest lifetime minted.
    pub max_ttl: Duration,
    /// The flag names to cite in refusals: `(consent, privileged, max ttl)`.
    pub flags: PolicyFlags,
}

/// The flag names an [`IdentityPolicy`] refusal cites (they differ between the operator and the
/// `omni kubeconfig` command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyFlags {
    /// Turns the consent off (`--allow-cluster-admin-exports`); `None` where it cannot be.
    pub consent: Option<&'static str>,
    /// Adds privileged identities (`--privileged-identity`).
    pub privileged: &'static str,
    /// Sets the longest lifetime (`--max-export-ttl`).
    pub max_ttl: &'static str,
}

/// The operator's flag names.
pub const OPERATOR_FLAGS: PolicyFlags = PolicyFlags {
    consent: Some("--allow-cluster-admin-exports"),
    privileged: "--privileged-identity",
    max_ttl: "--max-export-ttl",
};

impl Default for IdentityPolicy {
    fn default() -> Self {
        Self {
            honour_allow_cluster_admin: true,
            privileged: Vec::new(),
            max_ttl: DEFAULT_MAX_TTL,
            flags: OPERATOR_FLAGS,
        }
    }
}

impl IdentityPolicy {
    /// Whether `name` is treated like `system:masters` here.
    pub fn is_privileged(&self, name: &str) -> bool {
        is_builtin_privileged(name) || self.privileged.iter().any(|p| p == name.trim())
    }

    /// Every refusal of `request`: the object's own rule ([`builtin_refusals`]) and the
    /// deployment's. Empty when it may be minted.
    pub fn refusals(&self, request: &MintRequest<'_>) -> Vec<Refusal> {
        let mut out = builtin_refusals(request);
        let privileged: Vec<&Named<'_>> = request
            .identities
            .iter()
            .filter(|id| self.is_privileged(id.name))
            .collect();
        if !request.allow_cluster_admin {
            for id in privileged
                .iter()
                .filter(|id| !is_builtin_privileged(id.name))
            {
                out.push(Refusal {
                    field: id.field.to_string(),
                    detail: format!(
                        "{} is a privileged identity of this deployment ({}) and requires {}",
                        id.name.trim(),
                        self.flags.privileged,
                        request.consent_hint
                    ),
                });
            }
        } else if !self.honour_allow_cluster_admin && !privileged.is_empty() {
            let names: Vec<&str> = privileged.iter().map(|id| id.name.trim()).collect();
            out.push(Refusal {
                field: request.consent_field.to_string(),
                detail: format!(
                    "cluster-admin identities ({}) are not minted by this operator: it runs with {}=false",
                    names.join(", "),
                    self.flags.consent.unwrap_or("its policy")
                ),
            });
        }
        if request.ttl > self.max_ttl {
            out.push(Refusal {
                field: request.ttl_field.to_string(),
                detail: format!(
                    "{} exceeds the longest lifetime this operator mints, {} ({})",
                    go_like(request.ttl),
                    go_like(self.max_ttl),
                    self.flags.max_ttl
                ),
            });
        }
        out
    }
}

/// A duration in Go's `String()` form (`8760h0m0s`), as the flags and fields are written.
fn go_like(d: Duration) -> String {
    let nanos = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    crate::api::duration::GoDuration::from_nanos(nanos).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(ids: &[(&'a str, &'a str)], consent: bool, ttl_h: u64) -> MintRequest<'a> {
        MintRequest {
            identities: ids
                .iter()
                .map(|(field, name)| Named {
                    field: (*field).into(),
                    name,
                })
                .collect(),
            consent_field: "spec.serviceAccount.allowClusterAdmin",
            consent_hint: "serviceAccount.allowClusterAdmin: true",
            allow_cluster_admin: consent,
            ttl_field: "spec.ttl",
            ttl: Duration::from_secs(ttl_h * 3600),
        }
    }

    #[test]
    fn every_system_name_but_authenticated_and_kubeadm_admins_are_privileged() {
        for name in [
            "system:masters",
            "system:kube-controller-manager",
            "system:kube-scheduler",
            "system:node:worker-1",
            "system:nodes",
            "system:serviceaccount:kube-system:default",
            "system:admin",
            " system:masters",
            "kubeadm:cluster-admins",
        ] {
            assert!(is_builtin_privileged(name), "{name}");
        }
        for name in [
            "system:authenticated",
            "automation",
            "cluster-automation",
            "kubeadm:other",
            "systemd:x",
        ] {
            assert!(!is_builtin_privileged(name), "{name}");
        }
    }

    #[test]
    fn a_privileged_identity_without_consent_is_refused_naming_its_field() {
        let policy = IdentityPolicy::default();
        let r = request(
            &[
                ("spec.serviceAccount.user", "system:node:x"),
                ("spec.serviceAccount.groups[0]", "automation"),
                ("spec.serviceAccount.groups[1]", "kubeadm:cluster-admins"),
            ],
            false,
            1,
        );
        let refusals = policy.refusals(&r);
        let fields: Vec<&str> = refusals.iter().map(|r| r.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.serviceAccount.user", "spec.serviceAccount.groups[1]"]
        );
        assert_eq!(
            refusals[0].to_string(),
            "spec.serviceAccount.user: system:node:x (it is trusted like system:masters) requires serviceAccount.allowClusterAdmin: true"
        );
        let masters = request(
            &[("spec.serviceAccount.groups[0]", "system:masters")],
            false,
            1,
        );
        assert_eq!(
            builtin_refusals(&masters)[0].to_string(),
            "spec.serviceAccount.groups[0]: system:masters requires serviceAccount.allowClusterAdmin: true"
        );
        assert!(
            policy
                .refusals(&request(
                    &[("spec.serviceAccount.groups[0]", "system:masters")],
                    true,
                    1
                ))
                .is_empty(),
            "consent is honoured by default"
        );
    }

    #[test]
    fn the_deployment_decides_on_consent_added_identities_and_lifetime() {
        let policy = IdentityPolicy {
            honour_allow_cluster_admin: false,
            privileged: vec!["platform:admins".into()],
            max_ttl: Duration::from_secs(24 * 3600),
            ..IdentityPolicy::default()
        };
        let consented = request(
            &[("spec.serviceAccount.groups[0]", "system:masters")],
            true,
            1,
        );
        let refusals = policy.refusals(&consented);
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert_eq!(refusals[0].field, "spec.serviceAccount.allowClusterAdmin");
        assert!(
            refusals[0]
                .detail
                .contains("--allow-cluster-admin-exports=false"),
            "{}",
            refusals[0].detail
        );
        // Consent that would grant nothing privileged is inert, not refused.
        assert!(
            policy
                .refusals(&request(
                    &[("spec.serviceAccount.groups[0]", "automation")],
                    true,
                    1
                ))
                .is_empty()
        );
        let added = policy.refusals(&request(
            &[("spec.serviceAccount.groups[0]", "platform:admins")],
            false,
            1,
        ));
        assert!(
            added.len() == 1 && added[0].detail.contains("--privileged-identity"),
            "{added:?}"
        );
        let long = policy.refusals(&request(
            &[("spec.serviceAccount.groups[0]", "automation")],
            false,
            48,
        ));
        assert_eq!(
            long.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "spec.ttl: 48h0m0s exceeds the longest lifetime this operator mints, 24h0m0s (--max-export-ttl)"
            ]
        );
    }
}
