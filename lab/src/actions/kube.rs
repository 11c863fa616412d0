//! Applying objects and charts, and waiting on objects.

use serde_json::{Value, json};

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::kube::FIELD_MANAGER;
use crate::backend::{
    ApplyOutcome, ClusterApi, Condition, KubeError, ObjectRef, WaitError, fieldset,
};
use crate::charts::ChartPlan;
use crate::patch;

/// Kinds every API server serves: no CRD to wait for.
pub const BUILTIN_GROUPS: &[&str] = &[
    "",
    "apps",
    "rbac.authorization.k8s.io",
    "certificates.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
    "batch",
    "policy",
    "admissionregistration.k8s.io",
    "scheduling.k8s.io",
];

/// Whether `desired` is already part of `live`: every field it sets has that value there. Lists must match
/// item by item. This is what makes a second `up` change nothing.
pub fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| l.get(k).is_some_and(|lv| contains(lv, dv))),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contains(lv, dv))
        }
        (l, d) => l == d,
    }
}

/// A wait that ended without its condition, as a step error.
pub fn wait_error(e: WaitError, hint: Option<&str>) -> ActionError {
    match e {
        WaitError::Timeout { .. } => {
            let err = ActionError::permanent(e.to_string());
            match hint {
                Some(h) => err.with_help(h),
                None => err,
            }
        }
        WaitError::Backend(b) => b.into(),
    }
}

/// Waits until `apiVersion`/`kind` is served, if it is a custom kind.
pub async fn ensure_served(
    ctx: &StepCtx<'_>,
    api: &dyn ClusterApi,
    api_version: &str,
    kind: &str,
    hint: Option<&str>,
) -> Result<(), ActionError> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if BUILTIN_GROUPS.contains(&group) || api.served(api_version, kind).await? {
        return Ok(());
    }
    // OCM-FACTS §9.3: CRDs appear only after an operator reconciles a gate; a CR applied before that is
    // rejected by discovery, so wait for the kind rather than fail.
    ctx.progress(format!("waiting for {kind} ({api_version}) to be served"));
    api.wait_served(api_version, kind, ctx.timeout())
        .await
        .map_err(|e| wait_error(e, hint))
}

/// Applies objects in order, skipping those already in place (see [`contains`] and
/// [`fieldset::owns_more`]); waits for custom kinds to be served first.
pub async fn ensure_objects(
    ctx: &StepCtx<'_>,
    api: &dyn ClusterApi,
    objects: &[Value],
    hint: Option<&str>,
) -> Result<ApplyOutcome, ActionError> {
    let mut outcome = ApplyOutcome::default();
    for obj in objects {
        let r = ObjectRef::of(obj).ok_or_else(|| {
            ActionError::permanent(format!("an object without apiVersion, kind or name: {obj}"))
        })?;
        ensure_served(ctx, api, &r.api_version, &r.kind, hint).await?;
        match api.get(&r).await? {
            // In place, unless the lab applied fields earlier that this rendering dropped: applying
            // again (server-side, same field manager) is what removes them.
            Some(live)
                if contains(&live, obj) && !fieldset::owns_more(&live, obj, FIELD_MANAGER) =>
            {
                outcome.unchanged += 1
            }
            Some(_) => {
                api.apply(obj).await.map_err(|e| context(e, &r))?;
                outcome.updated += 1;
            }
            None => {
                api.apply(obj).await.map_err(|e| context(e, &r))?;
                outcome.created += 1;
            }
        }
    }
    Ok(outcome)
}

fn context(e: KubeError, r: &ObjectRef) -> ActionError {
    ActionError::from(e).context(format_args!("failed to apply {r}"))
}

/// `manifest.apply`: the objects the plan rendered for this step.
pub async fn manifest_apply(ctx: &StepCtx<'_>) -> ActionResult {
    let cluster = ctx.input("cluster")?;
    let api = ctx.run.api(cluster).await?;
    let hint = ctx.step.objects.iter().any(|o| o["kind"] == "ClusterProperty").then_some(
        "the ClusterProperty CRD appears only when the spoke's Klusterlet has the `ClusterProperty` registration gate",
    );
    let o = ensure_objects(ctx, api.as_ref(), &ctx.step.objects, hint).await?;
    Ok((o.created + o.updated > 0, apply_outputs(&o)))
}

fn apply_outputs(o: &ApplyOutcome) -> super::Outputs {
    outputs([
        ("created", json!(o.created)),
        ("updated", json!(o.updated)),
        ("unchanged", json!(o.unchanged)),
    ])
}

/// `kube.wait`: one object, one condition.
pub async fn wait(ctx: &StepCtx<'_>) -> ActionResult {
    let api = ctx.run.api(ctx.input("cluster")?).await?;
    let namespace = ctx
        .step
        .with
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let r = ObjectRef::new(
        ctx.input("apiVersion")?,
        ctx.input("kind")?,
        namespace,
        ctx.input("name")?,
    );
    let condition = ctx.input("condition")?;
    ensure_served(ctx, api.as_ref(), &r.api_version, &r.kind, None).await?;
    api.wait(&r, &Condition::status_true(condition), ctx.timeout())
        .await
        .map_err(|e| wait_error(e, None))?;
    Ok((false, outputs([])))
}

/// Installs a chart: `helm template`, our patches, CRDs first and served, then the rest. `extra` holds
/// run-time values (for the klusterlet, the bootstrap kubeconfig: a secret, never logged).
pub async fn install_chart(
    ctx: &StepCtx<'_>,
    chart: &ChartPlan,
    extra: Option<Value>,
) -> Result<ApplyOutcome, ActionError> {
    crate::charts::check_values(chart, &ctx.run.lab).map_err(|e| {
        ActionError::permanent(e.to_string()).with_help("the version catalog maps each chart version to its value keys: check `lab/src/topology/catalog.rs` and `ocm-lab plan`")
    })?;
    let api = ctx.run.api(&chart.cluster).await?;
    let mut values = chart.values.clone();
    if let Some(Value::Object(extra)) = extra {
        for (k, v) in extra {
            crate::charts::set_path(&mut values, &k, v);
        }
    }
    ctx.progress(format!("rendering {} {}", chart.chart, chart.version));
    let mut rendered = ctx.run.backends.helm.template(chart, &values).await?;
    let version = semver::Version::parse(&chart.version)
        .map_err(|e| ActionError::permanent(format!("chart version {}: {e}", chart.version)))?;
    let patches = ctx.run.patches.for_chart(chart.chart.name(), &version);
    if !patches.is_empty() {
        let report = patch::apply(&patches, &mut rendered.objects)
            .map_err(|e| ActionError::permanent(e.to_string()))?;
        for m in &report.missing_targets {
            ctx.progress(format!("warning: {m}"));
            tracing::warn!("{m}");
        }
    }
    // The release namespace: `helm install --create-namespace` would create it.
    let mut total = ensure_objects(
        ctx,
        api.as_ref(),
        &[namespace(&chart.namespace, &ctx.run.lab.name)],
        None,
    )
    .await?;
    let crds = ensure_objects(ctx, api.as_ref(), &rendered.crds, None).await?;
    for crd in &rendered.crds {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = crd
            .pointer("/spec/names/kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        for v in crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if v["served"] == json!(true)
                && let Some(name) = v["name"].as_str()
            {
                ensure_served(ctx, api.as_ref(), &format!("{group}/{name}"), kind, None).await?;
            }
        }
    }
    let rest = ensure_objects(ctx, api.as_ref(), &rendered.objects, None).await?;
    for o in [crds, rest] {
        total.created += o.created;
        total.updated += o.updated;
        total.unchanged += o.unchanged;
    }
    Ok(total)
}

/// A Namespace object carrying the lab label.
pub fn namespace(name: &str, lab: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {crate::topology::LAB_LABEL: lab}}})
}

/// `chart.install`.
pub async fn chart_install(ctx: &StepCtx<'_>) -> ActionResult {
    let chart = ctx.step.chart.as_ref().ok_or_else(|| {
        ActionError::permanent(format!("step {} has no chart in its plan", ctx.step.id))
    })?;
    let o = install_chart(ctx, chart, None).await?;
    Ok((o.created + o.updated > 0, apply_outputs(&o)))
}

/// Waits for each of `objects` to satisfy its condition, reporting progress.
pub async fn wait_all(
    ctx: &StepCtx<'_>,
    api: &dyn ClusterApi,
    waits: &[(ObjectRef, Condition, Option<&str>)],
) -> Result<(), ActionError> {
    for (r, cond, hint) in waits {
        ctx.progress(format!("waiting for {r}: {}", cond.description));
        ensure_served(ctx, api, &r.api_version, &r.kind, *hint).await?;
        api.wait(r, cond, ctx.timeout())
            .await
            .map_err(|e| wait_error(e, *hint))?;
    }
    Ok(())
}

/// Deployment `Available=True`.
pub fn deployment(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new("apps/v1", "Deployment", Some(namespace), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_is_a_subset_check() {
        let live = json!({"metadata": {"name": "a", "uid": "1", "labels": {"x": "1", "y": "2"}}, "spec": {"l": [1, 2]}, "status": {}});
        assert!(contains(
            &live,
            &json!({"metadata": {"name": "a", "labels": {"x": "1"}}})
        ));
        assert!(contains(&live, &json!({"spec": {"l": [1, 2]}})));
        assert!(!contains(&live, &json!({"spec": {"l": [1]}})));
        assert!(!contains(
            &live,
            &json!({"metadata": {"labels": {"x": "2"}}})
        ));
        assert!(!contains(&live, &json!({"spec": {"missing": true}})));
    }
}
