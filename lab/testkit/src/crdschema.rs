//! Offline validation of Kubernetes objects against the OpenAPI v3 schemas of upstream
//! CustomResourceDefinitions, modelled on what the API server does with strict field validation.
//!
//! [`CrdSchemas`] reads CRD manifests, converts the `openAPIV3Schema` of every served version
//! into a JSON Schema (draft 2020-12) and compiles it with the `jsonschema` crate. The
//! conversion is where the API server's behaviour is modelled; validation itself is plain JSON
//! Schema:
//!
//! - Unknown fields are errors. A typed object without `x-kubernetes-preserve-unknown-fields` or
//!   `additionalProperties` gets `additionalProperties: false`; the API server would prune such
//!   fields, and strict field validation turns that pruning into an error.
//! - The root `metadata` (which CRDs declare as a bare `type: object`) becomes a strict
//!   `ObjectMeta`, so `metadata.lables` is caught; `apiVersion` and `kind` must name the CRD.
//!   `x-kubernetes-embedded-resource` objects get the same `apiVersion`/`kind`/`metadata` fields.
//! - `null` is accepted where the API server accepts it: on `nullable` fields, and on object
//!   fields that it silently prunes or defaults (those that are not required, or have a default).
//! - `x-kubernetes-int-or-string` means integer or string; OpenAPI v3.0's boolean
//!   `exclusiveMinimum`/`exclusiveMaximum` become their numeric JSON Schema forms;
//!   `x-kubernetes-list-type: set` means unique items; `format` is not checked.
//!
//! Not modelled: CEL rules (`x-kubernetes-validations`), key uniqueness in
//! `x-kubernetes-list-type: map` lists, and scope checks (`metadata.namespace`).
//!
//! Violations are reported as JSON pointers into the object, with the unknown field itself
//! (not its parent) for unknown fields, and a "did you mean" hint when a known field is close.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, ValidationError, Validator};
use serde_json::{Map, Value, json};

/// The JSON Schema draft the converted schemas are written in.
const DRAFT: Draft = Draft::Draft202012;

// The `x-kubernetes-*` extension keys the conversion reads.
const PRESERVE_UNKNOWN_FIELDS: &str = "x-kubernetes-preserve-unknown-fields";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";
const EMBEDDED_RESOURCE: &str = "x-kubernetes-embedded-resource";
const LIST_TYPE: &str = "x-kubernetes-list-type";

/// OpenAPI v3.0 value validations that mean the same in JSON Schema 2020-12 and are copied as
/// they are. `format` is deliberately absent: Kubernetes formats (`int32`, `byte`, …) are not
/// JSON Schema formats, and the API server's checks of the shared ones differ in detail.
const COPIED_KEYWORDS: &[&str] = &[
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
];

/// A DNS-1123 subdomain, the rule for custom resource names.
const DNS_SUBDOMAIN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A DNS-1123 label, the rule for namespace names.
const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A qualified name (`[prefix/]name`), the rule for label and annotation keys. The name part is
/// limited to 63 characters by the quantifier; the prefix's 253 is approximated by `maxLength`.
const QUALIFIED_NAME: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label value: empty, or up to 63 alphanumerics, `-`, `_` and `.`, alphanumeric at both ends.
const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// Compiled schemas of custom resource kinds, keyed by group, version and kind.
///
/// Build one with [`CrdSchemas::load_dir`] or [`CrdSchemas::add_crd_yaml`], then check objects
/// with [`CrdSchemas::validate`] or parts of them with [`CrdSchemas::validate_fragment`].
#[derive(Clone, Default)]
pub struct CrdSchemas {
    kinds: BTreeMap<Gvk, KindSchema>,
}

/// Group, version and kind; the group is empty for the core API group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Gvk {
    group: String,
    version: String,
    kind: String,
}

impl Gvk {
    fn new(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// One served version of one CRD.
#[derive(Clone)]
struct KindSchema {
    /// The CRD's `metadata.name`, for messages.
    crd_name: String,
    namespaced: bool,
    /// The converted JSON Schema; kept for [`CrdSchemas::validate_fragment`] and suggestions.
    schema: Value,
    validator: Validator,
}

impl fmt::Debug for CrdSchemas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrdSchemas")
            .field("kinds", &self.kinds())
            .finish()
    }
}

/// Why CRDs could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CrdSchemaError {
    /// A file or directory could not be read.
    #[error("failed to read {}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid YAML.
    #[error("failed to parse {path} as YAML")]
    Parse {
        /// The file, or the source name passed to [`CrdSchemas::add_crd_yaml`].
        path: String,
        /// The underlying error, boxed because it is large.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A document is not a usable `apiextensions.k8s.io/v1` CustomResourceDefinition.
    #[error("invalid CustomResourceDefinition {name} in {path}: {reason}")]
    BadCrd {
        /// Where the document came from.
        path: String,
        /// The CRD's `metadata.name`, or `(unnamed)`.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The converted schema was rejected by the JSON Schema compiler.
    #[error("failed to compile the schema of {kind} {api_version} from {path}")]
    Compile {
        /// Where the CRD came from.
        path: String,
        /// The served version's `group/version`.
        api_version: String,
        /// The CRD's kind.
        kind: String,
        /// The compiler's error.
        #[source]
        source: Box<ValidationError<'static>>,
    },
}

/// One reason an object does not match its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer (RFC 6901) into the validated object, for example
    /// `/spec/proxyAgent/additionalValues`. For an unknown or missing field it points at that
    /// field; an empty pointer means the object itself.
    pub pointer: String,
    /// What is wrong, in lowercase, for example ``unknown field `additionalValues` ``.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pointer = if self.pointer.is_empty() {
            "(root)"
        } else {
            &self.pointer
        };
        write!(f, "{pointer}: {}", self.message)
    }
}

/// Why [`CrdSchemas::validate`] or [`CrdSchemas::validate_fragment`] rejected a value.
#[derive(Debug)]
pub enum ValidationFailure {
    /// No loaded CRD serves this `apiVersion` and `kind`.
    UnknownKind {
        /// The requested `group/version`.
        api_version: String,
        /// The requested kind.
        kind: String,
    },
    /// The fragment path names no field of the schema.
    NoSuchPath {
        /// The path, dot-separated, for example `spec.registrationConfigurations`.
        path: String,
    },
    /// The value violates the schema; never empty.
    Invalid(Vec<Violation>),
}

impl ValidationFailure {
    /// The schema violations, empty unless this is [`ValidationFailure::Invalid`].
    pub fn violations(&self) -> &[Violation] {
        match self {
            Self::Invalid(violations) => violations,
            Self::UnknownKind { .. } | Self::NoSuchPath { .. } => &[],
        }
    }

    /// Renders the failure with the object it is about, one line per violation, for example
    /// ``ManagedProxyConfiguration cluster-proxy: /spec/proxyAgent/additionalValues: unknown field `additionalValues` ``.
    pub fn display_for(&self, obj: &Value) -> String {
        let subject = object_label(obj);
        match self {
            Self::Invalid(violations) => violations
                .iter()
                .map(|v| format!("{subject}: {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
            Self::UnknownKind { .. } | Self::NoSuchPath { .. } => format!("{subject}: {self}"),
        }
    }
}

impl fmt::Display for ValidationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownKind { api_version, kind } => write!(
                f,
                "unknown kind `{kind}` in `{api_version}`: no loaded CustomResourceDefinition \
                 serves it (check the apiVersion, or load the CRD that defines it)"
            ),
            Self::NoSuchPath { path } => write!(f, "the schema has no field `{path}`"),
            Self::Invalid(violations) => {
                for (i, violation) in violations.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{violation}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ValidationFailure {}

/// `Kind name` or `Kind namespace/name`, the way people refer to an object in messages.
pub fn object_label(obj: &Value) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("object");
    let meta = obj.get("metadata");
    let field = |key| meta.and_then(|m| m.get(key)).and_then(Value::as_str);
    match (field("namespace"), field("name")) {
        (Some(ns), Some(name)) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        (_, Some(name)) => format!("{kind} {name}"),
        (_, None) => format!("{kind} (unnamed)"),
    }
}

impl CrdSchemas {
    /// An empty set of schemas.
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads every `*.yaml` file directly in `dir` (not in subdirectories) that holds
    /// CustomResourceDefinitions. Other files, and YAML documents of other kinds, are skipped.
    ///
    /// # Errors
    ///
    /// Fails when the directory or a file cannot be read, a file is not YAML, or a CRD in it
    /// cannot be converted (see [`CrdSchemas::add_crd_yaml`]).
    pub fn load_dir(dir: &Path) -> Result<Self, CrdSchemaError> {
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CrdSchemaError::Io { path, source }
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let path = entry.map_err(io_err(dir))?.path();
            if path.is_file() && path.extension().is_some_and(|ext| ext == "yaml") {
                files.push(path);
            }
        }
        // Sorted, so that a kind defined twice deterministically ends up with the last file's.
        files.sort();
        let mut schemas = Self::new();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
            schemas.add_yaml(&path.display().to_string(), &text)?;
        }
        Ok(schemas)
    }

    /// Adds the CustomResourceDefinitions in `text` (YAML, one or more documents) under the name
    /// `source_name`, which is only used in errors. Every served version becomes a known kind; a
    /// kind that was already known is replaced, as re-applying a CRD would.
    ///
    /// # Errors
    ///
    /// Fails when `text` is not YAML, holds no CRD, or holds a CRD that is not a structural
    /// `apiextensions.k8s.io/v1` CRD this module can convert.
    pub fn add_crd_yaml(&mut self, source_name: &str, text: &str) -> Result<(), CrdSchemaError> {
        if self.add_yaml(source_name, text)? == 0 {
            return Err(CrdSchemaError::BadCrd {
                path: source_name.to_owned(),
                name: "(none)".to_owned(),
                reason: "no CustomResourceDefinition document found".to_owned(),
            });
        }
        Ok(())
    }

    /// Adds every CRD document in `text`; returns how many there were.
    fn add_yaml(&mut self, source_name: &str, text: &str) -> Result<usize, CrdSchemaError> {
        let docs: Vec<Value> =
            serde_saphyr::from_str_multiple(text).map_err(|source| CrdSchemaError::Parse {
                path: source_name.to_owned(),
                source: Box::new(source),
            })?;
        let mut count = 0;
        for doc in docs
            .iter()
            .filter(|d| d.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
        {
            self.add_crd(source_name, doc)?;
            count += 1;
        }
        Ok(count)
    }

    fn add_crd(&mut self, source_name: &str, crd: &Value) -> Result<(), CrdSchemaError> {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("(unnamed)");
        let bad = |reason: String| CrdSchemaError::BadCrd {
            path: source_name.to_owned(),
            name: name.to_owned(),
            reason,
        };
        let api_version = crd.get("apiVersion").and_then(Value::as_str);
        if api_version != Some("apiextensions.k8s.io/v1") {
            return Err(bad(format!(
                "apiVersion must be `apiextensions.k8s.io/v1`, found {}",
                render_value(crd.get("apiVersion").unwrap_or(&Value::Null))
            )));
        }
        let text = |pointer: &str| {
            crd.pointer(pointer)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| bad(format!("missing {}", pointer_to_dotted(pointer))))
        };
        let group = text("/spec/group")?;
        let kind = text("/spec/names/kind")?;
        let namespaced = text("/spec/scope")? == "Namespaced";
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("missing spec.versions".to_owned()))?;

        // Convert and compile every served version before adding any, so that a bad CRD leaves
        // `self` unchanged.
        let mut converted = Vec::new();
        for version in versions {
            let Some(version_name) = version.get("name").and_then(Value::as_str) else {
                return Err(bad("a version has no name".to_owned()));
            };
            if version.get("served").and_then(Value::as_bool) != Some(true) {
                continue;
            }
            let gvk = Gvk {
                group: group.to_owned(),
                version: version_name.to_owned(),
                kind: kind.to_owned(),
            };
            let source = version
                .pointer("/schema/openAPIV3Schema")
                .ok_or_else(|| bad(format!("version {version_name} has no openAPIV3Schema")))?;
            let schema = convert_root(source, &gvk.api_version(), kind)
                .map_err(|reason| bad(format!("version {version_name}: {reason}")))?;
            let validator = compile(&schema).map_err(|source| CrdSchemaError::Compile {
                path: source_name.to_owned(),
                api_version: gvk.api_version(),
                kind: kind.to_owned(),
                source: Box::new(source),
            })?;
            converted.push((
                gvk,
                KindSchema {
                    crd_name: name.to_owned(),
                    namespaced,
                    schema,
                    validator,
                },
            ));
        }
        if converted.is_empty() {
            return Err(bad("no served version".to_owned()));
        }
        // Like re-applying the CRD: versions it no longer serves go away.
        self.kinds.retain(|_, known| known.crd_name != name);
        self.kinds.extend(converted);
        Ok(())
    }

    /// Whether a loaded CRD serves `kind` in `api_version` (`group/version`).
    pub fn knows(&self, api_version: &str, kind: &str) -> bool {
        self.kinds.contains_key(&Gvk::new(api_version, kind))
    }

    /// Every known `(apiVersion, kind)`, sorted.
    pub fn kinds(&self) -> Vec<(String, String)> {
        let mut kinds: Vec<_> = self
            .kinds
            .keys()
            .map(|gvk| (gvk.api_version(), gvk.kind.clone()))
            .collect();
        kinds.sort();
        kinds
    }

    /// Whether the kind is namespaced, or `None` when it is not known.
    pub fn is_namespaced(&self, api_version: &str, kind: &str) -> Option<bool> {
        self.get(api_version, kind).map(|k| k.namespaced)
    }

    /// The name of the CRD that defines the kind, for example
    /// `managedclustersets.cluster.open-cluster-management.io`.
    pub fn crd_name(&self, api_version: &str, kind: &str) -> Option<&str> {
        self.get(api_version, kind).map(|k| k.crd_name.as_str())
    }

    /// The converted JSON Schema (draft 2020-12) the kind is validated against.
    pub fn json_schema(&self, api_version: &str, kind: &str) -> Option<&Value> {
        self.get(api_version, kind).map(|k| &k.schema)
    }

    fn get(&self, api_version: &str, kind: &str) -> Option<&KindSchema> {
        self.kinds.get(&Gvk::new(api_version, kind))
    }

    /// Validates a whole object (`apiVersion`, `kind`, `metadata`, `spec`, `status`, …) against
    /// the schema of the kind it declares.
    ///
    /// # Errors
    ///
    /// [`ValidationFailure::UnknownKind`] when no loaded CRD serves the object's kind, and
    /// [`ValidationFailure::Invalid`] with every violation otherwise (including a missing
    /// `apiVersion` or `kind`).
    pub fn validate(&self, obj: &Value) -> Result<(), ValidationFailure> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str);
        let kind = obj.get("kind").and_then(Value::as_str);
        let (Some(api_version), Some(kind)) = (api_version, kind) else {
            let mut violations = Vec::new();
            for (key, value) in [("apiVersion", api_version), ("kind", kind)] {
                if value.is_none() {
                    violations.push(Violation {
                        pointer: format!("/{key}"),
                        message: format!("missing required field `{key}` (a string)"),
                    });
                }
            }
            return Err(ValidationFailure::Invalid(violations));
        };
        let schema = self
            .get(api_version, kind)
            .ok_or_else(|| ValidationFailure::UnknownKind {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })?;
        check(&schema.validator, &schema.schema, "", obj)
    }

    /// Validates `value` against the part of the kind's schema at `path`: property names from
    /// the object root, such as `["spec", "registrationConfiguration"]`. A segment may also be a
    /// key of a map (`additionalProperties`) or an array index (any number selects the item
    /// schema). Violation pointers start with `path`, so they point into the whole object.
    ///
    /// # Errors
    ///
    /// [`ValidationFailure::UnknownKind`] for an unknown kind, [`ValidationFailure::NoSuchPath`]
    /// when `path` leaves the schema, and [`ValidationFailure::Invalid`] with every violation.
    pub fn validate_fragment(
        &self,
        api_version: &str,
        kind: &str,
        path: &[&str],
        value: &Value,
    ) -> Result<(), ValidationFailure> {
        let schema = self
            .get(api_version, kind)
            .ok_or_else(|| ValidationFailure::UnknownKind {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })?;
        let no_such_path = || ValidationFailure::NoSuchPath {
            path: path.join("."),
        };
        let mut node = &schema.schema;
        for segment in path {
            node = child_schema(node, segment).ok_or_else(no_such_path)?;
        }
        let node = strip_null_wrapper(node);
        let prefix: String = path.iter().map(|s| format!("/{}", escape(s))).collect();
        // The root schema compiled, so its parts compile too; a failure here is a bug in the
        // conversion, reported as a violation rather than a panic.
        let validator = compile(node).map_err(|e| {
            ValidationFailure::Invalid(vec![Violation {
                pointer: prefix.clone(),
                message: format!("failed to compile the schema at this path: {e}"),
            }])
        })?;
        check(&validator, node, &prefix, value)
    }
}

fn compile(schema: &Value) -> Result<Validator, ValidationError<'static>> {
    jsonschema::options()
        .with_draft(DRAFT)
        .should_validate_formats(false)
        .build(schema)
}

/// Runs `validator` (compiled from `schema`) on `instance`, turning errors into violations
/// whose pointers start with `prefix`.
fn check(
    validator: &Validator,
    schema: &Value,
    prefix: &str,
    instance: &Value,
) -> Result<(), ValidationFailure> {
    let mut violations = Vec::new();
    for error in validator.iter_errors(instance) {
        violations.extend(violations_of(&error, schema, instance, prefix));
    }
    if violations.is_empty() {
        return Ok(());
    }
    // Stable order by location, so messages and tests do not depend on keyword order.
    violations.sort_by(|a, b| a.pointer.cmp(&b.pointer));
    violations.dedup();
    Err(ValidationFailure::Invalid(violations))
}

/// The schema for the value at `segment` below a value validated by `node`.
fn child_schema<'a>(node: &'a Value, segment: &str) -> Option<&'a Value> {
    let node = strip_null_wrapper(node);
    if let Some(child) = node.get("properties").and_then(|p| p.get(segment)) {
        return Some(child);
    }
    if segment.parse::<usize>().is_ok()
        && let Some(items) = node.get("items").filter(|i| i.is_object())
    {
        return Some(items);
    }
    node.get("additionalProperties").filter(|a| a.is_object())
}

// ---------------------------------------------------------------------------------------------
// Schema conversion.

/// Whether a node is converted as part of the structural skeleton or inside a logical junctor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The skeleton (`properties`, `items`, `additionalProperties`) that decides which fields
    /// are known: objects here reject unknown fields.
    Structural,
    /// Inside `allOf`/`anyOf`/`oneOf`/`not`. Structural schemas may only add value
    /// validations there, and a branch that lists some properties does not make the others
    /// unknown, so no `additionalProperties: false` is added.
    Junctor,
}

/// Converts the `openAPIV3Schema` of one served version into the JSON Schema of the whole
/// object.
fn convert_root(source: &Value, api_version: &str, kind: &str) -> Result<Value, String> {
    let mut root = convert_node(source, Mode::Structural, "openAPIV3Schema")?;
    let Some(out) = root.as_object_mut() else {
        return Err("openAPIV3Schema must be a mapping".to_owned());
    };
    out.insert("type".to_owned(), json!("object"));
    let props = out
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("openAPIV3Schema.properties must be a mapping")?;
    // The API server reads apiVersion and kind to pick the schema, so they are always present
    // and always these values.
    props.insert("apiVersion".to_owned(), json!({"const": api_version}));
    props.insert("kind".to_owned(), json!({"const": kind}));
    let mut metadata = object_meta(true);
    // A CRD may only narrow `metadata.name`/`generateName` (for example a maxLength); keep its
    // constraints as an extra condition on top of ObjectMeta.
    if let Some(crd_meta) = source.pointer("/properties/metadata")
        && crd_meta.get("properties").is_some()
    {
        let extra = convert_node(
            crd_meta,
            Mode::Junctor,
            "openAPIV3Schema.properties.metadata",
        )?;
        metadata["allOf"] = json!([extra]);
    }
    props.insert("metadata".to_owned(), metadata);
    add_required(out, &["apiVersion", "kind", "metadata"]);
    Ok(root)
}

/// Converts one OpenAPI v3.0 schema node (`at` names it, for errors).
fn convert_node(node: &Value, mode: Mode, at: &str) -> Result<Value, String> {
    let Some(src) = node.as_object() else {
        return Err(format!("{at}: a schema must be a mapping"));
    };
    let flag = |key: &str| src.get(key).and_then(Value::as_bool).unwrap_or(false);
    let preserve_unknown = flag(PRESERVE_UNKNOWN_FIELDS);
    let int_or_string = flag(INT_OR_STRING);
    let embedded = mode == Mode::Structural && flag(EMBEDDED_RESOURCE);
    let mut out = Map::new();

    if int_or_string {
        out.insert("type".to_owned(), json!(["integer", "string"]));
    } else if let Some(ty) = src.get("type") {
        let Some(ty) = ty.as_str() else {
            return Err(format!("{at}.type must be a string"));
        };
        out.insert("type".to_owned(), json!(ty));
    }
    let is_object = embedded || out.get("type") == Some(&json!("object"));

    for key in COPIED_KEYWORDS {
        if let Some(value) = src.get(*key) {
            out.insert((*key).to_owned(), value.clone());
        }
    }
    // OpenAPI v3.0 (like JSON Schema draft 4) writes exclusive bounds as a boolean next to
    // minimum/maximum; 2020-12 wants the bound itself.
    for (flag_key, bound_key) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if flag(flag_key)
            && let Some(bound) = out.remove(bound_key)
        {
            out.insert(flag_key.to_owned(), bound);
        }
    }
    // The API server rejects duplicates in a set-typed list.
    if src.get(LIST_TYPE).and_then(Value::as_str) == Some("set") {
        out.insert("uniqueItems".to_owned(), json!(true));
    }

    let required: Vec<&str> = match src.get("required") {
        None => Vec::new(),
        Some(list) => list
            .as_array()
            .and_then(|items| items.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| format!("{at}.required must be a list of strings"))?,
    };
    if !required.is_empty() {
        out.insert("required".to_owned(), json!(required));
    }

    if let Some(props) = src.get("properties") {
        let Some(props) = props.as_object() else {
            return Err(format!("{at}.properties must be a mapping"));
        };
        let mut converted = Map::new();
        for (name, sub) in props {
            let schema = convert_node(sub, mode, &format!("{at}.properties.{name}"))?;
            // The API server drops a null field that is neither nullable nor defaulted before
            // validating, and fills in the default of a defaulted one; a null only fails when it
            // is nullable-less, defaultless and required (the drop makes it missing). Inside a
            // junctor the skeleton has already decided, so null passes there.
            let null_ok = mode == Mode::Junctor
                || is_nullable(sub)
                || sub.get("default").is_some()
                || !required.contains(&name.as_str());
            let schema = if null_ok { or_null(schema) } else { schema };
            converted.insert(name.clone(), schema);
        }
        out.insert("properties".to_owned(), Value::Object(converted));
    }
    if embedded {
        add_embedded_resource_fields(&mut out);
    }

    if let Some(items) = src.get("items") {
        if items.is_array() {
            return Err(format!("{at}.items must be a single schema, not a list"));
        }
        let schema = convert_node(items, mode, &format!("{at}.items"))?;
        // A null list item is not pruned, so it passes only when nullable.
        let schema = if is_nullable(items) {
            or_null(schema)
        } else {
            schema
        };
        out.insert("items".to_owned(), schema);
    }

    match src.get("additionalProperties") {
        Some(Value::Bool(allowed)) => {
            out.insert("additionalProperties".to_owned(), json!(allowed));
        }
        Some(sub @ Value::Object(_)) => {
            // A null map value is pruned like a null field.
            let schema = convert_node(sub, mode, &format!("{at}.additionalProperties"))?;
            out.insert("additionalProperties".to_owned(), or_null(schema));
        }
        Some(_) => {
            return Err(format!(
                "{at}.additionalProperties must be a schema or a bool"
            ));
        }
        None if mode == Mode::Structural && is_object && !preserve_unknown => {
            // The heart of strict field validation: fields the schema does not declare are
            // pruned by the API server, which strict validation reports as unknown.
            out.insert("additionalProperties".to_owned(), json!(false));
        }
        None => {}
    }

    for key in ["allOf", "anyOf", "oneOf"] {
        let Some(list) = src.get(key) else { continue };
        let Some(branches) = list.as_array() else {
            return Err(format!("{at}.{key} must be a list"));
        };
        // controller-gen spells int-or-string as `anyOf: [{type: integer}, {type: string}]`,
        // which the `type` set above already says.
        if key == "anyOf" && int_or_string && branches.iter().all(is_int_or_string_branch) {
            continue;
        }
        let converted = branches
            .iter()
            .enumerate()
            .map(|(i, b)| convert_node(b, Mode::Junctor, &format!("{at}.{key}[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        out.insert(key.to_owned(), Value::Array(converted));
    }
    if let Some(not) = src.get("not") {
        out.insert(
            "not".to_owned(),
            convert_node(not, Mode::Junctor, &format!("{at}.not"))?,
        );
    }
    Ok(Value::Object(out))
}

fn is_nullable(node: &Value) -> bool {
    node.get("nullable").and_then(Value::as_bool) == Some(true)
}

fn is_int_or_string_branch(branch: &Value) -> bool {
    branch.as_object().is_some_and(|b| {
        b.len() == 1
            && matches!(
                b.get("type").and_then(Value::as_str),
                Some("integer" | "string")
            )
    })
}

/// Lets `schema` also accept `null`. An `if`/`else` rather than adding `"null"` to `type` keeps
/// `enum` and type errors about the real type.
fn or_null(schema: Value) -> Value {
    if schema.as_object().is_some_and(Map::is_empty) {
        return schema;
    }
    json!({"if": {"type": "null"}, "else": schema})
}

/// The schema inside an [`or_null`] wrapper, or `schema` itself.
fn strip_null_wrapper(schema: &Value) -> &Value {
    match (schema.get("if"), schema.get("else")) {
        (Some(cond), Some(inner)) if *cond == json!({"type": "null"}) => inner,
        _ => schema,
    }
}

fn add_required(out: &mut Map<String, Value>, fields: &[&str]) {
    let required = out.entry("required").or_insert_with(|| json!([]));
    if let Some(list) = required.as_array_mut() {
        for field in fields {
            if !list.iter().any(|v| v == field) {
                list.push(json!(field));
            }
        }
    }
}

/// `x-kubernetes-embedded-resource`: the object is a Kubernetes object of its own, with
/// `apiVersion`, `kind` and (strict) `metadata` implied even when the CRD lists no properties.
fn add_embedded_resource_fields(out: &mut Map<String, Value>) {
    let props = out.entry("properties").or_insert_with(|| json!({}));
    if let Some(props) = props.as_object_mut() {
        for key in ["apiVersion", "kind"] {
            props
                .entry(key)
                .or_insert_with(|| json!({"type": "string", "minLength": 1}));
        }
        props
            .entry("metadata")
            .or_insert_with(|| or_null(object_meta(false)));
    }
    add_required(out, &["apiVersion", "kind"]);
}

/// A strict `metav1.ObjectMeta`. `top_level` adds the rule that a top-level object needs a
/// `name` or a `generateName`.
fn object_meta(top_level: bool) -> Value {
    let string = json!({"type": "string"});
    let integer = json!({"type": "integer"});
    // Go decodes null into a zero value, so every ObjectMeta field accepts it.
    let mut props = Map::new();
    let mut add = |name: &str, schema: Value| {
        props.insert(name.to_owned(), or_null(schema));
    };
    add(
        "name",
        json!({"type": "string", "maxLength": 253, "pattern": DNS_SUBDOMAIN}),
    );
    add("generateName", string.clone());
    add(
        "namespace",
        json!({"type": "string", "maxLength": 63, "pattern": DNS_LABEL}),
    );
    let key = json!({"maxLength": 317, "pattern": QUALIFIED_NAME});
    add(
        "labels",
        json!({
            "type": "object",
            "propertyNames": key,
            "additionalProperties": or_null(
                json!({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE})
            ),
        }),
    );
    add(
        "annotations",
        json!({
            "type": "object",
            "propertyNames": key,
            "additionalProperties": or_null(string.clone()),
        }),
    );
    add("finalizers", json!({"type": "array", "items": string}));
    add(
        "ownerReferences",
        json!({"type": "array", "items": strict_object(
            &[
                ("apiVersion", string.clone()),
                ("kind", string.clone()),
                ("name", string.clone()),
                ("uid", string.clone()),
                ("controller", json!({"type": "boolean"})),
                ("blockOwnerDeletion", json!({"type": "boolean"})),
            ],
            &["apiVersion", "kind", "name", "uid"],
        )}),
    );
    for name in [
        "uid",
        "resourceVersion",
        "selfLink",
        "creationTimestamp",
        "deletionTimestamp",
    ] {
        add(name, string.clone());
    }
    add("generation", integer.clone());
    add("deletionGracePeriodSeconds", integer);
    add(
        "managedFields",
        json!({"type": "array", "items": strict_object(
            &[
                ("manager", string.clone()),
                ("operation", string.clone()),
                ("apiVersion", string.clone()),
                ("time", string.clone()),
                ("fieldsType", string.clone()),
                ("fieldsV1", json!({"type": "object"})),
                ("subresource", string.clone()),
            ],
            &[],
        )}),
    );
    let mut meta = json!({
        "type": "object",
        "properties": props,
        "additionalProperties": false,
    });
    if top_level {
        meta["anyOf"] = json!([{"required": ["name"]}, {"required": ["generateName"]}]);
    }
    meta
}

fn strict_object(fields: &[(&str, Value)], required: &[&str]) -> Value {
    let props: Map<String, Value> = fields
        .iter()
        .map(|(name, schema)| ((*name).to_owned(), or_null(schema.clone())))
        .collect();
    let mut schema = json!({"type": "object", "properties": props, "additionalProperties": false});
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

// ---------------------------------------------------------------------------------------------
// Error messages.

/// The violations one `jsonschema` error stands for (several for an `additionalProperties`
/// error with several unknown fields). `schema` and `instance` are what was validated;
/// pointers get `prefix` in front.
fn violations_of<'s>(
    error: &ValidationError<'_>,
    schema: &'s Value,
    instance: &Value,
    prefix: &str,
) -> Vec<Violation> {
    let at = format!("{prefix}{}", error.instance_path().as_str());
    let child = |name: &str| format!("{at}/{}", escape(name));
    // For `additionalProperties: false` the parent of the keyword lists the known fields.
    let schema_path = error.schema_path().as_str();
    let strict_parent = schema_path
        .strip_suffix("/additionalProperties")
        .and_then(|parent| schema.pointer(parent));
    let known = |parent: &'s Value| -> Vec<&'s str> {
        parent
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default()
    };
    let unknown_fields = |names: &mut dyn Iterator<Item = &str>, known: &[&str]| {
        names
            .map(|name| Violation {
                pointer: child(name),
                message: unknown_field_message(name, known),
            })
            .collect()
    };
    match (error.kind(), strict_parent) {
        (ValidationErrorKind::AdditionalProperties { unexpected }, parent) => {
            let known = parent.map(known).unwrap_or_default();
            unknown_fields(&mut unexpected.iter().map(String::as_str), &known)
        }
        // An object schema without `properties` compiles to a validator that reports only the
        // first field, as a false schema at the object; list every field of the object instead.
        (ValidationErrorKind::FalseSchema, Some(parent)) => {
            let known = known(parent);
            let fields = instance
                .pointer(error.instance_path().as_str())
                .and_then(Value::as_object);
            match fields {
                Some(fields) => unknown_fields(
                    &mut fields
                        .keys()
                        .map(String::as_str)
                        .filter(|k| !known.contains(k)),
                    &known,
                ),
                None => vec![Violation {
                    pointer: at,
                    message: "unknown field".to_owned(),
                }],
            }
        }
        (ValidationErrorKind::Required { property }, _) => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            vec![Violation {
                pointer: child(&name),
                message: format!("missing required field `{name}`"),
            }]
        }
        (ValidationErrorKind::PropertyNames { error: inner }, _) => {
            // The inner error is about the key itself, which is the instance it saw.
            let key = inner.instance().as_str().unwrap_or_default().to_owned();
            vec![Violation {
                pointer: child(&key),
                message: format!("invalid key {:?}: {}", key, describe(inner)),
            }]
        }
        _ => vec![Violation {
            pointer: at,
            message: describe(error),
        }],
    }
}

fn unknown_field_message(name: &str, known: &[&str]) -> String {
    let suggestion = known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match suggestion {
        Some((_, k)) => format!("unknown field `{name}` (did you mean `{k}`?)"),
        None => format!("unknown field `{name}`"),
    }
}

/// A lowercase message for an error about the value at its instance path.
fn describe(error: &ValidationError<'_>) -> String {
    let found = render_value(error.instance());
    match error.kind() {
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(ty) => ty.to_string(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            format!(
                "must be of type {expected}, found {} {found}",
                json_type(error.instance())
            )
        }
        ValidationErrorKind::Enum { options } => {
            let supported = options
                .as_array()
                .map(|o| o.iter().map(render_value).collect::<Vec<_>>().join(", "))
                .unwrap_or_else(|| render_value(options));
            format!("unsupported value {found}: supported values: {supported}")
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("must be {}, found {found}", render_value(expected_value))
        }
        ValidationErrorKind::Pattern { pattern } => match pattern_meaning(pattern) {
            Some(meaning) => format!("invalid value {found}: must be {meaning}"),
            None => format!("invalid value {found}: must match the pattern `{pattern}`"),
        },
        ValidationErrorKind::MinLength { limit } => {
            format!("invalid value {found}: must be at least {limit} characters long")
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("invalid value {found}: must be at most {limit} characters long")
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("invalid value {found}: must be greater than or equal to {limit}")
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("invalid value {found}: must be less than or equal to {limit}")
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("invalid value {found}: must be greater than {limit}")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("invalid value {found}: must be less than {limit}")
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!("invalid value {found}: must be a multiple of {multiple_of}")
        }
        ValidationErrorKind::MinItems { limit } => format!("must have at least {limit} items"),
        ValidationErrorKind::MaxItems { limit } => format!("must have at most {limit} items"),
        ValidationErrorKind::MinProperties { limit } => {
            format!("must have at least {limit} fields")
        }
        ValidationErrorKind::MaxProperties { limit } => {
            format!("must have at most {limit} fields")
        }
        ValidationErrorKind::UniqueItems => "must not contain duplicate items".to_owned(),
        ValidationErrorKind::FalseSchema => "is not allowed here".to_owned(),
        ValidationErrorKind::AnyOf { context } => {
            // Alternatives that each only require a field read best as "one of these".
            let required: Option<Vec<String>> = context
                .iter()
                .map(|branch| match branch.as_slice() {
                    [only] => match only.kind() {
                        ValidationErrorKind::Required { property } => {
                            Some(format!("`{}`", property.as_str().unwrap_or_default()))
                        }
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            match required {
                Some(fields) if !fields.is_empty() => {
                    format!("missing required field: one of {}", fields.join(", "))
                }
                _ => format!("invalid value {found}: matches none of the allowed schemas"),
            }
        }
        _ => error.to_string(),
    }
}

/// What the ObjectMeta patterns mean, in the API server's words.
fn pattern_meaning(pattern: &str) -> Option<&'static str> {
    match pattern {
        DNS_SUBDOMAIN => Some(
            "a lowercase RFC 1123 subdomain: lowercase alphanumerics, '-' or '.', starting and \
             ending with an alphanumeric (e.g. 'example.com')",
        ),
        DNS_LABEL => Some(
            "a lowercase RFC 1123 label: lowercase alphanumerics or '-', starting and ending \
             with an alphanumeric (e.g. 'my-name')",
        ),
        QUALIFIED_NAME => Some(
            "a qualified name: an optional DNS subdomain prefix and '/', then up to 63 \
             alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric \
             (e.g. 'example.com/my-key')",
        ),
        LABEL_VALUE => Some(
            "a valid label value: empty, or alphanumerics, '-', '_' or '.', starting and ending \
             with an alphanumeric",
        ),
        _ => None,
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Compact JSON, shortened so a large object does not flood the message.
fn render_value(value: &Value) -> String {
    const MAX: usize = 80;
    let text = value.to_string();
    if text.chars().count() <= MAX {
        return text;
    }
    let cut: String = text.chars().take(MAX).collect();
    format!("{cut}…")
}

/// Escapes one JSON pointer segment (RFC 6901).
fn escape(segment: &str) -> Cow<'_, str> {
    if segment.contains(['~', '/']) {
        Cow::Owned(segment.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(segment)
    }
}

/// `/spec/names/kind` → `spec.names.kind`, for messages about CRD fields.
fn pointer_to_dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal CRD with the constructs the conversion treats specially.
    const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.io
spec:
  group: example.io
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [size]
            properties:
              size:
                type: integer
                minimum: 0
                exclusiveMinimum: true
              mode:
                type: string
                enum: [Fast, Slow]
              port:
                anyOf: [{type: integer}, {type: string}]
                x-kubernetes-int-or-string: true
              note:
                type: string
                nullable: true
              labels:
                type: object
                additionalProperties: {type: string}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                properties:
                  known: {type: string}
              empty:
                type: object
              tags:
                type: array
                items: {type: string}
                x-kubernetes-list-type: set
              objects:
                type: array
                items:
                  type: object
                  x-kubernetes-embedded-resource: true
                  x-kubernetes-preserve-unknown-fields: true
  - name: v0
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
"#;

    fn widgets() -> CrdSchemas {
        let mut schemas = CrdSchemas::new();
        schemas
            .add_crd_yaml("widget.yaml", WIDGET_CRD)
            .expect("the test CRD loads");
        schemas
    }

    fn widget(spec: Value) -> Value {
        json!({
            "apiVersion": "example.io/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": spec,
        })
    }

    fn pointers(result: Result<(), ValidationFailure>) -> Vec<String> {
        match result {
            Ok(()) => Vec::new(),
            Err(ValidationFailure::Invalid(v)) => v.into_iter().map(|v| v.pointer).collect(),
            Err(other) => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn only_served_versions_become_kinds() {
        let mut schemas = widgets();
        assert_eq!(
            schemas.kinds(),
            vec![("example.io/v1".to_owned(), "Widget".to_owned())]
        );
        assert!(!schemas.knows("example.io/v0", "Widget"));
        assert_eq!(schemas.is_namespaced("example.io/v1", "Widget"), Some(true));
        assert_eq!(
            schemas.crd_name("example.io/v1", "Widget"),
            Some("widgets.example.io")
        );

        // Re-adding the CRD with only v0 served drops v1, as re-applying it would.
        let v0_only = WIDGET_CRD
            .replace("served: true", "served: TRUE_")
            .replace("served: false", "served: true")
            .replace("served: TRUE_", "served: false");
        schemas.add_crd_yaml("w.yaml", &v0_only).expect("loads");
        assert_eq!(
            schemas.kinds(),
            vec![("example.io/v0".to_owned(), "Widget".to_owned())]
        );
    }

    #[test]
    fn typed_objects_become_strict_and_maps_and_preserved_objects_do_not() {
        let schemas = widgets();
        let schema = schemas
            .json_schema("example.io/v1", "Widget")
            .expect("known kind");
        let spec = strip_null_wrapper(&schema["properties"]["spec"]);
        assert_eq!(spec["additionalProperties"], json!(false));
        let prop = |name: &str| strip_null_wrapper(&spec["properties"][name]);
        assert_eq!(
            prop("labels")["additionalProperties"],
            or_null(json!({"type": "string"}))
        );
        assert!(prop("extra").get("additionalProperties").is_none());
        // An object without properties keeps nothing: the API server prunes every field.
        assert_eq!(prop("empty")["additionalProperties"], json!(false));
        assert_eq!(
            pointers(schemas.validate(&widget(json!({"size": 1, "sise": 2})))),
            vec!["/spec/sise"]
        );
        // jsonschema reports only the first field of a property-less object; all are listed.
        assert_eq!(
            pointers(schemas.validate(&widget(json!({"size": 1, "empty": {"a": 1, "b": 2}})))),
            vec!["/spec/empty/a", "/spec/empty/b"]
        );
        let preserved = json!({"size": 1, "extra": {"known": "k", "anything": {"x": [1]}}});
        assert!(schemas.validate(&widget(preserved)).is_ok());
        // Known fields inside a preserved object are still checked.
        assert_eq!(
            pointers(schemas.validate(&widget(json!({"size": 1, "extra": {"known": 5}})))),
            vec!["/spec/extra/known"]
        );
    }

    #[test]
    fn int_or_string_nullable_exclusive_minimum_and_sets() {
        let schemas = widgets();
        let ok = |spec: Value| schemas.validate(&widget(spec)).is_ok();
        assert!(ok(json!({"size": 1, "port": 80})));
        assert!(ok(json!({"size": 1, "port": "http"})));
        assert!(!ok(json!({"size": 1, "port": true})));
        assert!(ok(json!({"size": 1, "note": null})));
        // exclusiveMinimum: true with minimum: 0 means strictly positive.
        assert!(!ok(json!({"size": 0})));
        assert!(ok(json!({"size": 1, "tags": ["a", "b"]})));
        assert!(!ok(json!({"size": 1, "tags": ["a", "a"]})));
    }

    #[test]
    fn nulls_pass_where_the_api_server_prunes_them() {
        let schemas = widgets();
        // Optional, non-nullable: pruned by the API server, so accepted.
        assert!(
            schemas
                .validate(&widget(json!({"size": 1, "mode": null})))
                .is_ok()
        );
        // Required, non-nullable, no default: pruned and then missing.
        assert_eq!(
            pointers(schemas.validate(&widget(json!({"size": null})))),
            vec!["/spec/size"]
        );
        // A null list item is not pruned.
        assert_eq!(
            pointers(schemas.validate(&widget(json!({"size": 1, "tags": [null]})))),
            vec!["/spec/tags/0"]
        );
    }

    #[test]
    fn root_metadata_is_a_strict_object_meta() {
        let schemas = widgets();
        let mut obj = widget(json!({"size": 1}));
        obj["metadata"]["lables"] = json!({"a": "b"});
        let Err(ValidationFailure::Invalid(violations)) = schemas.validate(&obj) else {
            panic!("metadata.lables must be rejected");
        };
        assert_eq!(
            violations,
            vec![Violation {
                pointer: "/metadata/lables".to_owned(),
                message: "unknown field `lables` (did you mean `labels`?)".to_owned(),
            }]
        );

        let mut obj = widget(json!({"size": 1}));
        obj["metadata"] = json!({"namespace": "default", "labels": {"bad key!": "v"}});
        assert_eq!(
            pointers(schemas.validate(&obj)),
            vec!["/metadata", "/metadata/labels/bad key!"]
        );
    }

    #[test]
    fn root_api_version_and_kind_must_match() {
        let schemas = widgets();
        let mut obj = widget(json!({"size": 1}));
        obj["kind"] = json!("Gadget");
        assert!(matches!(
            schemas.validate(&obj),
            Err(ValidationFailure::UnknownKind { .. })
        ));
        assert_eq!(
            pointers(schemas.validate_fragment("example.io/v1", "Widget", &[], &{
                let mut o = widget(json!({"size": 1}));
                o["kind"] = json!("Gadget");
                o
            })),
            vec!["/kind"]
        );
        let mut obj = widget(json!({"size": 1}));
        obj.as_object_mut().map(|o| o.remove("kind"));
        assert_eq!(pointers(schemas.validate(&obj)), vec!["/kind"]);
    }

    #[test]
    fn crd_constraints_on_metadata_name_are_kept() {
        let crd = WIDGET_CRD.replace(
            "metadata: {type: object}",
            "metadata: {type: object, properties: {name: {type: string, maxLength: 5}}}",
        );
        let mut schemas = CrdSchemas::new();
        schemas.add_crd_yaml("w.yaml", &crd).expect("loads");
        let mut obj = widget(json!({"size": 1}));
        assert!(schemas.validate(&obj).is_ok());
        obj["metadata"]["name"] = json!("too-long");
        assert_eq!(pointers(schemas.validate(&obj)), vec!["/metadata/name"]);
        // ObjectMeta stays strict next to the CRD's own metadata schema.
        obj["metadata"] = json!({"name": "w", "lables": {}});
        assert_eq!(pointers(schemas.validate(&obj)), vec!["/metadata/lables"]);
    }

    #[test]
    fn embedded_resources_need_type_meta_and_strict_metadata() {
        let schemas = widgets();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}});
        assert!(
            schemas
                .validate(&widget(json!({"size": 1, "objects": [pod]})))
                .is_ok()
        );
        let bad = json!({"kind": "Pod", "metadata": {"nme": "p"}});
        assert_eq!(
            pointers(schemas.validate(&widget(json!({"size": 1, "objects": [bad]})))),
            vec!["/spec/objects/0/apiVersion", "/spec/objects/0/metadata/nme"]
        );
    }

    #[test]
    fn fragments_are_found_through_properties_maps_and_items() {
        let schemas = widgets();
        let check = |path: &[&str], value: Value| {
            pointers(schemas.validate_fragment("example.io/v1", "Widget", path, &value))
        };
        assert_eq!(
            check(&["spec"], json!({"size": 1, "x": 1})),
            vec!["/spec/x"]
        );
        assert_eq!(
            check(&["spec", "labels", "any-key"], json!(3)),
            vec!["/spec/labels/any-key"]
        );
        assert!(
            check(
                &["spec", "objects", "0"],
                json!({"apiVersion": "v1", "kind": "K"})
            )
            .is_empty()
        );
        assert!(matches!(
            schemas.validate_fragment("example.io/v1", "Widget", &["spec", "nope"], &json!(1)),
            Err(ValidationFailure::NoSuchPath { path }) if path == "spec.nope"
        ));
    }

    #[test]
    fn messages_are_lowercase_and_name_the_problem() {
        let schemas = widgets();
        let obj = widget(json!({"size": 1, "mode": "Medium"}));
        let failure = schemas.validate(&obj).expect_err("bad enum value");
        assert_eq!(
            failure.to_string(),
            r#"/spec/mode: unsupported value "Medium": supported values: "Fast", "Slow""#
        );
        assert_eq!(
            failure.display_for(&obj),
            r#"Widget default/w: /spec/mode: unsupported value "Medium": supported values: "Fast", "Slow""#
        );
        let failure = schemas
            .validate(&widget(json!({"size": "big"})))
            .expect_err("bad type");
        assert_eq!(
            failure.to_string(),
            r#"/spec/size: must be of type integer, found string "big""#
        );
    }

    #[test]
    fn bad_crds_are_reported_with_their_name() {
        let mut schemas = CrdSchemas::new();
        let err = schemas
            .add_crd_yaml(
                "x.yaml",
                &WIDGET_CRD.replace("type: integer\n", "type: [integer]\n"),
            )
            .expect_err("type must be a string");
        assert!(
            matches!(&err, CrdSchemaError::BadCrd { name, .. } if name == "widgets.example.io"),
            "{err:?}"
        );
        let err = schemas
            .add_crd_yaml("x.yaml", "apiVersion: v1\nkind: ConfigMap\n")
            .expect_err("no CRD");
        assert!(
            err.to_string().contains("no CustomResourceDefinition"),
            "{err}"
        );
        assert!(matches!(
            schemas.add_crd_yaml("x.yaml", "a: [1"),
            Err(CrdSchemaError::Parse { .. })
        ));
        assert!(schemas.kinds().is_empty(), "failed loads add nothing");
    }
}
