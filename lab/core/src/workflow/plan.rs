//! Rendering a workflow against a lab into a [`Plan`]: concrete step instances, their rendered inputs,
//! the objects and chart values they apply, and the dependency graph between them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use minijinja::{Environment, UndefinedBehavior, value::Serde};
use serde::Serialize;
use serde_json::{Value, json};
use serde_saphyr::Location;

use super::Catalog;
use super::catalog::{ActionInfo, Renders};
use super::spec::{self, Sources, Step, WorkflowError};
use crate::charts::{self, ChartPlan};
use crate::diag::{Collector, FileDiagnostics, suggest};
use crate::patch::PatchSet;
use crate::topology::{CLUSTERSET_LABEL, LAB_LABEL, Lab, Provider, duration_text};

/// A workflow rendered for one lab: what would run, in a valid order.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub workflow: String,
    pub lab: String,
    /// Step instances in a topological order (file order where the graph allows it). Shared: the engine
    /// hands each running step its instance (manifests included) without copying it.
    pub steps: Vec<Arc<PlannedStep>>,
}

/// One step instance: a step, or one item of a `foreach` step.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedStep {
    /// `create[cluster1]` for an item, `hub-ready` for a plain step.
    pub id: String,
    pub step: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    pub uses: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its rendered `with:` inputs, by name.
    pub with: BTreeMap<String, Value>,
    pub needs: Vec<String>,
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    pub retry: Retry,
    /// Objects a `manifest.apply` step applies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<Value>,
    /// The chart a `chart.install` or `ocm.klusterlet` step installs (boxed: most instances have none,
    /// and every instance would pay for the chart's fields).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chart: Option<Box<ChartPlan>>,
}

impl PlannedStep {
    /// The lab cluster this step acts on, if it names one.
    pub fn cluster(&self) -> Option<&str> {
        self.with.get("cluster").and_then(Value::as_str)
    }
}

/// How a step retries errors a backend marks transient; permanent errors fail the step at once.
///
/// The default (no `attempts`) retries until the step's deadline: one deadline for all attempts, backoff
/// 2 s doubling to [`Retry::MAX_BACKOFF`]. So every step that talks to an API rides out a webhook or
/// controller that is not ready yet, a conflict or a restarting API server, without a `retry:` of its own.
/// `attempts: N` gives N attempts, each with the step's whole timeout (`cluster.create`: a failed
/// `kind create` is worth a fresh try with a full clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// Total attempts, the first included; `None`: until the step's deadline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(with = "duration_text")]
    pub backoff: Duration,
}

impl Retry {
    /// The longest wait between two attempts.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: None,
            backoff: Duration::from_secs(2),
        }
    }
}

/// One item of a `foreach` collection: its id and what templates see as `item`.
struct Item {
    id: String,
    value: Value,
}

fn collection(lab: &Lab, name: &str) -> Vec<Item> {
    let items = |v: Vec<(String, Value)>| {
        v.into_iter()
            .map(|(id, value)| Item { id, value })
            .collect()
    };
    let ser = |v: &dyn erased::Ser| v.to_json();
    match name {
        "clusters" => items(lab.clusters().map(|c| (c.name.clone(), ser(c))).collect()),
        "kindClusters" => items(
            lab.clusters()
                .filter(|c| c.provider == Provider::Kind)
                .map(|c| (c.name.clone(), ser(c)))
                .collect(),
        ),
        "existingClusters" => items(
            lab.clusters()
                .filter(|c| c.provider != Provider::Kind)
                .map(|c| (c.name.clone(), ser(c)))
                .collect(),
        ),
        "spokes" => items(
            lab.spokes
                .iter()
                .map(|s| (s.cluster.name.clone(), ser(s)))
                .collect(),
        ),
        "managedClusters" => items(
            lab.managed_clusters
                .iter()
                .map(|m| (m.name.clone(), ser(m)))
                .collect(),
        ),
        "clusterSets" => items(
            lab.cluster_sets
                .iter()
                .map(|s| (s.name.clone(), ser(s)))
                .collect(),
        ),
        "namespaces" => items(
            lab.namespaces
                .iter()
                .map(|n| (n.clone(), json!({"name": n})))
                .collect(),
        ),
        "bindings" => items(
            lab.bindings
                .iter()
                .map(|b| (format!("{}/{}", b.namespace, b.cluster_set), ser(b)))
                .collect(),
        ),
        "serviceAccounts" => items(
            lab.service_accounts
                .iter()
                .map(|sa| {
                    let mut v = ser(sa);
                    // The lab cluster the account's spoke ServiceAccount lives on.
                    let kube = lab
                        .managed_cluster(&sa.cluster)
                        .map_or(sa.cluster.clone(), |m| m.cluster.clone());
                    v["kubeCluster"] = json!(kube);
                    (format!("{}/{}", sa.cluster, sa.name), v)
                })
                .collect(),
        ),
        _ => Vec::new(),
    }
}

mod erased {
    /// Object-safe serialization to JSON, so collections of different types share one closure.
    pub trait Ser {
        fn to_json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_json(&self) -> serde_json::Value {
            serde_json::to_value(self).expect("lab types serialize")
        }
    }
}

/// The template environment: strict, with the manifest templates loaded.
pub fn environment(sources: &Sources) -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // minijinja would JSON-escape every value in `.yaml` templates, which breaks names built from parts
    // (`ocm-lab:{{ item.name }}`). Names are validated DNS labels; free-form values go through `tojson`.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    for (name, text) in &sources.manifests {
        env.add_template_owned(name.clone(), text.clone())?;
    }
    Ok(env)
}

/// What every template sees, converted once: converting the lab for each step instance would make
/// planning quadratic in the number of spokes.
struct Globals {
    lab: minijinja::Value,
    labels: minijinja::Value,
    kind_network: String,
}

impl Globals {
    fn new(lab: &Lab) -> Self {
        Globals {
            lab: minijinja::Value::from(Serde(lab)),
            labels: minijinja::Value::from(Serde(BTreeMap::from([(LAB_LABEL, lab.name.as_str())]))),
            kind_network: lab.host.kind_network.clone(),
        }
    }

    fn context(&self, item: Option<&Value>) -> minijinja::Value {
        minijinja::context! {
            lab => self.lab.clone(),
            item => item.map(Serde),
            labels => self.labels.clone(),
            clustersetLabel => CLUSTERSET_LABEL,
            kindNetwork => self.kind_network.clone(),
        }
    }
}

/// What planning one workflow file works with: the lab, the templates, the chart patches and the actions.
struct Planner<'a> {
    lab: &'a Lab,
    env: Environment<'static>,
    patches: &'a PatchSet,
    actions: &'a dyn Catalog,
    globals: Globals,
}

/// The instances of a workflow's steps, before their needs are resolved.
#[derive(Default)]
struct Expanded {
    steps: Vec<PlannedStep>,
    /// Per step: every item id of its collection (before `if`), to tell a skipped need from a wrong one.
    items: HashMap<String, Option<BTreeSet<String>>>,
    /// Per instance: its rendered needs, with where each is written.
    needs: Vec<Vec<(String, Location)>>,
}

/// Renders workflow `name` for `lab`: a pure function of its arguments.
pub fn plan(
    lab: &Lab,
    sources: &Sources,
    actions: &dyn Catalog,
    patches: &PatchSet,
    name: &str,
) -> Result<Plan, WorkflowError> {
    let (wf, file, text) = spec::load(sources, actions, name)?;
    let env = environment(sources).map_err(|e| {
        let mut c = Collector::new("");
        c.error(
            None,
            "manifests",
            format!("a manifest template does not parse: {e}"),
        );
        WorkflowError::Invalid(Box::new(FileDiagnostics::new(
            &sources.origin,
            "",
            c.issues,
        )))
    })?;
    let planner = Planner {
        lab,
        env,
        patches,
        actions,
        globals: Globals::new(lab),
    };
    let mut c = Collector::new(&text);
    let mut expanded = Expanded::default();
    for step in &wf.steps {
        planner.expand(step, &mut expanded, &mut c);
    }
    let Expanded {
        mut steps,
        items,
        needs,
    } = expanded;
    fill_keep(&mut steps, actions);
    resolve_needs(&mut steps, &items, needs, &mut c);
    if c.has_errors() {
        return Err(WorkflowError::Invalid(Box::new(FileDiagnostics::new(
            &file, &text, c.issues,
        ))));
    }
    let steps = order(steps).map_err(|cycle| cycle_error(&wf, &file, &text, &cycle))?;
    Ok(Plan {
        workflow: wf.metadata.name.value.clone(),
        lab: lab.name.clone(),
        steps,
    })
}

/// The error of needs that form a cycle, located at the first step in it.
fn cycle_error(wf: &spec::WorkflowFile, file: &str, text: &str, cycle: &[String]) -> WorkflowError {
    let mut c = Collector::new(text);
    let loc = wf
        .steps
        .iter()
        .find(|s| {
            cycle
                .first()
                .is_some_and(|id| id.split('[').next() == Some(s.id.value.as_str()))
        })
        .map(|s| s.id.referenced);
    c.error(
        loc.as_ref(),
        "steps",
        format!("the steps' needs form a cycle: {}", cycle.join(" → ")),
    )
    .help("remove one of these needs");
    WorkflowError::Invalid(Box::new(FileDiagnostics::new(file, text, c.issues)))
}

/// Resolves each instance's rendered needs to instance ids, now that every instance is known.
fn resolve_needs(
    steps: &mut [PlannedStep],
    items: &HashMap<String, Option<BTreeSet<String>>>,
    needs: Vec<Vec<(String, Location)>>,
    c: &mut Collector<'_>,
) {
    let present: BTreeSet<String> = steps.iter().map(|s| s.id.clone()).collect();
    for (s, needs) in steps.iter_mut().zip(needs) {
        for (need, loc) in needs {
            let found = resolve_need(&need, items, &present, &s.step, &loc, c);
            s.needs.extend(found);
        }
        if s.needs.contains(&s.id) {
            c.error(
                None,
                format!("steps.{}.needs", s.step),
                format!("`{}` needs itself", s.id),
            );
        }
        s.needs.sort();
        s.needs.dedup();
        // Most instances need one or two others: without this, each keeps the capacity its growth left.
        s.needs.shrink_to_fit();
    }
}

/// The instance ids one rendered need names (none for an item skipped by `if`), or an error in `c`.
fn resolve_need(
    need: &str,
    items: &HashMap<String, Option<BTreeSet<String>>>,
    present: &BTreeSet<String>,
    step: &str,
    loc: &Location,
    c: &mut Collector<'_>,
) -> Vec<String> {
    let field = format!("steps.{step}.needs");
    let (base, item) = match need.split_once('[') {
        Some((b, rest)) => (b.to_owned(), Some(rest.trim_end_matches(']').to_owned())),
        None => (need.to_owned(), None),
    };
    let Some(all) = items.get(&base) else {
        let issue = c.error(Some(loc), field, format!("`{need}` names no step"));
        if let Some(sug) = suggest(&base, items.keys().map(String::as_str)) {
            issue.help(format!("did you mean `{sug}`?"));
        }
        return Vec::new();
    };
    match (item, all) {
        (None, None) => present
            .contains(&base)
            .then_some(base)
            .into_iter()
            .collect(),
        (None, Some(_)) => {
            // Every item of `base`: a range of the sorted ids, not a scan of all of them.
            let prefix = format!("{base}[");
            present
                .range(prefix.clone()..)
                .take_while(|id| id.starts_with(&prefix))
                .cloned()
                .collect()
        }
        (Some(it), Some(all)) if all.contains(&it) => {
            let id = format!("{base}[{it}]");
            // An item skipped by `if` has nothing to wait for.
            present.contains(&id).then_some(id).into_iter().collect()
        }
        (Some(it), Some(all)) => {
            c.error(
                Some(loc),
                field,
                format!("`{need}`: step `{base}` has no item `{it}`"),
            )
            .help(format!(
                "its items: {}",
                all.iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            Vec::new()
        }
        (Some(_), None) => {
            c.error(
                Some(loc),
                field,
                format!("`{need}`: step `{base}` has no `foreach`, so it has no items"),
            );
            Vec::new()
        }
    }
}

/// How the planner names an object in `lab.prune`'s `keep` input: `Kind/namespace/name` (namespace
/// empty when cluster-scoped).
pub fn keep_id(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// The `keep` id of an object.
pub fn keep_id_of(obj: &Value) -> String {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
    keep_id(s("/kind"), s("/metadata/namespace"), s("/metadata/name"))
}

/// Gives each step whose action leaves `keep` to the planner the objects the plan applies, per cluster:
/// the rendered manifests, and the release namespace of each chart (created with the lab's label).
fn fill_keep(steps: &mut [PlannedStep], actions: &dyn Catalog) {
    let mut keep: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in steps.iter() {
        if let Some(cluster) = s.cluster() {
            for o in s.objects.iter() {
                keep.entry(cluster.to_owned())
                    .or_default()
                    .insert(keep_id_of(o));
            }
        }
        if let Some(c) = &s.chart {
            keep.entry(c.cluster.clone()).or_default().insert(keep_id(
                "Namespace",
                "",
                &c.namespace,
            ));
        }
    }
    let fills = |s: &PlannedStep| {
        actions
            .action(&s.uses)
            .is_some_and(|a| a.planner_fills_keep)
    };
    for s in steps.iter_mut().filter(|s| fills(s)) {
        s.with.insert("keep".to_owned(), json!(keep));
    }
}

fn render_msg(e: &minijinja::Error) -> String {
    let mut msg = format!("template error: {}", e.kind());
    if let Some(d) = e.detail() {
        msg.push_str(&format!(": {d}"));
    }
    msg
}

impl Planner<'_> {
    /// Adds the instances of one step: one, or one per item of its `foreach` that its `if` keeps.
    fn expand(&self, step: &Step, out: &mut Expanded, c: &mut Collector<'_>) {
        let items: Vec<Option<Item>> = match &step.foreach {
            Some(f) => collection(self.lab, &f.value)
                .into_iter()
                .map(Some)
                .collect(),
            None => vec![None],
        };
        out.items.insert(
            step.id.value.clone(),
            step.foreach
                .as_ref()
                .map(|_| items.iter().flatten().map(|i| i.id.clone()).collect()),
        );
        for item in items {
            let ctx = self.globals.context(item.as_ref().map(|i| &i.value));
            if !self.condition(step, &ctx, c) {
                continue;
            }
            if let Some(planned) = self.instance(&ctx, step, item.as_ref(), c) {
                let needs = step
                    .needs
                    .iter()
                    .filter_map(|n| match self.env.render_str(&n.value, &ctx) {
                        Ok(s) => Some((s, n.referenced)),
                        Err(e) => {
                            let field = format!("steps.{}.needs", step.id.value);
                            c.error(Some(&n.referenced), field, render_msg(&e));
                            None
                        }
                    })
                    .collect();
                out.needs.push(needs);
                out.steps.push(planned);
            }
        }
    }

    /// Whether a step's `if` (absent: true) renders to true for this item; anything but true or false is
    /// an error in `c`, and the item is left out.
    fn condition(&self, step: &Step, ctx: &minijinja::Value, c: &mut Collector<'_>) -> bool {
        let Some(cond) = &step.if_ else {
            return true;
        };
        let field = format!("steps.{}.if", step.id.value);
        match self
            .env
            .render_str(&cond.value, ctx)
            .map(|s| s.trim().to_owned())
        {
            Ok(s) if s == "true" || s == "True" => true,
            Ok(s) if s == "false" || s == "False" || s.is_empty() => false,
            Ok(s) => {
                c.error(
                    Some(&cond.referenced),
                    field,
                    format!("`if` rendered to `{s}`, not true or false"),
                );
                false
            }
            Err(e) => {
                c.error(Some(&cond.referenced), field, render_msg(&e));
                false
            }
        }
    }

    /// Renders one step instance (inputs, timeout, retry, objects, chart).
    fn instance(
        &self,
        ctx: &minijinja::Value,
        step: &Step,
        item: Option<&Item>,
        c: &mut Collector<'_>,
    ) -> Option<PlannedStep> {
        let errors_before = c.issues.len();
        let action = self.actions.action(&step.uses.value)?;
        let with = self.inputs(ctx, step, action, c);
        let timeout = self.timeout(ctx, step, c);
        let retry = retry(step, c);
        let (objects, chart) = match with.as_ref() {
            Some(with) => self.renders(ctx, step, item, action.renders, with, c),
            None => (Vec::new(), None),
        };
        if c.issues.len() > errors_before && c.has_errors() {
            return None;
        }
        Some(PlannedStep {
            id: match item {
                Some(i) => format!("{}[{}]", step.id.value, i.id),
                None => step.id.value.clone(),
            },
            step: step.id.value.clone(),
            item: item.map(|i| i.id.clone()),
            uses: step.uses.value.clone(),
            description: step.description.clone(),
            with: with.unwrap_or_default(),
            needs: Vec::new(),
            timeout,
            retry,
            objects,
            chart,
        })
    }

    /// The step's `with:`, rendered and checked against the action's input type. `None` (and errors in
    /// `c`, at the input at fault) when a value does not render or the inputs do not fit the type.
    fn inputs(
        &self,
        ctx: &minijinja::Value,
        step: &Step,
        action: ActionInfo,
        c: &mut Collector<'_>,
    ) -> Option<BTreeMap<String, Value>> {
        let field = |k: &str| format!("steps.{}.with.{k}", step.id.value);
        let written = step.with.as_ref().map(|w| &w.value);
        let mut with = BTreeMap::new();
        let mut rendered = true;
        for (k, v) in written.into_iter().flatten() {
            match render_value(&self.env, ctx, &v.value) {
                Ok(v) => {
                    with.insert(k.clone(), v);
                }
                Err(e) => {
                    c.error(Some(&v.referenced), field(k), render_msg(&e));
                    rendered = false;
                }
            }
        }
        if !rendered {
            return None;
        }
        let object = Value::Object(with.clone().into_iter().collect());
        let Err(e) = (action.check)(&object) else {
            return Some(with);
        };
        let at = e
            .input
            .as_ref()
            .and_then(|k| written.and_then(|w| w.get(k)))
            .map(|v| v.referenced)
            .or_else(|| step.with.as_ref().map(|w| w.referenced))
            .unwrap_or(step.uses.referenced);
        let what = match &e.input {
            Some(k) => format!("input `{k}` of action `{}`", step.uses.value),
            None => format!("the inputs of action `{}`", step.uses.value),
        };
        c.error(
            Some(&at),
            field(e.input.as_deref().unwrap_or("")).trim_end_matches('.'),
            format!("{what}: {}", e.message),
        );
        None
    }

    /// The step's timeout: its rendered `timeout:`, else the lab's default.
    fn timeout(&self, ctx: &minijinja::Value, step: &Step, c: &mut Collector<'_>) -> Duration {
        let Some(t) = &step.timeout else {
            return self.lab.timeouts.default;
        };
        match self
            .env
            .render_str(&t.value, ctx)
            .map_err(|e| render_msg(&e))
            .and_then(|s| {
                humantime::parse_duration(s.trim())
                    .map_err(|e| format!("`{s}` is not a duration: {e}"))
            }) {
            Ok(d) => d,
            Err(msg) => {
                let field = format!("steps.{}.timeout", step.id.value);
                c.error(Some(&t.referenced), field, msg);
                self.lab.timeouts.default
            }
        }
    }

    /// What the planner renders for the action: the objects of a manifest template, or a chart.
    fn renders(
        &self,
        ctx: &minijinja::Value,
        step: &Step,
        item: Option<&Item>,
        renders: Renders,
        with: &BTreeMap<String, Value>,
        c: &mut Collector<'_>,
    ) -> (Vec<Value>, Option<Box<ChartPlan>>) {
        let input = |k: &str| with.get(k).and_then(Value::as_str).unwrap_or_default();
        let (chart, namespace) = match renders {
            Renders::Nothing => return (Vec::new(), None),
            Renders::Manifest => {
                let objects = self.manifest(ctx, step, item, input("template"), c);
                return (objects, None);
            }
            Renders::Chart => (input("chart"), input("namespace")),
            Renders::FixedChart { chart, namespace } => (chart, namespace),
        };
        let managed = with.get("managedCluster").and_then(Value::as_str);
        let planned = charts::parse_chart(chart).and_then(|ch| {
            charts::plan_chart(
                self.lab,
                ch,
                input("cluster"),
                namespace,
                managed,
                self.patches,
            )
        });
        match planned {
            Ok(p) => (Vec::new(), Some(Box::new(p))),
            Err(e) => {
                let field = format!("steps.{}.with", step.id.value);
                c.error(Some(&with_location(step)), field, e.to_string());
                (Vec::new(), None)
            }
        }
    }

    /// The objects manifest template `template` renders to for this item.
    fn manifest(
        &self,
        ctx: &minijinja::Value,
        step: &Step,
        item: Option<&Item>,
        template: &str,
        c: &mut Collector<'_>,
    ) -> Vec<Value> {
        let field = format!("steps.{}.with.template", step.id.value);
        let loc = with_location(step);
        let t = match self.env.get_template(template) {
            Ok(t) => t,
            Err(_) => {
                let names: Vec<&str> = self.env.templates().map(|(n, _)| n).collect();
                let issue = c.error(
                    Some(&loc),
                    field,
                    format!("no manifest template `{template}`"),
                );
                if let Some(s) = suggest(template, names.iter().copied()) {
                    issue.help(format!("did you mean `{s}`?"));
                }
                return Vec::new();
            }
        };
        let text = match t.render(ctx) {
            Ok(text) => text,
            Err(e) => {
                c.error(Some(&loc), field, format!("{template}: {}", render_msg(&e)));
                return Vec::new();
            }
        };
        match serde_saphyr::from_multiple::<Value>(&text) {
            Ok(docs) => docs.into_iter().filter(|d| !d.is_null()).collect(),
            Err(e) => {
                c.error(
                    Some(&loc),
                    field,
                    format!(
                        "{template} did not render to valid YAML for item {}: {}",
                        item.map_or("-", |i| i.id.as_str()),
                        e.without_snippet()
                    ),
                );
                Vec::new()
            }
        }
    }
}

/// Where a step's `with:` is written (its `uses:` when it has none).
fn with_location(step: &Step) -> Location {
    step.with
        .as_ref()
        .map_or(step.uses.referenced, |w| w.referenced)
}

/// The step's retry policy: its `retry:`, else the default.
fn retry(step: &Step, c: &mut Collector<'_>) -> Retry {
    let Some(r) = &step.retry else {
        return Retry::default();
    };
    Retry {
        attempts: r.attempts.as_ref().map(|a| a.value),
        backoff: match &r.backoff {
            None => Retry::default().backoff,
            Some(b) => humantime::parse_duration(&b.value).unwrap_or_else(|e| {
                c.error(
                    Some(&b.referenced),
                    format!("steps.{}.retry.backoff", step.id.value),
                    format!("`{}` is not a duration: {e}", b.value),
                );
                Retry::default().backoff
            }),
        },
    }
}

/// Renders every string in a `with` value as a template.
fn render_value(
    env: &Environment<'_>,
    ctx: &minijinja::Value,
    v: &Value,
) -> Result<Value, minijinja::Error> {
    Ok(match v {
        Value::String(s) if s.contains("{{") || s.contains("{%") => {
            Value::String(env.render_str(s, ctx)?)
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| render_value(env, ctx, x))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), render_value(env, ctx, x)?)))
                .collect::<Result<_, minijinja::Error>>()?,
        ),
        other => other.clone(),
    })
}

/// Orders instances so every step comes after its needs, keeping file order where possible (Kahn's
/// algorithm, always taking the earliest ready instance). On a cycle, returns the instances in it.
fn order(steps: Vec<PlannedStep>) -> Result<Vec<Arc<PlannedStep>>, Vec<String>> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut indegree: Vec<usize> = steps.iter().map(|s| s.needs.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (i, s) in steps.iter().enumerate() {
        for n in &s.needs {
            dependents[index[n.as_str()]].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..steps.len()).filter(|i| indegree[*i] == 0).collect();
    let mut sequence = Vec::with_capacity(steps.len());
    while let Some(i) = ready.pop_first() {
        sequence.push(i);
        for &d in &dependents[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.insert(d);
            }
        }
    }
    if sequence.len() < steps.len() {
        return Err(find_cycle(&steps, &index, &indegree));
    }
    let mut slots: Vec<Option<PlannedStep>> = steps.into_iter().map(Some).collect();
    // Collected in place into `sequence`'s buffer (an index and an `Arc` have the same size), so the
    // plan's list is exactly as long as the plan: collecting the `Arc`s into the buffer of the
    // instances themselves would keep that buffer, some 400 bytes an instance, for the whole run.
    Ok(sequence
        .into_iter()
        .map(|i| Arc::new(slots[i].take().expect("each index once")))
        .collect())
}

/// Walks needs among the instances left with unmet needs until one repeats.
fn find_cycle(
    steps: &[PlannedStep],
    index: &HashMap<&str, usize>,
    indegree: &[usize],
) -> Vec<String> {
    let start = (0..steps.len())
        .find(|i| indegree[*i] > 0)
        .expect("a cycle exists");
    let mut path = vec![start];
    loop {
        let cur = *path.last().expect("non-empty");
        let next = steps[cur]
            .needs
            .iter()
            .map(|n| index[n.as_str()])
            .find(|j| indegree[*j] > 0)
            .expect("a blocked step needs a blocked step");
        if let Some(pos) = path.iter().position(|p| *p == next) {
            let mut ids: Vec<String> = path[pos..].iter().map(|i| steps[*i].id.clone()).collect();
            ids.push(steps[next].id.clone());
            return ids;
        }
        path.push(next);
    }
}

impl Plan {
    /// The step graph as a Mermaid flowchart.
    pub fn mermaid(&self) -> String {
        let node = |id: &str| id.replace(['[', ']', '/', '.'], "_");
        let mut out = String::from("flowchart TD\n");
        for s in &self.steps {
            out.push_str(&format!(
                "  {}[\"{}<br/><small>{}</small>\"]\n",
                node(&s.id),
                s.id,
                s.uses
            ));
        }
        for s in &self.steps {
            for n in &s.needs {
                out.push_str(&format!("  {} --> {}\n", node(n), node(&s.id)));
            }
        }
        out
    }

    pub fn step(&self, id: &str) -> Option<&PlannedStep> {
        self.steps.iter().find(|s| s.id == id).map(|s| &**s)
    }

    /// Every object the plan applies, with the lab cluster it goes to.
    pub fn objects(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.steps.iter().flat_map(|s| {
            s.objects
                .iter()
                .map(move |o| (s.cluster().unwrap_or("?"), o))
        })
    }

    pub fn charts(&self) -> impl Iterator<Item = &ChartPlan> {
        self.steps.iter().filter_map(|s| s.chart.as_deref())
    }
}
