//! `ocm-lab __post-render`: ocm-lab as Helm's post-renderer (hidden; Helm runs it, people do not).
//!
//! Helm writes the rendered manifests of a release to the post-renderer's stdin and installs what it
//! prints on stdout; a non-zero exit stops the install before anything reaches the cluster
//! (helm/helm v3.19.5 `pkg/postrender/exec.go`, `pkg/action/action.go`; helm/helm v4.2.4 `pkg/cmd/flags.go`,
//! `internal/plugin/runtime_subprocess.go`). This command applies our chart patches (`charts-patches/`, or
//! `--chart-patches`) that match `--chart` at `--chart-version`, and prints every document back as JSON (JSON
//! is YAML, and exact: no YAML 1.1/1.2 type guessing on strings such as `on` or `1.10`).
//!
//! Helm 3 runs it as `--post-renderer <path to ocm-lab> --post-renderer-args __post-render …`; Helm 4
//! only takes a post-renderer plugin's name, so the Helm adapter writes a plugin whose command is this
//! binary (see `backend::helm`). Helm 4 annotates each document with its template file; the annotation
//! is kept as it came. Helm 3 does not post-render hooks, Helm 4 does; neither post-renders `crds/`.
//!
//! Failures (bad YAML on stdin, a patch that no longer fits the chart) go to stderr with what to do,
//! and the exit code is 1. Helm 4 does not show a plugin's stderr, so the Helm adapter runs the same
//! patches in its template pass first, where the message reaches the user.

use std::io::{Read, Write};

use serde_json::Value;

use crate::cli::PostRenderArgs;
use crate::error::Error;
use crate::patch::PatchSet;

/// The hidden subcommand's name.
pub use crate::backend::helm::POST_RENDER_SUBCOMMAND as SUBCOMMAND;

pub use crate::error::PostRenderError;

/// Reads manifests on stdin, writes the patched manifests on stdout.
pub fn run(args: &PostRenderArgs) -> Result<(), Error> {
    let patches = match &args.chart_patches {
        None => PatchSet::embedded()?,
        Some(dir) => PatchSet::load_dir(dir)?,
    };
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(PostRenderError::Stdin)?;
    let output = post_render(&patches, &args.chart, &args.chart_version, &input)?;
    let mut out = std::io::stdout().lock();
    out.write_all(output.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::Stdout)
}

/// The patched stream for `input` (Helm's rendered manifests): every non-empty document, in order, as
/// JSON after `---`. Errors say what broke, without quoting the manifests (they can hold Secrets).
pub fn post_render(
    patches: &PatchSet,
    chart: &str,
    version: &str,
    input: &str,
) -> Result<String, PostRenderError> {
    let version = semver::Version::parse(version).map_err(|e| PostRenderError::Version {
        version: version.to_owned(),
        detail: e.to_string(),
    })?;
    let mut objects = parse(input)?;
    let matching = patches.for_chart(chart, &version);
    if !matching.is_empty() {
        crate::patch::apply(&matching, &mut objects).map_err(|e| PostRenderError::Patch {
            chart: chart.to_owned(),
            version: version.to_string(),
            detail: e.to_string(),
        })?;
    }
    let mut out = String::new();
    for obj in &objects {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string_pretty(obj).expect("JSON values serialize"));
        out.push('\n');
    }
    Ok(out)
}

/// Helm's manifest stream as objects; empty documents and comments (`# Source:`) are dropped.
fn parse(input: &str) -> Result<Vec<Value>, PostRenderError> {
    let docs = crate::backend::helm::manifest_documents(input).map_err(|e| match e {
        crate::backend::helm::ParseError::Yaml { location, message } => PostRenderError::Yaml {
            location,
            detail: message,
        },
        crate::backend::helm::ParseError::NotAnObject { index } => {
            PostRenderError::NotAnObject { index }
        }
    })?;
    let mut objects = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(_) => objects.push(doc),
            _ => {
                return Err(PostRenderError::NotAnObject { index: index + 1 });
            }
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_matching_documents_and_keeps_the_rest() {
        let input = "---\n# Source: cluster-proxy/templates/a.yaml\napiVersion: proxy.open-cluster-management.io/v1alpha1\nkind: ManagedProxyConfiguration\nmetadata:\n  name: cluster-proxy\nspec:\n  proxyAgent:\n    image: x\n    additionalValues:\n      enableImpersonation: \"true\"\n---\n# Source: cluster-proxy/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: \"on\"\n";
        let out = post_render(
            &PatchSet::embedded().unwrap(),
            "cluster-proxy",
            "0.10.0",
            input,
        )
        .unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&out).unwrap();
        assert_eq!(docs.len(), 2);
        assert!(
            docs[0]
                .pointer("/spec/proxyAgent/additionalValues")
                .is_none()
        );
        assert_eq!(docs[0]["spec"]["proxyAgent"]["image"], "x");
        assert_eq!(docs[1]["data"]["k"], "on");
    }

    #[test]
    fn bad_input_is_an_error_without_the_text() {
        let e = post_render(&PatchSet::default(), "x", "1.0.0", "a: [\nsecret: hunter2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not valid YAML"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }
}
