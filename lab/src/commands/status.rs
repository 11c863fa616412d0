//! `ocm-lab status`: what the lab's clusters report now, read-only ([`run`], at the end).

use std::fmt::Write as _;

use serde::Serialize;

use crate::backend::kinds::{ClusterProfile, HasConditions, ManagedCluster, ManagedClusterAddOn};
use crate::backend::{Api, Backends, ClusterApi};
use crate::step::RunCtx;
use crate::topology::{Lab, Provider};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub lab: String,
    pub simulated: bool,
    pub clusters: Vec<ClusterStatus>,
    pub managed_clusters: Vec<ManagedClusterStatus>,
    pub profiles: Vec<NamespaceProfiles>,
    /// kind clusters the ownership record holds that the topology no longer declares: the next `up`
    /// deletes them (`down` too, whatever topology it is given).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub departed: Vec<String>,
    /// The last verification recorded in the state folder.
    pub last_verification: Option<crate::verify::report::LastVerification>,
    /// Why the recorded last verification cannot be read (a damaged file is reported, never skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verification_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub name: String,
    pub provider: &'static str,
    /// Whether the lab created the cluster (kind) or someone else runs it (`existing:`, never deleted by
    /// the lab).
    pub created_by_lab: bool,
    /// For existing clusters: the kubeconfig context the lab reaches it through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// For kind clusters: the control-plane container runs.
    pub running: Option<bool>,
    pub reachable: bool,
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    pub name: String,
    pub exists: bool,
    pub joined: bool,
    pub available: bool,
    /// The registration agent stopped renewing its lease: `ManagedClusterConditionAvailable` is Unknown
    /// with reason `ManagedClusterLeaseUpdateStopped` (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/hub/lease/controller.go`).
    pub agent_stopped: bool,
    pub addons: Vec<AddonStatus>,
}

/// One addon of a managed cluster: its ManagedClusterAddOn's `Available` condition.
#[derive(Debug, Clone, Serialize)]
pub struct AddonStatus {
    pub name: String,
    pub available: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceProfiles {
    pub namespace: String,
    pub profiles: Vec<ProfileStatus>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileStatus {
    pub name: String,
    pub properties: usize,
    pub access_providers: usize,
    pub healthy: bool,
}

impl Status {
    /// Everything fine: every cluster reachable, every ManagedCluster joined and available, every addon up.
    pub fn healthy(&self) -> bool {
        self.clusters.iter().all(|c| c.reachable)
            && self
                .managed_clusters
                .iter()
                .all(|m| m.joined && m.available && m.addons.iter().all(|a| a.available))
    }
}

/// Reads the lab's status through the backends.
pub async fn collect(ctx: &RunCtx) -> Status {
    let lab = &ctx.lab;
    let mut clusters = Vec::new();
    for c in lab.clusters() {
        clusters.push(cluster_status(ctx, &ctx.backends, c).await);
    }
    let hub_ok = clusters.first().is_some_and(|c| c.reachable);
    let hub = if hub_ok {
        ctx.api(&lab.hub.cluster.name).await.ok()
    } else {
        None
    };
    let (managed_clusters, profiles) = match &hub {
        Some(hub) => (
            managed(lab, hub.as_ref()).await,
            profiles(lab, hub.as_ref()).await,
        ),
        None => (Vec::new(), Vec::new()),
    };
    let (last_verification, last_verification_error) = match ctx.state.last_verification_report() {
        Ok(report) => (report, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let departed = ctx
        .state
        .owned_lenient()
        .map(|o| o.departed(|n| lab.cluster(n).is_some()))
        .unwrap_or_default();
    Status {
        lab: lab.name.clone(),
        simulated: ctx.backends.simulated,
        clusters,
        managed_clusters,
        profiles,
        departed,
        last_verification,
        last_verification_error,
    }
}

async fn cluster_status(
    ctx: &RunCtx,
    backends: &Backends,
    c: &crate::topology::Cluster,
) -> ClusterStatus {
    let (provider, running) = match c.provider {
        Provider::Kind => {
            let nodes = backends
                .docker
                .node_containers(&c.name)
                .await
                .unwrap_or_default();
            (
                "kind",
                Some(
                    nodes
                        .iter()
                        .any(|n| n.role == crate::backend::NodeRole::ControlPlane && n.running),
                ),
            )
        }
        Provider::Existing { .. } => ("existing", None),
    };
    let (reachable, version, error) = if running == Some(false) {
        (
            false,
            None,
            Some("no running control-plane container".to_owned()),
        )
    } else {
        match ctx.api(&c.name).await {
            Ok(api) => match api.version().await {
                Ok(v) => (true, Some(v), None),
                Err(e) => (false, None, Some(e.to_string())),
            },
            Err(e) => (false, None, Some(e.to_string())),
        }
    };
    let existing = matches!(c.provider, Provider::Existing { .. });
    ClusterStatus {
        name: c.name.clone(),
        provider,
        created_by_lab: !existing,
        context: existing.then(|| c.context.clone()),
        running,
        reachable,
        version,
        error,
    }
}

async fn managed(lab: &Lab, hub: &dyn ClusterApi) -> Vec<ManagedClusterStatus> {
    let mut out = Vec::new();
    for m in &lab.managed_clusters {
        let mc = Api::<ManagedCluster>::all(hub)
            .get(&m.name)
            .await
            .ok()
            .flatten();
        let mut states = Vec::new();
        for a in crate::topology::Addon::ALL {
            let wanted = lab.addons.clusters(a).is_some_and(|c| c.contains(&m.name));
            if !wanted {
                continue;
            }
            let mca = Api::<ManagedClusterAddOn>::namespaced(hub, &m.name)
                .get(a.as_str())
                .await
                .ok()
                .flatten();
            states.push(AddonStatus {
                name: a.as_str().to_owned(),
                available: mca.as_ref().is_some_and(|o| o.condition_true("Available")),
            });
        }
        out.push(ManagedClusterStatus {
            name: m.name.clone(),
            exists: mc.is_some(),
            joined: mc
                .as_ref()
                .is_some_and(|o| o.condition_true("ManagedClusterJoined")),
            available: mc
                .as_ref()
                .is_some_and(|o| o.condition_true("ManagedClusterConditionAvailable")),
            agent_stopped: mc.as_ref().is_some_and(|o| {
                crate::verify::agent_stopped(o, "ManagedClusterConditionAvailable")
            }),
            addons: states,
        });
    }
    out
}

async fn profiles(lab: &Lab, hub: &dyn ClusterApi) -> Vec<NamespaceProfiles> {
    let mut out = Vec::new();
    if !Api::<ClusterProfile>::all(hub)
        .served()
        .await
        .unwrap_or(false)
    {
        return out;
    }
    for ns in &lab.namespaces {
        let list = Api::<ClusterProfile>::namespaced(hub, ns)
            .list(None)
            .await
            .unwrap_or_default();
        let profiles = list
            .iter()
            .map(|p| ProfileStatus {
                name: p.metadata.name.clone().unwrap_or_else(|| "?".to_owned()),
                properties: p.status.as_ref().map_or(0, |s| s.properties.len()),
                access_providers: p.status.as_ref().map_or(0, |s| s.access_providers.len()),
                healthy: p.condition_true("ControlPlaneHealthy") && p.condition_true("Joined"),
            })
            .collect();
        out.push(NamespaceProfiles {
            namespace: ns.clone(),
            profiles,
        });
    }
    out
}

/// The human form.
pub fn render(s: &Status) -> String {
    render_for(s, "ocm-lab verify")
}

/// The human form, advising `verify_cmd` (the user's own `-t` and `--simulate`) when nothing was verified.
pub fn render_for(s: &Status, verify_cmd: &str) -> String {
    let mut out = String::new();
    let sim = if s.simulated {
        " (SIMULATED lab: a test double, not real clusters)"
    } else {
        ""
    };
    let _ = writeln!(out, "Lab `{}`{sim}", s.lab);
    let _ = writeln!(out, "\nClusters:");
    for c in &s.clusters {
        let state = match (c.reachable, &c.error) {
            (true, _) => format!(
                "reachable, Kubernetes {}",
                c.version.as_deref().unwrap_or("?")
            ),
            (false, Some(e)) => format!("NOT reachable: {e}"),
            (false, None) => "NOT reachable".to_owned(),
        };
        let owner = match &c.context {
            Some(ctx) => format!("; not created by this lab (context {ctx}), never deleted by it"),
            None => String::new(),
        };
        let _ = writeln!(out, "  {:<16} {:<9} {state}{owner}", c.name, c.provider);
    }
    for d in &s.departed {
        let _ = writeln!(
            out,
            "  {d:<16} {:<9} left the topology: created by this lab, deleted by the next `up` (or `down`)",
            "kind"
        );
    }
    render_managed(&mut out, s);
    render_profiles(&mut out, s);
    match (&s.last_verification, &s.last_verification_error) {
        (_, Some(e)) => {
            let _ = writeln!(
                out,
                "\nLast verification: UNREADABLE: {e} (run `{verify_cmd}` to record a new one)"
            );
        }
        (Some(v), None) => {
            let _ = writeln!(
                out,
                "\nLast verification: {} at {}",
                if v.ok { "passed" } else { "FAILED" },
                v.at
            );
        }
        (None, None) => {
            let _ = writeln!(
                out,
                "\nLast verification: none recorded (run `{verify_cmd}`)"
            );
        }
    }
    out
}

/// The ManagedClusters section of [`render_for`].
fn render_managed(out: &mut String, s: &Status) {
    if !s.managed_clusters.is_empty() {
        let _ = writeln!(out, "\nManaged clusters:");
        for m in &s.managed_clusters {
            let state = match (m.exists, m.joined, m.available) {
                (false, _, _) => "not registered".to_owned(),
                (true, false, _) => "registered, not joined".to_owned(),
                (true, true, false) if m.agent_stopped => {
                    "joined, NOT available: its registration agent stopped updating its lease (ManagedClusterLeaseUpdateStopped)".to_owned()
                }
                (true, true, false) => "joined, NOT available".to_owned(),
                (true, true, true) => "joined, available".to_owned(),
            };
            let addons: Vec<String> = m
                .addons
                .iter()
                .map(|a| {
                    let state = if a.available {
                        "available"
                    } else {
                        "NOT available"
                    };
                    format!("{} {state}", a.name)
                })
                .collect();
            let _ = writeln!(
                out,
                "  {:<16} {state}; {}",
                m.name,
                if addons.is_empty() {
                    "no addons".to_owned()
                } else {
                    addons.join(", ")
                }
            );
        }
    }
}

/// The ClusterProfiles section of [`render_for`].
fn render_profiles(out: &mut String, s: &Status) {
    if !s.profiles.is_empty() {
        let _ = writeln!(out, "\nClusterProfiles:");
        for ns in &s.profiles {
            let list: Vec<String> = ns
                .profiles
                .iter()
                .map(|p| {
                    format!(
                        "{} ({}, {}{})",
                        p.name,
                        crate::text::count(p.properties, "property", "properties"),
                        crate::text::count(p.access_providers, "provider", "providers"),
                        if p.healthy { "" } else { ", UNHEALTHY" }
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  {:<32} {}",
                ns.namespace,
                if list.is_empty() {
                    "none".to_owned()
                } else {
                    list.join(", ")
                }
            );
        }
    }
}

/// `ocm-lab status`: read-only, so it takes no lock. Exit 1 when something is unhealthy.
pub fn run(
    args: &crate::cli::StatusArgs,
    host: &crate::topology::Host,
) -> Result<(), crate::error::Error> {
    use super::runner::{Purpose, look_at, open_backends, runtime};
    use crate::error::Error;
    use crate::step::events::Events;
    let output = args.output.output;
    let args = crate::cli::RunArgs::from(args);
    let (lab, state, patches) = look_at(&args, host)?;
    let rt = runtime()?;
    let opened = open_backends(&rt, &args, &state, Purpose::Look, &lab)?;
    let status = rt.block_on(async {
        let (events, _rx) = Events::channel();
        let ctx = RunCtx::new(
            lab,
            opened.backends.clone(),
            state.clone(),
            patches,
            events,
            tokio_util::sync::CancellationToken::new(),
        );
        collect(&ctx).await
    });
    rt.shutdown_background();
    super::document(output, &status, || {
        render_for(&status, &args.command_line("verify"))
    })?;
    if status.healthy() {
        Ok(())
    } else {
        Err(Error::Unhealthy {
            lab: status.lab.clone(),
            help: format!(
                "`{}` repairs what it can; `{}` says which hop is broken",
                args.command_line("up"),
                args.command_line("verify")
            ),
        })
    }
}
