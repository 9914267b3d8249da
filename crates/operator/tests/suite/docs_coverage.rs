//! The reference documentation covers what the code can do: every condition and Event reason
//! the operator can emit (the type `api::Reason`), every field of every CRD, and every `run`
//! flag and environment variable. A new reason, field or flag without its documentation fails
//! here. (Chart values are checked against the chart README in `charts.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::{Args as _, Command};
use omni_operator::api::Reason;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn doc(name: &str) -> String {
    let path = repo().join("docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The rows of the "Every reason" table of docs/operations.md: reason → meaning.
fn documented_reasons() -> BTreeMap<String, String> {
    let operations = doc("operations.md");
    let (_, section) = operations
        .split_once("\n### Every reason\n")
        .unwrap_or_else(|| panic!("docs/operations.md has no \"### Every reason\" section"));
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
            let reason = cells.first().copied().unwrap_or_default().trim_matches('`');
            let meaning = cells.get(1).copied().unwrap_or_default();
            (reason.to_string(), meaning.to_string())
        })
        .collect()
}

/// The reference lists every reason the operator can write into a condition or an Event (the
/// variants of `api::Reason`), each with the meaning the type gives it, and nothing else.
#[test]
fn the_reason_reference_lists_every_reason_and_nothing_else() {
    let code: BTreeMap<String, String> = Reason::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), r.meaning().to_string()))
        .collect();
    assert_eq!(documented_reasons(), code);
}

/// Every reason the table of reasons by kind in docs/operations.md names is one the operator
/// writes.
#[test]
fn the_operations_guide_names_no_reason_the_operator_does_not_write() {
    let operations = doc("operations.md");
    let reasons: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    let (_, by_kind) = operations
        .split_once("| Kind | Reasons |")
        .unwrap_or_else(|| panic!("docs/operations.md has no table of reasons by kind"));
    let table: Vec<&str> = by_kind
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    let named: BTreeSet<&str> = table
        .iter()
        .flat_map(|row| row.rsplit('|').nth(1).map(code_spans).unwrap_or_default())
        // Reasons are CamelCase words; the table also names verbs (`list`) and fields.
        .filter(|span| {
            span.starts_with(|c: char| c.is_ascii_uppercase())
                && span.chars().all(|c| c.is_ascii_alphanumeric())
        })
        .collect();
    let unknown: Vec<&&str> = named.iter().filter(|n| !reasons.contains(**n)).collect();
    assert!(
        unknown.is_empty(),
        "reasons docs/operations.md lists by kind that the operator never writes: {unknown:?}"
    );
    assert!(named.contains("ReleaseStuck"), "the scan found {named:?}");
}

/// Every property name below `spec` and `status` of a CRD schema, as `path` (dotted).
fn schema_fields(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(props) = schema["properties"].as_object() {
        for (name, sub) in props {
            let path = format!("{prefix}.{name}");
            out.push(path.clone());
            schema_fields(sub, &path, out);
        }
    }
    if schema["items"].is_object() {
        schema_fields(&schema["items"], prefix, out);
    }
    if let Some(more) = schema["additionalProperties"].as_object() {
        schema_fields(&Value::Object(more.clone()), prefix, out);
    }
}

/// The texts between backticks in a Markdown document.
fn code_spans(markdown: &str) -> Vec<&str> {
    markdown.split('`').skip(1).step_by(2).collect()
}

/// Whether a code span names the field `path` (`spec.a.b`): the whole path or a longer one
/// through it, its name alone, or its name as the end or start of a shorter dotted path
/// (`.b` / `b.c` in a table that introduces `spec.a` above).
fn documents(spans: &[&str], path: &str) -> bool {
    let leaf = path.rsplit('.').next().unwrap_or_default();
    spans.iter().any(|s| {
        *s == leaf
            || s.contains(path)
            || s.ends_with(&format!(".{leaf}"))
            || s.starts_with(&format!("{leaf}."))
    })
}

#[test]
fn every_crd_field_is_in_the_reference() {
    // The field reference is docs/resources.md; other pages explain, it lists.
    let reference = doc("resources.md");
    let spans = code_spans(&reference);
    let mut missing = Vec::new();
    for crd in omni_operator::api::crds() {
        let crd = serde_json::to_value(&crd).unwrap_or_else(|e| panic!("crd: {e}"));
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let root = &version["schema"]["openAPIV3Schema"]["properties"];
            let mut fields = Vec::new();
            for top in ["spec", "status"] {
                schema_fields(&root[top], top, &mut fields);
            }
            for path in fields {
                if !documents(&spans, &path) {
                    missing.push(format!("{kind} {path}"));
                }
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "CRD fields the reference never names: {missing:#?}"
    );
}

#[test]
fn every_run_flag_and_environment_variable_is_in_operations() {
    let operations = doc("operations.md");
    let run = omni_operator::cli::run::Args::augment_args(Command::new("run"));
    let mut missing = Vec::new();
    for arg in run.get_arguments() {
        if arg.is_hide_set() {
            continue;
        }
        if let Some(long) = arg.get_long()
            && !operations.contains(&format!("`--{long}"))
        {
            missing.push(format!("--{long}"));
        }
        if let Some(env) = arg.get_env()
            && !operations.contains(&format!("`{}`", env.to_string_lossy()))
        {
            missing.push(env.to_string_lossy().into_owned());
        }
    }
    // Process-wide settings outside `run`'s own arguments.
    for global in ["`--log-format", "`LOG_FORMAT`", "`RUST_LOG`"] {
        if !operations.contains(global) {
            missing.push(global.trim_matches('`').to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "`omni-operator run` settings missing from docs/operations.md: {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Facts the docs state that must equal the code: printer columns (from the CRDs), chart value
// bounds (from values.schema.json), resource names (from the rendered chart) and flag defaults
// (from the CLI's clap definitions). Each fails when a doc and the code drift apart.

/// Every Markdown page users read: docs/, the READMEs of the repository and of the charts.
fn user_pages() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap_or_else(|e| panic!("docs/: {e}"))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.push(repo().join("README.md"));
    docs.push(repo().join("charts/omni-cluster-operator/README.md"));
    docs.push(repo().join("charts/omni-cluster-operator-crds/README.md"));
    for path in docs {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let name = path
            .strip_prefix(repo())
            .unwrap_or(&path)
            .display()
            .to_string();
        pages.push((name, text));
    }
    pages
}

/// The cells of a Markdown table row (`| a | b |`), with `\|` kept inside a cell.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The table rows of the section under `heading` (up to the next heading of any level).
fn section_rows(markdown: &str, heading: &str) -> Vec<Vec<String>> {
    let start = markdown
        .find(heading)
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    markdown[start + heading.len()..]
        .lines()
        .take_while(|l| !l.starts_with('#'))
        .filter(|l| l.trim_start().starts_with('|') && !l.contains("| ---"))
        .skip(1) // the header row
        .map(cells)
        .collect()
}

#[test]
fn printer_columns_in_the_reference_are_the_crds() {
    let rows = section_rows(&doc("resources.md"), "## Printer columns");
    let mut documented = std::collections::BTreeMap::new();
    for row in rows {
        // `Name` or *`Name`* (shown with `-o wide`), in order.
        let columns: Vec<(String, bool)> = row[1]
            .split(", ")
            .map(|c| {
                let wide = c.starts_with('*');
                (c.trim_matches('*').trim_matches('`').to_string(), wide)
            })
            .collect();
        documented.insert(row[0].clone(), columns);
    }
    let mut code = std::collections::BTreeMap::new();
    for crd in omni_operator::api::crds() {
        let columns: Vec<(String, bool)> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.priority.unwrap_or(0) > 0))
            .collect();
        code.insert(crd.spec.names.kind.clone(), columns);
    }
    assert_eq!(
        documented, code,
        "docs/resources.md's printer columns (name, shown only with -o wide) differ from the CRDs"
    );
}

/// `(path, minimum, maximum)` of every numeric chart value the schema bounds.
fn chart_bounds() -> Vec<(String, Option<i64>, Option<i64>)> {
    fn walk(node: &Value, path: &str, out: &mut Vec<(String, Option<i64>, Option<i64>)>) {
        let (min, max) = (node["minimum"].as_i64(), node["maximum"].as_i64());
        if min.is_some() || max.is_some() {
            out.push((path.to_string(), min, max));
        }
        for (name, child) in node["properties"].as_object().into_iter().flatten() {
            let child_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            walk(child, &child_path, out);
        }
    }
    let text =
        std::fs::read_to_string(repo().join("charts/omni-cluster-operator/values.schema.json"))
            .unwrap_or_else(|e| panic!("{e}"));
    let schema: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    walk(&schema, "", &mut out);
    out
}

/// The numbers a text states as bounds: `at least N` and `minimum N` as minimums, `maximum N`
/// and a parenthetical `at most N)` as maximums, `N–M` (not followed by a unit) as both. Other
/// numbers near a value's name (a default, "at most 8 per workload cluster", "4–5 s") are not
/// bounds.
fn stated_bounds(text: &str) -> (Vec<i64>, Vec<i64>) {
    let numbers_after = |word: &str, closing: Option<char>| -> Vec<i64> {
        text.match_indices(word)
            .filter_map(|(i, _)| {
                let rest = &text[i + word.len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let next = rest[digits.len()..].chars().next();
                if closing.is_some() && next != closing {
                    return None;
                }
                digits.parse().ok()
            })
            .collect()
    };
    let mut mins = numbers_after("at least ", None);
    mins.extend(numbers_after("minimum ", None));
    let mut maxs = numbers_after("maximum ", None);
    maxs.extend(numbers_after("at most ", Some(')')));
    for (i, _) in text.match_indices('–') {
        let before: String = text[..i]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let rest = &text[i + '–'.len_utf8()..];
        let after: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let unit = rest[after.len()..]
            .trim_start()
            .starts_with(|c: char| c.is_ascii_alphabetic() && c != 'w');
        if let (Ok(a), Ok(b), false) = (before.parse(), after.parse(), unit) {
            mins.push(a);
            maxs.push(b);
        }
    }
    (mins, maxs)
}

#[test]
fn chart_value_bounds_in_the_docs_are_the_schemas() {
    let bounds = chart_bounds();
    assert!(
        bounds
            .iter()
            .any(|(p, min, _)| p == "terminationGracePeriodSeconds" && min.is_some()),
        "the schema scan found the grace-period minimum: {bounds:?}"
    );
    // Flags of `run` that a chart value sets, as the chart README's rows name them.
    let readme = std::fs::read_to_string(repo().join("charts/omni-cluster-operator/README.md"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut mentions: Vec<(String, String)> = Vec::new();
    for (path, _, _) in &bounds {
        mentions.push((path.clone(), format!("`{path}`")));
        for row in readme
            .lines()
            .filter(|l| l.starts_with(&format!("| `{path}` |")))
        {
            if let Some(flag) = row
                .split("(`--")
                .nth(1)
                .and_then(|r| r.split(['`', '=']).next())
            {
                mentions.push((path.clone(), format!("`--{flag}")));
            }
        }
    }
    let mut wrong = Vec::new();
    for (page, text) in user_pages() {
        for line in text.lines() {
            let named: Vec<&(String, String)> =
                mentions.iter().filter(|(_, m)| line.contains(m)).collect();
            // A line about several bounded values cannot say which number is whose.
            let keys: BTreeSet<&String> = named.iter().map(|(p, _)| p).collect();
            let [key] = keys.into_iter().collect::<Vec<_>>()[..] else {
                continue;
            };
            let (_, min, max) = bounds.iter().find(|(p, _, _)| p == key).unwrap();
            let (mins, maxs) = stated_bounds(line);
            for m in mins {
                if Some(m) != *min {
                    wrong.push(format!("{page}: {key} minimum {m}, schema {min:?}: {line}"));
                }
            }
            for m in maxs {
                if Some(m) != *max {
                    wrong.push(format!("{page}: {key} maximum {m}, schema {max:?}: {line}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "bounds in the docs that differ from values.schema.json:\n{}",
        wrong.join("\n")
    );
    // Bounds narrower than the type's own are stated where the value is described.
    for (path, min, max) in &bounds {
        let narrow = min.is_some_and(|m| m > 1) || max.is_some_and(|m| m < 65535);
        if !narrow {
            continue;
        }
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{path}` |")))
            .unwrap_or_else(|| panic!("the chart README has no row for {path}"));
        let (mins, maxs) = stated_bounds(row);
        assert!(
            (min.is_none() || mins.contains(&min.unwrap()))
                && (max.is_none() || maxs.contains(&max.unwrap())),
            "the chart README's row for {path} does not state its bounds {min:?}..{max:?}: {row}"
        );
    }
}

/// The names of the objects the operator chart renders, over the configurations that switch
/// optional objects on.
fn rendered_names() -> BTreeSet<String> {
    let configs: [&[&str]; 4] = [
        &[],
        &[
            "metrics.secure=true",
            "metrics.serviceMonitor.enabled=true",
            "metrics.prometheusRule.enabled=true",
            "metrics.grafanaDashboard.enabled=true",
            "networkPolicy.enabled=true",
        ],
        &["watch.clusterWide=true", "namespace.create=true"],
        &["certManager.enabled=false", "webhook.certSecretName=x"],
    ];
    let mut names = BTreeSet::new();
    for sets in configs {
        for doc in crate::support::render_operator_chart("omni-cluster-operator-system", sets) {
            if let Some(name) = doc["metadata"]["name"].as_str() {
                names.insert(name.to_string());
            }
            // The Secret the Certificate writes is named by the chart, not rendered.
            if let Some(secret) = doc["spec"]["secretName"].as_str() {
                names.insert(secret.to_string());
            }
        }
    }
    names
}

/// `a-{b,c}-d` → `a-b-d`, `a-c-d`.
fn expand_braces(name: &str) -> Vec<String> {
    match (name.find('{'), name.find('}')) {
        (Some(open), Some(close)) if open < close => name[open + 1..close]
            .split(',')
            .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &name[..open], &name[close + 1..])))
            .collect(),
        _ => vec![name.to_string()],
    }
}

#[test]
fn resource_names_in_the_docs_are_what_the_chart_renders() {
    let names = rendered_names();
    assert!(
        names.contains("omni-cluster-operator-webhook-service"),
        "{names:?}"
    );
    let fullname = "omni-cluster-operator";
    let singulars: Vec<String> = omni_operator::api::crds()
        .iter()
        .map(|c| c.spec.names.singular.clone().unwrap_or_default())
        .collect();
    // Names the docs use that are not objects of the operator chart.
    let other = ["omni-cluster-operator-system", "omni-cluster-operator-crds"];
    let name_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let mut wrong = Vec::new();
    for (page, text) in user_pages() {
        if page.ends_with("performance.md") || page.ends_with("decisions.md") {
            continue;
        }
        // `<release>-…` was the name of no object: objects are named after the full name
        // (which is `<release>-omni-cluster-operator` for most release names).
        for (i, _) in text.match_indices("`<release>-") {
            if !text[i..].starts_with("`<release>-omni-cluster-operator`") {
                wrong.push(format!(
                    "{page}: a name built from <release>; use <fullname>"
                ));
            }
        }
        for (i, _) in text.match_indices("<fullname>-") {
            let rest = &text[i + "<fullname>-".len()..];
            let len = rest
                .find(|c: char| !(name_char(c) || "{},<>".contains(c)))
                .unwrap_or(rest.len());
            let suffix = rest[..len].trim_end_matches(['-', ',']);
            let mut candidates = vec![format!("{fullname}-{suffix}")];
            if suffix.contains("<singular>") {
                candidates = singulars
                    .iter()
                    .map(|s| format!("{fullname}-{}", suffix.replace("<singular>", s)))
                    .collect();
            }
            for candidate in candidates.iter().flat_map(|c| expand_braces(c)) {
                if !names.contains(&candidate) {
                    wrong.push(format!("{page}: <fullname>-{suffix} ({candidate})"));
                }
            }
        }
        for (i, _) in text.match_indices("omni-cluster-operator-") {
            let start_ok = i == 0 || !name_char(text[..i].chars().last().unwrap_or(' '));
            if !start_ok {
                continue;
            }
            let rest = &text[i..];
            let len = rest.find(|c: char| !name_char(c)).unwrap_or(rest.len());
            let name = rest[..len].trim_end_matches('-');
            if !names.contains(name) && !other.contains(&name) {
                wrong.push(format!("{page}: {name}"));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "object names in the docs that the operator chart (release omni-cluster-operator) does not render:\n{}",
        wrong.join("\n")
    );
}

/// Whether a table cell states `default` as the default of a flag.
fn states_default(cell: &str, default: Option<&str>) -> bool {
    let first_span = cell.split('`').nth(1).filter(|_| cell.starts_with('`'));
    match default {
        Some("false") => cell == "off" || first_span == Some("false"),
        Some("true") => cell == "on" || first_span == Some("true"),
        Some(value) => first_span == Some(value),
        // No default: words ("unset", "the watched namespace"), never a value.
        None => first_span.is_none(),
    }
}

#[test]
fn flag_defaults_in_the_docs_are_the_clis() {
    let run = omni_operator::cli::run::Args::augment_args(Command::new("run"));
    let rows = section_rows(&doc("operations.md"), "## Flags");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for row in rows {
        let Some(flag) = row[0]
            .split('`')
            .nth(1)
            .and_then(|s| s.split([' ', '[']).next())
            .and_then(|s| s.strip_prefix("--"))
        else {
            continue;
        };
        let (env, default) = (&row[1], &row[2]);
        if flag == "log-format" {
            use clap::ValueEnum as _;
            let want = omni_operator::process::telemetry::LogFormat::default()
                .to_possible_value()
                .map(|v| v.get_name().to_string());
            if !states_default(default, want.as_deref()) {
                wrong.push(format!("--{flag}: docs {default:?}, code {want:?}"));
            }
            checked += 1;
            continue;
        }
        let Some(arg) = run.get_arguments().find(|a| a.get_long() == Some(flag)) else {
            wrong.push(format!("--{flag} is documented but `run` has no such flag"));
            continue;
        };
        checked += 1;
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let code_default = (!defaults.is_empty()).then(|| defaults.join(","));
        if !states_default(default, code_default.as_deref()) {
            wrong.push(format!(
                "--{flag}: docs say default {default:?}, code {code_default:?}"
            ));
        }
        let code_env = arg.get_env().map(|e| format!("`{}`", e.to_string_lossy()));
        if code_env.as_deref().unwrap_or("") != env.as_str() {
            wrong.push(format!("--{flag}: docs say env {env:?}, code {code_env:?}"));
        }
    }
    assert!(checked > 20, "the flags table was found ({checked} rows)");
    assert!(
        wrong.is_empty(),
        "docs/operations.md's flags table differs from `omni-operator run`:\n{}",
        wrong.join("\n")
    );

    // Defaults that prose states next to a flag of the other commands.
    let commands = [
        (
            "status",
            omni_operator::cli::status::Args::augment_args(Command::new("status")),
        ),
        (
            "validate",
            omni_operator::cli::validate::Args::augment_args(Command::new("validate")),
        ),
    ];
    let operations = doc("operations.md");
    for (name, command) in commands {
        for arg in command.get_arguments() {
            let (Some(long), [default]) = (arg.get_long(), arg.get_default_values()) else {
                continue;
            };
            let default = default.to_string_lossy();
            for (i, _) in operations.match_indices(&format!("`--{long}")) {
                let after = &operations[i..(i + 300).min(operations.len())];
                if let Some(stated) = after
                    .split("default `")
                    .nth(1)
                    .and_then(|r| r.split('`').next())
                    .filter(|_| after.find("default `") < after.find('\n'))
                {
                    assert_eq!(
                        stated, default,
                        "docs/operations.md says `{name} --{long}` defaults to {stated}"
                    );
                }
            }
        }
    }
}

/// The anchors GitHub gives the headings of a Markdown page: lowercase, punctuation dropped,
/// spaces as `-`, a repeated heading numbered `-1`, `-2`, ...
fn heading_anchors(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !in_code) else {
            continue;
        };
        let slug: String = heading
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// Source and documentation files of the repository (build output excluded).
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            text_files(&path, out);
        } else if path.extension().is_some_and(|e| {
            ["rs", "md", "proto", "yaml", "tpl"].contains(&e.to_str().unwrap_or(""))
        }) {
            out.push(path);
        }
    }
}

#[test]
fn references_point_inside_the_repository() {
    // Facts the code relies on are written down in docs/ (omni-wire.md, parity.md, ...): every
    // `<page>.md#<anchor>` naming a page of docs/ must name one of its headings, and no file may
    // cite the outside notes the project started from. The patterns are split so that this file
    // does not match itself.
    let docs_dir = repo().join("docs");
    let mut anchors = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&docs_dir).expect("docs/").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(page) = name.strip_suffix(".md") {
            let text = std::fs::read_to_string(entry.path()).expect("read page");
            anchors.insert(page.to_string(), heading_anchors(&text));
        }
    }
    let outside = [
        concat!("omni-wire ", "§"),
        concat!("omni-wire.md ", "§"),
        concat!("parity ", "§"),
        concat!("omni-", "2026"),
        concat!("/work/", "shared"),
    ];
    let mut files = Vec::new();
    for dir in ["crates", "docs", "charts"] {
        text_files(&repo().join(dir), &mut files);
    }
    files.push(repo().join("README.md"));
    files.push(repo().join("CHANGELOG.md"));
    let mut problems = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let shown = file
            .strip_prefix(repo())
            .unwrap_or(&file)
            .display()
            .to_string();
        for pattern in outside {
            if text.contains(pattern) {
                problems.push(format!("{shown}: cites {pattern:?}"));
            }
        }
        let mut rest = text.as_str();
        while let Some(at) = rest.find(".md#") {
            let before = &rest[..at];
            let page_start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .map_or(0, |i| i + 1);
            let page = &before[page_start..];
            let after = &rest[at + 4..];
            let anchor_end = after
                .find(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
                .unwrap_or(after.len());
            let anchor = &after[..anchor_end];
            // Only pages of docs/ are checked (a crate README's anchors are its own business).
            let in_docs = before[..page_start].ends_with("docs/")
                || before[..page_start].ends_with("](")
                || before[..page_start].ends_with("](../../docs/");
            if in_docs
                && let Some(page_anchors) = anchors.get(page)
                && !page_anchors.contains(anchor)
            {
                problems.push(format!("{shown}: {page}.md#{anchor} names no heading"));
            }
            rest = &after[anchor_end..];
        }
    }
    assert!(problems.is_empty(), "references to fix: {problems:#?}");
}
