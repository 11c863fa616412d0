//! The backend traits implemented over the simulated world.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use super::apiserver::{self, gk};
use super::charts;
use super::engine::{Shared, State};
use super::faults::Behaviour;
use super::world::{KIND_NETWORK, SimRelease, World};
use crate::fail::{self, FromInjected};
use ocm_lab_core::backend::docker;
use ocm_lab_core::backend::{
    ChartRenderer, ClusterApi, ClusterProvisioner, Condition, Connector, ContainerRuntime,
    CreateCluster, DockerError, HelmError, HelmTarget, ImageArchive, KindError, KubeError,
    LookAlike, NetworkRemoval, NodeContainer, NodeImage, ObjectRef, Release, Rendered, Secret,
    WaitError,
};
use ocm_lab_core::charts::ChartPlan;
use ocm_lab_core::topology::{Cluster, LAB_LABEL};

/// A backend call: the behaviour whose fault it takes, its verb in the call log, and whether it may
/// change the world (then it counts as a mutation and the controllers reconcile after it).
#[derive(Clone, Copy)]
struct Op(Behaviour, &'static str, bool);

/// What every backend call goes through: its fault (delay, transient or permanent failure), the
/// mutation count, the work itself (with a reconcile when it may have changed the world), and the log.
/// The world's lock is taken once before any delay and once for the work and its log entry.
async fn call<T, E: FromInjected + std::fmt::Display>(
    shared: &Arc<Shared>,
    Op(b, verb, mutating): Op,
    cluster: &str,
    object: String,
    f: impl FnOnce(&mut State) -> Result<T, E>,
) -> Result<T, E> {
    let delay = {
        let mut st = shared.lock();
        st.mutations += u64::from(mutating);
        match st.call_fault(b) {
            Ok(delay) => delay,
            Err(fault) => {
                let e = E::from_injected(fault, verb, cluster, &object);
                shared.log_locked(&mut st, cluster, verb, object, Err(e.to_string()));
                return Err(e);
            }
        }
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let logged = |st: &mut State| {
        let result = f(st);
        let outcome = result.as_ref().map(|_| ()).map_err(ToString::to_string);
        shared.log_locked(st, cluster, verb, object, outcome);
        result
    };
    if !mutating {
        return logged(&mut shared.lock());
    }
    let result = shared.mutate(logged);
    super::follow_agents(shared, cluster);
    result
}

/// A running simulated node container, or the error Docker gives for an exec into one that is not.
fn running_node<'a>(st: &'a State, node: &str) -> Result<&'a super::world::Container, DockerError> {
    // Docker answers an exec into a stopped container with 409, and one into no container with 404
    // (moby daemon/exec.go `getExecConfig`).
    let (status, message) = match st.world.containers.get(node) {
        Some(c) if c.running => return Ok(c),
        Some(_) => (409, format!("container {node} is not running")),
        None => (404, format!("No such container: {node}")),
    };
    let what = format!("exec in container {node}");
    Err(DockerError::Daemon {
        what,
        status,
        message,
    })
}

/// Writes a cluster's kubeconfig (it holds a secret): mode 0600, parent directories created.
fn write_kubeconfig(cluster: &str, path: &Path, text: &str) -> Result<(), KindError> {
    let written = ocm_lab_core::state::write_secret(path, text.as_bytes());
    written.map_err(|e| KindError::WriteKubeconfig {
        cluster: cluster.to_owned(),
        path: path.display().to_string(),
        detail: e.to_string(),
    })
}

// ---- Docker -------------------------------------------------------------------------------------

pub(crate) struct SimDocker(pub Arc<Shared>);

const PING: Op = Op(Behaviour::DockerPing, "docker.ping", false);
const NETWORK_ID: Op = Op(Behaviour::DockerPing, "docker.network-id", false);
const NODE_CONTAINERS: Op = Op(Behaviour::DockerPing, "docker.node-containers", false);
const LOOK_ALIKES: Op = Op(Behaviour::DockerPing, "docker.look-alikes", false);
const NODE_IMAGES: Op = Op(Behaviour::DockerPing, "docker.node-images", false);
/// A mutation only when it creates the network (it counts that itself): an existing one is observed.
const ENSURE_NETWORK: Op = Op(Behaviour::DockerNetwork, "docker.ensure-network", false);
const REMOVE_NETWORK: Op = Op(Behaviour::DockerNetwork, "docker.remove-network", true);
const ENSURE_REGISTRY: Op = Op(Behaviour::DockerNetwork, "docker.ensure-registry", true);
const REMOVE_CONTAINERS: Op = Op(Behaviour::KindDelete, "docker.remove-containers", true);
const IMPORT_IMAGE: Op = Op(Behaviour::NodeImageImport, "docker.import-node-image", true);
const PULL_IN_NODE: Op = Op(Behaviour::ImagePull, "docker.pull-in-node", true);

#[async_trait]
impl ContainerRuntime for SimDocker {
    async fn ping(&self) -> Result<String, DockerError> {
        let version = "sim-28.2.2 (simulated)".to_owned();
        call(&self.0, PING, "", String::new(), |_| Ok(version)).await
    }

    async fn ensure_network(&self, name: &str) -> Result<bool, DockerError> {
        let what = format!("network {name}");
        call(&self.0, ENSURE_NETWORK, "", what, |st| {
            let created = st.world.ensure_network(name);
            st.mutations += u64::from(created);
            Ok(created)
        })
        .await
    }

    async fn network_id(&self, name: &str) -> Result<Option<String>, DockerError> {
        call(&self.0, NETWORK_ID, "", format!("network {name}"), |st| {
            Ok(st.world.networks.get(name).map(|net| net.id.clone()))
        })
        .await
    }

    async fn remove_network_if_unused(&self, id: &str) -> Result<NetworkRemoval, DockerError> {
        call(&self.0, REMOVE_NETWORK, "", format!("network {id}"), |st| {
            let Some(name) = st.world.networks.values().find(|n| n.id == id) else {
                return Ok(NetworkRemoval::Gone);
            };
            let name = name.name.clone();
            let containers = st.world.containers.values();
            let users = containers.filter(|c| c.networks.contains_key(&name));
            let users: Vec<String> = users.map(|c| c.name.clone()).collect();
            if !users.is_empty() {
                return Ok(NetworkRemoval::InUse(users));
            }
            st.world.networks.remove(&name);
            Ok(NetworkRemoval::Removed)
        })
        .await
    }

    async fn node_containers(&self, cluster: &str) -> Result<Vec<NodeContainer>, DockerError> {
        let what = format!("containers of {cluster}");
        call(&self.0, NODE_CONTAINERS, cluster, what, |st| {
            let node = |ct: &super::world::Container| NodeContainer {
                id: ct.id.clone(),
                name: ct.name.clone(),
                role: ct
                    .labels
                    .get(docker::ROLE_LABEL)
                    .cloned()
                    .unwrap_or_default()
                    .into(),
                running: ct.running,
                ip: ct.networks.get(KIND_NETWORK).cloned(),
            };
            let nodes = st.world.containers_of(cluster).into_iter();
            Ok(nodes.map(node).collect())
        })
        .await
    }

    async fn remove_cluster_containers(&self, cluster: &str) -> Result<usize, DockerError> {
        let what = format!("containers of {cluster}");
        call(&self.0, REMOVE_CONTAINERS, cluster, what, |st| {
            Ok(st.remove_cluster(cluster))
        })
        .await
    }

    async fn look_alikes(&self, cluster: &str) -> Result<Vec<LookAlike>, DockerError> {
        let what = format!("containers like nodes of {cluster}");
        call(&self.0, LOOK_ALIKES, cluster, what, |st| {
            let kind = st.world.clusters.get(cluster);
            let look_alike = |ct: &super::world::Container| LookAlike {
                id: ct.id.clone(),
                name: ct.name.clone(),
                kind_cluster: ct.labels.get(docker::CLUSTER_LABEL).cloned(),
                // A simulated cluster's control plane publishes its API on the cluster's port.
                api_port: kind
                    .filter(|_| ct.name == format!("{cluster}-control-plane"))
                    .map(|k| k.host_port),
                image: kind.map(|k| k.image.clone()),
            };
            let look_alikes = st.world.look_alikes(cluster).into_iter();
            Ok(look_alikes.map(look_alike).collect())
        })
        .await
    }

    async fn remove_containers(&self, ids: &[String]) -> Result<usize, DockerError> {
        let what = format!("containers {}", ids.join(", "));
        call(&self.0, REMOVE_CONTAINERS, "", what, |st| {
            let gone = st
                .world
                .containers
                .values()
                .filter(|ct| ids.contains(&ct.id));
            let gone: Vec<String> = gone.map(|ct| ct.name.clone()).collect();
            for name in &gone {
                let ct = st.world.containers.remove(name).expect("just listed");
                // A cluster whose last node went goes with it (as `remove_cluster` does).
                if let Some(cluster) = ct.labels.get(docker::CLUSTER_LABEL)
                    && st.world.containers_of(cluster).is_empty()
                {
                    st.remove_cluster(cluster);
                }
            }
            Ok(gone.len())
        })
        .await
    }

    async fn ensure_registry(
        &self,
        spec: &ocm_lab_core::backend::RegistryContainer,
    ) -> Result<(String, bool), DockerError> {
        let what = format!("simulated registry container {}", spec.name);
        call(&self.0, ENSURE_REGISTRY, "", what, |st| {
            if let Some(c) = st.world.containers.get(&spec.name) {
                let foreign = spec
                    .labels
                    .iter()
                    .find(|(k, v)| c.labels.get(*k) != Some(v));
                return match foreign {
                    Some((k, v)) => Err(DockerError::ForeignRegistry {
                        name: spec.name.clone(),
                        host: "the simulated lab".to_owned(),
                        label: format!("{k}={v}"),
                    }),
                    None => Ok((c.id.clone(), false)),
                };
            }
            st.world.add_container(&spec.name, None, true);
            let ip = st.world.next_ip();
            let c = st.world.containers.get_mut(&spec.name).expect("just added");
            c.labels = spec.labels.clone();
            c.networks.insert(spec.network.clone(), ip);
            Ok((c.id.clone(), true))
        })
        .await
    }

    async fn node_images(&self, node: &str) -> Result<Vec<NodeImage>, DockerError> {
        let what = format!("images in node {node}");
        call(&self.0, NODE_IMAGES, "", what, |st| {
            // A stable stand-in digest (the simulated lab holds no image content).
            let image = |r: &String| NodeImage {
                reference: r.clone(),
                digest: format!("sha256:{}", hex::encode(Sha256::digest(r.as_bytes()))),
            };
            Ok(running_node(st, node)?.images.iter().map(image).collect())
        })
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
        let (image, file) = (&archive.image, archive.file.display());
        let what = format!("{image} from {file} into node {node}");
        call(&self.0, IMPORT_IMAGE, "", what, |st| {
            running_node(st, node)?;
            let c = st.world.containers.get_mut(node).expect("just found");
            c.images
                .insert(ocm_lab_core::backend::full_reference(image));
            Ok(())
        })
        .await
    }

    async fn pull_in_node(&self, node: &str, image: &str) -> Result<(), DockerError> {
        let what = format!("crictl pull {image} in node {node}");
        call(&self.0, PULL_IN_NODE, "", what, |st| {
            running_node(st, node)?;
            st.world.pull_image(node, image, "crictl");
            Ok(())
        })
        .await
    }
}

// ---- kind ---------------------------------------------------------------------------------------

pub(crate) struct SimKind(pub Arc<Shared>);

const KIND_LIST: Op = Op(Behaviour::DockerPing, "kind.list", false);
const KIND_CREATE: Op = Op(Behaviour::KindCreate, "kind.create", true);
const KIND_DELETE: Op = Op(Behaviour::KindDelete, "kind.delete", true);
const EXPORT_KUBECONFIG: Op = Op(Behaviour::DockerPing, "kind.export-kubeconfig", false);

#[async_trait]
impl ClusterProvisioner for SimKind {
    async fn list(&self) -> Result<Vec<String>, KindError> {
        call(&self.0, KIND_LIST, "", String::new(), |st| {
            Ok(st.world.kind_clusters())
        })
        .await
    }

    async fn create(&self, req: &CreateCluster) -> Result<(), KindError> {
        let name = &req.name;
        let what = format!("cluster {name} ({})", req.image);
        let kubeconfig = call(&self.0, KIND_CREATE, name, what, |st| {
            // Docker refuses a second container of a name (kind's `docker run` fails), labelled or not.
            let cp = format!("{name}-control-plane");
            let refused = if !st.world.containers_of(name).is_empty() {
                format!("node(s) already exist for a cluster with the name \"{name}\"")
            } else if st.world.containers.contains_key(&cp) {
                format!(
                    "command \"docker run --name {cp} …\" failed with error: exit status 125: docker: Error response from daemon: Conflict. The container name \"/{cp}\" is already in use"
                )
            } else {
                st.world.create_cluster(name, &req.image, false);
                return Ok(st.world.kubeconfig(name).expect("just created"));
            };
            let stderr = format!("ERROR: failed to create cluster: {refused}");
            Err(fail::kind_create_failed(name, stderr, None))
        })
        .await?;
        write_kubeconfig(name, &req.kubeconfig, &kubeconfig)
    }

    async fn delete(&self, name: &str) -> Result<(), KindError> {
        let what = format!("cluster {name}");
        call(&self.0, KIND_DELETE, name, what, |st| {
            st.remove_cluster(name);
            Ok(())
        })
        .await
    }

    async fn export_kubeconfig(&self, name: &str, path: &Path) -> Result<(), KindError> {
        let text = call(&self.0, EXPORT_KUBECONFIG, name, format!("cluster {name}"), |st| {
            let failed = |stderr: String| {
                fail::kind_command_failed(
                    format!("export the kubeconfig of kind cluster `{name}`"),
                    format!("kind export kubeconfig --name {name}"),
                    stderr,
                )
            };
            if st.world.containers_of(name).is_empty() {
                return Err(failed(format!(
                    "ERROR: could not locate any control plane nodes for cluster named '{name}'. Use the --name option to select a different cluster"
                )));
            }
            st.world.kubeconfig(name).ok_or_else(|| {
                failed(format!(
                    "ERROR: failed to get cluster internal kubeconfig: cluster {name} has node containers but no API server"
                ))
            })
        })
        .await?;
        write_kubeconfig(name, path, &text)
    }
}

// ---- helm ---------------------------------------------------------------------------------------

/// Simulated Helm: renders with the simulated charts, post-renders with our chart patches as
/// `ocm-lab __post-render` does for real Helm, and keeps releases in the world (install, upgrade,
/// list, uninstall; helm/helm v3.19.5 `pkg/storage/driver/secrets.go`, `pkg/action/uninstall.go`). Objects go
/// in by server-side apply with field manager `helm` (Helm 4's default, helm/helm v4.2.4 `pkg/cmd/install.go`);
/// CRDs are left to the caller, as `--skip-crds` does.
pub(crate) struct SimHelm(pub Arc<Shared>, pub Arc<ocm_lab_core::patch::PatchSet>);

const HELM_TEMPLATE: Op = Op(Behaviour::HelmTemplate, "helm.template", false);
const HELM_INSTALL: Op = Op(Behaviour::Apply, "helm.upgrade-install", true);
const HELM_LIST: Op = Op(Behaviour::KubeRead, "helm.list", false);
const HELM_UNINSTALL: Op = Op(Behaviour::Delete, "helm.uninstall", true);

/// A simulated chart's objects after our chart `patches` (the simulated `helm template`, post-renderer
/// included): what the simulated lab's `up` installs.
pub fn render_chart_patched(
    chart: &ChartPlan,
    values: &Value,
    patches: &ocm_lab_core::patch::PatchSet,
) -> Result<Rendered, HelmError> {
    let mut rendered = charts::render(chart, values)?;
    let version = semver::Version::parse(&chart.version).expect("the modelled versions are semver");
    let matching = patches.for_chart(chart.chart.name(), &version);
    if !matching.is_empty() {
        ocm_lab_core::patch::apply(&matching, &mut rendered.objects).map_err(|e| {
            fail::helm_template_failed(
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

fn as_release(r: &SimRelease) -> Release {
    Release {
        name: r.name.clone(),
        namespace: r.namespace.clone(),
        revision: r.revision,
        status: r.status.as_str().into(),
        chart: r.chart.clone(),
        values: r.values.clone(),
    }
}

/// An `apply` (a server-side apply by a field manager) of `obj` to `cluster`, through the hub webhooks
/// that see it; kept in the applied log when the world records.
fn apply_with(
    st: &mut State,
    cluster: &str,
    obj: &Value,
    apply: fn(&mut World, &str, &Value) -> Result<Value, KubeError>,
) -> Result<(), KubeError> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    st.webhook_fault(cluster, &gk::of_obj(obj), api_version, kind)?;
    apply(&mut st.world, cluster, obj)?;
    if st.record {
        let applied = st.applied.entry(cluster.to_owned()).or_default();
        applied.push(obj.clone());
    }
    Ok(())
}

/// Helm's install or upgrade of a chart's `objects` into `cluster`, in order, stopping at the first
/// failure; the manifest of what went in. Helm puts namespaced objects without a namespace into the
/// release namespace; an upgrade deletes what the new manifest no longer holds.
fn install(
    st: &mut State,
    cluster: &str,
    namespace: &str,
    objects: &[Value],
    previous: Option<&SimRelease>,
) -> Result<Vec<ObjectRef>, KubeError> {
    let mut manifest = Vec::new();
    for obj in objects {
        let mut obj = obj.clone();
        let type_of = |o: &Value, field: &str| o[field].as_str().unwrap_or_default().to_owned();
        let (api_version, kind) = (type_of(&obj, "apiVersion"), type_of(&obj, "kind"));
        if obj.pointer("/metadata/namespace").is_none()
            && apiserver::resolve(&st.world, cluster, &api_version, &kind)
                .is_some_and(|i| i.namespaced)
        {
            obj["metadata"]["namespace"] = json!(namespace);
        }
        apply_with(st, cluster, &obj, |w, c, o| {
            apiserver::apply_as(w, c, o, "helm")
        })?;
        manifest.extend(ObjectRef::of(&obj));
    }
    let old = previous.iter().flat_map(|p| &p.manifest);
    for gone in old.filter(|r| !manifest.contains(r)) {
        apiserver::delete(&mut st.world, cluster, gone)?;
    }
    Ok(manifest)
}

impl SimHelm {
    /// One read of a simulated Helm release (`helm list`, logged as `release <ns>/<name><what>`): `read`
    /// gets the release, or `None`.
    async fn read_release<T>(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
        what: &str,
        read: impl FnOnce(Option<&SimRelease>) -> T,
    ) -> Result<T, HelmError> {
        let (cluster, key) = (&target.cluster, release_key(namespace, name));
        let what = format!("release {key}{what}");
        call(&self.0, HELM_LIST, cluster, what, |st| {
            if !st.world.reachable(cluster) {
                let what = format!("read release {key}");
                let e = apiserver::unreachable(cluster);
                return Err(fail::helm_release_failed(what, "helm list".to_owned(), &e));
            }
            Ok(read(st.world.release(cluster, &key)))
        })
        .await
    }
}

#[async_trait]
impl ChartRenderer for SimHelm {
    async fn template(&self, chart: &ChartPlan, values: &Value) -> Result<Rendered, HelmError> {
        let what = format!("chart {}@{}", chart.chart, chart.version);
        call(&self.0, HELM_TEMPLATE, &chart.cluster, what, |_| {
            render_chart_patched(chart, values, &self.1)
        })
        .await
    }

    async fn upgrade_install(
        &self,
        target: &HelmTarget,
        chart: &ChartPlan,
        values: &Value,
    ) -> Result<Release, HelmError> {
        let rendered = self.template(chart, values).await?;
        let (cluster, name) = (&target.cluster, &chart.release);
        let key = release_key(&chart.namespace, name);
        let what = format!("release {key}");
        call(&self.0, HELM_INSTALL, cluster, what, |st| {
            let previous = st.world.release(cluster, &key).cloned();
            let ns = &chart.namespace;
            let result = install(st, cluster, ns, &rendered.objects, previous.as_ref());
            let (status, manifest) = match &result {
                Ok(manifest) => ("deployed", manifest.clone()),
                Err(_) => (
                    "failed",
                    previous
                        .as_ref()
                        .map(|p| p.manifest.clone())
                        .unwrap_or_default(),
                ),
            };
            let release = SimRelease {
                name: name.clone(),
                namespace: ns.clone(),
                chart: format!("{}-{}", chart.chart.name(), chart.version),
                revision: previous.map_or(0, |p| p.revision) + 1,
                status: status.to_owned(),
                values: values.clone(),
                labels: [(LAB_LABEL.to_owned(), target.lab.clone())].into(),
                manifest,
            };
            let out = as_release(&release);
            let releases = st.world.releases.entry(cluster.clone()).or_default();
            releases.insert(key.clone(), release);
            result
                .map(|_| out)
                .map_err(|e| fail::helm_request_failed(name, &e))
        })
        .await
    }

    async fn release(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<Option<Release>, HelmError> {
        self.read_release(target, name, namespace, "", |r| r.map(as_release))
            .await
    }

    async fn release_of_lab(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<bool, HelmError> {
        let lab = &target.lab;
        let what = format!(" of lab {lab}");
        self.read_release(target, name, namespace, &what, |r| {
            r.is_some_and(|r| r.labels.get(LAB_LABEL) == Some(lab))
        })
        .await
    }

    async fn uninstall(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<bool, HelmError> {
        let (cluster, key) = (&target.cluster, release_key(namespace, name));
        let what = format!("release {key}");
        call(&self.0, HELM_UNINSTALL, cluster, what, |st| {
            // Only this lab's release (labelled at install); anything else is left alone.
            let Some(release) = st
                .world
                .release(cluster, &key)
                .filter(|r| r.labels.get(LAB_LABEL) == Some(&target.lab))
                .cloned()
            else {
                return Ok(false);
            };
            for r in &release.manifest {
                apiserver::delete(&mut st.world, cluster, r).map_err(|e| {
                    let command = format!("helm uninstall {}", release.name);
                    fail::helm_release_failed(format!("uninstall release {key}"), command, &e)
                })?;
            }
            if let Some(rs) = st.world.releases.get_mut(cluster) {
                rs.remove(&key);
            }
            Ok(true)
        })
        .await
    }
}

// ---- Kubernetes API -----------------------------------------------------------------------------

pub(crate) struct SimConnector(pub Arc<Shared>);

const CONNECT: Op = Op(Behaviour::Connect, "kube.connect", false);

#[async_trait]
impl Connector for SimConnector {
    async fn connect(
        &self,
        cluster: &Cluster,
        _kubeconfig: &Path,
    ) -> Result<Arc<dyn ClusterApi>, KubeError> {
        let name = &cluster.name;
        call(&self.0, CONNECT, name, format!("cluster {name}"), |st| {
            apiserver::check_reachable(&st.world, name)
        })
        .await?;
        Ok(Arc::new(SimApi {
            shared: self.0.clone(),
            cluster: name.clone(),
        }))
    }
}

/// One simulated cluster's API.
pub(crate) struct SimApi {
    pub shared: Arc<Shared>,
    pub cluster: String,
}

const VERSION: Op = Op(Behaviour::KubeRead, "kube.version", false);
const SERVED: Op = Op(Behaviour::KubeRead, "kube.served", false);
const GET: Op = Op(Behaviour::KubeRead, "kube.get", false);
const APPLY: Op = Op(Behaviour::Apply, "kube.apply", true);
const MERGE_PATCH: Op = Op(Behaviour::MergePatch, "kube.merge-patch", true);
const DELETE: Op = Op(Behaviour::Delete, "kube.delete", true);
const TOKEN_REQUEST: Op = Op(Behaviour::TokenRequest, "kube.token-request", true);
const APPROVE_CSR: Op = Op(Behaviour::CsrApprove, "kube.approve-csr", true);
const GET_VIA_SERVICE: Op = Op(Behaviour::ServiceRequest, "kube.get-via-service", false);

const LIST: Op = Op(Behaviour::KubeRead, "kube.list", false);
const LIST_METADATA: Op = Op(Behaviour::KubeRead, "kube.list-metadata", false);

/// The stored object a wait on `r` looks at, with the apiVersion it was asked at.
fn observed(w: &World, cluster: &str, r: &ObjectRef) -> Option<Value> {
    let ns = match apiserver::resolve(w, cluster, &r.api_version, &r.kind) {
        Some(info) if !info.namespaced => "",
        Some(_) => r.namespace.as_deref().unwrap_or("default"),
        None => r.namespace.as_deref().unwrap_or(""),
    };
    let mut o = w.get(cluster, &gk::of_ref(r), ns, &r.name)?.clone();
    o["apiVersion"] = json!(r.api_version);
    Some(o)
}

impl SimApi {
    /// A [`call`] on this API's cluster; `f` gets the state and the cluster's name.
    async fn call<T>(
        &self,
        op: Op,
        object: String,
        f: impl FnOnce(&mut State, &str) -> Result<T, KubeError>,
    ) -> Result<T, KubeError> {
        let c = &self.cluster;
        call(&self.shared, op, c, object, |st| f(st, c)).await
    }

    /// A list, logged as `<kind> <apiVersion> in <namespace or all namespaces> <selector>`.
    async fn list_with(
        &self,
        op: Op,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>, KubeError> {
        let scope = namespace.unwrap_or("all namespaces");
        let what = format!("{kind} {api_version} in {scope} {}", labels.unwrap_or(""));
        self.call(op, what.trim_end().to_owned(), |st, c| {
            apiserver::list(&st.world, c, api_version, kind, namespace, labels)
        })
        .await
    }

    /// Watches until `ok` holds on the world or `timeout` passes (then the error is `timed_out`'s of the
    /// world), and logs the wait. The Notify is enabled before each check, so no change is missed
    /// between a check and the sleep.
    async fn watch<T>(
        &self,
        verb: &str,
        object: String,
        timeout: Duration,
        mut ok: impl FnMut(&World) -> Option<T>,
        timed_out: impl FnOnce(&World) -> WaitError,
    ) -> Result<T, WaitError> {
        let (cluster, deadline) = (&self.cluster, Instant::now() + timeout);
        let notify = self.shared.notifier(cluster);
        let result = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.shared.lock();
                if !st.world.reachable(cluster) {
                    break Err(WaitError::Backend(apiserver::unreachable(cluster)));
                }
                if let Some(t) = ok(&st.world) {
                    break Ok(t);
                }
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => {
                    break Err(timed_out(&self.shared.lock().world));
                }
            }
        };
        let outcome = result.as_ref().map(|_| ()).map_err(ToString::to_string);
        self.shared.log(cluster, verb, object, outcome);
        result
    }
}

#[async_trait]
impl ClusterApi for SimApi {
    async fn version(&self) -> Result<String, KubeError> {
        self.call(VERSION, String::new(), |st, c| {
            apiserver::check_reachable(&st.world, c)?;
            Ok(st.world.clusters[c].version())
        })
        .await
    }

    async fn served(&self, api_version: &str, kind: &str) -> Result<bool, KubeError> {
        self.call(SERVED, format!("{kind} {api_version}"), |st, c| {
            apiserver::check_reachable(&st.world, c)?;
            Ok(apiserver::resolve(&st.world, c, api_version, kind).is_some())
        })
        .await
    }

    async fn get(&self, r: &ObjectRef) -> Result<Option<Value>, KubeError> {
        self.call(GET, r.to_string(), |st, c| apiserver::get(&st.world, c, r))
            .await
    }

    async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>, KubeError> {
        self.list_with(LIST, api_version, kind, namespace, labels)
            .await
    }

    async fn list_metadata(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>, KubeError> {
        let objects = self
            .list_with(LIST_METADATA, api_version, kind, namespace, labels)
            .await?;
        // PartialObjectMetadata: each object as its `apiVersion`, `kind` and `metadata`.
        let metadata =
            |o: Value| json!({"apiVersion": api_version, "kind": kind, "metadata": o["metadata"]});
        Ok(objects.into_iter().map(metadata).collect())
    }

    async fn apply(&self, obj: &Value) -> Result<(), KubeError> {
        let what =
            ObjectRef::of(obj).map_or_else(|| "(invalid object)".to_owned(), |r| r.to_string());
        self.call(APPLY, what, |st, c| {
            apply_with(st, c, obj, apiserver::apply)
        })
        .await
    }

    async fn merge_patch(&self, r: &ObjectRef, patch: &Value) -> Result<(), KubeError> {
        self.call(MERGE_PATCH, r.to_string(), |st, c| {
            st.webhook_fault(c, &gk::of_ref(r), &r.api_version, &r.kind)?;
            apiserver::merge_patch(&mut st.world, c, r, patch)
        })
        .await
    }

    async fn delete(&self, r: &ObjectRef) -> Result<bool, KubeError> {
        self.call(DELETE, r.to_string(), |st, c| {
            apiserver::delete(&mut st.world, c, r)
        })
        .await
    }

    async fn wait(
        &self,
        r: &ObjectRef,
        cond: &Condition,
        timeout: Duration,
    ) -> std::result::Result<Value, WaitError> {
        let c = &self.cluster;
        let what = format!("{r}: {}", cond.description);
        let ok = |w: &World| {
            let o = observed(w, c, r);
            (cond.check)(o.as_ref()).then(|| o.unwrap_or(Value::Null))
        };
        let timed_out = |w: &World| WaitError::Timeout {
            object: r.clone(),
            condition: cond.description.clone(),
            after: timeout,
            last: observed(w, c, r),
        };
        self.watch("kube.wait", what, timeout, ok, timed_out).await
    }

    async fn wait_served(
        &self,
        api_version: &str,
        kind: &str,
        timeout: Duration,
    ) -> std::result::Result<(), WaitError> {
        let c = &self.cluster;
        let ok = |w: &World| apiserver::resolve(w, c, api_version, kind).map(|_| ());
        // What a user would look at: the CRD that should define the kind.
        let timed_out = |w: &World| {
            let group = gk::group_of(api_version);
            let mut crds = w.list(c, gk::CRD, None);
            let crd =
                crds.find(|d| d["spec"]["group"] == group && d["spec"]["names"]["kind"] == kind);
            WaitError::crd_not_established(api_version, kind, timeout, crd.cloned())
        };
        let what = format!("{kind} {api_version}");
        self.watch("kube.wait-served", what, timeout, ok, timed_out)
            .await
    }

    async fn token_request(
        &self,
        namespace: &str,
        service_account: &str,
        seconds: i64,
    ) -> Result<Secret, KubeError> {
        let what = format!("ServiceAccount {namespace}/{service_account}");
        self.call(TOKEN_REQUEST, what, |st, c| {
            apiserver::token_request(&mut st.world, c, namespace, service_account, seconds)
                .map(Secret::new)
        })
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
        self.call(GET_VIA_SERVICE, what, |st, c| {
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
        })
        .await
    }

    async fn approve_csr(&self, name: &str, reason: &str) -> Result<(), KubeError> {
        let what = format!("CertificateSigningRequest {name}");
        self.call(APPROVE_CSR, what, |st, c| {
            apiserver::approve_csr(&mut st.world, c, name, reason)
        })
        .await
    }
}
