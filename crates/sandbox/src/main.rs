//! `omni-sandbox`: the whole system in one command. See `docs/sandbox.md`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use omni_sandbox::cli::Args;
use omni_sandbox::{Options, Sandbox, find_helm, repo_root, status};

/// Finds helm, installing the test tools when there is none.
async fn helm(explicit: Option<&std::path::Path>) -> anyhow::Result<PathBuf> {
    if let Some(h) = find_helm(explicit) {
        return Ok(h);
    }
    println!("==> helm not found: running scripts/install-test-tools");
    // Only helm and kubectl: the real control plane the script also builds is for the tests.
    let status = tokio::process::Command::new(repo_root().join("scripts/install-test-tools"))
        .env("SKIP_CONTROL_PLANE", "1")
        .status()
        .await
        .context("running scripts/install-test-tools")?;
    anyhow::ensure!(status.success(), "scripts/install-test-tools failed");
    find_helm(None).context("helm is still missing after scripts/install-test-tools")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let helm = helm(args.helm_binary.as_deref()).await?;
    let opts = Options {
        listen: args.listen,
        dir: args.dir.clone(),
        helm,
        empty: args.empty,
        as_deployed: match args.as_deployed {
            false => None,
            true => Some(omni_sandbox::AsDeployed {
                operator_binary: match args.operator_binary {
                    Some(p) => p,
                    None => std::env::current_exe()?
                        .parent()
                        .context("the sandbox binary has no directory")?
                        .join("omni-operator"),
                },
                values: args.values.clone(),
            }),
        },
    };
    let started = tokio::time::Instant::now();
    let sandbox = Sandbox::start(&opts, |step| println!("==> {step}")).await?;
    let kubeconfig = sandbox.kubeconfig.display().to_string();
    println!("==> management API at {}", sandbox.management.base_url);
    println!("==> kubeconfig written to {kubeconfig}");
    println!("==> Omni (omni-sim) at {}", sandbox.omni.endpoint());
    println!(
        "==> operator metrics at {}://{}/metrics",
        if args.values.iter().any(|v| v == "metrics.secure=true") {
            "https"
        } else {
            "http"
        },
        sandbox.metrics
    );

    let expected: BTreeSet<(String, String)> = sandbox.applied.iter().cloned().collect();
    let deadline = started + args.timeout;
    let mut last = String::new();
    let outcome = loop {
        if expected.is_empty() {
            break Ok(());
        }
        let rows = status::rows(&sandbox.client).await.unwrap_or_default();
        let table = status::render(&rows);
        if table != last {
            println!("\n{table}");
            last = table;
        }
        let ready: BTreeSet<(String, String)> = rows
            .iter()
            .filter(|r| r.is_ready())
            .map(|r| (r.kind.clone(), r.name.clone()))
            .collect();
        if expected.is_subset(&ready) {
            println!(
                "==> all samples Ready after {}s",
                started.elapsed().as_secs()
            );
            break Ok(());
        }
        if args.exit_when_ready && tokio::time::Instant::now() > deadline {
            let failing: Vec<String> = rows
                .iter()
                .filter(|r| expected.contains(&(r.kind.clone(), r.name.clone())) && !r.is_ready())
                .map(|r| {
                    format!(
                        "{}/{}: {} {}: {}",
                        r.kind, r.name, r.ready, r.reason, r.message
                    )
                })
                .collect();
            break Err(failing);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = tokio::signal::ctrl_c() => {
                println!("==> interrupted");
                sandbox.shutdown().await;
                return Ok(());
            }
        }
    };
    match outcome {
        Err(failing) => {
            eprintln!(
                "==> not every sample became Ready within {}s:",
                args.timeout.as_secs()
            );
            for f in failing {
                eprintln!("    {f}");
            }
            sandbox.shutdown().await;
            std::process::exit(1);
        }
        Ok(()) if args.exit_when_ready => {
            sandbox.shutdown().await;
            Ok(())
        }
        Ok(()) => {
            println!(
                "==> serving until Ctrl-C. Try:\n    kubectl --kubeconfig {kubeconfig} get omni\n    kubectl --kubeconfig {kubeconfig} apply -f your-manifests.yaml"
            );
            let _ = tokio::signal::ctrl_c().await;
            println!("==> shutting down");
            sandbox.shutdown().await;
            Ok(())
        }
    }
}
