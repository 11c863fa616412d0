//! `ocm-lab plan`: renders what `up` would do, touching nothing; presents it as the folder `--out DIR`
//! writes, as JSON or YAML, or as the summary printed without it ([`run`], at the end).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::backend::Rendered;
use crate::charts::{self, ChartPlan};
use crate::error::Error;
use crate::topology::{Lab, Provider};
use crate::workflow::Plan;

/// The marker file that says a folder holds an ocm-lab plan, so a new plan may replace it.
pub const MARKER: &str = ".ocm-lab-plan";

/// A step id as a file name: `join[cluster1]` → `join-cluster1`.
fn file_stem(id: &str) -> String {
    id.replace(['[', '/'], "-").replace(']', "")
}

/// Each chart's rendered objects as the text of `charts/<cluster>/<release>.yaml`, or why they are not
/// included; keyed by (cluster, release).
pub type ChartRenders = BTreeMap<(String, String), Result<String, String>>;

/// Every chart of `plan` as not included, for `why`.
pub fn not_rendered(plan: &Plan, why: &str) -> ChartRenders {
    plan.charts()
        .map(|c| ((c.cluster.clone(), c.release.clone()), Err(why.to_owned())))
        .collect()
}

/// The text of a chart's file: a header comment, then the CRDs and the objects as YAML documents.
fn chart_file(c: &ChartPlan, rendered: &Rendered, simulated: bool) -> String {
    let mut out = String::new();
    if simulated {
        let _ = writeln!(
            out,
            "# SIMULATED: rendered by ocm-lab's simulated chart model of {} {}, not by Helm; `up` installs what the real chart renders.",
            c.chart.name(),
            c.version
        );
    } else {
        let _ = writeln!(
            out,
            "# {} {} (release `{}` in namespace `{}` on `{}`), rendered by `helm template` and patched by ocm-lab's post-renderer: what `up` installs.",
            c.chart.name(),
            c.version,
            c.release,
            c.namespace,
            c.cluster
        );
    }
    for v in &c.runtime_values {
        let _ = writeln!(
            out,
            "# Rendered without `{}`: `up` fills it at run time from {}.",
            v.key, v.from
        );
    }
    let docs: Vec<String> = rendered
        .crds
        .iter()
        .chain(&rendered.objects)
        .map(|o| format!("---\n{}", to_yaml(o)))
        .collect();
    out.push_str(&docs.concat());
    out
}

/// Renders every chart of `plan` with the simulated lab's chart models and our chart patches, as the
/// simulated lab's `up` does (no helm, no network).
pub fn render_simulated(plan: &Plan, patches: &crate::patch::PatchSet) -> ChartRenders {
    plan.charts()
        .map(|c| {
            let key = (c.cluster.clone(), c.release.clone());
            let text = crate::simulate::render_chart(c, patches).map(|r| chart_file(c, &r, true));
            (key, text)
        })
        .collect()
}

/// Renders every chart of `plan` with an installed helm through ocm-lab's post-renderer, exactly as
/// `up` does (fetched into the chart cache when missing, then `helm template` of the local file). Downloads no tools: without an
/// installed helm every chart is not included, with why.
fn render_with_helm(plan: &Plan, chart_patches: Option<&Path>) -> Result<ChartRenders, Error> {
    use crate::backend::ChartRenderer as _;
    use crate::backend::helm::{Helm, PostRenderer};
    use crate::backend::tools;
    if plan.charts().next().is_none() {
        return Ok(ChartRenders::new());
    }
    let cfg = match tools::ToolsConfig::from_env(tools::Downloads::Forbid) {
        Ok(cfg) => cfg,
        Err(e) => return Ok(not_rendered(plan, &format!("no helm: {e}"))),
    };
    let tool = match tools::resolve(tools::ToolName::Helm, &cfg) {
        Ok(t) => t,
        // `plan` never downloads (and takes no --no-download): say what gets it a helm, once.
        Err(tools::ToolError::NotFound { install, .. }) => {
            return Ok(not_rendered(
                plan,
                &format!(
                    "no helm on PATH (plan downloads no tools): install it from {install}, set OCM_LAB_HELM, or run `ocm-lab up` once (it caches helm)"
                ),
            ));
        }
        Err(e) => {
            return Ok(not_rendered(
                plan,
                &format!("no helm it can use (plan downloads no tools): {e}"),
            ));
        }
    };
    let helm = Helm::new(
        tool,
        PostRenderer {
            exe: std::env::current_exe().map_err(Error::CurrentExe)?,
            // Absolute: helm may run the post-renderer from another folder.
            chart_patches: chart_patches
                .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_owned())),
            plugins_dir: cfg.cache_dir.join("helm-plugins"),
        },
    );
    // Fetched once into the chart cache (and verified), then rendered from the local file.
    let helm = match crate::backend::chart_cache::ChartCache::from_env() {
        Some(cache) => helm.with_chart_cache(cache),
        None => helm,
    };
    let rt = super::runner::runtime()?;
    Ok(plan
        .charts()
        .map(|c| {
            let key = (c.cluster.clone(), c.release.clone());
            let text = rt
                .block_on(helm.template(c, &c.values))
                .map(|r| chart_file(c, &r, false))
                .map_err(|e| {
                    let help = crate::backend::Failure::help(&e)
                        .map(|h| format!(" ({h})"))
                        .unwrap_or_default();
                    format!("helm could not render it: {e}{help}")
                });
            (key, text)
        })
        .collect())
}

/// Refuses `dir` when it is a non-empty folder that is not an earlier plan.
fn check_out_dir(dir: &Path) -> Result<(), Error> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(|source| Error::WriteFile {
            path: dir.display().to_string(),
            source,
        })?;
        if entries.next().is_some() && !dir.join(MARKER).exists() {
            return Err(Error::PlanDirNotEmpty(dir.display().to_string()));
        }
    }
    Ok(())
}

/// Writes the plan into `dir` and returns how many files it wrote. Touches nothing outside `dir`, and
/// refuses a non-empty folder that is not an earlier plan.
pub fn write(lab: &Lab, plan: &Plan, dir: &Path, renders: &ChartRenders) -> Result<usize, Error> {
    let err = |source| Error::WriteFile {
        path: dir.display().to_string(),
        source,
    };
    check_out_dir(dir)?;
    if dir.exists() {
        // Manifests of steps that no longer exist must not linger from the earlier plan.
        for sub in ["clusters", "charts"] {
            let sub = dir.join(sub);
            if sub.exists() {
                std::fs::remove_dir_all(&sub).map_err(err)?;
            }
        }
    }
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    files.insert(
        MARKER.into(),
        format!(
            "ocm-lab plan of lab `{}`, workflow `{}`\n",
            plan.lab, plan.workflow
        ),
    );
    files.insert("graph.mmd".into(), plan.mermaid());
    files.insert("lab.yaml".into(), to_yaml(&json!(lab)));

    // Steps, without the objects and values that get files of their own.
    let mut steps = Vec::new();
    let mut chart_index = Vec::new();
    let mut missing = Vec::new();
    for (n, s) in plan.steps.iter().enumerate() {
        let mut v = json!({"id": s.id, "uses": s.uses, "needs": s.needs, "with": s.with, "timeout": humantime::format_duration(s.timeout).to_string()});
        if s.retry.attempts.is_some_and(|a| a > 1) {
            v["retry"] = json!(s.retry);
        }
        if let Some(d) = &s.description {
            v["description"] = json!(d);
        }
        if !s.objects.is_empty() {
            let path = format!(
                "clusters/{}/manifests/{:02}-{}.yaml",
                s.cluster().unwrap_or("?"),
                n,
                file_stem(&s.id)
            );
            let docs: Vec<String> = s.objects.iter().map(to_yaml).collect();
            files.insert(path.clone(), docs.join("---\n"));
            v["manifests"] = json!(path);
        }
        if let Some(c) = &s.chart {
            let entry = chart_files(lab, &s.id, c, renders, &mut files, &mut missing);
            v["values"] = entry["valuesFile"].clone();
            chart_index.push(entry);
        }
        steps.push(v);
    }
    files.insert(
        "steps.yaml".into(),
        to_yaml(&json!({"workflow": plan.workflow, "lab": plan.lab, "steps": steps})),
    );
    // Said in the file itself, so that nobody takes the folder for everything `up` applies.
    let not_included = (!missing.is_empty()).then(|| {
        json!({
            "what": "the objects these charts render (`up` renders each chart, the pinned version with the values file and patches listed here, when it installs it)",
            "charts": missing,
        })
    });
    files.insert(
        "charts.yaml".into(),
        to_yaml(&json!({"charts": chart_index, "notIncluded": not_included})),
    );

    for (path, text) in &files {
        let p = dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        std::fs::write(&p, text).map_err(err)?;
    }
    Ok(files.len())
}

/// The files of one chart a step installs (its values, a klusterlet's bootstrap kubeconfig template, what
/// it renders when it was rendered), and its entry in `charts.yaml`; a chart not rendered goes to `missing`.
fn chart_files(
    lab: &Lab,
    step: &str,
    c: &crate::charts::ChartPlan,
    renders: &ChartRenders,
    files: &mut BTreeMap<String, String>,
    missing: &mut Vec<Value>,
) -> Value {
    let values = format!("clusters/{}/values/{}.yaml", c.cluster, c.release);
    files.insert(values.clone(), to_yaml(&c.values));
    let mut entry = json!({
        "step": step, "cluster": c.cluster, "release": c.release, "namespace": c.namespace,
        "repo": c.repo, "chart": c.chart, "version": c.version, "valuesFile": values,
        "patches": c.patches, "runtimeValues": c.runtime_values,
    });
    if c.release == "klusterlet" {
        let template = format!("clusters/{}/bootstrap-kubeconfig.template.yaml", c.cluster);
        files.insert(template.clone(), charts::bootstrap_kubeconfig_template(lab));
        entry["bootstrapKubeconfigTemplate"] = json!(template);
    }
    let key = (c.cluster.clone(), c.release.clone());
    match renders.get(&key) {
        Some(Ok(text)) => {
            let path = format!("charts/{}/{}.yaml", c.cluster, c.release);
            files.insert(path.clone(), text.clone());
            entry["rendered"] = json!(path);
        }
        Some(Err(why)) => missing.push(json!({
            "chart": c.chart.name(), "version": c.version, "cluster": c.cluster,
            "release": c.release, "why": why,
        })),
        None => missing.push(json!({
            "chart": c.chart.name(), "version": c.version, "cluster": c.cluster,
            "release": c.release, "why": "not rendered",
        })),
    }
    entry
}

fn to_yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).expect("JSON values serialize to YAML")
}

/// A readable summary of a plan, for the terminal.
pub fn summary(lab: &Lab, plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Plan for lab `{}` (workflow `{}`): nothing has been touched.",
        plan.lab, plan.workflow
    );
    if let Some(d) = &lab.description {
        let _ = writeln!(out, "  {d}");
    }
    let _ = writeln!(out, "\nClusters:");
    for c in lab.clusters() {
        let how = match &c.provider {
            Provider::Kind => format!("kind, image {}", short_image(&lab.versions.kind_node_image)),
            Provider::Existing {
                kubeconfig,
                context,
            } => format!("existing, {kubeconfig} context {context}"),
        };
        let _ = writeln!(
            out,
            "  {:<12} {:<5} {how}",
            c.name,
            format!("{:?}", c.role).to_lowercase()
        );
    }
    let _ = writeln!(out, "\nCharts:");
    for c in plan.charts() {
        let patches = if c.patches.is_empty() {
            String::new()
        } else {
            format!(
                ", patched: {}",
                c.patches
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let _ = writeln!(
            out,
            "  {:<24} {} {} on {} in {}{patches}",
            c.chart.name(),
            c.version,
            c.release,
            c.cluster,
            c.namespace
        );
    }
    let _ = writeln!(out, "\nSteps ({}):", plan.steps.len());
    let width = plan
        .steps
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(0)
        .min(48);
    for s in &plan.steps {
        let what = if !s.objects.is_empty() {
            let kinds: Vec<String> = s
                .objects
                .iter()
                .map(|o| match crate::backend::ObjectRef::of(o) {
                    Some(r) => format!("{} {}", r.kind, r.name),
                    None => format!("{} ?", o["kind"].as_str().unwrap_or("?")),
                })
                .collect();
            format!(" → {}", kinds.join(", "))
        } else {
            String::new()
        };
        let needs = if s.needs.is_empty() {
            String::new()
        } else {
            format!("  (after {})", s.needs.join(", "))
        };
        let _ = writeln!(out, "  {:<width$}  {}{what}{needs}", s.id, s.uses);
    }
    let _ = writeln!(
        out,
        "\nVerification: {} in {} within {}.",
        lab.verify
            .checks
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        lab.verify.namespaces.join(", "),
        humantime::format_duration(lab.verify.timeout)
    );
    let _ = writeln!(
        out,
        "Write every manifest and values file with `ocm-lab plan --out DIR`."
    );
    out
}

fn short_image(image: &str) -> &str {
    image.split('@').next().unwrap_or(image)
}

/// `ocm-lab plan`: renders a workflow against the topology and prints or writes it.
pub fn run(args: &crate::cli::PlanArgs, host: &crate::topology::Host) -> Result<(), Error> {
    use super::{document, stdout};
    use crate::cli::Output;
    let (loaded, sources, patches) = super::inputs(&args.lab, host)?;
    super::warn(&loaded);
    let plan = crate::workflow::plan::plan(
        &loaded.lab,
        &sources,
        &crate::actions::Registry,
        &patches,
        &args.workflow,
    )?;
    match (&args.out, args.output.output) {
        (Some(dir), output) => {
            // Before rendering: a folder that is refused is refused without running helm.
            check_out_dir(dir)?;
            let renders = if args.simulate {
                render_simulated(&plan, &patches)
            } else if args.no_charts {
                not_rendered(&plan, "skipped by `--no-charts`")
            } else {
                render_with_helm(&plan, args.lab.chart_patches.as_deref())?
            };
            let written = write(&loaded.lab, &plan, dir, &renders)?;
            let rendered = renders.values().filter(|r| r.is_ok()).count();
            let missing: Vec<String> = renders
                .iter()
                .filter_map(|((cluster, release), r)| {
                    r.as_ref()
                        .err()
                        .map(|why| format!("{release} on {cluster}: {why}"))
                })
                .collect();
            let result = json!({
                "lab": plan.lab,
                "workflow": plan.workflow,
                "dir": dir,
                "steps": plan.steps.len(),
                "files": written,
                "charts": {"rendered": rendered, "simulated": args.simulate, "notIncluded": missing},
            });
            document(output, &result, || {
                let mut line = format!(
                    "wrote the plan of lab `{}` ({}, {}) to {}\n",
                    plan.lab,
                    crate::text::count(plan.steps.len(), "step", "steps"),
                    crate::text::count(written, "file", "files"),
                    dir.display()
                );
                if rendered > 0 {
                    let how = if args.simulate {
                        " (SIMULATED: by the simulated chart models, not by Helm)"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        line,
                        "rendered {}{how} into charts/",
                        crate::text::count(rendered, "chart", "charts")
                    );
                }
                if !missing.is_empty() {
                    let _ = writeln!(
                        line,
                        "not included: the objects of {} (see notIncluded in charts.yaml):",
                        crate::text::count(missing.len(), "chart", "charts")
                    );
                    // One line per reason: five charts left out for want of helm say so once.
                    let mut by_reason: BTreeMap<&str, Vec<String>> = BTreeMap::new();
                    for ((cluster, release), r) in &renders {
                        if let Err(why) = r {
                            by_reason
                                .entry(why.as_str())
                                .or_default()
                                .push(format!("{release} on {cluster}"));
                        }
                    }
                    for (why, charts) in by_reason {
                        let _ = writeln!(line, "  {}: {why}", charts.join(", "));
                    }
                }
                line
            })
        }
        (None, Output::Json) => stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&plan).expect("plans serialize")
        )),
        (None, Output::Yaml) => {
            stdout(&serde_saphyr::to_string(&plan).expect("plans serialize to YAML"))
        }
        (None, Output::Human) => stdout(&format!(
            "{}{}",
            summary(&loaded.lab, &plan),
            departed_notice(&loaded.lab, args.simulate, &args.workflow)
        )),
    }
}

/// What leaves with this plan: the kind clusters the lab's ownership record holds that the topology no
/// longer declares (`up` deregisters and deletes them, `down` deletes them). Reads the record only (a
/// local file; `plan` touches no cluster): `up` itself decides from what the engine and the hub show.
/// The simulated lab's record is read too (its `plan` needs `--out`), and named as such.
fn departed_notice(lab: &crate::topology::Lab, simulated: bool, workflow: &str) -> String {
    let what = match workflow {
        "up" => "it will be deregistered and its kind cluster deleted",
        "down" => "its kind cluster will be deleted",
        _ => return String::new(),
    };
    let mut out = String::new();
    for sim in [simulated, true] {
        let Ok(state) = crate::state::StateDir::to_look_at(&lab.name, sim) else {
            continue;
        };
        let departed = state
            .owned_lenient()
            .map(|o| o.departed(|n| lab.cluster(n).is_some()))
            .unwrap_or_default();
        let which = if sim { " (in the SIMULATED lab)" } else { "" };
        for d in departed {
            out.push_str(&format!("{d} left the topology{which}: {what}\n"));
        }
        if sim {
            break;
        }
    }
    out
}
