//! Workshop exercises: a lab broken on purpose at one hop of the chain, for participants to find and fix.
//!
//! An exercise is data (`exercises/*.yaml`, embedded in the binary, or read from a folder the user names):
//! a title, what the participant should learn, the task they are given, the changes that break the lab
//! (server-side apply of a manifest template, a delete, a JSON merge patch: what the workflows' manifest
//! steps and a participant's kubectl do), the hop `verify` must then name, the documented fix, and hints in
//! increasing order. The hop is checked against the hops `verify` names when the file is loaded, so a
//! misspelt hop is an error at its line, not an exercise nobody can solve. [`run`] breaks and heals.

pub mod run;

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::value::Serde;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::backend::ObjectRef;
use crate::diag::{Collector, FileDiagnostics, suggest};
use crate::embedded;
use crate::topology::{LAB_LABEL, Lab};
use crate::verify::Hop;

pub const API_VERSION: &str = "ocm-lab.open-cluster-management.io/v1alpha1";
pub const KIND: &str = "Exercise";
/// The label every object an exercise creates carries besides the lab's, naming the exercise.
pub const EXERCISE_LABEL: &str = "ocm-lab.open-cluster-management.io/exercise";

/// An exercise file as written. `break` and `fix` strings are minijinja templates over the lab.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExerciseFile {
    api_version: Spanned<String>,
    kind: Spanned<String>,
    metadata: Metadata,
    title: String,
    learn: String,
    task: String,
    hop: Spanned<String>,
    #[serde(rename = "break")]
    changes: Vec<Change>,
    fix: String,
    hints: Spanned<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: Spanned<String>,
}

/// One change that breaks the lab, as written (every string a template).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum Change {
    /// Server-side apply the objects of a manifest template (several documents allowed).
    Apply { cluster: String, manifest: String },
    /// Delete one object.
    Delete(Target),
    /// JSON merge patch one object (`kubectl patch --type merge`).
    Patch(PatchChange),
}

/// A merge patch of one object.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PatchChange {
    pub cluster: String,
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
    /// The patch, a YAML template.
    pub patch: String,
}

impl PatchChange {
    fn target(&self) -> Target {
        Target {
            cluster: self.cluster.clone(),
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// The object a change is about.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Target {
    pub cluster: String,
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
}

/// A loaded, checked exercise.
#[derive(Debug, Clone)]
pub struct Exercise {
    pub name: String,
    pub title: String,
    pub learn: String,
    pub task: String,
    /// The hop `verify` names once the exercise broke the lab.
    pub hop: Hop,
    pub changes: Vec<Change>,
    pub fix: String,
    pub hints: Vec<String>,
}

/// A change rendered for one lab: what to do, on which cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "op")]
pub enum Step {
    Apply {
        cluster: String,
        object: Value,
    },
    Delete {
        cluster: String,
        target: ObjectRef,
    },
    Patch {
        cluster: String,
        target: ObjectRef,
        patch: Value,
    },
}

impl Step {
    pub fn cluster(&self) -> &str {
        match self {
            Step::Apply { cluster, .. }
            | Step::Delete { cluster, .. }
            | Step::Patch { cluster, .. } => cluster,
        }
    }

    /// The object the step is about.
    pub fn target(&self) -> Option<ObjectRef> {
        match self {
            Step::Apply { object, .. } => ObjectRef::of(object),
            Step::Delete { target, .. } | Step::Patch { target, .. } => Some(target.clone()),
        }
    }
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ExerciseError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Invalid(Box<FileDiagnostics>),
    #[error("cannot read exercises from {path}: {reason}")]
    #[diagnostic(help("name a folder holding exercise files (`*.yaml`)"))]
    Unreadable { path: String, reason: String },
    #[error("no exercise `{name}`")]
    #[diagnostic(help("{help}"))]
    Unknown { name: String, help: String },
    #[error("exercise `{name}` cannot run on lab `{lab}`: {reason}")]
    #[diagnostic(help(
        "the exercise needs what its file names (a spoke with properties, a bound set, a synced ManagedServiceAccount, cluster-proxy); try the `default` or `workshop` topology"
    ))]
    NotForThisLab {
        name: String,
        lab: String,
        reason: String,
    },
}

/// Every exercise, embedded or from `dir` (which replaces the embedded set: a folder is a course).
pub fn load_all(dir: Option<&Path>) -> Result<Vec<Exercise>, ExerciseError> {
    let files: Vec<(String, String)> = match dir {
        None => embedded::EXERCISES
            .iter()
            .map(|(n, t)| (format!("exercises/{n}.yaml"), (*t).to_owned()))
            .collect(),
        Some(d) => read_dir(d)?,
    };
    let mut out: Vec<Exercise> = Vec::new();
    for (file, text) in files {
        let ex = parse(&file, &text)?;
        if out.iter().any(|e| e.name == ex.name) {
            return Err(ExerciseError::Unreadable {
                path: file,
                reason: format!("a second exercise named `{}`", ex.name),
            });
        }
        out.push(ex);
    }
    Ok(out)
}

fn read_dir(d: &Path) -> Result<Vec<(String, String)>, ExerciseError> {
    let err = |e: std::io::Error| ExerciseError::Unreadable {
        path: d.display().to_string(),
        reason: e.to_string(),
    };
    let mut paths: Vec<_> = std::fs::read_dir(d)
        .map_err(err)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            Ok((
                p.display().to_string(),
                std::fs::read_to_string(&p).map_err(err)?,
            ))
        })
        .collect()
}

/// The exercise called `name`.
pub fn find<'a>(all: &'a [Exercise], name: &str) -> Result<&'a Exercise, ExerciseError> {
    all.iter().find(|e| e.name == name).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|e| e.name.as_str()).collect();
        ExerciseError::Unknown {
            name: name.to_owned(),
            help: match suggest(name, names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`? (`ocm-lab exercise list` lists them)"),
                None => format!("exercises: {}", names.join(", ")),
            },
        }
    })
}

/// Parses and checks one exercise file: the format, and that its hop is one `verify` names.
pub fn parse(file: &str, text: &str) -> Result<Exercise, ExerciseError> {
    let mut c = Collector::new(text);
    let invalid = |c: Collector<'_>| {
        ExerciseError::Invalid(Box::new(FileDiagnostics::new(file, text, c.issues)))
    };
    let f = match serde_saphyr::from_str::<ExerciseFile>(text) {
        Ok(f) => f,
        Err(e) => {
            let msg = e.without_snippet().to_string();
            c.error(e.location().as_ref(), "(exercise)", msg);
            return Err(invalid(c));
        }
    };
    if f.api_version.value != API_VERSION {
        c.error(
            Some(&f.api_version.referenced),
            "apiVersion",
            format!("unsupported apiVersion `{}`", f.api_version.value),
        );
    }
    if f.kind.value != KIND {
        c.error(
            Some(&f.kind.referenced),
            "kind",
            format!("unsupported kind `{}`", f.kind.value),
        );
    }
    let name = &f.metadata.name;
    if name.value.is_empty()
        || !name
            .value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        c.error(
            Some(&name.referenced),
            "metadata.name",
            "an exercise name is lower-case letters, digits and `-`",
        );
    }
    let hop = serde_json::from_value::<Hop>(Value::String(f.hop.value.clone()));
    if let Err(e) = &hop {
        c.error(
            Some(&f.hop.referenced),
            "hop",
            format!("`{}` is not a hop `verify` names", f.hop.value),
        )
        .help(e.to_string());
    }
    if f.hints.value.is_empty() {
        c.error(Some(&f.hints.referenced), "hints", "give at least one hint");
    }
    if f.changes.is_empty() {
        c.error(
            Some(&f.api_version.referenced),
            "break",
            "an exercise breaks something: list at least one change",
        );
    }
    match hop {
        Ok(hop) if !c.has_errors() => Ok(Exercise {
            name: f.metadata.name.value,
            title: f.title.trim().to_owned(),
            learn: f.learn.trim().to_owned(),
            task: f.task.trim().to_owned(),
            hop,
            changes: f.changes,
            fix: f.fix.trim().to_owned(),
            hints: f
                .hints
                .value
                .into_iter()
                .map(|h| h.trim().to_owned())
                .collect(),
        }),
        _ => Err(invalid(c)),
    }
}

impl Exercise {
    fn not_for(&self, lab: &Lab, reason: impl Into<String>) -> ExerciseError {
        ExerciseError::NotForThisLab {
            name: self.name.clone(),
            lab: lab.name.clone(),
            reason: reason.into(),
        }
    }

    /// The changes for `lab`, rendered.
    pub fn steps(&self, lab: &Lab) -> Result<Vec<Step>, ExerciseError> {
        let env = environment();
        let ctx = context(lab, &self.name);
        let render = |t: &str| -> Result<String, ExerciseError> {
            env.render_str(t, &ctx)
                .map_err(|e| self.not_for(lab, render_msg(&e)))
        };
        let target = |t: &Target| -> Result<(String, ObjectRef), ExerciseError> {
            let ns = t.namespace.as_deref().map(&render).transpose()?;
            Ok((
                render(&t.cluster)?,
                ObjectRef::new(
                    &render(&t.api_version)?,
                    &render(&t.kind)?,
                    ns.as_deref().filter(|n| !n.is_empty()),
                    &render(&t.name)?,
                ),
            ))
        };
        let mut out = Vec::new();
        for change in &self.changes {
            match change {
                Change::Apply { cluster, manifest } => {
                    let cluster = render(cluster)?;
                    let text = render(manifest)?;
                    let docs = serde_saphyr::from_multiple::<Value>(&text).map_err(|e| {
                        self.not_for(lab, format!("its manifest does not parse: {e}"))
                    })?;
                    for object in docs.into_iter().filter(|d| !d.is_null()) {
                        if ObjectRef::of(&object).is_none() {
                            return Err(self.not_for(
                                lab,
                                "a manifest object lacks apiVersion, kind or metadata.name",
                            ));
                        }
                        out.push(Step::Apply {
                            cluster: cluster.clone(),
                            object,
                        });
                    }
                }
                Change::Delete(t) => {
                    let (cluster, target) = target(t)?;
                    out.push(Step::Delete { cluster, target });
                }
                Change::Patch(p) => {
                    let (cluster, target) = target(&p.target())?;
                    let patch = serde_saphyr::from_str::<Value>(&render(&p.patch)?)
                        .map_err(|e| self.not_for(lab, format!("its patch does not parse: {e}")))?;
                    out.push(Step::Patch {
                        cluster,
                        target,
                        patch,
                    });
                }
            }
        }
        for s in &out {
            if lab.cluster(s.cluster()).is_none() {
                return Err(self.not_for(
                    lab,
                    format!(
                        "it names cluster `{}`, which the lab does not have",
                        s.cluster()
                    ),
                ));
            }
        }
        Ok(out)
    }

    /// The documented fix, rendered for `lab` (the commands a participant would run).
    pub fn fix_for(&self, lab: &Lab) -> String {
        self.render_text(lab, &self.fix)
    }

    /// The task as the participant reads it, rendered for `lab`.
    pub fn task_for(&self, lab: &Lab) -> String {
        self.render_text(lab, &self.task)
    }

    /// One of the exercise's texts (task, fix, a hint) rendered for `lab`; as written where it cannot be.
    pub fn render_text(&self, lab: &Lab, text: &str) -> String {
        environment()
            .render_str(text, context(lab, &self.name))
            .unwrap_or_else(|_| text.to_owned())
    }
}

fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env
}

fn render_msg(e: &minijinja::Error) -> String {
    match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.to_string(),
    }
}

/// What the templates see: the lab (as workflows see it), its labels, and the parts of the lab an
/// exercise breaks: `spoke` (the first spoke verification expects a ClusterProfile for that has
/// properties), its first `property`, a `binding` that gives it a profile in a verified namespace, its
/// synced ManagedServiceAccount `account`, and `proxyNamespace`. A part the lab lacks is undefined: a
/// template that uses it fails to render, naming it.
fn context(lab: &Lab, exercise: &str) -> minijinja::Value {
    let verified = |spoke: &str| -> Option<&crate::topology::Binding> {
        lab.bindings.iter().find(|b| {
            lab.verify.namespaces.contains(&b.namespace)
                && lab
                    .cluster_sets
                    .iter()
                    .any(|s| s.name == b.cluster_set && s.members.iter().any(|m| m == spoke))
        })
    };
    let spoke = lab
        .spokes
        .iter()
        .find(|s| !s.properties.is_empty() && verified(&s.cluster.name).is_some());
    let mut ctx = BTreeMap::new();
    ctx.insert("lab", minijinja::Value::from(Serde(lab)));
    ctx.insert("hub", minijinja::Value::from(lab.hub.cluster.name.as_str()));
    ctx.insert(
        "labels",
        minijinja::Value::from(Serde(BTreeMap::from([
            (LAB_LABEL, lab.name.as_str()),
            (EXERCISE_LABEL, exercise),
        ]))),
    );
    ctx.insert("exerciseLabel", minijinja::Value::from(EXERCISE_LABEL));
    if let Some(s) = spoke {
        ctx.insert("spoke", minijinja::Value::from(Serde(s)));
        ctx.insert("property", minijinja::Value::from(Serde(&s.properties[0])));
        if let Some(b) = verified(&s.cluster.name) {
            ctx.insert("binding", minijinja::Value::from(Serde(b)));
        }
        if let Some(a) = lab
            .service_accounts
            .iter()
            .find(|a| a.cluster == s.cluster.name && a.sync_to_cluster_profile)
        {
            ctx.insert("account", minijinja::Value::from(Serde(a)));
        }
    }
    if let Some(p) = &lab.addons.cluster_proxy {
        ctx.insert(
            "proxyNamespace",
            minijinja::Value::from(p.namespace.as_str()),
        );
    }
    minijinja::Value::from(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_exercise_loads() {
        let all = load_all(None).unwrap();
        assert!(all.len() >= 8, "{} exercises", all.len());
    }

    #[test]
    fn an_exercise_the_lab_cannot_run_is_refused_naming_what_it_lacks() {
        let text = embedded::topology("default").unwrap();
        let start = text.find("    cluster-proxy:").unwrap();
        let end = text[start..].find("    managed-serviceaccount:").unwrap() + start;
        // Without cluster-proxy, and without the checks that need it.
        let text = format!("{}{}", &text[..start], &text[end..]).replace(
            "checks: [properties, access-providers, reachable, credentials, conditions]",
            "checks: [properties, credentials, conditions]",
        );
        let lab = crate::topology::load_str(&Default::default(), "t.yaml", &text)
            .unwrap()
            .lab;
        let all = load_all(None).unwrap();
        let ex = find(&all, "user-server-scaled-down").unwrap();
        let Err(e @ ExerciseError::NotForThisLab { .. }) = ex.steps(&lab) else {
            panic!("an exercise on cluster-proxy rendered for a lab without it")
        };
        assert!(e.to_string().contains("proxyNamespace"), "{e}");
        assert!(find(&all, "binding-deleted").unwrap().steps(&lab).is_ok());
    }

    #[test]
    fn a_hop_verify_does_not_name_is_an_error_at_its_line() {
        let text = embedded::EXERCISES[0]
            .1
            .replacen("\nhop: ", "\nhop: not-a-hop #", 1);
        let Err(ExerciseError::Invalid(d)) = parse("x.yaml", &text) else {
            panic!("a wrong hop loaded")
        };
        let plain = d.plain();
        let line = text.lines().position(|l| l.starts_with("hop:")).unwrap() + 1;
        assert!(plain.starts_with(&format!("x.yaml:{line}:")), "{plain}");
        assert!(
            plain.contains("`not-a-hop` is not a hop `verify` names"),
            "{plain}"
        );
        assert!(
            plain.contains("no-bound-binding"),
            "the help lists the hops: {plain}"
        );
    }
}
