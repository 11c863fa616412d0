//! The workflow file format and where workflow files come from (embedded, or a folder the user names).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::diag::{Collector, FileDiagnostics, suggest};
use crate::embedded;
use crate::workflow::Catalog;

pub const API_VERSION: &str = "ocm-lab.open-cluster-management.io/v1alpha1";
pub const KIND: &str = "Workflow";

/// Collections a step can fan out over with `foreach`.
pub const FOREACH: &[&str] = &[
    "clusters",
    "kindClusters",
    "existingClusters",
    "spokes",
    "managedClusters",
    "clusterSets",
    "namespaces",
    "bindings",
    "serviceAccounts",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkflowFile {
    pub api_version: Spanned<String>,
    pub kind: Spanned<String>,
    pub metadata: Metadata,
    pub steps: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub name: Spanned<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// A step as written. Strings may hold minijinja templates.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    pub id: Spanned<String>,
    pub uses: Spanned<String>,
    #[serde(default)]
    pub with: Option<Spanned<BTreeMap<String, Spanned<serde_json::Value>>>>,
    /// Step ids (`join`: every instance) or one instance (`create[{{ item.cluster }}]`).
    #[serde(default)]
    pub needs: Vec<Spanned<String>>,
    #[serde(default)]
    pub foreach: Option<Spanned<String>>,
    /// A template that renders to `true` or `false`; false skips the step (or this item of it).
    #[serde(default, rename = "if")]
    pub if_: Option<Spanned<String>>,
    #[serde(default)]
    pub timeout: Option<Spanned<String>>,
    #[serde(default)]
    pub retry: Option<RetrySpec>,
    /// What the step is for, shown by `ocm-lab plan`.
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Total attempts, including the first, each with the step's whole timeout. Absent: the default
    /// policy, transient errors retried until the step's deadline (see [`crate::workflow::Retry`]).
    #[serde(default)]
    pub attempts: Option<Spanned<u32>>,
    /// Delay before the first retry; doubled after each, up to 30 s.
    #[serde(default)]
    pub backoff: Option<Spanned<String>>,
}

/// Where workflow files and manifest templates are read from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// `(name, text)` of workflow files, by stem (`up`, `verify`, ...).
    pub workflows: Vec<(String, String)>,
    /// `(file name, text)` of manifest templates.
    pub manifests: Vec<(String, String)>,
    /// Shown in messages: `embedded` or the folder.
    pub origin: String,
}

impl Sources {
    pub fn embedded() -> Self {
        let own = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
                .collect()
        };
        Sources {
            workflows: own(embedded::WORKFLOWS),
            manifests: own(embedded::MANIFESTS),
            origin: "embedded".to_owned(),
        }
    }

    /// Reads `DIR/*.yaml` as workflows and `DIR/manifests/*.yaml` as templates. Templates missing from
    /// the folder fall back to the embedded ones, so a user can override a single file.
    pub fn from_dir(dir: &Path) -> std::io::Result<Self> {
        let mut s = Self::embedded();
        s.origin = dir.display().to_string();
        let read = |d: &Path| -> std::io::Result<Vec<(String, String)>> {
            let mut out = Vec::new();
            if !d.is_dir() {
                return Ok(out);
            }
            for e in std::fs::read_dir(d)? {
                let p = e?.path();
                if p.extension().is_some_and(|x| x == "yaml") {
                    let name = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or_default()
                        .to_owned();
                    out.push((name, std::fs::read_to_string(&p)?));
                }
            }
            Ok(out)
        };
        if !dir.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "there is no such folder",
            ));
        }
        let workflows = read(dir)?;
        let manifests = read(&dir.join("manifests"))?;
        if workflows.is_empty() && manifests.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it holds no workflow files (*.yaml) and no manifests/ folder of them",
            ));
        }
        for (name, text) in workflows {
            let stem = name.trim_end_matches(".yaml").to_owned();
            s.workflows.retain(|(n, _)| *n != stem);
            s.workflows.push((stem, text));
        }
        for (name, text) in manifests {
            s.manifests.retain(|(n, _)| *n != name);
            s.manifests.push((name, text));
        }
        Ok(s)
    }

    pub fn workflow_text(&self, name: &str) -> Option<&str> {
        self.workflows
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    /// The display name of a workflow file, for messages.
    pub fn file_name(&self, name: &str) -> String {
        match self.origin.as_str() {
            "embedded" => format!("embedded:workflows/{name}.yaml"),
            dir => format!("{dir}/{name}.yaml"),
        }
    }
}

/// Why a workflow file cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum WorkflowError {
    #[error("no workflow named `{name}` in {origin}")]
    #[diagnostic(code(ocm_lab::workflow::missing))]
    Missing { name: String, origin: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Invalid(Box<FileDiagnostics>),
}

/// Parses a workflow file and checks what can be checked without a topology: the format, unique step
/// ids, known actions and their inputs, known `foreach` collections.
pub fn load(
    sources: &Sources,
    actions: &dyn Catalog,
    name: &str,
) -> Result<(WorkflowFile, String, String), WorkflowError> {
    let text = sources
        .workflow_text(name)
        .ok_or_else(|| WorkflowError::Missing {
            name: name.to_owned(),
            origin: sources.origin.clone(),
        })?;
    let file = sources.file_name(name);
    let mut c = Collector::new(text);
    let parsed = match serde_saphyr::from_str::<WorkflowFile>(text) {
        Ok(w) => Some(w),
        Err(e) => {
            let loc = e.location();
            let msg = e.without_snippet().to_string();
            let msg = msg
                .split_once(": ")
                .filter(|(p, _)| p.starts_with("line "))
                .map_or(msg.as_str(), |(_, m)| m)
                .to_owned();
            let issue = c.error(loc.as_ref(), "(workflow)", msg);
            if let serde_saphyr::Error::SerdeUnknownField {
                field, expected, ..
            } = e.without_snippet()
                && let Some(s) = suggest(field, expected.iter().copied())
            {
                issue.help(format!("did you mean `{s}`?"));
            }
            None
        }
    };
    if let Some(w) = &parsed {
        check(w, actions, &mut c);
    }
    match parsed {
        Some(w) if !c.has_errors() => Ok((w, file, text.to_owned())),
        _ => Err(WorkflowError::Invalid(Box::new(FileDiagnostics::new(
            &file, text, c.issues,
        )))),
    }
}

fn check(w: &WorkflowFile, actions: &dyn Catalog, c: &mut Collector<'_>) {
    if w.api_version.value != API_VERSION {
        c.error(
            Some(&w.api_version.referenced),
            "apiVersion",
            format!("unsupported apiVersion `{}`", w.api_version.value),
        );
    }
    if w.kind.value != KIND {
        c.error(
            Some(&w.kind.referenced),
            "kind",
            format!("unsupported kind `{}`", w.kind.value),
        );
    }
    let mut ids = Vec::new();
    for s in &w.steps {
        check_step(s, actions, &ids, c);
        ids.push(s.id.value.clone());
    }
}

/// One step: its id (well-formed, not among `ids` before it), its action and inputs, its `foreach`
/// and its `retry`.
fn check_step(s: &Step, actions: &dyn Catalog, ids: &[String], c: &mut Collector<'_>) {
    let field = format!("steps.{}", s.id.value);
    if s.id.value.is_empty()
        || !s
            .id
            .value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        c.error(
            Some(&s.id.referenced),
            field.clone(),
            format!("step id `{}` must be letters, digits and `-`", s.id.value),
        );
    }
    if ids.contains(&s.id.value) {
        c.error(
            Some(&s.id.referenced),
            field.clone(),
            format!("duplicate step id `{}`", s.id.value),
        );
    }
    check_uses(s, actions, &field, c);
    if let Some(f) = &s.foreach
        && !FOREACH.contains(&f.value.as_str())
    {
        let issue = c.error(
            Some(&f.referenced),
            format!("{field}.foreach"),
            format!("unknown collection `{}`", f.value),
        );
        match suggest(&f.value, FOREACH.iter().copied()) {
            Some(sug) => issue.help(format!("did you mean `{sug}`?")),
            None => issue.help(format!("collections: {}", FOREACH.join(", "))),
        };
    }
    if let Some(a) = s.retry.as_ref().and_then(|r| r.attempts.as_ref())
        && a.value == 0
    {
        c.error(
            Some(&a.referenced),
            format!("{field}.retry.attempts"),
            "attempts counts the first try too: use 1 or more",
        );
    }
}

/// The step's action is known, and its `with:` names only its inputs and every required one.
fn check_uses(s: &Step, actions: &dyn Catalog, field: &str, c: &mut Collector<'_>) {
    let action = s.uses.value.as_str();
    let Some(inputs) = actions.action(action).map(|a| a.inputs) else {
        let issue = c.error(
            Some(&s.uses.referenced),
            format!("{field}.uses"),
            format!("unknown action `{}`", s.uses.value),
        );
        if let Some(sug) = suggest(action, actions.names()) {
            issue.help(format!("did you mean `{sug}`?"));
        }
        return;
    };
    let with = s.with.as_ref().map(|w| &w.value);
    let with_loc = s
        .with
        .as_ref()
        .map(|w| &w.referenced)
        .unwrap_or(&s.uses.referenced);
    for (key, value) in with.into_iter().flatten() {
        if !inputs.iter().any(|i| i.name == key) {
            let issue = c.error(
                Some(&value.referenced),
                format!("{field}.with.{key}"),
                format!("action `{action}` has no input `{key}`"),
            );
            match suggest(key, inputs.iter().map(|i| i.name)) {
                Some(sug) => issue.help(format!("did you mean `{sug}`?")),
                None => issue.help(format!(
                    "inputs of `{action}`: {}",
                    inputs.iter().map(|i| i.name).collect::<Vec<_>>().join(", ")
                )),
            };
        }
    }
    for input in inputs.iter().filter(|i| i.required) {
        if !with.is_some_and(|w| w.contains_key(input.name)) {
            c.error(
                Some(with_loc),
                format!("{field}.with"),
                format!(
                    "action `{action}` needs input `{}` ({})",
                    input.name, input.doc
                ),
            );
        }
    }
}
