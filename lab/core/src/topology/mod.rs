//! Topologies: what a lab is. Parsing, validation with located diagnostics, and the resolved [`Lab`].
//!
//! `load` turns YAML text into a [`Lab`] in three stages: strict parsing (unknown fields are errors with a
//! suggestion), semantic checks on the spanned model (every problem is collected, not only the first), and
//! resolution (defaults from the version catalog, derived collections such as bindings and members).

pub mod catalog;
mod host;
mod lab;
pub mod model;
mod resolve;

use std::path::Path;

pub use host::Host;
pub use lab::*;
pub use model::Check;

use crate::diag::{self, Collector, FileDiagnostics, Issue, suggest};
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

/// The largest topology file read. A lab of 2,000 spokes with two properties each is about 300 KiB; the
/// limit is checked before parsing, so an oversized file is refused at once instead of after seconds of work.
pub const MAX_TOPOLOGY_BYTES: u64 = 1024 * 1024;

/// Why a topology could not be loaded.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TopologyError {
    // The OS error is part of the message (one line, also in logs), not a miette cause printed a second time.
    #[error("failed to read topology {path}: {cause}")]
    #[diagnostic(code(ocm_lab::topology::read))]
    Read {
        path: String,
        cause: std::io::Error,
        #[help]
        help: String,
    },
    #[error(
        "topology {path} is {size} bytes; a topology file holds at most {MAX_TOPOLOGY_BYTES} bytes (1 MiB)"
    )]
    #[diagnostic(
        code(ocm_lab::topology::too_large),
        help(
            "check that this is the topology you meant; a lab of 2,000 spokes takes about 300 KiB"
        )
    )]
    TooLarge { path: String, size: u64 },
    #[error("no embedded topology named `{name}`; embedded topologies: {known}")]
    #[diagnostic(
        code(ocm_lab::topology::unknown),
        help("pass a file path, or one of the embedded names")
    )]
    UnknownEmbedded { name: String, known: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Invalid(Box<FileDiagnostics>),
    /// The command line's `--context` names a context no cluster of the topology takes.
    #[error(
        "`--context {flag}` applies to no cluster of topology {topology}: every cluster is a kind cluster or names its own context"
    )]
    #[diagnostic(
        code(ocm_lab::context_unused),
        help(
            "leave `--context` out; it names the context of the one `existing:` cluster whose topology leaves `context:` out (for example `existing: {{}}` on the hub)"
        )
    )]
    ContextFlagUnused { flag: String, topology: String },
}

/// Loads a topology named on the command line: an existing file path, else an embedded topology's name.
/// With no name, the embedded default.
pub fn load_arg(host: &Host, arg: Option<&str>) -> Result<Loaded, TopologyError> {
    let name = arg.unwrap_or(DEFAULT);
    let path = Path::new(name);
    if path.exists() || name.contains('/') || name.ends_with(".yaml") || name.ends_with(".yml") {
        return load_file(host, name);
    }
    match embedded::topology(name) {
        Some(text) => load_str(host, &format!("embedded:{name}"), text),
        None => Err(TopologyError::UnknownEmbedded {
            name: name.to_owned(),
            known: embedded_names(),
        }),
    }
}

/// Reads a topology file: its size is checked first, and text that is not UTF-8 is a located diagnostic.
fn load_file(host: &Host, name: &str) -> Result<Loaded, TopologyError> {
    let read_error = |cause: std::io::Error| {
        let help = match cause.kind() {
            std::io::ErrorKind::NotFound => format!(
                "check the path; a topology is a file path or an embedded name ({})",
                embedded_names()
            ),
            std::io::ErrorKind::PermissionDenied => {
                "make the file readable for your user".to_owned()
            }
            _ => "check that the path names a readable file".to_owned(),
        };
        TopologyError::Read {
            path: name.to_owned(),
            cause,
            help,
        }
    };
    let size = std::fs::metadata(name).map_err(read_error)?.len();
    if size > MAX_TOPOLOGY_BYTES {
        return Err(TopologyError::TooLarge {
            path: name.to_owned(),
            size,
        });
    }
    let bytes = std::fs::read(name).map_err(read_error)?;
    match String::from_utf8(bytes) {
        Ok(text) => load_str(host, name, &text),
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let bad = e.as_bytes()[valid];
            // The lossy text is identical up to the first bad byte, so the location and snippet are right.
            let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
            let before = &text[..valid];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            let offset = diag::byte_offset(&text, line, column);
            let issue = Issue {
                level: diag::Level::Error,
                field: "(document)".to_owned(),
                message: format!(
                    "the file is not valid UTF-8: byte 0x{bad:02x} on line {line}, column {column}"
                ),
                help: Some(
                    "save the file as UTF-8 (YAML files are UTF-8); the byte may come from a copy in another encoding"
                        .to_owned(),
                ),
                span: Some(miette::SourceSpan::new(offset.into(), 1)),
                line_col: Some((line, column)),
            };
            Err(TopologyError::Invalid(Box::new(FileDiagnostics::new(
                name,
                &text,
                vec![issue],
            ))))
        }
    }
}

fn embedded_names() -> String {
    embedded::TOPOLOGIES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses, validates and resolves a topology. `origin` names the file in messages.
/// `host` is what the command line and environment say (see [`Host`]).
pub fn load_str(host: &Host, origin: &str, text: &str) -> Result<Loaded, TopologyError> {
    if text.len() as u64 > MAX_TOPOLOGY_BYTES {
        return Err(TopologyError::TooLarge {
            path: origin.to_owned(),
            size: text.len() as u64,
        });
    }
    let mut c = Collector::new(text);
    let raw = parse(text, &mut c);
    let lab = match &raw {
        Some(raw) => resolve::resolve(raw, &mut c, origin, host),
        None => None,
    };
    if let (Some(raw), Some(_)) = (&raw, &lab)
        && !c.has_errors()
        && let Some(flag) = resolve::unused_context_flag(&raw.spec, host)
    {
        return Err(TopologyError::ContextFlagUnused {
            flag,
            topology: origin.to_owned(),
        });
    }
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
            // `Spanned` adds a `value` segment and map entries a `?`: neither is a field the user wrote.
            path = e
                .path()
                .to_string()
                .replace(".value[", "[")
                .split('.')
                .filter(|seg| *seg != "value" && *seg != "?")
                .collect::<Vec<_>>()
                .join(".");
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
            let (message, help) = parse_message(other, text);
            let issue = c.error(loc.as_ref(), field, message);
            if let Some(help) = help {
                issue.help(help);
            }
        }
    }
    None
}

/// A parse error in words for someone editing a topology: serde-saphyr's default texts address the
/// programmer using the library (`set DuplicateKeyPolicy in Options`, `use from_str_multiple`). The location
/// is not in the message: the label and the `file:line:col` already carry it.
fn parse_message(e: &serde_saphyr::Error, text: &str) -> (String, Option<String>) {
    use serde_saphyr::{Error as E, MessageFormatter, UserMessageFormatter};
    match e {
        E::DuplicateMappingKey { key, .. } => (
            match key {
                Some(k) => format!("`{k}` appears twice in this mapping"),
                None => "a key appears twice in this mapping".to_owned(),
            },
            Some("each key may appear once; remove or rename one of them".to_owned()),
        ),
        E::MultipleDocuments { .. } => (
            "a second YAML document starts here; a topology file holds one".to_owned(),
            Some(
                "remove the `---` line and what follows it, or move that part to its own file"
                    .to_owned(),
            ),
        ),
        E::NullIntoString { .. } => (
            "no value is given here".to_owned(),
            Some("write a value; an empty value needs quotes (`\"\"`)".to_owned()),
        ),
        E::RecursiveReferencesRequireWeakTypes { .. } => (
            "an alias refers to a node that contains it; a topology cannot be recursive".to_owned(),
            Some("copy the values instead of referring to the enclosing node with `*`".to_owned()),
        ),
        E::Budget { .. } => (
            "the file is too large or too deeply nested for a topology".to_owned(),
            Some("a topology describes one lab: check that this is the file you meant".to_owned()),
        ),
        E::Eof { .. } if text.trim().is_empty() => (
            "the file is empty".to_owned(),
            Some(format!(
                "start from an embedded topology: `ocm-lab topology show {DEFAULT} > lab.yaml`"
            )),
        ),
        other => (
            UserMessageFormatter.format_message(other).into_owned(),
            None,
        ),
    }
}

/// The JSON Schema of a topology file, for editor completion (`# yaml-language-server: $schema=...`).
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(model::Topology)).expect("schemas serialize")
}
