//! The provider file and the choice of access provider, as the Cluster Inventory API's Go helper makes them.
//!
//! kubernetes-sigs/cluster-inventory-api v0.1.2 `pkg/access/config.go`: a provider file is
//! `{"providers": [{"name", "execConfig", "profileSourcedCLIArgsPolicy", "profileSourcedEnvVarsPolicy"}]}`
//! (`NewFromFile`). `BuildConfigFromCP` indexes the profile's deprecated `status.credentialProviders` by name,
//! then `status.accessProviders` over them, and takes the first provider *in the file's order* whose name the
//! profile has; it copies the provider cluster's `server`, `certificate-authority-data` and `proxy-url` (not
//! `tls-server-name`, not `insecure-skip-tls-verify`), forces `interactiveMode: Never`, and hands the cluster's
//! `client.authentication.k8s.io/exec` extension to the plugin as its `ExecCredential.spec.cluster.config`.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::Error;

/// The access provider cluster-proxy writes (open-cluster-management-io/cluster-proxy v0.10.0
/// `pkg/proxyserver/controllers/clusterprofile_controller.go`) and managed-serviceaccount's `cp-creds` serves
/// (open-cluster-management-io/managed-serviceaccount v0.10.0 `cmd/clusterprofile-credentials-plugin/README.md`).
pub const PROVIDER: &str = "open-cluster-management";
/// The extension handed to an exec plugin as its cluster config; for OCM it holds `{clusterName: <cluster>}`.
pub const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";
/// The label OCM puts on each ClusterProfile with its ManagedCluster's name.
pub const CLUSTER_NAME_LABEL: &str = "open-cluster-management.io/cluster-name";

/// A provider file (`NewFromFile`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ProviderFile {
    pub providers: Vec<Provider>,
}

/// One provider of the file: its name, as on `status.accessProviders`, and the exec plugin that gives
/// credentials for it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provider {
    pub name: String,
    pub exec_config: Option<ExecConfig>,
    /// Whether the profile may add arguments to the plugin (`Append`); the Go helper's default is `Ignore`.
    #[serde(rename = "profileSourcedCLIArgsPolicy")]
    pub profile_sourced_cli_args_policy: Option<String>,
    /// Whether the profile may add environment variables to the plugin; the Go helper's default is `Ignore`.
    pub profile_sourced_env_vars_policy: Option<String>,
}

/// A clientcmd v1 `ExecConfig` (kubernetes/client-go v0.35.3 `tools/clientcmd/api/v1/types.go`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecConfig {
    pub api_version: String,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<ExecEnvVar>,
    #[serde(default)]
    pub provide_cluster_info: bool,
    /// Read and ignored: `BuildConfigFromCP` forces `Never`.
    pub interactive_mode: Option<String>,
    pub install_hint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ExecEnvVar {
    pub name: String,
    pub value: String,
}

impl ProviderFile {
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ProviderFileRead {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|source| Error::ProviderFileParse {
            path: path.to_owned(),
            source,
        })
    }

    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// What a ClusterProfile's chosen access provider says about reaching its spoke.
#[derive(Debug, Clone, PartialEq)]
pub struct Access {
    pub profile: String,
    /// The provider chosen (the first of the file's that the profile has).
    pub provider: String,
    /// The spoke's name, for the report: the exec extension's `clusterName`, else the profile's cluster-name
    /// label, else the profile's name.
    pub cluster: String,
    pub server: String,
    /// `certificate-authority-data` (base64 PEM), as the provider gives it.
    pub ca_data: Option<String>,
    pub proxy_url: Option<String>,
    /// The `client.authentication.k8s.io/exec` extension, which becomes `ExecCredential.spec.cluster.config`.
    pub exec_extension: Option<Value>,
    /// The file's exec plugin for this provider.
    pub exec: ExecConfig,
}

/// The access of a ClusterProfile, as `BuildConfigFromCP` chooses it from the profile and the provider file.
pub fn access(profile: &Value, file: &ProviderFile) -> Result<Access, Error> {
    let name = profile["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The deprecated list first, then accessProviders, whose entries win by name.
    let mut on_profile: Vec<(&str, &Value)> = Vec::new();
    for key in ["credentialProviders", "accessProviders"] {
        for p in profile["status"][key].as_array().into_iter().flatten() {
            let pname = p["name"].as_str().unwrap_or_default();
            on_profile.retain(|(n, _)| *n != pname);
            on_profile.push((pname, &p["cluster"]));
        }
    }
    // The file's order decides, not the profile's.
    let Some((provider, cluster)) = file.providers.iter().find_map(|p| {
        on_profile
            .iter()
            .find(|(n, _)| *n == p.name)
            .map(|(_, c)| (p, *c))
    }) else {
        let have: Vec<&str> = on_profile.iter().map(|(n, _)| *n).collect();
        return Err(Error::NoProvider {
            profile: name,
            wanted: file
                .providers
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            have: if have.is_empty() {
                "none".into()
            } else {
                have.join(", ")
            },
        });
    };
    let exec = provider
        .exec_config
        .clone()
        .ok_or_else(|| Error::NoExecConfig {
            provider: provider.name.clone(),
        })?;
    for (policy, what) in [
        (
            &provider.profile_sourced_cli_args_policy,
            "profileSourcedCLIArgsPolicy",
        ),
        (
            &provider.profile_sourced_env_vars_policy,
            "profileSourcedEnvVarsPolicy",
        ),
    ] {
        if let Some(p) = policy
            .as_deref()
            .filter(|p| !p.is_empty() && *p != "Ignore")
        {
            return Err(Error::UnsupportedPolicy {
                provider: provider.name.clone(),
                what,
                policy: p.to_owned(),
            });
        }
    }
    let server = cluster["server"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::NoServer {
            profile: name.clone(),
            provider: provider.name.clone(),
        })?
        .to_owned();
    let exec_extension = cluster["extensions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == EXEC_EXTENSION)
        .map(|e| e["extension"].clone());
    let from_extension = exec_extension
        .as_ref()
        .and_then(|e| e["clusterName"].as_str());
    let from_label = profile["metadata"]["labels"][CLUSTER_NAME_LABEL].as_str();
    Ok(Access {
        cluster: from_extension.or(from_label).unwrap_or(&name).to_owned(),
        profile: name,
        provider: provider.name.clone(),
        server,
        ca_data: cluster["certificate-authority-data"]
            .as_str()
            .map(str::to_owned),
        proxy_url: cluster["proxy-url"].as_str().map(str::to_owned),
        exec_extension,
        exec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The provider file as OCM's documentation and the plugin's README give it.
    pub(crate) const OCM_FILE: &str = r#"{"providers": [{"name": "open-cluster-management",
      "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/plugins/cp-creds",
                     "args": ["--managed-serviceaccount=inventory-reader"], "provideClusterInfo": true,
                     "interactiveMode": "Never"}}]}"#;

    #[test]
    fn the_documented_provider_file_parses() {
        let file = ProviderFile::parse(OCM_FILE).unwrap();
        let exec = file.providers[0].exec_config.as_ref().unwrap();
        assert_eq!(file.providers[0].name, PROVIDER);
        assert_eq!(exec.command, "/plugins/cp-creds");
        assert_eq!(exec.args, ["--managed-serviceaccount=inventory-reader"]);
        assert!(exec.provide_cluster_info);
        assert!(ProviderFile::parse(r#"{"providers": [{"execConfig": {}}]}"#).is_err());
    }

    #[test]
    fn the_first_provider_in_the_files_order_that_the_profile_has_wins_over_the_deprecated_list() {
        let file = ProviderFile::parse(
            r#"{"providers": [
              {"name": "gke", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "gke-plugin"}},
              {"name": "open-cluster-management", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "cp-creds"}}]}"#,
        )
        .unwrap();
        let profile = json!({
            "metadata": {"name": "p1", "labels": {CLUSTER_NAME_LABEL: "from-label"}},
            "status": {
                "credentialProviders": [
                    {"name": PROVIDER, "cluster": {"server": "https://old:1/x"}},
                    {"name": "other", "cluster": {"server": "https://other:1"}}
                ],
                "accessProviders": [
                    {"name": "other", "cluster": {"server": "https://other:2"}},
                    {"name": PROVIDER, "cluster": {"server": "https://new:1/p1", "proxy-url": "http://proxy:3128",
                     "tls-server-name": "ignored", "insecure-skip-tls-verify": true}}
                ]
            }
        });
        let a = access(&profile, &file).unwrap();
        assert_eq!(a.provider, PROVIDER);
        assert_eq!(a.exec.command, "cp-creds");
        assert_eq!(a.server, "https://new:1/p1");
        assert_eq!(
            a.cluster, "from-label",
            "no exec extension: the label names the cluster"
        );
        assert_eq!(a.exec_extension, None);
        assert_eq!(a.proxy_url.as_deref(), Some("http://proxy:3128"));

        // The file's order, not the profile's, decides between two providers the profile has.
        let other_first = ProviderFile::parse(
            r#"{"providers": [
              {"name": "other", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "other-plugin"}},
              {"name": "open-cluster-management", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "cp-creds"}}]}"#,
        )
        .unwrap();
        let a = access(&profile, &other_first).unwrap();
        assert_eq!(
            (a.provider.as_str(), a.server.as_str()),
            ("other", "https://other:2")
        );

        let only_other = json!({"metadata": {"name": "p2"},
            "status": {"accessProviders": [{"name": "other", "cluster": {"server": "https://x"}}]}});
        let e = access(&only_other, &file).unwrap_err().to_string();
        assert!(
            e.contains("p2") && e.contains("(gke, open-cluster-management; it has: other)"),
            "{e}"
        );
        let none = json!({"metadata": {"name": "p3"}, "status": {}});
        assert!(
            access(&none, &file)
                .unwrap_err()
                .to_string()
                .contains("it has: none)")
        );
    }

    #[test]
    fn a_provider_without_an_exec_config_or_with_a_profile_sourced_policy_is_refused() {
        let profile = json!({"metadata": {"name": "p"},
            "status": {"accessProviders": [{"name": PROVIDER, "cluster": {"server": "https://x/p"}}]}});
        let no_exec =
            ProviderFile::parse(r#"{"providers": [{"name": "open-cluster-management"}]}"#).unwrap();
        assert!(matches!(
            access(&profile, &no_exec),
            Err(Error::NoExecConfig { .. })
        ));
        let append = ProviderFile::parse(
            r#"{"providers": [{"name": "open-cluster-management", "profileSourcedCLIArgsPolicy": "Append",
                "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "c"}}]}"#,
        )
        .unwrap();
        assert!(matches!(
            access(&profile, &append),
            Err(Error::UnsupportedPolicy { .. })
        ));
    }
}
