//! The images a lab runs: `ocm-lab images list`, and the doctor's check of which are already in the
//! local Docker engine.
//!
//! The list is derived, never kept by hand per lab: the kind node image from the topology, and for each
//! chart of the plan the images its pinned version runs, from the version catalog
//! (`topology::catalog::chart_images`, cited to the upstream charts), so the list needs no network and no
//! helm. No chart pins a digest, so only the node image has one.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::backend::split_reference;

use serde::Serialize;
use serde_json::Value;

use crate::charts::ChartPlan;
use crate::topology::catalog::{Chart, ImageRuns, chart_images};
use crate::topology::{Lab, Provider};
use crate::workflow::Plan;

/// What an image is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImageKind {
    /// The kindest/node image every kind cluster boots from (pulled by Docker on the host).
    Node,
    /// An image a chart's objects (or the operators they configure) run in the clusters (pulled by the
    /// nodes' containerd).
    Chart,
    /// The local registry's image (`spec.registry.local`), run by Docker on the host.
    Registry,
}

/// One image the lab runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabImage {
    /// The reference as the lab uses it (`quay.io/open-cluster-management/work:v1.3.1`).
    pub image: String,
    /// The reference without tag and digest (`quay.io/open-cluster-management/work`).
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:…` when the reference pins one.
    pub digest: Option<String>,
    pub kind: ImageKind,
    /// The lab clusters that run it.
    pub clusters: Vec<String>,
    /// Where it was found: `cluster-manager 1.3.1: Deployment open-cluster-management/cluster-manager
    /// spec.template.spec.containers[0].image`, or `topology: spec.versions.kindNodeImage`.
    pub sources: Vec<String>,
}

pub use crate::error::ImagesError;

/// Whether a string looks like an image reference (`registry/name:tag`, `name@sha256:…`), not a flag
/// value such as `true` or a path.
fn looks_like_image(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('/')
        && !s.contains(char::is_whitespace)
        && (s.contains('/') || s.contains(':'))
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/:@._-".contains(c))
}

/// Every image a rendered object names, with the JSON path where it does: container images, `image`
/// fields, `*ImagePullSpec` fields, `--*image*=` arguments and `*_IMAGE` environment variables.
pub fn images_in(object: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                // An `env` item: {name: AGENT_IMAGE, value: quay.io/…}.
                if let (Some(Value::String(name)), Some(Value::String(value))) =
                    (map.get("name"), map.get("value"))
                    && name.ends_with("_IMAGE")
                    && looks_like_image(value)
                {
                    out.push((value.clone(), format!("{path}.value")));
                }
                for (k, child) in map {
                    let here = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    match child {
                        Value::String(s)
                            if (k == "image"
                                || k.ends_with("ImagePullSpec")
                                || k == "imagePullSpec")
                                && looks_like_image(s) =>
                        {
                            out.push((s.clone(), here));
                        }
                        _ => walk(child, &here, out),
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => {
                            if let Some((flag, value)) = s.split_once('=')
                                && flag.starts_with("--")
                                && flag.contains("image")
                                && looks_like_image(value)
                            {
                                out.push((value.to_owned(), format!("{path}[{i}]")));
                            }
                        }
                        other => walk(other, &format!("{path}[{i}]"), out),
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(object, "", &mut out);
    out
}

/// The lab clusters an image of `chart` runs on: the chart's own cluster, and for an addon's agent image
/// also the clusters the addon manager deploys its agent to.
fn runs_on(lab: &Lab, chart: &ChartPlan, runs: ImageRuns) -> Vec<String> {
    let mut out = vec![chart.cluster.clone()];
    let managed = match (runs, chart.chart) {
        (ImageRuns::AddonAgents, Chart::ClusterProxy) => {
            lab.addons.cluster_proxy.as_ref().map(|a| &a.clusters)
        }
        (ImageRuns::AddonAgents, Chart::ManagedServiceaccount) => lab
            .addons
            .managed_serviceaccount
            .as_ref()
            .map(|a| &a.clusters),
        _ => None,
    };
    for name in managed.into_iter().flatten() {
        if let Some(m) = lab.managed_cluster(name)
            && !out.contains(&m.cluster)
        {
            out.push(m.cluster.clone());
        }
    }
    out
}

/// Every image the lab runs: the node image (when a cluster is made by kind), then the charts' images,
/// sorted by reference.
pub fn list(lab: &Lab, plan: &Plan) -> Result<Vec<LabImage>, ImagesError> {
    let mut out: Vec<LabImage> = Vec::new();
    let kind_clusters: Vec<String> = lab
        .clusters()
        .filter(|c| c.provider == Provider::Kind)
        .map(|c| c.name.clone())
        .collect();
    if !kind_clusters.is_empty() {
        let image = &lab.versions.kind_node_image;
        let (repository, tag, digest) = split_reference(image);
        out.push(LabImage {
            image: image.clone(),
            repository,
            tag,
            digest,
            kind: ImageKind::Node,
            clusters: kind_clusters,
            sources: vec!["topology: spec.versions.kindNodeImage".to_owned()],
        });
    }
    let mut charts: BTreeMap<String, LabImage> = BTreeMap::new();
    for chart in plan.charts() {
        let images = chart_images(chart.chart, &chart.version).ok_or_else(|| ImagesError {
            chart: chart.chart.name().to_owned(),
            version: chart.version.clone(),
        })?;
        for i in images {
            let image = i.reference(&chart.version);
            let entry = charts.entry(image.clone()).or_insert_with(|| {
                let (repository, tag, digest) = split_reference(&image);
                LabImage {
                    image: image.clone(),
                    repository,
                    tag,
                    digest,
                    kind: ImageKind::Chart,
                    clusters: Vec::new(),
                    sources: Vec::new(),
                }
            });
            for cluster in runs_on(lab, chart, i.runs) {
                if !entry.clusters.contains(&cluster) {
                    entry.clusters.push(cluster);
                }
            }
            let source = format!("{} {}: {}", chart.chart.name(), chart.version, i.source);
            if !entry.sources.contains(&source) {
                entry.sources.push(source);
            }
        }
    }
    out.extend(charts.into_values());
    if let Some(local) = &lab.registry.local {
        let (repository, tag, digest) = split_reference(&local.image);
        out.push(LabImage {
            image: local.image.clone(),
            repository,
            tag,
            digest,
            kind: ImageKind::Registry,
            clusters: Vec::new(),
            sources: vec!["topology: spec.registry.local".to_owned()],
        });
    }
    Ok(out)
}

/// The lab's images as the doctor and preflight check them: listed from the plan of `up` with the
/// workflows and chart patches the command was given, or why they could not be listed.
pub fn for_doctor(
    lab: &Lab,
    sources: &crate::workflow::Sources,
    patches: &crate::patch::PatchSet,
) -> Result<Vec<LabImage>, String> {
    let plan = crate::workflow::plan::plan(lab, sources, &crate::actions::Registry, patches, "up")
        .map_err(|e| e.to_string())?;
    list(lab, &plan).map_err(|e| e.to_string())
}

/// The human form of `images list`: the short columns first and the image reference last, whole, so
/// that the columns stay within a terminal's width and a reference is never cut (it is there to be
/// copied). A list of clusters longer than its column is given as a count (`-o json` names them).
pub fn render_list(images: &[LabImage]) -> String {
    const CLUSTERS_WIDTH: usize = 28;
    let clusters = |i: &LabImage| {
        let joined = i.clusters.join(",");
        if joined.len() <= CLUSTERS_WIDTH {
            joined
        } else {
            crate::text::count(i.clusters.len(), "cluster", "clusters")
        }
    };
    let width = images
        .iter()
        .map(|i| clusters(i).len())
        .chain(["CLUSTERS".len()])
        .max()
        .unwrap_or(8);
    let mut out = String::new();
    let _ = writeln!(out, "{:<8}  {:<width$}  IMAGE", "KIND", "CLUSTERS");
    for i in images {
        let kind = match i.kind {
            ImageKind::Node => "node",
            ImageKind::Chart => "chart",
            ImageKind::Registry => "registry",
        };
        let _ = writeln!(out, "{kind:<8}  {:<width$}  {}", clusters(i), i.image);
    }
    let pinned = images.iter().filter(|i| i.digest.is_some()).count();
    let _ = writeln!(
        out,
        "\n{}, {pinned} pinned by digest (no chart pins one); chart images come from ocm-lab's version catalog of the pinned charts (`-o json` names the upstream file of each)",
        crate::text::count(images.len(), "image", "images")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_split_into_repository_tag_and_digest() {
        assert_eq!(
            split_reference("kindest/node:v1.36.1@sha256:abc"),
            (
                "kindest/node".into(),
                Some("v1.36.1".into()),
                Some("sha256:abc".into())
            )
        );
        assert_eq!(
            split_reference("localhost:5001/x"),
            ("localhost:5001/x".into(), None, None)
        );
        assert_eq!(
            split_reference("registry:2"),
            ("registry".into(), Some("2".into()), None)
        );
    }

    #[test]
    fn images_are_found_in_containers_pull_specs_arguments_and_env() {
        let obj = json!({
            "kind": "X",
            "spec": {
                "workImagePullSpec": "q.io/o/work:v1",
                "proxyServer": {"image": "q.io/o/cp:v2", "replicas": 1},
                "template": {"spec": {"containers": [{
                    "image": "q.io/o/op:v1",
                    "args": ["/manager", "--agent-image-name=q.io/o/agent:v3", "--leader-elect=true"],
                    "env": [{"name": "AGENT_IMAGE", "value": "q.io/o/env:v4"}, {"name": "X", "value": "a/b"}],
                }]}},
            },
        });
        let found: Vec<String> = images_in(&obj).into_iter().map(|(i, _)| i).collect();
        for want in [
            "q.io/o/work:v1",
            "q.io/o/cp:v2",
            "q.io/o/op:v1",
            "q.io/o/agent:v3",
            "q.io/o/env:v4",
        ] {
            assert!(found.contains(&want.to_owned()), "{want} not in {found:?}");
        }
        assert_eq!(found.len(), 5, "{found:?}");
    }
}
