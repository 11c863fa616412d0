//! `ocm-lab plan`: renders what `up` would do, touching nothing; presents it as the folder `--out DIR`
//! writes, as JSON or YAML, or as the summary printed without it ([`run`], at the end).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::charts;
use crate::error::Error;
use crate::topology::{Lab, Provider};
use crate::workflow::Plan;

/// The marker file that says a folder holds an ocm-lab plan, so a new plan may replace it.
pub const MARKER: &str = ".ocm-lab-plan";

/// A step id as a file name: `join[cluster1]` → `join-cluster1`.
fn file_stem(id: &str) -> String {
    id.replace(['[', '/'], "-").replace(']', "")
}

/// Writes the plan into `dir` and returns how many files it wrote. Touches nothing outside `dir`, and
/// refuses a non-empty folder that is not an earlier plan.
pub fn write(lab: &Lab, plan: &Plan, dir: &Path) -> Result<usize, Error> {
    let err = |source| Error::WriteFile {
        path: dir.display().to_string(),
        source,
    };
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(err)?;
        if entries.next().is_some() && !dir.join(MARKER).exists() {
            return Err(Error::PlanDirNotEmpty(dir.display().to_string()));
        }
        // Manifests of steps that no longer exist must not linger from the earlier plan.
        let clusters = dir.join("clusters");
        if clusters.exists() {
            std::fs::remove_dir_all(&clusters).map_err(err)?;
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
            let values = format!("clusters/{}/values/{}.yaml", c.cluster, c.release);
            files.insert(values.clone(), to_yaml(&c.values));
            let mut entry = json!({
                "step": s.id, "cluster": c.cluster, "release": c.release, "namespace": c.namespace,
                "repo": c.repo, "chart": c.chart, "version": c.version, "valuesFile": values,
                "patches": c.patches, "runtimeValues": c.runtime_values,
            });
            if c.release == "klusterlet" {
                let template = format!("clusters/{}/bootstrap-kubeconfig.template.yaml", c.cluster);
                files.insert(template.clone(), charts::bootstrap_kubeconfig_template(lab));
                entry["bootstrapKubeconfigTemplate"] = json!(template);
            }
            v["values"] = json!(values);
            chart_index.push(entry);
        }
        steps.push(v);
    }
    files.insert(
        "steps.yaml".into(),
        to_yaml(&json!({"workflow": plan.workflow, "lab": plan.lab, "steps": steps})),
    );
    // Said in the file itself, so that nobody takes the folder for everything `up` applies.
    let not_included = (!chart_index.is_empty()).then(|| {
        json!({
            "what": "the objects the charts render",
            "charts": chart_index.iter().map(|c| format!("{} {} on {}", c["chart"].as_str().unwrap_or_default(), c["version"].as_str().unwrap_or_default(), c["cluster"].as_str().unwrap_or_default())).collect::<Vec<_>>(),
            "why": "plan runs no tools and downloads nothing; `up` renders each chart (the pinned version, with the values file and patches listed here) when it installs it",
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
                .map(|o| {
                    format!(
                        "{} {}",
                        o["kind"].as_str().unwrap_or("?"),
                        o["metadata"]["name"].as_str().unwrap_or("?")
                    )
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
pub fn run(args: &crate::cli::PlanArgs) -> Result<(), Error> {
    use super::{document, stdout};
    use crate::cli::Output;
    let (loaded, sources, patches) = super::inputs(&args.lab)?;
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
            let written = write(&loaded.lab, &plan, dir)?;
            let result = json!({
                "lab": plan.lab,
                "workflow": plan.workflow,
                "dir": dir,
                "steps": plan.steps.len(),
                "files": written,
            });
            document(output, &result, || {
                format!(
                    "wrote the plan of lab `{}` ({}, {}) to {}\n",
                    plan.lab,
                    crate::text::count(plan.steps.len(), "step", "steps"),
                    crate::text::count(written, "file", "files"),
                    dir.display()
                )
            })
        }
        (None, Output::Json) => stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&plan).expect("plans serialize")
        )),
        (None, Output::Yaml) => {
            stdout(&serde_saphyr::to_string(&plan).expect("plans serialize to YAML"))
        }
        (None, Output::Human) => stdout(&summary(&loaded.lab, &plan)),
    }
}
