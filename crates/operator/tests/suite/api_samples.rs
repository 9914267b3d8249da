//! The samples in `config/samples/` are what users copy first: each must validate cleanly,
//! every kind must have one, and the file order must let `kubectl apply -f` create them in
//! dependency order.

use std::collections::BTreeSet;
use std::path::PathBuf;

use omni_operator::api::{self, KINDS};
use serde_json::Value;

fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/samples")
}

/// (file name, document) for every sample document, files in name order.
fn samples() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .expect("config/samples exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.extend(docs.into_iter().map(|d| (name.clone(), d)));
    }
    out
}

#[test]
fn every_sample_validates_clean() {
    let all = samples();
    assert!(!all.is_empty());
    for (file, doc) in &all {
        let kind = doc["kind"].as_str().unwrap_or_default();
        assert_eq!(
            doc["apiVersion"], "omni.texashpc.com/v1alpha1",
            "{file}: only our kinds (no Secrets)"
        );
        assert_eq!(
            doc["metadata"]["namespace"], "omni-cluster-operator-system",
            "{file}"
        );
        let v = api::validate_dynamic(kind, doc, None).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(v.is_valid(), "{file}: {}", v.error_summary());
    }
}

#[test]
fn every_kind_has_a_sample_in_dependency_order() {
    let all = samples();
    let kinds: Vec<&str> = all
        .iter()
        .map(|(_, d)| d["kind"].as_str().unwrap())
        .collect();
    let present: BTreeSet<&str> = kinds.iter().copied().collect();
    assert_eq!(present, KINDS.iter().copied().collect::<BTreeSet<_>>());
    // First appearance of each kind follows KINDS order (connection before cluster before children...).
    let mut first: Vec<&str> = Vec::new();
    for k in kinds {
        if !first.contains(&k) {
            first.push(k);
        }
    }
    assert_eq!(first, KINDS.to_vec());
    for (file, doc) in &all {
        let kind = doc["kind"].as_str().unwrap().to_lowercase();
        assert!(
            file.ends_with(&format!("-{kind}.yaml")),
            "{file} should be named <nn>-{kind}.yaml"
        );
    }
}

#[test]
fn samples_reference_each_other_consistently() {
    let all = samples();
    let names = |kind: &str| -> BTreeSet<String> {
        all.iter()
            .filter(|(_, d)| d["kind"] == kind)
            .map(|(_, d)| d["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let clusters = names("OmniCluster");
    let connections = names("OmniConnection");
    let exported: BTreeSet<String> = all
        .iter()
        .filter(|(_, d)| d["kind"] == "OmniKubeconfigExport")
        .map(|(_, d)| {
            d["spec"]["targetSecretRef"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for (file, doc) in &all {
        let spec = &doc["spec"];
        if let Some(c) = spec["connectionRef"]["name"].as_str() {
            assert!(connections.contains(c), "{file}: unknown connection {c}");
        }
        if let Some(c) = spec["clusterRef"]["name"].as_str() {
            assert!(clusters.contains(c), "{file}: unknown cluster {c}");
        }
        if let Some(k) = spec["kubeconfigSecretRef"]["name"].as_str() {
            assert!(
                exported.contains(k),
                "{file}: kubeconfig Secret {k} is not produced by any sample export"
            );
        }
    }
}
