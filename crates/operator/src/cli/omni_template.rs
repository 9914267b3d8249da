//! `omni-operator omni template sync|diff|status|delete`: the omnictl cluster-template commands,
//! for debugging a template outside the operator.
//!
//! The service-account key comes from `--key-file` or the `OMNI_SERVICE_ACCOUNT_KEY`
//! environment variable; it is never printed.
//!
//! `sync`, `diff` and `delete` translate the template for the backend API version Omni reports
//! (read from `SysVersions`, as the operator does), so they write exactly what the operator
//! would: on API 3 the install disk is a `MachineInstallDiskConfig`, not a config patch.
//! `--omni-api 2|3` names the version instead, for an Omni too old to report one.
//!
//! On a cluster the operator manages, `sync` and `diff` keep what the operator writes for
//! itself (its ownership stamp, Omni's `managed-by-gitops-tools` annotation), so the diff of an
//! unchanged cluster's rendered template is empty and a sync does not take the cluster away
//! from its OmniCluster. `diff` lists the fields each update changes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use omni_client::template::{
    BackendApi, DeleteProgress, Document, FileResolver, StatusError, SyncOptions, Template,
    TemplateState, apply, delete_cluster_for, keys, plan_sync_for, read_backend_api_version,
    status_cluster, types, unsupported_message,
};

use crate::api::keys::{GITOPS_TOOL, OMNI_OWNER_ANNOTATION};
use omni_client::transport::{Client, ClientConfig};
use tokio::time::Instant;

/// Environment variable holding the service-account key (as omnictl uses it).
pub(crate) const KEY_ENV: &str = "OMNI_SERVICE_ACCOUNT_KEY";

/// Arguments of `omni template`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The template commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create, update and delete Omni resources so they match the template.
    Sync(TemplateArgs),
    /// Print what `sync` would change, without changing anything.
    Diff(TemplateArgs),
    /// Print the cluster's health; exit status 1 when it is not healthy.
    Status(ClusterArgs),
    /// Delete the cluster the template describes, waiting until it is gone.
    Delete(DeleteArgs),
}

/// Connection settings shared by every command.
#[derive(Debug, clap::Args)]
pub struct Connection {
    /// Omni API endpoint, e.g. `https://omni.example.com`.
    #[arg(long, env = "OMNI_ENDPOINT")]
    pub endpoint: String,
    /// File holding the service-account key (default: the OMNI_SERVICE_ACCOUNT_KEY variable).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Skip TLS certificate verification (the connection stays encrypted).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Give up after this long (Go duration, e.g. `5m`).
    #[arg(long, default_value = "5m")]
    pub timeout: String,
}

/// Which backend API version to translate templates for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OmniApi {
    /// The version Omni reports (what the operator uses).
    #[default]
    Auto,
    /// This version; refused when Omni reports another one (as Omni's own CLI refuses).
    Version(BackendApi),
}

/// Parses `--omni-api`: `auto`, `2` or `3`.
pub(crate) fn parse_omni_api(value: &str) -> Result<OmniApi, String> {
    if value == "auto" {
        return Ok(OmniApi::Auto);
    }
    value
        .parse::<u32>()
        .ok()
        .and_then(BackendApi::from_version)
        .map(OmniApi::Version)
        .ok_or_else(|| format!("{value:?} is not one of auto, 2, 3"))
}

/// Arguments of `sync` and `diff`.
#[derive(Debug, clap::Args)]
pub struct TemplateArgs {
    /// The cluster template (multi-document YAML); relative `file:` paths resolve next to it.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// Omni backend API version to translate for: `auto` (the one Omni reports), `2` or `3`.
    #[arg(long, value_name = "auto|2|3", default_value = "auto", value_parser = parse_omni_api)]
    pub omni_api: OmniApi,
    /// Connection settings.
    #[command(flatten)]
    pub connection: Connection,
}

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The cluster template naming the cluster.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        required_unless_present = "cluster"
    )]
    pub file: Option<PathBuf>,
    /// The cluster name, instead of a template.
    #[arg(long, conflicts_with = "file")]
    pub cluster: Option<String>,
    /// Connection settings.
    #[command(flatten)]
    pub connection: Connection,
}

/// Arguments of `delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// Which cluster.
    #[command(flatten)]
    pub target: ClusterArgs,
    /// Also remove the cluster's disconnected machines from Omni.
    #[arg(long)]
    pub destroy_machines: bool,
    /// Omni backend API version the cluster was synced for: `auto`, `2` or `3`.
    #[arg(long, value_name = "auto|2|3", default_value = "auto", value_parser = parse_omni_api)]
    pub omni_api: OmniApi,
}

/// The backend API to translate for: the one Omni reports, or the one asked for when Omni
/// reports none or the same. A mismatch is refused rather than writing what that Omni refuses
/// or does not know.
pub(crate) async fn backend_api(client: &Client, requested: OmniApi) -> anyhow::Result<BackendApi> {
    let reported = read_backend_api_version(client)
        .await
        .context("read Omni's backend API version")?;
    match requested {
        OmniApi::Auto => BackendApi::from_version(reported).with_context(|| {
            if reported == 0 {
                format!(
                    "{}; name the version with --omni-api 2 or --omni-api 3",
                    unsupported_message(reported)
                )
            } else {
                unsupported_message(reported)
            }
        }),
        OmniApi::Version(api) if reported == 0 || reported == api.version() => Ok(api),
        OmniApi::Version(api) => anyhow::bail!(
            "--omni-api {} does not match the backend API version {reported} Omni reports",
            api.version()
        ),
    }
}

pub(crate) fn client(connection: &Connection) -> anyhow::Result<Client> {
    let key = match &connection.key_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("read key file {}", path.display()))?,
        None => std::env::var(KEY_ENV)
            .with_context(|| format!("no --key-file given and {KEY_ENV} is not set"))?,
    };
    let mut config = ClientConfig::from_encoded_key(connection.endpoint.clone(), key.trim())
        .context("service-account key")?;
    config.insecure_skip_tls_verify = connection.insecure_skip_tls_verify;
    Client::new(config).context("Omni client")
}

pub(crate) fn deadline(connection: &Connection) -> anyhow::Result<Instant> {
    let timeout =
        omni_client::duration::parse_go_duration(&connection.timeout).context("--timeout")?;
    Ok(Instant::now() + timeout)
}

fn load(path: &Path) -> anyhow::Result<(Template, FileResolver)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let template = Template::parse(&text).with_context(|| format!("parse {}", path.display()))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let base = if base.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base
    };
    Ok((template, FileResolver::new(base)))
}

/// When the template's cluster is managed by the operator (its Omni `Cluster` carries the
/// operator's ownership stamp), adds what the operator writes for itself: the stamp on the
/// Cluster and Omni's `managed-by-gitops-tools` annotation on every resource. Without them a
/// diff of the operator's own rendered template shows every resource changing, and a sync
/// strips the stamp, after which the operator no longer recognises its cluster.
async fn keep_operator_bookkeeping<S: TemplateState>(
    state: &S,
    template: &mut Template,
    options: &mut SyncOptions,
) -> anyhow::Result<()> {
    let Some(name) = template.cluster().map(|c| c.name.clone()) else {
        return Ok(());
    };
    let found = state
        .get(types::CLUSTER, &name)
        .await
        .with_context(|| format!("get Omni cluster {name:?}"))?;
    let Some(stamp) = found
        .and_then(|r| r.metadata)
        .and_then(|m| m.annotations.get(OMNI_OWNER_ANNOTATION).cloned())
    else {
        return Ok(());
    };
    eprintln!(
        "note: Omni cluster {name:?} is managed by OmniCluster {stamp} ({OMNI_OWNER_ANNOTATION}); its ownership stamp is kept"
    );
    for doc in &mut template.documents {
        if let Document::Cluster(c) = doc {
            c.annotations
                .insert(OMNI_OWNER_ANNOTATION.to_string(), stamp.clone());
        }
    }
    options.annotations.insert(
        keys::MANAGED_BY_GITOPS_TOOLS.to_string(),
        GITOPS_TOOL.to_string(),
    );
    Ok(())
}

fn cluster_name(args: &ClusterArgs) -> anyhow::Result<String> {
    if let Some(name) = &args.cluster {
        return Ok(name.clone());
    }
    let path = args
        .file
        .as_deref()
        .context("give -f FILE or --cluster NAME")?;
    let (template, _) = load(path)?;
    template
        .cluster()
        .map(|c| c.name.clone())
        .context("the template has no single Cluster document")
}

/// Runs `omni template ...`, printing to stdout.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout();
    run_with_output(args, &mut stdout).await
}

/// Runs `omni template ...`, writing what would go to stdout into `out`.
pub async fn run_with_output(
    args: Args,
    out: &mut (impl std::io::Write + Send),
) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Sync(a) => {
            let (mut template, files) = load(&a.file)?;
            let client = client(&a.connection)?;
            let until = deadline(&a.connection)?;
            let mut options = SyncOptions {
                api: backend_api(&client, a.omni_api).await?,
                ..SyncOptions::default()
            };
            let state = client.template_state(until);
            keep_operator_bookkeeping(&state, &mut template, &mut options).await?;
            let plan = plan_sync_for(&state, &template, &files, &options).await?;
            let mut output = Vec::new();
            let result = apply(&state, &plan, until, &mut output).await;
            for line in &output {
                writeln!(out, "{line}")?;
            }
            result?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Diff(a) => {
            let (mut template, files) = load(&a.file)?;
            let client = client(&a.connection)?;
            let mut options = SyncOptions {
                api: backend_api(&client, a.omni_api).await?,
                ..SyncOptions::default()
            };
            let state = client.template_state(deadline(&a.connection)?);
            keep_operator_bookkeeping(&state, &mut template, &mut options).await?;
            let plan = plan_sync_for(&state, &template, &files, &options).await?;
            if plan.is_empty() {
                writeln!(out, "no changes")?;
            }
            for line in plan.lines_with_fields(true) {
                writeln!(out, "{line}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status(a) => {
            let name = cluster_name(&a)?;
            let client = client(&a.connection)?;
            let until = deadline(&a.connection)?;
            match status_cluster(&client.template_state(until), &name, until).await {
                Ok(health) => {
                    writeln!(out, "{}", health.summary)?;
                    Ok(if health.healthy {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    })
                }
                Err(StatusError::NotFound(_)) => {
                    writeln!(out, "cluster {name} does not exist in Omni")?;
                    Ok(ExitCode::FAILURE)
                }
                Err(e) => Err(e.into()),
            }
        }
        Command::Delete(a) => {
            let name = cluster_name(&a.target)?;
            let client = client(&a.target.connection)?;
            let until = deadline(&a.target.connection)?;
            let api = backend_api(&client, a.omni_api).await?;
            let state = client.template_state(until);
            loop {
                let mut output = Vec::new();
                let progress =
                    delete_cluster_for(&state, &name, a.destroy_machines, api, &mut output).await;
                for line in &output {
                    writeln!(out, "{line}")?;
                }
                match progress? {
                    DeleteProgress::Done => return Ok(ExitCode::SUCCESS),
                    DeleteProgress::InProgress { waiting_for } => {
                        if Instant::now() >= until {
                            let names: Vec<String> =
                                waiting_for.iter().map(ToString::to_string).collect();
                            anyhow::bail!("timed out waiting for {}", names.join(", "));
                        }
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                }
            }
        }
    }
}
