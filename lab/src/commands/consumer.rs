//! `ocm-lab consumer NAMESPACE`: what a ClusterProfile consumer application needs to use this lab, read-only
//! ([`run`], at the end).
//!
//! It reads the namespace's ClusterProfiles from the hub (and the names, never the contents, of the Secrets
//! managed-serviceaccount synced next to them) and prints, ready for `kubectl apply`, what OCM's "ClusterProfile
//! Access Providers" page has a consumer set up by hand:
//!
//! - the provider file the Cluster Inventory API's access helper reads (kubernetes-sigs/cluster-inventory-api
//!   v0.1.2 `pkg/access/config.go` `NewFromFile`), naming managed-serviceaccount's `cp-creds` with the
//!   ManagedServiceAccount the topology syncs to that namespace, as a ConfigMap;
//! - a ServiceAccount, and the Roles and RoleBindings it needs: reading ClusterProfiles, and `get` on Secrets
//!   for `cp-creds`, which GETs Secret `<clusterName>-<msa>` in its own namespace
//!   (open-cluster-management-io/managed-serviceaccount v0.10.0 `cmd/clusterprofile-credentials-plugin/main.go`
//!   `Secrets(namespace).Get`; its README asks for permission to "list secrets", but the code only gets);
//! - the Pod spec snippet whose initContainer copies `/cp-creds` out of the managed-serviceaccount image the lab
//!   runs (that image's Dockerfile at v0.10.0 copies `bin/cp-creds` to `/` of a ubi-minimal image, which has
//!   `cp`), for the consumer's own Deployment.
//!
//! The objects carry no lab label: they are the consumer's, and `reset` and `down` must leave them alone.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};

use crate::backend::ClusterApi;
use crate::step::RunCtx;

pub use crate::verify::consumer::{
    PLUGIN_DIR, PROVIDER, PROVIDER_FILE, PROVIDER_FILE_DIR, objects, plan, pod_spec, provider_file,
};

/// What a consumer in a namespace needs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kit {
    pub lab: String,
    pub simulated: bool,
    pub namespace: String,
    pub profiles: Vec<Profile>,
    pub managed_service_account: String,
    pub plugin_image: String,
    pub provider_file: Value,
    /// ServiceAccount, Roles, RoleBindings and the provider file's ConfigMap, in the order to apply them.
    pub objects: Vec<Value>,
    /// The part of the consumer's Pod spec that mounts `cp-creds` and the provider file.
    pub pod_spec: Value,
}

/// One ClusterProfile of the namespace, as a consumer will find it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub name: String,
    /// The `open-cluster-management` access provider's server, if cluster-proxy has written it.
    pub server: Option<String>,
    /// The Secret `cp-creds` will read (`<cluster>-<msa>`), and whether it exists now.
    pub synced_secret: String,
    pub synced: bool,
}

/// An object's name, from a metadata-only list.
#[derive(serde::Deserialize)]
struct Named {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
}

/// The parts of a ClusterProfile a consumer reads (cluster-inventory-api v1alpha1
/// `apis/v1alpha1/clusterprofile_types.go`: `status.accessProviders[].cluster`, a client-go `Cluster` whose
/// `extensions` carry the exec plugin's `clusterName`).
#[derive(Default, serde::Deserialize)]
struct ClusterProfile {
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    status: ProfileStatus,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProfileStatus {
    #[serde(default)]
    access_providers: Vec<AccessProvider>,
}

#[derive(serde::Deserialize)]
struct AccessProvider {
    name: String,
    #[serde(default)]
    cluster: ProviderCluster,
}

#[derive(Default, serde::Deserialize)]
struct ProviderCluster {
    server: Option<String>,
    #[serde(default)]
    extensions: Vec<NamedExtension>,
}

#[derive(serde::Deserialize)]
struct NamedExtension {
    name: String,
    #[serde(default)]
    extension: ExecExtension,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecExtension {
    cluster_name: Option<String>,
}

/// The namespace's ClusterProfiles, and whether each one's synced Secret exists (names only).
pub async fn profiles(
    hub: &dyn ClusterApi,
    namespace: &str,
    msa: &str,
) -> Result<Vec<Profile>, crate::backend::KubeError> {
    let list = hub
        .list(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            Some(namespace),
            None,
        )
        .await?;
    let secrets: Vec<String> = hub
        .list_metadata("v1", "Secret", Some(namespace), None)
        .await?
        .into_iter()
        .filter_map(|s| serde_json::from_value::<Named>(s).ok()?.metadata.name)
        .collect();
    let mut out: Vec<Profile> = list
        .into_iter()
        .map(|p| {
            let p: ClusterProfile = serde_json::from_value(p).unwrap_or_default();
            let name = p.metadata.name.unwrap_or_else(|| "?".to_owned());
            let provider = p
                .status
                .access_providers
                .into_iter()
                .find(|a| a.name == PROVIDER);
            let cluster = provider
                .as_ref()
                .and_then(|a| {
                    a.cluster
                        .extensions
                        .iter()
                        .find(|e| e.name == "client.authentication.k8s.io/exec")
                        .and_then(|e| e.extension.cluster_name.clone())
                })
                .unwrap_or_else(|| name.clone());
            let synced_secret = format!("{cluster}-{msa}");
            Profile {
                server: provider.and_then(|a| a.cluster.server),
                synced: secrets.contains(&synced_secret),
                synced_secret,
                name,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The `-o yaml` form: the objects as a YAML stream for `kubectl apply -f -`, the profiles and the Pod spec
/// snippet as comments.
pub fn render_yaml(kit: &Kit) -> String {
    let mut out = String::new();
    let sim = if kit.simulated {
        " (SIMULATED lab)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "# What a ClusterProfile consumer in namespace {} of lab `{}`{sim} needs:",
        kit.namespace, kit.lab
    );
    let _ = writeln!(
        out,
        "# `kubectl apply -f` this, then give your Pod the spec at the end."
    );
    let _ = writeln!(out, "#\n# ClusterProfiles in {}:", kit.namespace);
    if kit.profiles.is_empty() {
        let _ = writeln!(out, "#   none yet");
    }
    for p in &kit.profiles {
        let _ = writeln!(
            out,
            "#   {}: {}; credential Secret {} {}",
            p.name,
            p.server.as_deref().map_or(
                "NO `open-cluster-management` access provider yet".to_owned(),
                |s| format!("server {s}")
            ),
            p.synced_secret,
            if p.synced { "synced" } else { "NOT synced yet" }
        );
    }
    for o in &kit.objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(o).expect("objects serialize to YAML"));
    }
    let _ = writeln!(
        out,
        "# The consumer's Pod spec: cp-creds copied out of {} by an initContainer, the provider file\n# mounted where the consumer reads it (the Go helper's flag; examples/consumer takes --provider-file).",
        kit.plugin_image
    );
    let spec =
        serde_saphyr::to_string(&json!({"spec": kit.pod_spec})).expect("objects serialize to YAML");
    for line in spec.lines() {
        let _ = writeln!(out, "# {line}");
    }
    out
}

/// `ocm-lab consumer`: read-only, so it takes no lock.
pub fn run(
    args: &crate::cli::ConsumerArgs,
    host: &crate::topology::Host,
) -> Result<(), crate::error::Error> {
    use super::runner::{Purpose, ensure_up, open_backends, runtime};
    use crate::cli::Output;
    use crate::error::Error;
    use crate::step::events::Events;
    let output = args.output.output;
    let run_args = crate::cli::RunArgs::from(args);
    let (loaded, _, patches) = super::inputs(&run_args.lab, host)?;
    super::warn(&loaded);
    let lab = loaded.lab;
    let (msa, image) =
        plan(&lab, &args.namespace, args.msa.as_deref()).map_err(|(why, help)| {
            Error::ConsumerTopology {
                namespace: args.namespace.clone(),
                why,
                help,
            }
        })?;
    // Read-only: a lab that is not up gets no state folder from a look at it.
    let state = crate::state::StateDir::to_look_at(&lab.name, run_args.simulate)?;
    ensure_up(&lab, &state, &run_args)?;
    let rt = runtime()?;
    let opened = open_backends(&rt, &run_args, &state, Purpose::Look, &lab)?;
    let simulated = opened.backends.simulated;
    let lab_name = lab.name.clone();
    let hub_name = lab.hub.cluster.name.clone();
    let read = rt.block_on(async {
        let (events, _rx) = Events::channel();
        let ctx = RunCtx::new(
            lab,
            opened.backends.clone(),
            state.clone(),
            patches,
            events,
            tokio_util::sync::CancellationToken::new(),
        );
        let hub = ctx.api(&hub_name).await?;
        profiles(hub.as_ref(), &args.namespace, &msa).await
    });
    rt.shutdown_background();
    let profiles = read.map_err(|e| Error::ConsumerHub {
        namespace: args.namespace.clone(),
        why: e.to_string(),
        help: format!(
            "`{}` says what is wrong with the lab",
            run_args.command_line("status")
        ),
    })?;
    let provider_file = provider_file(&msa);
    let kit = Kit {
        lab: lab_name,
        simulated,
        objects: objects(
            &args.namespace,
            &args.service_account,
            &provider_file,
            &Default::default(),
        ),
        pod_spec: pod_spec(&args.service_account, &image),
        namespace: args.namespace.clone(),
        profiles,
        managed_service_account: msa,
        plugin_image: image,
        provider_file,
    };
    match output {
        Output::Json => super::document(output, &kit, String::new),
        Output::Yaml | Output::Human => super::stdout(&render_yaml(&kit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_file_is_the_one_the_plugins_readme_gives_with_the_initcontainers_path() {
        assert_eq!(
            provider_file("inventory-reader"),
            json!({"providers": [{"name": "open-cluster-management", "execConfig": {
                "apiVersion": "client.authentication.k8s.io/v1", "command": "/plugins/cp-creds",
                "args": ["--managed-serviceaccount=inventory-reader"], "provideClusterInfo": true,
                "interactiveMode": "Never"}}]})
        );
    }
}
