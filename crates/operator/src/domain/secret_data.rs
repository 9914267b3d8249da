//! An OmniSecretSync's data mapping (pure): the keys of the copy from its sources — the whole
//! of `sourceSecretRef`, then each `data` entry, a source's key as is or the output of a
//! template over the sources' values.
//!
//! Templates run in the fleet sets' sandbox (`fleet_template::environment`: no loader, fuel,
//! recursion and output bounds) with three filters added. Unlike a set's templates they read
//! Secret values, so what an error says is chosen with care: a template that does not compile
//! is reported in minijinja's words (they quote only the template's own text, which is the
//! spec), while one that fails while rendering is reported by the kind of error and the line
//! only, unless the kind's words name only what the template text names (an unknown filter,
//! test, function or method) or are this module's own. Whatever is kept is scrubbed of every
//! source value on top. minijinja's words for other kinds are built from the values at hand
//! (a key looked up, a value converted), and no version of them is ours to audit.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::ByteString;
use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind};

use super::fleet_template::{self, ClusterFacts, Failed, TemplateError};
use crate::api::secret_sync::OmniSecretSyncSpec;

/// `b64decode`'s message for input that is not base64.
const NOT_BASE64: &str = "b64decode: the input is not base64";
/// `b64decode`'s message for bytes that are not text.
const NOT_TEXT: &str =
    "b64decode: the decoded bytes are not UTF-8 text (copy binary values with fromSecret)";
/// `b64encode`'s message for a value that is neither text nor bytes.
const NOT_ENCODABLE: &str = "b64encode: the value is neither text nor bytes";
/// What replaces a source value found in a message.
const REDACTED: &str = "[redacted]";

/// Why the data of the copy could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DataError {
    /// `fromKey` is not a key of the source Secret.
    MissingKey {
        /// The source Secret's name.
        secret: String,
        /// The key looked for.
        key: String,
        /// The `data` entry naming it (`spec.data[0]`).
        field: String,
    },
    /// A template failed (never quoting a source value).
    Template(TemplateError),
}

/// The template environment of data templates: the sets' sandbox plus `b64encode` and
/// `b64decode` (`tojson` is built in).
fn environment() -> Environment<'static> {
    let mut env = fleet_template::environment();
    env.add_filter("b64encode", |value: Value| -> Result<String, Error> {
        value
            .as_bytes()
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
            .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, NOT_ENCODABLE))
    });
    env.add_filter("b64decode", |text: &str| -> Result<String, Error> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| Error::new(ErrorKind::InvalidOperation, NOT_BASE64))?;
        String::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidOperation, NOT_TEXT))
    });
    env
}

/// The error of `field`'s template `text` if it does not compile (admission and
/// `omni-operator validate`).
pub(crate) fn check_syntax(field: &str, text: &str) -> Option<TemplateError> {
    environment()
        .template_from_str(text)
        .err()
        .map(|e| fleet_template::error_at(field, &e))
}

/// The copy's data: the whole of `sourceSecretRef`, then each `data` entry in order.
/// `sources` holds each source's data by handle (`SecretSource::handle`; the
/// `sourceSecretRef` by its name); a handle missing there reads as an empty Secret.
pub(crate) fn desired_data(
    spec: &OmniSecretSyncSpec,
    sources: &BTreeMap<String, BTreeMap<String, ByteString>>,
    cluster: &ClusterFacts,
) -> Result<BTreeMap<String, ByteString>, DataError> {
    let empty = BTreeMap::new();
    let of = |handle: &str| sources.get(handle).unwrap_or(&empty);
    let mut data = spec
        .source_secret_ref
        .as_ref()
        .map(|r| of(&r.name).clone())
        .unwrap_or_default();
    let mut context = None;
    let env = environment();
    for (i, item) in spec.data.iter().enumerate() {
        let value = match (&item.from_secret, &item.template) {
            (Some(handle), _) => {
                let key = item.from_key.as_deref().unwrap_or(&item.key);
                of(handle)
                    .get(key)
                    .cloned()
                    .ok_or_else(|| DataError::MissingKey {
                        secret: secret_name(spec, handle),
                        key: key.to_string(),
                        field: format!("spec.data[{i}]"),
                    })?
            }
            (None, Some(template)) => {
                let context = context.get_or_insert_with(|| template_context(sources, cluster));
                let field = format!("spec.data[{i}].template");
                let text = fleet_template::render_in(&env, template, context.clone())
                    .map_err(|f| DataError::Template(redacted(&field, f, sources)))?;
                ByteString(text.into_bytes())
            }
            (None, None) => continue,
        };
        data.insert(item.key.clone(), value);
    }
    Ok(data)
}

/// The Secret name behind `handle`.
fn secret_name(spec: &OmniSecretSyncSpec, handle: &str) -> String {
    spec.source_refs()
        .into_iter()
        .find(|(h, _, _)| *h == handle)
        .map_or_else(|| handle.to_string(), |(_, name, _)| name.to_string())
}

/// `{sources: {handle: {key: value}}, cluster: facts}`; a value that is not UTF-8 is bytes.
fn template_context(
    sources: &BTreeMap<String, BTreeMap<String, ByteString>>,
    cluster: &ClusterFacts,
) -> Value {
    let sources: BTreeMap<String, Value> = sources
        .iter()
        .map(|(handle, data)| {
            let values: BTreeMap<String, Value> = data
                .iter()
                .map(|(k, v)| {
                    let value = match std::str::from_utf8(&v.0) {
                        Ok(text) => Value::from(text),
                        Err(_) => Value::from_bytes(v.0.clone()),
                    };
                    (k.clone(), value)
                })
                .collect();
            (handle.clone(), Value::from(values))
        })
        .collect();
    Value::from(BTreeMap::from([
        ("sources".to_string(), Value::from(sources)),
        ("cluster".to_string(), cluster.value()),
    ]))
}

/// The error of `field` told without a source value: see the module's documentation.
fn redacted(
    field: &str,
    failed: Failed,
    sources: &BTreeMap<String, BTreeMap<String, ByteString>>,
) -> TemplateError {
    let (line, message) = match failed {
        Failed::Compile(e) => {
            let e = fleet_template::error_at(field, &e);
            (e.line, e.message)
        }
        Failed::Render(e) => (e.line().unwrap_or(1), render_message(&e)),
        Failed::Output(message) => (1, message),
    };
    TemplateError {
        field: field.to_string(),
        line,
        message: scrub(message, sources),
    }
}

/// The words kept of an error raised while rendering.
fn render_message(e: &Error) -> String {
    let names_only = matches!(
        e.kind(),
        ErrorKind::UnknownFilter
            | ErrorKind::UnknownTest
            | ErrorKind::UnknownFunction
            | ErrorKind::UnknownMethod
    );
    match e.detail() {
        Some(detail) if names_only || [NOT_BASE64, NOT_TEXT, NOT_ENCODABLE].contains(&detail) => {
            format!("{}: {detail}", e.kind())
        }
        _ => e.kind().to_string(),
    }
}

/// `message` with every source value (and its base64) replaced; values shorter than four
/// bytes are left (they would blank out ordinary words).
fn scrub(mut message: String, sources: &BTreeMap<String, BTreeMap<String, ByteString>>) -> String {
    for value in sources.values().flat_map(BTreeMap::values) {
        if value.0.len() < 4 {
            continue;
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(&value.0);
        for needle in [String::from_utf8_lossy(&value.0).into_owned(), encoded] {
            if message.contains(&needle) {
                message = message.replace(&needle, REDACTED);
            }
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::secret_sync::{DataItem, SecretSource};

    const PASSWORD: &str = "s3cr3t-do-not-leak";

    fn spec(data: serde_json::Value) -> OmniSecretSyncSpec {
        serde_json::from_value(serde_json::json!({
            "clusterRef": {"name": "prod"},
            "kubeconfigSecretRef": {"name": "kc", "key": "kubeconfig"},
            "sourceSecretRef": {"name": "pull"},
            "sources": [{"name": "registry-login", "alias": "login"}],
            "data": data,
            "targetSecretRef": {"name": "dst", "namespace": "apps"},
            "deletionPolicy": "Delete"
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn sources() -> BTreeMap<String, BTreeMap<String, ByteString>> {
        let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
        BTreeMap::from([
            (
                "pull".to_string(),
                BTreeMap::from([(".dockerconfigjson".to_string(), bytes("{\"auths\":{}}"))]),
            ),
            (
                "login".to_string(),
                BTreeMap::from([
                    ("username".to_string(), bytes("robot")),
                    ("password".to_string(), bytes(PASSWORD)),
                    ("binary".to_string(), ByteString(vec![0xff, 0x00, 0x01])),
                ]),
            ),
        ])
    }

    fn facts() -> ClusterFacts {
        ClusterFacts {
            name: "edge-01".into(),
            ..ClusterFacts::default()
        }
    }

    fn text(data: &BTreeMap<String, ByteString>, key: &str) -> String {
        String::from_utf8_lossy(&data[key].0).into_owned()
    }

    #[test]
    fn keys_come_from_the_sources_as_is_and_from_templates_over_two_sources() {
        let s = spec(serde_json::json!([
            {"key": "user", "fromSecret": "login", "fromKey": "username"},
            {"key": "raw", "fromSecret": "login", "fromKey": "binary"},
            {"key": "auth", "template": "{{ (sources.login.username ~ ':' ~ sources.login.password) | b64encode }}"},
            {"key": "config.json", "template": "{\"auths\":{\"{{ cluster.name }}.registry\":{\"auth\":{{ (sources.login.username ~ ':' ~ sources.login.password) | b64encode | tojson }}}},\"from\":{{ sources.pull['.dockerconfigjson'] | tojson }}}"},
            {"key": "plain", "template": "{{ 'cm9ib3Q=' | b64decode }}"}
        ]));
        let data = desired_data(&s, &sources(), &facts()).unwrap_or_else(|e| panic!("{e:?}"));
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("robot:{PASSWORD}"));
        assert_eq!(text(&data, ".dockerconfigjson"), "{\"auths\":{}}");
        assert_eq!(text(&data, "user"), "robot");
        assert_eq!(data["raw"].0, vec![0xff, 0x00, 0x01]);
        assert_eq!(text(&data, "auth"), auth);
        assert_eq!(
            text(&data, "config.json"),
            format!(
                "{{\"auths\":{{\"edge-01.registry\":{{\"auth\":\"{auth}\"}}}},\"from\":\"{{\\\"auths\\\":{{}}}}\"}}"
            )
        );
        assert_eq!(text(&data, "plain"), "robot");
    }

    #[test]
    fn a_missing_key_names_the_source_the_key_and_the_entry() {
        let s = spec(serde_json::json!([{"key": "token", "fromSecret": "login"}]));
        assert_eq!(
            desired_data(&s, &sources(), &facts()),
            Err(DataError::MissingKey {
                secret: "registry-login".into(),
                key: "token".into(),
                field: "spec.data[0]".into(),
            })
        );
    }

    /// Templates that make minijinja's words quote a value: the error names the field and the
    /// line, never the value (nor its base64).
    #[test]
    fn a_template_error_names_field_and_line_and_never_a_value() {
        let leaky = [
            "line one\n{% include sources.login.password %}",
            "line one\n{{ sources.login[sources.login.password] }}",
            "line one\n{{ sources.login.password | attr(sources.login.password) | upper }}",
            "line one\n{{ sources.login.password | split(sources.login.password) | int }}",
            "line one\n{{ sources.login.password | int + 1 }}",
            "line one\n{{ sources.login.password | b64decode }}",
            "line one\n{{ sources.login.password.nope() }}",
            "line one\n{{ sources.login.password[3:9] | float }}",
            "line one\n{{ sources.login.binary | b64decode }}",
            "line one\n{{ (sources.login.password | b64encode) | b64decode | int }}",
            "line one\n{{ nosuchfilter_x | default(sources.login.password) | unknownfilter }}",
            "line one\n{{ sources.login.password ~ undefinedname.x }}",
        ];
        for template in leaky {
            let s = spec(serde_json::json!([{"key": "k", "template": template}]));
            let Err(DataError::Template(e)) = desired_data(&s, &sources(), &facts()) else {
                panic!("{template} must fail");
            };
            let shown = e.to_string();
            assert_eq!(e.field, "spec.data[0].template", "{shown}");
            assert_eq!(e.line, 2, "{template}: {shown}");
            let encoded = base64::engine::general_purpose::STANDARD.encode(PASSWORD);
            for needle in [PASSWORD, "s3cr3t", &encoded, "cr3t-do"] {
                assert!(!shown.contains(needle), "{template} leaked: {shown}");
            }
        }
    }

    #[test]
    fn the_known_words_are_kept() {
        let s = spec(serde_json::json!([{"key": "k", "template": "{{ 'x' | nosuch }}"}]));
        let Err(DataError::Template(e)) = desired_data(&s, &sources(), &facts()) else {
            panic!("an unknown filter fails");
        };
        assert!(e.message.contains("nosuch"), "{e}");
        let s = spec(serde_json::json!([{"key": "k", "template": "{{ '!!' | b64decode }}"}]));
        let Err(DataError::Template(e)) = desired_data(&s, &sources(), &facts()) else {
            panic!("bad base64 fails");
        };
        assert_eq!(e.message, format!("invalid operation: {NOT_BASE64}"));
        assert_eq!(
            check_syntax("spec.data[0].template", "ok\n{{ broken ").map(|e| e.line),
            Some(2)
        );
        assert_eq!(check_syntax("f", "{{ sources.a.b | b64encode }}"), None);
    }

    #[test]
    fn templates_are_bounded_as_the_sets_are() {
        let s = spec(
            serde_json::json!([{"key": "k", "template": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}]),
        );
        assert!(desired_data(&s, &sources(), &facts()).is_err());
        let s = spec(
            serde_json::json!([{"key": "k", "template": "{% for i in range(500) %}{{ sources.login.password * 10 }}{% endfor %}"}]),
        );
        let Err(DataError::Template(e)) = desired_data(&s, &sources(), &facts()) else {
            panic!("the output is capped");
        };
        assert!(e.message.contains("exceeds"), "{e}");
    }

    #[test]
    fn without_data_the_source_is_copied_whole() {
        let mut s = spec(serde_json::json!([]));
        s.sources = vec![SecretSource {
            name: "x".into(),
            alias: None,
        }];
        s.data = Vec::<DataItem>::new();
        let data = desired_data(&s, &sources(), &facts()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(data, sources()["pull"]);
    }
}
