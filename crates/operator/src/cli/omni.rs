//! `omni-operator omni ...`: debugging commands that talk to Omni directly with a
//! service-account key, exactly as the operator's controllers do.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use omni_client::{Client, ClientConfig, ServiceAccountKey};

/// Arguments of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `omni` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check the endpoint and key by listing clusters; prints `connected to <endpoint>`.
    Ping(Connection),
    /// Mint a service-account kubeconfig for one cluster.
    Kubeconfig(KubeconfigArgs),
    /// Cluster templates (omnictl equivalents).
    Template(crate::cli::omni_template::Args),
    /// Print the OmniCluster, OmniControlPlane, OmniWorkers and OmniMachine manifests of an
    /// existing Omni cluster, with the adopt annotation, and what they cannot express.
    Export(crate::cli::omni_export::Args),
}

/// How to reach and authenticate to Omni.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// Omni API URL (`https://`, `http://` or `grpc://`).
    #[arg(long, env = "OMNI_ENDPOINT")]
    pub endpoint: String,
    /// File holding the service-account key (base64, as `omnictl serviceaccount create`
    /// prints it). Defaults to `$OMNI_SERVICE_ACCOUNT_KEY`, then `$SIDERO_SERVICE_ACCOUNT_KEY`.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// Do not verify the server's TLS certificate.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

/// Arguments of `omni kubeconfig`.
#[derive(Debug, clap::Args)]
pub struct KubeconfigArgs {
    /// Connection settings.
    #[command(flatten)]
    pub connection: Connection,
    /// Omni cluster name.
    #[arg(long)]
    pub cluster: String,
    /// Kubernetes user name the token is issued for.
    #[arg(long)]
    pub user: String,
    /// Kubernetes group (repeatable, at least one). A cluster-admin-equivalent user or group
    /// (`system:masters`, any other `system:` name but `system:authenticated`,
    /// `kubeadm:cluster-admins`, or one given with `--privileged-identity`) also needs
    /// `--allow-cluster-admin`, as an OmniKubeconfigExport needs `allowClusterAdmin`.
    #[arg(long = "group", required = true)]
    pub groups: Vec<String>,
    /// Allow requesting a cluster-admin-equivalent user or group.
    #[arg(long)]
    pub(crate) allow_cluster_admin: bool,
    /// A further user or group to treat like `system:masters` (repeatable or comma-separated).
    #[arg(long = "privileged-identity", value_delimiter = ',')]
    pub(crate) privileged_identities: Vec<String>,
    /// Token lifetime as a Go duration (`1h`, `24h`, `8760h`).
    #[arg(long, default_value = "1h")]
    pub ttl: String,
    /// Longest `--ttl` accepted (Go duration).
    #[arg(long, default_value = "8760h", value_parser = crate::cli::run::parse_positive_duration)]
    pub(crate) max_ttl: std::time::Duration,
    /// Write the kubeconfig to this file (mode 0600) instead of standard output.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

impl Connection {
    /// Reads the key and builds a client (inside the Tokio runtime).
    pub fn client(&self) -> anyhow::Result<Client> {
        let encoded = match &self.key_file {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("read key file {}", path.display()))?,
            None => std::env::var("OMNI_SERVICE_ACCOUNT_KEY")
                .or_else(|_| std::env::var("SIDERO_SERVICE_ACCOUNT_KEY"))
                .map_err(|_| {
                    anyhow::anyhow!(
                        "no service-account key: pass --key-file or set OMNI_SERVICE_ACCOUNT_KEY"
                    )
                })?,
        };
        let key = ServiceAccountKey::parse(&encoded).context("load service-account key")?;
        let mut config = ClientConfig::new(self.endpoint.clone(), key);
        config.insecure_skip_tls_verify = self.insecure_skip_tls_verify;
        Client::new(config).context("create Omni client")
    }
}

/// Checks the identity asked for: groups are required (there is no default: omnictl's is
/// `system:masters`, and a debugging command should not hand out cluster admin unless asked to
/// in so many words), and [`crate::domain::identity_policy`] decides the rest, as for an export.
fn check_request(args: &KubeconfigArgs, ttl: std::time::Duration) -> anyhow::Result<()> {
    use crate::domain::identity_policy::{IdentityPolicy, MintRequest, Named, PolicyFlags};
    if args.groups.is_empty() || args.groups.iter().any(|g| g.trim().is_empty()) {
        anyhow::bail!("--group: give at least one non-blank Kubernetes group");
    }
    let policy = IdentityPolicy {
        honour_allow_cluster_admin: true,
        privileged: args
            .privileged_identities
            .iter()
            .map(|s| s.trim().to_string())
            .collect(),
        max_ttl: args.max_ttl,
        flags: PolicyFlags {
            consent: None,
            privileged: "--privileged-identity",
            max_ttl: "--max-ttl",
        },
    };
    let mut identities = vec![Named {
        field: "--user".into(),
        name: &args.user,
    }];
    identities.extend(args.groups.iter().map(|g| Named {
        field: "--group".into(),
        name: g,
    }));
    let refusals = policy.refusals(&MintRequest {
        identities,
        consent_field: "--allow-cluster-admin",
        consent_hint: "--allow-cluster-admin",
        allow_cluster_admin: args.allow_cluster_admin,
        ttl_field: "--ttl",
        ttl,
    });
    if !refusals.is_empty() {
        let messages: Vec<String> = refusals.iter().map(ToString::to_string).collect();
        anyhow::bail!("{}", messages.join("; "));
    }
    Ok(())
}

/// Runs the subcommand.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Ping(connection) => {
            let client = connection.client()?;
            let endpoint = client.ping().await.context("list Omni clusters")?;
            println!("connected to {endpoint}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Kubeconfig(args) => kubeconfig(args).await,
        Command::Template(args) => crate::cli::omni_template::run(args).await,
        Command::Export(args) => crate::cli::omni_export::run(args).await,
    }
}

async fn kubeconfig(args: KubeconfigArgs) -> anyhow::Result<ExitCode> {
    let ttl = omni_client::duration::parse_go_duration(&args.ttl).context("--ttl")?;
    check_request(&args, ttl)?;
    let client = args.connection.client()?;
    let kubeconfig = client
        .kubeconfig(&args.cluster, ttl, &args.user, &args.groups)
        .await
        .with_context(|| format!("get kubeconfig for Omni cluster {:?}", args.cluster))?;
    match args.output {
        Some(path) => write_private(&path, &kubeconfig)
            .with_context(|| format!("write {}", path.display()))?,
        None => std::io::stdout()
            .write_all(&kubeconfig)
            .context("write kubeconfig")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a file readable only by its owner: the kubeconfig holds a bearer token.
fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(data)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn kubeconfig_flags_parse_with_repeatable_groups() {
        let cli = Cli::try_parse_from([
            "x",
            "kubeconfig",
            "--endpoint",
            "https://omni.example.com",
            "--key-file",
            "/k",
            "--cluster",
            "prod",
            "--user",
            "ci",
            "--group",
            "a",
            "--group",
            "b",
            "--ttl",
            "24h",
        ])
        .expect("parses");
        match cli.args.command {
            Command::Kubeconfig(k) => {
                assert_eq!(k.groups, ["a", "b"]);
                assert_eq!(k.ttl, "24h");
                assert_eq!(k.cluster, "prod");
                assert!(!k.connection.insecure_skip_tls_verify);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kubeconfig_needs_a_group_and_cluster_admin_needs_consent() {
        let base = [
            "x",
            "kubeconfig",
            "--endpoint",
            "https://h",
            "--cluster",
            "prod",
            "--user",
            "ci",
        ];
        // No silent default group (it used to be system:masters).
        assert!(Cli::try_parse_from(base).is_err());
        let check = |user: &str, groups: &[&str], extra: &[&str]| {
            let mut argv: Vec<&str> = base.to_vec();
            argv.retain(|a| *a != "ci" && *a != "--user");
            argv.extend(["--user", user]);
            for g in groups {
                argv.extend(["--group", g]);
            }
            argv.extend(extra);
            match Cli::try_parse_from(argv).expect("parses").args.command {
                Command::Kubeconfig(k) => {
                    let ttl = omni_client::duration::parse_go_duration(&k.ttl).expect("ttl");
                    check_request(&k, ttl).map_err(|e| e.to_string())
                }
                other => panic!("{other:?}"),
            }
        };
        for (user, group) in [
            ("ci", "system:masters"),
            ("ci", "kubeadm:cluster-admins"),
            ("system:kube-controller-manager", "viewers"),
            ("system:node:x", "viewers"),
        ] {
            let err = check(user, &[group], &[]).expect_err("refused");
            assert!(err.contains("requires --allow-cluster-admin"), "{err}");
            assert_eq!(check(user, &[group], &["--allow-cluster-admin"]), Ok(()));
        }
        let err = check(
            "ci",
            &["platform:admins"],
            &["--privileged-identity=platform:admins"],
        )
        .expect_err("added identity");
        assert!(err.contains("--privileged-identity"), "{err}");
        let err = check("ci", &["viewers"], &["--ttl", "87600h"]).expect_err("too long");
        assert!(err.contains("--ttl") && err.contains("--max-ttl"), "{err}");
        assert_eq!(
            check("ci", &["viewers"], &["--ttl", "48h", "--max-ttl", "48h"]),
            Ok(())
        );
        assert!(check("ci", &[" "], &[]).is_err());
        assert_eq!(check("ci", &["viewers"], &[]), Ok(()));
    }

    #[test]
    fn ping_accepts_insecure_flag() {
        let cli = Cli::try_parse_from([
            "x",
            "ping",
            "--endpoint",
            "https://h",
            "--insecure-skip-tls-verify",
        ])
        .expect("parses");
        assert!(matches!(
            cli.args.command,
            Command::Ping(Connection {
                insecure_skip_tls_verify: true,
                ..
            })
        ));
    }

    fn connection(sim: &omni_sim::RunningOmniSim, key_file: &std::path::Path) -> Connection {
        Connection {
            endpoint: sim.endpoint().to_owned(),
            key_file: Some(key_file.to_owned()),
            insecure_skip_tls_verify: false,
        }
    }

    #[tokio::test]
    async fn ping_and_kubeconfig_work_against_the_simulator() {
        let sim = omni_sim::OmniSim::builder().start().await.expect("sim");
        let key = sim
            .register_service_account("cli", omni_sim::Role::Operator)
            .expect("account");
        let dir = tempfile::tempdir().expect("tempdir");
        let key_file = dir.path().join("key");
        // Files usually end with a newline; the key is trimmed.
        std::fs::write(&key_file, format!("{key}\n")).expect("write key");

        let code = run(Args {
            command: Command::Ping(connection(&sim, &key_file)),
        })
        .await
        .expect("ping");
        assert_eq!(code, ExitCode::SUCCESS);

        let client = connection(&sim, &key_file).client().expect("client");
        let cluster = omni_client::resources::TypedResource::new(
            "cli-demo",
            omni_client::proto::specs::ClusterSpec {
                kubernetes_version: "1.32.3".into(),
                talos_version: "1.9.5".into(),
                features: Some(Default::default()),
                backup_configuration: None,
            },
        );
        client
            .state()
            .create(cluster.into_resource(), "")
            .await
            .expect("create cluster");
        let uuid_ready = async {
            while client
                .state()
                .get_optional(
                    omni_client::resources::NAMESPACE,
                    omni_client::resources::CLUSTER_UUID_TYPE,
                    "cli-demo",
                )
                .await
                .expect("get")
                .is_none()
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), uuid_ready)
            .await
            .expect("ClusterUUID appears");

        let output = dir.path().join("kubeconfig");
        let code = run(Args {
            command: Command::Kubeconfig(KubeconfigArgs {
                connection: connection(&sim, &key_file),
                cluster: "cli-demo".into(),
                user: "ci".into(),
                groups: vec!["ci".into()],
                allow_cluster_admin: false,
                privileged_identities: Vec::new(),
                ttl: "2h".into(),
                max_ttl: crate::domain::identity_policy::DEFAULT_MAX_TTL,
                output: Some(output.clone()),
            }),
        })
        .await
        .expect("kubeconfig");
        assert_eq!(code, ExitCode::SUCCESS);
        let yaml = std::fs::read_to_string(&output).expect("read kubeconfig");
        assert!(yaml.contains("kind: Config"), "{yaml}");

        let err = run(Args {
            command: Command::Kubeconfig(KubeconfigArgs {
                connection: connection(&sim, &key_file),
                cluster: "cli-demo".into(),
                user: "ci".into(),
                groups: vec!["ci".into()],
                allow_cluster_admin: false,
                privileged_identities: Vec::new(),
                ttl: "2 hours".into(),
                max_ttl: crate::domain::identity_policy::DEFAULT_MAX_TTL,
                output: None,
            }),
        })
        .await
        .expect_err("bad ttl");
        assert!(format!("{err:#}").contains("--ttl"), "{err:#}");
        sim.shutdown().await;
    }

    #[tokio::test]
    async fn a_bad_key_file_is_reported_without_its_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key_file = dir.path().join("key");
        std::fs::write(
            &key_file,
            "OMNI_ENDPOINT=https://x\nOMNI_SERVICE_ACCOUNT_KEY=c2VjcmV0",
        )
        .expect("write");
        let err = run(Args {
            command: Command::Ping(Connection {
                endpoint: "https://omni.example.com".into(),
                key_file: Some(key_file),
                insecure_skip_tls_verify: false,
            }),
        })
        .await
        .expect_err("env block rejected");
        let message = format!("{err:#}");
        assert!(message.contains("environment assignments"), "{message}");
        assert!(!message.contains("c2VjcmV0"), "{message}");
    }

    #[test]
    fn private_files_are_owner_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        write_private(&path, b"token").expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(std::fs::read(&path).expect("read"), b"token");
    }
}
