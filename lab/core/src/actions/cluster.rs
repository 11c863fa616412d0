//! Clusters: preflight, the Docker network, creating and deleting kind clusters, kubeconfigs.

use std::path::{Path, PathBuf};

use kube::config::{Kubeconfig, NamedContext};
use serde::Deserialize;
use serde_json::json;

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::{CreateCluster, LookAlike, NetworkRemoval};
use crate::state::{Owned, write_secret};
use crate::topology::Provider;

/// `lab.preflight`: what must hold before anything is created.
pub async fn preflight(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let kind_clusters: Vec<&str> = lab
        .clusters()
        .filter(|c| c.provider == Provider::Kind)
        .map(|c| c.name.as_str())
        .collect();
    // Existing clusters: OCM someone else installed is refused unless adopted (reads only).
    let adopted = super::adopt::check(ctx).await?;
    // An existing hub its spokes could not reach is refused now, not after their joins time out.
    super::ocm::check_join_endpoint(ctx).await?;
    let adopted = json!(
        adopted
            .iter()
            .map(|f| f.cluster.clone())
            .collect::<Vec<_>>()
    );
    if kind_clusters.is_empty() {
        return Ok((false, outputs([("adopted", adopted)])));
    }
    let docker = ctx.run.backends.docker.ping().await?;
    ctx.progress(format!("Docker {docker}"));
    // A container that looks like a node of one of our clusters and that this lab cannot prove it
    // created is someone else's: never adopt it, never let kind trip over it.
    let owned = ctx.run.state.owned().map_err(super::state_error)?;
    let clashes = foreign_containers(
        &*ctx.run.backends.docker,
        &ctx.run.state,
        &owned,
        &kind_clusters,
    )
    .await?;
    if let Some(e) = clash_error(&lab.name, &owned, &clashes, ctx.run.backends.simulated) {
        return Err(e);
    }
    Ok((
        false,
        outputs([("docker", json!(docker)), ("adopted", adopted)]),
    ))
}

/// Proves from what the Docker engine shows that the lab's own `kind create` made `cluster`, when the
/// ownership record cannot say (the create was killed before its confirmation was written, the
/// confirmation line was torn, or the record was lost): the kubeconfig kind wrote, at the lab's request,
/// into the lab's private state folder (mode 0700) names an API server on `127.0.0.1:<port>`, the
/// cluster's control-plane container publishes its API port on exactly that host port, and every
/// look-alike carries kind's label for the cluster. kind picks that port free at create (kind
/// `pkg/cluster/internal/providers/docker/provision.go` `generatePortMappings`, v0.32.0): a cluster
/// someone else made under the same name publishes another one, and only the lab writes into its state
/// folder. Names alone never prove anything. Returns the node containers' IDs when proven.
pub fn proven_by_engine(
    state: &crate::state::StateDir,
    cluster: &str,
    looks: &[LookAlike],
) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(state.kubeconfig(cluster)).ok()?;
    let kc = Kubeconfig::from_yaml(&text).ok()?;
    let port = kc.clusters.iter().find_map(|c| {
        let server = c.cluster.as_ref()?.server.as_deref()?;
        let rest = server
            .strip_prefix("https://127.0.0.1:")
            .or_else(|| server.strip_prefix("https://localhost:"))?;
        rest.trim_end_matches('/').parse::<u16>().ok()
    })?;
    let control_plane = format!("{cluster}-control-plane");
    let all_kinds = looks
        .iter()
        .all(|l| l.kind_cluster.as_deref() == Some(cluster));
    let published = looks
        .iter()
        .any(|l| l.name == control_plane && l.api_port == Some(port));
    (all_kinds && published && !looks.is_empty())
        .then(|| looks.iter().map(|l| l.id.clone()).collect())
}

/// The ownership verdict on `cluster` (see [`Owned::owns`]), with a cluster the record cannot prove
/// but the engine can ([`proven_by_engine`]) counted as the lab's; `record` writes that proof into the
/// ownership record as a confirmation, with a note, so the next reading needs no proof.
pub(super) fn ownership(
    ctx: &StepCtx<'_>,
    owned: &Owned,
    cluster: &str,
    looks: &[LookAlike],
) -> Result<Option<bool>, ActionError> {
    let ids: Vec<String> = looks.iter().map(|l| l.id.clone()).collect();
    match owned.owns(cluster, &ids) {
        Some(false) => match proven_by_engine(&ctx.run.state, cluster, looks) {
            Some(ids) => {
                ctx.note(format!(
                    "{cluster}: the ownership record does not confirm it, but the Docker engine proves it this lab's (its control plane publishes the API port of the kubeconfig kind wrote into the lab's state folder): recorded as the lab's"
                ));
                ctx.run
                    .state
                    .confirm_cluster(cluster, &ids)
                    .map_err(super::state_error)?;
                Ok(Some(true))
            }
            None => Ok(Some(false)),
        },
        other => Ok(other),
    }
}

/// Every container that looks like a node of one of `kind_clusters` and that the lab cannot prove it
/// created, with the cluster it clashes with (preflight and `doctor` both ask this). A cluster the
/// record does not confirm but the engine proves ([`proven_by_engine`]) is no clash.
pub async fn foreign_containers(
    docker: &dyn crate::backend::ContainerRuntime,
    state: &crate::state::StateDir,
    owned: &Owned,
    kind_clusters: &[&str],
) -> Result<Vec<(String, LookAlike)>, crate::backend::DockerError> {
    let mut clashes = Vec::new();
    for name in kind_clusters {
        let looks = docker.look_alikes(name).await?;
        if proven_by_engine(state, name, &looks).is_some() {
            continue;
        }
        clashes.extend(foreign_look_alikes(owned, name, &looks));
    }
    Ok(clashes)
}

/// The containers among `looks` that make `cluster` not the lab's (all of them, unless the lab owns it).
pub fn foreign_look_alikes(
    owned: &Owned,
    cluster: &str,
    looks: &[LookAlike],
) -> Vec<(String, LookAlike)> {
    let ids: Vec<String> = looks.iter().map(|l| l.id.clone()).collect();
    if owned.owns(cluster, &ids) != Some(false) {
        return Vec::new();
    }
    let recorded = owned.clusters.get(cluster);
    looks
        .iter()
        .filter(|l| !recorded.is_some_and(|r| r.contains(&l.id)))
        .map(|l| (cluster.to_owned(), l.clone()))
        .collect()
}

/// The error for containers that clash with the lab's cluster names, naming each and what to do.
pub fn clash_error(
    lab: &str,
    owned: &Owned,
    clashes: &[(String, LookAlike)],
    simulated: bool,
) -> Option<ActionError> {
    if clashes.is_empty() {
        return None;
    }
    let list = clashes
        .iter()
        .map(|(c, l)| format!("{} for cluster `{c}`", l.describe()))
        .collect::<Vec<_>>()
        .join(", ");
    Some(
        ActionError::permanent(format!(
            "container(s) {list} look like kind nodes of this lab's clusters, and lab `{lab}` did not create them"
        ))
        .with_help(clash_help(owned, clashes, simulated)),
    )
}

/// What to do about clashing containers.
/// A cluster the lab started creating and cannot prove its own is deleted with kind's own delete on a real
/// lab, never `docker rm -f` of its nodes; a simulated lab's with `down --simulate`.
pub fn clash_help(owned: &Owned, clashes: &[(String, LookAlike)], simulated: bool) -> String {
    let names: Vec<&str> = clashes.iter().map(|(_, l)| l.name.as_str()).collect();
    let mut clusters: Vec<&str> = clashes.iter().map(|(c, _)| c.as_str()).collect();
    clusters.dedup();
    let mut help = format!(
        "ocm-lab leaves containers it did not create alone: rename the cluster(s) {} in the topology, or, if the containers are yours and disposable, remove them (`docker rm -f {}`)",
        clusters.join(", "),
        names.join(" ")
    );
    let cut_off: Vec<&str> = clusters
        .iter()
        .copied()
        .filter(|c| owned.intended.contains(*c))
        .collect();
    if !cut_off.is_empty() {
        let fix = if simulated {
            "ocm-lab down --simulate -t <topology>".to_owned()
        } else {
            cut_off
                .iter()
                .map(|c| format!("kind delete cluster --name {c}"))
                .collect::<Vec<_>>()
                .join("` and `")
        };
        help = format!(
            "this lab started creating {} but never saw that create finish (a run cut short?), and the Docker engine cannot prove these containers its own: if they are the lab's leftovers, delete them with `{fix}` and run again; otherwise rename the cluster(s) {} in the topology",
            cut_off.join(", "),
            clusters.join(", ")
        );
    }
    help
}

/// The command that deletes a cluster the lab started creating but cannot prove its own: kind's own
/// delete for a real lab; for the simulated lab, `down --simulate`, which forgets the simulated world.
fn unproven_fix(ctx: &StepCtx<'_>, cluster: &str) -> String {
    if ctx.run.backends.simulated {
        format!(
            "`ocm-lab down --simulate -t <topology>` forgets the simulated world with {cluster} in it"
        )
    } else {
        format!("if it is the lab's leftover, `kind delete cluster --name {cluster}` deletes it")
    }
}

/// The inputs of `docker.network`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkInputs {
    /// The network's name (default: kind's).
    pub name: Option<String>,
}

/// The inputs of `registry.local`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryInputs {
    /// The network the registry joins (default: kind's).
    pub network: Option<String>,
}

/// `docker.network`: the shared kind network (`kind`, or `KIND_EXPERIMENTAL_DOCKER_NETWORK`), created once
/// before parallel creates race for it.
pub async fn network(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: NetworkInputs = ctx.inputs()?;
    let name = inputs
        .name
        .as_deref()
        .unwrap_or(&ctx.run.lab.host.kind_network);
    let docker = &ctx.run.backends.docker;
    let created = docker.ensure_network(name).await?;
    if created {
        // Recorded at once, so that `down` may remove it: only a network this lab created is ever removed.
        match docker.network_id(name).await? {
            Some(id) => ctx
                .run
                .state
                .own_network(name, &id)
                .map_err(super::state_error)?,
            None => tracing::warn!(
                network = name,
                "created, but gone before its ID could be recorded"
            ),
        }
    }
    Ok((
        created,
        outputs([("network", json!(name)), ("created", json!(created))]),
    ))
}

/// `docker.network-remove`: the Docker networks this lab created (its ownership record names them with their
/// IDs), each removed once no container, running or stopped, is attached to it. A network of that name
/// with another ID is someone else's and is left alone; one still in use stays recorded for a later `down`.
pub async fn remove_networks(ctx: &StepCtx<'_>) -> ActionResult {
    let owned = ctx.run.state.owned_lenient().map_err(super::state_error)?;
    let docker = &ctx.run.backends.docker;
    let (mut removed, mut kept) = (Vec::new(), Vec::new());
    for (name, id) in &owned.networks {
        match docker.remove_network_if_unused(id).await? {
            NetworkRemoval::Removed => {
                ctx.note(format!(
                    "removed Docker network {name} (created by this lab)"
                ));
                ctx.run
                    .state
                    .forget_network(name)
                    .map_err(super::state_error)?;
                removed.push(name.clone());
            }
            NetworkRemoval::Gone => ctx
                .run
                .state
                .forget_network(name)
                .map_err(super::state_error)?,
            NetworkRemoval::InUse(users) => {
                let by = match users.len() {
                    0 => "a container".to_owned(),
                    n if n <= 3 => users.join(", "),
                    n => format!("{} and {} more", users[..3].join(", "), n - 3),
                };
                ctx.note(format!(
                    "kept Docker network {name}: still used by {by}; a later `down` removes it once unused"
                ));
                kept.push(json!({"network": name, "usedBy": users}));
            }
        }
    }
    Ok((
        !removed.is_empty(),
        outputs([("removed", json!(removed)), ("kept", json!(kept))]),
    ))
}

/// `registry.local`: the lab's local registry container (`spec.registry.local`), on the kind network,
/// labelled with the lab, recorded in the ownership log so `down` removes exactly it.
pub async fn local_registry(ctx: &StepCtx<'_>) -> ActionResult {
    let Some(local) = &ctx.run.lab.registry.local else {
        return Ok((false, outputs([])));
    };
    let inputs: RegistryInputs = ctx.inputs()?;
    let network = inputs
        .network
        .as_deref()
        .unwrap_or(&ctx.run.lab.host.kind_network);
    let spec = crate::backend::RegistryContainer {
        name: local.container.clone(),
        image: ctx.run.local_image(&local.image).to_owned(),
        host_port: local.host_port,
        network: network.to_owned(),
        labels: std::collections::BTreeMap::from([
            (
                crate::topology::LAB_LABEL.to_owned(),
                ctx.run.lab.name.clone(),
            ),
            (
                crate::backend::docker::CREATED_BY_LABEL.to_owned(),
                crate::backend::docker::CREATED_BY_VALUE.to_owned(),
            ),
        ]),
        command: None,
    };
    ctx.progress(format!("local registry {} ({})", spec.name, spec.image));
    let (id, created) = ctx.run.backends.docker.ensure_registry(&spec).await?;
    let owned = ctx.run.state.owned().map_err(super::state_error)?;
    if owned.registries.get(&spec.name) != Some(&id) {
        ctx.run
            .state
            .confirm_registry(&spec.name, &id)
            .map_err(super::state_error)?;
    }
    Ok((
        created,
        outputs([
            ("container", json!(spec.name)),
            (
                "address",
                json!(format!(
                    "localhost:{} (in the nodes: {}:5000)",
                    local.host_port, spec.name
                )),
            ),
        ]),
    ))
}

/// `registry.remove`: removes the local registry containers the ownership log says the lab created
/// (by the recorded ID, so a same-named container of someone else is never touched), whatever the
/// topology says now.
pub async fn remove_local_registries(ctx: &StepCtx<'_>) -> ActionResult {
    let owned = ctx.run.state.owned_lenient().map_err(super::state_error)?;
    let mut removed = 0;
    for (name, id) in &owned.registries {
        ctx.progress(format!("removing local registry {name}"));
        removed += ctx
            .run
            .backends
            .docker
            .remove_containers(std::slice::from_ref(id))
            .await?;
        ctx.run
            .state
            .remove_registry(name)
            .map_err(super::state_error)?;
    }
    Ok((removed > 0, outputs([("removed", json!(removed))])))
}

/// A kind cluster's node image cannot change in place: a lab whose cluster runs another Kubernetes
/// version than the topology now asks for (`--node-image`, `spec.versions.kindNodeImage`) is refused with
/// the commands that re-create it, instead of being reported unchanged. An image Docker names by ID or by
/// a local alias (a bundle's) says no version, and is left alone.
fn node_image_unchanged(
    ctx: &StepCtx<'_>,
    name: &str,
    looks: &[crate::backend::LookAlike],
) -> Result<(), ActionError> {
    use crate::topology::catalog::node_image_version;
    let wanted = &ctx.run.lab.versions.kind_node_image;
    let control_plane = format!("{name}-control-plane");
    let Some(running) = looks
        .iter()
        .find(|l| l.name == control_plane)
        .and_then(|l| l.image.as_deref())
    else {
        return Ok(());
    };
    match (node_image_version(running), node_image_version(wanted)) {
        (Some(has), Some(wants)) if has != wants => Err(ActionError::permanent(format!(
            "kind cluster `{name}` runs Kubernetes v{has}, and the topology asks for v{wants}: a kind cluster's node image cannot change in place"
        ))
        .with_help(format!(
            "re-create the lab's clusters at the new image: `ocm-lab down{sim}` with the topology it was made \
             with, then `ocm-lab up{sim}` with this one",
            sim = if ctx.run.backends.simulated {
                " --simulate"
            } else {
                ""
            }
        ))),
        _ => Ok(()),
    }
}

/// `cluster.create`: a kind cluster with its own kubeconfig file, or a connection to an existing cluster.
///
/// Ownership is proven, not assumed: the intent is recorded before `kind create`, confirmed with the
/// node containers' IDs once the lab saw its own create succeed, and withdrawn when the create fails. A
/// cluster whose node-like containers are not all ones the lab confirmed is someone else's.
pub async fn create(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: super::OnCluster = ctx.inputs()?;
    let name = inputs.cluster.as_str();
    let cluster = ctx
        .run
        .lab
        .cluster(name)
        .ok_or_else(|| ActionError::permanent(format!("no cluster `{name}` in the lab")))?
        .clone();
    let mut changed = false;
    if cluster.provider == Provider::Kind {
        let kubeconfig = ctx.run.state.kubeconfig(name);
        let docker = &ctx.run.backends.docker;
        let looks = docker.look_alikes(name).await?;
        // Nothing like it exists (every cluster of a fresh lab): no need to read the record, which
        // would make a large lab's creates quadratic in its clusters.
        let verdict = if looks.is_empty() {
            None
        } else {
            let owned = ctx.run.state.owned().map_err(super::state_error)?;
            ownership(ctx, &owned, name, &looks)?.map(|ours| (ours, owned))
        };
        match verdict {
            Some((true, _)) => node_image_unchanged(ctx, name, &looks)?,
            Some((false, owned)) => {
                let clashes = foreign_look_alikes(&owned, name, &looks);
                return Err(clash_error(
                    &ctx.run.lab.name,
                    &owned,
                    &clashes,
                    ctx.run.backends.simulated,
                )
                .expect("not owned means a clash"));
            }
            None => {
                ctx.progress(format!("kind create cluster --name {name}"));
                let req = CreateCluster {
                    name: name.to_owned(),
                    image: ctx
                        .run
                        .local_image(&ctx.run.lab.versions.kind_node_image)
                        .to_owned(),
                    kubeconfig: kubeconfig.clone(),
                    registries: crate::backend::kind::NodeRegistries::for_lab(
                        &ctx.run.lab,
                        &ctx.run.state,
                    ),
                };
                ctx.run
                    .state
                    .intend_cluster(name)
                    .map_err(super::state_error)?;
                if let Err(e) = ctx.run.backends.kind.create(&req).await {
                    // kind removes what a failed create made (unless it was killed): the name was never ours.
                    if let Err(w) = ctx.run.state.withdraw_cluster(name) {
                        tracing::warn!(cluster = name, error = %w, "could not record the failed create");
                    }
                    return Err(e.into());
                }
                let made: Vec<String> = docker
                    .look_alikes(name)
                    .await?
                    .into_iter()
                    .map(|l| l.id)
                    .collect();
                if made.is_empty() {
                    return Err(ActionError::transient(format!(
                        "kind reported cluster `{name}` created, but no container looks like its node"
                    )));
                }
                ctx.run
                    .state
                    .confirm_cluster(name, &made)
                    .map_err(super::state_error)?;
                ctx.run.forget(name).await;
                changed = true;
            }
        }
        if !kubeconfig.exists() {
            ctx.run
                .backends
                .kind
                .export_kubeconfig(name, &kubeconfig)
                .await?;
            changed = true;
        }
    }
    let api = ctx.run.api(name).await?;
    let version = api.version().await?;
    Ok((
        changed,
        outputs([
            ("version", json!(version)),
            ("context", json!(cluster.context)),
        ]),
    ))
}

/// `cluster.delete`: a kind cluster this lab can prove it created, and nothing else.
///
/// The cluster must be confirmed in the ownership record and every container that now looks like one
/// of its nodes must carry an ID the lab recorded; anything else is reported as "not ours, left
/// alone" and the step succeeds, so the rest of the teardown goes on. Reads a damaged record
/// leniently (see [`crate::state::StateDir::owned_lenient`]).
pub async fn delete(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: super::OnCluster = ctx.inputs()?;
    let name = inputs.cluster.as_str();
    delete_owned(ctx, name).await
}

/// Deletes kind cluster `name` if the ownership record proves it the lab's (see [`delete`]); also for a
/// cluster the topology no longer declares (`lab.departed`, `cluster.delete-departed`).
pub(super) async fn delete_owned(ctx: &StepCtx<'_>, name: &str) -> ActionResult {
    let state = &ctx.run.state;
    let owned = state.owned_lenient().map_err(super::state_error)?;
    let docker = &ctx.run.backends.docker;
    let looks = docker.look_alikes(name).await?;
    let ids: Vec<String> = looks.iter().map(|l| l.id.clone()).collect();
    let forget = |ctx: &StepCtx<'_>| -> Result<(), ActionError> {
        let kubeconfig = ctx.run.state.kubeconfig(name);
        if kubeconfig.exists() {
            std::fs::remove_file(&kubeconfig).map_err(|e| {
                ActionError::permanent(format!("failed to remove {}: {e}", kubeconfig.display()))
            })?;
        }
        // Read again: a proof by the engine ([`ownership`]) may have confirmed it since.
        let owned = ctx.run.state.owned_lenient().map_err(super::state_error)?;
        if owned.clusters.contains_key(name) || owned.intended.contains(name) {
            ctx.run
                .state
                .remove_cluster(name)
                .map_err(super::state_error)?;
        }
        Ok(())
    };
    match ownership(ctx, &owned, name, &looks)? {
        None => {
            ctx.run.forget(name).await;
            forget(ctx)?;
            Ok((false, outputs([("skipped", json!("no such cluster"))])))
        }
        // A create the lab started and never saw finish, which the engine cannot prove either: the
        // intent stays recorded (so the record stays), and the user learns the command that deletes it.
        Some(false) if owned.intended.contains(name) => {
            let fix = unproven_fix(ctx, name);
            let names: Vec<String> = looks.iter().map(LookAlike::describe).collect();
            ctx.note(format!(
                "{name}: this lab started creating it but never saw that create finish, and cannot prove {} its own; left alone: {fix}",
                names.join(", ")
            ));
            Ok((
                false,
                outputs([
                    ("skipped", json!(format!("{name}: unproven, left alone"))),
                    ("containers", json!(names)),
                    ("fix", json!(fix)),
                ]),
            ))
        }
        Some(false) => {
            let names: Vec<String> = looks.iter().map(LookAlike::describe).collect();
            tracing::warn!("{name}: not ours, left alone ({})", names.join(", "));
            ctx.progress(format!("{name}: not ours, left alone"));
            ctx.run.forget(name).await;
            forget(ctx)?;
            // Whoever made this cluster with kind also wrote its context into the user's kubeconfig,
            // over the lab's: it is theirs now, so `kubeconfig.prune` must not remove it.
            if let Some(context) = ctx.run.lab.cluster(name).map(|c| c.context.clone()) {
                state
                    .update_contexts(|cs| cs.retain(|c| *c != context))
                    .map_err(super::state_error)?;
            }
            Ok((
                false,
                outputs([
                    ("skipped", json!(format!("{name}: not ours, left alone"))),
                    ("containers", json!(names)),
                ]),
            ))
        }
        Some(true) => {
            // kind first (it also cleans up what it knows about); then whatever of ours is left, by ID.
            match ctx.run.backends.kind.delete(name).await {
                Ok(()) => {}
                Err(e) => ctx.progress(format!(
                    "kind delete failed ({e}); removing the cluster's containers directly"
                )),
            }
            let left: Vec<String> = docker
                .look_alikes(name)
                .await?
                .into_iter()
                .map(|l| l.id)
                .filter(|id| ids.contains(id))
                .collect();
            let removed = docker.remove_containers(&left).await?;
            ctx.run.forget(name).await;
            forget(ctx)?;
            Ok((true, outputs([("containersRemoved", json!(removed))])))
        }
    }
}

/// `kubeconfig.merge`: each kind cluster's own kubeconfig merged into the user's, once, at the end.
pub async fn merge_kubeconfigs(ctx: &StepCtx<'_>) -> ActionResult {
    if ctx.run.backends.simulated {
        // The simulated lab's kubeconfigs lead nowhere: never put them into the user's real kubeconfig.
        return Ok((false, outputs([("skipped", json!("simulated lab"))])));
    }
    let Some(target) = ctx.run.lab.host.user_kubeconfig() else {
        return Err(ActionError::permanent(
            "cannot find the user's kubeconfig: neither KUBECONFIG nor HOME is set",
        ));
    };
    // Small blocking reads and writes of the user's kubeconfig, deliberately kept: this step runs once,
    // at the end of `up`, with nothing else running beside it.
    let mut contexts = Vec::new();
    let changed = update_kubeconfig(&target, |merged| {
        let mut changed = false;
        for c in ctx
            .run
            .lab
            .clusters()
            .filter(|c| c.provider == Provider::Kind)
        {
            let own = read_kubeconfig(&ctx.run.state.kubeconfig(&c.name))?;
            changed |= merge_into(merged, &own, &c.context);
            contexts.push(c.context.clone());
        }
        Ok(changed)
    })
    .await?;
    ctx.run
        .state
        .update_contexts(|owned| {
            for c in &contexts {
                if !owned.contains(c) {
                    owned.push(c.clone());
                }
            }
        })
        .map_err(super::state_error)?;
    Ok((
        changed,
        outputs([
            ("kubeconfig", json!(target.display().to_string())),
            ("contexts", json!(contexts)),
        ]),
    ))
}

/// `kubeconfig.prune`: removes the contexts this lab wrote, and their clusters and users.
pub async fn prune_kubeconfig(ctx: &StepCtx<'_>) -> ActionResult {
    let owned = ctx.run.state.owned_lenient().map_err(super::state_error)?;
    if ctx.run.backends.simulated || owned.contexts.is_empty() {
        return Ok((false, outputs([])));
    }
    let Some(target) = ctx.run.lab.host.user_kubeconfig().filter(|p| p.exists()) else {
        return Ok((false, outputs([])));
    };
    let changed = update_kubeconfig(&target, |kc| Ok(prune(kc, &owned.contexts))).await?;
    ctx.run
        .state
        .update_contexts(Vec::clear)
        .map_err(super::state_error)?;
    Ok((changed, outputs([])))
}

/// Reads a kubeconfig with kube's [`Kubeconfig`] types (fields they do not model are kept for the
/// write); a missing or empty file is an empty kubeconfig. Relative paths in it stay as written.
fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, ActionError> {
    let parse_error = |e: &dyn std::fmt::Display| {
        ActionError::permanent(format!("failed to parse kubeconfig {}: {e}", path.display()))
            .with_help("fix the file (`kubectl config view` shows what kubectl makes of it), or point KUBECONFIG at another file")
    };
    match std::fs::read_to_string(path) {
        Ok(t) if t.trim().is_empty() => Ok(empty_kubeconfig()),
        Ok(t) => Kubeconfig::from_yaml(&t).map_err(|e| parse_error(&e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(empty_kubeconfig()),
        Err(e) => Err(ActionError::permanent(format!(
            "failed to read {}: {e}",
            path.display()
        ))),
    }
}

/// The lock kubectl and client-go take around a write of a kubeconfig (`clientcmd`'s `lockFile`):
/// `<file>.lock`, created exclusively, removed when dropped. A lock someone else holds is waited for
/// briefly; one that stays is reported with what to do.
struct KubeconfigLock(PathBuf);

impl KubeconfigLock {
    /// How long a lock held by someone else is waited for.
    const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

    async fn take(file: &Path) -> Result<Self, ActionError> {
        let mut name = file.as_os_str().to_owned();
        name.push(".lock");
        let lock = PathBuf::from(name);
        if let Some(parent) = lock.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(parent);
        }
        let start = std::time::Instant::now();
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
            {
                Ok(_) => return Ok(KubeconfigLock(lock)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if start.elapsed() >= Self::WAIT {
                        return Err(ActionError::permanent(format!(
                            "kubeconfig {} stayed locked for {}s: {} exists (kubectl or another program                              writing it holds it, or one that stopped half-way left it). If nothing is                              writing the kubeconfig, remove {} and run again",
                            file.display(),
                            Self::WAIT.as_secs(),
                            lock.display(),
                            lock.display()
                        )));
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => {
                    return Err(ActionError::permanent(format!(
                        "failed to create the lock {} of kubeconfig {}: {e}",
                        lock.display(),
                        file.display()
                    )));
                }
            }
        }
    }
}

impl Drop for KubeconfigLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Reads, edits and (when `edit` says it changed something) writes the user's kubeconfig, all under
/// [`KubeconfigLock`], so a concurrent `kubectl config` neither loses nor undoes a change.
async fn update_kubeconfig(
    target: &Path,
    edit: impl FnOnce(&mut Kubeconfig) -> Result<bool, ActionError>,
) -> Result<bool, ActionError> {
    let _lock = KubeconfigLock::take(target).await?;
    let mut kc = read_kubeconfig(target)?;
    let changed = edit(&mut kc)?;
    if changed {
        write_kubeconfig(target, &kc)?;
    }
    Ok(changed)
}

/// Writes `kc` through kube's types (what they do not model kept), mode 0600.
fn write_kubeconfig(path: &Path, kc: &Kubeconfig) -> Result<(), ActionError> {
    let text = serde_saphyr::to_string(kc).map_err(|e| {
        ActionError::permanent(format!(
            "failed to write kubeconfig {}: {e}",
            path.display()
        ))
    })?;
    write_secret(path, text.as_bytes())
        .map_err(|e| ActionError::permanent(format!("failed to write {}: {e}", path.display())))
}

fn empty_kubeconfig() -> Kubeconfig {
    Kubeconfig {
        api_version: Some("v1".to_owned()),
        kind: Some("Config".to_owned()),
        ..Kubeconfig::default()
    }
}

/// Upserts `context` (and the cluster and user it names) from `own` into `into`. Returns whether anything
/// changed. kind names cluster, user and context all `kind-<name>`.
pub fn merge_into(into: &mut Kubeconfig, own: &Kubeconfig, context: &str) -> bool {
    let Some(ctx) = own
        .contexts
        .iter()
        .find(|c| c.name == context)
        .or(own.contexts.first())
    else {
        return false;
    };
    let named = ctx.context.as_ref();
    let cluster_name = named.map_or(context, |c| c.cluster.as_str());
    let user_name = named.and_then(|c| c.user.as_deref()).unwrap_or(context);
    let mut changed = false;
    if let Some(cluster) = own.clusters.iter().find(|c| c.name == cluster_name) {
        changed |= upsert(&mut into.clusters, cluster.clone(), |c| &c.name);
    }
    if let Some(user) = own.auth_infos.iter().find(|u| u.name == user_name) {
        changed |= upsert(&mut into.auth_infos, user.clone(), |u| &u.name);
    }
    let mut entry = ctx.clone();
    entry.name = context.to_owned();
    changed |= upsert(&mut into.contexts, entry, |c| &c.name);
    if into.current_context.as_deref().is_none_or(str::is_empty) {
        into.current_context = Some(context.to_owned());
        changed = true;
    }
    changed
}

/// Puts `entry` into `list` in place of the entry of the same name, or at the end; whether that changed
/// the list. kube's kubeconfig types have no equality: entries compare as the JSON they are written as.
fn upsert<T: serde::Serialize>(list: &mut Vec<T>, entry: T, name: impl Fn(&T) -> &String) -> bool {
    let json = |t: &T| serde_json::to_value(t).ok();
    match list.iter_mut().find(|e| name(e) == name(&entry)) {
        Some(existing) if json(existing) == json(&entry) => false,
        Some(existing) => {
            *existing = entry;
            true
        }
        None => {
            list.push(entry);
            true
        }
    }
}

/// Removes `contexts` and the clusters and users only they used; keeps `current-context` valid.
pub fn prune(kc: &mut Kubeconfig, contexts: &[String]) -> bool {
    let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut kc.contexts)
        .into_iter()
        .partition(|c| contexts.contains(&c.name));
    kc.contexts = kept;
    if gone.is_empty() {
        return false;
    }
    let cluster_of = |c: &NamedContext| c.context.as_ref().map(|c| c.cluster.clone());
    let user_of = |c: &NamedContext| c.context.as_ref().and_then(|c| c.user.clone());
    let unused = |of: &dyn Fn(&NamedContext) -> Option<String>| -> Vec<String> {
        let used: Vec<Option<String>> = kc.contexts.iter().map(of).collect();
        let gone = gone.iter().map(of).filter(|n| !used.contains(n));
        gone.flatten().collect()
    };
    let (clusters, users) = (unused(&cluster_of), unused(&user_of));
    kc.clusters.retain(|c| !clusters.contains(&c.name));
    kc.auth_infos.retain(|u| !users.contains(&u.name));
    if kc
        .current_context
        .as_ref()
        .is_some_and(|c| contexts.contains(c))
    {
        let first = kc.contexts.first().map(|c| c.name.clone());
        kc.current_context = Some(first.unwrap_or_default());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_kc(name: &str) -> Kubeconfig {
        kubeconfig(json!({"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": format!("kind-{name}"), "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": format!("kind-{name}"), "user": {"token": "t"}}],
            "contexts": [{"name": format!("kind-{name}"), "context": {"cluster": format!("kind-{name}"), "user": format!("kind-{name}")}}],
            "current-context": format!("kind-{name}")}))
    }

    fn kubeconfig(v: serde_json::Value) -> Kubeconfig {
        serde_json::from_value(v).unwrap()
    }

    /// A concurrent holder of `<file>.lock` (kubectl writing the file): the merge waits for it, then
    /// reads what it wrote, so nothing is lost; the lock is gone afterwards.
    #[tokio::test]
    async fn a_merge_waits_for_the_kubeconfig_lock_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        let lock = dir.path().join("config.lock");
        std::fs::write(&lock, "").unwrap();
        let holder = {
            let (path, lock) = (path.clone(), lock.clone());
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                write_kubeconfig(&path, &kind_kc("theirs")).unwrap();
                std::fs::remove_file(&lock).unwrap();
            })
        };
        let changed =
            update_kubeconfig(&path, |kc| Ok(merge_into(kc, &kind_kc("hub"), "kind-hub")))
                .await
                .unwrap();
        holder.await.unwrap();
        assert!(changed);
        let back = Kubeconfig::from_yaml(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let names: Vec<&str> = back.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["kind-theirs", "kind-hub"]);
        assert!(!lock.exists(), "the lock is removed after the write");
    }

    #[test]
    fn merging_is_idempotent_and_keeps_other_contexts() {
        let mut user = kubeconfig(
            json!({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "prod", "cluster": {}}], "users": [{"name": "me", "user": {}}],
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}], "current-context": "prod"}),
        );
        assert!(merge_into(&mut user, &kind_kc("hub"), "kind-hub"));
        assert!(
            !merge_into(&mut user, &kind_kc("hub"), "kind-hub"),
            "a second merge changes nothing"
        );
        assert_eq!(user.contexts.len(), 2);
        assert_eq!(
            user.current_context.as_deref(),
            Some("prod"),
            "the user's current context is kept"
        );
    }

    #[test]
    fn the_users_kubeconfig_goes_through_kube_types_keeps_what_they_do_not_model_and_stays_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod:6443\n    certificate-authority: ca.crt\n  x-custom: keep\ncontexts:\n- name: prod\n  context: {cluster: prod, user: me}\nusers:\n- name: me\n  user: {token: t0k}\ncurrent-context: prod\n",
        )
        .unwrap();
        let mut kc = read_kubeconfig(&path).unwrap();
        assert!(merge_into(&mut kc, &kind_kc("hub"), "kind-hub"));
        write_kubeconfig(&path, &kc).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let back = Kubeconfig::from_yaml(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back.contexts.len(), 2);
        assert_eq!(back.current_context.as_deref(), Some("prod"));
        let prod = &back.clusters[0];
        assert_eq!(prod.other["x-custom"], "keep");
        let cluster = prod.cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority.as_deref(), Some("ca.crt"));
        let me = serde_json::to_value(&back.auth_infos[0]).unwrap();
        assert_eq!(me["user"]["token"], "t0k");
        // Not a kubeconfig: an error naming the file and what to do.
        std::fs::write(&path, "clusters: 7\n").unwrap();
        let e = read_kubeconfig(&path).unwrap_err();
        assert!(e.message.contains("failed to parse kubeconfig"), "{e}");
        assert!(e.help.unwrap().contains("KUBECONFIG"));
    }

    #[test]
    fn pruning_removes_only_the_labs_contexts_and_keeps_current_valid() {
        let mut user = kubeconfig(
            json!({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "prod", "cluster": {}}], "users": [{"name": "me", "user": {}}],
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}], "current-context": "prod"}),
        );
        merge_into(&mut user, &kind_kc("hub"), "kind-hub");
        user.current_context = Some("kind-hub".to_owned());
        assert!(prune(&mut user, &["kind-hub".to_owned()]));
        assert_eq!(user.contexts.len(), 1);
        assert_eq!(user.clusters.len(), 1);
        assert_eq!(user.current_context.as_deref(), Some("prod"));
        assert!(!prune(&mut user, &["kind-hub".to_owned()]));
    }
}
