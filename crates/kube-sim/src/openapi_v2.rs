//! `/openapi/v2`: the Swagger 2.0 document kubectl still reads for client-side validation —
//! `kubectl apply -f` of a `kind: List` (what `kubectl get -o yaml` writes) validates the
//! items against it, because server-side field validation is not asked for Lists.
//!
//! client-go requests it as protobuf (`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`)
//! and decodes the answer as the gnostic `openapi.v2.Document` message; given JSON, kubectl
//! 1.35 fails ("error validating data: the server could not find the requested resource").
//! Other clients get JSON.
//!
//! Definitions: `ObjectMeta` and every custom resource kind, with its CRD schema converted the
//! way the real server publishes v2 (no `nullable`, `oneOf`/`anyOf`/`allOf`/`not` or CEL rules;
//! `x-kubernetes-preserve-unknown-fields` and int-or-string nodes lose their type, so kubectl
//! accepts anything there), tagged with `x-kubernetes-group-version-kind`. Built-in kinds are
//! left out: kube-sim has no schemas for them, and without a definition kubectl skips
//! client-side validation and computes strategic merge patches from its compiled-in types,
//! as it should. The document has no `paths` (no client reads v2 paths while v3 is served).

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::store::Store;

/// Content type of the protobuf form, as the real server labels it: clients ask with
/// `…spec.v2@v1.0+protobuf`, but Go's media type parser refuses the `@`, so the answer says
/// `.v1.0`.
const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Answers `/openapi/v2` in the representation the client asked for.
pub(crate) fn serve(store: &Store, headers: &HeaderMap) -> Response {
    let doc = document(store);
    let wants_protobuf = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("protobuf"));
    let (body, content_type) = if wants_protobuf {
        (encode_document(&doc), PROTOBUF)
    } else {
        (doc.to_string().into_bytes(), "application/json")
    };
    let mut resp = body.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// The Swagger 2.0 document (JSON form).
pub(crate) fn document(store: &Store) -> Value {
    let mut definitions = Map::new();
    definitions.insert(
        OBJECT_META.into(),
        json!({
            "description": "ObjectMeta is metadata that all persisted resources must have.",
            "type": "object",
            "properties": {
                "name": {"type": "string"}, "generateName": {"type": "string"},
                "namespace": {"type": "string"}, "selfLink": {"type": "string"},
                "uid": {"type": "string"}, "resourceVersion": {"type": "string"},
                "generation": {"type": "integer", "format": "int64"},
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "deletionTimestamp": {"type": "string", "format": "date-time"},
                "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"}},
                "ownerReferences": {"type": "array", "items": {"type": "object"}},
                "managedFields": {"type": "array", "items": {"type": "object"}},
            },
        }),
    );
    for t in store.types() {
        let Some(schema) = crate::schema::crd_schema(store, &t) else {
            continue;
        };
        let mut schema = to_v2(schema);
        if let Some(obj) = schema.as_object_mut() {
            let props = obj
                .entry("properties")
                .or_insert_with(|| json!({}))
                .as_object_mut();
            if let Some(props) = props {
                props.insert("apiVersion".into(), json!({"type": "string"}));
                props.insert("kind".into(), json!({"type": "string"}));
                props.insert(
                    "metadata".into(),
                    json!({"$ref": format!("#/definitions/{OBJECT_META}")}),
                );
            }
            obj.insert("type".into(), json!("object"));
            obj.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": t.group, "version": t.version, "kind": t.kind}]),
            );
        }
        let reversed: Vec<&str> = t.group.split('.').rev().collect();
        definitions.insert(
            format!("{}.{}.{}", reversed.join("."), t.version, t.kind),
            schema,
        );
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0"},
        "paths": {},
        "definitions": definitions,
    })
}

/// A CRD's structural v3 schema as the real server publishes it in v2.
fn to_v2(mut schema: Value) -> Value {
    let Some(obj) = schema.as_object_mut() else {
        return schema;
    };
    for key in [
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "x-kubernetes-validations",
        "nullable",
    ] {
        obj.remove(key);
    }
    let flag =
        |obj: &Map<String, Value>, k: &str| obj.get(k).and_then(Value::as_bool) == Some(true);
    if flag(obj, "x-kubernetes-preserve-unknown-fields") {
        // kubectl's v2 validator would call every field it does not list unknown.
        for key in ["type", "properties", "additionalProperties", "items"] {
            obj.remove(key);
        }
    }
    if flag(obj, "x-kubernetes-int-or-string") {
        obj.remove("type");
    }
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        for v in props.values_mut() {
            *v = to_v2(v.take());
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.get_mut(key).filter(|s| s.is_object()) {
            *sub = to_v2(sub.take());
        }
    }
    schema
}

// --- protobuf encoding of the gnostic openapi.v2 messages -----------------------------------

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf.push(byte);
            return;
        }
        buf.push(byte | 0x80);
    }
}

fn put_key(buf: &mut Vec<u8>, field: u64, wire_type: u64) {
    put_varint(buf, (field << 3) | wire_type);
}

fn put_bytes(buf: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_key(buf, field, 2);
    put_varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

fn put_str(buf: &mut Vec<u8>, field: u64, s: &str) {
    if !s.is_empty() {
        put_bytes(buf, field, s.as_bytes());
    }
}

fn put_bool(buf: &mut Vec<u8>, field: u64, b: bool) {
    if b {
        put_key(buf, field, 0);
        put_varint(buf, 1);
    }
}

fn put_int(buf: &mut Vec<u8>, field: u64, v: i64) {
    put_key(buf, field, 0);
    put_varint(buf, v as u64);
}

fn put_double(buf: &mut Vec<u8>, field: u64, v: f64) {
    put_key(buf, field, 1);
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `Any { yaml = 2 }`: the value as YAML text (JSON is YAML).
fn any(value: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    put_str(&mut buf, 2, &value.to_string());
    buf
}

/// `NamedAny { name = 1; value = 2 }`.
fn named_any(name: &str, value: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    put_str(&mut buf, 1, name);
    put_bytes(&mut buf, 2, &any(value));
    buf
}

/// `NamedSchema { name = 1; value = 2 }`.
fn named_schema(name: &str, schema: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    put_str(&mut buf, 1, name);
    put_bytes(&mut buf, 2, &encode_schema(schema));
    buf
}

/// The `Schema` message.
fn encode_schema(s: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    let str_of = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or_default();
    put_str(&mut buf, 1, str_of("$ref"));
    put_str(&mut buf, 2, str_of("format"));
    put_str(&mut buf, 3, str_of("title"));
    put_str(&mut buf, 4, str_of("description"));
    if let Some(d) = s.get("default") {
        put_bytes(&mut buf, 5, &any(d));
    }
    for (key, field) in [("multipleOf", 6), ("maximum", 7), ("minimum", 9)] {
        if let Some(v) = s.get(key).and_then(Value::as_f64) {
            put_double(&mut buf, field, v);
        }
    }
    put_bool(&mut buf, 8, s.get("exclusiveMaximum") == Some(&json!(true)));
    put_bool(
        &mut buf,
        10,
        s.get("exclusiveMinimum") == Some(&json!(true)),
    );
    for (key, field) in [
        ("maxLength", 11),
        ("minLength", 12),
        ("maxItems", 14),
        ("minItems", 15),
        ("maxProperties", 17),
        ("minProperties", 18),
    ] {
        if let Some(v) = s.get(key).and_then(Value::as_i64) {
            put_int(&mut buf, field, v);
        }
    }
    put_str(&mut buf, 13, str_of("pattern"));
    put_bool(&mut buf, 16, s.get("uniqueItems") == Some(&json!(true)));
    for r in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        put_str(&mut buf, 19, r.as_str().unwrap_or_default());
    }
    for e in s
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        put_bytes(&mut buf, 20, &any(e));
    }
    match s.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut item = Vec::new();
            put_key(&mut item, 2, 0);
            put_varint(&mut item, u64::from(*b));
            put_bytes(&mut buf, 21, &item);
        }
        Some(sub @ Value::Object(_)) => {
            let mut item = Vec::new();
            put_bytes(&mut item, 1, &encode_schema(sub));
            put_bytes(&mut buf, 21, &item);
        }
        _ => {}
    }
    if let Some(ty) = s.get("type").and_then(Value::as_str) {
        let mut item = Vec::new();
        put_str(&mut item, 1, ty);
        put_bytes(&mut buf, 22, &item);
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        let mut item = Vec::new();
        put_bytes(&mut item, 1, &encode_schema(items));
        put_bytes(&mut buf, 23, &item);
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        let mut properties = Vec::new();
        for (name, sub) in props {
            put_bytes(&mut properties, 1, &named_schema(name, sub));
        }
        put_bytes(&mut buf, 25, &properties);
    }
    if let Some(obj) = s.as_object() {
        for (key, value) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
            put_bytes(&mut buf, 31, &named_any(key, value));
        }
    }
    buf
}

/// The `Document` message: swagger (1), info (2), paths (8), definitions (9).
fn encode_document(doc: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    put_str(&mut buf, 1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Vec::new();
    put_str(
        &mut info,
        1,
        doc["info"]["title"].as_str().unwrap_or_default(),
    );
    put_str(
        &mut info,
        2,
        doc["info"]["version"].as_str().unwrap_or_default(),
    );
    put_bytes(&mut buf, 2, &info);
    put_bytes(&mut buf, 8, &[]);
    let mut definitions = Vec::new();
    for (name, schema) in doc["definitions"].as_object().into_iter().flatten() {
        put_bytes(&mut definitions, 1, &named_schema(name, schema));
    }
    put_bytes(&mut buf, 9, &definitions);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preserved_and_int_or_string_nodes_lose_their_type_in_v2() {
        let v3 = json!({"type": "object", "properties": {
            "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"a": {"type": "string"}}},
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "name": {"type": "string", "nullable": true, "x-kubernetes-validations": [{"rule": "true"}]},
        }});
        let v2 = to_v2(v3);
        assert_eq!(
            v2["properties"]["values"],
            json!({"x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            v2["properties"]["port"],
            json!({"x-kubernetes-int-or-string": true})
        );
        assert_eq!(v2["properties"]["name"], json!({"type": "string"}));
    }

    #[test]
    fn schemas_encode_as_gnostic_messages() {
        let bytes = encode_schema(&json!({"type": "string", "maxLength": 3}));
        // maxLength (11, varint 3), then type (22: TypeItem { value: "string" }).
        assert_eq!(
            bytes,
            [
                &[0x58, 3][..],
                &[0xb2, 0x01, 8, 0x0a, 6],
                b"string".as_slice()
            ]
            .concat()
        );
    }
}
