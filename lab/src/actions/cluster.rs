//! Clusters: preflight, the Docker network, creating and deleting kind clusters, kubeconfigs.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{ActionResult, StepCtx, outputs};
use crate::backend::{BackendError, CreateCluster};
use crate::state::write_secret;
use crate::topology::Provider;

/// `lab.preflight`: what must hold before anything is created.
pub async fn preflight(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let kind_clusters: Vec<&str> = lab
        .clusters()
        .filter(|c| c.provider == Provider::Kind)
        .map(|c| c.name.as_str())
        .collect();
    if kind_clusters.is_empty() {
        return Ok((false, outputs([])));
    }
    let docker = ctx.run.backends.docker.ping().await?;
    ctx.progress(format!("Docker {docker}"));
    // A kind cluster with one of our names that this lab did not create is someone else's: never adopt it.
    let existing = ctx.run.backends.kind.list().await?;
    let owned = ctx
        .run
        .state
        .owned()
        .map_err(|e| BackendError::permanent(e.to_string()))?;
    let clashes: Vec<&str> = kind_clusters
        .iter()
        .copied()
        .filter(|n| existing.iter().any(|e| e == n) && !owned.clusters.iter().any(|o| o == n))
        .collect();
    if !clashes.is_empty() {
        return Err(BackendError::permanent(format!(
            "kind cluster(s) {} already exist and lab `{}` did not create them",
            clashes.join(", "),
            lab.name
        ))
        .with_help("rename the clusters in the topology, or delete the old ones with `kind delete cluster --name <name>` if they are yours"));
    }
    Ok((false, outputs([("docker", json!(docker))])))
}

/// `docker.network`: the shared `kind` network, created once before parallel creates race for it.
pub async fn network(ctx: &StepCtx<'_>) -> ActionResult {
    let name = ctx
        .step
        .with
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("kind");
    let created = ctx.run.backends.docker.ensure_network(name).await?;
    Ok((
        created,
        outputs([("network", json!(name)), ("created", json!(created))]),
    ))
}

/// `cluster.create`: a kind cluster with its own kubeconfig file, or a connection to an existing cluster.
pub async fn create(ctx: &StepCtx<'_>) -> ActionResult {
    let name = ctx.input("cluster")?;
    let cluster = ctx
        .run
        .lab
        .cluster(name)
        .ok_or_else(|| BackendError::permanent(format!("no cluster `{name}` in the lab")))?
        .clone();
    let mut changed = false;
    if cluster.provider == Provider::Kind {
        let kubeconfig = ctx.run.state.kubeconfig(name);
        let exists = ctx
            .run
            .backends
            .kind
            .list()
            .await?
            .iter()
            .any(|c| c == name);
        if !exists {
            ctx.progress(format!("kind create cluster --name {name}"));
            let req = CreateCluster {
                name: name.to_owned(),
                image: ctx.run.lab.versions.kind_node_image.clone(),
                kubeconfig: kubeconfig.clone(),
            };
            // Recorded before creating: a create that fails halfway leaves containers `down` must remove.
            ctx.run
                .state
                .own_cluster(name)
                .map_err(|e| BackendError::permanent(e.to_string()))?;
            ctx.run.backends.kind.create(&req).await?;
            ctx.run.forget(name).await;
            changed = true;
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

/// `cluster.delete`: a kind cluster this lab owns, and its leftover containers.
pub async fn delete(ctx: &StepCtx<'_>) -> ActionResult {
    let name = ctx.input("cluster")?;
    let owned = ctx
        .run
        .state
        .owned()
        .map_err(|e| BackendError::permanent(e.to_string()))?;
    if !owned.clusters.iter().any(|c| c == name) {
        return Ok((
            false,
            outputs([("skipped", json!("not created by this lab"))]),
        ));
    }
    let mut changed = false;
    // kind first; when kind fails or is gone, the labelled containers are removed directly below.
    match ctx.run.backends.kind.list().await {
        Ok(clusters) if clusters.iter().any(|c| c == name) => {
            if let Err(e) = ctx.run.backends.kind.delete(name).await {
                ctx.progress(format!(
                    "kind delete failed ({e}); removing its containers directly"
                ));
            }
            changed = true;
        }
        Ok(_) => {}
        Err(e) => ctx.progress(format!(
            "kind is not usable ({e}); removing the cluster's containers directly"
        )),
    }
    let removed = ctx
        .run
        .backends
        .docker
        .remove_cluster_containers(name)
        .await?;
    ctx.run.forget(name).await;
    let kubeconfig = ctx.run.state.kubeconfig(name);
    if kubeconfig.exists() {
        std::fs::remove_file(&kubeconfig).map_err(|e| {
            BackendError::permanent(format!("failed to remove {}: {e}", kubeconfig.display()))
        })?;
    }
    ctx.run
        .state
        .update_owned(|o| o.clusters.retain(|c| c != name))
        .map_err(|e| BackendError::permanent(e.to_string()))?;
    Ok((
        changed || removed > 0,
        outputs([("containersRemoved", json!(removed))]),
    ))
}

/// The user's kubeconfig file: the first entry of `KUBECONFIG`, else `~/.kube/config`.
pub fn user_kubeconfig() -> Option<PathBuf> {
    if let Some(k) = std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()) {
        return std::env::split_paths(&k).next();
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube/config"))
}

/// `kubeconfig.merge`: each kind cluster's own kubeconfig merged into the user's, once, at the end.
pub async fn merge_kubeconfigs(ctx: &StepCtx<'_>) -> ActionResult {
    if ctx.run.backends.simulated {
        // The simulated lab's kubeconfigs lead nowhere: never put them into the user's real kubeconfig.
        return Ok((false, outputs([("skipped", json!("simulated lab"))])));
    }
    let Some(target) = user_kubeconfig() else {
        return Err(BackendError::permanent(
            "cannot find the user's kubeconfig: neither KUBECONFIG nor HOME is set",
        ));
    };
    let mut merged = read_kubeconfig(&target)?;
    let mut changed = false;
    let mut contexts = Vec::new();
    for c in ctx
        .run
        .lab
        .clusters()
        .filter(|c| c.provider == Provider::Kind)
    {
        let own = read_kubeconfig(&ctx.run.state.kubeconfig(&c.name))?;
        changed |= merge_into(&mut merged, &own, &c.context);
        contexts.push(c.context.clone());
    }
    if changed {
        let text = serde_saphyr::to_string(&merged)
            .map_err(|e| BackendError::permanent(format!("failed to write kubeconfig: {e}")))?;
        write_secret(&target, text.as_bytes()).map_err(|e| {
            BackendError::permanent(format!("failed to write {}: {e}", target.display()))
        })?;
    }
    ctx.run
        .state
        .update_owned(|owned| {
            for c in &contexts {
                if !owned.contexts.contains(c) {
                    owned.contexts.push(c.clone());
                }
            }
        })
        .map_err(|e| BackendError::permanent(e.to_string()))?;
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
    let owned = ctx
        .run
        .state
        .owned()
        .map_err(|e| BackendError::permanent(e.to_string()))?;
    if ctx.run.backends.simulated || owned.contexts.is_empty() {
        return Ok((false, outputs([])));
    }
    let Some(target) = user_kubeconfig().filter(|p| p.exists()) else {
        return Ok((false, outputs([])));
    };
    let mut kc = read_kubeconfig(&target)?;
    let changed = prune(&mut kc, &owned.contexts);
    if changed {
        let text = serde_saphyr::to_string(&kc)
            .map_err(|e| BackendError::permanent(format!("failed to write kubeconfig: {e}")))?;
        write_secret(&target, text.as_bytes()).map_err(|e| {
            BackendError::permanent(format!("failed to write {}: {e}", target.display()))
        })?;
    }
    ctx.run
        .state
        .update_owned(|o| o.contexts.clear())
        .map_err(|e| BackendError::permanent(e.to_string()))?;
    Ok((changed, outputs([])))
}

fn read_kubeconfig(path: &Path) -> Result<Value, BackendError> {
    match std::fs::read_to_string(path) {
        Ok(t) if t.trim().is_empty() => Ok(empty_kubeconfig()),
        Ok(t) => serde_saphyr::from_str(&t).map_err(|e| {
            BackendError::permanent(format!(
                "failed to parse kubeconfig {}: {e}",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(empty_kubeconfig()),
        Err(e) => Err(BackendError::permanent(format!(
            "failed to read {}: {e}",
            path.display()
        ))),
    }
}

fn empty_kubeconfig() -> Value {
    json!({"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [], "current-context": ""})
}

/// Upserts `context` (and the cluster and user it names) from `own` into `into`. Returns whether anything
/// changed. kind names cluster, user and context all `kind-<name>`.
pub fn merge_into(into: &mut Value, own: &Value, context: &str) -> bool {
    let Some(ctx) = own["contexts"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == context).or(cs.first()))
    else {
        return false;
    };
    let cluster_name = ctx["context"]["cluster"]
        .as_str()
        .unwrap_or(context)
        .to_owned();
    let user_name = ctx["context"]["user"]
        .as_str()
        .unwrap_or(context)
        .to_owned();
    let mut changed = false;
    for (list, name) in [
        ("clusters", cluster_name.as_str()),
        ("users", user_name.as_str()),
        ("contexts", ctx["name"].as_str().unwrap_or(context)),
    ] {
        let Some(entry) = own[list]
            .as_array()
            .and_then(|l| l.iter().find(|e| e["name"] == name))
        else {
            continue;
        };
        let mut entry = entry.clone();
        if list == "contexts" {
            entry["name"] = json!(context);
        }
        let target = into[list].as_array_mut();
        let target = match target {
            Some(t) => t,
            None => {
                into[list] = json!([]);
                into[list].as_array_mut().expect("just set")
            }
        };
        match target.iter_mut().find(|e| e["name"] == entry["name"]) {
            Some(existing) if *existing == entry => {}
            Some(existing) => {
                *existing = entry;
                changed = true;
            }
            None => {
                target.push(entry);
                changed = true;
            }
        }
    }
    if into["current-context"].as_str().is_none_or(str::is_empty) {
        into["current-context"] = json!(context);
        changed = true;
    }
    changed
}

/// Removes `contexts` and the clusters and users only they used; keeps `current-context` valid.
pub fn prune(kc: &mut Value, contexts: &[String]) -> bool {
    let Some(all) = kc["contexts"].as_array().cloned() else {
        return false;
    };
    let (gone, kept): (Vec<Value>, Vec<Value>) = all.into_iter().partition(|c| {
        c["name"]
            .as_str()
            .is_some_and(|n| contexts.iter().any(|x| x == n))
    });
    if gone.is_empty() {
        return false;
    }
    let used = |field: &str, name: &Value| kept.iter().any(|c| c["context"][field] == *name);
    for (list, field) in [("clusters", "cluster"), ("users", "user")] {
        let names: Vec<Value> = gone
            .iter()
            .map(|c| c["context"][field].clone())
            .filter(|n| !used(field, n))
            .collect();
        if let Some(items) = kc[list].as_array_mut() {
            items.retain(|i| !names.contains(&i["name"]));
        }
    }
    let current_gone = kc["current-context"]
        .as_str()
        .is_some_and(|c| contexts.iter().any(|x| x == c));
    if current_gone {
        kc["current-context"] = kept.first().map_or(json!(""), |c| c["name"].clone());
    }
    kc["contexts"] = Value::Array(kept);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_kc(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": format!("kind-{name}"), "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": format!("kind-{name}"), "user": {"token": "t"}}],
            "contexts": [{"name": format!("kind-{name}"), "context": {"cluster": format!("kind-{name}"), "user": format!("kind-{name}")}}],
            "current-context": format!("kind-{name}")})
    }

    #[test]
    fn merging_is_idempotent_and_keeps_other_contexts() {
        let mut user = json!({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "prod", "cluster": {}}], "users": [{"name": "me", "user": {}}],
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}], "current-context": "prod"});
        assert!(merge_into(&mut user, &kind_kc("hub"), "kind-hub"));
        assert!(
            !merge_into(&mut user, &kind_kc("hub"), "kind-hub"),
            "a second merge changes nothing"
        );
        assert_eq!(user["contexts"].as_array().unwrap().len(), 2);
        assert_eq!(
            user["current-context"], "prod",
            "the user's current context is kept"
        );
    }

    #[test]
    fn pruning_removes_only_the_labs_contexts_and_keeps_current_valid() {
        let mut user = json!({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "prod", "cluster": {}}], "users": [{"name": "me", "user": {}}],
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}], "current-context": "prod"});
        merge_into(&mut user, &kind_kc("hub"), "kind-hub");
        user["current-context"] = json!("kind-hub");
        assert!(prune(&mut user, &["kind-hub".to_owned()]));
        assert_eq!(user["contexts"].as_array().unwrap().len(), 1);
        assert_eq!(user["clusters"].as_array().unwrap().len(), 1);
        assert_eq!(user["current-context"], "prod");
        assert!(!prune(&mut user, &["kind-hub".to_owned()]));
    }
}
