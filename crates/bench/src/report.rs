//! Summaries of runs: the readable tables, the growth-exponent fit of a sweep, and the medians
//! and ratios of a baseline comparison.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::RunResult;

/// The figures compared across runs, by name; every one is "lower is better".
pub fn figures(r: &RunResult) -> BTreeMap<&'static str, f64> {
    let mut f = BTreeMap::new();
    f.insert("cold_start_secs", r.cold_start.converged_secs);
    f.insert(
        "cold_start_operator_cpu_secs",
        r.cold_start.operator_cpu_secs,
    );
    f.insert("operator_peak_rss_mib", r.cold_start.operator_peak_rss_mib);
    f.insert(
        "operator_peak_sockets",
        r.cold_start.operator_peak_sockets as f64,
    );
    f.insert(
        "cold_start_operator_writes",
        r.cold_start.writes.total() as f64,
    );
    f.insert("cold_start_omni_writes", r.cold_start.writes.omni as f64);
    f.insert(
        "cold_start_omni_connections",
        r.cold_start.omni_connections as f64,
    );
    f.insert("idle_writes_per_minute", r.idle.writes_per_minute.total());
    f.insert(
        "idle_operator_cpu_secs_per_minute",
        r.idle.operator_cpu_secs_per_minute,
    );
    f.insert("idle_omni_connections", r.idle.omni_connections as f64);
    f.insert("cold_start_omni_calls", r.cold_start.omni_calls as f64);
    f.insert("idle_omni_calls_per_minute", r.idle.omni_calls_per_minute);
    let floor = &r.cold_start.floor;
    f.insert(
        "cold_start_non_event_writes_per_object",
        floor.non_event_per_object(),
    );
    f.insert("cold_start_events_per_object", floor.events_per_object());
    if let Some(s) = &r.sets {
        f.insert(
            "sets_cold_start_writes_per_generated_object",
            writes_per_generated_object(floor),
        );
        for (name, secs, writes) in [
            (
                crate::sets::TEMPLATE_CHANGE,
                "sets_template_change_secs",
                "sets_template_change_writes",
            ),
            (
                crate::sets::RELABEL_OUT,
                "sets_relabel_out_secs",
                "sets_relabel_out_writes",
            ),
            (
                crate::sets::RELABEL_IN,
                "sets_relabel_in_secs",
                "sets_relabel_in_writes",
            ),
        ] {
            if let Some(step) = s.step(name).filter(|s| s.converged) {
                f.insert(secs, step.secs);
                f.insert(writes, step.writes.total() as f64);
            }
        }
    }
    if let Some(l) = &r.latency {
        f.insert("change_to_omni_p50_ms", l.cluster_to_omni.p50_ms);
        f.insert("change_to_omni_p99_ms", l.cluster_to_omni.p99_ms);
        f.insert("secret_to_workload_p50_ms", l.secret_to_workload.p50_ms);
        f.insert("secret_to_workload_p99_ms", l.secret_to_workload.p99_ms);
    }
    f
}

/// Management writes (Events left out) to the kinds sets generate and to the sets themselves,
/// per generated object: meaningful for a fleet whose only releases, syncs and exports are the
/// generated ones (`--sets` alone).
pub fn writes_per_generated_object(floor: &crate::floor::WriteFloor) -> f64 {
    let generated: usize = floor.kinds.values().map(|k| k.generated).sum();
    let writes: u64 = floor
        .kinds
        .iter()
        .filter(|(kind, k)| k.generated > 0 || kind.ends_with("Set"))
        .map(|(_, k)| k.writes)
        .sum();
    if generated == 0 {
        0.0
    } else {
        writes as f64 / generated as f64
    }
}

/// Median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The least-squares slope of `ln y` over `ln x`: cost grows like `x^slope`. Points with a
/// non-positive coordinate carry no information on a log scale and are skipped; `None` with
/// fewer than two usable points.
pub fn growth_exponent(points: &[(f64, f64)]) -> Option<f64> {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    if logs.len() < 2 {
        return None;
    }
    let n = logs.len() as f64;
    let mx = logs.iter().map(|p| p.0).sum::<f64>() / n;
    let my = logs.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = logs.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = logs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    Some(sxy / sxx)
}

/// A sweep: runs at several sizes and the fitted exponent of each figure over the cluster count.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sweep {
    /// The runs, smallest first.
    pub runs: Vec<RunResult>,
    /// Figure → fitted exponent over the number of clusters.
    pub exponents: BTreeMap<String, f64>,
}

/// Fits every figure of `runs` against their cluster counts.
pub fn sweep(runs: Vec<RunResult>) -> Sweep {
    let mut series: BTreeMap<&'static str, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &runs {
        for (name, value) in figures(r) {
            series
                .entry(name)
                .or_default()
                .push((r.fleet.clusters as f64, value));
        }
    }
    let exponents = series
        .into_iter()
        .filter_map(|(name, points)| growth_exponent(&points).map(|e| (name.to_owned(), e)))
        .collect();
    Sweep { runs, exponents }
}

/// A baseline comparison: medians per variant and their ratios to the operator as it is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    /// Every run in the order it was made.
    pub runs: Vec<RunResult>,
    /// Variant → figure → median.
    pub medians: BTreeMap<String, BTreeMap<String, f64>>,
    /// Variant → figure → its median divided by `none`'s (how many times worse the variant is).
    pub ratios: BTreeMap<String, BTreeMap<String, f64>>,
    /// Variants whose end state differed from `none`'s in some repetition.
    pub state_mismatches: Vec<String>,
}

/// Summarises runs of several variants (`none` among them).
pub fn compare(runs: Vec<RunResult>) -> Comparison {
    let mut values: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    for r in &runs {
        let v = values.entry(r.variant.clone()).or_default();
        for (name, value) in figures(r) {
            v.entry(name.to_owned()).or_default().push(value);
        }
    }
    let medians: BTreeMap<String, BTreeMap<String, f64>> = values
        .into_iter()
        .map(|(variant, fs)| {
            (
                variant,
                fs.into_iter().map(|(n, vs)| (n, median(&vs))).collect(),
            )
        })
        .collect();
    let reference = medians.get("none").cloned().unwrap_or_default();
    let ratios = medians
        .iter()
        .map(|(variant, fs)| {
            let rs = fs
                .iter()
                .filter_map(|(n, v)| {
                    let base = reference.get(n)?;
                    match (*base == 0.0, *v == 0.0) {
                        (true, true) => Some((n.clone(), 1.0)),
                        // Infinitely worse is reported as such (JSON has no infinity: null).
                        (true, false) => None,
                        _ => Some((n.clone(), v / base)),
                    }
                })
                .collect();
            (variant.clone(), rs)
        })
        .collect();
    let reference_state = runs
        .iter()
        .find(|r| r.variant == "none")
        .map(|r| r.end_state.digest.clone());
    let mut state_mismatches: Vec<String> = runs
        .iter()
        .filter(|r| {
            reference_state
                .as_ref()
                .is_some_and(|d| *d != r.end_state.digest)
        })
        .map(|r| r.variant.clone())
        .collect();
    state_mismatches.dedup();
    Comparison {
        runs,
        medians,
        ratios,
        state_mismatches,
    }
}

/// One run as a readable table.
pub fn run_table(r: &RunResult) -> String {
    let mut t = String::new();
    let f = &r.fleet;
    let _ = writeln!(
        t,
        "fleet: {} clusters, {} syncs over {} workload clusters, {} helm releases{} ({} objects); operator variant: {}",
        f.clusters,
        f.syncs,
        f.workload_clusters,
        f.helm_releases,
        if f.sets { ", the fleet sets" } else { "" },
        f.objects(),
        r.variant
    );
    let c = &r.cold_start;
    let rows: Vec<(&str, String)> = vec![
        (
            "apply (bench, before the operator)",
            format!("{:.1} s", r.apply_secs),
        ),
        (
            "cold start: converged",
            if c.converged {
                format!("{:.1} s", c.converged_secs)
            } else {
                format!(
                    "NO after {:.0} s ({}/{} Ready, {} Omni clusters, {} Secrets synced)",
                    c.converged_secs,
                    c.progress.ready,
                    f.objects(),
                    c.progress.omni_clusters,
                    c.progress.synced
                )
            },
        ),
        (
            "settled (no operator write for 3 s) after",
            format!("{:.1} s more", r.settle_secs),
        ),
        (
            "cold start: operator CPU",
            format!("{:.1} s", c.operator_cpu_secs),
        ),
        (
            "cold start: emulator CPU",
            format!("{:.1} s", c.emulator_cpu_secs),
        ),
        (
            "operator peak RSS",
            format!("{:.0} MiB", c.operator_peak_rss_mib),
        ),
        (
            "cold start: operator peak open sockets",
            c.operator_peak_sockets.to_string(),
        ),
        (
            "cold start: operator writes (mgmt / workload / Omni)",
            format!(
                "{} / {} / {}",
                c.writes.management, c.writes.workload, c.writes.omni
            ),
        ),
        (
            "cold start: Omni connections",
            c.omni_connections.to_string(),
        ),
        ("cold start: Omni calls", c.omni_calls.to_string()),
        (
            "idle: writes per minute (mgmt / workload / Omni)",
            format!(
                "{:.1} / {:.1} / {:.1}",
                r.idle.writes_per_minute.management,
                r.idle.writes_per_minute.workload,
                r.idle.writes_per_minute.omni
            ),
        ),
        (
            "idle: operator CPU per minute",
            format!(
                "{:.2} s ({:.1} % of a core)",
                r.idle.operator_cpu_secs_per_minute,
                r.idle.operator_cpu_secs_per_minute / 0.6
            ),
        ),
        (
            "idle: operator RSS",
            format!("{:.0} MiB", r.idle.operator_rss_mib),
        ),
        (
            "idle: Omni connections opened",
            r.idle.omni_connections.to_string(),
        ),
        (
            "idle: Omni calls per minute",
            format!("{:.0}", r.idle.omni_calls_per_minute),
        ),
    ];
    let mut rows = rows;
    if let Some(l) = &r.latency {
        let p = |p: &crate::phases::Percentiles| {
            format!(
                "p50 {:.0} / p90 {:.0} / p99 {:.0} ms ({} changes{})",
                p.p50_ms,
                p.p90_ms,
                p.p99_ms,
                p.count,
                if p.missing > 0 {
                    format!(", {} never arrived", p.missing)
                } else {
                    String::new()
                }
            )
        };
        rows.push(("change: OmniCluster → Omni", p(&l.cluster_to_omni)));
        rows.push(("change: source Secret → workload", p(&l.secret_to_workload)));
    }
    let floor = &c.floor;
    rows.push((
        "cold start: non-Event mgmt writes per object (floor)",
        format!(
            "{:.2} ({:.2}); Events {:.2} per object",
            floor.non_event_per_object(),
            floor.floor_per_object(),
            floor.events_per_object()
        ),
    ));
    if let Some(s) = &r.sets {
        rows.push((
            "sets: cold-start writes per generated object",
            format!(
                "{:.2} ({} generated)",
                writes_per_generated_object(floor),
                s.generated
            ),
        ));
        for step in &s.steps {
            rows.push((step_label(&step.name), step_row(step)));
        }
    }
    rows.push((
        "end state (Omni resources / workload Secrets / digest: Omni, workload)",
        format!(
            "{} / {} / {}: {}, {}",
            r.end_state.omni_resources,
            r.end_state.workload_secrets,
            r.end_state.digest,
            r.end_state.omni_digest,
            r.end_state.workload_digest
        ),
    ));
    aligned(&mut t, &rows);
    if !c.converged {
        for waiting in &c.progress.waiting {
            let _ = writeln!(t, "  not Ready: {waiting}");
        }
    }
    let _ = writeln!(
        t,
        "  cold-start management writes: {:?}",
        c.management_writes
    );
    let _ = writeln!(
        t,
        "  cold-start writes by kind (per object, floor, Events):"
    );
    for (kind, k) in &floor.kinds {
        let _ = writeln!(
            t,
            "    {kind:<24} {:>7} objects ({:>6} generated)  {:>5.2} writes/object (floor {:.2})  {:>6} Events",
            k.objects,
            k.generated,
            k.per_object(),
            k.floor_per_object(),
            k.events
        );
        if !k.event_reasons.is_empty() {
            let _ = writeln!(t, "      Events by reason: {:?}", k.event_reasons);
        }
    }
    if !floor.other.is_empty() {
        let _ = writeln!(t, "    other resources: {:?}", floor.other);
    }
    if let Some(s) = &r.sets {
        for step in &s.steps {
            let _ = writeln!(
                t,
                "  {} management writes: {:?}",
                step.name, step.management_writes
            );
            if !step.converged {
                for waiting in &step.waiting {
                    let _ = writeln!(t, "    not Ready: {waiting}");
                }
            }
        }
    }
    if !r.idle.management_writes.is_empty() {
        let _ = writeln!(
            t,
            "  idle management writes: {:?}",
            r.idle.management_writes
        );
    }
    t
}

fn step_label(name: &str) -> &'static str {
    match name {
        crate::sets::TEMPLATE_CHANGE => "sets: template change (10 % at a time)",
        crate::sets::RELABEL_OUT => "sets: relabel 10 % out",
        crate::sets::RELABEL_IN => "sets: relabel 10 % back in",
        _ => "sets: step",
    }
}

fn step_row(s: &crate::sets::Step) -> String {
    let when = if s.converged {
        format!("{:.1} s", s.secs)
    } else {
        format!(
            "NO after {:.0} s ({}/{} releases, {}/{} copies, {} left over)",
            s.secs,
            s.reach.releases,
            s.reach.matched,
            s.reach.copies,
            s.reach.matched,
            s.reach.leftovers
        )
    };
    format!(
        "{when} over {} clusters; writes {} / {} / {} (mgmt / workload / Omni)",
        s.clusters, s.writes.management, s.writes.workload, s.writes.omni
    )
}

/// Writes `rows` as two aligned columns.
fn aligned(t: &mut String, rows: &[(&str, String)]) {
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    for (k, v) in rows {
        let _ = writeln!(t, "  {k:<width$}  {v}");
    }
}

/// The null operator's figures, beside the operator's own CPU at the same fleet when known.
pub fn null_table(n: &crate::null_operator::NullResult, operator: Option<&RunResult>) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "null operator ({} watches, nothing else): {} clusters, {} syncs ({} objects)",
        n.watches,
        n.fleet.clusters,
        n.fleet.syncs,
        n.fleet.objects()
    );
    let mut rows: Vec<(&str, String)> = vec![
        ("every watch listed", format!("{:.1} s", n.listed_secs)),
        (
            "emulator CPU until then",
            format!("{:.2} s", n.emulator_cpu_secs_cold),
        ),
        (
            "null operator CPU until then",
            format!("{:.2} s", n.null_cpu_secs_cold),
        ),
        (
            "null operator peak RSS",
            format!("{:.0} MiB", n.null_peak_rss_mib),
        ),
        (
            "emulator CPU, watches held",
            format!("{:.2} s/min", n.emulator_cpu_secs_per_minute_idle),
        ),
    ];
    if let Some(r) = operator {
        rows.push((
            "operator CPU, its cold start",
            format!("{:.2} s", r.cold_start.operator_cpu_secs),
        ));
        rows.push((
            "emulator CPU, operator's cold start",
            format!("{:.2} s", r.cold_start.emulator_cpu_secs),
        ));
    }
    aligned(&mut t, &rows);
    t
}

/// A sweep as a table: one row per size, and the exponents.
pub fn sweep_table(s: &Sweep) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:>8} {:>8} {:>9} {:>10} {:>9} {:>12} {:>12} {:>11}",
        "clusters",
        "syncs",
        "converge",
        "op CPU",
        "peak RSS",
        "idle wr/min",
        "idle CPU/min",
        "Omni p99"
    );
    for r in &s.runs {
        let _ = writeln!(
            t,
            "{:>8} {:>8} {:>8.1}s {:>9.1}s {:>6.0}MiB {:>12.1} {:>11.2}s {:>9.0}ms",
            r.fleet.clusters,
            r.fleet.syncs,
            r.cold_start.converged_secs,
            r.cold_start.operator_cpu_secs,
            r.cold_start.operator_peak_rss_mib,
            r.idle.writes_per_minute.total(),
            r.idle.operator_cpu_secs_per_minute,
            r.latency.as_ref().map_or(0.0, |l| l.cluster_to_omni.p99_ms),
        );
    }
    if s.runs.iter().any(|r| r.sets.is_some()) {
        let _ = writeln!(
            t,
            "{:>8} {:>10} {:>12} {:>16} {:>16} {:>16}",
            "clusters", "generated", "wr/generated", "template change", "relabel out", "relabel in"
        );
        for r in &s.runs {
            let Some(sets) = &r.sets else { continue };
            let f = figures(r);
            let secs = |k: &str| f.get(k).map_or("-".to_owned(), |v| format!("{v:.1}s"));
            let _ = writeln!(
                t,
                "{:>8} {:>10} {:>12.2} {:>16} {:>16} {:>16}",
                r.fleet.clusters,
                sets.generated,
                writes_per_generated_object(&r.cold_start.floor),
                secs("sets_template_change_secs"),
                secs("sets_relabel_out_secs"),
                secs("sets_relabel_in_secs"),
            );
        }
    }
    let _ = writeln!(t, "growth exponents (cost ∝ clusters^k):");
    for (name, k) in &s.exponents {
        let _ = writeln!(t, "  {name:<36} k = {k:.2}");
    }
    t
}

/// A comparison as a table: medians of `none` and each variant's ratio to it.
pub fn comparison_table(c: &Comparison) -> String {
    let mut t = String::new();
    let variants: Vec<&String> = c.medians.keys().filter(|v| *v != "none").collect();
    let Some(reference) = c.medians.get("none") else {
        return "no run of the operator as it is (variant none)\n".into();
    };
    let _ = write!(t, "{:<36} {:>12}", "figure (median)", "operator");
    for v in &variants {
        let _ = write!(t, " {:>14}", shorten(v));
    }
    let _ = writeln!(t);
    for (name, value) in reference {
        let _ = write!(t, "{name:<36} {value:>12.2}");
        for v in &variants {
            let cell = match c.ratios.get(*v).and_then(|r| r.get(name)) {
                Some(r) => format!("×{r:.2}"),
                None => match c.medians.get(*v).and_then(|m| m.get(name)) {
                    Some(m) => format!("{m:.2} (vs 0)"),
                    None => "-".into(),
                },
            };
            let _ = write!(t, " {cell:>14}");
        }
        let _ = writeln!(t);
    }
    if c.state_mismatches.is_empty() {
        let _ = writeln!(t, "end state: every variant matches the operator's");
    } else {
        let _ = writeln!(t, "END STATE DIFFERS for: {:?}", c.state_mismatches);
    }
    t
}

fn shorten(variant: &str) -> String {
    match variant {
        "status-every-reconcile" => "status-every".into(),
        "connection-per-call" => "conn-per-call".into(),
        "helm-upgrade-every-trigger" => "helm-every".into(),
        v => v.chars().take(14).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_of_a_power_law_is_its_power() {
        let quadratic: Vec<(f64, f64)> = [10.0, 20.0, 40.0, 80.0]
            .iter()
            .map(|x| (*x, 3.0 * x * x))
            .collect();
        let k = growth_exponent(&quadratic).unwrap();
        assert!((k - 2.0).abs() < 1e-9, "{k}");
        let linear = [(100.0, 5.0), (300.0, 15.0)];
        assert!((growth_exponent(&linear).unwrap() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn exponent_needs_two_positive_points() {
        assert_eq!(growth_exponent(&[(10.0, 1.0)]), None);
        assert_eq!(growth_exponent(&[(10.0, 0.0), (20.0, 0.0)]), None);
        assert_eq!(growth_exponent(&[(10.0, 1.0), (10.0, 2.0)]), None);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
