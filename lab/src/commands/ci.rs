//! `ocm-lab ci`: what a CI workflow asks of ocm-lab besides running a lab.
//!
//! `ci matrix` prints a GitHub Actions `strategy.matrix` of topologies × node images (the embedded
//! topologies and the catalog's known node images unless given), leaving out the combinations whose kind
//! clusters would not fit the runner's memory, by the same per-cluster figure preflight uses
//! ([`crate::commands::doctor::MIB_PER_CLUSTER`]). `ci contexts` prints the kube contexts of a lab's hub and spokes
//! and the kubeconfig `up` writes them to: the outputs of the repository's GitHub Action (`action.yml`).

use std::io::Write as _;

use serde::Serialize;

use crate::actions::user_kubeconfig;
use crate::cli::{CiCommand, CiContextsArgs, CiMatrixArgs, Output};
use crate::commands::doctor::MIB_PER_CLUSTER;
use crate::error::Error;
use crate::topology::{self, Lab, Provider, catalog};

/// One job of the matrix: the values a workflow reads as `matrix.<key>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The topology as `-t` takes it: an embedded name or the file path given.
    pub topology: String,
    /// The kindest/node image, for `--node-image`.
    pub node: String,
    /// The Kubernetes version the image's tag names (`1.36.1`), else the image itself: for job names.
    pub k8s: String,
    /// How many kind clusters the topology creates (existing clusters take no runner memory).
    pub clusters: usize,
}

/// A combination left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeftOut {
    pub topology: String,
    pub node: String,
    pub k8s: String,
    pub clusters: usize,
    pub need_mib: u64,
}

/// The matrix: `include` is the GitHub `strategy.matrix` (the only key a workflow's `fromJSON` gets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    pub include: Vec<Entry>,
    pub left_out: Vec<LeftOut>,
    pub runner_mib: Option<u64>,
}

/// What a set of kind clusters needs, as preflight reckons it.
pub fn need_mib(kind_clusters: usize) -> u64 {
    MIB_PER_CLUSTER * kind_clusters as u64
}

/// The kind clusters of a lab: the ones the runner has to hold.
pub fn kind_clusters(lab: &Lab) -> usize {
    lab.clusters()
        .filter(|c| c.provider == Provider::Kind)
        .count()
}

/// `1.36.1` for `kindest/node:v1.36.1@sha256:…`; the image itself when its tag names no version.
pub fn k8s_label(image: &str) -> String {
    catalog::node_image_version(image).map_or_else(|| image.to_owned(), |v| v.to_string())
}

/// Topologies × node images, in the order given, each pair once; pairs needing more than `runner_mib`
/// are left out. `topologies` are (name as given, kind clusters).
pub fn matrix(
    topologies: &[(String, usize)],
    images: &[String],
    runner_mib: Option<u64>,
) -> Matrix {
    let mut include = Vec::new();
    let mut left_out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (topology, clusters) in topologies {
        for node in images {
            if !seen.insert((topology.as_str(), node.as_str())) {
                continue;
            }
            let need = need_mib(*clusters);
            let k8s = k8s_label(node);
            if runner_mib.is_some_and(|have| need > have) {
                left_out.push(LeftOut {
                    topology: topology.clone(),
                    node: node.clone(),
                    k8s,
                    clusters: *clusters,
                    need_mib: need,
                });
            } else {
                include.push(Entry {
                    topology: topology.clone(),
                    node: node.clone(),
                    k8s,
                    clusters: *clusters,
                });
            }
        }
    }
    Matrix {
        include,
        left_out,
        runner_mib,
    }
}

/// Parses a memory size into MiB: a number of MiB (`7168`), or with a unit: `M`/`MiB`, `G`/`GiB`
/// (binary, as Docker's `--memory 16g`), `MB`/`GB` (decimal, as GitHub states its runners' memory).
/// Case does not matter; a space before the unit is allowed; `7.5GiB` works.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    const EXAMPLES: &str =
        "give MiB (`7168`) or a size with a unit: `16GB`, `16GiB`, `7G`, `7168MiB`";
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a memory size: {EXAMPLES}"))?;
    let bytes_per_unit: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "m" | "mi" | "mib" => 1024.0 * 1024.0,
        "g" | "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => {
            return Err(format!("`{text}` has an unknown unit `{unit}`: {EXAMPLES}"));
        }
    };
    let mib = (value * bytes_per_unit / (1024.0 * 1024.0)).floor();
    if !mib.is_finite() || mib < 1.0 {
        return Err(format!(
            "`{text}` is less than 1 MiB: give the runner's memory, e.g. `16GB` for GitHub's standard Linux runner"
        ));
    }
    Ok(mib as u64)
}

/// The contexts `up` gives a lab's clusters, and the kubeconfig it writes the kind ones to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Contexts {
    pub lab: String,
    pub hub: String,
    pub spokes: Vec<String>,
    /// The first file of `KUBECONFIG`, else `~/.kube/config` (none when neither is set).
    pub kubeconfig: Option<String>,
}

pub fn contexts(lab: &Lab) -> Contexts {
    Contexts {
        lab: lab.name.clone(),
        hub: lab.hub.cluster.context.clone(),
        spokes: lab
            .spokes
            .iter()
            .map(|s| s.cluster.context.clone())
            .collect(),
        kubeconfig: user_kubeconfig().map(|p| p.display().to_string()),
    }
}

/// Runs `ocm-lab ci …`.
pub fn run(command: &CiCommand) -> Result<(), Error> {
    match command {
        CiCommand::Matrix(args) => run_matrix(args),
        CiCommand::Contexts(args) => run_contexts(args),
    }
}

fn run_matrix(args: &CiMatrixArgs) -> Result<(), Error> {
    let names: Vec<String> = if args.topology.is_empty() {
        crate::embedded::TOPOLOGIES
            .iter()
            .map(|(n, _)| (*n).to_owned())
            .collect()
    } else {
        args.topology.clone()
    };
    let mut topologies = Vec::new();
    for name in names {
        let loaded = topology::load_arg(Some(&name))?;
        topologies.push((name, kind_clusters(&loaded.lab)));
    }
    let images: Vec<String> = if args.node_image.is_empty() {
        catalog::KNOWN_KIND_NODE_IMAGES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    } else {
        args.node_image.clone()
    };
    let m = matrix(&topologies, &images, args.runner_memory);
    if m.include.is_empty() {
        let smallest = m
            .left_out
            .iter()
            .min_by_key(|l| l.need_mib)
            .expect("a matrix with nothing included left something out");
        return Err(Error::CiNothingFits {
            runner_mib: m.runner_mib.unwrap_or_default(),
            smallest: smallest.topology.clone(),
            need_mib: smallest.need_mib,
            clusters: smallest.clusters,
        });
    }
    if args.output != Output::Human {
        // On stderr: the matrix on stdout goes to `$GITHUB_OUTPUT` whole. (Human output lists them.)
        let mut err = std::io::stderr().lock();
        for l in &m.left_out {
            let _ = writeln!(
                err,
                "left out {} on {}: {} kind clusters need {} MiB ({MIB_PER_CLUSTER} MiB each), the runner has {} MiB",
                l.topology,
                l.k8s,
                l.clusters,
                l.need_mib,
                m.runner_mib.unwrap_or_default()
            );
        }
    }
    let value = serde_json::json!({ "include": m.include });
    write_out(&match args.output {
        Output::Json => format!("{}\n", serde_json::to_string(&value).expect("serializes")),
        Output::Yaml => serde_saphyr::to_string(&value).expect("serializes to YAML"),
        Output::Human => human_matrix(&m),
    })
}

fn human_matrix(m: &Matrix) -> String {
    let mut out = String::new();
    for e in &m.include {
        out.push_str(&format!(
            "{:<12} {:<10} {} kind clusters, {} MiB\n",
            e.topology,
            e.k8s,
            e.clusters,
            need_mib(e.clusters)
        ));
    }
    for l in &m.left_out {
        out.push_str(&format!(
            "{:<12} {:<10} left out: {} kind clusters need {} MiB, the runner has {} MiB\n",
            l.topology,
            l.k8s,
            l.clusters,
            l.need_mib,
            m.runner_mib.unwrap_or_default()
        ));
    }
    out
}

fn run_contexts(args: &CiContextsArgs) -> Result<(), Error> {
    let loaded = topology::load_arg(args.topology.as_deref())?;
    let c = contexts(&loaded.lab);
    write_out(&match args.output {
        Output::Json => format!("{}\n", serde_json::to_string(&c).expect("serializes")),
        Output::Yaml => serde_saphyr::to_string(&c).expect("serializes to YAML"),
        Output::Human => format!(
            "hub:        {}\nspokes:     {}\nkubeconfig: {}\n",
            c.hub,
            c.spokes.join(", "),
            c.kubeconfig
                .as_deref()
                .unwrap_or("(neither KUBECONFIG nor HOME is set)")
        ),
    })
}

fn write_out(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::Stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_parse_in_mib() {
        assert_eq!(parse_memory("7168"), Ok(7168));
        assert_eq!(parse_memory("7168MiB"), Ok(7168));
        assert_eq!(parse_memory("16G"), Ok(16384));
        assert_eq!(parse_memory("16 GiB"), Ok(16384));
        assert_eq!(parse_memory("16gb"), Ok(15258));
        assert_eq!(parse_memory("7.5GiB"), Ok(7680));
        assert_eq!(parse_memory("1000MB"), Ok(953));
        for bad in ["", "GB", "16 TB", "sixteen", "0", "0.0001G", "1.2.3G"] {
            let e = parse_memory(bad).unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
    }

    #[test]
    fn a_pair_is_left_out_exactly_when_its_clusters_need_more_than_the_runner_has() {
        let t = vec![("a".to_owned(), 2), ("b".to_owned(), 3)];
        let i = vec!["kindest/node:v1.36.1".to_owned(), "my/node:dev".to_owned()];
        let m = matrix(&t, &i, Some(3 * MIB_PER_CLUSTER - 1));
        let kept: Vec<_> = m
            .include
            .iter()
            .map(|e| (e.topology.as_str(), e.k8s.as_str()))
            .collect();
        assert_eq!(kept, [("a", "1.36.1"), ("a", "my/node:dev")]);
        assert_eq!(m.left_out.len(), 2);
        assert_eq!(m.left_out[0].need_mib, 3 * MIB_PER_CLUSTER);
        assert_eq!(matrix(&t, &i, Some(3 * MIB_PER_CLUSTER)).left_out, []);
        assert_eq!(matrix(&t, &i, None).include.len(), 4);
    }
}
