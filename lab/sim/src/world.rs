//! The simulated world: Docker networks and containers, kind clusters, and each cluster's API server
//! objects, plus the little state the simulated agents keep. Saved as JSON between commands.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::apiserver::{self, Store, gk};
use super::util;
use ocm_lab_core::backend::ObjectRef;
use ocm_lab_core::backend::docker::{CLUSTER_LABEL, ROLE_LABEL};

/// Kubernetes version every simulated cluster reports unless its node image names another
/// (kubernetes-sigs/kind v0.32.0 `pkg/apis/config/defaults/image.go`).
pub const DEFAULT_K8S_VERSION: &str = "v1.36.1";
/// The Docker network kind puts every node on (kubernetes-sigs/kind v0.32.0
/// `pkg/cluster/internal/providers/docker/network.go`).
pub const KIND_NETWORK: &str = "kind";

/// A Docker network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    pub name: String,
    pub id: String,
    pub subnet: String,
}

/// A Docker container (a kind node, or anything a test adds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub running: bool,
    /// Network name → address.
    pub networks: BTreeMap<String, String>,
    /// The node's image store (a kind node's containerd, `k8s.io` namespace): full references
    /// (`quay.io/open-cluster-management/work:v1.3.1`), as `ocm_lab_core::backend::full_reference` writes them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub images: BTreeSet<String>,
}

impl Container {
    /// Labelled as a node of kind cluster `cluster`.
    fn node_of(&self, cluster: &str) -> bool {
        self.labels.get(CLUSTER_LABEL).map(String::as_str) == Some(cluster)
    }
}

/// Image `image` (a full reference) that node container `node` pulled from its registry, `by` `kubelet`
/// (a Pod's image missing at rollout) or `crictl` (the `node-images` step's pre-pull): what "no node
/// pulled anything" is checked on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pull {
    pub node: String,
    pub image: String,
    pub by: String,
}

/// A kind cluster: its node image, host port and API server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SimCluster {
    pub name: String,
    pub image: String,
    /// Host port of the API server (`https://127.0.0.1:<port>` in its kubeconfig).
    pub host_port: u16,
    /// Added by a test, not created through the backends (a cluster the lab does not own).
    pub foreign: bool,
    pub(crate) api: Store,
    /// The klusterlet registration agent's memory, when a klusterlet runs here.
    pub(crate) agent: Option<Agent>,
    /// The cluster's own CA and API server certificate (absent only in worlds saved before there was
    /// one; made on load).
    #[serde(default)]
    pub(crate) ca: Option<super::certs::ClusterCa>,
    /// An API server URL every simulated cluster reaches this one at, besides kind's internal
    /// `https://<name>-control-plane:6443` (an existing cluster's address, e.g. behind a load balancer).
    #[serde(default)]
    pub endpoint: Option<String>,
}

impl SimCluster {
    /// `/version` gitVersion: the node image's tag when it looks like `kindest/node:vX.Y.Z`.
    pub fn version(&self) -> String {
        self.image
            .rsplit_once(':')
            .map(|(_, t)| t.split('@').next().unwrap_or(t))
            .filter(|t| t.starts_with('v') && t[1..].split('.').count() == 3)
            .map_or_else(|| DEFAULT_K8S_VERSION.to_owned(), str::to_owned)
    }
}

/// What a simulated registration agent remembers (the real one keeps it in the hub kubeconfig secret
/// and its informers): the lab cluster `hub` it registered with as ManagedCluster `cluster_name`, the
/// `csr` it created there, and whether it is `joined` (has a signed client certificate, hub accepted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    pub hub: String,
    pub cluster_name: String,
    pub csr: Option<String>,
    pub joined: bool,
    /// The hub's last rejection of its claims update (recorded from kube-apiserver v1.36.2 and
    /// open-cluster-management-io/ocm 00f84c32: a value over 1024 characters blocks every later update); only
    /// the agent log shows this in reality.
    pub claim_error: Option<String>,
    /// The agent was stopped (its Deployment scaled down, its pod gone): it renews no lease and syncs
    /// nothing. The number tells one stop from the next, so a lease timer of an earlier stop is ignored.
    #[serde(default)]
    pub stopped: Option<u64>,
    /// The hub's lease controller found the lease of the stopped agent expired (5 × leaseDurationSeconds
    /// after its last renewal, open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/hub/lease/controller.go`).
    #[serde(default)]
    pub lease_expired: bool,
    /// The stop came from its Deployment scaled to 0 replicas (not [`crate::SimLab::stop_agent`]): scaled
    /// up again, the agent starts again.
    #[serde(default)]
    pub scaled_down: bool,
}

/// What a registration agent did when its Deployment changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentChange {
    /// Stopped: the stop's number, and the hub's grace period.
    Stopped(u64, std::time::Duration),
    Started,
}

/// A token a cluster minted with a TokenRequest (or for a ManagedServiceAccount).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub cluster: String,
    pub namespace: String,
    pub service_account: String,
    pub expiration_seconds: i64,
}

/// One object change, for the controllers' work queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub cluster: String,
    pub gk: String,
    pub ns: String,
    pub name: String,
    pub kind: ChangeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Created,
    /// `labels`: metadata.labels changed; `spec`: anything outside metadata and status changed.
    Updated {
        labels: bool,
        spec: bool,
    },
    Deleted,
}

impl ChangeKind {
    /// Only `status` (or server metadata) changed: what a controller's own status write looks like.
    pub fn status_only(self) -> bool {
        self == ChangeKind::Updated {
            labels: false,
            spec: false,
        }
    }

    /// Created, deleted, or labels changed: what set membership depends on.
    pub fn membership(self) -> bool {
        !matches!(self, ChangeKind::Updated { labels: false, .. })
    }
}

/// A simulated Helm release: what `helm list` and `helm get values` show, and the objects of its
/// manifest (what `helm uninstall` deletes and an upgrade that no longer renders them removes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimRelease {
    pub name: String,
    pub namespace: String,
    /// `<chart>-<version>`.
    pub chart: String,
    pub revision: u64,
    pub status: String,
    pub values: Value,
    pub manifest: Vec<ObjectRef>,
    /// Release labels (`helm upgrade --labels`): the lab's ownership label.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The whole simulated world (fields missing from an older save start empty).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct World {
    pub(crate) networks: BTreeMap<String, Network>,
    pub(crate) containers: BTreeMap<String, Container>,
    pub(crate) clusters: BTreeMap<String, SimCluster>,
    /// Token → who minted it for which ServiceAccount.
    pub(crate) tokens: BTreeMap<String, TokenInfo>,
    /// `<hub>/<ManagedCluster name>` → the lab cluster whose agent registered it.
    pub(crate) agents: BTreeMap<String, String>,
    /// `<hub>/<managed cluster>` whose cluster-proxy agent holds a tunnel to the hub's proxy server
    /// (open-cluster-management-io/cluster-proxy v0.10.0 `cmd/addon-agent/main.go`).
    pub(crate) tunnels: BTreeSet<String>,
    /// Simulated Helm releases: cluster → `<namespace>/<release>` → release (as Helm's release Secrets
    /// hold them, helm/helm v3.19.5 `pkg/storage/driver/secrets.go`, `pkg/action/uninstall.go`).
    pub(crate) releases: BTreeMap<String, BTreeMap<String, SimRelease>>,
    /// Every image a simulated node pulled from a registry, in order (kept across commands, so a test can
    /// check that a lab brought up from a bundle pulled nothing).
    pub pulls: Vec<Pull>,
    /// Counter for tokens, ports and addresses.
    pub(crate) seq: u64,
    /// Generator state for uids and ids.
    pub(crate) rng: u64,
    #[serde(skip)]
    pub(crate) changes: Vec<Change>,
    /// Clusters changed since waiters were last notified.
    #[serde(skip)]
    pub(crate) touched: BTreeSet<String>,
}

impl World {
    // ---- for tests ------------------------------------------------------------------------------

    /// Names of the clusters that have an API server (running or not).
    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters.keys().cloned().collect()
    }

    pub fn container_names(&self) -> Vec<String> {
        self.containers.keys().cloned().collect()
    }

    /// The simulated Helm releases on `cluster`, by `<namespace>/<release>`.
    pub fn releases(&self, cluster: &str) -> BTreeMap<String, SimRelease> {
        self.releases.get(cluster).cloned().unwrap_or_default()
    }

    /// The simulated Helm release `<namespace>/<release>` (`key`) on `cluster`.
    pub(crate) fn release(&self, cluster: &str, key: &str) -> Option<&SimRelease> {
        self.releases.get(cluster)?.get(key)
    }

    /// Adds a deployed release that someone else installed (labelled for lab `owner`, if any).
    pub fn add_foreign_release(
        &mut self,
        cluster: &str,
        namespace: &str,
        name: &str,
        owner: Option<&str>,
    ) {
        let label = |o: &str| (ocm_lab_core::topology::LAB_LABEL.to_owned(), o.to_owned());
        let release = SimRelease {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            chart: format!("{name}-0.0.1"),
            revision: 1,
            status: "deployed".to_owned(),
            values: json!({}),
            manifest: Vec::new(),
            labels: owner.into_iter().map(label).collect(),
        };
        let releases = self.releases.entry(cluster.to_owned()).or_default();
        releases.insert(format!("{namespace}/{name}"), release);
    }

    /// Adds a running kind cluster that was not created through the backends (someone else's).
    pub fn add_foreign_cluster(&mut self, name: &str) {
        self.create_cluster(name, "kindest/node:v1.36.1", true);
    }

    /// Makes `cluster` answer at `url` from every simulated cluster (see [`SimCluster::endpoint`]).
    pub fn set_endpoint(&mut self, cluster: &str, url: &str) {
        if let Some(c) = self.clusters.get_mut(cluster) {
            c.endpoint = Some(url.trim_end_matches('/').to_owned());
        }
    }

    /// Adds a container: a leftover node of kind cluster `kind_cluster` (labelled so), or an unrelated one.
    pub fn add_container(&mut self, name: &str, kind_cluster: Option<&str>, running: bool) {
        let labels = kind_cluster.map_or_else(BTreeMap::new, |c| {
            BTreeMap::from([
                (CLUSTER_LABEL.to_owned(), c.to_owned()),
                (ROLE_LABEL.to_owned(), "control-plane".to_owned()),
            ])
        });
        let container = Container {
            id: self.hex_id(),
            name: name.to_owned(),
            labels,
            running,
            ..Container::default()
        };
        self.containers.insert(name.to_owned(), container);
    }

    /// Stops or starts a cluster's control-plane container (a stopped cluster is unreachable).
    pub fn set_running(&mut self, cluster: &str, running: bool) {
        if let Some(c) = self.containers.get_mut(&control_plane(cluster)) {
            c.running = running;
        }
        self.touched.insert(cluster.to_owned());
    }

    /// The spoke's registration agent loses its hub credentials (its hub kubeconfig Secret and client
    /// certificate are gone): it bootstraps again with a new CSR, which nobody has approved, so it is not
    /// joined and syncs nothing, and the hub shows its ManagedCluster as not joined
    /// (open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/join/exec.go`, `pkg/cmd/accept/exec.go`).
    pub fn unjoin(&mut self, spoke: &str) {
        let Some(agent) = self.agent_mut(spoke) else {
            return;
        };
        agent.joined = false;
        agent.csr = None;
        let (hub, name) = (agent.hub.clone(), agent.cluster_name.clone());
        if let Some(mut mc) = self.get(&hub, gk::MANAGED_CLUSTER, "", &name).cloned() {
            util::set_condition(
                &mut mc,
                "ManagedClusterJoined",
                "False",
                "ManagedClusterNotJoined",
                "the registration agent has no hub credentials (simulated)",
            );
            self.put(&hub, mc);
        }
        self.touched.insert(spoke.to_owned());
    }

    /// Stops the spoke's registration agent (as scaling its Deployment to 0 would): no lease renewal, no
    /// claims. Returns the stop's number and `lease_grace`; [`crate::SimLab::stop_agent`] also runs the timer.
    pub fn stop_agent(&mut self, spoke: &str) -> Option<(u64, std::time::Duration)> {
        let seq = self.next_seq();
        self.set_agent_stopped(spoke, Some(seq))?;
        Some((seq, self.lease_grace(spoke)?))
    }

    /// Records the agent as stopped (stop `seq`) or running (`None`), its lease not expired.
    pub(crate) fn set_agent_stopped(&mut self, spoke: &str, seq: Option<u64>) -> Option<()> {
        let agent = self.agent_mut(spoke)?;
        agent.stopped = seq;
        agent.lease_expired = false;
        agent.scaled_down = false;
        self.touched.insert(spoke.to_owned());
        Some(())
    }

    /// The hub's grace period for `spoke`'s agent: 5 × `spec.leaseDurationSeconds` of its ManagedCluster,
    /// 60 s when unset (open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/lease/controller.go`).
    pub(crate) fn lease_grace(&self, spoke: &str) -> Option<std::time::Duration> {
        let agent = self.agent(spoke)?;
        let lease_seconds = self
            .get(&agent.hub, gk::MANAGED_CLUSTER, "", &agent.cluster_name)
            .and_then(|mc| mc["spec"]["leaseDurationSeconds"].as_u64())
            .filter(|s| *s > 0)
            .unwrap_or(60);
        Some(std::time::Duration::from_secs(5 * lease_seconds))
    }

    /// The registration agent follows its Deployment `klusterlet-registration-agent`: at 0 replicas its Pod
    /// is gone and the agent stops; scaled up again after such a stop, it starts. Returns what changed, for
    /// the caller to reconcile and to run the hub's lease timer of a stop.
    pub(crate) fn follow_agent_deployment(&mut self, spoke: &str) -> Option<AgentChange> {
        let agent = self.agent(spoke)?;
        let d = self.find_named(spoke, gk::DEPLOYMENT, "klusterlet-registration-agent")?;
        let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
        match (replicas, agent.stopped, agent.scaled_down) {
            (0, None, _) => {
                let (seq, grace) = self.stop_agent(spoke)?;
                self.agent_mut(spoke)?.scaled_down = true;
                Some(AgentChange::Stopped(seq, grace))
            }
            (1.., Some(_), true) => {
                self.set_agent_stopped(spoke, None);
                Some(AgentChange::Started)
            }
            _ => None,
        }
    }

    /// Stopped agents whose lease has not expired yet: (spoke, stop number, grace).
    pub(crate) fn lease_running_out(&self) -> Vec<(String, u64, std::time::Duration)> {
        self.clusters
            .iter()
            .filter_map(|(n, c)| {
                let a = c.agent.as_ref()?;
                let seq = a.stopped.filter(|_| !a.lease_expired)?;
                Some((n.clone(), seq, self.lease_grace(n)?))
            })
            .collect()
    }

    /// The hub's lease controller: the lease of stop `seq` expired (no-op if the agent was started or
    /// stopped again since).
    pub(crate) fn expire_lease(&mut self, spoke: &str, seq: u64) -> Option<(String, String)> {
        let agent = self.agent_mut(spoke).filter(|a| a.stopped == Some(seq))?;
        agent.lease_expired = true;
        Some((agent.hub.clone(), agent.cluster_name.clone()))
    }

    /// Writes an object straight into a cluster's store: no admission, no validation, `status` kept
    /// (for tests that set up states the API would not let a client make).
    pub fn put_object(&mut self, cluster: &str, obj: Value) -> Result<(), String> {
        if !self.clusters.contains_key(cluster) {
            return Err(format!("no simulated cluster {cluster}"));
        }
        ObjectRef::of(&obj).ok_or("object needs apiVersion, kind and metadata.name")?;
        self.put(cluster, obj);
        Ok(())
    }

    /// Deletes an object (with the API server's cascades); `false` when absent.
    pub fn delete_object(&mut self, cluster: &str, r: &ObjectRef) -> bool {
        let ns = r.namespace.as_deref().unwrap_or("");
        self.remove(cluster, &gk::of_ref(r), ns, &r.name).is_some()
    }

    /// An object as stored (apiVersion as written).
    pub fn get_object(&self, cluster: &str, r: &ObjectRef) -> Option<Value> {
        let ns = r.namespace.as_deref().unwrap_or("");
        self.get(cluster, &gk::of_ref(r), ns, &r.name).cloned()
    }

    /// The registration agent's state on a cluster.
    pub fn agent(&self, cluster: &str) -> Option<&Agent> {
        self.clusters.get(cluster)?.agent.as_ref()
    }

    fn agent_mut(&mut self, cluster: &str) -> Option<&mut Agent> {
        self.clusters.get_mut(cluster)?.agent.as_mut()
    }

    /// Number of objects stored in a cluster.
    pub fn object_count(&self, cluster: &str) -> usize {
        self.api(cluster).map_or(0, Store::len)
    }

    // ---- clusters and containers ----------------------------------------------------------------

    pub(crate) fn reachable(&self, cluster: &str) -> bool {
        self.clusters.contains_key(cluster)
            && self
                .containers
                .get(&control_plane(cluster))
                .is_some_and(|c| c.running)
    }

    /// Cluster names as `kind get clusters` prints them: the kind labels of existing containers.
    pub(crate) fn kind_clusters(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self
            .containers
            .values()
            .filter_map(|c| c.labels.get(CLUSTER_LABEL))
            .collect();
        names.into_iter().cloned().collect()
    }

    /// The node whose image store a cluster's Pods use: its first running one (`<cluster>-control-plane`).
    pub(crate) fn image_node(&self, cluster: &str) -> Option<&Container> {
        self.containers_of(cluster).into_iter().find(|c| c.running)
    }

    /// Whether cluster `c`'s node holds `image` (any reference form). A cluster without simulated node
    /// containers (an `existing:` cluster) is not modelled: it has every image.
    pub(crate) fn node_has_image(&self, c: &str, image: &str) -> bool {
        let full = ocm_lab_core::backend::full_reference(image);
        self.image_node(c).is_none_or(|n| n.images.contains(&full))
    }

    /// Node `node` pulls `image` (see [`Pull`]) unless it holds it already; recorded in [`World::pulls`].
    pub(crate) fn pull_image(&mut self, node: &str, image: &str, by: &str) {
        let full = ocm_lab_core::backend::full_reference(image);
        if let Some(n) = self.containers.get_mut(node)
            && n.images.insert(full.clone())
        {
            self.pulls.push(Pull {
                node: node.to_owned(),
                image: full,
                by: by.to_owned(),
            });
        }
    }

    /// The containers labelled as nodes of kind cluster `cluster`, by name.
    pub(crate) fn containers_of(&self, cluster: &str) -> Vec<&Container> {
        self.containers
            .values()
            .filter(|c| c.node_of(cluster))
            .collect()
    }

    /// The containers that look like nodes of kind cluster `cluster`, by name: labelled as its nodes, or
    /// named as kind names them (`<cluster>-control-plane`, `<cluster>-worker2`, …).
    pub(crate) fn look_alikes(&self, cluster: &str) -> Vec<&Container> {
        self.containers
            .values()
            .filter(|c| {
                c.node_of(cluster) || ocm_lab_core::backend::is_kind_node_name(cluster, &c.name)
            })
            .collect()
    }

    /// Creates the network if absent; `true` when created now.
    pub(crate) fn ensure_network(&mut self, name: &str) -> bool {
        if self.networks.contains_key(name) {
            return false;
        }
        let network = Network {
            name: name.to_owned(),
            id: self.hex_id(),
            subnet: format!("172.{}.0.0/16", 18 + self.networks.len()),
        };
        self.networks.insert(name.to_owned(), network);
        true
    }

    /// A next free address on the `kind` network: 172.18.0.2, 172.18.0.3, …
    pub(crate) fn next_ip(&self) -> String {
        let ip = |i: u32| format!("172.18.{}.{}", i / 254, i % 254 + u32::from(i / 254 > 0));
        let used: BTreeSet<&str> = self
            .containers
            .values()
            .filter_map(|c| c.networks.get(KIND_NETWORK))
            .map(String::as_str)
            .collect();
        (2u32..)
            .map(ip)
            .find(|a| !used.contains(a.as_str()))
            .expect("an address is free")
    }

    /// Creates a kind cluster: the control-plane container on network `kind` and its API server with
    /// what kubeadm leaves there (namespaces, `kube-public/cluster-info`).
    pub(crate) fn create_cluster(&mut self, name: &str, image: &str, foreign: bool) {
        self.ensure_network(KIND_NETWORK);
        let ip = self.next_ip();
        let cp = control_plane(name);
        self.add_container(&cp, Some(name), true);
        let node = self.containers.get_mut(&cp).expect("just added");
        node.networks.insert(KIND_NETWORK.to_owned(), ip);
        let host_port = 40000 + (self.next_seq() % 20000) as u16;
        let cluster = SimCluster {
            name: name.to_owned(),
            image: image.to_owned(),
            host_port,
            foreign,
            ca: Some(super::certs::ClusterCa::new(name)),
            ..SimCluster::default()
        };
        self.clusters.insert(name.to_owned(), cluster);
        let ca_pem = self.ca_pem(name).to_owned();
        let namespaces = ["default", "kube-system", "kube-public", "kube-node-lease"].map(|ns| {
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
        });
        // kubeadm's cluster-info: the internal endpoint other kind nodes reach (kubernetes-sigs/kind v0.32.0
        // `pkg/cluster/internal/providers/docker/provider.go`).
        let ca = util::b64_encode(ca_pem.as_bytes());
        let kubeconfig = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://{name}-control-plane:6443\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
        );
        let objects = namespaces.into_iter().chain([
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"}, "data": {"kubeconfig": kubeconfig}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": "kube-public"}, "data": {"ca.crt": ca_pem}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}}),
        ]);
        for obj in objects {
            self.put(name, obj);
        }
        self.touched.insert(name.to_owned());
    }

    /// Removes a cluster's containers and, with them, the cluster. Returns how many containers went.
    pub(crate) fn remove_cluster(&mut self, name: &str) -> usize {
        let before = self.containers.len();
        self.containers.retain(|_, c| !c.node_of(name));
        self.releases.remove(name);
        if self.clusters.remove(name).is_some() {
            self.tokens.retain(|_, t| t.cluster != name);
            self.agents
                .retain(|k, v| v != name && k.split_once('/').map(|(h, _)| h) != Some(name));
        }
        self.touched.insert(name.to_owned());
        before - self.containers.len()
    }

    pub(crate) fn kubeconfig(&self, name: &str) -> Option<String> {
        let c = self.clusters.get(name)?;
        Some(format!(
            "# Simulated by ocm-lab's simulated lab: no real cluster is behind this address.\n\
             apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://127.0.0.1:{port}\n  name: kind-{name}\n\
             contexts:\n- context:\n    cluster: kind-{name}\n    user: kind-{name}\n  name: kind-{name}\ncurrent-context: kind-{name}\npreferences: {{}}\n\
             users:\n- name: kind-{name}\n  user:\n    token: sim-admin-{name}\n",
            ca = util::b64_encode(self.ca_pem(name).as_bytes()),
            port = c.host_port,
        ))
    }

    // ---- ids ------------------------------------------------------------------------------------

    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn hex_id(&mut self) -> String {
        let a = util::splitmix64(&mut self.rng);
        let b = util::splitmix64(&mut self.rng);
        format!("{a:016x}{b:016x}{a:016x}{b:016x}")
    }

    /// A random (version 4, variant 10) UUID.
    fn new_uid(&mut self) -> String {
        let h = self.hex_id();
        let (a, b, c, d, e) = (&h[..8], &h[8..12], &h[13..16], &h[17..20], &h[20..32]);
        format!("{a}-{b}-4{c}-a{d}-{e}")
    }

    // ---- objects --------------------------------------------------------------------------------

    /// A cluster's API server store.
    fn api(&self, cluster: &str) -> Option<&Store> {
        self.clusters.get(cluster).map(|c| &c.api)
    }

    pub(crate) fn get(&self, cluster: &str, gk: &str, ns: &str, name: &str) -> Option<&Value> {
        self.api(cluster)?.get(gk, ns, name)
    }

    /// Objects of a kind: in one namespace, or all (`None`).
    pub(crate) fn list<'a>(
        &'a self,
        cluster: &str,
        gk: &str,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + use<'a> {
        self.api(cluster)
            .map(|api| api.list(gk, ns))
            .into_iter()
            .flatten()
    }

    /// Namespaces that hold objects of a kind.
    pub(crate) fn namespaces_with(&self, cluster: &str, gk: &str) -> Vec<String> {
        self.api(cluster)
            .map_or_else(Vec::new, |a| a.namespaces_with(gk))
    }

    /// The first object of a kind with this name, in any namespace.
    pub(crate) fn find_named(&self, cluster: &str, gk: &str, name: &str) -> Option<&Value> {
        self.api(cluster)?.find_named(gk, name)
    }

    pub(crate) fn served(&self, cluster: &str, gk: &str) -> bool {
        self.api(cluster)
            .is_some_and(|a| apiserver::builtin_gk(gk) || a.crd_served(gk))
    }

    /// Creates or replaces an object, keeping the API server's metadata (uid, creationTimestamp,
    /// resourceVersion, generation). Returns whether anything changed.
    pub(crate) fn put(&mut self, cluster: &str, mut obj: Value) -> bool {
        let key = gk::of_obj(&obj);
        let ns = util::namespace(&obj).to_owned();
        let name = util::name(&obj).to_owned();
        let Some(c) = self.clusters.get(cluster) else {
            return false;
        };
        let tracks_generation = gk::tracks_generation(&key);
        let kind = if let Some(old) = c.api.get(&key, &ns, &name) {
            copy_server_fields(old, &mut obj);
            if &obj == old {
                return false;
            }
            let spec = !same_outside_meta_status(&obj, old);
            if spec && tracks_generation {
                let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
                obj["metadata"]["generation"] = json!(g);
            }
            let labels = obj["metadata"].get("labels") != old["metadata"].get("labels");
            ChangeKind::Updated { labels, spec }
        } else {
            let uid = self.new_uid();
            let meta = util::obj_at(&mut obj, &["metadata"]);
            meta.entry("uid").or_insert_with(|| json!(uid));
            meta.entry("creationTimestamp")
                .or_insert_with(|| json!(util::now_rfc3339()));
            if tracks_generation {
                meta.insert("generation".into(), json!(1));
            } else {
                meta.remove("generation");
            }
            ChangeKind::Created
        };
        let api = &mut self.clusters.get_mut(cluster).expect("checked above").api;
        api.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(api.rv.to_string());
        api.insert(&key, &ns, &name, obj);
        self.record(cluster, &key, &ns, &name, kind);
        true
    }

    /// Deletes an object with the API server's cascades: a Namespace takes its objects, a CRD its
    /// custom resources, and the garbage collector removes dependents whose ownerReferences name it.
    pub(crate) fn remove(
        &mut self,
        cluster: &str,
        key: &str,
        ns: &str,
        name: &str,
    ) -> Option<Value> {
        let api = &mut self.clusters.get_mut(cluster)?.api;
        let old = api.remove(key, ns, name)?;
        api.rv += 1;
        self.record(cluster, key, ns, name, ChangeKind::Deleted);
        let api = &self.clusters[cluster].api;
        let mut cascade = match gk::of_crd(&old) {
            _ if key == gk::NAMESPACE => api.all_in_namespace(name),
            Some(crd) if key == gk::CRD => {
                let id = |o| (crd.clone(), util::namespace(o).into(), util::name(o).into());
                api.list(&crd, None).map(id).collect()
            }
            _ => Vec::new(),
        };
        let uid = util::uid(&old);
        if !uid.is_empty() {
            cascade.extend(api.dependents(uid, Some(ns).filter(|ns| !ns.is_empty())));
        }
        for (k, n, m) in cascade {
            self.remove(cluster, &k, &n, &m);
        }
        Some(old)
    }

    /// Queues a change for the controllers and marks the cluster for its waiters.
    fn record(&mut self, cluster: &str, gk: &str, ns: &str, name: &str, kind: ChangeKind) {
        self.touched.insert(cluster.to_owned());
        let [cluster, gk, ns, name] = [cluster, gk, ns, name].map(str::to_owned);
        self.changes.push(Change {
            cluster,
            gk,
            ns,
            name,
            kind,
        });
    }

    /// A simulated cluster's CA certificate (PEM): what its kubeconfig, `cluster-info` and
    /// `kube-root-ca.crt` carry. Empty for an unknown cluster (which nothing trusts).
    pub fn ca_pem(&self, cluster: &str) -> &str {
        self.ca(cluster).map_or("", |ca| &ca.cert_pem)
    }

    /// The serving certificate a simulated cluster's API server presents (PEM, signed by its CA).
    pub fn apiserver_cert_pem(&self, cluster: &str) -> &str {
        self.ca(cluster).map_or("", |ca| &ca.apiserver_pem)
    }

    fn ca(&self, cluster: &str) -> Option<&super::certs::ClusterCa> {
        self.clusters.get(cluster)?.ca.as_ref()
    }

    /// The lab cluster whose agent registered ManagedCluster `mc` with `hub`.
    pub(crate) fn spoke_of(&self, hub: &str, mc: &str) -> Option<&str> {
        self.agents.get(&format!("{hub}/{mc}")).map(String::as_str)
    }
}

pub(crate) fn control_plane(cluster: &str) -> String {
    format!("{cluster}-control-plane")
}

/// The metadata the API server manages: a client's value is replaced by the stored one.
pub(crate) const SERVER_FIELDS: [&str; 4] =
    ["uid", "creationTimestamp", "resourceVersion", "generation"];

/// Equal once the server-managed metadata of `old` is copied into `new` (what [`World::put`] does).
pub(crate) fn same_ignoring_server_fields(old: &Value, new: &Value) -> bool {
    let mut new = new.clone();
    copy_server_fields(old, &mut new);
    &new == old
}

/// Replaces the server-managed metadata of `new` by that of `old`.
fn copy_server_fields(old: &Value, new: &mut Value) {
    let meta = util::obj_at(new, &["metadata"]);
    for k in SERVER_FIELDS {
        match old["metadata"].get(k) {
            Some(v) => meta.insert(k.to_owned(), v.clone()),
            None => meta.remove(k),
        };
    }
}

/// Whether two objects agree on everything but `metadata` and `status` (what bumps `generation`).
fn same_outside_meta_status(a: &Value, b: &Value) -> bool {
    fn rest(v: &Value) -> BTreeMap<&String, &Value> {
        let fields = v.as_object().into_iter().flatten();
        fields
            .filter(|(k, _)| *k != "metadata" && *k != "status")
            .collect()
    }
    rest(a) == rest(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_containers_of_a_cluster_are_those_labelled_so() {
        let mut w = World::default();
        w.create_cluster("a", "kindest/node:v1.36.1", false);
        w.add_container("a-worker", Some("a"), true);
        w.add_container("stray", Some("a"), false);
        w.add_container("b-control-plane", None, true);
        let names = |w: &World, c: &str| -> Vec<String> {
            w.containers_of(c).iter().map(|c| c.name.clone()).collect()
        };
        assert_eq!(names(&w, "a"), ["a-control-plane", "a-worker", "stray"]);
        assert!(
            names(&w, "b").is_empty(),
            "named like b's node, not labelled"
        );
        assert_eq!(w.kind_clusters(), ["a"]);
        // Look-alikes: labelled as a's nodes, or named as kind names them (not `a-b-control-plane`,
        // a node of cluster `a-b`).
        w.add_container("a-worker2", None, true);
        w.add_container("a-b-control-plane", None, true);
        let looks: Vec<&str> = w.look_alikes("a").iter().map(|c| c.name.as_str()).collect();
        assert_eq!(looks, ["a-control-plane", "a-worker", "a-worker2", "stray"]);
        // Replaced without the label, then removed.
        w.add_container("stray", None, true);
        assert_eq!(names(&w, "a"), ["a-control-plane", "a-worker"]);
        w.remove_cluster("a");
        assert!(names(&w, "a").is_empty());
        assert!(w.kind_clusters().is_empty());
        // Loaded from its saved form.
        w.add_container("c-control-plane", Some("c"), true);
        let back: World = serde_json::from_value(serde_json::to_value(&w).unwrap()).unwrap();
        assert_eq!(names(&back, "c"), ["c-control-plane"]);
        assert_eq!(back.kind_clusters(), ["c"]);
    }
}
