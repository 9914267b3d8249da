//! `omni-operator plan -n NS CLUSTER`: prints the change set the operator recorded for an
//! OmniCluster (`status.plan`): what it would change in Omni and has not, why it holds it, and
//! how to approve it. It reads the management cluster only; no Omni credentials are needed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::api::common::{condition_types, find_condition};
use crate::api::keys::APPROVE_PLAN_ANNOTATION;
use crate::api::{OmniCluster, Reason};

/// Output format of `plan`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// `status.plan` as JSON (`null` when nothing is pending), for scripts.
    Json,
}

/// Arguments of `plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The OmniCluster's name.
    pub cluster: String,
    /// Its namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Kubeconfig of the management cluster (default: `$KUBECONFIG`, `~/.kube/config`, or
    /// the in-cluster service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t)]
    pub output: Format,
    /// Exit 2 when a plan is pending (0 when none), as `terraform plan -detailed-exitcode`.
    #[arg(long)]
    pub detailed_exitcode: bool,
}

/// Runs `plan`, printing to stdout.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .context("kubeconfig")?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("kubeconfig")?,
        None => kube::Config::infer()
            .await
            .context("find a kubeconfig (pass --kubeconfig)")?,
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("Kubernetes client")?;
    let cluster = Api::<OmniCluster>::namespaced(client, &namespace)
        .get(&args.cluster)
        .await
        .with_context(|| format!("get OmniCluster {namespace}/{}", args.cluster))?;
    let mut stdout = std::io::stdout();
    print(&cluster, args.output, &mut stdout)?;
    let pending = cluster.status.as_ref().is_some_and(|s| s.plan.is_some());
    Ok(if args.detailed_exitcode && pending {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes what `cluster` records about its plan.
pub fn print(
    cluster: &OmniCluster,
    format: Format,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let status = cluster.status.clone().unwrap_or_default();
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, &status.plan)?;
        writeln!(out)?;
        return Ok(());
    }
    let namespace = cluster.metadata.namespace.clone().unwrap_or_default();
    let name = cluster.metadata.name.clone().unwrap_or_default();
    writeln!(
        out,
        "OmniCluster {namespace}/{name} → Omni cluster {:?}",
        cluster.effective_cluster_name()
    )?;
    let generation = cluster.metadata.generation.unwrap_or_default();
    if status.observed_generation.unwrap_or_default() < generation {
        writeln!(
            out,
            "note: the operator has not reconciled generation {generation} yet (status is for generation {}); this may change",
            status.observed_generation.unwrap_or_default()
        )?;
    }
    let ready = find_condition(&status.conditions, condition_types::READY);
    if let Some(c) = ready {
        writeln!(out, "Ready: {:?} ({}): {}", c.status, c.reason, c.message)?;
    }
    let Some(plan) = &status.plan else {
        writeln!(
            out,
            "No changes pending: nothing the operator planned is waiting to be applied."
        )?;
        return Ok(());
    };
    writeln!(
        out,
        "Plan {} for generation {}: {}",
        plan.hash, plan.generation, plan.summary
    )?;
    for c in &plan.counts {
        writeln!(
            out,
            "  {}: {} to create, {} to update, {} to delete",
            c.type_, c.create, c.update, c.delete
        )?;
    }
    if !plan.destructive_changes.is_empty() {
        writeln!(out, "Destructive:")?;
        for d in &plan.destructive_changes {
            writeln!(out, "  - {d}")?;
        }
    }
    if let Some(ignored) = &plan.ignored_approval {
        writeln!(
            out,
            "The annotation {APPROVE_PLAN_ANNOTATION}={ignored} approves another plan and is ignored."
        )?;
    }
    if ready
        .is_some_and(|c| c.reason == Reason::ApprovalRequired || c.reason == Reason::AdoptionDiff)
    {
        writeln!(out, "Approve it with:")?;
        writeln!(
            out,
            "  kubectl annotate omnicluster -n {namespace} {name} {APPROVE_PLAN_ANNOTATION}={} --overwrite",
            plan.hash
        )?;
    }
    writeln!(out, "Changes:")?;
    for change in &plan.changes {
        writeln!(out, "  * {} {}({})", change.action, change.type_, change.id)?;
        for f in &change.fields {
            writeln!(
                out,
                "      {}: {} → {}",
                f.path,
                f.from.as_deref().unwrap_or("(none)"),
                f.to.as_deref().unwrap_or("(none)")
            )?;
        }
        if change.omitted_fields > 0 {
            writeln!(out, "      … and {} more fields", change.omitted_fields)?;
        }
    }
    if plan.omitted_changes > 0 {
        writeln!(
            out,
            "  … and {} more changes (the hash covers them too)",
            plan.omitted_changes
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::plan::{PlanCount, PlanStatus, PlannedChange, PlannedField};

    fn cluster(plan: Option<PlanStatus>, reason: &str) -> OmniCluster {
        let mut c: OmniCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "edge", "namespace": "ops", "generation": 3},
            "spec": {"connectionRef": {"name": "omni"}, "clusterName": "prod",
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}},
            "status": {"observedGeneration": 3, "conditions": [{
                "type": "Ready", "status": "False", "reason": reason, "message": "held",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(s) = c.status.as_mut() {
            s.plan = plan;
        }
        c
    }

    fn text(c: &OmniCluster) -> String {
        let mut out = Vec::new();
        print(c, Format::Text, &mut out).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn a_held_plan_is_printed_with_how_to_approve_it() {
        let plan = PlanStatus {
            hash: "abc".into(),
            generation: 3,
            summary: "1 to delete (destructive)".into(),
            counts: vec![PlanCount {
                type_: "ConfigPatches".into(),
                create: 0,
                update: 1,
                delete: 1,
            }],
            destructive: true,
            destructive_changes: vec!["deletes config patch p".into()],
            ignored_approval: Some("old".into()),
            changes: vec![PlannedChange {
                action: "update".into(),
                type_: "ConfigPatches".into(),
                id: "q".into(),
                fields: vec![PlannedField {
                    path: "spec.data".into(),
                    from: Some("<3 bytes>".into()),
                    to: Some("<4 bytes>".into()),
                }],
                omitted_fields: 0,
            }],
            omitted_changes: 0,
        };
        let shown = text(&cluster(Some(plan), "ApprovalRequired"));
        for line in [
            "OmniCluster ops/edge → Omni cluster \"prod\"",
            "Plan abc for generation 3: 1 to delete (destructive)",
            "  - deletes config patch p",
            "The annotation omni.texashpc.com/approve-plan=old approves another plan and is ignored.",
            "  kubectl annotate omnicluster -n ops edge omni.texashpc.com/approve-plan=abc --overwrite",
            "  * update ConfigPatches(q)",
            "      spec.data: <3 bytes> → <4 bytes>",
        ] {
            assert!(shown.contains(line), "missing {line:?} in\n{shown}");
        }
        let in_plan_mode = text(&cluster(
            Some(PlanStatus {
                hash: "abc".into(),
                ..PlanStatus::default()
            }),
            "PlanOnly",
        ));
        assert!(!in_plan_mode.contains("kubectl annotate"), "{in_plan_mode}");
    }

    #[test]
    fn no_plan_says_so() {
        let shown = text(&cluster(None, "Synced"));
        assert!(shown.contains("No changes pending"), "{shown}");
        let mut json = Vec::new();
        print(&cluster(None, "Synced"), Format::Json, &mut json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(String::from_utf8(json).unwrap_or_default(), "null\n");
    }
}
