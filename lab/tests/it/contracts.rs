//! The tools' contracts (`ocm_lab_testkit::contracts`) as the stand-ins enforce them: each refusal is the
//! real version's, word for word, and every command line ocm-lab builds passes every supported version.
//! The adapters' own runs against contract-checked stand-ins are in `helm_release.rs` (helm, every
//! version) and `tools.rs` (kind, every version).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use ocm_lab::backend::HelmTarget;
use ocm_lab::backend::helm::{self, PostRenderer};
use ocm_lab::charts::ChartPlan;
use ocm_lab::topology::catalog::Chart;
use ocm_lab_testkit::contracts::{self, Contract, HELM_VERSIONS, KIND_VERSIONS};
use serde_json::json;

/// A stand-in that only checks its command line against `contract` and succeeds when it passes.
struct Checker {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl Checker {
    fn new(contract: &Contract) -> Checker {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(contract.name());
        std::fs::write(
            &path,
            format!("#!/bin/sh\n{}\ncontract_check \"$@\"\n", contract.guard()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Checker { dir, path }
    }

    /// Runs the stand-in: `Ok(())` when it accepts `args`, else `Err(stderr)` (exit status 1).
    fn run<S: AsRef<str>>(&self, args: &[S]) -> Result<(), String> {
        let out = std::process::Command::new(&self.path)
            .args(args.iter().map(AsRef::as_ref))
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        match out.status.code() {
            Some(0) => Ok(()),
            Some(1) => Err(stderr),
            other => panic!("exit {other:?}: {stderr}"),
        }
    }
}

#[test]
fn helm_4_refuses_list_all_as_cobra_does_and_helm_3_takes_it() {
    for version in HELM_VERSIONS {
        let c = Checker::new(&contracts::helm(version));
        let got = c.run(&["list", "--all", "--filter", "^x$", "--output", "json"]);
        if version.starts_with('4') {
            assert_eq!(
                got,
                Err("Error: unknown flag: --all\n".to_owned()),
                "{version}"
            );
            assert_eq!(
                c.run(&["list", "-a"]),
                Err("Error: unknown shorthand flag: 'a' in -a\n".to_owned())
            );
        } else {
            assert_eq!(got, Ok(()), "{version}");
        }
    }
}

#[test]
fn helm_stand_ins_refuse_missing_values_and_arguments_in_helms_words() {
    for version in HELM_VERSIONS {
        let c = Checker::new(&contracts::helm(version));
        assert_eq!(
            c.run(&["upgrade", "--install", "only-a-release"]),
            Err("Error: \"helm upgrade\" requires 2 arguments\n\nUsage:  helm upgrade [RELEASE] [CHART] [flags]\n".to_owned()),
            "{version}"
        );
        assert_eq!(
            c.run(&["list", "stray"]),
            Err(
                "Error: \"helm list\" accepts no arguments\n\nUsage:  helm list [flags]\n"
                    .to_owned()
            )
        );
        assert_eq!(
            c.run(&["uninstall", "--namespace", "ns"]),
            Err("Error: \"helm uninstall\" requires at least 1 argument\n\nUsage:  helm uninstall RELEASE_NAME [...] [flags]\n".to_owned())
        );
        assert_eq!(
            c.run(&["list", "--filter"]),
            Err("Error: flag needs an argument: --filter\n".to_owned())
        );
        assert_eq!(
            c.run(&["lsit"]),
            Err("Error: unknown command \"lsit\" for \"helm\"\n".to_owned())
        );
        assert_eq!(
            c.run(&["get", "values", "r", "-n", "ns", "-o", "json"]),
            Ok(())
        );
        assert_eq!(c.run(&["version", "--template", "{{.Version}}"]), Ok(()));
    }
}

#[test]
fn kind_stand_ins_refuse_stray_arguments_and_unknown_flags_in_kinds_words() {
    for version in KIND_VERSIONS {
        let c = Checker::new(&contracts::kind(version));
        assert_eq!(
            c.run(&["create", "cluster", "hub"]),
            Err("ERROR: unknown command \"hub\" for \"kind create cluster\"\n".to_owned()),
            "{version}"
        );
        assert_eq!(
            c.run(&["delete", "cluster", "--nmae", "hub"]),
            Err("ERROR: unknown flag: --nmae\n".to_owned())
        );
        assert_eq!(
            c.run(&["get", "kubeconfig", "--name"]),
            Err("ERROR: flag needs an argument: --name\n".to_owned())
        );
        assert_eq!(c.run(&["get", "clusters"]), Ok(()));
        assert_eq!(c.run(&["version"]), Ok(()));
    }
}

fn chart_plan() -> ChartPlan {
    ChartPlan {
        cluster: "hub".into(),
        release: "cluster-manager".into(),
        namespace: "open-cluster-management".into(),
        repo: "https://open-cluster-management.io/helm-charts".into(),
        chart: Chart::ClusterManager,
        version: "1.1.0".into(),
        values: json!({}),
        runtime_values: vec![],
        patches: vec![],
    }
}

/// Every helm command line the adapter builds, for helm `major`, with the post-renderer ocm-lab gives
/// that major: from the repository and from the chart cache's local `.tgz`, list with and without the
/// lab's selector, get values, uninstall.
fn helm_command_lines(major: u64, dir: &Path) -> Vec<Vec<String>> {
    let chart = chart_plan();
    let post = PostRenderer {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_ocm-lab")),
        chart_patches: Some(dir.join("patches")),
        plugins_dir: dir.join("plugins"),
    };
    let target = helm::target_args(&HelmTarget {
        cluster: "hub".into(),
        kubeconfig: dir.join("hub.kubeconfig"),
        context: "kind-hub".into(),
        lab: "workshop".into(),
    });
    let values = dir.join("values.json");
    let local = dir.join("cluster-manager-1.1.0.tgz");
    let (post_flags, _env) = helm::post_renderer_flags(major, &post, &chart).unwrap();
    let mut lines = Vec::new();
    for from in [None, Some(local.as_path())] {
        let mut template = helm::template_args_from(&chart, from, &values);
        template.extend(post_flags.clone());
        lines.push(template);
        let mut upgrade = helm::upgrade_args_from(&chart, from, &values);
        upgrade.extend(["--labels".into(), "lab=workshop".into()]);
        upgrade.extend(target.clone());
        upgrade.extend(post_flags.clone());
        lines.push(upgrade);
    }
    for selector in [None, Some("lab=workshop".to_owned())] {
        let mut list = helm::list_args(major, "cluster-manager", "ns", selector);
        list.extend(target.clone());
        lines.push(list);
    }
    lines.push(
        [
            "get",
            "values",
            "cluster-manager",
            "--namespace",
            "ns",
            "--output",
            "json",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain(target.clone())
        .collect(),
    );
    lines.push(
        ["uninstall", "cluster-manager", "--namespace", "ns"]
            .map(str::to_owned)
            .into_iter()
            .chain(target)
            .collect(),
    );
    lines
}

#[test]
fn every_helm_command_line_passes_every_supported_helm() {
    for version in HELM_VERSIONS {
        let contract = contracts::helm(version);
        let c = Checker::new(&contract);
        let major: u64 = version.split('.').next().unwrap().parse().unwrap();
        for line in helm_command_lines(major, c.dir.path()) {
            assert_eq!(c.run(&line), Ok(()), "helm {version}: {line:?}");
        }
        // The version probe ocm-lab runs.
        let probe = ocm_lab::backend::tools::ToolName::Helm.version_args();
        assert_eq!(c.run(probe), Ok(()), "helm {version}");
    }
}

#[test]
fn ctr_and_crictl_stand_ins_refuse_as_the_node_images_tools_do() {
    for tools in contracts::NODE_IMAGES {
        let ctr = Checker::new(&contracts::ctr(tools.containerd));
        // kind's own line (`LoadImageArchive`) and ocm-lab's, both flag spellings Go's `flag` takes.
        for line in [
            &[
                "--namespace=k8s.io",
                "images",
                "import",
                "--all-platforms",
                "--digests",
                "--snapshotter=native",
                "-",
            ][..],
            &[
                "-n",
                "k8s.io",
                "images",
                "import",
                "--digests",
                "--snapshotter",
                "overlayfs",
                "/a.tar",
            ],
            &["--namespace=k8s.io", "images", "ls"],
            &["--namespace=k8s.io", "images", "list"],
        ] {
            assert_eq!(ctr.run(line), Ok(()), "{}: {line:?}", tools.image);
        }
        assert_eq!(
            ctr.run(&[
                "--namespace=k8s.io",
                "images",
                "import",
                "--all-platform",
                "/a.tar"
            ]),
            Err("ctr: flag provided but not defined: -all-platform\n".to_owned())
        );
        assert_eq!(
            ctr.run(&["--namespace=k8s.io", "images", "import", "--snapshotter"]),
            Err("ctr: flag needs an argument: -snapshotter\n".to_owned())
        );
        // A global flag after the command words belongs to no level there.
        assert_eq!(
            ctr.run(&["images", "import", "--namespace=k8s.io", "/a.tar"]),
            Err("ctr: flag provided but not defined: -namespace\n".to_owned())
        );
        assert_eq!(
            ctr.run(&["images", "import", "--digests"]),
            Err("ctr: open : no such file or directory\n".to_owned())
        );
        let crictl = Checker::new(&contracts::crictl(tools.crictl));
        assert_eq!(crictl.run(&["pull", "registry.k8s.io/pause:3.10"]), Ok(()));
        let e = crictl.run(&["pull", "--creds=x", "a"]).unwrap_err();
        assert!(
            e.ends_with("level=fatal msg=\"flag provided but not defined: -creds\"\n"),
            "{e}"
        );
    }
}
