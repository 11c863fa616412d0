//! `plan --out DIR` writes each chart's rendered and patched objects (`charts/<cluster>/<release>.yaml`):
//! with an installed helm through ocm-lab's post-renderer (a stand-in `helm` that records its arguments
//! and runs the post-renderer as Helm 3 does, helm/helm v3.19.5 `pkg/postrender/exec.go`,
//! `pkg/action/action.go`), or with the simulated chart models under `--simulate`. Without helm, with an
//! unreachable repository, or with `--no-charts`, `charts.yaml` names each chart that is not included and why,
//! and so does the summary. The stand-in's chart cache is filled beforehand with verified charts (as a first
//! online `plan` or a bundle leaves it), so helm gets the cached `.tgz` and nothing reaches the network.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::ocm_lab_env;

/// A Helm 3 stand-in: `version`, and `template`, which feeds `manifests` to the post-renderer (the
/// `--post-renderer` executable with each `--post-renderer-args` as one argument) and prints its
/// stdout.
const STAND_IN: &str = r#"#!/bin/sh
d='@DIR@'
{ printf '%s\n' "$@"; echo '--'; } >> "$d/calls"
case "$1" in
  version) printf 'v3.17.0'; exit 0 ;;
  template) ;;
  *) echo "Error: unexpected command \"$1\" in plan" >&2; exit 1 ;;
esac
pr=''; prev=''
: > "$d/pr-args"
for a in "$@"; do
  case "$a" in --post-renderer-args=*) printf '%s\n' "${a#--post-renderer-args=}" >> "$d/pr-args" ;; esac
  case "$prev" in --post-renderer) pr="$a" ;; esac
  prev="$a"
done
case "$pr" in /*) ;; *) echo "Error: unable to find binary at $pr" >&2; exit 1 ;; esac
set --
while IFS= read -r line; do set -- "$@" "$line"; done < "$d/pr-args"
exec "$pr" "$@" < "$d/manifests"
"#;

/// What every chart "renders": cluster-proxy 0.10.0's ManagedProxyConfiguration with the field its CRD
/// lacks (the embedded patch removes it from the cluster-proxy chart only), and a ConfigMap.
const MANIFESTS: &str = "---\n# Source: x/templates/mpc.yaml\napiVersion: proxy.open-cluster-management.io/v1alpha1\nkind: ManagedProxyConfiguration\nmetadata:\n  name: cluster-proxy\nspec:\n  proxyAgent:\n    image: quay.io/open-cluster-management/cluster-proxy:v0.10.0\n    additionalValues:\n      enableImpersonation: \"true\"\n---\n# Source: x/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: \"on\"\n";

const CHARTS: [&str; 5] = [
    "hub/cluster-manager",
    "hub/cluster-proxy",
    "hub/managed-serviceaccount",
    "cluster1/klusterlet",
    "cluster2/klusterlet",
];

struct StandIn {
    dir: tempfile::TempDir,
}

impl StandIn {
    fn new() -> StandIn {
        let dir = tempfile::tempdir().unwrap();
        let script = STAND_IN.replace("@DIR@", dir.path().to_str().unwrap());
        let helm = dir.path().join("helm");
        std::fs::write(&helm, script).unwrap();
        std::fs::set_permissions(&helm, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("manifests"), MANIFESTS).unwrap();
        std::fs::create_dir(dir.path().join("cache")).unwrap();
        prefill_chart_cache(&dir.path().join("cache"));
        StandIn { dir }
    }
    fn helm(&self) -> PathBuf {
        self.dir.path().join("helm")
    }
    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }
    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default()
    }
}

/// Puts a verified chart file (and its recorded digest) into the chart cache under `cache` for each chart
/// the default topology installs: what the cache holds after an online `plan`, `up` or `up --bundle`.
fn prefill_chart_cache(cache: &Path) {
    let lab = ocm_lab::topology::load_arg(&crate::common::host(), None)
        .unwrap()
        .lab;
    let repo = ocm_lab::topology::catalog::OCM_HELM_REPO;
    let mut charts = vec![
        ("cluster-manager", lab.versions.ocm.version.to_owned()),
        ("klusterlet", lab.versions.ocm.version.to_owned()),
    ];
    if let Some(cp) = &lab.addons.cluster_proxy {
        charts.push(("cluster-proxy", cp.release.version.to_owned()));
    }
    if let Some(m) = &lab.addons.managed_serviceaccount {
        charts.push(("managed-serviceaccount", m.release.version.to_owned()));
    }
    let cc = ocm_lab::backend::chart_cache::ChartCache::new(cache.join("charts"));
    for (name, version) in charts {
        let data = format!("stand-in chart {name} {version}").into_bytes();
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&data));
        cc.install(repo, name, &version, &digest, &mut data.as_slice())
            .unwrap();
    }
}

fn charts_yaml(out: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(out.join("charts.yaml")).unwrap()).unwrap()
}

fn docs(path: &Path) -> Vec<Value> {
    serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn not_included(charts: &Value) -> Vec<(String, String)> {
    charts["notIncluded"]["charts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        format!(
                            "{}/{}",
                            c["cluster"].as_str().unwrap(),
                            c["release"].as_str().unwrap()
                        ),
                        c["why"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn plan_out_writes_each_charts_objects_as_the_post_renderer_patched_them_with_an_installed_helm() {
    let helm = StandIn::new();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("plan");
    let r = ocm_lab_env(
        &["plan", "--out", dir.to_str().unwrap()],
        &[
            ("OCM_LAB_HELM", &helm.helm()),
            ("OCM_LAB_CACHE_DIR", &helm.cache()),
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("rendered 5 charts into charts/"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("not included"), "{}", r.stdout);

    let charts = charts_yaml(&dir);
    assert!(charts["notIncluded"].is_null(), "{charts:?}");
    for entry in charts["charts"].as_array().unwrap() {
        let path = entry["rendered"]
            .as_str()
            .expect("each chart names its rendered file");
        let file = std::fs::read_to_string(dir.join(path)).unwrap();
        assert!(
            file.starts_with("# "),
            "{path} starts with a header comment"
        );
        assert!(!file.contains("SIMULATED"), "{path}");
    }
    for c in CHARTS {
        let objects = docs(&dir.join(format!("charts/{c}.yaml")));
        assert_eq!(objects.len(), 2, "{c}: {objects:?}");
        assert_eq!(
            objects[1]["data"]["mode"], "on",
            "{c}: strings stay strings"
        );
        // The embedded patch applies to cluster-proxy 0.10.0 only, as the post-renderer decides.
        let patched = objects[0]
            .pointer("/spec/proxyAgent/additionalValues")
            .is_none();
        assert_eq!(patched, c == "hub/cluster-proxy", "{c}: {:?}", objects[0]);
    }
    let header = std::fs::read_to_string(dir.join("charts/cluster1/klusterlet.yaml")).unwrap();
    assert!(
        header.starts_with("# klusterlet 1.3.1 (release `klusterlet`")
            && header.contains("what `up` installs"),
        "{header}"
    );

    let calls = helm.calls();
    assert_eq!(
        calls.lines().filter(|l| *l == "template").count(),
        5,
        "{calls}"
    );
    // Rendered from the verified charts in the cache, not fetched by helm.
    assert!(
        calls.contains(&format!(
            "{}/charts/open-cluster-management.io/klusterlet-1.3.1.tgz",
            helm.cache().display()
        )),
        "{calls}"
    );
    assert!(!calls.contains("--repo"), "{calls}");
    for flag in ["--post-renderer", "--post-renderer-args=__post-render"] {
        assert!(calls.contains(flag), "{flag} missing: {calls}");
    }
    assert!(!calls.contains("upgrade"), "plan installs nothing: {calls}");
    assert!(
        !calls.contains("--kubeconfig"),
        "plan talks to no cluster: {calls}"
    );
}

#[test]
fn plan_out_names_each_chart_it_could_not_render_and_why() {
    let out = tempfile::tempdir().unwrap();
    let cache = out.path().join("cache");
    std::fs::create_dir(&cache).unwrap();

    // No helm installed: plan downloads none.
    let dir = out.path().join("nohelm");
    let missing = out.path().join("no-such-helm");
    let r = ocm_lab_env(
        &["plan", "--out", dir.to_str().unwrap()],
        &[("OCM_LAB_HELM", &missing), ("OCM_LAB_CACHE_DIR", &cache)],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("not included: the objects of 5 charts"),
        "{}",
        r.stdout
    );
    // Every chart named, the one reason said once.
    assert!(
        r.stdout.contains("cluster-proxy on hub") && r.stdout.matches("no helm").count() == 1,
        "{}",
        r.stdout
    );
    let listed = not_included(&charts_yaml(&dir));
    assert_eq!(listed.len(), 5, "{listed:?}");
    for (chart, why) in &listed {
        assert!(
            why.contains("no helm") && why.contains("OCM_LAB_HELM"),
            "{chart}: {why}"
        );
    }
    assert!(!dir.join("charts").exists());
    assert!(
        !std::fs::read_dir(&cache)
            .unwrap()
            .any(|e| e.unwrap().file_name() == "tools"),
        "nothing downloaded"
    );

    // A repository that cannot be reached (a mirror on a port nothing listens on), and nothing cached.
    let helm = StandIn::new();
    std::fs::remove_dir_all(helm.cache().join("charts")).unwrap();
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mirror = PathBuf::from(format!("http://127.0.0.1:{port}/charts"));
    let dir = out.path().join("offline");
    let r = ocm_lab_env(
        &["plan", "--out", dir.to_str().unwrap()],
        &[
            ("OCM_LAB_HELM", &helm.helm()),
            ("OCM_LAB_CACHE_DIR", &helm.cache()),
            ("OCM_LAB_CHARTS_BASE_URL", &mirror),
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let listed = not_included(&charts_yaml(&dir));
    let names: Vec<&str> = listed.iter().map(|(c, _)| c.as_str()).collect();
    for c in CHARTS {
        assert!(names.contains(&c), "{c} not listed: {listed:?}");
    }
    for (chart, why) in &listed {
        assert!(why.contains("unreachable"), "{chart}: {why}");
    }
    assert!(
        r.stdout.contains("not included: the objects of 5 charts"),
        "{}",
        r.stdout
    );
}

#[test]
fn no_charts_runs_no_helm_and_replaces_the_rendered_charts_of_an_earlier_plan() {
    let helm = StandIn::new();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("plan");
    let env = [
        ("OCM_LAB_HELM", helm.helm()),
        ("OCM_LAB_CACHE_DIR", helm.cache()),
    ];
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();
    assert_eq!(
        ocm_lab_env(&["plan", "--out", dir.to_str().unwrap()], &env).code,
        0
    );
    assert!(dir.join("charts/hub/cluster-manager.yaml").exists());
    let before = helm.calls();

    let r = ocm_lab_env(
        &["plan", "--out", dir.to_str().unwrap(), "--no-charts"],
        &env,
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(helm.calls(), before, "--no-charts runs no helm");
    assert!(
        !dir.join("charts").exists(),
        "the earlier plan's rendered charts are gone"
    );
    let listed = not_included(&charts_yaml(&dir));
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert!(
        listed.iter().all(|(_, why)| why.contains("--no-charts")),
        "{listed:?}"
    );
    assert!(r.stdout.contains("not included"), "{}", r.stdout);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn simulate_renders_the_simulated_chart_models_patched_and_labels_them_simulated() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("plan");
    // No helm at all: the simulated models need none.
    let missing = out.path().join("no-such-helm");
    let r = ocm_lab_env(
        &[
            "plan",
            "--out",
            dir.to_str().unwrap(),
            "--simulate",
            "--output",
            "json",
        ],
        &[
            ("OCM_LAB_HELM", &missing),
            ("OCM_LAB_CACHE_DIR", out.path()),
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let result: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(result["charts"]["rendered"], 5, "{result}");
    assert_eq!(result["charts"]["simulated"], true, "{result}");
    assert!(charts_yaml(&dir)["notIncluded"].is_null());
    for c in CHARTS {
        let path = dir.join(format!("charts/{c}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# SIMULATED:"),
            "{c}: {}",
            &text[..80.min(text.len())]
        );
        assert!(!docs(&path).is_empty(), "{c}");
    }
    let proxy = docs(&dir.join("charts/hub/cluster-proxy.yaml"));
    let mpc = proxy
        .iter()
        .find(|o| o["kind"] == "ManagedProxyConfiguration")
        .expect("the simulated cluster-proxy renders a ManagedProxyConfiguration");
    assert!(mpc.pointer("/spec/proxyAgent/image").is_some(), "{mpc}");
    assert!(
        mpc.pointer("/spec/proxyAgent/additionalValues").is_none(),
        "the embedded patch applies: {mpc}"
    );

    let r = ocm_lab_env(
        &["plan", "--out", dir.to_str().unwrap(), "--simulate"],
        &[
            ("OCM_LAB_HELM", &missing),
            ("OCM_LAB_CACHE_DIR", out.path()),
        ],
    );
    assert!(
        r.stdout.contains("rendered 5 charts (SIMULATED"),
        "{}",
        r.stdout
    );
}
