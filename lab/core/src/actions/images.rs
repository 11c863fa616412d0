//! `node.images`: the images a kind cluster will run, put into its nodes before any chart is installed
//! on it.
//!
//! With a bundle (`up --bundle`, `spec.bundle`), each image the cluster runs and a node lacks is imported
//! from the bundle into the node's containerd (`k8s.io` namespace, as `kind load image-archive` does,
//! kubernetes-sigs/kind v0.32.0 `pkg/cluster/nodeutils/util.go`), streamed from the bundle's entry in place;
//! then the step checks with `ctr images ls` that every reference the charts ask for is there (an archive that
//! names another reference, or a `docker load`ed image that lost its digest (Docker's behaviour, not confirmed
//! in moby's source), would otherwise make the kubelet pull) and fails naming the image and the node.
//!
//! Without a bundle, the step pre-pulls the same images in each node with `crictl pull` (in parallel;
//! the kubelet pulls one image at a time by default), best effort: a failed pull is a warning, the Pod
//! pulls it itself later. This takes the spokes' pulls (klusterlet agents, addon agents) off the hub's
//! critical path: they run while the hub rolls out.
//!
//! Why a loaded or pre-pulled image is used: every container the pinned charts run ends up with
//! `imagePullPolicy: IfNotPresent`, explicitly or by the Kubernetes default for a tagged, non-`latest`
//! image (each chart's templates as published in open-cluster-management-io/helm-charts), so the kubelet takes
//! the node's copy:
//! - cluster-manager / klusterlet 1.3.1 operator (`registration-operator`): `IfNotPresent` from
//!   `images.imagePullPolicy` (open-cluster-management-io/ocm v1.3.1 `deploy/*/chart/*/templates/`);
//! - the hub's registration, placement, addon-manager and work-webhook Deployments and the klusterlet's
//!   registration and work agents: no policy set, so the default for a `v1.3.1` tag, `IfNotPresent`
//!   (work-controller sets `IfNotPresent` itself; open-cluster-management-io/ocm v1.3.1
//!   `manifests/cluster-manager/management/`, `manifests/klusterlet/management/`);
//! - cluster-proxy 0.10.0 / 0.11.0 manager, user server, proxy server and spoke proxy agent:
//!   `IfNotPresent`, hard-coded or `proxyServer.imagePullPolicy` (open-cluster-management-io/cluster-proxy
//!   v0.10.0 `charts/cluster-proxy/templates/`, `pkg/proxyagent/agent/manifests/`);
//! - managed-serviceaccount 0.10.0 manager and spoke agent: `IfNotPresent`, hard-coded
//!   (open-cluster-management-io/managed-serviceaccount v0.10.0 `charts/managed-serviceaccount/templates/`,
//!   `pkg/addon/manager/manifests/templates/`).
//!
//! No image of the pinned charts is `Always` (the klusterlet's `amazon/aws-cli:latest`, which would be,
//! runs only with the `awsirsa` driver, which the lab never uses, open-cluster-management-io/ocm v1.3.1
//! `manifests/klusterlet/management/klusterlet-registration-deployment.yaml`). An `Always` image would be
//! pulled at every Pod start whatever the node holds: with a bundle and no network its Pod would fail
//! `ErrImagePull`; `ocm-lab images list` is where a new chart version's policy would have to be checked.

use serde_json::json;

use super::{ActionResult, StepCtx, outputs};
use crate::backend::{DockerError, NodeImage, node_has};
use crate::step::ActionError;

/// `node.images`: loads (bundle) or pre-pulls (no bundle) the images `cluster` runs into its nodes.
pub async fn node_images(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: super::OnCluster = ctx.inputs()?;
    let cluster = inputs.cluster.as_str();
    let supply = &ctx.run.node_images;
    let want = supply.per_cluster.get(cluster).cloned().unwrap_or_default();
    if want.is_empty() {
        return Ok((false, outputs([("images", json!(0))])));
    }
    let docker = &ctx.run.backends.docker;
    let nodes: Vec<String> = docker
        .node_containers(cluster)
        .await?
        .into_iter()
        .filter(|n| n.running)
        .map(|n| n.name)
        .collect();
    if nodes.is_empty() {
        return Err(ActionError::permanent(format!(
            "kind cluster {cluster} has no running node container to put its images into"
        ))
        .with_help(format!(
            "`docker ps -a --filter label=io.x-k8s.kind.cluster={cluster}` shows its nodes; `ocm-lab down` then `ocm-lab up` creates it again"
        )));
    }
    let mut done = 0usize;
    let mut warnings = Vec::new();
    for node in &nodes {
        let have = docker.node_images(node).await?;
        let missing: Vec<&String> = want.iter().filter(|i| !node_has(&have, i)).collect();
        if missing.is_empty() {
            continue;
        }
        match &supply.bundle {
            Some(archives) => {
                done += load_from_bundle(ctx, archives, cluster, node, &missing).await?
            }
            None => done += pre_pull(ctx, node, &missing, &mut warnings).await,
        }
    }
    for w in &warnings {
        tracing::warn!("{w}");
        ctx.note(format!("warning: {w}"));
    }
    let how = if supply.bundle.is_some() {
        "loaded from the bundle"
    } else {
        "pre-pulled"
    };
    if done > 0 {
        ctx.note(format!(
            "{} {how} into {}",
            crate::text::count(done, "image", "images"),
            nodes.join(", ")
        ));
    }
    Ok((
        done > 0,
        outputs([
            ("images", json!(want.len())),
            ("nodes", json!(nodes)),
            (
                "mode",
                json!(if supply.bundle.is_some() {
                    "bundle"
                } else {
                    "pre-pull"
                }),
            ),
        ]),
    ))
}

/// Loads the `missing` images into `node` from the bundle's archives and checks the node then holds them; the
/// number loaded.
async fn load_from_bundle(
    ctx: &StepCtx<'_>,
    archives: &std::collections::BTreeMap<String, crate::backend::ImageArchive>,
    cluster: &str,
    node: &String,
    missing: &[&String],
) -> Result<usize, ActionError> {
    let docker = &ctx.run.backends.docker;
    let mut done = 0usize;
    for image in missing {
        let archive = archives.get(*image).ok_or_else(|| {
            ActionError::permanent(format!(
                "the bundle holds no archive of {image}, which cluster {cluster} runs"
            ))
            .with_help(
                "make the bundle again for this topology (`ocm-lab bundle save -t <topology>`)",
            )
        })?;
        ctx.progress(format!("loading {image} into node {node}"));
        docker.import_node_image(node, archive).await?;
        done += 1;
    }
    let have = docker.node_images(node).await?;
    if let Some(lost) = missing.iter().find(|i| !node_has(&have, i)) {
        return Err(DockerError::NodeImageMissing {
            node: node.clone(),
            image: (*lost).clone(),
            found: same_repository(&have, lost),
        }
        .into());
    }
    Ok(done)
}

/// Pre-pulls the `missing` images in `node`, within the step's deadline; the number pulled. What could not be
/// pulled is a warning: the node's Pods pull it themselves.
async fn pre_pull(
    ctx: &StepCtx<'_>,
    node: &String,
    missing: &[&String],
    warnings: &mut Vec<String>,
) -> usize {
    let docker = &ctx.run.backends.docker;
    let mut done = 0usize;
    ctx.progress(format!(
        "pre-pulling {} in node {node}",
        crate::text::count(missing.len(), "image", "images")
    ));
    // Bounded by the step's deadline: what is still pulling then goes on in the node (the
    // exec is not stopped), and the Pods wait for it as they would have anyway.
    let mut pulls: Vec<futures::future::BoxFuture<'_, (String, Result<(), DockerError>)>> =
        Vec::new();
    for image in missing {
        let image: String = (*image).clone();
        let node: String = node.clone();
        pulls.push(Box::pin(async move {
            let r = docker.pull_in_node(&node, &image).await;
            (image, r)
        }));
    }
    let pulls = futures::future::join_all(pulls);
    let budget = ctx
        .timeout()
        .saturating_sub(std::time::Duration::from_secs(1));
    match tokio::time::timeout(budget, pulls).await {
        Ok(results) => {
            for (image, r) in results {
                match r {
                    Ok(()) => done += 1,
                    Err(e) => warnings.push(format!(
                        "could not pre-pull {image} in node {node} ({e}); its Pods will pull it"
                    )),
                }
            }
        }
        Err(_) => warnings.push(format!(
            "pre-pulling in node {node} was still running at the step's deadline; its Pods will wait for the pulls"
        )),
    }
    done
}

/// What a node holds of `image`'s repository, for the error when the wanted reference is missing.
fn same_repository(have: &[NodeImage], image: &str) -> String {
    let full = crate::backend::full_reference(image);
    let repo = full
        .split('@')
        .next()
        .map(|n| {
            let slash = n.rfind('/').map_or(0, |i| i + 1);
            n[slash..].rfind(':').map_or(n, |i| &n[..slash + i])
        })
        .unwrap_or_default()
        .to_owned();
    let found: Vec<String> = have
        .iter()
        .filter(|i| i.reference.starts_with(&repo))
        .map(|i| format!("{} -> {}", i.reference, i.digest))
        .collect();
    if found.is_empty() {
        format!("nothing of {repo}")
    } else {
        found.join(", ")
    }
}
