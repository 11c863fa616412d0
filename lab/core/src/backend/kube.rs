//! The Kubernetes API through kube-rs: [`KubeConnector`] builds clients from an explicit kubeconfig file and
//! context, and [`KubeApi`] implements [`ClusterApi`] with server-side apply, watches and discovery.
//!
//! Every write is server-side apply with the one field manager `ocm-lab`, except the two
//! OCM needs otherwise: a JSON merge patch (`hubAcceptsClient`) and a CSR's `/approval` subresource.
//! Waits are watches bounded by a timeout, never sleep loops.

mod classify;
mod error;
mod portforward;
mod resources;

use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher;
use ::kube::{Client, Config};
use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

pub use classify::{classify, classify_status, undeclared_fields};
pub use error::{ForbiddenCause, KubeError};
pub use portforward::PortForward;
use resources::{Resolved, Resources};

use super::{ClusterApi, Condition, Connector, ObjectRef, Secret, WaitError};

type Result<T, E = KubeError> = std::result::Result<T, E>;
use crate::topology::{Cluster, Provider};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "ocm-lab";
/// The message of the condition `approve_csr` adds (clusteradm writes the same with its own name).
pub const CSR_APPROVAL_MESSAGE: &str = "This CSR was approved by ocm-lab.";
/// How long `connect` waits for the API server's `/version` before calling it unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// Connects to lab clusters with their own kubeconfig file and context, never ambient state.
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeConnector;

impl KubeConnector {
    pub fn new() -> Self {
        KubeConnector
    }
}

/// The context the lab uses in `cluster`'s kubeconfig: `kind-<name>` in the lab's own file for kind
/// clusters, the topology's context for existing ones.
pub fn context_of(cluster: &Cluster) -> String {
    match &cluster.provider {
        Provider::Kind => format!("kind-{}", cluster.name),
        Provider::Existing { .. } => cluster.context.clone(),
    }
}

#[async_trait]
impl Connector for KubeConnector {
    async fn connect(&self, cluster: &Cluster, kubeconfig: &Path) -> Result<Arc<dyn ClusterApi>> {
        let context = context_of(cluster);
        let api = KubeApi::from_kubeconfig(kubeconfig, &context)
            .await
            .map_err(|e| {
                let help = match &cluster.provider {
                    Provider::Kind => format!(
                        "the lab writes this file when it creates the kind cluster: run `ocm-lab up`, or \
                         `kind export kubeconfig --name {} --kubeconfig {}`",
                        cluster.name,
                        kubeconfig.display()
                    ),
                    Provider::Existing { .. } => {
                        "fix `existing.kubeconfig` / `existing.context` of this cluster in the topology (or the `--kubeconfig` / `--context` flags that stand in for them when they are left out)"
                            .to_owned()
                    }
                };
                KubeError::Connect {
                    cluster: cluster.name.clone(),
                    source: Box::new(e),
                    help: Some(help),
                }
            })?;
        api.probe().await.map_err(|e| KubeError::Connect {
            cluster: cluster.name.clone(),
            source: Box::new(e),
            help: None,
        })?;
        Ok(Arc::new(api))
    }
}

/// A cluster's API: a kube-rs client and a discovery cache.
pub struct KubeApi {
    client: Client,
    resources: Resources,
    /// The API server's address, for messages.
    server: String,
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl KubeApi {
    /// The kind, the API and the parameters of a list of `kind` in `namespace` (all when `None` or
    /// cluster-scoped), selected by `labels`.
    async fn list_request(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<(Resolved, Api<DynamicObject>, ListParams)> {
        let res = self.resolve_required(api_version, kind).await?;
        let api: Api<DynamicObject> = match (res.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &res.ar),
            _ => Api::all_with(self.client.clone(), &res.ar),
        };
        let mut lp = ListParams::default();
        if let Some(sel) = labels.filter(|s| !s.is_empty()) {
            lp = lp.labels(sel);
        }
        Ok((res, api, lp))
    }
    /// Wraps a client; discovery runs on first use.
    pub fn new(client: Client) -> Self {
        KubeApi {
            client,
            resources: Resources::empty(),
            server: "the API server".to_owned(),
        }
    }

    /// Wraps a client with a discovery cache that already knows `(gvk, plural, namespaced)`; the full
    /// discovery never runs, and a kind not listed is looked up by its group version.
    pub fn with_resources(client: Client, resources: &[(GroupVersionKind, &str, bool)]) -> Self {
        KubeApi {
            client,
            resources: Resources::prefilled(resources),
            server: "the API server".to_owned(),
        }
    }

    /// A client for `context` of the kubeconfig file at `path`. Fails, with what to do, when the file
    /// or the context does not exist. Does not contact the server.
    pub async fn from_kubeconfig(path: &Path, context: &str) -> Result<Self> {
        let shown = path.display().to_string();
        // Reading and parsing the file blocks: off the async threads, since every step that connects
        // to a cluster comes here.
        let owned = path.to_owned();
        let read_shown = shown.clone();
        let kc = tokio::task::spawn_blocking(move || read_kubeconfig(&owned, read_shown))
            .await
            .map_err(|e| KubeError::TaskFailed {
                detail: e.to_string(),
            })??;
        if !kc.contexts.iter().any(|c| c.name == context) {
            return Err(KubeError::NoContext {
                path: shown,
                context: context.to_owned(),
                have: kc.contexts.iter().map(|c| c.name.clone()).collect(),
            });
        }
        let opts = KubeConfigOptions {
            context: Some(context.to_owned()),
            ..Default::default()
        };
        let config = Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| KubeError::BadContext {
                path: shown.clone(),
                context: context.to_owned(),
                detail: classify::chain(&e),
            })?;
        Self::from_config(config).map_err(|e| KubeError::UseContext {
            path: shown,
            context: context.to_owned(),
            source: Box::new(e),
        })
    }

    /// A client for a loaded configuration.
    pub fn from_config(config: Config) -> Result<Self> {
        let server = config.cluster_url.to_string();
        let server = server.trim_end_matches('/').to_owned();
        let client = Client::try_from(config).map_err(|e| KubeError::ClientBuild {
            server: server.clone(),
            detail: classify::chain(&e),
        })?;
        Ok(KubeApi {
            client,
            resources: Resources::empty(),
            server,
        })
    }

    /// The kube-rs client, for what the trait does not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The API server's address (or "the API server" when unknown).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Asks for `/version` within [`PROBE_TIMEOUT`].
    async fn probe(&self) -> Result<String> {
        match tokio::time::timeout(PROBE_TIMEOUT, self.version()).await {
            Ok(r) => r,
            Err(_) => Err(KubeError::ProbeTimeout {
                server: self.server.clone(),
                after: PROBE_TIMEOUT,
            }),
        }
    }

    fn err(&self, e: ::kube::Error) -> KubeError {
        classify::classify(e, &self.server)
    }

    /// Where a kind is served, `None` when it is not.
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<Option<Resolved>> {
        let gvk = parse_gvk(api_version, kind)?;
        self.resources
            .resolve(&self.client, &gvk)
            .await
            .map_err(|e| self.err(e))
    }

    /// Where a kind is served, or the error kubectl gives when it is not.
    async fn resolve_required(&self, api_version: &str, kind: &str) -> Result<Resolved> {
        self.resolve(api_version, kind)
            .await?
            .ok_or_else(|| no_matches(api_version, kind))
    }

    /// The API of one object's kind: cluster-scoped, in `namespace`, or in the context's namespace.
    fn object_api(&self, res: &Resolved, namespace: Option<&str>) -> Api<DynamicObject> {
        match (res.namespaced, namespace) {
            (false, _) => Api::all_with(self.client.clone(), &res.ar),
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &res.ar),
            (true, None) => Api::default_namespaced_with(self.client.clone(), &res.ar),
        }
    }

    /// Watches one object until `cond` holds, tracking what it saw in `seen`.
    async fn watch_until(
        &self,
        api: Api<DynamicObject>,
        res: &Resolved,
        name: &str,
        cond: &Condition,
        seen: &mut Seen,
    ) -> Result<Value> {
        // `watch_object` lists then watches with `fieldSelector=metadata.name=<name>`, and turns "absent
        // from the list" and deletions into `None`. The backoff spaces out restarts after errors.
        let mut stream = pin!(::kube::runtime::watcher::watch_object(api, name).default_backoff());
        while let Some(event) = stream.next().await {
            match event {
                Ok(obj) => {
                    seen.any = true;
                    seen.last = obj.map(|o| to_value(o, res));
                    if (cond.check)(seen.last.as_ref()) {
                        return Ok(seen.last.clone().unwrap_or(Value::Null));
                    }
                }
                Err(e) => {
                    let e = classify::classify_watch(e, &self.server);
                    if !e.is_transient() {
                        return Err(e);
                    }
                    tracing::debug!(object = name, "watch failed, retrying: {e}");
                    seen.error = Some(e);
                }
            }
        }
        Err(KubeError::WatchEnded { what: "the watch" })
    }

    /// Watches the CRDs until one that defines `kind` in `group`/`version` is Established, then checks
    /// discovery serves it.
    async fn watch_crds_until_served(
        &self,
        gvk: &GroupVersionKind,
        matched: &mut Option<Value>,
    ) -> Result<()> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let mut stream = pin!(watcher(crds, watcher::Config::default()).default_backoff());
        while let Some(event) = stream.next().await {
            let crd = match event {
                Ok(watcher::Event::Apply(crd) | watcher::Event::InitApply(crd)) => crd,
                Ok(_) => continue,
                Err(e) => {
                    let e = classify::classify_watch(e, &self.server);
                    if !e.is_transient() {
                        return Err(e);
                    }
                    tracing::debug!("CRD watch failed, retrying: {e}");
                    continue;
                }
            };
            if crd.spec.group != gvk.group || crd.spec.names.kind != gvk.kind {
                continue;
            }
            let ready = crd_established(&crd)
                && crd
                    .spec
                    .versions
                    .iter()
                    .any(|v| v.name == gvk.version && v.served);
            *matched = serde_json::to_value(&crd).ok();
            if ready {
                return self.served_after_established(gvk).await;
            }
        }
        Err(KubeError::WatchEnded {
            what: "the CRD watch",
        })
    }

    /// Discovery may lag an Established CRD, and no watch event marks the moment it catches up: ask
    /// discovery again, with a backoff that grows to 2 s, until it serves the kind. Only the caller's
    /// deadline ends this: going back to the watch after a fixed number of tries would wait for the
    /// CRD's next event, which may not come before the watch relists, minutes later.
    async fn served_after_established(&self, gvk: &GroupVersionKind) -> Result<()> {
        let mut pause = Duration::from_millis(50);
        loop {
            self.resources.forget(&gvk.api_version(), &gvk.kind);
            if self.resolve(&gvk.api_version(), &gvk.kind).await?.is_some() {
                return Ok(());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

#[async_trait]
impl ClusterApi for KubeApi {
    async fn get_via_service(
        &self,
        namespace: &str,
        service: &str,
        port: u16,
        path: &str,
        ca_pem: &[u8],
        token: &Secret,
    ) -> Result<(u16, String)> {
        let (local, forward) = self.port_forward_service(namespace, service, port).await?;
        let (path, ca, token) = (path.to_owned(), ca_pem.to_vec(), token.clone());
        let answer = tokio::task::spawn_blocking(move || {
            portforward::https_get_localhost(local, &path, &ca, &token)
        })
        .await
        .map_err(|e| KubeError::TaskFailed {
            detail: e.to_string(),
        })?;
        drop(forward);
        answer
    }

    async fn version(&self) -> Result<String> {
        let info = self
            .client
            .apiserver_version()
            .await
            .map_err(|e| self.err(e))?;
        Ok(info.git_version)
    }

    async fn served(&self, api_version: &str, kind: &str) -> Result<bool> {
        Ok(self.resolve(api_version, kind).await?.is_some())
    }

    async fn get(&self, r: &ObjectRef) -> Result<Option<Value>> {
        // A kind that is not served reads as absent, like a 404 on the object.
        let Some(res) = self.resolve(&r.api_version, &r.kind).await? else {
            return Ok(None);
        };
        let obj = self
            .object_api(&res, r.namespace.as_deref())
            .get_opt(&r.name)
            .await
            .map_err(|e| self.err(e))?;
        Ok(obj.map(|o| to_value(o, &res)))
    }

    async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>> {
        let (res, api, lp) = self
            .list_request(api_version, kind, namespace, labels)
            .await?;
        let list = api.list(&lp).await.map_err(|e| self.err(e))?;
        Ok(list.items.into_iter().map(|o| to_value(o, &res)).collect())
    }

    async fn list_metadata(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>> {
        let (_, api, lp) = self
            .list_request(api_version, kind, namespace, labels)
            .await?;
        let list = api.list_metadata(&lp).await.map_err(|e| self.err(e))?;
        Ok(list
            .items
            .into_iter()
            .map(|o| {
                serde_json::json!({
                    "apiVersion": api_version,
                    "kind": kind,
                    "metadata": serde_json::to_value(&o.metadata).unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn apply(&self, obj: &Value) -> Result<()> {
        let r = ObjectRef::of(obj).ok_or(KubeError::NoIdentity)?;
        let res = self.resolve_required(&r.api_version, &r.kind).await?;
        let mut body = obj.clone();
        if !res.namespaced
            && let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut)
            && meta.remove("namespace").is_some()
        {
            // Charts sometimes set a namespace on cluster-scoped objects; kubectl ignores it, and the API
            // server would reject the mismatch with the request path.
            tracing::debug!(object = %r, "dropped metadata.namespace from a cluster-scoped object");
        }
        let pp = PatchParams::apply(FIELD_MANAGER)
            .force()
            .validation_strict();
        let api = self.object_api(&res, r.namespace.as_deref());
        tracing::debug!(object = %r, "server-side apply");
        match api.patch(&r.name, &pp, &Patch::Apply(&body)).await {
            Ok(_) => Ok(()),
            Err(::kube::Error::Api(s))
                if s.code == 404 && s.details.as_ref().is_none_or(|d| d.kind != "namespaces") =>
            {
                // The kind went away since discovery (its CRD was deleted): look it up again next time.
                self.resources.forget(&r.api_version, &r.kind);
                Err(no_matches(&r.api_version, &r.kind))
            }
            Err(e) => Err(self.err(e)),
        }
    }

    async fn merge_patch(&self, r: &ObjectRef, patch: &Value) -> Result<()> {
        let res = self.resolve_required(&r.api_version, &r.kind).await?;
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..Default::default()
        };
        self.object_api(&res, r.namespace.as_deref())
            .patch(&r.name, &pp, &Patch::Merge(patch))
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    async fn delete(&self, r: &ObjectRef) -> Result<bool> {
        // A kind that is not served has nothing left to delete.
        let Some(res) = self.resolve(&r.api_version, &r.kind).await? else {
            return Ok(false);
        };
        match self
            .object_api(&res, r.namespace.as_deref())
            .delete(&r.name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(true),
            Err(::kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    async fn wait(
        &self,
        r: &ObjectRef,
        cond: &Condition,
        timeout: Duration,
    ) -> Result<Value, WaitError> {
        let deadline = Instant::now() + timeout;
        let timed_out = |last: Option<Value>| WaitError::Timeout {
            object: r.clone(),
            condition: cond.description.clone(),
            after: timeout,
            last,
        };
        let res = match self.resolve(&r.api_version, &r.kind).await? {
            Some(res) => res,
            // The kind is not served, so the object does not exist.
            None if (cond.check)(None) => return Ok(Value::Null),
            None => {
                // Its CRD may be on the way: wait for the kind within the same deadline.
                match self
                    .wait_served(&r.api_version, &r.kind, remaining(deadline))
                    .await
                {
                    Ok(()) => self.resolve_required(&r.api_version, &r.kind).await?,
                    Err(WaitError::Timeout { .. }) => return Err(timed_out(None)),
                    Err(e) => return Err(e),
                }
            }
        };
        let api = self.object_api(&res, r.namespace.as_deref());
        let mut seen = Seen::default();
        let outcome = tokio::time::timeout(
            remaining(deadline),
            self.watch_until(api, &res, &r.name, cond, &mut seen),
        )
        .await;
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(WaitError::Backend(e)),
            Err(_) => match seen.error {
                // Nothing was ever seen because the watch kept failing: say why, not "it does not exist".
                Some(e) if !seen.any => Err(WaitError::Backend(KubeError::WatchKeptFailing {
                    object: Box::new(r.clone()),
                    condition: cond.description.clone(),
                    after: timeout,
                    source: Box::new(e),
                })),
                _ => Err(timed_out(seen.last)),
            },
        }
    }

    async fn wait_served(
        &self,
        api_version: &str,
        kind: &str,
        timeout: Duration,
    ) -> Result<(), WaitError> {
        let deadline = Instant::now() + timeout;
        if self.served(api_version, kind).await? {
            return Ok(());
        }
        let gvk = parse_gvk(api_version, kind)?;
        let mut matched = None;
        let outcome = tokio::time::timeout(
            remaining(deadline),
            self.watch_crds_until_served(&gvk, &mut matched),
        )
        .await;
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(WaitError::Backend(e)),
            Err(_) => Err(WaitError::crd_not_established(
                api_version,
                kind,
                timeout,
                matched,
            )),
        }
    }

    async fn token_request(
        &self,
        namespace: &str,
        service_account: &str,
        seconds: i64,
    ) -> Result<Secret> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(seconds),
                ..Default::default()
            },
            ..Default::default()
        };
        let resp = api
            .create_token_request(service_account, &PostParams::default(), &req)
            .await
            .map_err(|e| self.err(e))?;
        resp.status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .map(Secret::new)
            .ok_or_else(|| KubeError::NoToken {
                service_account: ns_name(namespace, service_account),
            })
    }

    async fn approve_csr(&self, name: &str, reason: &str) -> Result<()> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let mut csr = api
            .get_opt(name)
            .await
            .map_err(|e| self.err(e))?
            .ok_or_else(|| KubeError::CsrMissing {
                name: name.to_owned(),
            })?;
        let conditions = csr
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        let has = |t: &str| {
            conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        };
        if has("Approved") {
            return Ok(());
        }
        if has("Denied") {
            return Err(KubeError::CsrDenied {
                name: name.to_owned(),
            });
        }
        // What `clusteradm accept` does (open-cluster-management-io/clusteradm v1.3.1
        // `pkg/cmd/accept/exec.go`); the API server fills in the timestamps.
        conditions.push(CertificateSigningRequestCondition {
            type_: "Approved".to_owned(),
            status: "True".to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(CSR_APPROVAL_MESSAGE.to_owned()),
            ..Default::default()
        });
        api.replace_subresource("approval", name, &PostParams::default(), &csr)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

/// What a wait saw, kept outside the watch future so a timeout can report it.
#[derive(Default)]
struct Seen {
    /// Whether any state (including "absent") was observed.
    any: bool,
    /// The last state: `None` when the object did not exist.
    last: Option<Value>,
    /// The last (transient) watch error.
    error: Option<KubeError>,
}

/// `group/version` (or `v1` for the core group) and kind.
fn parse_gvk(api_version: &str, kind: &str) -> Result<GroupVersionKind> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    if version.is_empty() || version.contains('/') || kind.is_empty() {
        return Err(KubeError::BadKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
    }
    Ok(GroupVersionKind::gvk(group, version, kind))
}

/// What kubectl says when discovery does not know a kind.
fn no_matches(api_version: &str, kind: &str) -> KubeError {
    KubeError::NotServed {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    }
}

/// Reads the kubeconfig file at `path` (shown as `shown`). Blocking.
fn read_kubeconfig(path: &Path, shown: String) -> Result<Kubeconfig> {
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(KubeError::KubeconfigMissing { path: shown });
        }
        Err(e) => {
            return Err(KubeError::KubeconfigUnreadable {
                path: shown,
                detail: e.to_string(),
            });
        }
    }
    Kubeconfig::read_from(path).map_err(|e| KubeError::KubeconfigUnreadable {
        path: shown,
        detail: classify::chain(&e),
    })
}

/// An object as JSON, with the `apiVersion` and `kind` that list responses leave out of their items.
fn to_value(obj: DynamicObject, res: &Resolved) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(res.ar.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::String(res.ar.kind.clone()));
    }
    v
}

fn crd_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn ns_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CA of the recorded hub (fixtures/recorded/7-tokenrequest-cluster-info), a real certificate.
    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIDCzCCAfOgAwIBAgIUcpZebiyLgEUASBA7YwfVZlzSKGgwDQYJKoZIhvcNAQEL
BQAwFTETMBEGA1UEAwwKcmlnLWh1Yi1jYTAeFw0yNjExMjIwMjM0MjhaFw0zNjEx
MTkwMjM0MjhaMBUxEzARBgNVBAMMCnJpZy1odWItY2EwggEiMA0GCSqGSIb3DQEB
AQUAA4IBDwAwggEKAoIBAQDHUxvVTkz4jEqFX9z4bMY85I7t9hwwBXWFNuYqa+Kx
Fq0UVcfvdZLzatKZ5sH0szrxNX+N0dRriHM7qjYCYq0HBEKithNliB86/pkU72E1
ffX0hZqbfuoP60sjvD4K/Y71F3DJhG6PNGaQ61ZS+wEUnnXlEUdX5PViTiiBXoAO
YhwgYyJiScJ4ijbsuKrRoxGHQnyp/b08IsvhGGRUGexCvtHcwZr1nwH/L3Y5FeNQ
gP6bUnRy1Mvg5TKXZXJ+Bc398RAhwSw0Md+VVyaMCkinxasVD/NLAfqAZJbVTGpT
dxQyuVaq2bU1SyCcVmfnzVAqElM1lP1Wtxbl9jWTOOLhAgMBAAGjUzBRMB0GA1Ud
DgQWBBTyQyo6Xvu6Ij6i6JtEjb3GO0yPVTAfBgNVHSMEGDAWgBTyQyo6Xvu6Ij6i
6JtEjb3GO0yPVTAPBgNVHRMBAf8EBTADAQH/MA0GCSqGSIb3DQEBCwUAA4IBAQBH
iWrFZBYPlO4RUS7ncQRn3Mbhm2EbYT2og+LdzihxT36ij6OSXb8yOqbwtWakfMwI
lnTq3Va2fkuNc8jaExky67C37KQ2SDVILOrBY9bySUv3kavt4uEIVFfSdCcw9q6d
fzcqdeiV0oDOrd9/h8E0mdkPO8qkRQHOPYNFfVtsMiVHAodAOAzRgjCzx4bF6qx4
hrXmX90R6NqgikbXU9p6EqbxLMoOYhy9ipdkTVAhJkJ/dXUwPyRERl5NFRCxU4cz
GxGnds0z9RC+8PS4xi0ICP3/NWdLd3Tqrso1RC0R6D65rqQM+kyCV7kWAlcZyBz0
PCuTfoVHYuAyWYztRL/U
-----END CERTIFICATE-----
";

    fn kubeconfig(dir: &Path) -> std::path::PathBuf {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(CA_PEM);
        let text = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: kind-hub
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: {ca}
users:
- name: kind-hub
  user:
    token: not-a-real-token
contexts:
- name: kind-hub
  context:
    cluster: kind-hub
    user: kind-hub
    namespace: open-cluster-management
- name: other
  context:
    cluster: kind-hub
    user: kind-hub
current-context: other
"
        );
        let path = dir.join("kubeconfig");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Two rustls crypto providers in the build make `Client::try_from` panic at run
    /// time with an https server and CA data. This builds exactly that client.
    #[tokio::test]
    async fn builds_an_https_client_from_a_kubeconfig_with_inline_ca() {
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(dir.path());
        let api = KubeApi::from_kubeconfig(&path, "kind-hub").await.unwrap();
        assert_eq!(api.server(), "https://127.0.0.1:6443");
        // The context, not `current-context`, picks the default namespace.
        assert_eq!(api.client().default_namespace(), "open-cluster-management");
    }

    #[tokio::test]
    async fn a_missing_context_lists_the_contexts_the_file_has() {
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(dir.path());
        let e = KubeApi::from_kubeconfig(&path, "kind-spoke1")
            .await
            .unwrap_err();
        assert!(!e.is_transient());
        assert!(
            e.to_string()
                .ends_with("has no context `kind-spoke1` (it has: kind-hub, other)"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_missing_file_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent");
        let e = KubeApi::from_kubeconfig(&path, "kind-hub")
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("kubeconfig {} does not exist", path.display())
        );
    }

    #[tokio::test]
    async fn connect_names_the_cluster_and_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster {
            name: "spoke1".into(),
            role: crate::topology::Role::Spoke,
            provider: Provider::Kind,
            context: "kind-spoke1".into(),
            internal_endpoint: None,
            adopt: false,
        };
        let path = dir.path().join("spoke1.kubeconfig");
        let e = match KubeConnector::new().connect(&cluster, &path).await {
            Ok(_) => panic!("connected without a kubeconfig"),
            Err(e) => e,
        };
        assert!(
            e.to_string()
                .starts_with("failed to connect to cluster `spoke1`: kubeconfig")
        );
        assert!(
            e.help()
                .unwrap()
                .contains("kind export kubeconfig --name spoke1")
        );
    }

    #[tokio::test]
    async fn connect_to_a_closed_port_is_transient_and_says_what_to_do() {
        // A port nothing listens on: bind, note the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(dir.path());
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("127.0.0.1:6443", &format!("127.0.0.1:{port}"));
        std::fs::write(&path, text).unwrap();
        let cluster = Cluster {
            name: "hub".into(),
            role: crate::topology::Role::Hub,
            provider: Provider::Existing {
                kubeconfig: path.display().to_string(),
                context: "kind-hub".into(),
            },
            context: "kind-hub".into(),
            internal_endpoint: None,
            adopt: false,
        };
        let e = match KubeConnector::new().connect(&cluster, &path).await {
            Ok(_) => panic!("connected to a closed port"),
            Err(e) => e,
        };
        assert!(e.is_transient(), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!(
                "failed to connect to cluster `hub`: failed to reach the API server at https://127.0.0.1:{port}"
            )),
            "{e}"
        );
        assert!(
            e.help()
                .unwrap()
                .contains("check that the cluster is running")
        );
    }

    #[test]
    fn parses_api_versions() {
        let g = parse_gvk("v1", "Namespace").unwrap();
        assert_eq!((g.group.as_str(), g.version.as_str()), ("", "v1"));
        let g = parse_gvk("cluster.open-cluster-management.io/v1", "ManagedCluster").unwrap();
        assert_eq!(g.group, "cluster.open-cluster-management.io");
        assert!(parse_gvk("a/b/c", "X").is_err());
        assert!(parse_gvk("", "X").is_err());
    }
}
