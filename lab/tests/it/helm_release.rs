//! The charts are installed as Helm releases, with our chart patches applied by Helm's post-renderer
//! (ocm-lab itself), for Helm 3 and Helm 4. A stand-in `helm` records its arguments and runs the
//! post-renderer as each Helm version does (helm/helm v3.19.5 `pkg/postrender/exec.go`, `pkg/action/action.go`:
//! Helm 3 runs `--post-renderer` as an executable path with each `--post-renderer-args` as one argument;
//! helm/helm v4.2.4 `internal/plugin/runtime_subprocess.go`: Helm 4 finds a `postrenderer/v1` plugin by name
//! under `HELM_PLUGINS` and runs its command, its args, then the `--post-renderer-args`; both feed the
//! manifests on stdin, take stdout, and fail on a non-zero exit, Helm 4 without showing the plugin's stderr).
//! It keeps releases in its folder for list/get/uninstall.
//!
//! The stand-in first checks its command line against the contract of the helm version it plays
//! (`ocm_lab_testkit::contracts`), so it refuses an unknown flag or a wrong argument count as that version
//! does (Helm 4: `Error: unknown flag: --all` for `helm list --all`). Every test runs against every
//! supported version.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

use ocm_lab::backend::helm::{self, Helm, PostRenderer};
use ocm_lab::backend::tools::{self, ToolName};
use ocm_lab::backend::{ChartRenderer as _, HelmTarget, Transience};
use ocm_lab::charts::ChartPlan;
use ocm_lab::topology::catalog::Chart;
use ocm_lab_testkit::contracts::{self, HELM_VERSIONS};
use serde_json::{Value, json};

const STAND_IN: &str = r#"#!/bin/sh
d='@DIR@'
major=$(cat "$d/major")
{ printf '%s\n' "$@"; echo '--'; } >> "$d/calls"
@GUARD@
contract_check "$@"
verb="$1"
case "$verb" in
  version) cat "$d/version"; exit 0 ;;
esac
pr=''; prev=''; values=''; ns=''; selector=''; labels=''; version=''; filter=''
: > "$d/pr-args"
for a in "$@"; do
  case "$a" in --post-renderer-args=*) printf '%s\n' "${a#--post-renderer-args=}" >> "$d/pr-args" ;; esac
  case "$prev" in
    --post-renderer) pr="$a" ;;
    --values) values="$a" ;;
    --namespace) ns="$a" ;;
    --selector) selector="$a" ;;
    --labels) labels="$a" ;;
    --version) version="$a" ;;
    --filter) filter="$a" ;;
  esac
  prev="$a"
done
post_render() {
  if [ "$major" -ge 4 ]; then
    found=''
    for f in "$HELM_PLUGINS"/*/plugin.yaml; do
      if grep -q "^name: \"$pr\"" "$f" && grep -q '^type: postrenderer/v1' "$f" && grep -q '^apiVersion: v1' "$f"; then found="$f"; fi
    done
    if [ -z "$found" ]; then echo "Error: plugin: {Name:$pr Type:postrenderer/v1} not found" >&2; exit 1; fi
    raw=$(sed -n 's/^ *- command: "\(.*\)"$/\1/p' "$found")
    first=$(sed -n 's/^ *args: \["\(.*\)"\]$/\1/p' "$found")
    # Helm 4 splits the command on spaces, then expands `$VAR` / `${VAR}` in each part from its own
    # environment (helm v4 internal/plugin/subprocess_commands.go PrepareCommands).
    expand() {
      case "$1" in
        '${'*'}') n=${1#??}; n=${n%?}; eval "printf '%s' \"\${$n}\"" ;;
        '$'*) n=${1#?}; eval "printf '%s' \"\${$n}\"" ;;
        *) printf '%s' "$1" ;;
      esac
    }
    cmd=$(expand "${raw%% *}")
    set -f
    set --
    case "$raw" in *' '*) for part in ${raw#* }; do set -- "$@" "$(expand "$part")"; done ;; esac
    set +f
    set -- "$@" "$first"
  else
    case "$pr" in /*) ;; *) echo "Error: unable to find binary at $pr" >&2; exit 1 ;; esac
    cmd="$pr"
    set --
  fi
  while IFS= read -r line; do set -- "$@" "$line"; done < "$d/pr-args"
  printf '%s\n' "$cmd" "$@" > "$d/pr-argv"
  if ! "$cmd" "$@" < "$d/manifests" > "$d/rendered" 2> "$d/pr-stderr"; then
    if [ "$major" -ge 4 ]; then
      echo "Error: error while running post render on files: failed to invoke post-renderer plugin \"$pr\": plugin \"$pr\" exited with error" >&2
    else
      echo "Error: error while running post render on files: error while running command $cmd. error output:" >&2
      cat "$d/pr-stderr" >&2
      echo ": exit status 1" >&2
    fi
    exit 1
  fi
}
case "$verb" in
  template)
    post_render
    cat "$d/rendered"
    cat "$d/crds"
    ;;
  upgrade)
    rel="$3"; chart="$4"
    post_render
    cp "$d/rendered" "$d/release-$rel.manifest"
    cp "$values" "$d/release-$rel.values"
    printf '%s' "$labels" > "$d/release-$rel.labels"
    printf '[{"name":"%s","namespace":"%s","revision":"1","status":"deployed","chart":"%s-%s","app_version":"1.0.0"}]' \
      "$rel" "$ns" "$chart" "$version" > "$d/release-$rel.json"
    echo "Release \"$rel\" has been upgraded. Happy Helming!"
    ;;
  list)
    rel=$(printf '%s' "$filter" | sed 's/^\^//; s/\$$//')
    if [ -f "$d/release-$rel.json" ] && { [ -z "$selector" ] || [ "$selector" = "$(cat "$d/release-$rel.labels")" ]; }; then
      cat "$d/release-$rel.json"
    else
      echo '[]'
    fi
    ;;
  get) cat "$d/release-$3.values" ;;
  uninstall)
    if [ ! -f "$d/release-$2.json" ]; then echo "Error: uninstall: Release not loaded: $2: release: not found" >&2; exit 1; fi
    rm -f "$d/release-$2".*
    echo "release \"$2\" uninstalled"
    ;;
  *) echo "Error: unknown command \"$verb\" for \"helm\"" >&2; exit 1 ;;
esac
"#;

/// What the chart "renders" (cluster-proxy 0.10.0's ManagedProxyConfiguration with the field its CRD
/// lacks, which the embedded patch removes, and a ConfigMap); Helm 4 annotates each document.
fn manifests(major: u64) -> String {
    let note = |file: &str| {
        if major >= 4 {
            format!(
                "  annotations:\n    postrenderer.helm.sh/postrender-filename: cluster-proxy/templates/{file}\n"
            )
        } else {
            String::new()
        }
    };
    format!(
        "---\n# Source: cluster-proxy/templates/mpc.yaml\napiVersion: proxy.open-cluster-management.io/v1alpha1\nkind: ManagedProxyConfiguration\nmetadata:\n  name: cluster-proxy\n{}spec:\n  proxyAgent:\n    image: quay.io/open-cluster-management/cluster-proxy:v0.10.0\n    additionalValues:\n      enableImpersonation: \"true\"\n---\n# Source: cluster-proxy/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: open-cluster-management-addon\n{}data:\n  mode: \"on\"\n",
        note("mpc.yaml"),
        note("cm.yaml")
    )
}

const CRDS: &str = "---\n# Source: cluster-proxy/crds/mpc.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: managedproxyconfigurations.proxy.open-cluster-management.io\nspec:\n  group: proxy.open-cluster-management.io\n  names: {kind: ManagedProxyConfiguration, plural: managedproxyconfigurations}\n  scope: Cluster\n  versions: []\n";

struct StandIn {
    dir: tempfile::TempDir,
    helm: Helm,
}

impl StandIn {
    /// A stand-in for helm `version` (one of `contracts::HELM_VERSIONS`), with ocm-lab (this build) as
    /// the post-renderer.
    fn new(version: &'static str, chart_patches: Option<PathBuf>) -> StandIn {
        let contract = contracts::helm(version);
        let major: u64 = version.split('.').next().unwrap().parse().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helm");
        std::fs::write(
            &path,
            STAND_IN
                .replace("@DIR@", &dir.path().display().to_string())
                .replace("@GUARD@", &contract.guard()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("major"), major.to_string()).unwrap();
        std::fs::write(dir.path().join("version"), contract.version_stdout()).unwrap();
        std::fs::write(dir.path().join("manifests"), manifests(major)).unwrap();
        std::fs::write(dir.path().join("crds"), CRDS).unwrap();
        // The version comes from the stand-in's own `helm version`, as ocm-lab reads a real helm's.
        let version = tools::probe(ToolName::Helm, &path).unwrap();
        assert_eq!(version.to_string(), contract.version);
        let tool = tools::Tool {
            name: ToolName::Helm,
            path,
            version,
        };
        let post = PostRenderer {
            exe: PathBuf::from(env!("CARGO_BIN_EXE_ocm-lab")),
            chart_patches,
            plugins_dir: dir.path().join("cache/helm-plugins"),
        };
        StandIn {
            helm: Helm::new(tool, post),
            dir,
        }
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// The argument lists of every helm call so far.
    fn calls(&self) -> Vec<Vec<String>> {
        self.file("calls")
            .split("--\n")
            .filter(|c| !c.is_empty())
            .map(|c| c.lines().map(str::to_owned).collect())
            .collect()
    }

    fn target(&self, lab: &str) -> HelmTarget {
        HelmTarget {
            cluster: "hub".into(),
            kubeconfig: self.dir.path().join("hub.kubeconfig"),
            context: "kind-hub".into(),
            lab: lab.into(),
        }
    }
}

fn chart_plan() -> ChartPlan {
    ChartPlan {
        cluster: "hub".into(),
        release: "cluster-proxy".into(),
        namespace: "open-cluster-management-addon".into(),
        repo: "https://open-cluster-management.io/helm-charts".into(),
        chart: Chart::ClusterProxy,
        version: "0.10.0".into(),
        values: json!({}),
        runtime_values: vec![],
        patches: vec![],
    }
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.windows(2)
        .find(|w| w[0] == flag)
        .map(|w| w[1].as_str())
}

async fn patches_through_the_post_renderer(version: &'static str) {
    let s = StandIn::new(version, None);
    let major = s.helm.tool().version.major;
    let values = json!({"userServer": {"enabled": true}});
    let rendered = s.helm.template(&chart_plan(), &values).await.unwrap();

    // The embedded cluster-proxy 0.10 patch ran inside helm's post-render step.
    assert_eq!(rendered.objects.len(), 2, "{:?}", rendered.objects);
    assert_eq!(rendered.crds.len(), 1);
    let mpc = &rendered.objects[0];
    assert!(
        mpc.pointer("/spec/proxyAgent/additionalValues").is_none(),
        "{mpc}"
    );
    assert_eq!(
        mpc["spec"]["proxyAgent"]["image"],
        "quay.io/open-cluster-management/cluster-proxy:v0.10.0"
    );
    // Strings stay strings (no YAML 1.1 `on` → true).
    assert_eq!(rendered.objects[1]["data"]["mode"], "on");

    let call = &s.calls()[1];
    assert_eq!(call[0], "template");
    let argv = s.file("pr-argv");
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(argv[0], env!("CARGO_BIN_EXE_ocm-lab"));
    assert_eq!(
        &argv[1..],
        [
            "__post-render",
            "--chart",
            "cluster-proxy",
            "--chart-version",
            "0.10.0"
        ]
    );
    if major >= 4 {
        assert_eq!(
            flag_value(call, "--post-renderer"),
            Some(helm::PLUGIN_NAME),
            "{call:?}"
        );
        let plugin = s.file(&format!(
            "cache/helm-plugins/{}/plugin.yaml",
            helm::PLUGIN_NAME
        ));
        assert!(plugin.contains("type: postrenderer/v1"), "{plugin}");
        // Helm 4 keeps track of each document's template file through this annotation.
        assert_eq!(
            mpc.pointer("/metadata/annotations/postrenderer.helm.sh~1postrender-filename"),
            Some(&json!("cluster-proxy/templates/mpc.yaml"))
        );
    } else {
        assert_eq!(
            flag_value(call, "--post-renderer"),
            Some(env!("CARGO_BIN_EXE_ocm-lab"))
        );
        assert!(
            !s.dir.path().join("cache/helm-plugins").exists(),
            "no plugin for Helm 3"
        );
    }

    // Installed as a release, labelled as the lab's, into the cluster's context.
    let release = s
        .helm
        .upgrade_install(&s.target("workshop"), &chart_plan(), &values)
        .await
        .unwrap();
    assert_eq!(release.name, "cluster-proxy");
    assert_eq!(release.namespace, "open-cluster-management-addon");
    assert_eq!(release.status.as_str(), "deployed");
    assert_eq!(release.chart, "cluster-proxy-0.10.0");
    assert_eq!(release.values, values);
    let upgrade = s.calls().into_iter().find(|c| c[0] == "upgrade").unwrap();
    assert_eq!(upgrade[1], "--install");
    for (flag, value) in [
        ("--namespace", "open-cluster-management-addon"),
        ("--kube-context", "kind-hub"),
        ("--version", "0.10.0"),
        (
            "--labels",
            "ocm-lab.open-cluster-management.io/lab=workshop",
        ),
    ] {
        assert_eq!(flag_value(&upgrade, flag), Some(value), "{upgrade:?}");
    }
    assert!(upgrade.contains(&"--skip-crds".to_owned()));
    let stored = s.file("release-cluster-proxy.manifest");
    assert!(stored.contains("ManagedProxyConfiguration"));
    assert!(!stored.contains("additionalValues"), "{stored}");

    // Another lab's `down` leaves this release alone; this lab's removes it.
    assert!(
        !s.helm
            .uninstall(
                &s.target("other"),
                "cluster-proxy",
                "open-cluster-management-addon"
            )
            .await
            .unwrap()
    );
    assert!(s.dir.path().join("release-cluster-proxy.json").exists());
    assert!(
        s.helm
            .uninstall(
                &s.target("workshop"),
                "cluster-proxy",
                "open-cluster-management-addon"
            )
            .await
            .unwrap()
    );
    assert!(
        s.helm
            .release(
                &s.target("workshop"),
                "cluster-proxy",
                "open-cluster-management-addon"
            )
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn helm3_runs_ocm_lab_as_its_post_renderer_path() {
    for version in HELM_VERSIONS.iter().copied().filter(|v| v.starts_with('3')) {
        patches_through_the_post_renderer(version).await;
    }
}

#[tokio::test]
async fn helm4_runs_ocm_lab_through_a_post_renderer_plugin() {
    for version in HELM_VERSIONS.iter().copied().filter(|v| v.starts_with('4')) {
        patches_through_the_post_renderer(version).await;
    }
}

/// ocm-lab installed under a folder whose name has a space (a macOS home folder) is still Helm's
/// post-renderer: Helm 3 runs the path as one argument; Helm 4 splits a plugin's command on spaces, so
/// the plugin names the binary through a variable instead of the path.
#[tokio::test]
async fn ocm_lab_under_a_path_with_a_space_still_post_renders() {
    for version in HELM_VERSIONS {
        let mut s = StandIn::new(version, None);
        let folder = s.dir.path().join("Application Support");
        std::fs::create_dir_all(&folder).unwrap();
        let exe = folder.join("ocm-lab");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ocm-lab"), &exe).unwrap();
        s.helm = Helm::new(
            s.helm.tool().clone(),
            PostRenderer {
                exe: exe.clone(),
                chart_patches: None,
                plugins_dir: folder.join("helm-plugins"),
            },
        );
        let rendered = s
            .helm
            .template(&chart_plan(), &json!({}))
            .await
            .unwrap_or_else(|e| panic!("helm {version}: {e}"));
        assert!(
            rendered.objects[0]
                .pointer("/spec/proxyAgent/additionalValues")
                .is_none(),
            "helm {version}: not patched"
        );
        let argv = s.file("pr-argv");
        assert_eq!(
            argv.lines().next(),
            Some(exe.to_str().unwrap()),
            "helm {version}"
        );
    }
}

/// A patch that no longer fits the chart stops helm before it installs anything.
async fn a_failing_post_renderer_stops_helm(version: &'static str) {
    let patches = tempfile::tempdir().unwrap();
    std::fs::write(
        patches.path().join("broken.yaml"),
        "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: ChartPatch\nmetadata:\n  name: gone-field\nspec:\n  chart: cluster-proxy\n  versions: \">=0.10.0, <0.11.0\"\n  reason: test\n  target:\n    apiVersion: proxy.open-cluster-management.io/v1alpha1\n    kind: ManagedProxyConfiguration\n  operations:\n    - {op: remove, path: /spec/proxyAgent/noSuchField}\n",
    )
    .unwrap();
    let s = StandIn::new(version, Some(patches.path().to_path_buf()));
    let major = s.helm.tool().version.major;
    let e = s
        .helm
        .upgrade_install(&s.target("workshop"), &chart_plan(), &json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.transience(), Transience::Permanent);
    assert!(
        e.to_string().contains("error while running post render"),
        "{e:?}"
    );
    assert!(
        e.help().unwrap_or_default().contains("chart patches"),
        "{e:?}"
    );
    assert!(!s.dir.path().join("release-cluster-proxy.json").exists());
    // The post-renderer said which patch and what to do, on stderr (Helm 3 shows it; Helm 4 does not).
    let stderr = s.file("pr-stderr");
    assert!(stderr.contains("gone-field"), "{stderr}");
    assert!(stderr.contains("--chart-patches"), "{stderr}");
    if major < 4 {
        assert!(e.to_string().contains("gone-field"), "{e:?}");
    }
}

#[tokio::test]
async fn helm3_stops_on_a_failing_post_renderer() {
    for version in HELM_VERSIONS.iter().copied().filter(|v| v.starts_with('3')) {
        a_failing_post_renderer_stops_helm(version).await;
    }
}

#[tokio::test]
async fn helm4_stops_on_a_failing_post_renderer() {
    for version in HELM_VERSIONS.iter().copied().filter(|v| v.starts_with('4')) {
        a_failing_post_renderer_stops_helm(version).await;
    }
}

#[test]
fn the_post_renderer_reads_stdin_and_writes_the_patched_stream() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
        .args([
            "__post-render",
            "--chart",
            "cluster-proxy",
            "--chart-version",
            "0.10.0",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests(3).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(docs.len(), 2);
    assert!(
        docs[0]
            .pointer("/spec/proxyAgent/additionalValues")
            .is_none()
    );

    // Not YAML: a non-zero exit and a message on stderr.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
        .args(["__post-render", "--chart", "x", "--chart-version", "1.0.0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a: [\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("not valid YAML"), "{stderr}");
    assert!(out.stdout.is_empty());
}

// ---------------------------------------------------------------------------------------------------
// The same path in the simulated lab (`--simulate`).

mod simulated {
    use std::sync::Arc;

    use ocm_lab::engine::{self, RunOptions};
    use ocm_lab::patch::PatchSet;
    use ocm_lab::step::RunCtx;
    use ocm_lab::step::events::Events;
    use ocm_lab::topology::LAB_LABEL;
    use tokio_util::sync::CancellationToken;

    use crate::engine::{Harness, failure};

    /// Runs `workflow` with `patches` both in the run and in the simulated post-renderer.
    async fn run_with_patches(
        h: &Harness,
        workflow: &str,
        patches: PatchSet,
    ) -> ocm_lab::engine::RunResult {
        let plan = crate::common::plan_workflow(&h.lab, workflow);
        let (events, mut rx) = Events::channel();
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let ctx = Arc::new(RunCtx::new(
            h.lab.clone(),
            h.sim.backends_with_patches(patches.clone()),
            h.state.clone(),
            patches,
            events,
            CancellationToken::new(),
        ));
        let r = engine::run(&plan, ctx.clone(), &RunOptions { concurrency: 8 })
            .await
            .unwrap();
        drop(ctx);
        drain.await.unwrap();
        r
    }

    #[tokio::test(start_paused = true)]
    async fn up_installs_labelled_releases_and_a_second_up_leaves_them_alone() {
        let h = Harness::default_lab();
        let (r, _) = h.run("up").await;
        assert!(r.ok, "{}", failure(&r));
        let hub = h.sim.with_world(|w| w.releases("hub"));
        let names: Vec<&str> = hub.keys().map(String::as_str).collect();
        for want in [
            "open-cluster-management/cluster-manager",
            "open-cluster-management-addon/cluster-proxy",
        ] {
            assert!(names.contains(&want), "{names:?}");
        }
        for rel in hub.values() {
            assert_eq!(rel.status, "deployed", "{rel:?}");
            assert_eq!(rel.revision, 1, "{rel:?}");
            assert_eq!(rel.labels[LAB_LABEL], h.lab.name);
        }
        assert_eq!(
            hub["open-cluster-management-addon/cluster-proxy"].chart,
            "cluster-proxy-0.10.0"
        );
        let spoke = h.sim.with_world(|w| w.releases("cluster1"));
        assert!(
            spoke.contains_key("open-cluster-management/klusterlet"),
            "{spoke:?}"
        );

        let (r, _) = h.run("up").await;
        assert!(r.ok, "{}", failure(&r));
        let again = h.sim.with_world(|w| w.releases("hub"));
        for (k, rel) in &again {
            assert_eq!(rel.revision, 1, "{k} was upgraded again by an unchanged up");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_undeclared_field_stops_the_chart_before_helm_installs_it() {
        let h = Harness::default_lab();
        // Without our patches, cluster-proxy 0.10.0 renders fields its own CRD lacks
        // (open-cluster-management-io/cluster-proxy v0.10.0 `charts/cluster-proxy/`).
        let r = run_with_patches(&h, "up", PatchSet::default()).await;
        assert!(!r.ok);
        let (step, e) = r.failed.clone().unwrap();
        assert_eq!(step, "cluster-proxy", "{}", failure(&r));
        assert!(
            e.message.contains("cluster-proxy 0.10.0 renders ManagedProxyConfiguration cluster-proxy with a field that its CRD managedproxyconfigurations.proxy.open-cluster-management.io (v1alpha1) does not declare: .spec.proxyAgent.additionalValues; nothing was installed"),
            "{}",
            e.message
        );
        assert!(e.help.unwrap().contains("chart patch"));
        let calls = h.sim.calls();
        assert!(
            !calls
                .iter()
                .any(|c| c.verb == "helm.upgrade-install" && c.object.contains("/cluster-proxy")),
            "helm was run for the refused chart"
        );
        assert!(
            !h.sim
                .with_world(|w| w.releases("hub"))
                .contains_key("open-cluster-management-addon/cluster-proxy")
        );
    }

    /// The default lab with its hub and cluster1 run by someone else (`existing:`).
    fn mixed_lab() -> Harness {
        let text = crate::common::default_with(
            "    name: hub\n",
            "    name: hub\n    existing: {kubeconfig: /nonexistent/hub.kubeconfig, context: their-hub}\n",
        )
        .replacen(
            "    - name: cluster1\n",
            "    - name: cluster1\n      existing: {kubeconfig: /nonexistent/c1.kubeconfig, context: their-c1}\n",
            1,
        );
        let lab = match ocm_lab::topology::load_str(&crate::common::host(), "mixed.yaml", &text) {
            Ok(l) => l.lab,
            Err(e) => panic!("{}", ocm_lab::render(&e)),
        };
        let h = Harness::new(lab);
        h.sim.with_world(|w| {
            w.add_foreign_cluster("hub");
            w.add_foreign_cluster("cluster1");
        });
        h
    }

    #[tokio::test(start_paused = true)]
    async fn down_uninstalls_the_labs_releases_from_existing_clusters_and_nothing_else() {
        let h = mixed_lab();
        let (r, _) = h.run("up").await;
        assert!(r.ok, "{}", failure(&r));
        assert!(!h.sim.with_world(|w| w.releases("hub")).is_empty());
        // Someone else's releases, one with a name the lab also uses on other clusters.
        h.sim.with_world(|w| {
            w.add_foreign_release("cluster1", "tools", "cert-manager", None);
            w.add_foreign_release("hub", "elsewhere", "klusterlet", Some("another-lab"));
        });

        let (r, _) = h.run("down").await;
        assert!(r.ok, "{}", failure(&r));
        let hub = h.sim.with_world(|w| w.releases("hub"));
        assert_eq!(
            hub.keys().collect::<Vec<_>>(),
            ["elsewhere/klusterlet"],
            "only the lab's releases are gone"
        );
        let c1 = h.sim.with_world(|w| w.releases("cluster1"));
        assert_eq!(c1.keys().collect::<Vec<_>>(), ["tools/cert-manager"]);
        // The objects of the uninstalled releases are gone too.
        let api = h.sim.api("hub");
        let cma = api
            .get(&ocm_lab::backend::ObjectRef::new(
                "addon.open-cluster-management.io/v1alpha1",
                "ClusterManagementAddOn",
                None,
                "cluster-proxy",
            ))
            .await
            .unwrap();
        assert!(cma.is_none(), "{cma:?}");
    }
}
