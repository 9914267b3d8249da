//! The fleet sets' templates: the strings of a set's `spec.template` (and of its credentials'
//! Secret name pattern) rendered with minijinja against one matched cluster's facts. Pure: no
//! filesystem, no network, no clock; shared by the set controllers, admission and
//! `omni-operator validate`.
//!
//! A template is whatever a tenant may write, so it runs bounded: a fuel limit per field (each
//! instruction costs fuel; a loop cannot run forever), a recursion limit, and a cap on each
//! field's output (the writer refuses more). minijinja is built without its filesystem loader
//! (no `include`/`import` can name a file) and nothing in the context reaches out of the cluster's
//! own facts. Strings without template markers are left exactly as written.

use std::collections::BTreeMap;
use std::io::Write;

use minijinja::{Environment, UndefinedBehavior, Value as Facts};
use serde_json::Value;

use crate::api::OmniCluster;
use crate::api::common::{ConditionStatus, condition_types, find_condition};

/// Fuel one field's template may burn (one unit per instruction executed).
pub const FUEL_PER_FIELD: u64 = 20_000;
/// Most bytes one field's template may produce.
pub const MAX_FIELD_OUTPUT: usize = 64 * 1024;
/// Deepest nesting of calls, loops and blocks a template may reach.
const RECURSION_LIMIT: usize = 32;

/// What a set's template may read of a matched OmniCluster (the `cluster` variable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// The OmniCluster's name (`cluster.name`).
    pub name: String,
    /// Its namespace (`cluster.namespace`).
    pub namespace: String,
    /// The cluster's name in Omni (`cluster.omniName`).
    pub omni_name: String,
    /// Its labels (`cluster.labels`).
    pub labels: BTreeMap<String, String>,
    /// Its annotations (`cluster.annotations`).
    pub annotations: BTreeMap<String, String>,
    /// `spec.kubernetes.version` (`cluster.kubernetesVersion`).
    pub kubernetes_version: String,
    /// `spec.talos.version` (`cluster.talosVersion`).
    pub talos_version: String,
    /// Omni's phase as last reported (`cluster.phase`; empty before the first report).
    pub phase: String,
    /// Whether its `Ready` condition is `True` (`cluster.ready`).
    pub ready: bool,
}

impl ClusterFacts {
    /// The facts of `cluster`.
    pub fn of(cluster: &OmniCluster) -> Self {
        let status = cluster.status.as_ref();
        Self {
            name: cluster.metadata.name.clone().unwrap_or_default(),
            namespace: cluster.metadata.namespace.clone().unwrap_or_default(),
            omni_name: cluster.effective_cluster_name(),
            labels: cluster.metadata.labels.clone().unwrap_or_default(),
            annotations: cluster.metadata.annotations.clone().unwrap_or_default(),
            kubernetes_version: cluster.spec.kubernetes.version.clone(),
            talos_version: cluster.spec.talos.version.clone(),
            phase: status
                .and_then(|s| s.omni_phase.clone())
                .unwrap_or_default(),
            ready: status
                .and_then(|s| find_condition(&s.conditions, condition_types::READY))
                .is_some_and(|c| c.status == ConditionStatus::True),
        }
    }

    /// The template context: `cluster` with these facts.
    fn context(&self) -> Facts {
        let cluster: BTreeMap<String, Facts> = [
            ("name", Facts::from(self.name.as_str())),
            ("namespace", Facts::from(self.namespace.as_str())),
            ("omniName", Facts::from(self.omni_name.as_str())),
            ("labels", Facts::from(self.labels.clone())),
            ("annotations", Facts::from(self.annotations.clone())),
            (
                "kubernetesVersion",
                Facts::from(self.kubernetes_version.as_str()),
            ),
            ("talosVersion", Facts::from(self.talos_version.as_str())),
            ("phase", Facts::from(self.phase.as_str())),
            ("ready", Facts::from(self.ready)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Facts::from(BTreeMap::from([(
            "cluster".to_string(),
            Facts::from(cluster),
        )]))
    }
}

/// A template that does not compile or render: the field it is in, the line within that
/// field's text, and what went wrong (minijinja's words, which never quote a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: line {line}: {message}")]
pub struct TemplateError {
    /// The field's path, e.g. `spec.template.chart.values.image.tag`.
    pub field: String,
    /// 1-based line within the field's text.
    pub line: usize,
    /// What went wrong.
    pub message: String,
}

/// Whether `text` holds a template marker; a string without one is never rendered.
pub fn is_template(text: &str) -> bool {
    text.contains("{{") || text.contains("{%") || text.contains("{#")
}

/// The sandboxed environment every template runs in.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL_PER_FIELD));
    env.set_recursion_limit(RECURSION_LIMIT);
    // A misspelt fact is an error, not an empty string; `if` and `default` still test for it.
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    // A multi-line value (a YAML block) keeps its last newline, as written.
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    env
}

fn error_at(field: &str, e: &minijinja::Error) -> TemplateError {
    let message = match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    };
    TemplateError {
        field: field.to_string(),
        line: e.line().unwrap_or(1),
        message,
    }
}

/// A writer that refuses to grow past [`MAX_FIELD_OUTPUT`], remembering that it did.
#[derive(Default)]
struct Capped {
    out: Vec<u8>,
    overflowed: bool,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > MAX_FIELD_OUTPUT {
            self.overflowed = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `source` (the text of `field`) rendered for `facts`.
pub fn render_str(
    field: &str,
    source: &str,
    facts: &ClusterFacts,
) -> Result<String, TemplateError> {
    if !is_template(source) {
        return Ok(source.to_string());
    }
    let env = environment();
    let template = env
        .template_from_str(source)
        .map_err(|e| error_at(field, &e))?;
    let mut out = Capped::default();
    let rendered = template.render_captured_to(facts.context(), &mut out);
    if out.overflowed {
        return Err(TemplateError {
            field: field.to_string(),
            line: 1,
            message: format!("the output exceeds {MAX_FIELD_OUTPUT} bytes"),
        });
    }
    rendered.map_err(|e| error_at(field, &e))?;
    String::from_utf8(out.out).map_err(|_| TemplateError {
        field: field.to_string(),
        line: 1,
        message: "the output is not UTF-8".into(),
    })
}

/// Every string of `value` (at path `base`) whose template does not compile.
pub fn check_syntax(base: &str, value: &Value) -> Vec<TemplateError> {
    let env = environment();
    let mut errors = Vec::new();
    visit(base, value, &mut |field, text| {
        if is_template(text)
            && let Err(e) = env.template_from_str(text)
        {
            errors.push(error_at(field, &e));
        }
    });
    errors
}

/// `value` (at path `base`) with every string rendered for `facts`; the first error stops it.
pub fn render(base: &str, value: &Value, facts: &ClusterFacts) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(text) => Value::String(render_str(base, text, facts)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| render(&format!("{base}[{i}]"), item, facts))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| Ok((k.clone(), render(&format!("{base}.{k}"), v, facts)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

/// Calls `f` with the path and text of every string in `value`.
fn visit(base: &str, value: &Value, f: &mut dyn FnMut(&str, &str)) {
    match value {
        Value::String(text) => f(base, text),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                visit(&format!("{base}[{i}]"), item, f);
            }
        }
        Value::Object(fields) => {
            for (k, v) in fields {
                visit(&format!("{base}.{k}"), v, f);
            }
        }
        _ => {}
    }
}

/// The paths of the strings of `value` (at path `base`) that hold a template.
pub fn templated_fields(base: &str, value: &Value) -> Vec<String> {
    let mut fields = Vec::new();
    visit(base, value, &mut |field, text| {
        if is_template(text) {
            fields.push(field.to_string());
        }
    });
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts() -> ClusterFacts {
        ClusterFacts {
            name: "edge-01".into(),
            namespace: "fleet".into(),
            omni_name: "edge-01".into(),
            labels: [("env".to_string(), "prod".to_string())].into(),
            kubernetes_version: "v1.35.0".into(),
            ready: true,
            ..ClusterFacts::default()
        }
    }

    #[test]
    fn strings_are_rendered_from_the_clusters_facts_and_the_rest_is_kept() {
        let template = json!({
            "namespace": "apps",
            "values": {
                "cluster": "{{ cluster.name }}",
                "env": "{{ cluster.labels.env | upper }}",
                "tier": "{{ cluster.labels.tier | default('none') }}",
                "replicas": 3,
                "list": ["{% if cluster.ready %}up{% else %}down{% endif %}"]
            }
        });
        let out = render("spec.template", &template, &facts()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out,
            json!({
                "namespace": "apps",
                "values": {"cluster": "edge-01", "env": "PROD", "tier": "none", "replicas": 3, "list": ["up"]}
            })
        );
    }

    #[test]
    fn an_error_names_the_field_and_the_line() {
        let template = json!({"chart": {"version": "1.0\n{{ cluster.nmae }}"}});
        let err = render("spec.template", &template, &facts())
            .err()
            .unwrap_or_else(|| panic!("a misspelt fact is an error"));
        assert_eq!(err.field, "spec.template.chart.version");
        assert_eq!(err.line, 2);
        let syntax = check_syntax("spec.template", &json!({"a": ["ok", "{{ cluster.name "]}));
        assert_eq!(syntax.len(), 1);
        assert_eq!(syntax[0].field, "spec.template.a[1]");
        assert_eq!(syntax[0].line, 1);
        assert!(
            syntax[0]
                .to_string()
                .starts_with("spec.template.a[1]: line 1: ")
        );
    }

    #[test]
    fn templates_are_bounded_in_time_and_size() {
        let endless = render_str(
            "f",
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            &facts(),
        );
        assert!(endless.is_err(), "fuel stops a long loop");
        let huge = render_str("f", "{{ 'x' * 1000000 }}", &facts());
        assert!(
            huge.as_ref().is_err_and(|e| e.message.contains("exceeds")),
            "the output is capped: {huge:?}"
        );
        let fine = render_str("f", "{{ 'x' * 100 }}", &facts()).unwrap_or_default();
        assert_eq!(fine.len(), 100);
    }

    #[test]
    fn no_template_can_read_a_file() {
        let include = render_str("f", "{% include '/etc/passwd' %}", &facts());
        assert!(include.is_err());
    }
}
