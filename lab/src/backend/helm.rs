//! The helm binary as a [`ChartRenderer`]: `helm template` a pinned chart from its repository and
//! parse the result into objects, CRDs first.
//!
//! The command ([`template_args`]) is the same for Helm v3 and v4:
//! `helm template <release> <chart> --repo <repo> --version <version> --namespace <ns> --include-crds
//! --values <file>`. There is no post-renderer: our chart patches apply to the parsed objects.
//!
//! Values can hold a secret (the klusterlet's bootstrap kubeconfig), so they go to a file created with
//! mode 0600 in a private (0700) temporary folder that is removed as soon as helm exits, or when the
//! call is cancelled. Values and helm's stdout (which renders them into Secrets) are never logged and
//! never put into errors; errors carry the command line and helm's stderr.
//!
//! Failures: a chart or version missing from the repository is permanent (help: check the version with
//! `ocm-lab plan`); an unreachable repository (`dial tcp`, `i/o timeout`, `connection refused`,
//! `TLS handshake`, `no such host`, `connection reset`, `Client.Timeout`, or an HTTP 5xx) is transient;
//! everything else (a template error, a schema rejection) is permanent.

use std::path::Path;

use async_trait::async_trait;
use serde_json::Value;

use super::tools::{self, Tool, Verdict};
use super::{ChartRenderer, HelmError, Rendered};
use crate::charts::ChartPlan;

/// helm, run as a subprocess.
#[derive(Debug, Clone)]
pub struct Helm {
    tool: Tool,
}

impl Helm {
    pub fn new(tool: Tool) -> Self {
        Helm { tool }
    }

    pub fn tool(&self) -> &Tool {
        &self.tool
    }
}

/// `helm template` arguments for `chart`, reading values from `values_file`.
pub fn template_args(chart: &ChartPlan, values_file: &Path) -> Vec<String> {
    vec![
        "template".into(),
        chart.release.clone(),
        chart.chart.name().into(),
        "--repo".into(),
        chart.repo.clone(),
        "--version".into(),
        chart.version.clone(),
        "--namespace".into(),
        chart.namespace.clone(),
        "--include-crds".into(),
        "--values".into(),
        values_file.to_string_lossy().into_owned(),
    ]
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

/// Splits a `helm template` stream into CRDs and other objects, each in output order. Empty and null
/// documents (and comments such as `# Source:`) are skipped; a `v1` `List` is replaced by its items.
pub fn parse_manifests(stdout: &str) -> Result<Rendered, ParseError> {
    let options = serde_saphyr::options! {
        // Charts with many CRDs are large; the defaults are sized for config files.
        budget: serde_saphyr::budget! {
            max_documents: 100_000,
            max_nodes: 10_000_000,
            max_events: 40_000_000,
            max_depth: 256,
        },
    };
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(stdout, options).map_err(|e| {
            // No snippet: it would quote the output, which may hold a Secret.
            let plain = e.without_snippet();
            ParseError::Yaml {
                location: plain.location().map(|l| (l.line(), l.column())),
                message: plain.to_string(),
            }
        })?;
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

#[async_trait]
impl ChartRenderer for Helm {
    async fn template(&self, chart: &ChartPlan, values: &Value) -> Result<Rendered, HelmError> {
        let what = format!(
            "{} {} (release `{}` in namespace `{}`)",
            chart.chart.name(),
            chart.version,
            chart.release,
            chart.namespace
        );
        let scratch = tools::ScratchDir::new("ocm-lab-helm").map_err(|e| HelmError::Scratch {
            chart: what.clone(),
            detail: e.to_string(),
        })?;
        let values_file = scratch.path.join("values.json");
        // JSON is YAML, and exact: no YAML type guessing on strings like `on` or `1.10`.
        let bytes = serde_json::to_vec(values).expect("JSON values serialize");
        tools::write_private(&values_file, &bytes).map_err(|e| HelmError::ValuesFile {
            chart: what.clone(),
            detail: e.to_string(),
        })?;
        let args = template_args(chart, &values_file);
        let out = tools::run(&self.tool, &args, None).await;
        // Remove the values (they may hold a bootstrap token) before anything else happens.
        drop(scratch);
        let out = out?;
        if !out.status.success() {
            return Err(HelmError::Template {
                chart: what,
                failure: out.failure(),
                verdict: classify_template_failure(chart, &out.stderr),
            });
        }
        let text = String::from_utf8(out.stdout).map_err(|_| HelmError::NotUtf8 {
            chart: what.clone(),
            command: out.command.clone(),
        })?;
        parse_manifests(&text).map_err(|e| HelmError::BadOutput {
            chart: what,
            command: out.command,
            detail: e.to_string(),
        })
    }
}
