//! docs/sandbox.md's flags table is the command line: every flag, its default and its
//! variable, and nothing the command does not have (the table once fell apart in two).

use clap::CommandFactory as _;
use omni_sandbox::cli::Args;
use omni_sandbox::repo_root;

/// The rows of the table under `## Flags` (up to the next heading), as cells.
fn flag_rows() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(repo_root().join("docs/sandbox.md")).unwrap();
    let start = text.find("## Flags").expect("a Flags section");
    let section: Vec<&str> = text[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .collect();
    let table: Vec<&str> = section
        .iter()
        .copied()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    // A table ends at its first non-table line: every flag must be in this one.
    table
        .iter()
        .skip(2)
        .map(|row| {
            row.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_flags_table_is_the_command_line() {
    let command = Args::command();
    let rows = flag_rows();
    let mut documented = Vec::new();
    for row in &rows {
        let flag = row[0]
            .split('`')
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.strip_prefix("--"))
            .unwrap_or_else(|| panic!("a row without a flag: {row:?}"))
            .to_string();
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
            .unwrap_or_else(|| panic!("docs/sandbox.md documents --{flag}, which does not exist"));
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let cell = &row[1];
        let first_span = cell.split('`').nth(1).filter(|_| cell.starts_with('`'));
        match defaults.as_slice() {
            [] => assert!(
                first_span.is_none(),
                "--{flag} has no default, docs say {cell}"
            ),
            [d] if d == "false" => assert_eq!(cell, "off", "--{flag}"),
            [d] => assert_eq!(first_span, Some(d.as_str()), "--{flag}: docs say {cell}"),
            many => panic!("--{flag} has several defaults {many:?}"),
        }
        if let Some(env) = arg.get_env() {
            let env = env.to_string_lossy();
            assert!(
                row[0].contains(&format!("`{env}`")),
                "--{flag} reads {env}; docs: {}",
                row[0]
            );
        }
        documented.push(flag);
    }
    let mut missing: Vec<String> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|long| !["help", "version"].contains(long))
        .filter(|long| !documented.iter().any(|d| d == long))
        .map(String::from)
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "flags missing from docs/sandbox.md's table: {missing:?}"
    );
}
