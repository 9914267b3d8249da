//! The offline schema checker must know every pattern and CEL rule our CRDs contain, accept
//! every shipped sample, and report what the API server would reject.

use omni_operator::api::{self, schema_check};
use serde_json::{Value, json};

fn walk(node: &Value, patterns: &mut Vec<String>, rules: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(p) = map.get("pattern").and_then(Value::as_str) {
                patterns.push(p.to_string());
            }
            for r in map
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                rules.push(r["rule"].as_str().unwrap_or_default().to_string());
            }
            map.values().for_each(|v| walk(v, patterns, rules));
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, patterns, rules)),
        _ => {}
    }
}

#[test]
fn every_pattern_and_rule_in_the_crds_is_evaluated() {
    let mut patterns = Vec::new();
    let mut rules = Vec::new();
    for crd in api::crds() {
        walk(
            &serde_json::to_value(&crd).unwrap(),
            &mut patterns,
            &mut rules,
        );
    }
    assert!(!patterns.is_empty() && !rules.is_empty());
    for p in &patterns {
        assert!(
            schema_check::matches_pattern(p, "x").is_some(),
            "pattern {p:?} is not implemented"
        );
    }
    let empty = serde_json::Map::new();
    for r in &rules {
        assert!(
            schema_check::evaluate_rule(r, &empty).is_some(),
            "CEL rule {r:?} is not implemented"
        );
    }
}

#[test]
fn samples_pass_the_schema() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/samples");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for doc in docs {
            let errors = schema_check::check(doc["kind"].as_str().unwrap(), &doc);
            assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        }
    }
}

fn check(kind: &str, spec: Value) -> Vec<String> {
    let obj = json!({"apiVersion": "omni.texashpc.com/v1alpha1", "kind": kind, "metadata": {"name": "x"}, "spec": spec});
    schema_check::check(kind, &obj)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn reports_what_the_api_server_rejects() {
    let cp = |extra: Value| {
        let mut spec = json!({"clusterRef": {"name": "c"}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        check("OmniControlPlane", spec)
    };
    let exactly_one =
        r#"spec: Invalid value: "object": exactly one of machines or machineClass is required"#;
    assert_eq!(cp(json!({})), vec![exactly_one]);
    assert_eq!(
        cp(json!({"machines": ["m"], "machineClass": {"name": "a", "size": 1}})),
        vec![exactly_one]
    );
    assert!(cp(json!({"machineClass": {"name": "a", "size": "unlimited"}})).is_empty());
    assert_eq!(
        cp(json!({"machineClass": {"name": "a", "size": true}})),
        vec![
            r#"spec.machineClass.size: Invalid value: "true": spec.machineClass.size in body must be of type int-or-string"#
        ]
    );

    assert_eq!(
        check(
            "OmniConnection",
            json!({"endpoint": "omni.example.com", "auth": {"serviceAccountSecretRef": {"name": "s"}}})
        ),
        vec![
            r#"spec.endpoint: Invalid value: "omni.example.com": spec.endpoint in body should match '^(https?|grpc)://.+'"#
        ]
    );
    assert_eq!(
        check("OmniConnection", json!({"endpoint": "https://o"})),
        vec!["spec.auth: Required value"]
    );
    assert_eq!(
        check(
            "OmniConnection",
            json!({"endpoint": "https://o", "auth": {"serviceAccountSecretRef": {"name": "s"}}, "insecure": true})
        ),
        vec![
            "spec.insecure: Forbidden: unknown field; the API server rejects it under strict field validation"
        ]
    );
    assert_eq!(
        check(
            "OmniKubeconfigExport",
            json!({
                "clusterRef": {"name": "c"}, "targetSecretRef": {"name": "t"}, "ttl": "1h",
                "serviceAccount": {"user": "u", "groups": ["a", "b", "a"]}, "deletionPolicy": "Delete",
                "contextNamespace": "x".repeat(64)
            })
        ),
        vec![
            format!(
                r#"spec.contextNamespace: Invalid value: "{}": spec.contextNamespace in body should be at most 63 chars long"#,
                "x".repeat(64)
            ),
            r#"spec.serviceAccount.groups[2]: Duplicate value: "a""#.to_string(),
        ]
    );
    assert_eq!(
        check(
            "OmniHelmRelease",
            json!({
                "clusterRef": {"name": "c"}, "kubeconfigSecretRef": {"name": "k"}, "maxHistory": -1,
                "chart": {"repository": "https://r", "chart": "c", "version": "1", "values": {"any": {"nested": [1, "x"]}}}
            })
        ),
        vec![
            r#"spec.maxHistory: Invalid value: "-1": spec.maxHistory in body should be greater than or equal to 0"#
        ]
    );
    assert_eq!(
        check("OmniCluster", Value::Null),
        vec!["spec: Required value"]
    );
    let no_spec = json!({"apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster", "metadata": {"name": "x"}});
    assert_eq!(
        schema_check::check("OmniCluster", &no_spec)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["spec: Required value"]
    );
}
