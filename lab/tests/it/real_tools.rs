//! Smoke tests against the REAL helm and kind, through the same adapters the lab uses: ignored by default
//! (nothing here has them), run by the e2e workflow (`.github/workflows/e2e.yml`, job `real-tools`) with
//! the helm and kind it downloads, for Helm 3 and Helm 4. They are where a contract table
//! (`ocm_lab_testkit::contracts`) that drifted from the real tool fails first.
//!
//! The binaries come from `OCM_LAB_HELM` and `OCM_LAB_KIND`, else `helm` and `kind` on `PATH`.
//! Rendering reaches the chart repository; the kind test needs Docker and creates (then deletes) a
//! one-node cluster named `ocm-lab-smoke-<pid>`.

use std::path::PathBuf;

use ocm_lab::backend::helm::{Helm, PostRenderer};
use ocm_lab::backend::kind::Kind;
use ocm_lab::backend::tools::{self, Tool, ToolName};
use ocm_lab::backend::{ChartRenderer as _, ClusterProvisioner as _, CreateCluster, HelmTarget};
use ocm_lab::charts::ChartPlan;
use ocm_lab::topology::catalog::{self, Chart};
use serde_json::json;

/// The real tool: its override variable, else the first on `PATH`; probed as the lab probes it.
fn real(name: ToolName, variable: &str, binary: &str) -> Tool {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join(binary))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("no {binary}: set {variable} or put it on PATH"));
    let version = tools::probe(name, &path).unwrap();
    Tool {
        name,
        path,
        version,
    }
}

fn cluster_proxy() -> ChartPlan {
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

fn helm(plugins: &std::path::Path) -> Helm {
    Helm::new(
        real(ToolName::Helm, "OCM_LAB_HELM", "helm"),
        PostRenderer {
            exe: PathBuf::from(env!("CARGO_BIN_EXE_ocm-lab")),
            chart_patches: None,
            plugins_dir: plugins.to_path_buf(),
        },
    )
}

/// The pinned cluster-proxy chart rendered by the real helm with ocm-lab as its post-renderer (Helm 3:
/// by path; Helm 4: through the plugin): the embedded patch removed the field the chart's CRD lacks.
#[tokio::test]
#[ignore = "needs helm and the chart repository: run by the e2e workflow"]
async fn real_helm_renders_a_pinned_chart_through_the_post_renderer() {
    let dir = tempfile::tempdir().unwrap();
    let helm = helm(&dir.path().join("Application Support/helm-plugins"));
    let rendered = helm
        .template(&cluster_proxy(), &json!({"userServer": {"enabled": true}}))
        .await
        .unwrap();
    let mpc = rendered
        .objects
        .iter()
        .find(|o| o["kind"] == "ManagedProxyConfiguration")
        .expect("the chart renders a ManagedProxyConfiguration");
    assert!(
        mpc.pointer("/spec/proxyAgent/additionalValues").is_none(),
        "the patch did not run: {mpc}"
    );
    assert!(!rendered.crds.is_empty(), "--include-crds");
}

/// A one-node cluster created, listed, exported and deleted by the real kind; on it, the real helm's
/// `list` (with and without the lab's selector) and `uninstall` of a release that is not there.
#[tokio::test]
#[ignore = "needs kind, helm and Docker: run by the e2e workflow"]
async fn real_kind_creates_and_deletes_a_cluster_and_real_helm_lists_on_it() {
    let kind = Kind::new(real(ToolName::Kind, "OCM_LAB_KIND", "kind"));
    let dir = tempfile::tempdir().unwrap();
    let name = format!("ocm-lab-smoke-{}", std::process::id());
    let kubeconfig = dir.path().join("kubeconfigs").join(format!("{name}.yaml"));
    let req = CreateCluster {
        name: name.clone(),
        image: catalog::DEFAULT_KIND_NODE_IMAGE.to_owned(),
        kubeconfig: kubeconfig.clone(),
        registries: Default::default(),
    };
    kind.create(&req).await.unwrap();
    let outcome = async {
        assert!(kind.list().await.unwrap().contains(&name));
        let exported = dir.path().join("exported.yaml");
        kind.export_kubeconfig(&name, &exported).await.unwrap();
        let helm = helm(&dir.path().join("helm-plugins"));
        let target = HelmTarget {
            cluster: name.clone(),
            kubeconfig: exported,
            context: format!("kind-{name}"),
            lab: "smoke".into(),
        };
        assert!(
            helm.release(&target, "cluster-proxy", "default")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            !helm
                .uninstall(&target, "cluster-proxy", "default")
                .await
                .unwrap()
        );
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    kind.delete(&name).await.unwrap();
    assert!(!kind.list().await.unwrap().contains(&name));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
