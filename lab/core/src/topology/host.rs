//! What the command line and the environment say about the machine a lab is driven from.

/// What the command line and the environment say about the machine a lab is driven from: kubectl's
/// `--kubeconfig` and `--context` flags, `$KUBECONFIG`, `$HOME`, and the Docker network kind uses. The
/// command layer builds it once and passes it to [`crate::topology::load_arg`]; the lab carries it
/// ([`super::Lab::host`]), so nothing below the command layer reads flags or the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// `--kubeconfig` (absolute): the kubeconfig of every `existing:` cluster that names none, and the file
    /// `up` merges the kind clusters' contexts into (instead of `$KUBECONFIG` / `~/.kube/config`).
    pub kubeconfig: Option<String>,
    /// `--context`: the context of the one `existing:` cluster that leaves `context` out.
    pub context: Option<String>,
    /// `$KUBECONFIG` as it is (a list of paths), when set and not empty.
    pub kubeconfig_env: Option<String>,
    /// `$HOME`, for `~/` in paths and kubectl's `~/.kube/config`.
    pub home: Option<String>,
    /// The Docker network kind puts its nodes on (`kind`, or `KIND_EXPERIMENTAL_DOCKER_NETWORK`).
    pub kind_network: String,
}

impl Default for Host {
    /// No flags, no environment, kind's default network.
    fn default() -> Self {
        Host {
            kubeconfig: None,
            context: None,
            kubeconfig_env: None,
            home: None,
            kind_network: "kind".to_owned(),
        }
    }
}

impl Host {
    /// kubectl's default: `--kubeconfig`, else `$KUBECONFIG` as it is (a list of paths, merged where the
    /// cluster is reached), else `~/.kube/config`.
    pub fn default_kubeconfig(&self) -> String {
        if let Some(k) = &self.kubeconfig {
            return self.expand_home(k);
        }
        match &self.kubeconfig_env {
            Some(k) => k.clone(),
            None => self.expand_home("~/.kube/config"),
        }
    }

    /// The user's kubeconfig file, the one `up` merges contexts into: `--kubeconfig`, else the first
    /// entry of `$KUBECONFIG`, else `~/.kube/config`.
    pub fn user_kubeconfig(&self) -> Option<std::path::PathBuf> {
        if let Some(k) = &self.kubeconfig {
            return Some(k.into());
        }
        if let Some(k) = &self.kubeconfig_env {
            return std::env::split_paths(k).next();
        }
        self.home
            .as_ref()
            .map(|h| std::path::Path::new(h).join(".kube/config"))
    }

    pub(super) fn expand_home(&self, path: &str) -> String {
        match (path.strip_prefix("~/"), &self.home) {
            (Some(rest), Some(home)) => format!("{home}/{rest}"),
            _ => path.to_owned(),
        }
    }
}
