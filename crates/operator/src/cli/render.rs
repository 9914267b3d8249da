//! `omni-operator render -f FILE...`: prints the Omni cluster template each OmniCluster in the
//! given manifests renders to, exactly as the controller would sync it. Inputs are read as
//! `validate` reads them: files, directories, `-` for stdin, `kind: List` expanded.
//!
//! Output: for every OmniCluster (sorted by namespace/name) a comment line
//! `# OmniCluster NS/NAME (hash HEX)` followed by the template; templates are separated by `---`.
//! Objects without a namespace are placed in `default`, as `kubectl apply` would. Render errors
//! go to stderr and make the exit status 1; the other clusters are still printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use omni_client::template::FileResolver;

use crate::api::{GROUP, OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers, VERSION};
use crate::cli::manifests::{self, Entry};
use crate::domain::render::{file_resolver, render};

/// Arguments of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file (multi-document YAML), or a directory whose `.yaml`/`.yml`/`.json` files
    /// are all read; repeat for several, `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Also run Omni's client-side template validation, which reads file-backed patches and
    /// manifests. They are confined to the current directory, narrowed by the cluster's
    /// `spec.templateRoot` as the operator does, or to DIR when `--template-root` is given.
    #[arg(long)]
    pub validate: bool,
    /// Directory that file-backed patches and manifests are confined to when validating; it
    /// replaces `spec.templateRoot` (a path in the operator's container) for local checkouts.
    #[arg(long, value_name = "DIR", requires = "validate")]
    pub template_root: Option<PathBuf>,
}

/// The objects of our API group found in a set of manifests.
#[derive(Debug, Default)]
pub struct Objects {
    /// OmniClusters.
    pub clusters: Vec<OmniCluster>,
    /// OmniControlPlanes.
    pub(crate) control_planes: Vec<OmniControlPlane>,
    /// OmniWorkers.
    pub workers: Vec<OmniWorkers>,
    /// OmniMachines.
    pub machines: Vec<OmniMachine>,
}

fn decode<T: serde::de::DeserializeOwned + kube::ResourceExt>(
    value: serde_json::Value,
) -> Result<T, String> {
    let mut object: T = crate::api::decode(&value)?;
    if object.namespace().is_none() {
        object.meta_mut().namespace = Some("default".into());
    }
    Ok(object)
}

impl Objects {
    /// Adds one object if it is of a cluster-template kind; other objects are ignored. The
    /// error says which field does not decode.
    pub(crate) fn add(&mut self, value: serde_json::Value) -> Result<(), String> {
        let api_version = format!("{GROUP}/{VERSION}");
        if value.get("apiVersion").and_then(|v| v.as_str()) != Some(api_version.as_str()) {
            return Ok(());
        }
        match value.get("kind").and_then(|v| v.as_str()) {
            Some("OmniCluster") => self.clusters.push(decode(value)?),
            Some("OmniControlPlane") => self.control_planes.push(decode(value)?),
            Some("OmniWorkers") => self.workers.push(decode(value)?),
            Some("OmniMachine") => self.machines.push(decode(value)?),
            _ => {}
        }
        Ok(())
    }

    /// Adds the cluster-template kinds of one multi-document YAML text (`label` names it in
    /// errors, with the line and column).
    pub(crate) fn add_text(&mut self, label: &str, text: &str) -> anyhow::Result<()> {
        for entry in manifests::entries(text) {
            match entry {
                Entry::Unreadable { position, message } => {
                    anyhow::bail!("{label}:{position}: {message}")
                }
                // Not an object, so not one of ours either.
                Entry::NotAnObject { .. } => {}
                Entry::Object(manifest) => {
                    let at = manifest.positions.root();
                    let kind = manifest.value["kind"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    self.add(manifest.value).map_err(|e| {
                        anyhow::anyhow!("{label}:{at}: {kind} does not decode: {e}")
                    })?;
                }
            }
        }
        Ok(())
    }
}

/// Renders every cluster; returns the text for stdout and one error line per failed cluster.
///
/// With `validate`, files are read only inside `validate_root` when given (replacing
/// `spec.templateRoot`), else inside the current directory narrowed by `spec.templateRoot`.
pub(crate) fn render_all(
    objects: &Objects,
    validate_root: Option<&Path>,
    validate: bool,
) -> (String, Vec<String>) {
    let mut clusters: Vec<&OmniCluster> = objects.clusters.iter().collect();
    clusters.sort_by(|a, b| {
        (a.metadata.namespace.as_ref(), a.metadata.name.as_ref())
            .cmp(&(b.metadata.namespace.as_ref(), b.metadata.name.as_ref()))
    });
    let mut out = String::new();
    let mut errors = Vec::new();
    for cluster in clusters {
        let id = format!(
            "{}/{}",
            cluster.metadata.namespace.as_deref().unwrap_or_default(),
            cluster.metadata.name.as_deref().unwrap_or_default()
        );
        let rendered = match render(
            cluster,
            &objects.control_planes,
            &objects.workers,
            &objects.machines,
        ) {
            Ok(r) => r,
            Err(e) => {
                errors.push(format!("OmniCluster {id}: {e}"));
                continue;
            }
        };
        if validate {
            let files = match validate_root {
                Some(dir) => FileResolver::with_root(dir),
                None => match std::env::current_dir() {
                    Ok(cwd) => file_resolver(cluster, Some(&cwd)),
                    Err(e) => FileResolver::disabled(format!("no current directory: {e}")),
                },
            };
            if let Err(e) = rendered.template.validate(&files) {
                errors.push(format!("OmniCluster {id}: {e}"));
                continue;
            }
        }
        if !out.is_empty() {
            out.push_str("---\n");
        }
        out.push_str(&format!("# OmniCluster {id} (hash {})\n", rendered.hash));
        out.push_str(&rendered.yaml);
    }
    (out, errors)
}

/// Runs the subcommand.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut objects = Objects::default();
    for input in manifests::read_inputs(&args.files)? {
        objects.add_text(&input.label, &input.text)?;
    }
    anyhow::ensure!(
        !objects.clusters.is_empty(),
        "no OmniCluster ({GROUP}/{VERSION}) found in the given manifests"
    );
    let (out, errors) = render_all(&objects, args.template_root.as_deref(), args.validate);
    print!("{out}");
    for e in &errors {
        eprintln!("error: {e}");
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
