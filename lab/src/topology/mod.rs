//! Topologies: what a lab is. Parsing, validation with located diagnostics, and the resolved [`Lab`].
//!
//! `load` turns YAML text into a [`Lab`] in three stages: strict parsing (unknown fields are errors with a
//! suggestion), semantic checks on the spanned model (every problem is collected, not only the first), and
//! resolution (defaults from the version catalog, derived collections such as bindings and members).

pub mod catalog;
mod lab;
pub mod model;
mod resolve;

use std::path::Path;

pub use lab::*;
pub use model::Check;

use crate::diag::{Collector, FileDiagnostics, Issue, suggest};
use crate::embedded;

/// The name of the embedded default topology.
pub const DEFAULT: &str = "default";

/// A topology that parsed and validated, with its warnings.
#[derive(Debug)]
pub struct Loaded {
    pub lab: Lab,
    /// Where it came from: a path, or `embedded:<name>`.
    pub origin: String,
    pub warnings: Vec<Issue>,
    /// The text as read, kept for snippets in later warnings.
    pub text: String,
}

/// Why a topology could not be loaded.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TopologyError {
    #[error("failed to read topology {path}: {source}")]
    #[diagnostic(
        code(ocm_lab::topology::read),
        help("check the path given with --topology")
    )]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no embedded topology named `{name}`; embedded topologies: {known}")]
    #[diagnostic(
        code(ocm_lab::topology::unknown),
        help("pass a file path, or one of the embedded names")
    )]
    UnknownEmbedded { name: String, known: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Invalid(Box<FileDiagnostics>),
}

/// Loads a topology named on the command line: an existing file path, else an embedded topology's name.
/// With no name, the embedded default.
pub fn load_arg(arg: Option<&str>) -> Result<Loaded, TopologyError> {
    let name = arg.unwrap_or(DEFAULT);
    let path = Path::new(name);
    if path.exists() || name.contains('/') || name.ends_with(".yaml") || name.ends_with(".yml") {
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
            path: name.to_owned(),
            source,
        })?;
        return load_str(name, &text);
    }
    match embedded::topology(name) {
        Some(text) => load_str(&format!("embedded:{name}"), text),
        None => Err(TopologyError::UnknownEmbedded {
            name: name.to_owned(),
            known: embedded::TOPOLOGIES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Parses, validates and resolves a topology. `origin` names the file in messages.
pub fn load_str(origin: &str, text: &str) -> Result<Loaded, TopologyError> {
    let mut c = Collector::new(text);
    let lab = match parse(text, &mut c) {
        Some(raw) => resolve::resolve(&raw, &mut c),
        None => None,
    };
    match lab {
        Some(lab) if !c.has_errors() => Ok(Loaded {
            lab,
            origin: origin.to_owned(),
            warnings: c.issues,
            text: text.to_owned(),
        }),
        _ => Err(TopologyError::Invalid(Box::new(FileDiagnostics::new(
            origin, text, c.issues,
        )))),
    }
}

/// Strict parse. On failure, records one located issue and returns `None`.
fn parse(text: &str, c: &mut Collector<'_>) -> Option<model::Topology> {
    let mut path = String::new();
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize::<_, model::Topology>(de).map_err(|e| {
            path = e.path().to_string();
            e.into_inner()
        })
    });
    let err = match result {
        Ok(t) => return Some(t),
        Err(e) => e,
    };
    let loc = err.location();
    let field = if path.is_empty() || path == "." {
        "(document)".to_owned()
    } else {
        path.clone()
    };
    match err.without_snippet() {
        serde_saphyr::Error::SerdeUnknownField {
            field: name,
            expected,
            ..
        } => {
            // The path ends with the unknown key itself; the container is what comes before it.
            let container = path.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
            let noun = match container {
                "spec.addons" => "addon",
                _ => "field",
            };
            let where_ = if container.is_empty() {
                String::new()
            } else {
                format!(" in `{container}`")
            };
            let issue = c.error(
                loc.as_ref(),
                field,
                format!("unknown {noun} `{name}`{where_}"),
            );
            match suggest(name, expected.iter().copied()) {
                Some(s) => issue.help(format!("did you mean `{s}`?")),
                None => issue.help(format!("expected one of: {}", expected.join(", "))),
            };
        }
        serde_saphyr::Error::SerdeUnknownVariant {
            variant, expected, ..
        } => {
            let issue = c.error(loc.as_ref(), field, format!("unknown value `{variant}`"));
            match suggest(variant, expected.iter().copied()) {
                Some(s) => issue.help(format!("did you mean `{s}`?")),
                None => issue.help(format!("expected one of: {}", expected.join(", "))),
            };
        }
        serde_saphyr::Error::SerdeMissingField { field: name, .. } => {
            let at = if field == "(document)" {
                String::new()
            } else {
                format!(" in `{field}`")
            };
            c.error(
                loc.as_ref(),
                field.clone(),
                format!("missing required field `{name}`{at}"),
            );
        }
        other => {
            // serde-saphyr's own text carries the location as a prefix; ours is in the label already.
            let msg = other.without_snippet().to_string();
            let msg = msg
                .split_once(": ")
                .filter(|(p, _)| p.starts_with("line "))
                .map_or(msg.as_str(), |(_, m)| m)
                .to_owned();
            c.error(loc.as_ref(), field, msg);
        }
    }
    None
}

/// The JSON Schema of a topology file, for editor completion (`# yaml-language-server: $schema=...`).
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(model::Topology)).expect("schemas serialize")
}
