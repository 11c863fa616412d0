//! Applying objects and charts, and waiting on objects.

use serde::Deserialize;
use serde_json::{Value, json};

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::api::Wait;
use crate::backend::kinds::{ClusterProperty, Kind, Namespace};
use crate::backend::kube::FIELD_MANAGER;
use crate::backend::{
    Api, ApplyOutcome, ClusterApi, Condition, KubeError, ObjectRef, ReleaseStatus, Rendered,
    WaitError, fieldset, undeclared,
};
use crate::charts::ChartPlan;
use crate::topology::Provider;

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
    // open-cluster-management-io/ocm v1.3.1 `pkg/operator/operators/*/controllers/*/*_crd_reconcile.go`: CRDs
    // appear only after an operator reconciles a gate; a CR applied before that is rejected by discovery, so
    // wait for the kind rather than fail.
    ctx.progress(format!("waiting for {kind} ({api_version}) to be served"));
    api.wait_served(api_version, kind, ctx.timeout())
        .await
        .map_err(|e| wait_error(e, hint))
}

/// Waits until kind `K` is served, if it is a custom kind.
pub async fn ensure_kind_served<K: Kind>(
    ctx: &StepCtx<'_>,
    api: &dyn ClusterApi,
    hint: Option<&str>,
) -> Result<(), ActionError> {
    ensure_served(ctx, api, &K::api_version(&()), &K::kind(&()), hint).await
}

/// Applies objects in order, skipping those already in place (see [`contains`] and
/// [`fieldset::owns_more`]); waits for custom kinds to be served first. A Namespace it creates on an
/// existing cluster goes into the ownership record (with its uid): `down` deletes only those.
pub async fn ensure_objects(
    ctx: &StepCtx<'_>,
    cluster: &str,
    api: &dyn ClusterApi,
    objects: &[Value],
    hint: Option<&str>,
) -> Result<ApplyOutcome, ActionError> {
    let existing = ctx
        .run
        .lab
        .cluster(cluster)
        .is_some_and(|c| matches!(c.provider, Provider::Existing { .. }));
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
                if existing && r.is::<Namespace>() {
                    record_namespace(ctx, cluster, api, &r).await?;
                }
            }
        }
    }
    Ok(outcome)
}

/// The namespaces an OCM operator creates from its CR (open-cluster-management-io/ocm v1.3.1
/// `pkg/operator/helpers/queuekey.go`, `klusterlet_management_recocile.go`): the lab's doing when the lab
/// installed the chart on a cluster that did not have them.
fn operator_namespaces(chart: &ChartPlan) -> &'static [&'static str] {
    match chart.chart {
        crate::topology::catalog::Chart::ClusterManager => &["open-cluster-management-hub"],
        crate::topology::catalog::Chart::Klusterlet => &[
            "open-cluster-management-agent",
            "open-cluster-management-agent-addon",
        ],
        _ => &[],
    }
}

/// Before the first install of an OCM chart on an existing cluster: records the operator's namespaces that
/// do not exist yet as the lab's (with no uid: the operator creates them later), so that `down` removes
/// them with the rest of what the lab created.
async fn record_operator_namespaces(
    ctx: &StepCtx<'_>,
    chart: &ChartPlan,
    api: &dyn ClusterApi,
) -> Result<(), ActionError> {
    let existing = ctx
        .run
        .lab
        .cluster(&chart.cluster)
        .is_some_and(|c| matches!(c.provider, Provider::Existing { .. }));
    if !existing {
        return Ok(());
    }
    let namespaces = Api::<Namespace>::all(api);
    for ns in operator_namespaces(chart)
        .iter()
        .copied()
        .chain(addon_namespaces(ctx, chart))
    {
        if namespaces.get(ns).await?.is_none() {
            ctx.run
                .state
                .own_namespace(&chart.cluster, ns, "")
                .map_err(super::state_error)?;
        }
    }
    Ok(())
}

/// The install namespaces of the addons the lab enables for the spoke `chart` (a klusterlet) joins: the
/// addon's agent is deployed there by a ManifestWork, and real OCM keeps the namespace when the addon
/// goes (cluster-proxy v0.10.0 `pkg/proxyagent/agent/manifests/charts/addon-agent/templates/namespace.yaml`
/// marks it `addon.open-cluster-management.io/deletion-orphan`), so it is the lab's to remove.
/// managed-serviceaccount's agent uses the klusterlet's `open-cluster-management-agent-addon`, already
/// in [`operator_namespaces`].
fn addon_namespaces(ctx: &StepCtx<'_>, chart: &ChartPlan) -> Vec<&'static str> {
    if chart.chart != crate::topology::catalog::Chart::Klusterlet {
        return Vec::new();
    }
    let lab = &ctx.run.lab;
    let joins_proxy = lab.addons.cluster_proxy.as_ref().is_some_and(|cp| {
        lab.managed_clusters
            .iter()
            .any(|m| m.cluster == chart.cluster && cp.clusters.contains(&m.name))
    });
    if joins_proxy {
        // cluster-proxy v0.10.0 `pkg/config/agent.go` `DefaultAddonInstallNamespace`.
        vec!["open-cluster-management-cluster-proxy"]
    } else {
        Vec::new()
    }
}

/// Records a namespace the lab just created on an existing cluster, with its uid.
async fn record_namespace(
    ctx: &StepCtx<'_>,
    cluster: &str,
    api: &dyn ClusterApi,
    r: &ObjectRef,
) -> Result<(), ActionError> {
    let uid = Api::<Namespace>::all(api)
        .get(&r.name)
        .await?
        .and_then(|ns| ns.metadata.uid)
        .unwrap_or_default();
    ctx.run
        .state
        .own_namespace(cluster, &r.name, &uid)
        .map_err(super::state_error)
}

fn context(e: KubeError, r: &ObjectRef) -> ActionError {
    ActionError::from(e).context(format_args!("failed to apply {r}"))
}

/// The inputs of `chart.install`. The planner renders the chart from them into the step's plan.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    dead_code,
    reason = "the planner renders the chart from these inputs; the type is their check"
)]
pub struct ChartInputs {
    pub cluster: String,
    /// A chart name of the version catalog.
    pub chart: String,
    /// The release namespace.
    pub namespace: String,
}

/// The inputs of `manifest.apply`. The planner renders the template into the step's objects.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestInputs {
    pub cluster: String,
    /// A template under `workflows/manifests/`.
    #[expect(
        dead_code,
        reason = "the planner renders the template into the step's objects; the type is its check"
    )]
    pub template: String,
}

/// The inputs of `kube.wait`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WaitInputs {
    pub cluster: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// Empty or absent: a cluster-scoped object.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The condition type that must be `True`.
    pub condition: String,
}

/// `manifest.apply`: the objects the plan rendered for this step.
pub async fn manifest_apply(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: ManifestInputs = ctx.inputs()?;
    let cluster = inputs.cluster.as_str();
    let api = ctx.run.api(cluster).await?;
    let objects = &ctx.step.objects;
    let properties = |o: &Value| ObjectRef::of(o).is_some_and(|r| r.is::<ClusterProperty>());
    let hint = objects.iter().any(properties).then_some(
        "the ClusterProperty CRD appears only when the spoke's Klusterlet has the `ClusterProperty` registration gate",
    );
    let o = ensure_objects(ctx, cluster, api.as_ref(), objects, hint).await?;
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
    let inputs: WaitInputs = ctx.inputs()?;
    let api = ctx.run.api(&inputs.cluster).await?;
    let namespace = inputs.namespace.as_deref().filter(|s| !s.is_empty());
    let r = ObjectRef::new(&inputs.api_version, &inputs.kind, namespace, &inputs.name);
    let condition = inputs.condition.as_str();
    ensure_served(ctx, api.as_ref(), &r.api_version, &r.kind, None).await?;
    // The kind is the step's input, known only at run time: its conditions are read from the JSON.
    let cond = Condition::<Value>::status_true(condition);
    api.wait(&r, &cond, ctx.timeout())
        .await
        .map_err(|e| wait_error(e, None))?;
    Ok((false, outputs([])))
}

/// Refuses a chart whose patched objects set fields their CRD does not declare, before anything reaches
/// the API server (see [`undeclared`]). CRDs come from the chart itself, else from the cluster; a kind
/// with no CRD yet (an operator installs it later) is not judged.
async fn check_declared(
    api: &dyn ClusterApi,
    chart: &ChartPlan,
    rendered: &Rendered,
) -> Result<(), ActionError> {
    // CRDs as JSON: the undeclared-field check walks their OpenAPI schemas as data.
    let mut live: Option<Vec<Value>> = None;
    for obj in &rendered.objects {
        let Some(r) = ObjectRef::of(obj) else {
            continue;
        };
        let group = r.group();
        if BUILTIN_GROUPS.contains(&group) {
            continue;
        }
        let version = r.api_version.rsplit('/').next().unwrap_or_default();
        let crd = match rendered
            .crds
            .iter()
            .find(|c| undeclared::defines(c, group, &r.kind))
        {
            Some(c) => Some(c),
            None => {
                if live.is_none() {
                    live = Some(
                        api.list(
                            "apiextensions.k8s.io/v1",
                            "CustomResourceDefinition",
                            None,
                            None,
                        )
                        .await?,
                    );
                }
                live.as_ref()
                    .and_then(|l| l.iter().find(|c| undeclared::defines(c, group, &r.kind)))
            }
        };
        let Some(schema) = crd.and_then(|c| undeclared::schema_of(c, version)) else {
            continue;
        };
        let fields = undeclared::undeclared_fields(obj, &schema);
        if !fields.is_empty() {
            let crd_name = crd
                .and_then(ObjectRef::of)
                .map(|c| c.name)
                .unwrap_or_default();
            return Err(ActionError::permanent(format!(
                "{} {} renders {r} with {} that its CRD {crd_name} ({version}) does not declare: {}; nothing was installed",
                chart.chart.name(),
                chart.version,
                if fields.len() == 1 { "a field" } else { "fields" },
                fields.join(", ")
            ))
            .with_help("a chart patch (charts-patches/, or `--chart-patches`) can remove them; or pick a chart version whose templates match its CRDs"));
        }
    }
    Ok(())
}

/// Installs a chart as a Helm release. First, touching nothing: `helm template` through the
/// post-renderer (our patches) and the undeclared-field check of the patched objects. Then the release
/// namespace and the chart's CRDs (server-side applied by the lab and waited for until served: Helm never
/// upgrades `crds/`), then `helm upgrade --install --skip-crds`, unless the release is already deployed
/// with this chart version and these values and every object is in place. `extra` holds run-time values
/// (for the klusterlet, the bootstrap kubeconfig: a secret, never logged).
pub async fn install_chart(
    ctx: &StepCtx<'_>,
    chart: &ChartPlan,
    extra: Option<Value>,
) -> Result<ApplyOutcome, ActionError> {
    crate::charts::check_values(chart, &ctx.run.lab).map_err(|e| {
        ActionError::permanent(e.to_string()).with_help("the version catalog maps each chart version to its value keys: `ocm-lab plan --out DIR` shows the values each chart gets")
    })?;
    let api = ctx.run.api(&chart.cluster).await?;
    let helm = &ctx.run.backends.helm;
    let mut values = chart.values.clone();
    if let Some(Value::Object(extra)) = extra {
        for (k, v) in extra {
            crate::charts::set_path(&mut values, &k, v);
        }
    }
    ctx.progress(format!("rendering {} {}", chart.chart, chart.version));
    let rendered = helm.template(chart, &values).await?;
    let version = semver::Version::parse(&chart.version)
        .map_err(|e| ActionError::permanent(format!("chart version {}: {e}", chart.version)))?;
    for p in ctx.run.patches.for_chart(chart.chart.name(), &version) {
        if !rendered.objects.iter().any(|o| p.target.matches(o)) {
            let m = format!(
                "patch `{}` ({}) was not applied: the chart rendered no {}",
                p.name, p.source, p.target
            );
            ctx.progress(format!("warning: {m}"));
            tracing::warn!("{m}");
        }
    }
    check_declared(api.as_ref(), chart, &rendered).await?;
    // The release namespace, with the lab label (`--create-namespace` would create it without).
    let mut total = ensure_objects(
        ctx,
        &chart.cluster,
        api.as_ref(),
        &[namespace(&chart.namespace, &ctx.run.lab.name)],
        None,
    )
    .await?;
    let crds = ensure_objects(ctx, &chart.cluster, api.as_ref(), &rendered.crds, None).await?;
    for crd in &rendered.crds {
        let Ok(serves) = ServedVersions::deserialize(crd) else {
            continue;
        };
        let spec = &serves.spec;
        for v in spec.versions.iter().filter(|v| v.served) {
            let api_version = format!("{}/{}", spec.group, v.name);
            ensure_served(ctx, api.as_ref(), &api_version, &spec.names.kind, None).await?;
        }
    }
    total.created += crds.created;
    total.updated += crds.updated;
    total.unchanged += crds.unchanged;
    let target = super::helm_target(ctx, &chart.cluster)?;
    let existing = helm
        .release(&target, &chart.release, &chart.namespace)
        .await?;
    let wanted_chart = format!("{}-{}", chart.chart.name(), chart.version);
    if let Some(rel) = &existing
        && rel.status == ReleaseStatus::Deployed
        && rel.chart == wanted_chart
        && rel.values == values
        && objects_in_place(api.as_ref(), &rendered.objects).await?
    {
        total.unchanged += rendered.objects.len();
        return Ok(total);
    }
    ctx.progress(format!(
        "helm upgrade --install {} ({wanted_chart}) in namespace {}",
        chart.release, chart.namespace
    ));
    for obj in &rendered.objects {
        if let Some(r) = ObjectRef::of(obj) {
            ensure_served(ctx, api.as_ref(), &r.api_version, &r.kind, None).await?;
        }
    }
    if existing.is_none() {
        record_operator_namespaces(ctx, chart, api.as_ref()).await?;
    }
    let release = helm.upgrade_install(&target, chart, &values).await?;
    tracing::info!(
        release = %release.name,
        namespace = %release.namespace,
        revision = release.revision,
        "helm release {}",
        release.status
    );
    if existing.is_some() {
        total.updated += rendered.objects.len();
    } else {
        total.created += rendered.objects.len();
    }
    Ok(total)
}

/// What a rendered CRD serves: `spec.group`, `spec.names.kind` and each version's `name` and `served`
/// (the fields of k8s-openapi's `CustomResourceDefinition` this reads, without requiring the rest of a CRD).
#[derive(serde::Deserialize)]
struct ServedVersions {
    spec: ServedSpec,
}

#[derive(serde::Deserialize)]
struct ServedSpec {
    group: String,
    names: ServedNames,
    #[serde(default)]
    versions: Vec<ServedVersion>,
}

#[derive(serde::Deserialize)]
struct ServedNames {
    kind: String,
}

#[derive(serde::Deserialize)]
struct ServedVersion {
    name: String,
    #[serde(default)]
    served: bool,
}

/// Whether every rendered object is in place on the cluster (see [`contains`]).
async fn objects_in_place(api: &dyn ClusterApi, objects: &[Value]) -> Result<bool, ActionError> {
    for obj in objects {
        let Some(r) = ObjectRef::of(obj) else {
            return Ok(false);
        };
        match api.get(&r).await? {
            Some(live) if contains(&live, obj) => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// `chart.uninstall`: `helm uninstall` of the lab's releases on one cluster (add-ons before the OCM
/// charts). Only releases labelled as this lab's are removed; a release of the same name that someone
/// else installed is reported as not ours and left alone.
pub async fn chart_uninstall(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: super::OnCluster = ctx.inputs()?;
    let cluster = inputs.cluster.as_str();
    let releases = crate::charts::releases_on(&ctx.run.lab, cluster);
    let target = super::helm_target(ctx, cluster)?;
    let mut removed = Vec::new();
    for (name, namespace) in releases.iter().rev() {
        if ctx
            .run
            .backends
            .helm
            .uninstall(&target, name, namespace)
            .await?
        {
            ctx.progress(format!("uninstalled Helm release {namespace}/{name}"));
            removed.push(json!(format!("{namespace}/{name}")));
        } else {
            ctx.progress(format!(
                "no Helm release {namespace}/{name} of lab `{}` (absent, or not ours: left alone)",
                ctx.run.lab.name
            ));
        }
    }
    Ok((
        !removed.is_empty(),
        outputs([("uninstalled", Value::Array(removed))]),
    ))
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
    if super::adopt::leave_release(ctx, &chart.cluster, &chart.release, &chart.namespace).await? {
        ctx.progress(format!(
            "{} is adopted: using the {} someone else installed there, not installing over it",
            chart.cluster, chart.release
        ));
        return Ok((false, outputs([("adopted", json!(true))])));
    }
    let o = install_chart(ctx, chart, None).await?;
    Ok((o.created + o.updated > 0, apply_outputs(&o)))
}

/// Waits for each of `objects` to satisfy its condition, reporting progress.
pub async fn wait_all(
    ctx: &StepCtx<'_>,
    api: &dyn ClusterApi,
    waits: &[(Wait, Option<&str>)],
) -> Result<(), ActionError> {
    for (
        Wait {
            object: r,
            condition,
        },
        hint,
    ) in waits
    {
        ctx.progress(format!("waiting for {r}: {}", condition.description));
        ensure_served(ctx, api, &r.api_version, &r.kind, *hint).await?;
        api.wait(r, condition, ctx.timeout())
            .await
            .map_err(|e| wait_error(e, *hint))?;
    }
    Ok(())
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
