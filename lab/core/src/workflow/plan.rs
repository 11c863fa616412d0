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
}

impl Globals {
    fn new(lab: &Lab) -> Self {
        Globals {
            lab: minijinja::Value::from(Serde(lab)),
            labels: minijinja::Value::from(Serde(BTreeMap::from([(LAB_LABEL, lab.name.as_str())]))),
        }
    }

    fn context(&self, item: Option<&Value>) -> minijinja::Value {
        minijinja::context! {
            lab => self.lab.clone(),
            item => item.map(Serde),
            labels => self.labels.clone(),
            clustersetLabel => CLUSTERSET_LABEL,
            kindNetwork => crate::backend::docker::kind_network(),
        }
    }
}

/// Renders workflow `name` for `lab`.
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
    let mut c = Collector::new(&text);
    let globals = Globals::new(lab);
    let mut out: Vec<PlannedStep> = Vec::new();
    // Per step: every item id of its collection (before `if`), to tell a skipped need from a wrong one.
    let mut all_items: HashMap<String, Option<BTreeSet<String>>> = HashMap::new();
    let mut raw_needs: Vec<Vec<(String, Location)>> = Vec::new();

    for step in &wf.steps {
        let items: Vec<Option<Item>> = match &step.foreach {
            Some(f) => collection(lab, &f.value).into_iter().map(Some).collect(),
            None => vec![None],
        };
        all_items.insert(
            step.id.value.clone(),
            step.foreach
                .as_ref()
                .map(|_| items.iter().flatten().map(|i| i.id.clone()).collect()),
        );
        for item in items {
            let ctx = globals.context(item.as_ref().map(|i| &i.value));
            let field = |f: &str| format!("steps.{}.{f}", step.id.value);
            if let Some(cond) = &step.if_ {
                match env
                    .render_str(&cond.value, &ctx)
                    .map(|s| s.trim().to_owned())
                {
                    Ok(s) if s == "true" || s == "True" => {}
                    Ok(s) if s == "false" || s == "False" || s.is_empty() => continue,
                    Ok(s) => {
                        c.error(
                            Some(&cond.referenced),
                            field("if"),
                            format!("`if` rendered to `{s}`, not true or false"),
                        );
                        continue;
                    }
                    Err(e) => {
                        c.error(Some(&cond.referenced), field("if"), render_msg(&e));
                        continue;
                    }
                }
            }
            if let Some(planned) = instance(lab, &env, &ctx, step, item.as_ref(), patches, &mut c) {
                let needs = step
                    .needs
                    .iter()
                    .filter_map(|n| match env.render_str(&n.value, &ctx) {
                        Ok(s) => Some((s, n.referenced)),
                        Err(e) => {
                            c.error(Some(&n.referenced), field("needs"), render_msg(&e));
                            None
                        }
                    })
                    .collect();
                raw_needs.push(needs);
                out.push(planned);
            }
        }
    }

    fill_keep(&mut out);
    // Resolve needs now that every instance is known.
    let present: BTreeSet<String> = out.iter().map(|s| s.id.clone()).collect();
    for (s, needs) in out.iter_mut().zip(raw_needs) {
        for (need, loc) in needs {
            let (base, item) = match need.split_once('[') {
                Some((b, rest)) => (b.to_owned(), Some(rest.trim_end_matches(']').to_owned())),
                None => (need.clone(), None),
            };
            let Some(items) = all_items.get(&base) else {
                let issue = c.error(
                    Some(&loc),
                    format!("steps.{}.needs", s.step),
                    format!("`{need}` names no step"),
                );
                if let Some(sug) = suggest(&base, all_items.keys().map(String::as_str)) {
                    issue.help(format!("did you mean `{sug}`?"));
                }
                continue;
            };
            match (item, items) {
                (None, None) => s.needs.extend(present.contains(&base).then_some(base)),
                (None, Some(_)) => {
                    // Every item of `base`: a range of the sorted ids, not a scan of all of them.
                    let prefix = format!("{base}[");
                    s.needs.extend(
                        present
                            .range(prefix.clone()..)
                            .take_while(|id| id.starts_with(&prefix))
                            .cloned(),
                    );
                }
                (Some(it), Some(all)) if all.contains(&it) => {
                    let id = format!("{base}[{it}]");
                    // An item skipped by `if` has nothing to wait for.
                    s.needs.extend(present.contains(&id).then_some(id));
                }
                (Some(it), Some(all)) => {
                    c.error(
                        Some(&loc),
                        format!("steps.{}.needs", s.step),
                        format!("`{need}`: step `{base}` has no item `{it}`"),
                    )
                    .help(format!(
                        "its items: {}",
                        all.iter()
                            .map(String::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                (Some(_), None) => {
                    c.error(
                        Some(&loc),
                        format!("steps.{}.needs", s.step),
                        format!("`{need}`: step `{base}` has no `foreach`, so it has no items"),
                    );
                }
            }
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
    if c.has_errors() {
        return Err(WorkflowError::Invalid(Box::new(FileDiagnostics::new(
            &file, &text, c.issues,
        ))));
    }
    let steps = order(out).map_err(|cycle| {
        let mut c = Collector::new(&text);
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
        WorkflowError::Invalid(Box::new(FileDiagnostics::new(&file, &text, c.issues)))
    })?;
    Ok(Plan {
        workflow: wf.metadata.name.value.clone(),
        lab: lab.name.clone(),
        steps,
    })
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

/// Gives each `lab.prune` step the objects the plan applies, per cluster (its `keep` input): the rendered
/// manifests, and the release namespace of each chart (created with the lab's label).
fn fill_keep(steps: &mut [PlannedStep]) {
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
    for s in steps.iter_mut().filter(|s| s.uses == "lab.prune") {
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

/// Renders one step instance (inputs, timeout, retry, objects, chart).
fn instance(
    lab: &Lab,
    env: &Environment<'_>,
    ctx: &minijinja::Value,
    step: &Step,
    item: Option<&Item>,
    patches: &PatchSet,
    c: &mut Collector<'_>,
) -> Option<PlannedStep> {
    let field = |f: &str| format!("steps.{}.{f}", step.id.value);
    let errors_before = c.issues.len();
    let mut with = BTreeMap::new();
    if let Some(w) = &step.with {
        for (k, v) in &w.value {
            match render_value(env, ctx, v) {
                Ok(v) => {
                    with.insert(k.clone(), v);
                }
                Err(e) => {
                    c.error(
                        Some(&w.referenced),
                        field(&format!("with.{k}")),
                        render_msg(&e),
                    );
                }
            }
        }
    }
    let timeout = match &step.timeout {
        None => lab.timeouts.default,
        Some(t) => match env
            .render_str(&t.value, ctx)
            .map_err(|e| render_msg(&e))
            .and_then(|s| {
                humantime::parse_duration(s.trim())
                    .map_err(|e| format!("`{s}` is not a duration: {e}"))
            }) {
            Ok(d) => d,
            Err(msg) => {
                c.error(Some(&t.referenced), field("timeout"), msg);
                lab.timeouts.default
            }
        },
    };
    let retry = match &step.retry {
        None => Retry::default(),
        Some(r) => Retry {
            attempts: r.attempts.as_ref().map(|a| a.value),
            backoff: match &r.backoff {
                None => Retry::default().backoff,
                Some(b) => humantime::parse_duration(&b.value).unwrap_or_else(|e| {
                    c.error(
                        Some(&b.referenced),
                        field("retry.backoff"),
                        format!("`{}` is not a duration: {e}", b.value),
                    );
                    Retry::default().backoff
                }),
            },
        },
    };
    let str_input = |k: &str| with.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut objects = Vec::new();
    let mut chart = None;
    let loc = step
        .with
        .as_ref()
        .map_or(step.uses.referenced, |w| w.referenced);
    match step.uses.value.as_str() {
        "manifest.apply" => {
            let template = str_input("template").unwrap_or_default();
            match env.get_template(&template) {
                Err(_) => {
                    let names: Vec<&str> = env.templates().map(|(n, _)| n).collect();
                    let issue = c.error(
                        Some(&loc),
                        field("with.template"),
                        format!("no manifest template `{template}`"),
                    );
                    if let Some(s) = suggest(&template, names.iter().copied()) {
                        issue.help(format!("did you mean `{s}`?"));
                    }
                }
                Ok(t) => {
                    match t.render(ctx) {
                        Err(e) => {
                            c.error(
                                Some(&loc),
                                field("with.template"),
                                format!("{template}: {}", render_msg(&e)),
                            );
                        }
                        Ok(text) => {
                            match serde_saphyr::from_multiple::<Value>(&text) {
                                Ok(docs) => {
                                    objects = docs.into_iter().filter(|d| !d.is_null()).collect()
                                }
                                Err(e) => {
                                    c.error(Some(&loc), field("with.template"), format!("{template} did not render to valid YAML for item {}: {}", item.map_or("-", |i| i.id.as_str()), e.without_snippet()));
                                }
                            }
                        }
                    }
                }
            }
        }
        "chart.install" | "ocm.klusterlet" => {
            let cluster = str_input("cluster").unwrap_or_default();
            let (chart_name, namespace) = match step.uses.value.as_str() {
                "ocm.klusterlet" => (
                    "klusterlet".to_owned(),
                    "open-cluster-management".to_owned(),
                ),
                _ => (
                    str_input("chart").unwrap_or_default(),
                    str_input("namespace").unwrap_or_default(),
                ),
            };
            let managed = str_input("managedCluster");
            match charts::parse_chart(&chart_name).and_then(|ch| {
                charts::plan_chart(lab, ch, &cluster, &namespace, managed.as_deref(), patches)
            }) {
                Ok(p) => chart = Some(Box::new(p)),
                Err(e) => {
                    c.error(Some(&loc), field("with"), e.to_string());
                }
            }
        }
        _ => {}
    }
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
        with,
        needs: Vec::new(),
        timeout,
        retry,
        objects,
        chart,
    })
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
