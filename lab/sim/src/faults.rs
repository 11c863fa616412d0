//! Faults a test can put on any simulated behaviour: a delay, a one-off failure, a permanent failure.

use std::time::Duration;

/// A simulated behaviour: a backend call, or something a simulated component does on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Behaviour {
    // Backend calls.
    /// `ContainerRuntime::ping` and the read-only Docker/kind calls (`node_containers`, kind `list`,
    /// `export_kubeconfig`): "the Docker daemon answers".
    DockerPing,
    /// `ContainerRuntime::ensure_network`.
    DockerNetwork,
    /// `ClusterProvisioner::create`.
    KindCreate,
    /// `ClusterProvisioner::delete`.
    KindDelete,
    /// `ChartRenderer::template`.
    HelmTemplate,
    /// `Connector::connect`.
    Connect,
    /// `ClusterApi::version`, `served`, `get`, `list` (waits are not faulted: delay what they wait for).
    KubeRead,
    /// `ClusterApi::apply`.
    Apply,
    /// `ClusterApi::merge_patch`.
    MergePatch,
    /// `ClusterApi::delete`.
    Delete,
    /// `ClusterApi::token_request`.
    TokenRequest,
    /// `ClusterApi::approve_csr`.
    CsrApprove,
    /// `ClusterApi::get_via_service` (port-forward and request).
    ServiceRequest,
    /// `ContainerRuntime::import_node_image`: a bundle's archive imported into a node's containerd.
    NodeImageImport,
    /// OCM's hub webhooks answer (open-cluster-management-io/ocm v1.3.1 `manifests/cluster-manager/hub/`),
    /// for every write through a registered hub admission webhook or the addon conversion webhook.
    /// `FailOnce(why)`: the next such write gets the API server's HTTP 500 for a webhook it cannot call (as
    /// while the webhook's Pod is not ready), transient like the real one; `FailAlways(why)`: every such
    /// write does (a client retries it until its deadline). `Delay` is not modelled.
    HubWebhooks,
    // Controllers.
    /// The API server marks a new CRD Established.
    CrdEstablish,
    /// The Deployment controller reports a Deployment Available.
    DeploymentRollout,
    /// The cluster-manager operator installs the hub (open-cluster-management-io/ocm v1.3.1
    /// `pkg/operator/operators/clustermanager/`). A rollout: see [`Behaviour::is_rollout`].
    HubOperator,
    /// The klusterlet operator installs the agents and spoke CRDs (open-cluster-management-io/ocm v1.3.1
    /// `pkg/operator/operators/klusterlet/`). A rollout.
    KlusterletOperator,
    /// The registration agent creates the ManagedCluster and its CSR (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/spoke/`).
    Registration,
    /// The CSR signer issues the agent's certificate.
    CsrSign,
    /// The hub accepts the cluster and the agent joins (open-cluster-management-io/clusteradm v1.3.1
    /// `pkg/cmd/accept/exec.go`).
    HubAccept,
    /// The agent copies ClusterProperties into ManagedCluster claims (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/spoke/managedcluster/claim_reconcile.go`; recorded from kube-apiserver v1.36.2 and
    /// open-cluster-management-io/ocm 00f84c32).
    ClaimSync,
    /// Bindings become Bound; sets count their clusters (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/hub/managedclustersetbinding/`, `pkg/registration/hub/managedclusterset/`).
    SetBinding,
    /// ClusterProfiles created/deleted per bound namespace (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/hub/clusterprofile/`).
    ProfileLifecycle,
    /// ClusterProfile status copied from the ManagedCluster (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/hub/clusterprofile/`).
    ProfileStatus,
    /// Placements choose clusters (open-cluster-management-io/ocm v1.3.1
    /// `pkg/placement/controllers/scheduling/`).
    Placement,
    /// The hub's addon manager (`cluster-manager-addon-manager-controller`, part of the hub) creates a
    /// ManagedClusterAddOn in each cluster namespace its Placements decide, and deletes the ones they no
    /// longer decide (open-cluster-management-io/ocm v1.3.1
    /// `pkg/addon/controllers/addonmanagement/addon_install_reconciler.go`).
    AddonPlacement,
    /// An addon's agent rolls out on a cluster and its ManagedClusterAddOn becomes Available
    /// (open-cluster-management-io/ocm v1.3.1 `pkg/registration/spoke/addon/lease_controller.go`: `Available`
    /// comes from the agent's lease). A rollout.
    AddonInstall,
    /// cluster-proxy creates the user server's serving certificate (open-cluster-management-io/cluster-proxy
    /// v0.10.0 `pkg/proxyserver/controllers/managedproxyconfiguration_controller.go`).
    ProxyServingCert,
    /// cluster-proxy writes `status.accessProviders` (open-cluster-management-io/cluster-proxy v0.10.0
    /// `pkg/proxyserver/controllers/clusterprofile_controller.go`).
    ProxyAccessProvider,
    /// managed-serviceaccount mints the token Secret (open-cluster-management-io/managed-serviceaccount v0.10.0
    /// `pkg/addon/agent/controller/token.go`).
    MsaToken,
    /// managed-serviceaccount copies tokens next to ClusterProfiles
    /// (open-cluster-management-io/managed-serviceaccount v0.10.0
    /// `pkg/addon/manager/controller/clusterprofile_cred_syncer.go`).
    MsaCredSync,
    /// The spoke's cluster-proxy agent connects its tunnel to the hub's proxy server, some time after the
    /// addon is `Available` (open-cluster-management-io/cluster-proxy v0.10.0 `cmd/addon-agent/main.go`: no
    /// status reports it). Delayed, the user server answers 502 `No agent available` meanwhile; failing always,
    /// it never connects.
    ProxyTunnel,
    /// The hub's proxy server accepts the user server's tunnel (open-cluster-management-io/cluster-proxy
    /// v0.10.0 `pkg/userserver/user_server.go`). Failing (once or always), the user server answers 400 with the
    /// gRPC error. Checked on every request through the user server.
    ProxyServer,
    /// A node pulls an image from its registry: the kubelet, when a Deployment's Pod needs an image its
    /// node lacks (one at a time per node, as the kubelet's default `serializeImagePulls: true` does), and
    /// `ContainerRuntime::pull_in_node` (the `node-images` step's `crictl pull`, in parallel). `Delay(d)`:
    /// each pull of a missing image takes `d` (an image pre-pulled or loaded from a bundle costs nothing at
    /// rollout); no fault pulls at once. `FailAlways`: a Deployment waiting for the image shows
    /// `ErrImagePull`, the pre-pull warns.
    ImagePull,
    /// The kubelet mounts the registration agent's bootstrap Secret volume into a Pod that started before
    /// the Secret existed: it waits in `Pending` while the kubelet retries the mount with a backoff that
    /// doubles from 500 ms up to 2 min 2 s (kubernetes
    /// `pkg/util/goroutinemap/exponentialbackoff/exponential_backoff.go`). `Delay(d)`: the waiting Pod
    /// starts `d` after the Secret appears (its next retry); no fault: as soon as it is there. A Pod
    /// started after the Secret exists mounts it at once.
    BootstrapMount,
    /// The kubelet runs the `consumer` check's Pod on the hub to its end (the consumer in it, and its
    /// `cp-creds`). `Delay(d)`: it ends `d` after it was created; failing, it never runs (Pending).
    PodRun,
}

impl Behaviour {
    /// Behaviours whose delay is a rollout (Pods pulled and started): charged on a controller's first act
    /// on a work item only. The operator's later passes on the same item react to its Deployments (the
    /// cluster-manager operator reconciles on Deployment events, and 5 s after a not-ready requeue,
    /// open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_controller.go`), and an addon's
    /// status afterwards follows its lease (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/spoke/addon/lease_controller.go`), so they act at once. A fault set anew, or the
    /// cluster removed, charges the next act again.
    pub fn is_rollout(self) -> bool {
        matches!(
            self,
            Behaviour::HubOperator | Behaviour::KlusterletOperator | Behaviour::AddonInstall
        )
    }
}

/// What goes wrong with a behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// A call takes this long; a controller acts only this long after it first wanted to (a rollout's
    /// controller only on its first act on a work item, [`Behaviour::is_rollout`]).
    Delay(Duration),
    /// The next call fails with a transient error; a controller's next attempt fails and it
    /// succeeds when it retries.
    FailOnce(String),
    /// Every call fails with a permanent error; a controller never acts and shows the failure on the
    /// object it would have touched.
    FailAlways(String),
}

/// The reason simulated failures carry on conditions.
pub const SIMULATED_FAILURE: &str = "SimulatedFailure";

/// How long a controller whose attempt failed once waits before retrying (controller-runtime's
/// rate limiter starts at milliseconds; this is long enough for a test to see the failure).
pub const FAIL_ONCE_REQUEUE: Duration = Duration::from_millis(50);
