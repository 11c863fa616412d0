//! The helm binary as a [`ChartRenderer`]: installs the lab's charts as real Helm releases
//! (`helm upgrade --install`, so `helm ls -A`, `helm get manifest` and `helm uninstall` work), and
//! renders them (`helm template`) for the checks that must run before anything reaches a cluster.
//!
//! Our chart patches (`charts-patches/`) are applied by Helm's post-renderer, which is ocm-lab itself
//! (the hidden `__post-render` command, `commands::postrender`). Helm 3 and Helm 4 run it differently
//! (helm/helm v3.19.5 `pkg/postrender/exec.go`, `pkg/action/action.go`; helm/helm v4.2.4 `pkg/cmd/flags.go`,
//! `internal/plugin/runtime_subprocess.go`):
//! - Helm 3: `--post-renderer <path of ocm-lab> --post-renderer-args=__post-render
//!   --post-renderer-args=--chart --post-renderer-args=<chart> …` (an executable path; each
//!   `--post-renderer-args` is one argv element).
//! - Helm 4: `--post-renderer` takes only the name of a `postrenderer/v1` plugin. ocm-lab writes the
//!   plugin [`PLUGIN_NAME`] into its cache (`<cache>/helm-plugins/ocm-lab-post-render/plugin.yaml`,
//!   subprocess runtime, command = `$OCM_LAB_POST_RENDERER`, args = `__post-render`) and, for its own
//!   helm commands, points `HELM_PLUGINS` at that folder and `OCM_LAB_POST_RENDERER` at this binary
//!   (a variable, because Helm 4 splits a plugin's command on spaces, [`PostRenderer::plugin_yaml`]).
//!   `--post-renderer-args` are appended after the plugin's args. Helm 4 also post-renders hooks;
//!   neither version post-renders `crds/`.
//!
//! The commands (the values file is the plan's values plus run-time values):
//! - `helm template <release> <chart> --repo <repo> --version <version> --namespace <ns>
//!   --include-crds --values <file> <post-renderer>`
//! - `helm upgrade --install <release> <chart> --repo … --version … --namespace <ns> --create-namespace
//!   --skip-crds --values <file> --kubeconfig <file> --kube-context <context> <post-renderer>`
//!   (`--skip-crds`: the install action applies the CRDs itself first, because Helm never upgrades
//!   `crds/` and the lab waits for them to be served; helm/helm v3.19.5 `pkg/action/install.go`,
//!   `pkg/action/upgrade.go`)
//! - With the chart cache ([`Helm::with_chart_cache`], which `up`, `reset` and `plan` use), `<chart> --repo …
//!   --version …` is replaced by the cached, verified `<cache>/charts/<repo-host>/<name>-<version>.tgz`
//!   (`backend::chart_cache`): the repository is reached once per chart version, never again.
//! - `helm list [--all] --filter ^<release>$ -n <ns> -o json` (`--all` for Helm 3 only: Helm 4 lists
//!   every status by default and refuses the flag, [`list_args`]), `helm get values <release> -n <ns> -o json`
//! - `helm upgrade` also gets `--labels ocm-lab.open-cluster-management.io/lab=<lab>` (Helm ≥ 3.13),
//!   and `helm uninstall <release> -n <ns>` runs only when `helm list --selector` with that label
//!   finds the release: a release of the same name that the lab did not install is left alone.
//!
//! Values can hold a secret, so they go to a file created with mode 0600 in a private (0700) temporary
//! folder (`tempfile`) that is removed as soon as helm exits, or when the call is cancelled. Values and
//! helm's stdout (which renders them into Secrets) are never logged and never put into errors; errors
//! carry the command line and helm's stderr.
//!
//! Failures: a chart or version missing from the repository is permanent (help: check the version with
//! `ocm-lab plan`); an unreachable repository (`dial tcp`, `i/o timeout`, `connection refused`,
//! `TLS handshake`, `no such host`, `connection reset`, `Client.Timeout`, or an HTTP 5xx) is transient;
//! everything else (a template error, a post-renderer failure, a schema rejection) is permanent.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde_json::Value;

use super::chart_cache::{ChartCache, ChartCacheError};
use super::tools::{self, Tool, Verdict};
use super::{ChartRenderer, HelmError, HelmTarget, Release, Rendered};
use crate::charts::ChartPlan;

/// The adapter's results: a [`HelmError`] unless said otherwise.
type Result<T, E = HelmError> = std::result::Result<T, E>;

/// The hidden ocm-lab command Helm runs as its post-renderer (`commands::postrender`).
pub const POST_RENDER_SUBCOMMAND: &str = "__post-render";

/// The name of the Helm 4 post-renderer plugin ocm-lab writes.
pub const PLUGIN_NAME: &str = "ocm-lab-post-render";

/// The variable holding the ocm-lab binary's path in the environment of ocm-lab's helm commands, which
/// the Helm 4 plugin's command expands ([`PostRenderer::plugin_yaml`]).
pub const EXE_VARIABLE: &str = "OCM_LAB_POST_RENDERER";

/// Extra environment variables for a helm command.
pub type Env = Vec<(String, OsString)>;

/// How Helm runs ocm-lab as its post-renderer.
#[derive(Debug, Clone)]
pub struct PostRenderer {
    /// The ocm-lab binary Helm runs (`std::env::current_exe()`).
    pub exe: PathBuf,
    /// `--chart-patches`, passed on so the post-renderer uses the same patches as the run.
    pub chart_patches: Option<PathBuf>,
    /// Where the Helm 4 plugin is written; `HELM_PLUGINS` points here.
    pub plugins_dir: PathBuf,
}

impl PostRenderer {
    /// The arguments of `ocm-lab __post-render` for `chart`.
    pub fn command_args(&self, chart: &ChartPlan) -> Vec<String> {
        let mut args = vec![
            "--chart".to_owned(),
            chart.chart.name().to_owned(),
            "--chart-version".to_owned(),
            chart.version.clone(),
        ];
        if let Some(dir) = &self.chart_patches {
            args.push("--chart-patches".to_owned());
            args.push(dir.to_string_lossy().into_owned());
        }
        args
    }

    /// The Helm 4 `plugin.yaml`: a `postrenderer/v1` plugin, subprocess runtime, whose command is
    /// [`EXE_VARIABLE`] (helm/helm v4.2.4 `pkg/postrenderer/testdata/plugins/postrenderer-v1/plugin.yaml`).
    ///
    /// The command is the variable, not the path: Helm 4 splits a plugin's command on every space
    /// *before* it expands `$VARS` in the first part (helm/helm v4.0.0 to v4.2.4
    /// `internal/plugin/subprocess_commands.go`: `strings.Split(c.Command, " ")`, then
    /// `os.Expand(cmdParts[0], …)`), with the variables of helm's own environment
    /// (`internal/plugin/runtime_subprocess.go` `runPostrenderer`: `ParseEnv(os.Environ())`). A path
    /// written into the command breaks at its first space (a macOS home folder); the variable is one
    /// part, and its value is used whole.
    pub fn plugin_yaml(&self) -> String {
        let exe = format!("\"${EXE_VARIABLE}\"");
        format!(
            "# Written by ocm-lab: Helm 4 runs ocm-lab as its post-renderer through this plugin.\n\
             name: \"{PLUGIN_NAME}\"\n\
             version: \"{}\"\n\
             type: postrenderer/v1\n\
             apiVersion: v1\n\
             runtime: subprocess\n\
             runtimeConfig:\n\
             \x20 platformCommand:\n\
             \x20 - command: {exe}\n\
             \x20   args: [\"{}\"]\n",
            env!("CARGO_PKG_VERSION"),
            POST_RENDER_SUBCOMMAND
        )
    }

    /// Writes the Helm 4 plugin (atomically: parallel installs may write it at once).
    pub fn write_plugin(&self) -> std::io::Result<()> {
        let dir = self.plugins_dir.join(PLUGIN_NAME);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("plugin.yaml");
        let text = self.plugin_yaml();
        if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
            return Ok(());
        }
        let mut tmp = tempfile::NamedTempFile::new_in(&dir)?;
        std::io::Write::write_all(&mut tmp, text.as_bytes())?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// helm, run as a subprocess.
#[derive(Debug, Clone)]
pub struct Helm {
    tool: Tool,
    post: PostRenderer,
    /// Where charts are fetched to once and rendered from; `None`: helm fetches them itself (`--repo`).
    charts: Option<ChartCache>,
}

impl Helm {
    pub fn new(tool: Tool, post: PostRenderer) -> Self {
        Helm {
            tool,
            post,
            charts: None,
        }
    }

    /// Renders and installs charts from the chart cache (`backend::chart_cache`): each chart is fetched
    /// and verified once, then helm is given the local `.tgz`.
    pub fn with_chart_cache(mut self, cache: ChartCache) -> Self {
        self.charts = Some(cache);
        self
    }

    /// The local `.tgz` of `chart` from the chart cache (fetched and verified when missing), or `None`
    /// without a cache.
    async fn local_chart(&self, chart: &ChartPlan, what: &str) -> Result<Option<PathBuf>> {
        let Some(cache) = self.charts.clone() else {
            return Ok(None);
        };
        let (repo, name, version) = (
            chart.repo.clone(),
            chart.chart.name().to_owned(),
            chart.version.clone(),
        );
        let got = tokio::task::spawn_blocking(move || cache.ensure(&repo, &name, &version))
            .await
            .map_err(|e| HelmError::ChartCache {
                what: what.to_owned(),
                error: std::sync::Arc::new(ChartCacheError::Cache {
                    path: "the chart cache".to_owned(),
                    problem: format!("the fetch stopped: {e}"),
                }),
            })?;
        got.map(Some).map_err(|e| HelmError::ChartCache {
            what: what.to_owned(),
            error: std::sync::Arc::new(e),
        })
    }

    pub fn tool(&self) -> &Tool {
        &self.tool
    }

    /// The post-renderer flags for this helm's major version, and the environment they need.
    pub fn post_renderer_flags(&self, chart: &ChartPlan) -> std::io::Result<(Vec<String>, Env)> {
        post_renderer_flags(self.tool.version.major, &self.post, chart)
    }

    /// Runs helm with a private values file holding `values`, the post-renderer when `post` is set.
    async fn run_with_values(
        &self,
        what: &str,
        values: &Value,
        args: impl FnOnce(&Path) -> Vec<String>,
        chart: Option<&ChartPlan>,
        target: Option<&HelmTarget>,
    ) -> Result<tools::Output> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("ocm-lab-helm");
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
        let scratch = builder.tempdir().map_err(|e| HelmError::Scratch {
            what: what.to_owned(),
            detail: e.to_string(),
        })?;
        let values_file = scratch.path().join("values.json");
        // JSON is YAML, and exact: no YAML type guessing on strings like `on` or `1.10`.
        let bytes = serde_json::to_vec(values).expect("JSON values serialize");
        tools::write_private(&values_file, &bytes).map_err(|e| HelmError::ValuesFile {
            what: what.to_owned(),
            detail: e.to_string(),
        })?;
        let mut args = args(&values_file);
        if let Some(t) = target {
            args.extend(target_args(t));
        }
        let mut env = Vec::new();
        if let Some(chart) = chart {
            let (flags, e) = self
                .post_renderer_flags(chart)
                .map_err(|e| HelmError::Plugin {
                    what: what.to_owned(),
                    dir: self.post.plugins_dir.display().to_string(),
                    detail: e.to_string(),
                })?;
            args.extend(flags);
            env = e;
        }
        let out = tools::run_with_env(&self.tool, &args, None, &env).await;
        // Remove the values (they may hold a bootstrap token) before anything else happens.
        drop(scratch);
        Ok(out?)
    }

    /// `helm list` of the release `name` in `namespace` (any status), narrowed to releases whose labels
    /// match `selector` when given.
    async fn list(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
        selector: Option<String>,
    ) -> Result<Vec<Listed>> {
        let what = format!("list Helm release `{name}` in namespace `{namespace}`");
        let args = list_args(self.tool.version.major, name, namespace, selector);
        let out = self.run_plain(args, target).await?;
        if !out.status.success() {
            return Err(HelmError::Release {
                what,
                failure: out.failure(),
            });
        }
        let command = out.command.clone();
        let text = utf8(out, &what)?;
        serde_json::from_str(text.trim()).map_err(|e| HelmError::BadOutput {
            what,
            command,
            detail: format!("it printed unexpected JSON: {e}"),
        })
    }

    /// Runs a helm command that needs no values file.
    async fn run_plain(&self, mut args: Vec<String>, target: &HelmTarget) -> Result<tools::Output> {
        args.extend(target_args(target));
        Ok(tools::run(&self.tool, &args, None).await?)
    }
}

/// `--kubeconfig <file> --kube-context <context>`.
pub fn target_args(t: &HelmTarget) -> Vec<String> {
    vec![
        "--kubeconfig".into(),
        t.kubeconfig.to_string_lossy().into_owned(),
        "--kube-context".into(),
        t.context.clone(),
    ]
}

/// `helm list` arguments for the release `name` in `namespace` in any status, narrowed to `selector`'s
/// labels when given. Helm 3 lists only deployed and failed releases unless given `--all`; Helm 4 lists
/// every status by default and has no `--all` (cobra fails the command with `unknown flag: --all`):
/// helm/helm v3.20.2 `cmd/helm/list.go` defines `-a/--all`, v4.0.0 and later `pkg/cmd/list.go` do not,
/// and their `pkg/action/list.go` `SetStateMask` defaults to `ListDeployed | ListFailed` (v3) and
/// `ListAll` (v4).
pub fn list_args(major: u64, name: &str, namespace: &str, selector: Option<String>) -> Vec<String> {
    let mut args: Vec<String> = vec!["list".into()];
    if major < 4 {
        args.push("--all".into());
    }
    args.extend(["--filter".into(), format!("^{name}$")]);
    if let Some(selector) = selector {
        args.extend(["--selector".into(), selector]);
    }
    args.extend([
        "--namespace".into(),
        namespace.to_owned(),
        "--output".into(),
        "json".into(),
    ]);
    args
}

/// The post-renderer flags for Helm `major` (3: an executable path; 4: a plugin name, with
/// `HELM_PLUGINS` pointing at the plugin ocm-lab writes), and the environment to run helm with.
pub fn post_renderer_flags(
    major: u64,
    post: &PostRenderer,
    chart: &ChartPlan,
) -> std::io::Result<(Vec<String>, Env)> {
    let mut flags = Vec::new();
    let mut env = Vec::new();
    let mut args = post.command_args(chart);
    if major >= 4 {
        post.write_plugin()?;
        flags.push("--post-renderer".to_owned());
        flags.push(PLUGIN_NAME.to_owned());
        env.push((
            "HELM_PLUGINS".to_owned(),
            post.plugins_dir.clone().into_os_string(),
        ));
        env.push((EXE_VARIABLE.to_owned(), post.exe.clone().into_os_string()));
    } else {
        flags.push("--post-renderer".to_owned());
        flags.push(post.exe.to_string_lossy().into_owned());
        args.insert(0, POST_RENDER_SUBCOMMAND.to_owned());
    }
    // `=`: an argument starting with `--` must not be read as a flag of helm's own.
    flags.extend(
        args.into_iter()
            .map(|a| format!("--post-renderer-args={a}")),
    );
    Ok((flags, env))
}

/// `helm template` arguments for `chart`, reading values from `values_file` (post-renderer flags
/// are added by the adapter).
pub fn template_args(chart: &ChartPlan, values_file: &Path) -> Vec<String> {
    template_args_from(chart, None, values_file)
}

/// The chart argument(s): the local `.tgz` when given (helm does not check `--version` against a local
/// chart, and Helm 4 skips a local path when `--repo` is set, helm/helm v4.2.4 `pkg/action/install.go`, so
/// neither is passed), else `<name> --repo <repo> --version <version>`.
fn chart_args(chart: &ChartPlan, local: Option<&Path>) -> Vec<String> {
    match local {
        Some(path) => vec![path.to_string_lossy().into_owned()],
        None => vec![
            chart.chart.name().into(),
            "--repo".into(),
            chart.repo.clone(),
            "--version".into(),
            chart.version.clone(),
        ],
    }
}

/// [`template_args`], from the local chart `local` when given.
pub fn template_args_from(
    chart: &ChartPlan,
    local: Option<&Path>,
    values_file: &Path,
) -> Vec<String> {
    let mut args = vec!["template".into(), chart.release.clone()];
    args.extend(chart_args(chart, local));
    args.extend([
        "--namespace".into(),
        chart.namespace.clone(),
        "--include-crds".into(),
        "--values".into(),
        values_file.to_string_lossy().into_owned(),
    ]);
    args
}

/// `helm upgrade --install` arguments for `chart` (target and post-renderer flags are added by the
/// adapter).
pub fn upgrade_args(chart: &ChartPlan, values_file: &Path) -> Vec<String> {
    upgrade_args_from(chart, None, values_file)
}

/// [`upgrade_args`], from the local chart `local` when given.
pub fn upgrade_args_from(
    chart: &ChartPlan,
    local: Option<&Path>,
    values_file: &Path,
) -> Vec<String> {
    let mut args = vec!["upgrade".into(), "--install".into(), chart.release.clone()];
    args.extend(chart_args(chart, local));
    args.extend([
        "--namespace".into(),
        chart.namespace.clone(),
        "--create-namespace".into(),
        "--skip-crds".into(),
        "--values".into(),
        values_file.to_string_lossy().into_owned(),
    ]);
    args
}

/// Why helm's output could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Where the YAML broke; the text itself is left out because the output renders secrets.
    #[error("its output is not valid YAML{}: {message}", location.map(|(l, c)| format!(" (line {l}, column {c})")).unwrap_or_default())]
    Yaml {
        location: Option<(u64, u64)>,
        message: String,
    },
    #[error("document {index} of its output is not an object with a `kind`")]
    NotAnObject { index: usize },
}

/// The documents of a manifest stream (what `helm template` prints, or what Helm hands its post-renderer),
/// in order. Errors carry the location but never a snippet: it would quote the manifests, which may hold a
/// Secret.
pub fn manifest_documents(text: &str) -> Result<Vec<Value>, ParseError> {
    let options = serde_saphyr::options! {
        // Charts with many CRDs are large; the defaults are sized for config files.
        budget: serde_saphyr::budget! {
            max_documents: 100_000,
            max_nodes: 10_000_000,
            max_events: 40_000_000,
            max_depth: 256,
        },
    };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
        let plain = e.without_snippet();
        ParseError::Yaml {
            location: plain.location().map(|l| (l.line(), l.column())),
            message: plain.to_string(),
        }
    })
}

/// Splits a `helm template` stream into CRDs and other objects, each in output order. Empty and null
/// documents (and comments such as `# Source:`) are skipped; a `v1` `List` is replaced by its items.
pub fn parse_manifests(stdout: &str) -> Result<Rendered, ParseError> {
    let docs = manifest_documents(stdout)?;
    let mut rendered = Rendered::default();
    let mut push = |obj: Value, index: usize| -> Result<(), ParseError> {
        match obj.get("kind").and_then(Value::as_str) {
            Some("CustomResourceDefinition") => rendered.crds.push(obj),
            Some(_) => rendered.objects.push(obj),
            None => return Err(ParseError::NotAnObject { index }),
        }
        Ok(())
    };
    for (index, doc) in docs.into_iter().enumerate() {
        let index = index + 1;
        match doc {
            Value::Null => {}
            Value::Object(_) if doc["kind"] == "List" && doc["apiVersion"] == "v1" => {
                let items = match doc.get("items") {
                    Some(Value::Array(items)) => items.clone(),
                    Some(Value::Null) | None => Vec::new(),
                    Some(_) => return Err(ParseError::NotAnObject { index }),
                };
                for item in items {
                    push(item, index)?;
                }
            }
            Value::Object(_) => push(doc, index)?,
            _ => return Err(ParseError::NotAnObject { index }),
        }
    }
    Ok(rendered)
}

const NETWORK_MARKERS: &[&str] = &[
    "dial tcp",
    "i/o timeout",
    "connection refused",
    "TLS handshake",
    "no such host",
    "connection reset",
    "Client.Timeout",
    "server misbehaving",
    "network is unreachable",
];

/// Classifies a failed `helm template` by its stderr: transient for an unreachable repository,
/// permanent otherwise.
pub fn classify_template_failure(chart: &ChartPlan, stderr: &str) -> Verdict {
    let has = |m: &str| stderr.contains(m);
    let transient_status = ["500", "502", "503", "504"]
        .iter()
        .any(|code| has(&format!(": {code}")) || has(&format!("HTTP {code}")));
    if has("not found in") && has("repository") || has("no chart version found") {
        return Verdict::permanent(Some(format!(
            "{} {} is not in {}: check the version in the topology (`ocm-lab plan`)",
            chart.chart.name(),
            chart.version,
            chart.repo
        )));
    }
    if NETWORK_MARKERS.iter().any(|m| has(m)) || transient_status {
        return Verdict::transient(format!(
            "the Helm repository {} is unreachable: check the network connection (and HTTPS_PROXY); ocm-lab retries",
            chart.repo
        ));
    }
    if has("is not a valid chart repository") {
        return Verdict::permanent(Some(format!(
            "{} does not serve a Helm repository index (index.yaml)",
            chart.repo
        )));
    }
    Verdict::permanent(None)
}

/// One entry of `helm list -o json` (`revision` is a string there).
#[derive(Debug, serde::Deserialize)]
struct Listed {
    name: String,
    namespace: String,
    revision: String,
    status: String,
    chart: String,
}

fn describe(chart: &ChartPlan) -> String {
    format!(
        "{} {} (release `{}` in namespace `{}`)",
        chart.chart.name(),
        chart.version,
        chart.release,
        chart.namespace
    )
}

fn utf8(out: tools::Output, what: &str) -> Result<String> {
    String::from_utf8(out.stdout).map_err(|_| HelmError::NotUtf8 {
        what: what.to_owned(),
        command: out.command,
    })
}

/// Helm's message when the post-renderer failed, with what to do (Helm 4 hides its stderr).
fn post_render_help(stderr: &str) -> Option<&'static str> {
    (stderr.contains("post render") || stderr.contains("post-render")).then_some(
        "ocm-lab's post-renderer (the chart patches) failed: `ocm-lab plan` and `up` run the same patches in their template pass and say which one; check `--chart-patches`",
    )
}

#[async_trait]
impl ChartRenderer for Helm {
    async fn template(&self, chart: &ChartPlan, values: &Value) -> Result<Rendered> {
        let what = format!("render {}", describe(chart));
        let local = self.local_chart(chart, &what).await?;
        let out = self
            .run_with_values(
                &what,
                values,
                |f| template_args_from(chart, local.as_deref(), f),
                Some(chart),
                None,
            )
            .await?;
        if !out.status.success() {
            let mut verdict = classify_template_failure(chart, &out.stderr);
            if verdict.help.is_none() {
                verdict.help = post_render_help(&out.stderr).map(str::to_owned);
            }
            return Err(HelmError::Template {
                what,
                failure: out.failure(),
                verdict,
            });
        }
        let command = out.command.clone();
        let text = utf8(out, &what)?;
        parse_manifests(&text).map_err(|e| HelmError::BadOutput {
            what,
            command,
            detail: e.to_string(),
        })
    }

    async fn upgrade_install(
        &self,
        target: &HelmTarget,
        chart: &ChartPlan,
        values: &Value,
    ) -> Result<Release> {
        let what = format!("install {}", describe(chart));
        let local = self.local_chart(chart, &what).await?;
        let out = self
            .run_with_values(
                &what,
                values,
                |f| {
                    let mut args = upgrade_args_from(chart, local.as_deref(), f);
                    args.push("--labels".into());
                    args.push(format!("{}={}", crate::topology::LAB_LABEL, target.lab));
                    args
                },
                Some(chart),
                Some(target),
            )
            .await?;
        if !out.status.success() {
            let mut verdict = classify_template_failure(chart, &out.stderr);
            if verdict.help.is_none() {
                verdict.help = post_render_help(&out.stderr)
                    .map(str::to_owned)
                    .or_else(|| {
                        out.stderr.contains("another operation").then(|| format!(
                            "Helm left the release in a pending state: `helm rollback {} -n {}` (or `helm uninstall`), then run `ocm-lab up` again",
                            chart.release, chart.namespace
                        ))
                    });
            }
            return Err(HelmError::Template {
                what,
                failure: out.failure(),
                verdict,
            });
        }
        self.release(target, &chart.release, &chart.namespace)
            .await?
            .ok_or(HelmError::ReleaseMissing { what })
    }

    async fn release(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<Option<Release>> {
        let what = format!("list Helm release `{name}` in namespace `{namespace}`");
        let listed = self.list(target, name, namespace, None).await?;
        let Some(l) = listed.into_iter().find(|l| l.name == name) else {
            return Ok(None);
        };
        let args = vec![
            "get".into(),
            "values".into(),
            name.to_owned(),
            "--namespace".into(),
            namespace.to_owned(),
            "--output".into(),
            "json".into(),
        ];
        let out = self.run_plain(args, target).await?;
        if !out.status.success() {
            return Err(HelmError::Release {
                what: format!("read the values of Helm release `{name}`"),
                failure: out.failure(),
            });
        }
        let command = out.command.clone();
        let text = utf8(out, &what)?;
        // Never quoted in errors: the values may hold secrets.
        let values = match text.trim() {
            "" | "null" => Value::Object(Default::default()),
            t => serde_json::from_str(t).map_err(|_| HelmError::BadOutput {
                what: format!("read the values of Helm release `{name}`"),
                command,
                detail: "helm printed something that is not JSON".to_owned(),
            })?,
        };
        Ok(Some(Release {
            name: l.name,
            namespace: l.namespace,
            revision: l.revision.parse().unwrap_or(0),
            status: l.status.into(),
            chart: l.chart,
            values,
        }))
    }

    async fn release_of_lab(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<bool> {
        // `helm list --selector` reads the labels `--labels` put on the release.
        let selector = format!("{}={}", crate::topology::LAB_LABEL, target.lab);
        let listed = self.list(target, name, namespace, Some(selector)).await?;
        Ok(listed.iter().any(|l| l.name == name))
    }

    async fn uninstall(&self, target: &HelmTarget, name: &str, namespace: &str) -> Result<bool> {
        // Only this lab's release.
        if !self.release_of_lab(target, name, namespace).await? {
            return Ok(false);
        }
        let args = vec![
            "uninstall".into(),
            name.to_owned(),
            "--namespace".into(),
            namespace.to_owned(),
        ];
        let out = self.run_plain(args, target).await?;
        if out.status.success() {
            return Ok(true);
        }
        if out.stderr.contains("not found") {
            return Ok(false);
        }
        Err(HelmError::Release {
            what: format!("uninstall Helm release `{name}` in namespace `{namespace}`"),
            failure: out.failure(),
        })
    }
}
