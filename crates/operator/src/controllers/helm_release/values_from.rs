//! The chart values of one pass: each `spec.chart.valuesFrom` source read as the release's
//! ServiceAccount (when it or the deployment names one), then merged with `spec.chart.values`
//! (`domain::helm::values`). What is read never reaches a message: problems name the object
//! and key.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;

use super::inputs::{Problem, read_as_reader};
use super::state::HelmState;
use crate::api::OmniHelmRelease;
use crate::api::helm_release::{ValuesReference, ValuesSourceKind};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::Error;
use crate::domain::helm::values::{self, Source};
use crate::domain::secret_policy::{self, SecretUse};

const KIND: &str = "OmniHelmRelease";

/// The index key kind of a ConfigMap named in `spec.chart.valuesFrom` (its Secrets are indexed
/// as `secret`, like the release's other Secrets).
pub(super) const VALUES_CONFIG_MAP: &str = "configmap";

/// The values the chart gets in this pass: `spec.chart.values` alone without sources (as
/// written, so the inputs' digest of such a release is what it always was), else the sources
/// merged in order with `spec.chart.values` last.
pub(crate) async fn chart_values(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
) -> Result<Result<serde_json::Value, Problem>, Error> {
    let chart = &r.spec.chart;
    if chart.values_from.is_empty() {
        return Ok(Ok(chart.values.clone()));
    }
    let mut sources = Vec::with_capacity(chart.values_from.len());
    for (i, reference) in chart.values_from.iter().enumerate() {
        match read(ctx, state, r, i, reference).await? {
            Ok(Some(source)) => sources.push(source),
            Ok(None) => {}
            Err(problem) => return Ok(Err(problem)),
        }
    }
    Ok(values::merge(&sources, &chart.values).map_err(|e| Problem::Invalid(e.to_string())))
}

/// The content of source `i`, `None` when it is optional and missing.
async fn read(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
    i: usize,
    reference: &ValuesReference,
) -> Result<Result<Option<Source>, Problem>, Error> {
    let ns = r.namespace().unwrap_or_default();
    let (kind, name, key) = (
        reference.kind.as_str(),
        &reference.name,
        &reference.values_key,
    );
    let field = format!("spec.chart.valuesFrom[{i}]");
    let what = format!("{kind} \"{ns}/{name}\" key {key:?}");
    let missing = |text: String| {
        if reference.optional {
            Ok(None)
        } else {
            Err(Problem::ValuesSourceMissing(format!(
                "{text} ({field}); no Helm runs until it exists"
            )))
        }
    };
    let bytes = match entry(ctx, state, r, reference, &field).await? {
        Err(problem) => return Ok(Err(problem)),
        Ok(None) => return Ok(missing(format!("{kind} \"{ns}/{name}\" does not exist"))),
        Ok(Some(None)) => {
            return Ok(missing(format!(
                "{kind} \"{ns}/{name}\" has no key {key:?}"
            )));
        }
        Ok(Some(Some(bytes))) => bytes,
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(Err(Problem::Invalid(format!(
            "{what} is not UTF-8 text ({field})"
        ))));
    };
    Ok(Ok(Some(Source {
        what,
        text,
        target_path: reference.target_path.clone(),
    })))
}

/// The bytes of the referenced key: `None` when the object does not exist, `Some(None)` when
/// it lacks the key. A Secret the Secret policy guards is a problem naming the entry `field`.
async fn entry(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
    reference: &ValuesReference,
    field: &str,
) -> Result<Result<Option<Option<Vec<u8>>>, Problem>, Error> {
    let (name, key) = (&reference.name, &reference.values_key);
    let secret = match reference.kind {
        ValuesSourceKind::ConfigMap => {
            let map = read_as_reader::<ConfigMap>(ctx, state, r, name, field).await?;
            return Ok(map.map(|found| found.map(|m| config_map_entry(m, key))));
        }
        ValuesSourceKind::Secret => {
            match read_as_reader::<Secret>(ctx, state, r, name, field).await? {
                Ok(Some(secret)) => secret,
                Ok(None) => return Ok(Ok(None)),
                Err(problem) => return Ok(Err(problem)),
            }
        }
    };
    // The operator's own Secrets (minted kubeconfigs, the Omni key) and token Secrets never
    // reach a chart, whatever the release says.
    let refusal = secret_policy::check(
        &ctx.client,
        &state.secret_policy,
        &secret,
        KIND,
        SecretUse::ChartValues,
    )
    .await?;
    if let Some(reason) = refusal {
        return Ok(Err(Problem::Invalid(format!("{reason} ({field})"))));
    }
    Ok(Ok(Some(
        secret.data.and_then(|mut d| d.remove(key)).map(|b| b.0),
    )))
}

/// The entry `key` of a ConfigMap: its `data`, else its `binaryData`.
fn config_map_entry(map: ConfigMap, key: &str) -> Option<Vec<u8>> {
    let ConfigMap {
        data, binary_data, ..
    } = map;
    data.and_then(|mut d| d.remove(key))
        .map(String::into_bytes)
        .or_else(|| binary_data.and_then(|mut b| b.remove(key)).map(|b| b.0))
}
