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
        Facts::from(BTreeMap::from([("cluster".to_string(), self.value())]))
    }

    /// These facts as the value of the `cluster` variable (also an OmniSecretSync's data
    /// templates read it: `domain::secret_data`).
    pub(crate) fn value(&self) -> Facts {
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
        Facts::from(cluster)
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

/// The sandboxed environment every template runs in (an OmniSecretSync's data templates add
/// their filters to it: `domain::secret_data`).
pub(crate) fn environment() -> Environment<'static> {
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

pub(crate) fn error_at(field: &str, e: &minijinja::Error) -> TemplateError {
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

/// Why a template did not render.
pub(crate) enum Failed {
    /// It does not compile (minijinja's words quote only the template's own text).
    Compile(minijinja::Error),
    /// It failed while rendering (minijinja's words may quote a value it read).
    Render(minijinja::Error),
    /// Its output broke a bound, or is not text: what was broken.
    Output(String),
}

impl Failed {
    /// The error of `field`, minijinja's words kept (a set's templates read no secret).
    fn at(self, field: &str) -> TemplateError {
        match self {
            Self::Compile(e) | Self::Render(e) => error_at(field, &e),
            Self::Output(message) => TemplateError {
                field: field.to_string(),
                line: 1,
                message,
            },
        }
    }
}

/// `source` rendered in `env` with `context`, within the output bound.
pub(crate) fn render_in(
    env: &Environment<'_>,
    source: &str,
    context: Facts,
) -> Result<String, Failed> {
    let template = env.template_from_str(source).map_err(Failed::Compile)?;
    let mut out = Capped::default();
    let rendered = template.render_captured_to(context, &mut out);
    if out.overflowed {
        return Err(Failed::Output(format!(
            "the output exceeds {MAX_FIELD_OUTPUT} bytes"
        )));
    }
    rendered.map_err(Failed::Render)?;
    String::from_utf8(out.out).map_err(|_| Failed::Output("the output is not UTF-8".into()))
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
    render_in(&environment(), source, facts.context()).map_err(|f| f.at(field))
}

/// Every string of `value` (at path `base`) whose template does not compile, but for the
/// strings `member_renders` names.
pub fn check_syntax(base: &str, value: &Value, member_renders: &[&str]) -> Vec<TemplateError> {
    let env = environment();
    let mut errors = Vec::new();
    visit(base, base, value, member_renders, &mut |field, text| {
        if is_template(text)
            && let Err(e) = env.template_from_str(text)
        {
            errors.push(error_at(field, &e));
        }
    });
    errors
}

/// `value` (at path `base`) with every string rendered for `facts`, but for the strings
/// `member_renders` names (paths relative to `base`, each index written `[*]`, e.g.
/// `data[*].template`: templates the generated object renders itself, with what only it
/// reads); the first error stops it.
pub fn render(
    base: &str,
    value: &Value,
    facts: &ClusterFacts,
    member_renders: &[&str],
) -> Result<Value, TemplateError> {
    render_at(base, base, value, facts, member_renders)
}

fn render_at(
    root: &str,
    path: &str,
    value: &Value,
    facts: &ClusterFacts,
    skip: &[&str],
) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(_) if left_alone(root, path, skip) => value.clone(),
        Value::String(text) => Value::String(render_str(path, text, facts)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| render_at(root, &format!("{path}[{i}]"), item, facts, skip))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| {
                    let rendered = render_at(root, &format!("{path}.{k}"), v, facts, skip)?;
                    Ok((k.clone(), rendered))
                })
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

/// Whether the string at `path` (under `root`) is one `skip` names.
fn left_alone(root: &str, path: &str, skip: &[&str]) -> bool {
    if skip.is_empty() {
        return false;
    }
    let relative = path.strip_prefix(root).unwrap_or(path);
    let relative = relative.strip_prefix('.').unwrap_or(relative);
    let mut general = String::with_capacity(relative.len());
    let mut in_index = false;
    for c in relative.chars() {
        match c {
            '[' => {
                in_index = true;
                general.push_str("[*]");
            }
            ']' if in_index => in_index = false,
            _ if in_index => {}
            _ => general.push(c),
        }
    }
    skip.contains(&general.as_str())
}

/// Calls `f` with the path and text of every string in `value` but those `skip` names.
fn visit(root: &str, base: &str, value: &Value, skip: &[&str], f: &mut dyn FnMut(&str, &str)) {
    match value {
        Value::String(_) if left_alone(root, base, skip) => {}
        Value::String(text) => f(base, text),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                visit(root, &format!("{base}[{i}]"), item, skip, f);
            }
        }
        Value::Object(fields) => {
            for (k, v) in fields {
                visit(root, &format!("{base}.{k}"), v, skip, f);
            }
        }
        _ => {}
    }
}

/// The paths of the strings of `value` (at path `base`) that hold a template the set renders
/// (not those `member_renders` names).
pub fn templated_fields(base: &str, value: &Value, member_renders: &[&str]) -> Vec<String> {
    let mut fields = Vec::new();
    visit(base, base, value, member_renders, &mut |field, text| {
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
        let out =
            render("spec.template", &template, &facts(), &[]).unwrap_or_else(|e| panic!("{e}"));
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
        let err = render("spec.template", &template, &facts(), &[])
            .err()
            .unwrap_or_else(|| panic!("a misspelt fact is an error"));
        assert_eq!(err.field, "spec.template.chart.version");
        assert_eq!(err.line, 2);
        let syntax = check_syntax(
            "spec.template",
            &json!({"a": ["ok", "{{ cluster.name "]}),
            &[],
        );
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

    /// The strings a generated object renders itself are left exactly as written, checked by
    /// nobody here and listed as nobody's templated field.
    #[test]
    fn the_strings_the_member_renders_are_left_alone() {
        let template = json!({
            "targetSecretRef": {"name": "{{ cluster.name }}-pull"},
            "data": [
                {"key": "a", "template": "{{ sources.pull.token | b64encode }}"},
                {"key": "b", "template": "{{ broken "}
            ]
        });
        let skip = ["data[*].template"];
        let out =
            render("spec.template", &template, &facts(), &skip).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out["targetSecretRef"]["name"], "edge-01-pull");
        assert_eq!(out["data"], template["data"]);
        assert!(check_syntax("spec.template", &template, &skip).is_empty());
        assert_eq!(
            templated_fields("spec", &template, &skip),
            ["spec.targetSecretRef.name"]
        );
        assert_eq!(check_syntax("spec.template", &template, &[]).len(), 1);
    }

    #[test]
    fn no_template_can_read_a_file() {
        let include = render_str("f", "{% include '/etc/passwd' %}", &facts());
        assert!(include.is_err());
    }
}
