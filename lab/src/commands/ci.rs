//! `ocm-lab ci`: what a CI workflow asks of ocm-lab besides running a lab.
//!
//! `ci matrix` prints a GitHub Actions `strategy.matrix` of topologies × node images (the embedded
//! topologies and the catalog's known node images unless given), leaving out the combinations whose kind
//! clusters would not fit the runner: its memory, by the same per-cluster figure preflight uses
//! ([`crate::commands::doctor::MIB_PER_CLUSTER`]), its CPUs ([`CPU_MILLIS_PER_CLUSTER`]) and its disk
//! ([`DISK_MIB_PER_CLUSTER`], [`NODE_IMAGE_DISK_MIB`]), each only when given; it says which combinations
//! it left out, and which resource each lacked. `ci contexts` prints the kube contexts of a lab's hub and spokes
//! and the kubeconfig `up` writes them to: the outputs of the repository's GitHub Action (`action.yml`).

use std::io::Write as _;

use serde::Serialize;

use crate::cli::{CiCommand, CiContextsArgs, CiMatrixArgs, Output};
use crate::commands::checks::MIB_PER_CLUSTER;
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

/// CPU a kind cluster with OCM keeps busy, in millicores: the requests of a kind control plane alone
/// come to 950m (kubeadm's static Pods, kubernetes/kubernetes
/// `cmd/kubeadm/app/phases/controlplane/manifests.go`: kube-apiserver 250m, kube-controller-manager
/// 200m, kube-scheduler 100m; etcd 100m, `cmd/kubeadm/app/phases/etcd/local.go`; two CoreDNS replicas
/// at 100m; kindnet 100m), and OCM's agents run beside them. Every node sees all the runner's CPUs as
/// allocatable, so nothing refuses to schedule: a runner with fewer CPUs than this per cluster runs the
/// lab, slowly enough that its waits time out.
pub const CPU_MILLIS_PER_CLUSTER: u64 = 1000;

/// Disk a kind cluster with OCM takes beyond the node image, roughly: each node keeps its own containerd
/// image store under its own `/var` volume (the OCM and addon images it pulls or is given, unpacked),
/// plus etcd and the logs.
pub const DISK_MIB_PER_CLUSTER: u64 = 2048;

/// Disk of the kindest/node image itself, unpacked once in Docker and shared by every node, roughly.
pub const NODE_IMAGE_DISK_MIB: u64 = 1024;

/// A combination left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeftOut {
    pub topology: String,
    pub node: String,
    pub k8s: String,
    pub clusters: usize,
    pub need_mib: u64,
    pub need_cpu_millis: u64,
    pub need_disk_mib: u64,
    /// What the runner lacks for it, one phrase per resource: `memory: 5 kind clusters need 7680 MiB,
    /// the runner has 4608 MiB`.
    pub short: Vec<String>,
}

/// What the runner has; `None`: not given, so not checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Runner {
    pub mib: Option<u64>,
    pub cpus: Option<u64>,
    pub disk_mib: Option<u64>,
}

/// The matrix: `include` is the GitHub `strategy.matrix` (the only key a workflow's `fromJSON` gets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    pub include: Vec<Entry>,
    pub left_out: Vec<LeftOut>,
    pub runner: Runner,
}

/// What a set of kind clusters needs, as preflight reckons it.
pub fn need_mib(kind_clusters: usize) -> u64 {
    MIB_PER_CLUSTER * kind_clusters as u64
}

/// The CPU, in millicores, `kind_clusters` clusters keep busy ([`CPU_MILLIS_PER_CLUSTER`]).
pub fn need_cpu_millis(kind_clusters: usize) -> u64 {
    CPU_MILLIS_PER_CLUSTER * kind_clusters as u64
}

/// The disk `kind_clusters` clusters take: the node image once, and each cluster's own store.
pub fn need_disk_mib(kind_clusters: usize) -> u64 {
    if kind_clusters == 0 {
        return 0;
    }
    NODE_IMAGE_DISK_MIB + DISK_MIB_PER_CLUSTER * kind_clusters as u64
}

/// What `runner` lacks for `clusters` kind clusters, one phrase per resource it lacks.
pub fn shortfalls(clusters: usize, runner: Runner) -> Vec<String> {
    let mut short = Vec::new();
    if let Some(have) = runner.mib
        && need_mib(clusters) > have
    {
        short.push(format!(
            "memory: {clusters} kind clusters need {} MiB ({MIB_PER_CLUSTER} MiB each), the runner has {have} MiB",
            need_mib(clusters)
        ));
    }
    if let Some(have) = runner.cpus
        && need_cpu_millis(clusters) > have * 1000
    {
        short.push(format!(
            "CPU: {clusters} kind clusters keep about {} CPUs busy ({} each), the runner has {have}",
            need_cpu_millis(clusters).div_ceil(1000),
            CPU_MILLIS_PER_CLUSTER as f64 / 1000.0
        ));
    }
    if let Some(have) = runner.disk_mib
        && need_disk_mib(clusters) > have
    {
        short.push(format!(
            "disk: {clusters} kind clusters take about {} MiB ({DISK_MIB_PER_CLUSTER} MiB each, {NODE_IMAGE_DISK_MIB} MiB for the node image), the runner has {have} MiB",
            need_disk_mib(clusters)
        ));
    }
    short
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

/// Topologies × node images, in the order given, each pair once; pairs needing more than `runner` has
/// are left out. `topologies` are (name as given, kind clusters).
pub fn matrix(topologies: &[(String, usize)], images: &[String], runner: Runner) -> Matrix {
    let mut include = Vec::new();
    let mut left_out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (topology, clusters) in topologies {
        for node in images {
            if !seen.insert((topology.as_str(), node.as_str())) {
                continue;
            }
            let k8s = k8s_label(node);
            let short = shortfalls(*clusters, runner);
            if !short.is_empty() {
                left_out.push(LeftOut {
                    topology: topology.clone(),
                    node: node.clone(),
                    k8s,
                    clusters: *clusters,
                    need_mib: need_mib(*clusters),
                    need_cpu_millis: need_cpu_millis(*clusters),
                    need_disk_mib: need_disk_mib(*clusters),
                    short,
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
        runner,
    }
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
        kubeconfig: lab.host.user_kubeconfig().map(|p| p.display().to_string()),
    }
}

/// Runs `ocm-lab ci …`.
pub fn run(command: &CiCommand, host: &crate::topology::Host) -> Result<(), Error> {
    match command {
        CiCommand::Matrix(args) => run_matrix(args, host),
        CiCommand::Contexts(args) => run_contexts(args, host),
    }
}

fn run_matrix(args: &CiMatrixArgs, host: &crate::topology::Host) -> Result<(), Error> {
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
        let loaded = topology::load_arg(host, Some(&name))?;
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
    let runner = Runner {
        mib: args.runner_memory,
        cpus: args.runner_cpus,
        disk_mib: args.runner_disk,
    };
    let m = matrix(&topologies, &images, runner);
    if m.include.is_empty() {
        let smallest = m
            .left_out
            .iter()
            .min_by_key(|l| l.clusters)
            .expect("a matrix with nothing included left something out");
        return Err(Error::CiNothingFits {
            smallest: smallest.topology.clone(),
            short: smallest.short.join("; "),
        });
    }
    if args.output != Output::Human {
        // On stderr: the matrix on stdout goes to `$GITHUB_OUTPUT` whole. (Human output lists them.)
        let mut err = std::io::stderr().lock();
        for l in &m.left_out {
            let _ = writeln!(
                err,
                "left out {} on {}: {}",
                l.topology,
                l.k8s,
                l.short.join("; ")
            );
        }
        let _ = writeln!(err, "{}", unchecked(runner));
    }
    let value = serde_json::json!({ "include": m.include });
    write_out(&match args.output {
        Output::Json => format!("{}\n", serde_json::to_string(&value).expect("serializes")),
        Output::Yaml => serde_saphyr::to_string(&value).expect("serializes to YAML"),
        Output::Human => human_matrix(&m),
    })
}

/// Which resources the matrix did not check, because the runner's were not given.
fn unchecked(runner: Runner) -> String {
    let mut not = Vec::new();
    if runner.mib.is_none() {
        not.push("memory (--runner-memory)");
    }
    if runner.cpus.is_none() {
        not.push("CPU (--runner-cpus)");
    }
    if runner.disk_mib.is_none() {
        not.push("disk (--runner-disk)");
    }
    if not.is_empty() {
        "checked the runner's memory, CPU and disk".to_owned()
    } else {
        format!("not checked, not given: {}", not.join(", "))
    }
}

fn human_matrix(m: &Matrix) -> String {
    let mut out = String::new();
    for e in &m.include {
        out.push_str(&format!(
            "{:<12} {:<10} {} kind clusters, {} MiB, {} CPUs, {} MiB of disk\n",
            e.topology,
            e.k8s,
            e.clusters,
            need_mib(e.clusters),
            need_cpu_millis(e.clusters).div_ceil(1000),
            need_disk_mib(e.clusters)
        ));
    }
    for l in &m.left_out {
        out.push_str(&format!(
            "{:<12} {:<10} left out: {}\n",
            l.topology,
            l.k8s,
            l.short.join("; ")
        ));
    }
    out.push_str(&unchecked(m.runner));
    out.push('\n');
    out
}

fn run_contexts(args: &CiContextsArgs, host: &crate::topology::Host) -> Result<(), Error> {
    let loaded = topology::load_arg(host, args.topology.as_deref())?;
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
    use crate::cli::parse_memory;

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
        let mem = |mib| Runner {
            mib: Some(mib),
            ..Runner::default()
        };
        let m = matrix(&t, &i, mem(3 * MIB_PER_CLUSTER - 1));
        let kept: Vec<_> = m
            .include
            .iter()
            .map(|e| (e.topology.as_str(), e.k8s.as_str()))
            .collect();
        assert_eq!(kept, [("a", "1.36.1"), ("a", "my/node:dev")]);
        assert_eq!(m.left_out.len(), 2);
        assert_eq!(m.left_out[0].need_mib, 3 * MIB_PER_CLUSTER);
        assert_eq!(matrix(&t, &i, mem(3 * MIB_PER_CLUSTER)).left_out, []);
        assert_eq!(matrix(&t, &i, Runner::default()).include.len(), 4);
    }

    #[test]
    fn cpu_and_disk_leave_pairs_out_too_and_each_shortfall_is_named() {
        let t = vec![("default".to_owned(), 3), ("workshop".to_owned(), 5)];
        let i = vec!["kindest/node:v1.36.1".to_owned()];
        // GitHub's standard Linux runner: 4 vCPUs, 16 GB, 14 GB of SSD.
        let github = Runner {
            mib: Some(parse_memory("16GB").unwrap()),
            cpus: Some(4),
            disk_mib: Some(parse_memory("14GB").unwrap()),
        };
        let m = matrix(&t, &i, github);
        let kept: Vec<_> = m.include.iter().map(|e| e.topology.as_str()).collect();
        assert_eq!(kept, ["default"]);
        let workshop = &m.left_out[0];
        assert_eq!(
            workshop.short,
            ["CPU: 5 kind clusters keep about 5 CPUs busy (1 each), the runner has 4"]
        );
        let small_disk = Runner {
            disk_mib: Some(need_disk_mib(3) - 1),
            ..Runner::default()
        };
        let m = matrix(&t, &i, small_disk);
        assert!(m.include.is_empty());
        assert!(
            m.left_out[0].short[0].starts_with("disk: 3 kind clusters take about 7168 MiB"),
            "{:?}",
            m.left_out[0].short
        );
        assert_eq!(need_disk_mib(0), 0, "existing clusters take no disk");
    }
}
