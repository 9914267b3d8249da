//! Request bodies in the Kubernetes protobuf encoding, for the kinds clients actually send that
//! way: client-go's typed clientsets (helm's release storage among them) write Secrets and
//! ConfigMaps as `application/vnd.kubernetes.protobuf`. The body is the `k8s\0` magic followed
//! by a `runtime.Unknown` envelope whose `raw` field holds the object; we decode Secret,
//! ConfigMap, Namespace (kubectl create namespace), SelfSubjectAccessReview (kubectl auth
//! can-i) and their ObjectMeta into the JSON form the store keeps. Other kinds in protobuf
//! get 415 UnsupportedMediaType (see the README). Responses are always JSON, which client-go
//! accepts whatever it sent.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// The media type of the Kubernetes protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// One decoded protobuf field: number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Splits a protobuf message into its fields (fixed32/fixed64 are skipped: none of the decoded
/// kinds use them).
fn fields(mut buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let number = key >> 3;
        match key & 7 {
            0 => out.push((number, Field::Varint(varint(&mut buf)?))),
            1 => buf = buf.get(8..).ok_or("truncated fixed64")?,
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|_| "length overflow")?;
                let value = buf.get(..len).ok_or("truncated length-delimited field")?;
                out.push((number, Field::Bytes(value)));
                buf = &buf[len..];
            }
            5 => buf = buf.get(4..).ok_or("truncated fixed32")?,
            w => return Err(format!("unsupported wire type {w}")),
        }
    }
    Ok(out)
}

fn varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or("truncated varint")?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long".into())
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "a string field is not UTF-8".to_owned())
}

/// A `map<string, string|bytes>` entry: key 1, value 2.
fn map_entry(b: &[u8], value_is_bytes: bool) -> Result<(String, Value), String> {
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(k)) => key = text(k)?,
            (2, Field::Bytes(v)) if value_is_bytes => {
                value = json!(base64::engine::general_purpose::STANDARD.encode(v));
            }
            (2, Field::Bytes(v)) => value = json!(text(v)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn time(b: &[u8]) -> Result<Value, String> {
    let mut seconds = 0i64;
    for (n, f) in fields(b)? {
        if let (1, Field::Varint(v)) = (n, f) {
            seconds = v as i64;
        }
    }
    let ts = jiff::Timestamp::from_second(seconds).map_err(|e| e.to_string())?;
    Ok(json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn owner_reference(b: &[u8]) -> Result<Value, String> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => _ = o.insert("kind".into(), json!(text(v)?)),
            (3, Field::Bytes(v)) => _ = o.insert("name".into(), json!(text(v)?)),
            (4, Field::Bytes(v)) => _ = o.insert("uid".into(), json!(text(v)?)),
            (5, Field::Bytes(v)) => _ = o.insert("apiVersion".into(), json!(text(v)?)),
            (6, Field::Varint(v)) => _ = o.insert("controller".into(), json!(v != 0)),
            (7, Field::Varint(v)) => _ = o.insert("blockOwnerDeletion".into(), json!(v != 0)),
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

fn object_meta(b: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut owners = Vec::new();
    let mut finalizers = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => _ = m.insert("name".into(), json!(text(v)?)),
            (2, Field::Bytes(v)) => _ = m.insert("generateName".into(), json!(text(v)?)),
            (3, Field::Bytes(v)) => _ = m.insert("namespace".into(), json!(text(v)?)),
            (5, Field::Bytes(v)) => _ = m.insert("uid".into(), json!(text(v)?)),
            (6, Field::Bytes(v)) => _ = m.insert("resourceVersion".into(), json!(text(v)?)),
            (7, Field::Varint(v)) => _ = m.insert("generation".into(), json!(v as i64)),
            (8, Field::Bytes(v)) => _ = m.insert("creationTimestamp".into(), time(v)?),
            (9, Field::Bytes(v)) => _ = m.insert("deletionTimestamp".into(), time(v)?),
            (11, Field::Bytes(v)) => {
                let (k, val) = map_entry(v, false)?;
                labels.insert(k, val);
            }
            (12, Field::Bytes(v)) => {
                let (k, val) = map_entry(v, false)?;
                annotations.insert(k, val);
            }
            (13, Field::Bytes(v)) => owners.push(owner_reference(v)?),
            (14, Field::Bytes(v)) => finalizers.push(json!(text(v)?)),
            _ => {}
        }
    }
    // Empty strings are how protobuf spells "unset"; JSON clients omit them.
    m.retain(|_, v| v.as_str() != Some(""));
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !owners.is_empty() {
        m.insert("ownerReferences".into(), Value::Array(owners));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(m))
}

/// Secret: metadata 1, data 2 (bytes), type 3, stringData 4, immutable 5.
/// ConfigMap: metadata 1, data 2 (strings), immutable 3, binaryData 4.
/// Namespace: metadata 1 (its spec and status are set by the server).
fn object(kind: &str, raw: &[u8]) -> Result<Map<String, Value>, String> {
    let mut o = Map::new();
    let (mut data, mut extra) = (Map::new(), Map::new());
    for (n, f) in fields(raw)? {
        match (kind, n, f) {
            (_, 1, Field::Bytes(v)) => _ = o.insert("metadata".into(), object_meta(v)?),
            ("Secret", 2, Field::Bytes(v)) => {
                let (k, val) = map_entry(v, true)?;
                data.insert(k, val);
            }
            ("Secret", 3, Field::Bytes(v)) => _ = o.insert("type".into(), json!(text(v)?)),
            ("Secret", 4, Field::Bytes(v)) => {
                let (k, val) = map_entry(v, false)?;
                extra.insert(k, val);
            }
            ("Secret", 5, Field::Varint(v)) | ("ConfigMap", 3, Field::Varint(v)) => {
                _ = o.insert("immutable".into(), json!(v != 0));
            }
            ("ConfigMap", 2, Field::Bytes(v)) => {
                let (k, val) = map_entry(v, false)?;
                data.insert(k, val);
            }
            ("ConfigMap", 4, Field::Bytes(v)) => {
                let (k, val) = map_entry(v, true)?;
                extra.insert(k, val);
            }
            _ => {}
        }
    }
    if !data.is_empty() {
        o.insert("data".into(), Value::Object(data));
    }
    if !extra.is_empty() {
        let key = if kind == "Secret" {
            "stringData"
        } else {
            "binaryData"
        };
        o.insert(key.into(), Value::Object(extra));
    }
    Ok(o)
}

/// SelfSubjectAccessReview (`kubectl auth can-i`): metadata 1, spec 2 with resourceAttributes 1
/// (namespace 1, verb 2, group 3, version 4, resource 5, subresource 6, name 7) or
/// nonResourceAttributes 2 (path 1, verb 2).
fn access_review(raw: &[u8]) -> Result<Map<String, Value>, String> {
    const RESOURCE: [&str; 7] = [
        "namespace",
        "verb",
        "group",
        "version",
        "resource",
        "subresource",
        "name",
    ];
    const NON_RESOURCE: [&str; 2] = ["path", "verb"];
    let strings = |b: &[u8], names: &[&str]| -> Result<Value, String> {
        let mut m = Map::new();
        for (n, f) in fields(b)? {
            let index = usize::try_from(n).ok().and_then(|n| n.checked_sub(1));
            if let (Some(name), Field::Bytes(v)) = (index.and_then(|i| names.get(i)), f) {
                m.insert((*name).to_owned(), json!(text(v)?));
            }
        }
        Ok(Value::Object(m))
    };
    let mut o = Map::new();
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(v)) => _ = o.insert("metadata".into(), object_meta(v)?),
            (2, Field::Bytes(spec)) => {
                let mut m = Map::new();
                for (sn, sf) in fields(spec)? {
                    match (sn, sf) {
                        (1, Field::Bytes(v)) => {
                            m.insert("resourceAttributes".into(), strings(v, &RESOURCE)?);
                        }
                        (2, Field::Bytes(v)) => {
                            m.insert("nonResourceAttributes".into(), strings(v, &NON_RESOURCE)?);
                        }
                        _ => {}
                    }
                }
                o.insert("spec".into(), Value::Object(m));
            }
            _ => {}
        }
    }
    Ok(o)
}

/// Decodes a protobuf request body into the JSON object the store keeps.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(&format!(
            "the body of the request could not be decoded as protobuf: {why}"
        ))
    };
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s protobuf prefix".into()))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for (n, f) in fields(envelope).map_err(bad)? {
        match (n, f) {
            (1, Field::Bytes(type_meta)) => {
                for (tn, tf) in fields(type_meta).map_err(bad)? {
                    match (tn, tf) {
                        (1, Field::Bytes(v)) => api_version = text(v).map_err(bad)?,
                        (2, Field::Bytes(v)) => kind = text(v).map_err(bad)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(v)) => raw = Some(v),
            _ => {}
        }
    }
    let raw = raw.unwrap_or_default();
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret" | "ConfigMap" | "Namespace") => object(&kind, raw).map_err(bad)?,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            access_review(raw).map_err(bad)?
        }
        _ => {
            return Err(ApiError::with_code(
                415,
                &format!(
                    "kube-sim decodes protobuf only for v1 Secret, ConfigMap and Namespace and SelfSubjectAccessReview, not {api_version}/{kind}; send application/json"
                ),
            ));
        }
    };
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(n: u64, wire: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut v = (n << 3) | wire;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(n: u64, value: &[u8]) -> Vec<u8> {
        let mut out = tag(n, 2);
        out.push(u8::try_from(value.len()).unwrap());
        out.extend_from_slice(value);
        out
    }

    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        [bytes_field(1, k.as_bytes()), bytes_field(2, v)].concat()
    }

    #[test]
    fn decodes_a_secret_like_client_go_sends_it() {
        let meta = [
            bytes_field(1, b"sh.helm.release.v1.demo.v1"),
            bytes_field(3, b"default"),
            bytes_field(11, &entry("owner", b"helm")),
        ]
        .concat();
        let secret = [
            bytes_field(1, &meta),
            bytes_field(2, &entry("release", b"\x00\x01payload")),
            bytes_field(3, b"helm.sh/release.v1"),
        ]
        .concat();
        let type_meta = [bytes_field(1, b"v1"), bytes_field(2, b"Secret")].concat();
        let body = [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, &secret),
        ]
        .concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["metadata"]["name"], "sh.helm.release.v1.demo.v1");
        assert_eq!(v["metadata"]["labels"]["owner"], "helm");
        assert_eq!(v["type"], "helm.sh/release.v1");
        assert_eq!(
            v["data"]["release"],
            base64::engine::general_purpose::STANDARD.encode(b"\x00\x01payload")
        );
        assert!(v["metadata"].get("generateName").is_none());
    }

    #[test]
    fn decodes_the_access_review_kubectl_auth_can_i_sends() {
        let attributes = [
            bytes_field(1, b"default"),
            bytes_field(2, b"create"),
            bytes_field(5, b"secrets"),
        ]
        .concat();
        let review = bytes_field(2, &bytes_field(1, &attributes));
        let type_meta = [
            bytes_field(1, b"authorization.k8s.io/v1"),
            bytes_field(2, b"SelfSubjectAccessReview"),
        ]
        .concat();
        let body = [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, &review),
        ]
        .concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v["spec"]["resourceAttributes"],
            json!({"namespace": "default", "verb": "create", "resource": "secrets"})
        );
        let url = bytes_field(
            2,
            &bytes_field(
                2,
                &[bytes_field(1, b"/healthz"), bytes_field(2, b"get")].concat(),
            ),
        );
        let body = [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, &url),
        ]
        .concat();
        assert_eq!(
            decode(&body).unwrap()["spec"]["nonResourceAttributes"],
            json!({"path": "/healthz", "verb": "get"})
        );
    }

    #[test]
    fn other_kinds_and_garbage_are_refused_cleanly() {
        let type_meta = [bytes_field(1, b"apps/v1"), bytes_field(2, b"Deployment")].concat();
        let body = [MAGIC.to_vec(), bytes_field(1, &type_meta)].concat();
        assert_eq!(decode(&body).unwrap_err().code, 415);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
    }
}
