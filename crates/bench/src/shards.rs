//! `omni-bench --shards N`: the fleet split over N operator processes by the shard label, as
//! the chart's `sharding.shards` deploys it. Shard 0 is the default shard: its objects carry no
//! label and its process runs with `!sharding.omni.texashpc.com/key`; shard `k` > 0 labels its
//! objects `shard<k>` and its process selects them. Objects are dealt round-robin per kind.
//!
//! Each process writes under its own field manager (`omni-operator`, and
//! `omni-operator-shard-shard<k>`), so the objects' `managedFields` show which processes wrote
//! each object: the run fails if any object was written by two shards, or by a shard it does not
//! belong to.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::RunConfig;
use crate::emulators::{self, Emulators};
use crate::fleet::{self, FleetSpec};
use crate::operator::OperatorProcess;
use crate::phases::{self, KINDS, Progress};

/// The shard label (the operator's `api::keys::SHARD_LABEL`).
pub const SHARD_LABEL: &str = "sharding.omni.texashpc.com/key";

/// Shard `k`'s label value (`None` for the default shard, 0).
fn shard_value(k: usize) -> Option<String> {
    (k > 0).then(|| format!("shard{k}"))
}

/// The field manager shard `k`'s process writes under (its User-Agent's program name).
pub fn manager(k: usize) -> String {
    match shard_value(k) {
        None => "omni-operator".to_owned(),
        Some(v) => format!("omni-operator-shard-{v}"),
    }
}

/// The `--watch-label-selector` of shard `k`.
fn selector(k: usize) -> String {
    match shard_value(k) {
        None => format!("!{SHARD_LABEL}"),
        Some(v) => format!("{SHARD_LABEL}={v}"),
    }
}

/// One shard's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardFigures {
    /// Its label value (`default`: no label).
    pub shard: String,
    /// Objects labelled for it.
    pub objects: usize,
    /// Objects it wrote (finalizer, status).
    pub written: usize,
    /// CPU seconds until convergence.
    pub cpu_secs: f64,
    /// Peak RSS until convergence, in MiB.
    pub peak_rss_mib: f64,
    /// CPU seconds per minute during the idle window.
    pub idle_cpu_secs_per_minute: f64,
}

/// The result of a sharded run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardedRun {
    /// The fleet.
    pub fleet: FleetSpec,
    /// Seconds from the processes' start until everything converged.
    pub converged_secs: f64,
    /// Whether it converged within the limit.
    pub converged: bool,
    /// The state at the end of the cold start.
    pub progress: Progress,
    /// Per shard, shard 0 (the default shard) first.
    pub shards: Vec<ShardFigures>,
    /// Objects written by more than one shard (must be empty).
    pub written_by_two: Vec<String>,
    /// Objects written by a shard they do not belong to (must be empty).
    pub written_by_another: Vec<String>,
    /// CPU seconds of the bench process (the emulators) during the cold start.
    pub emulator_cpu_secs: f64,
    /// Management writes of all shards during the cold start.
    pub management_writes: u64,
    /// Writes of all shards (all APIs) during the idle window, per minute.
    pub idle_writes_per_minute: f64,
    /// Connections the shards opened to Omni.
    pub omni_connections: u64,
}

/// Deals the fleet's objects round-robin over `shards` shards (per kind, by name), labelling
/// those of shards 1.. in kube-sim's store before any operator runs. Returns each object's shard
/// by `kind/name`.
fn label(emu: &Emulators, shards: usize) -> anyhow::Result<BTreeMap<String, usize>> {
    let store = emu.management.store();
    let mut owner = BTreeMap::new();
    for kind in KINDS {
        let ar = emulators::api_resource(kind)?;
        let mut objects = store.list_objects(&ar.group, &ar.plural, Some(fleet::NAMESPACE));
        objects.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        for (i, mut obj) in objects.into_iter().enumerate() {
            let k = i % shards;
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            owner.insert(format!("{kind}/{name}"), k);
            let Some(value) = shard_value(k) else {
                continue;
            };
            obj["metadata"]["labels"][SHARD_LABEL] = Value::String(value);
            store
                .update(&ar.group, &ar.plural, Some(fleet::NAMESPACE), &name, obj)
                .map_err(|e| anyhow::anyhow!("labelling {kind}/{name}: {e:?}"))?;
        }
    }
    Ok(owner)
}

/// Which shards wrote each object, from its `managedFields` (`kind/name` → shard numbers).
fn writers(emu: &Emulators, shards: usize) -> anyhow::Result<BTreeMap<String, Vec<usize>>> {
    let managers: BTreeMap<String, usize> = (0..shards).map(|k| (manager(k), k)).collect();
    let store = emu.management.store();
    let mut out = BTreeMap::new();
    for kind in KINDS {
        let ar = emulators::api_resource(kind)?;
        for obj in store.list_objects(&ar.group, &ar.plural, Some(fleet::NAMESPACE)) {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            let mut by: Vec<usize> = obj["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| managers.get(f["manager"].as_str()?).copied())
                .collect();
            by.sort_unstable();
            by.dedup();
            out.insert(format!("{kind}/{name}"), by);
        }
    }
    Ok(out)
}

/// Runs the fleet over `shards` operator processes: cold start, settle, idle window.
pub async fn run(
    config: &RunConfig,
    spec: &FleetSpec,
    shards: usize,
) -> anyhow::Result<ShardedRun> {
    anyhow::ensure!(shards >= 1, "--shards must be at least 1");
    spec.validate()?;
    let dir = tempfile::Builder::new()
        .prefix("omni-bench-shards-")
        .tempdir()?;
    let emu = Emulators::start(
        spec,
        config.omni_latency,
        dir.path(),
        config.helm.as_deref(),
    )
    .await?;
    phases::apply(&emu, spec).await?;
    let owner = label(&emu, shards)?;
    let mut processes = Vec::with_capacity(shards);
    for k in 0..shards {
        let extra = [format!("--watch-label-selector={}", selector(k))];
        processes.push(OperatorProcess::start_with(
            &config.operator_binary,
            &emu.operator_kubeconfig,
            &dir.path().join(format!("shard-{k}")),
            config.helm.as_deref(),
            &extra,
        )?);
    }
    let result = measure(&emu, spec, config, &mut processes, &owner).await;
    for p in processes {
        p.stop().await;
    }
    emu.shutdown().await;
    result
}

async fn measure(
    emu: &Emulators,
    spec: &FleetSpec,
    config: &RunConfig,
    processes: &mut [OperatorProcess],
    owner: &BTreeMap<String, usize>,
) -> anyhow::Result<ShardedRun> {
    let started = Instant::now();
    let own_cpu = crate::operator::own_cpu_secs();
    let all_alive = |processes: &mut [OperatorProcess]| {
        processes
            .iter_mut()
            .try_for_each(OperatorProcess::check_alive)
    };
    let (converged, progress) =
        phases::until_converged(emu, spec, started, config.cold_start_limit, || {
            all_alive(processes)
        })
        .await?;
    let converged_secs = started.elapsed().as_secs_f64();
    let emulator_cpu_secs = crate::operator::own_cpu_secs() - own_cpu;
    let cold: Vec<_> = processes
        .iter()
        .map(OperatorProcess::sample)
        .collect::<anyhow::Result<_>>()?;
    let management_writes = phases::writes(emu).0.management;
    // Settle (Omni's status moving after the cold start), then the idle window.
    phases::settle(emu, Duration::from_secs(120), || all_alive(processes)).await?;
    let before = phases::writes(emu).0.total();
    let idle_started = Instant::now();
    tokio::time::sleep(config.idle).await;
    let idle_secs = idle_started.elapsed().as_secs_f64();
    let idle_writes = phases::writes(emu).0.total() - before;
    let after: Vec<_> = processes
        .iter_mut()
        .map(|p| {
            p.check_alive()?;
            p.sample()
        })
        .collect::<anyhow::Result<_>>()?;

    let by_object = writers(emu, processes.len())?;
    let mut figures: Vec<ShardFigures> = (0..processes.len())
        .map(|k| ShardFigures {
            shard: shard_value(k).unwrap_or_else(|| "default".to_owned()),
            objects: owner.values().filter(|o| **o == k).count(),
            written: by_object.values().filter(|by| by.contains(&k)).count(),
            cpu_secs: cold[k].cpu_secs,
            peak_rss_mib: cold[k].peak_rss_bytes as f64 / (1024.0 * 1024.0),
            idle_cpu_secs_per_minute: (after[k].cpu_secs - cold[k].cpu_secs) * 60.0 / idle_secs,
        })
        .collect();
    figures
        .iter_mut()
        .for_each(|f| f.peak_rss_mib = (f.peak_rss_mib * 10.0).round() / 10.0);
    let written_by_two = by_object
        .iter()
        .filter(|(_, by)| by.len() > 1)
        .map(|(what, by)| format!("{what} by shards {by:?}"))
        .collect();
    let written_by_another = by_object
        .iter()
        .filter(|(what, by)| by.iter().any(|k| owner.get(*what) != Some(k)))
        .map(|(what, by)| format!("{what} (shard {:?}) by shards {by:?}", owner.get(what)))
        .collect();
    Ok(ShardedRun {
        fleet: *spec,
        converged_secs,
        converged,
        progress,
        shards: figures,
        written_by_two,
        written_by_another,
        emulator_cpu_secs,
        management_writes,
        idle_writes_per_minute: idle_writes as f64 * 60.0 / idle_secs,
        omni_connections: emu.omni.connections_accepted(),
    })
}

/// The run as a table; `Err` with the table when an object was written by two shards or by the
/// wrong one, or the run did not converge.
pub fn table(run: &ShardedRun) -> Result<String, String> {
    let mut out = format!(
        "{} clusters, {} syncs over {} shards: converged {} in {:.1} s ({}/{} Ready); \
         emulators {:.1} CPU s; {} management writes; idle writes {:.1}/min; {} Omni connections\n",
        run.fleet.clusters,
        run.fleet.syncs,
        run.shards.len(),
        if run.converged { "yes" } else { "NO" },
        run.converged_secs,
        run.progress.ready,
        run.progress.objects,
        run.emulator_cpu_secs,
        run.management_writes,
        run.idle_writes_per_minute,
        run.omni_connections,
    );
    out.push_str(
        "| shard | objects | written | CPU s (cold start) | peak RSS MiB | idle CPU s/min |\n",
    );
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for s in &run.shards {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.2} |\n",
            s.shard, s.objects, s.written, s.cpu_secs, s.peak_rss_mib, s.idle_cpu_secs_per_minute
        ));
    }
    out.push_str(&format!(
        "objects written by two shards: {}; by a shard not theirs: {}\n",
        run.written_by_two.len(),
        run.written_by_another.len()
    ));
    for what in run
        .written_by_two
        .iter()
        .chain(&run.written_by_another)
        .take(10)
    {
        out.push_str(&format!("    {what}\n"));
    }
    if run.written_by_two.is_empty() && run.written_by_another.is_empty() && run.converged {
        Ok(out)
    } else {
        Err(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_zero_is_the_default_shard_and_the_others_are_named() {
        assert_eq!(selector(0), format!("!{SHARD_LABEL}"));
        assert_eq!(manager(0), "omni-operator");
        assert_eq!(selector(2), format!("{SHARD_LABEL}=shard2"));
        assert_eq!(manager(2), "omni-operator-shard-shard2");
    }
}
