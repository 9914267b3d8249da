//! Generators and settings shared by the property tests of omni-client and the operator
//! (the operator's test suite includes this file by path, for `fuzz_input.rs`).

#![allow(dead_code)]

use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use proptest::test_runner::Config;
use serde_json::{Value, json};

/// Cases per target when `FUZZ_CASES` is unset: enough to find shallow bugs on every run while
/// keeping a test file well under a minute.
pub const DEFAULT_CASES: u32 = 1_000;

/// Cases per target: `FUZZ_CASES` (the long mode) or [`DEFAULT_CASES`].
pub fn cases() -> u32 {
    match std::env::var("FUZZ_CASES") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("FUZZ_CASES must be a whole number, not {text:?}")),
        Err(_) => DEFAULT_CASES,
    }
}

/// The proptest settings every target uses: [`cases`] cases, no failure files written into
/// the source tree (a minimised input is printed and becomes a regression test instead), and
/// a bounded shrink so a failure is reported in seconds.
pub fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

/// Strings that reach the interesting branches of validators: names, durations, versions,
/// URLs, paths, YAML snippets, odd Unicode, control characters and long runs.
pub fn leaf_string() -> BoxedStrategy<String> {
    prop_oneof![
        6 => proptest::sample::select(vec![
            "", " ", "a", "demo", "my-cluster", "default", "control-planes", "workers",
            "0", "-1s", "5m", "10s", "9s", "1h30m", "1.5h", "90", "1e400", "300ms", "1µs",
            "2562047h47m16.854775808s", "-2562047h47m16.854775808s", "99999999999999999999h",
            "v1.35.0", "1.35.0", "v1.13.2", "v1", "v1.2.3.4", "latest",
            "https://omni.example.com", "http://127.0.0.1:8080/x", "oci://registry/charts",
            "grpc://[::1]:1", "ftp://x", "https://",
            "patch.yaml", "../../etc/passwd", "/etc/shadow", "dir/../x", "./a",
            "Delete", "Orphan", "Rolling", "Unset", "full", "one-time",
            "123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
            "machine:\n  install:\n    disk: /dev/sda\n", "cluster:\n  network: [1, 2\n",
            "{{ .Values.x }}", "*anchor", "&a [*a, *a]", "!!binary aGk=", "---", "key: : value",
            "a\u{0}b", "tab\there", "line\nbreak", "\u{feff}bom", "\u{202e}rtl", "∞", "🦀",
            "Ω≈ç√", "\u{10ffff}", "é", "ｆｕｌｌ",
        ])
        .prop_map(str::to_string),
        2 => "[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?",
        2 => "\\PC{0,24}",
        1 => any::<String>(),
        1 => (1usize..3000, proptest::sample::select(vec!["a", "é", "-", "9", "🦀"]))
            .prop_map(|(n, s)| s.repeat(n)),
    ]
    .boxed()
}

/// Numbers at the edges of every integer type and of f64.
pub fn edge_number() -> BoxedStrategy<Value> {
    prop_oneof![
        proptest::sample::select(vec![
            json!(0),
            json!(-1),
            json!(1),
            json!(i32::MAX),
            json!(i64::from(i32::MAX) + 1),
            json!(i32::MIN),
            json!(i64::MAX),
            json!(i64::MIN),
            json!(u64::MAX),
            json!(1e300),
            json!(-1e300),
            json!(0.5),
            json!(-0.0),
        ]),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
    ]
    .boxed()
}

/// Arbitrary JSON of bounded size: wrong types for any field, maps with odd keys and, now and
/// then, nesting a hundred levels deep (below serde_json's parse limit of 128, so the same
/// value can also arrive through an HTTP body).
pub fn wild_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        edge_number(),
        leaf_string().prop_map(Value::String),
    ];
    let tree = leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((leaf_string(), inner), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    });
    prop_oneof![
        20 => tree,
        1 => (1usize..100, any::<bool>()).prop_map(|(depth, arrays)| deep(depth, arrays)),
    ]
    .boxed()
}

/// `depth` levels of nested arrays (`[[[…]]]`) or objects (`{"a":{"a":…}}`).
pub fn deep(depth: usize, arrays: bool) -> Value {
    let mut value = Value::Null;
    for _ in 0..depth {
        value = if arrays {
            Value::Array(vec![value])
        } else {
            json!({ "a": value })
        };
    }
    value
}

/// YAML text that stresses a YAML reader: arbitrary text, aliases that multiply
/// ("billion laughs"), deep flow nesting, tags, duplicate keys, multi-document streams.
pub fn yaml_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "\\PC{0,200}",
        1 => any::<String>(),
        // Small bombs only: the reader's node budget refuses big ones after a few seconds of a
        // debug build, which would dominate the run (`alias_bombs_are_refused` covers those).
        1 => (1usize..5, 2usize..6).prop_map(|(levels, fan)| alias_bomb(levels, fan)),
        1 => (1usize..200).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
        1 => (1usize..200).prop_map(|n| format!("{}x{}", "{a: ".repeat(n), "}".repeat(n))),
        1 => proptest::sample::select(vec![
            "a: 1\na: 2\n",
            "--- !!map\n? [1, 2]\n: x\n",
            "key: !!binary aGVsbG8=\n",
            "%YAML 1.1\n---\na: yes\n",
            "---\n---\n...\n---\nkind: Cluster\n",
            "a: &x 1\nb: *y\n",
            "<<: {a: 1}\n",
            "a: \"\\uD800\"\n",
            "a: |\n  text\n b: 1\n",
            "\t- x\n",
        ])
        .prop_map(str::to_string),
    ]
    .boxed()
}

/// A YAML alias bomb: each level is a list of `fan` aliases of the previous one, so the fully
/// expanded value has `fan^levels` leaves while the text stays a few hundred bytes.
pub fn alias_bomb(levels: usize, fan: usize) -> String {
    let mut text = String::from("l0: &l0 [\"lol\"]\n");
    for level in 1..=levels {
        let refs = vec![format!("*l{}", level - 1); fan].join(", ");
        text.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
    }
    text
}

/// Text that looks like a Go duration often enough to reach every branch: signs, long digit
/// runs (past u64 and u128), fractions, known and unknown units (including the two micro signs).
pub fn duration_text() -> BoxedStrategy<String> {
    let number = prop_oneof![
        "[0-9]{1,3}",
        "[0-9]{15,45}",
        "[0-9]{0,3}\\.[0-9]{0,25}",
        "[0-9]{15,40}\\.[0-9]{1,25}",
    ];
    let unit = prop_oneof![
        8 => proptest::sample::select(vec!["ns", "us", "µs", "μs", "ms", "s", "m", "h"]),
        1 => proptest::sample::select(vec!["", "d", "H", "sec", "µ", "\u{0}", "é", "🦀"]),
    ];
    prop_oneof![
        8 => (
            proptest::sample::select(vec!["", "", "", "-", "+"]),
            proptest::collection::vec((number, unit), 1..5)
        )
            .prop_map(|(sign, parts)| {
                let mut s = sign.to_string();
                for (n, u) in parts {
                    s.push_str(&n);
                    s.push_str(u);
                }
                s
            }),
        1 => leaf_string(),
        1 => "\\PC{0,12}",
    ]
    .boxed()
}
