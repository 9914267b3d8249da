//! Property tests over the cluster-template model (parse, validate, translate, emit) and the
//! Go duration parser.
//!
//! Properties: no panic on any text, output proportionate to the input, emitted YAML parses
//! back to a template that emits the same YAML, and durations read and print Go's
//! `Duration.String()` format.
//!
//! Each target runs a few thousand cases by default; `FUZZ_CASES=N` runs N per target (the
//! long mode, see docs/development.md). A minimised failing input is printed, never written
//! to a file: it belongs in a regular regression test next to the fixed code.

use crate::fuzz_support;

use fuzz_support::{config, duration_text, leaf_string, wild_json, yaml_text};
use omni_client::duration::{self, GoDuration};
use omni_client::template::{self, FileResolver, Template};
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use serde_json::{Map, Value, json};

/// Output may be this many bytes per input byte plus a constant: generous for messages that
/// quote a value once, far below any blow-up.
fn proportionate(output_len: usize, input_len: usize) -> bool {
    output_len <= 16 * input_len + 16 * 1024
}

// ---------------------------------------------------------------------------------------------
// Template documents
// ---------------------------------------------------------------------------------------------

/// An object with each of `fields` present or not; one wild value in twenty (wrong type,
/// huge number, deep nesting) and now and then a field the model does not know.
fn object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let entries: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .into_iter()
        .map(|(key, value)| {
            prop_oneof![
                6 => value.prop_map(move |v| Some((key.to_string(), v))),
                1 => wild_json().prop_map(move |v| Some((key.to_string(), v))),
                6 => Just(None),
            ]
            .boxed()
        })
        .collect();
    (entries, proptest::option::weighted(0.05, leaf_string()))
        .prop_map(|(entries, unknown)| {
            let mut map: Map<String, Value> = entries.into_iter().flatten().collect();
            if let Some(key) = unknown {
                map.insert(key, json!(1));
            }
            Value::Object(map)
        })
        .boxed()
}

fn text() -> BoxedStrategy<Value> {
    leaf_string().prop_map(Value::String).boxed()
}

fn descriptors() -> BoxedStrategy<Value> {
    proptest::collection::btree_map(leaf_string(), leaf_string(), 0..3)
        .prop_map(|m| json!(m))
        .boxed()
}

fn strings() -> BoxedStrategy<Value> {
    proptest::collection::vec(leaf_string(), 0..3)
        .prop_map(|v| json!(v))
        .boxed()
}

fn machine_ids() -> BoxedStrategy<Value> {
    let id = prop_oneof![
        4 => proptest::sample::select(vec![
            "123e4567-e89b-12d3-a456-426614174000",
            "223e4567-e89b-12d3-a456-426614174000",
            "323e4567-e89b-12d3-a456-426614174000",
        ])
        .prop_map(str::to_string),
        1 => leaf_string(),
    ];
    proptest::collection::vec(id, 0..3)
        .prop_map(|v| json!(v))
        .boxed()
}

fn patches() -> BoxedStrategy<Value> {
    let patch = object(vec![
        ("name", text()),
        ("idOverride", text()),
        ("file", text()),
        ("inline", wild_json()),
        ("labels", descriptors()),
        ("annotations", descriptors()),
    ]);
    proptest::collection::vec(patch, 0..3)
        .prop_map(Value::Array)
        .boxed()
}

fn strategy() -> BoxedStrategy<Value> {
    object(vec![
        ("type", text()),
        (
            "rolling",
            object(vec![(
                "maxParallelism",
                prop_oneof![(0u32..5).prop_map(Value::from), fuzz_support::edge_number()].boxed(),
            )]),
        ),
    ])
}

fn cluster_doc() -> BoxedStrategy<Value> {
    let manifest = object(vec![
        ("name", text()),
        ("mode", text()),
        ("inline", wild_json()),
        ("file", text()),
        ("labels", descriptors()),
        ("annotations", descriptors()),
    ]);
    let healthcheck = object(vec![
        ("name", text()),
        ("idOverride", text()),
        ("job", wild_json()),
        ("file", text()),
        ("interval", text()),
        ("labels", descriptors()),
        ("annotations", descriptors()),
    ]);
    object(vec![
        ("name", text()),
        ("labels", descriptors()),
        ("annotations", descriptors()),
        (
            "kubernetes",
            object(vec![
                ("version", text()),
                (
                    "manifests",
                    proptest::collection::vec(manifest, 0..3)
                        .prop_map(Value::Array)
                        .boxed(),
                ),
                (
                    "healthchecks",
                    proptest::collection::vec(healthcheck, 0..2)
                        .prop_map(Value::Array)
                        .boxed(),
                ),
            ]),
        ),
        ("talos", object(vec![("version", text())])),
        (
            "features",
            object(vec![
                (
                    "enableWorkloadProxy",
                    any::<bool>().prop_map(Value::Bool).boxed(),
                ),
                (
                    "useEmbeddedDiscoveryService",
                    any::<bool>().prop_map(Value::Bool).boxed(),
                ),
                (
                    "diskEncryption",
                    any::<bool>().prop_map(Value::Bool).boxed(),
                ),
                ("backupConfiguration", object(vec![("interval", text())])),
            ]),
        ),
        ("patches", patches()),
        ("kernelArgs", strings()),
        ("systemExtensions", strings()),
    ])
    .prop_map(|v| with_kind(v, "Cluster"))
    .boxed()
}

fn machine_set_doc(kind: &'static str) -> BoxedStrategy<Value> {
    object(vec![
        ("name", text()),
        ("labels", descriptors()),
        ("annotations", descriptors()),
        ("machines", machine_ids()),
        (
            "machineClass",
            object(vec![
                ("name", text()),
                (
                    "size",
                    prop_oneof![
                        (0u32..5).prop_map(Value::from),
                        Just(json!("unlimited")),
                        fuzz_support::edge_number()
                    ]
                    .boxed(),
                ),
            ]),
        ),
        (
            "bootstrapSpec",
            object(vec![("clusterUUID", text()), ("snapshot", text())]),
        ),
        ("updateStrategy", strategy()),
        ("upgradeStrategy", strategy()),
        ("deleteStrategy", strategy()),
        ("patches", patches()),
        ("kernelArgs", strings()),
        ("systemExtensions", strings()),
    ])
    .prop_map(move |v| with_kind(v, kind))
    .boxed()
}

fn machine_doc() -> BoxedStrategy<Value> {
    object(vec![
        (
            "name",
            prop_oneof![Just(json!("123e4567-e89b-12d3-a456-426614174000")), text()].boxed(),
        ),
        ("labels", descriptors()),
        ("annotations", descriptors()),
        ("locked", any::<bool>().prop_map(Value::Bool).boxed()),
        ("install", object(vec![("disk", text())])),
        ("patches", patches()),
        ("kernelArgs", strings()),
        ("systemExtensions", strings()),
    ])
    .prop_map(|v| with_kind(v, "Machine"))
    .boxed()
}

fn with_kind(mut doc: Value, kind: &str) -> Value {
    if let Some(map) = doc.as_object_mut() {
        map.insert("kind".into(), json!(kind));
    }
    doc
}

/// A template text: documents of every kind in a usual order (as YAML), with now and then a
/// stray document, or YAML that stresses the reader (aliases, deep nesting, odd syntax).
fn template_text() -> BoxedStrategy<String> {
    let documents = (
        cluster_doc(),
        machine_set_doc("ControlPlane"),
        proptest::collection::vec(machine_set_doc("Workers"), 0..3),
        proptest::collection::vec(machine_doc(), 0..3),
        proptest::option::weighted(0.1, wild_json()),
    )
        .prop_map(|(cluster, cp, workers, machines, stray)| {
            let mut docs = vec![cluster, cp];
            docs.extend(workers);
            docs.extend(machines);
            docs.extend(stray);
            docs.iter()
                .map(|d| serde_saphyr::to_string(d).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("---\n")
        });
    prop_oneof![6 => documents, 1 => yaml_text()].boxed()
}

fn no_files() -> FileResolver {
    FileResolver::disabled("file references are off in property tests")
}

proptest! {
    #![proptest_config(config())]

    /// Any text is parsed or refused; a parsed template validates and translates without
    /// panicking, and its emitted YAML parses back to a template emitting the same YAML.
    #[test]
    fn template_parse_validate_translate_and_emit_round_trip(text in template_text()) {
        let template = match Template::parse(&text) {
            Ok(template) => template,
            Err(error) => {
                prop_assert!(proportionate(error.to_string().len(), text.len()));
                return Ok(());
            }
        };
        let files = no_files();
        if let Err(errors) = template.validate(&files) {
            prop_assert!(!errors.0.is_empty());
            prop_assert!(proportionate(errors.to_string().len(), text.len()));
        }
        match template::translate(&template, &files) {
            Ok(resources) => {
                let encoded: usize = resources.iter().map(|r| r.spec.encode().len()).sum();
                prop_assert!(proportionate(encoded, text.len()), "{encoded} bytes from {}", text.len());
            }
            Err(error) => prop_assert!(proportionate(error.to_string().len(), text.len())),
        }
        let emitted = template.to_yaml();
        let reparsed = Template::parse(&emitted)
            .map_err(|e| TestCaseError::fail(format!("emitted YAML does not parse: {e}\n{emitted}")))?;
        // Same text again, not the same model: like Go's encoder, the emitter writes integral
        // floats (`1.0`, `-0.0`) as integers, which read back as integers.
        prop_assert_eq!(reparsed.to_yaml(), emitted);
    }

    /// The config-patch check and inline-content helpers accept any value without panicking.
    #[test]
    fn patch_checks_never_panic(value in wild_json(), text in yaml_text()) {
        if let Ok(content) = template::inline_content(&value) {
            let _ = template::check_config_patch(&content);
        }
        let _ = template::check_config_patch(&text);
    }
}

// ---------------------------------------------------------------------------------------------
// Durations
// ---------------------------------------------------------------------------------------------

/// Go's `Duration.String()` for non-negative nanoseconds (`1h2m3.5s`, `1.5ms`, `0s`).
fn go_format(nanos: u64) -> String {
    const SECOND: u64 = 1_000_000_000;
    let frac = |v: u64, digits: u32| {
        let div = 10u64.pow(digits);
        let rest = v % div;
        let text = if rest == 0 {
            String::new()
        } else {
            format!(".{:0width$}", rest, width = digits as usize)
                .trim_end_matches('0')
                .to_string()
        };
        (v / div, text)
    };
    match nanos {
        0 => "0s".into(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => {
            let (i, f) = frac(n, 3);
            format!("{i}{f}µs")
        }
        n if n < SECOND => {
            let (i, f) = frac(n, 6);
            format!("{i}{f}ms")
        }
        n => {
            let (secs, f) = frac(n, 9);
            let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
            match (h, m) {
                (0, 0) => format!("{s}{f}s"),
                (0, m) => format!("{m}m{s}{f}s"),
                (h, m) => format!("{h}h{m}m{s}{f}s"),
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// The parser reads Go's format back exactly over Go's whole range, and prints it as Go does.
    #[test]
    fn durations_read_and_print_go_format(nanos in 0..=i64::MAX as u64) {
        let text = go_format(nanos);
        let signed = i64::try_from(nanos).unwrap_or(i64::MAX);
        prop_assert_eq!(GoDuration::parse(&text), Ok(GoDuration::from_nanos(signed)));
        prop_assert_eq!(GoDuration::from_nanos(signed).to_string(), text.clone());
        prop_assert_eq!(duration::parse_go_duration(&text), Ok(std::time::Duration::from_nanos(nanos)));
    }

    /// On any text the parser never panics; what it reads prints back to the same value; the
    /// non-negative form agrees with it; errors stay short.
    #[test]
    fn durations_never_panic_and_round_trip(text in duration_text()) {
        match GoDuration::parse(&text) {
            Ok(d) => {
                prop_assert_eq!(GoDuration::parse(&d.to_string()), Ok(d));
                prop_assert_eq!(duration::parse_go_duration(&text).ok(), d.to_std());
            }
            Err(e) => {
                prop_assert!(duration::parse_go_duration(&text).is_err());
                prop_assert!(proportionate(e.to_string().len(), text.len()));
            }
        }
    }
}
