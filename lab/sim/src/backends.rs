//! The backend traits implemented over the simulated world.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::apiserver::{self, gk};
use super::charts;
use super::engine::{Shared, State};
use super::faults::Behaviour;
use super::world::{KIND_NETWORK, World};
use crate::fail::{Called, FromInjected};
use ocm_lab_core::backend::{
    ChartRenderer, ClusterApi, ClusterProvisioner, Condition, Connector, ContainerRuntime,
    CreateCluster, DockerError, HelmError, HelmTarget, ImageArchive, KindError, KubeError,
    LookAlike, NetworkRemoval, NodeContainer, NodeImage, ObjectRef, Release, Rendered, Secret,
    WaitError,
};
use ocm_lab_core::charts::ChartPlan;
use ocm_lab_core::topology::Cluster;

/// What every backend call goes through: its fault (delay, transient or permanent failure), the
/// mutation count, the work itself (with a reconcile when it may have changed the world), and the log.
/// The world's lock is taken once before any delay and once for the work and its log entry.
async fn call<T, E: FromInjected + std::fmt::Display>(
    shared: &Arc<Shared>,
    b: Behaviour,
    cluster: &str,
    verb: &str,
    object: String,
    mutating: bool,
    f: impl FnOnce(&mut State) -> Result<T, E>,
) -> Result<T, E> {
    let fault = {
        let mut st = shared.lock();
        if mutating {
            st.mutations += 1;
        }
        let fault = st.call_fault(b).map_err(|fault| {
            let called = Called {
                verb,
                cluster,
                object: &object,
            };
            E::from_injected(fault, &called)
        });
        if let Err(e) = &fault {
            shared.log_locked(&mut st, cluster, verb, object.clone(), Err(e.to_string()));
        }
        fault
    };
    if let Some(d) = fault? {
        tokio::time::sleep(d).await;
    }
    let logged = |st: &mut State, result: Result<T, E>| {
        let outcome = result.as_ref().map(|_| ()).map_err(ToString::to_string);
        shared.log_locked(st, cluster, verb, object, outcome);
        result
    };
    if mutating {
        let result = shared.mutate(|st| {
            let result = f(st);
            logged(st, result)
        });
        super::follow_agents(shared, cluster);
        result
    } else {
        let mut st = shared.lock();
        let result = f(&mut st);
        logged(&mut st, result)
    }
}

/// A running simulated node container, or the error Docker gives for an exec into one that is not.
fn running_node<'a>(st: &'a State, node: &str) -> Result<&'a super::world::Container, DockerError> {
    match st.world.containers.get(node) {
        Some(c) if c.running => Ok(c),
        // Docker answers an exec into a stopped container with 409, and one into no container with 404
        // (moby daemon/exec.go `getExecConfig`).
        Some(_) => Err(DockerError::Daemon {
            what: format!("exec in container {node}"),
            status: 409,
            message: format!("container {node} is not running"),
        }),
        None => Err(DockerError::Daemon {
            what: format!("exec in container {node}"),
            status: 404,
            message: format!("No such container: {node}"),
        }),
    }
}

/// A stable stand-in digest for a simulated image reference (the simulated lab holds no image content).
fn simulated_digest(reference: &str) -> String {
    use sha2::Digest as _;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(reference.as_bytes()))
    )
}

/// Writes a file holding a secret (a kubeconfig): mode 0600, parent directories created.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(text.as_bytes())
}

// ---- Docker -------------------------------------------------------------------------------------

pub(crate) struct SimDocker(pub Arc<Shared>);

#[async_trait]
impl ContainerRuntime for SimDocker {
    async fn ping(&self) -> Result<String, DockerError> {
        call(
            &self.0,
            Behaviour::DockerPing,
            "",
            "docker.ping",
            String::new(),
            false,
            |_| Ok("sim-28.2.2 (simulated)".to_owned()),
        )
        .await
    }

    async fn ensure_network(&self, name: &str) -> Result<bool, DockerError> {
        call(
            &self.0,
            Behaviour::DockerNetwork,
            "",
            "docker.ensure-network",
            format!("network {name}"),
            false,
            |st| {
                let created = st.world.ensure_network(name);
                if created {
                    st.mutations += 1;
                }
                Ok(created)
            },
        )
        .await
    }

    async fn network_id(&self, name: &str) -> Result<Option<String>, DockerError> {
        call(
            &self.0,
            Behaviour::DockerPing,
            "",
            "docker.network-id",
            format!("network {name}"),
            false,
            |st| Ok(st.world.networks.get(name).map(|net| net.id.clone())),
        )
        .await
    }

    async fn remove_network_if_unused(&self, id: &str) -> Result<NetworkRemoval, DockerError> {
        let id = id.to_owned();
        call(
            &self.0,
            Behaviour::DockerNetwork,
            "",
            "docker.remove-network",
            format!("network {id}"),
            true,
            move |st| {
                let Some(name) = st
                    .world
                    .networks
                    .values()
                    .find(|n| n.id == id)
                    .map(|n| n.name.clone())
                else {
                    return Ok(NetworkRemoval::Gone);
                };
                let users: Vec<String> = st
                    .world
                    .containers
                    .values()
                    .filter(|c| c.networks.contains_key(&name))
                    .map(|c| c.name.clone())
                    .collect();
                if !users.is_empty() {
                    return Ok(NetworkRemoval::InUse(users));
                }
                st.world.networks.remove(&name);
                Ok(NetworkRemoval::Removed)
            },
        )
        .await
    }

    async fn node_containers(&self, cluster: &str) -> Result<Vec<NodeContainer>, DockerError> {
        let c = cluster.to_owned();
        call(
            &self.0,
            Behaviour::DockerPing,
            cluster,
            "docker.node-containers",
            format!("containers of {cluster}"),
            false,
            move |st| {
                Ok(st
                    .world
                    .containers_of(&c)
                    .into_iter()
                    .map(|ct| NodeContainer {
                        id: ct.id.clone(),
                        name: ct.name.clone(),
                        role: ct
                            .labels
                            .get("io.x-k8s.kind.role")
                            .cloned()
                            .unwrap_or_default()
                            .into(),
                        running: ct.running,
                        ip: ct.networks.get(KIND_NETWORK).cloned(),
                    })
                    .collect())
            },
        )
        .await
    }

    async fn remove_cluster_containers(&self, cluster: &str) -> Result<usize, DockerError> {
        call(
            &self.0,
            Behaviour::KindDelete,
            cluster,
            "docker.remove-containers",
            format!("containers of {cluster}"),
            true,
            |st| Ok(st.remove_cluster(cluster)),
        )
        .await
    }

    async fn look_alikes(&self, cluster: &str) -> Result<Vec<LookAlike>, DockerError> {
        let c = cluster.to_owned();
        call(
            &self.0,
            Behaviour::DockerPing,
            cluster,
            "docker.look-alikes",
            format!("containers like nodes of {cluster}"),
            false,
            move |st| {
                Ok(st
                    .world
                    .look_alikes(&c)
                    .into_iter()
                    .map(|ct| LookAlike {
                        id: ct.id.clone(),
                        name: ct.name.clone(),
                        kind_cluster: ct.labels.get("io.x-k8s.kind.cluster").cloned(),
                        // A simulated cluster's control plane publishes its API on the cluster's port.
                        api_port: (ct.name == format!("{c}-control-plane"))
                            .then(|| st.world.clusters.get(&c).map(|k| k.host_port))
                            .flatten(),
                        image: st.world.clusters.get(&c).map(|k| k.image.clone()),
                    })
                    .collect())
            },
        )
        .await
    }

    async fn remove_containers(&self, ids: &[String]) -> Result<usize, DockerError> {
        let ids = ids.to_vec();
        call(
            &self.0,
            Behaviour::KindDelete,
            "",
            "docker.remove-containers",
            format!("containers {}", ids.join(", ")),
            true,
            move |st| {
                let gone: Vec<(String, Option<String>)> = st
                    .world
                    .containers
                    .values()
                    .filter(|ct| ids.contains(&ct.id))
                    .map(|ct| {
                        (
                            ct.name.clone(),
                            ct.labels.get("io.x-k8s.kind.cluster").cloned(),
                        )
                    })
                    .collect();
                for (name, _) in &gone {
                    st.world.containers.remove(name);
                }
                // A cluster whose last node went goes with it (as `remove_cluster` does).
                for cluster in gone.iter().filter_map(|(_, c)| c.as_deref()) {
                    if st.world.containers_of(cluster).is_empty() {
                        st.remove_cluster(cluster);
                    }
                }
                Ok(gone.len())
            },
        )
        .await
    }

    async fn ensure_registry(
        &self,
        spec: &ocm_lab_core::backend::RegistryContainer,
    ) -> Result<(String, bool), DockerError> {
        let spec = spec.clone();
        call(
            &self.0,
            Behaviour::DockerNetwork,
            "",
            "docker.ensure-registry",
            format!("simulated registry container {}", spec.name),
            true,
            move |st| {
                if let Some(c) = st.world.containers.get(&spec.name) {
                    if let Some((k, v)) = spec
                        .labels
                        .iter()
                        .find(|(k, v)| c.labels.get(*k) != Some(v))
                    {
                        return Err(DockerError::ForeignRegistry {
                            name: spec.name.clone(),
                            host: "the simulated lab".to_owned(),
                            label: format!("{k}={v}"),
                        });
                    }
                    return Ok((c.id.clone(), false));
                }
                st.world.add_container(&spec.name, None, true);
                let ip = st.world.next_ip();
                let c = st.world.containers.get_mut(&spec.name).expect("just added");
                c.labels = spec.labels.clone();
                c.networks.insert(spec.network.clone(), ip);
                Ok((c.id.clone(), true))
            },
        )
        .await
    }

    async fn node_images(&self, node: &str) -> Result<Vec<NodeImage>, DockerError> {
        call(
            &self.0,
            Behaviour::DockerPing,
            "",
            "docker.node-images",
            format!("images in node {node}"),
            false,
            |st| {
                let c = running_node(st, node)?;
                Ok(c.images
                    .iter()
                    .map(|r| NodeImage {
                        reference: r.clone(),
                        digest: simulated_digest(r),
                    })
                    .collect())
            },
        )
        .await
    }

    /// The simulated import takes the archive for the image the bundle's manifest names (`bundle save`
    /// wrote it from `docker save` of that reference); it does not read the archive. Whether real
    /// containerd keeps the reference is what the real step checks with `ctr images ls`.
    async fn import_node_image(
        &self,
        node: &str,
        archive: &ImageArchive,
    ) -> Result<(), DockerError> {
        call(
            &self.0,
            Behaviour::NodeImageImport,
            "",
            "docker.import-node-image",
            format!(
                "{} from {} into node {node}",
                archive.image,
                archive.file.display()
            ),
            true,
            |st| {
                running_node(st, node)?;
                let c = st.world.containers.get_mut(node).expect("just found");
                c.images
                    .insert(ocm_lab_core::backend::full_reference(&archive.image));
                Ok(())
            },
        )
        .await
    }

    async fn pull_in_node(&self, node: &str, image: &str) -> Result<(), DockerError> {
        let (n, i) = (node.to_owned(), image.to_owned());
        call(
            &self.0,
            Behaviour::ImagePull,
            "",
            "docker.pull-in-node",
            format!("crictl pull {image} in node {node}"),
            true,
            move |st| {
                running_node(st, &n)?;
                st.world.pull_image(&n, &i, "crictl");
                Ok(())
            },
        )
        .await
    }
}

/// How a list shows in the call log: `<kind> <apiVersion> in <namespace or all namespaces> <selector>`.
fn list_description(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> String {
    format!(
        "{kind} {api_version} in {} {}",
        namespace.unwrap_or("all namespaces"),
        labels.unwrap_or("")
    )
    .trim_end()
    .to_owned()
}

// ---- kind ---------------------------------------------------------------------------------------

pub(crate) struct SimKind(pub Arc<Shared>);

#[async_trait]
impl ClusterProvisioner for SimKind {
    async fn list(&self) -> Result<Vec<String>, KindError> {
        call(
            &self.0,
            Behaviour::DockerPing,
            "",
            "kind.list",
            String::new(),
            false,
            |st| Ok(st.world.kind_clusters()),
        )
        .await
    }

    async fn create(&self, req: &CreateCluster) -> Result<(), KindError> {
        let r = req.clone();
        let kubeconfig = call(
            &self.0,
            Behaviour::KindCreate,
            &req.name,
            "kind.create",
            format!("cluster {} ({})", req.name, req.image),
            true,
            move |st| {
                if !st.world.containers_of(&r.name).is_empty() {
                    return Err(crate::fail::kind_create_failed(
                        &r.name,
                        format!(
                            "ERROR: failed to create cluster: node(s) already exist for a cluster with the name \"{}\"",
                            r.name
                        ),
                    ));
                }
                // Docker refuses a second container of a name (kind's `docker run` fails), labelled or not.
                let cp = format!("{}-control-plane", r.name);
                if st.world.containers.contains_key(&cp) {
                    return Err(crate::fail::kind_create_failed(
                        &r.name,
                        format!(
                            "ERROR: failed to create cluster: command \"docker run --name {cp} …\" failed with error: exit status 125: docker: Error response from daemon: Conflict. The container name \"/{cp}\" is already in use"
                        ),
                    ));
                }
                st.world.create_cluster(&r.name, &r.image, false);
                Ok(st.world.kubeconfig(&r.name).expect("just created"))
            },
        )
        .await?;
        write_private(&req.kubeconfig, &kubeconfig).map_err(|e| KindError::WriteKubeconfig {
            cluster: req.name.clone(),
            path: req.kubeconfig.display().to_string(),
            detail: e.to_string(),
        })
    }

    async fn delete(&self, name: &str) -> Result<(), KindError> {
        call(
            &self.0,
            Behaviour::KindDelete,
            name,
            "kind.delete",
            format!("cluster {name}"),
            true,
            |st| {
                st.remove_cluster(name);
                Ok(())
            },
        )
        .await
    }

    async fn export_kubeconfig(&self, name: &str, path: &Path) -> Result<(), KindError> {
        let n = name.to_owned();
        let text = call(
            &self.0,
            Behaviour::DockerPing,
            name,
            "kind.export-kubeconfig",
            format!("cluster {name}"),
            false,
            move |st| {
                if st.world.containers_of(&n).is_empty() {
                    return Err(crate::fail::kind_command_failed(
                        format!("export the kubeconfig of kind cluster `{n}`"),
                        format!("kind export kubeconfig --name {n}"),
                        format!(
                            "ERROR: could not locate any control plane nodes for cluster named '{n}'. Use the --name option to select a different cluster"
                        ),
                    ));
                }
                st.world.kubeconfig(&n).ok_or_else(|| {
                    crate::fail::kind_command_failed(
                        format!("export the kubeconfig of kind cluster `{n}`"),
                        format!("kind export kubeconfig --name {n}"),
                        format!("ERROR: failed to get cluster internal kubeconfig: cluster {n} has node containers but no API server"),
                    )
                })
            },
        )
        .await?;
        write_private(path, &text).map_err(|e| KindError::WriteKubeconfig {
            cluster: name.to_owned(),
            path: path.display().to_string(),
            detail: e.to_string(),
        })
    }
}

// ---- helm ---------------------------------------------------------------------------------------

/// Simulated Helm: renders with the simulated charts, post-renders with our chart patches as
/// `ocm-lab __post-render` does for real Helm, and keeps releases in the world (install, upgrade,
/// list, uninstall; helm/helm v3.19.5 `pkg/storage/driver/secrets.go`, `pkg/action/uninstall.go`). Objects go
/// in by server-side apply with field manager `helm` (Helm 4's default, helm/helm v4.2.4 `pkg/cmd/install.go`);
/// CRDs are left to the caller, as `--skip-crds` does.
pub(crate) struct SimHelm(pub Arc<Shared>, pub Arc<ocm_lab_core::patch::PatchSet>);

/// The simulated chart, post-rendered with `patches` (the simulated `helm template`).
pub(crate) fn sim_render(
    patches: &ocm_lab_core::patch::PatchSet,
    chart: &ChartPlan,
    values: &Value,
) -> Result<Rendered, HelmError> {
    let mut rendered = charts::render(chart, values)?;
    let version = semver::Version::parse(&chart.version).map_err(|e| {
        crate::fail::helm_template_failed(chart, format!("chart version {}: {e}", chart.version))
    })?;
    let matching = patches.for_chart(chart.chart.name(), &version);
    if !matching.is_empty() {
        ocm_lab_core::patch::apply(&matching, &mut rendered.objects).map_err(|e| {
            crate::fail::helm_template_failed(
                chart,
                format!("error while running post render on files: ocm-lab post-renderer: {e}"),
            )
        })?;
    }
    Ok(rendered)
}

fn release_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

fn as_release(r: &super::world::SimRelease) -> Release {
    Release {
        name: r.name.clone(),
        namespace: r.namespace.clone(),
        revision: r.revision,
        status: r.status.as_str().into(),
        chart: r.chart.clone(),
        values: r.values.clone(),
    }
}

#[async_trait]
impl ChartRenderer for SimHelm {
    async fn template(&self, chart: &ChartPlan, values: &Value) -> Result<Rendered, HelmError> {
        let patches = self.1.clone();
        call(
            &self.0,
            Behaviour::HelmTemplate,
            &chart.cluster,
            "helm.template",
            format!("chart {}@{}", chart.chart, chart.version),
            false,
            move |_| sim_render(&patches, chart, values),
        )
        .await
    }

    async fn upgrade_install(
        &self,
        target: &HelmTarget,
        chart: &ChartPlan,
        values: &Value,
    ) -> Result<Release, HelmError> {
        let rendered = self.template(chart, values).await?;
        let cluster = target.cluster.clone();
        let lab = target.lab.clone();
        call(
            &self.0,
            Behaviour::Apply,
            &target.cluster,
            "helm.upgrade-install",
            format!("release {}/{}", chart.namespace, chart.release),
            true,
            move |st| {
                let key = release_key(&chart.namespace, &chart.release);
                let previous = st.world.release(&cluster, &key).cloned();
                let mut manifest = Vec::new();
                let mut result = Ok(());
                for obj in &rendered.objects {
                    let mut obj = obj.clone();
                    // Helm puts namespaced objects without a namespace into the release namespace.
                    if obj.pointer("/metadata/namespace").is_none()
                        && let Some(info) = apiserver::resolve(
                            &st.world,
                            &cluster,
                            obj["apiVersion"].as_str().unwrap_or_default(),
                            obj["kind"].as_str().unwrap_or_default(),
                        )
                        && info.namespaced
                    {
                        obj["metadata"]["namespace"] = json!(chart.namespace);
                    }
                    let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_owned();
                    let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
                    let applied = st
                        .webhook_fault(&cluster, &gk::of_obj(&obj), &api_version, &kind)
                        .and_then(|()| apiserver::apply_as(&mut st.world, &cluster, &obj, "helm"));
                    if let Err(e) = applied {
                        result = Err(e);
                        break;
                    }
                    if st.record {
                        st.applied
                            .entry(cluster.clone())
                            .or_default()
                            .push(obj.clone());
                    }
                    if let Some(r) = ObjectRef::of(&obj) {
                        manifest.push(r);
                    }
                }
                if result.is_ok()
                    && let Some(prev) = &previous
                {
                    // An upgrade deletes what the new manifest no longer holds.
                    for gone in prev.manifest.iter().filter(|r| !manifest.contains(r)) {
                        if let Err(e) = apiserver::delete(&mut st.world, &cluster, gone) {
                            result = Err(e);
                            break;
                        }
                    }
                }
                let release = super::world::SimRelease {
                    name: chart.release.clone(),
                    namespace: chart.namespace.clone(),
                    chart: format!("{}-{}", chart.chart.name(), chart.version),
                    revision: previous.as_ref().map_or(0, |p| p.revision) + 1,
                    status: if result.is_ok() { "deployed" } else { "failed" }.to_owned(),
                    values: values.clone(),
                    labels: [(ocm_lab_core::topology::LAB_LABEL.to_owned(), lab.clone())].into(),
                    manifest: if result.is_ok() {
                        manifest
                    } else {
                        previous.map(|p| p.manifest).unwrap_or_default()
                    },
                };
                let out = as_release(&release);
                st.world
                    .releases
                    .entry(cluster.clone())
                    .or_default()
                    .insert(key, release);
                result.map(|()| out).map_err(|e| {
                    crate::fail::helm_request_failed(
                        &format!("install {}", chart.release),
                        &format!("helm upgrade --install {}", chart.release),
                        &e,
                    )
                })
            },
        )
        .await
    }

    async fn release(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<Option<Release>, HelmError> {
        read_release(&self.0, target, name, namespace, String::new(), |r| {
            r.map(as_release)
        })
        .await
    }

    async fn release_of_lab(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<bool, HelmError> {
        let lab = target.lab.clone();
        let what = format!(" of lab {lab}");
        read_release(&self.0, target, name, namespace, what, move |r| {
            r.is_some_and(|r| r.labels.get(ocm_lab_core::topology::LAB_LABEL) == Some(&lab))
        })
        .await
    }

    async fn uninstall(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<bool, HelmError> {
        let cluster = target.cluster.clone();
        let lab = target.lab.clone();
        let key = release_key(namespace, name);
        call(
            &self.0,
            Behaviour::Delete,
            &target.cluster,
            "helm.uninstall",
            format!("release {key}"),
            true,
            move |st| {
                // Only this lab's release (labelled at install); anything else is left alone.
                let Some(release) = st
                    .world
                    .release(&cluster, &key)
                    .filter(|r| r.labels.get(ocm_lab_core::topology::LAB_LABEL) == Some(&lab))
                    .cloned()
                else {
                    return Ok(false);
                };
                for r in &release.manifest {
                    apiserver::delete(&mut st.world, &cluster, r).map_err(|e| {
                        crate::fail::helm_release_failed(
                            &format!("uninstall release {key}"),
                            &format!("helm uninstall {}", release.name),
                            &e,
                        )
                    })?;
                }
                if let Some(rs) = st.world.releases.get_mut(&cluster) {
                    rs.remove(&key);
                }
                Ok(true)
            },
        )
        .await
    }
}

// ---- Kubernetes API -----------------------------------------------------------------------------

pub(crate) struct SimConnector(pub Arc<Shared>);

#[async_trait]
impl Connector for SimConnector {
    async fn connect(
        &self,
        cluster: &Cluster,
        _kubeconfig: &Path,
    ) -> Result<Arc<dyn ClusterApi>, KubeError> {
        let name = cluster.name.clone();
        call(
            &self.0,
            Behaviour::Connect,
            &cluster.name,
            "kube.connect",
            format!("cluster {}", cluster.name),
            false,
            move |st| {
                if st.world.reachable(&name) {
                    Ok(())
                } else {
                    Err(apiserver::unreachable(&name))
                }
            },
        )
        .await?;
        Ok(Arc::new(SimApi {
            shared: self.0.clone(),
            cluster: cluster.name.clone(),
        }))
    }
}

/// One simulated cluster's API.
pub(crate) struct SimApi {
    pub shared: Arc<Shared>,
    pub cluster: String,
}

/// The stored object a wait on `r` looks at.
fn lookup<'a>(w: &'a World, cluster: &str, r: &ObjectRef) -> Option<&'a Value> {
    let ns = match apiserver::resolve(w, cluster, &r.api_version, &r.kind) {
        Some(info) if !info.namespaced => "",
        Some(_) => r.namespace.as_deref().unwrap_or("default"),
        None => r.namespace.as_deref().unwrap_or(""),
    };
    w.get(cluster, &gk::of_ref(r), ns, &r.name)
}

fn with_version(o: Option<&Value>, api_version: &str) -> Option<Value> {
    o.map(|o| {
        let mut o = o.clone();
        o["apiVersion"] = json!(api_version);
        o
    })
}

/// Watches until `ok` holds on the world or the deadline passes; `Ok(None)` on timeout. The Notify is
/// enabled before each check, so no change is missed between a check and the sleep.
async fn watch<T>(
    shared: &Arc<Shared>,
    cluster: &str,
    deadline: Instant,
    mut ok: impl FnMut(&World) -> Option<T>,
) -> Result<Option<T>, KubeError> {
    let notify = shared.notifier(cluster);
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let st = shared.lock();
            if !st.world.reachable(cluster) {
                return Err(apiserver::unreachable(cluster));
            }
            if let Some(t) = ok(&st.world) {
                return Ok(Some(t));
            }
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => return Ok(None),
        }
    }
}

impl SimApi {
    /// A [`call`] on this API's cluster; `f` gets the state and the cluster's name.
    async fn call<T>(
        &self,
        b: Behaviour,
        verb: &str,
        object: String,
        mutating: bool,
        f: impl FnOnce(&mut State, &str) -> Result<T, KubeError>,
    ) -> Result<T, KubeError> {
        let c = &self.cluster;
        call(&self.shared, b, c, verb, object, mutating, |st| f(st, c)).await
    }

    /// A [`call`] that reads: it fails as [`Behaviour::KubeRead`] and changes nothing.
    async fn read<T>(
        &self,
        verb: &str,
        object: String,
        f: impl FnOnce(&mut State, &str) -> Result<T, KubeError>,
    ) -> Result<T, KubeError> {
        self.call(Behaviour::KubeRead, verb, object, false, f).await
    }
}

#[async_trait]
impl ClusterApi for SimApi {
    async fn version(&self) -> Result<String, KubeError> {
        self.read("kube.version", String::new(), |st, c| {
            apiserver::check_reachable(&st.world, c)?;
            Ok(st.world.clusters[c].version())
        })
        .await
    }

    async fn served(&self, api_version: &str, kind: &str) -> Result<bool, KubeError> {
        self.read("kube.served", format!("{kind} {api_version}"), |st, c| {
            apiserver::check_reachable(&st.world, c)?;
            Ok(apiserver::resolve(&st.world, c, api_version, kind).is_some())
        })
        .await
    }

    async fn get(&self, r: &ObjectRef) -> Result<Option<Value>, KubeError> {
        self.read("kube.get", r.to_string(), |st, c| {
            apiserver::get(&st.world, c, r)
        })
        .await
    }

    async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>, KubeError> {
        let what = list_description(api_version, kind, namespace, labels);
        self.read("kube.list", what, |st, c| {
            apiserver::list(&st.world, c, api_version, kind, namespace, labels)
        })
        .await
    }

    async fn list_metadata(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>, KubeError> {
        let what = list_description(api_version, kind, namespace, labels);
        self.read("kube.list-metadata", what, |st, c| {
            apiserver::list_metadata(&st.world, c, api_version, kind, namespace, labels)
        })
        .await
    }

    async fn apply(&self, obj: &Value) -> Result<(), KubeError> {
        let desc =
            ObjectRef::of(obj).map_or_else(|| "(invalid object)".to_owned(), |r| r.to_string());
        self.call(Behaviour::Apply, "kube.apply", desc, true, |st, c| {
            let api_version = obj["apiVersion"].as_str().unwrap_or_default();
            let kind = obj["kind"].as_str().unwrap_or_default();
            st.webhook_fault(c, &gk::of_obj(obj), api_version, kind)?;
            apiserver::apply(&mut st.world, c, obj)?;
            if st.record {
                st.applied
                    .entry(c.to_owned())
                    .or_default()
                    .push(obj.clone());
            }
            Ok(())
        })
        .await
    }

    async fn merge_patch(&self, r: &ObjectRef, patch: &Value) -> Result<(), KubeError> {
        let what = r.to_string();
        self.call(
            Behaviour::MergePatch,
            "kube.merge-patch",
            what,
            true,
            |st, c| {
                st.webhook_fault(c, &gk::of_ref(r), &r.api_version, &r.kind)?;
                apiserver::merge_patch(&mut st.world, c, r, patch)
            },
        )
        .await
    }

    async fn delete(&self, r: &ObjectRef) -> Result<bool, KubeError> {
        self.call(
            Behaviour::Delete,
            "kube.delete",
            r.to_string(),
            true,
            |st, c| apiserver::delete(&mut st.world, c, r),
        )
        .await
    }

    async fn wait(
        &self,
        r: &ObjectRef,
        cond: &Condition,
        timeout: Duration,
    ) -> std::result::Result<Value, WaitError> {
        let start = Instant::now();
        let cluster = self.cluster.clone();
        let outcome = watch(&self.shared, &cluster, start + timeout, |w| {
            let o = with_version(lookup(w, &cluster, r), &r.api_version);
            (cond.check)(o.as_ref()).then(|| o.unwrap_or(Value::Null))
        })
        .await;
        let result = match outcome {
            Err(e) => Err(WaitError::Backend(e)),
            Ok(Some(v)) => Ok(v),
            Ok(None) => {
                let last = with_version(
                    lookup(&self.shared.lock().world, &cluster, r),
                    &r.api_version,
                );
                Err(WaitError::Timeout {
                    object: r.clone(),
                    condition: cond.description.clone(),
                    after: timeout,
                    last,
                })
            }
        };
        self.shared.log(
            &cluster,
            "kube.wait",
            format!("{r}: {}", cond.description),
            result.as_ref().map(|_| ()).map_err(ToString::to_string),
        );
        result
    }

    async fn wait_served(
        &self,
        api_version: &str,
        kind: &str,
        timeout: Duration,
    ) -> std::result::Result<(), WaitError> {
        let start = Instant::now();
        let cluster = self.cluster.clone();
        let outcome = watch(&self.shared, &cluster, start + timeout, |w| {
            apiserver::resolve(w, &cluster, api_version, kind).map(|_| ())
        })
        .await;
        let result = match outcome {
            Err(e) => Err(WaitError::Backend(e)),
            Ok(Some(())) => Ok(()),
            Ok(None) => {
                // What a user would look at: the CRD that should define the kind.
                let st = self.shared.lock();
                let group = gk::group_of(api_version);
                let crd = st
                    .world
                    .list(&cluster, gk::CRD, None)
                    .find(|c| c["spec"]["group"] == group && c["spec"]["names"]["kind"] == kind)
                    .cloned();
                Err(WaitError::crd_not_established(
                    api_version,
                    kind,
                    timeout,
                    crd,
                ))
            }
        };
        self.shared.log(
            &cluster,
            "kube.wait-served",
            format!("{kind} {api_version}"),
            result.as_ref().map(|_| ()).map_err(ToString::to_string),
        );
        result
    }

    async fn token_request(
        &self,
        namespace: &str,
        service_account: &str,
        seconds: i64,
    ) -> Result<Secret, KubeError> {
        let what = format!("ServiceAccount {namespace}/{service_account}");
        self.call(
            Behaviour::TokenRequest,
            "kube.token-request",
            what,
            true,
            |st, c| {
                apiserver::token_request(&mut st.world, c, namespace, service_account, seconds)
                    .map(Secret::new)
            },
        )
        .await
    }

    async fn get_via_service(
        &self,
        namespace: &str,
        service: &str,
        port: u16,
        path: &str,
        ca_pem: &[u8],
        token: &Secret,
    ) -> Result<(u16, String), KubeError> {
        let what = format!("GET {path} via Service {namespace}/{service}:{port}");
        self.call(
            Behaviour::ServiceRequest,
            "kube.get-via-service",
            what,
            false,
            |st, c| {
                apiserver::check_reachable(&st.world, c)?;
                // The hub's proxy server, as the user server's tunnel sees it
                // (open-cluster-management-io/cluster-proxy v0.10.0 `pkg/userserver/user_server.go`).
                let proxy_server = st.take_failure(Behaviour::ProxyServer).map_or(Ok(()), Err);
                super::userserver::get(
                    &st.world,
                    proxy_server,
                    c,
                    namespace,
                    service,
                    port,
                    path,
                    ca_pem,
                    token.expose(),
                )
            },
        )
        .await
    }

    async fn approve_csr(&self, name: &str, reason: &str) -> Result<(), KubeError> {
        let what = format!("CertificateSigningRequest {name}");
        self.call(
            Behaviour::CsrApprove,
            "kube.approve-csr",
            what,
            true,
            |st, c| apiserver::approve_csr(&mut st.world, c, name, reason),
        )
        .await
    }
}

/// One read of a simulated Helm release (`helm list`, logged as `release <ns>/<name><what>`): `read` gets
/// the release, or `None`.
async fn read_release<T: Send + 'static>(
    shared: &Arc<Shared>,
    target: &HelmTarget,
    name: &str,
    namespace: &str,
    what: String,
    read: impl FnOnce(Option<&super::world::SimRelease>) -> T + Send + 'static,
) -> Result<T, HelmError> {
    let cluster = target.cluster.clone();
    let key = release_key(namespace, name);
    call(
        shared,
        Behaviour::KubeRead,
        &target.cluster,
        "helm.list",
        format!("release {key}{what}"),
        false,
        move |st| {
            if !st.world.reachable(&cluster) {
                return Err(crate::fail::helm_release_failed(
                    &format!("read release {key}"),
                    "helm list",
                    &apiserver::unreachable(&cluster),
                ));
            }
            Ok(read(st.world.release(&cluster, &key)))
        },
    )
    .await
}
