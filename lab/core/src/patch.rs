//! Declarative patches for rendered Helm chart objects.
//!
//! Some upstream charts render objects that their own CRDs reject (for example cluster-proxy
//! 0.10.0, see `charts-patches/cluster-proxy-0.10.yaml`). Instead of forking the charts, the lab
//! renders them with `helm template` and then applies small, documented JSON patches
//! (RFC 6902) to the rendered objects before server-side applying them.
//!
//! # File format
//!
//! A patch file is YAML with one or more documents (`---`), each a `ChartPatch`:
//!
//! ```yaml
//! apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
//! kind: ChartPatch
//! metadata:
//!   name: cluster-proxy-mpc-undeclared-fields   # unique across all loaded files
//! spec:
//!   chart: cluster-proxy                         # chart name, compared exactly
//!   versions: ">=0.10.0, <0.11.0"                # semver range of chart versions
//!   reason: "why, citing upstream (PR/commit, release that fixes it)"
//!   target:                                      # which rendered object(s) to patch
//!     apiVersion: proxy.open-cluster-management.io/v1alpha1
//!     kind: ManagedProxyConfiguration
//!     name: cluster-proxy                        # optional
//!     namespace: some-namespace                  # optional
//!   operations:                                  # RFC 6902 operations, applied in order
//!     - {op: remove, path: /spec/proxyAgent/additionalValues}
//!     - {op: remove, path: /spec/proxyServer/entrypoint/hostname/port, ifPresent: true}
//! ```
//!
//! Every mapping rejects unknown keys, so a typo is an error with its line and column.
//! `ifPresent: true` is the only extension to RFC 6902: the operation is skipped when the
//! location it reads (`path`, or `from` for `move`/`copy`) does not exist in the object. It is
//! rejected on `add`, which never reads its `path`. Without it, an operation on a missing path
//! is an error, because it means the chart no longer renders what the patch was written for.
//!
//! A patch whose target is not in the rendered chart is reported in
//! [`PatchReport::missing_targets`]; the caller decides how loudly to warn.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchErrorKind, PatchOperation, RemoveOperation,
    ReplaceOperation, TestOperation,
};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_saphyr::Spanned;

/// The `apiVersion` every patch document must declare.
pub const API_VERSION: &str = "ocm-lab.open-cluster-management.io/v1alpha1";

/// The `kind` every patch document must declare.
pub const KIND: &str = "ChartPatch";

/// The patch files shipped with the binary: `(file name, contents)`.
///
/// Every `*.yaml` file in `charts-patches/` must be listed here; a unit test enforces it so a
/// new patch file cannot be forgotten.
pub const EMBEDDED: &[(&str, &str)] = &[(
    "cluster-proxy-0.10.yaml",
    include_str!("../../../charts-patches/cluster-proxy-0.10.yaml"),
)];

/// One declarative patch: which chart versions and object it is for, and what to change.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartPatch {
    /// `metadata.name`, unique within a [`PatchSet`].
    pub name: String,
    /// The file the patch was loaded from (file name for embedded patches, path for a directory).
    pub source: String,
    /// The chart name the patch applies to, compared exactly.
    pub chart: String,
    /// The chart versions the patch applies to.
    pub versions: semver::VersionReq,
    /// Why the patch exists, citing upstream.
    pub reason: String,
    /// The rendered object(s) to patch.
    pub target: Target,
    /// The operations, applied in order.
    pub operations: Vec<Operation>,
}

impl ChartPatch {
    /// Whether the patch is meant for this chart and version.
    ///
    /// Follows [`semver::VersionReq::matches`], so a pre-release version only matches a range
    /// that names a pre-release of the same `major.minor.patch`.
    #[must_use]
    pub fn applies_to(&self, chart: &str, version: &semver::Version) -> bool {
        self.chart == chart && self.versions.matches(version)
    }
}

/// Which rendered objects a patch changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Must equal the object's `apiVersion`.
    pub api_version: String,
    /// Must equal the object's `kind`.
    pub kind: String,
    /// If set, must equal the object's `metadata.name`.
    pub name: Option<String>,
    /// If set, must equal the object's `metadata.namespace` as rendered (an object rendered
    /// without a namespace does not match).
    pub namespace: Option<String>,
}

impl Target {
    /// Whether a rendered object is one this target selects.
    #[must_use]
    pub fn matches(&self, object: &Value) -> bool {
        let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        field("/apiVersion") == Some(self.api_version.as_str())
            && field("/kind") == Some(self.kind.as_str())
            && self
                .name
                .as_deref()
                .is_none_or(|name| field("/metadata/name") == Some(name))
            && self
                .namespace
                .as_deref()
                .is_none_or(|namespace| field("/metadata/namespace") == Some(namespace))
    }

    /// The identity of a rendered object, in the same shape as a target (for reports).
    fn of_object(object: &Value) -> Self {
        let field = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Self {
            api_version: field("/apiVersion").unwrap_or_default(),
            kind: field("/kind").unwrap_or_default(),
            name: field("/metadata/name"),
            namespace: field("/metadata/namespace"),
        }
    }
}

impl fmt::Display for Target {
    /// `Kind namespace/name (apiVersion)`; `*` stands for "any name".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.kind)?;
        if let Some(namespace) = &self.namespace {
            write!(f, "{namespace}/")?;
        }
        write!(
            f,
            "{} ({})",
            self.name.as_deref().unwrap_or("*"),
            self.api_version
        )
    }
}

/// One RFC 6902 operation plus our `ifPresent` extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The standard operation.
    pub op: PatchOperation,
    /// Skip the operation when the location it reads does not exist (see [`Operation::reads`]).
    pub if_present: bool,
}

impl Operation {
    /// The location the operation needs to exist: `from` for `move`/`copy`, else `path`.
    ///
    /// For `add` this is `path`, which need not exist; `ifPresent` is rejected on `add`.
    #[must_use]
    pub fn reads(&self) -> &Pointer {
        match &self.op {
            PatchOperation::Move(op) => &op.from,
            PatchOperation::Copy(op) => &op.from,
            other => other.path(),
        }
    }

    /// The RFC 6902 `op` name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self.op {
            PatchOperation::Add(_) => "add",
            PatchOperation::Remove(_) => "remove",
            PatchOperation::Replace(_) => "replace",
            PatchOperation::Move(_) => "move",
            PatchOperation::Copy(_) => "copy",
            PatchOperation::Test(_) => "test",
        }
    }
}

impl fmt::Display for Operation {
    /// `remove /spec/a`, `move /spec/a -> /spec/b`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.op {
            PatchOperation::Move(op) => write!(f, "move {} -> {}", op.from, op.path),
            PatchOperation::Copy(op) => write!(f, "copy {} -> {}", op.from, op.path),
            other => write!(f, "{} {}", self.name(), other.path()),
        }
    }
}

/// All loaded patches, with unique names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatchSet {
    patches: Vec<ChartPatch>,
}

impl PatchSet {
    /// The patches compiled into the binary ([`EMBEDDED`]).
    ///
    /// # Errors
    /// If an embedded file is invalid (the unit tests keep this from shipping).
    pub fn embedded() -> Result<Self, PatchError> {
        Self::from_named_texts(EMBEDDED.iter().copied())
    }

    /// Patches from `(file name, text)` pairs, in order.
    ///
    /// # Errors
    /// If a file does not parse or validate, has no patch, or two patches share a name.
    pub fn from_files(files: &[(String, String)]) -> Result<Self, PatchError> {
        Self::from_named_texts(
            files
                .iter()
                .map(|(name, text)| (name.as_str(), text.as_str())),
        )
    }

    /// Patches from every `*.yaml` / `*.yml` file in `dir`, in file-name order, so that a user can
    /// replace the embedded set. Other files and subdirectories are ignored.
    ///
    /// # Errors
    /// If the directory or a file cannot be read, or as for [`PatchSet::from_files`].
    pub fn load_dir(dir: &Path) -> Result<Self, PatchError> {
        let read_dir_error = |source| PatchError::ReadDir {
            path: dir.to_path_buf(),
            source,
        };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
            let path = entry.map_err(read_dir_error)?.path();
            if path.is_file() && is_yaml(&path) {
                paths.push(path);
            }
        }
        paths.sort();
        if paths.is_empty() {
            return Err(PatchError::EmptyDir {
                path: dir.to_path_buf(),
            });
        }
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|source| PatchError::ReadFile {
                path: path.clone(),
                source,
            })?;
            files.push((path.display().to_string(), text));
        }
        Self::from_files(&files)
    }

    /// The patches for one chart version, in load order.
    #[must_use]
    pub fn for_chart(&self, chart: &str, version: &semver::Version) -> Vec<&ChartPatch> {
        self.patches
            .iter()
            .filter(|patch| patch.applies_to(chart, version))
            .collect()
    }

    /// Every loaded patch, in load order.
    #[must_use]
    pub fn all(&self) -> &[ChartPatch] {
        &self.patches
    }

    fn from_named_texts<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, PatchError> {
        let mut patches: Vec<ChartPatch> = Vec::new();
        // Names are what reports and errors use, so they must identify one patch.
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for (file, text) in files {
            for patch in parse_file(file, text)? {
                if let Some(first) = seen.insert(patch.name.clone(), patch.source.clone()) {
                    return Err(PatchError::DuplicateName {
                        name: patch.name,
                        first,
                        second: patch.source,
                    });
                }
                patches.push(patch);
            }
        }
        Ok(Self { patches })
    }
}

fn is_yaml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext == "yaml" || ext == "yml")
}

/// What [`apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchReport {
    /// One entry per patched object.
    pub applied: Vec<Applied>,
    /// Patches whose target is not among the rendered objects.
    pub missing_targets: Vec<MissingTarget>,
}

/// A patch applied to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The patch name.
    pub patch: String,
    /// The patched object, e.g. `ManagedProxyConfiguration cluster-proxy (proxy.…/v1alpha1)`.
    pub target: String,
    /// How many operations changed (or, for `test`, checked) the object.
    pub operations_applied: usize,
    /// The `ifPresent` operations skipped because their location was absent, as
    /// `op path` strings.
    pub operations_skipped: Vec<String>,
}

/// A patch whose target object was not rendered (a chart change or a wrong target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingTarget {
    /// The patch name.
    pub patch: String,
    /// The file the patch came from.
    pub source: String,
    /// The target as written in the patch.
    pub target: String,
    /// The patch's `reason`, so a warning can say what the patch was for.
    pub reason: String,
}

impl fmt::Display for MissingTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "patch `{}` ({}) was not applied: the chart rendered no {}",
            self.patch, self.source, self.target
        )
    }
}

/// Apply the patches to a chart's rendered objects in place.
///
/// Patches run in the given order, each on every object its target matches. Operations are
/// atomic: if any operation fails, an error is returned and no object is changed (not only the
/// failing one), so a caller never applies a half-patched chart.
///
/// # Errors
/// [`PatchError::Apply`] if an operation fails, e.g. a path without `ifPresent` is absent.
pub fn apply(patches: &[&ChartPatch], objects: &mut [Value]) -> Result<PatchReport, PatchError> {
    // Patched copies, committed only once every patch succeeded.
    let mut staged: Vec<Option<Value>> = vec![None; objects.len()];
    let mut report = PatchReport::default();
    for patch in patches {
        let mut matched = false;
        for (object, staged) in objects.iter().zip(staged.iter_mut()) {
            // Later patches see the changes of earlier ones.
            let current = staged.as_ref().unwrap_or(object);
            if !patch.target.matches(current) {
                continue;
            }
            matched = true;
            let target = Target::of_object(current).to_string();
            let mut work = current.clone();
            let (operations_applied, operations_skipped) =
                apply_operations(patch, &target, &mut work)?;
            *staged = Some(work);
            report.applied.push(Applied {
                patch: patch.name.clone(),
                target,
                operations_applied,
                operations_skipped,
            });
        }
        if !matched {
            report.missing_targets.push(MissingTarget {
                patch: patch.name.clone(),
                source: patch.source.clone(),
                target: patch.target.to_string(),
                reason: patch.reason.clone(),
            });
        }
    }
    for (object, staged) in objects.iter_mut().zip(staged) {
        if let Some(patched) = staged {
            *object = patched;
        }
    }
    Ok(report)
}

/// Runs one patch's operations on `object`; returns (applied count, skipped operations).
fn apply_operations(
    patch: &ChartPatch,
    target: &str,
    object: &mut Value,
) -> Result<(usize, Vec<String>), PatchError> {
    let mut applied = 0;
    let mut skipped = Vec::new();
    for (index, operation) in patch.operations.iter().enumerate() {
        let present = object.pointer(operation.reads().as_str()).is_some();
        if operation.if_present && !present {
            skipped.push(operation.to_string());
            continue;
        }
        // json_patch reverts a failed operation itself; `object` is a copy anyway.
        if let Err(error) = json_patch::patch(object, std::slice::from_ref(&operation.op)) {
            let reason = match error.kind {
                PatchErrorKind::InvalidPointer | PatchErrorKind::InvalidFromPointer
                    if !present && !matches!(operation.op, PatchOperation::Add(_)) =>
                {
                    format!(
                        "`{}` does not exist in the object (mark the operation `ifPresent: true` \
                         if it is optional)",
                        operation.reads()
                    )
                }
                PatchErrorKind::InvalidPointer => format!(
                    "`{}` cannot be reached: its parent is missing, not a container, or not a \
                     valid array index",
                    operation.op.path()
                ),
                PatchErrorKind::TestFailed => {
                    format!(
                        "the value at `{}` is not the expected one",
                        operation.op.path()
                    )
                }
                other => other.to_string(),
            };
            return Err(PatchError::Apply(Box::new(ApplyFailure {
                patch: patch.name.clone(),
                source: patch.source.clone(),
                target: target.to_owned(),
                index: index + 1,
                operation: operation.to_string(),
                path: operation.reads().to_string(),
                reason,
            })));
        }
        applied += 1;
    }
    Ok((applied, skipped))
}

/// Errors from loading or applying patches.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// A patch directory could not be listed.
    #[error("failed to read patch directory {}", path.display())]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A patch folder holds no patch file (`*.yaml`): nothing would be patched, which is never what a
    /// `--chart-patches` folder is given for.
    #[error("patch folder {} holds no patch files (*.yaml)", path.display())]
    EmptyDir {
        /// The directory.
        path: PathBuf,
    },
    /// A patch file could not be read.
    #[error("failed to read patch file {}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A patch file is not valid YAML or does not have the expected shape (unknown or missing
    /// field, wrong type). The message ends with `at line L, column C` when known.
    #[error("failed to parse patch file {file}: {message}")]
    Parse {
        /// The file name.
        file: String,
        /// The parser's message, with its location.
        message: String,
        /// Where in the file, for [`miette`] output.
        location: Option<Box<SourceLocation>>,
    },
    /// A patch has the right shape but an invalid value (kind, semver range, JSON pointer, …).
    #[error("failed to load patch file {file}: {message}")]
    Invalid {
        /// The file name.
        file: String,
        /// The patch name, once known.
        patch: Option<String>,
        /// What is wrong, naming the patch and ending with `at line L, column C` when known.
        message: String,
        /// Where in the file, for [`miette`] output.
        location: Option<Box<SourceLocation>>,
    },
    /// A patch file holds no patch document.
    #[error("failed to load patch file {file}: it contains no ChartPatch document")]
    Empty {
        /// The file name.
        file: String,
    },
    /// Two patches share a name.
    #[error("failed to load patches: patch `{name}` is defined in both {first} and {second}")]
    DuplicateName {
        /// The shared name.
        name: String,
        /// The file of the first definition.
        first: String,
        /// The file of the second definition.
        second: String,
    },
    /// An operation failed on a rendered object; no object was changed.
    #[error(
        "failed to apply patch `{}` ({}) to {}: operation {} ({}) failed: {}",
        .0.patch, .0.source, .0.target, .0.index, .0.operation, .0.reason
    )]
    Apply(Box<ApplyFailure>),
}

/// Details of [`PatchError::Apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyFailure {
    /// The patch name.
    pub patch: String,
    /// The file the patch came from.
    pub source: String,
    /// The object being patched.
    pub target: String,
    /// 1-based index of the failing operation in `operations`.
    pub index: usize,
    /// The operation, e.g. `remove /spec/a`.
    pub operation: String,
    /// The location the operation needed (`from` for `move`/`copy`, else `path`).
    pub path: String,
    /// Why it failed.
    pub reason: String,
}

/// A position in a patch file, kept so that errors render with a source snippet.
#[derive(Debug)]
pub struct SourceLocation {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// The file text, named after the file.
    source_code: miette::NamedSource<String>,
    /// The offending bytes, when the parser knows them.
    span: Option<miette::SourceSpan>,
}

impl SourceLocation {
    fn new(file: &str, text: &str, location: serde_saphyr::Location) -> Option<Box<Self>> {
        // Line 0 is the parser's "unknown location".
        if location.line() == 0 {
            return None;
        }
        let span = location.span();
        let span = span.byte_offset().map(|offset| {
            let len = span.byte_len().unwrap_or(0);
            miette::SourceSpan::new(
                usize::try_from(offset).unwrap_or(0).into(),
                usize::try_from(len).unwrap_or(0),
            )
        });
        Some(Box::new(Self {
            line: location.line(),
            column: location.column(),
            source_code: miette::NamedSource::new(file, text.to_owned()),
            span,
        }))
    }
}

impl PatchError {
    /// `(line, column)` in the patch file, for parse and validation errors.
    #[must_use]
    pub fn line_column(&self) -> Option<(u64, u64)> {
        self.location().map(|l| (l.line, l.column))
    }

    fn location(&self) -> Option<&SourceLocation> {
        match self {
            Self::Parse { location, .. } | Self::Invalid { location, .. } => location.as_deref(),
            _ => None,
        }
    }
}

impl miette::Diagnostic for PatchError {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        let code = match self {
            Self::ReadDir { .. } | Self::ReadFile { .. } | Self::EmptyDir { .. } => {
                "ocm_lab::patch::read"
            }
            Self::Parse { .. } => "ocm_lab::patch::parse",
            Self::Invalid { .. } | Self::Empty { .. } | Self::DuplicateName { .. } => {
                "ocm_lab::patch::invalid"
            }
            Self::Apply(_) => "ocm_lab::patch::apply",
        };
        Some(Box::new(code))
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        match self {
            Self::Apply(_) => Some(Box::new(
                "the chart no longer renders what the patch expects: check the patch's versions \
                 range against the chart, or fix the patch",
            )),
            Self::DuplicateName { .. } => Some(Box::new("rename one of the patches")),
            _ => None,
        }
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.location()
            .map(|l| &l.source_code as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        let span = self.location()?.span?;
        Some(Box::new(std::iter::once(miette::LabeledSpan::at(
            span, "here",
        ))))
    }
}

// ---- parsing ---------------------------------------------------------------------------------

/// The on-disk shape; converted to [`ChartPatch`] by [`RawPatch::validate`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPatch {
    api_version: Spanned<String>,
    kind: Spanned<String>,
    metadata: RawMetadata,
    spec: RawSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetadata {
    name: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    chart: Spanned<String>,
    versions: Spanned<String>,
    reason: Spanned<String>,
    target: RawTarget,
    operations: Spanned<Vec<Spanned<RawOperation>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTarget {
    api_version: String,
    kind: String,
    name: Option<String>,
    namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawOperation {
    op: OpKind,
    path: Spanned<String>,
    // `Some(Null)` for `value: null`, which `add`/`replace`/`test` may legitimately use.
    #[serde(default, deserialize_with = "present")]
    value: Option<Value>,
    from: Option<Spanned<String>>,
    #[serde(default)]
    if_present: bool,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum OpKind {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

/// Deserializes a field that is present (even as `null`) to `Some`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

fn parse_file(file: &str, text: &str) -> Result<Vec<ChartPatch>, PatchError> {
    // The snippet is left to miette (see `SourceLocation`); the message keeps line/column.
    let options = serde_saphyr::options! { with_snippet: false };
    let raws: Vec<RawPatch> = serde_saphyr::from_str_multiple_with_options::<RawPatch, Vec<_>>(
        text, options,
    )
    .map_err(|error| PatchError::Parse {
        file: file.to_owned(),
        message: error.to_string(),
        location: error
            .location()
            .and_then(|location| SourceLocation::new(file, text, location)),
    })?;
    if raws.is_empty() {
        return Err(PatchError::Empty {
            file: file.to_owned(),
        });
    }
    let context = FileContext { file, text };
    raws.into_iter().map(|raw| raw.validate(&context)).collect()
}

/// The file being loaded, for error messages.
struct FileContext<'a> {
    file: &'a str,
    text: &'a str,
}

impl FileContext<'_> {
    fn invalid(
        &self,
        patch: Option<&str>,
        what: impl fmt::Display,
        location: serde_saphyr::Location,
    ) -> PatchError {
        let prefix = patch
            .map(|name| format!("patch `{name}`: "))
            .unwrap_or_default();
        let location_box = SourceLocation::new(self.file, self.text, location);
        let suffix = location_box
            .as_ref()
            .map(|l| format!(" at line {}, column {}", l.line, l.column))
            .unwrap_or_default();
        PatchError::Invalid {
            file: self.file.to_owned(),
            patch: patch.map(str::to_owned),
            message: format!("{prefix}{what}{suffix}"),
            location: location_box,
        }
    }
}

impl RawPatch {
    fn validate(self, context: &FileContext<'_>) -> Result<ChartPatch, PatchError> {
        if self.api_version.value != API_VERSION {
            return Err(context.invalid(
                None,
                format_args!(
                    "apiVersion is `{}`, expected `{API_VERSION}`",
                    self.api_version.value
                ),
                self.api_version.referenced,
            ));
        }
        if self.kind.value != KIND {
            return Err(context.invalid(
                None,
                format_args!("kind is `{}`, expected `{KIND}`", self.kind.value),
                self.kind.referenced,
            ));
        }
        let name = self.metadata.name.value;
        if name.trim().is_empty() {
            return Err(context.invalid(
                None,
                "metadata.name is empty",
                self.metadata.name.referenced,
            ));
        }
        let patch = Some(name.as_str());
        let spec = self.spec;
        for (field, value) in [("spec.chart", &spec.chart), ("spec.reason", &spec.reason)] {
            if value.value.trim().is_empty() {
                return Err(context.invalid(
                    patch,
                    format_args!("{field} is empty"),
                    value.referenced,
                ));
            }
        }
        let versions = semver::VersionReq::parse(&spec.versions.value).map_err(|error| {
            context.invalid(
                patch,
                format_args!(
                    "spec.versions `{}` is not a semver range: {error}",
                    spec.versions.value
                ),
                spec.versions.referenced,
            )
        })?;
        if spec.operations.value.is_empty() {
            return Err(context.invalid(
                patch,
                "spec.operations is empty",
                spec.operations.referenced,
            ));
        }
        let operations = spec
            .operations
            .value
            .into_iter()
            .enumerate()
            .map(|(index, raw)| raw.value.validate(context, &name, index + 1))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ChartPatch {
            name: name.clone(),
            source: context.file.to_owned(),
            chart: spec.chart.value,
            versions,
            reason: spec.reason.value.trim().to_owned(),
            target: Target {
                api_version: spec.target.api_version,
                kind: spec.target.kind,
                name: spec.target.name,
                namespace: spec.target.namespace,
            },
            operations,
        })
    }
}

impl RawOperation {
    fn validate(
        self,
        context: &FileContext<'_>,
        patch: &str,
        index: usize,
    ) -> Result<Operation, PatchError> {
        let invalid = |what: String, location| {
            context.invalid(
                Some(patch),
                format_args!("operation {index}: {what}"),
                location,
            )
        };
        let pointer = |field: &str, raw: &Spanned<String>| {
            // An empty pointer is the whole object; replacing or removing that is never
            // what a chart fix means.
            if raw.value.is_empty() {
                return Err(invalid(
                    format!("{field} is empty; it must start with `/`"),
                    raw.referenced,
                ));
            }
            PointerBuf::parse(raw.value.as_str()).map_err(|error| {
                invalid(
                    format!("{field} `{}` is not a JSON pointer: {error}", raw.value),
                    raw.referenced,
                )
            })
        };
        let path = pointer("path", &self.path)?;
        let kind = self.op;
        let needs_value = matches!(kind, OpKind::Add | OpKind::Replace | OpKind::Test);
        let needs_from = matches!(kind, OpKind::Move | OpKind::Copy);
        let value = match (self.value, needs_value) {
            (Some(value), true) => value,
            (None, false) => Value::Null,
            (None, true) => {
                return Err(invalid(
                    "`value` is required for add, replace and test".to_owned(),
                    self.path.referenced,
                ));
            }
            (Some(_), false) => {
                return Err(invalid(
                    "`value` is only allowed on add, replace and test".to_owned(),
                    self.path.referenced,
                ));
            }
        };
        let from = match (&self.from, needs_from) {
            (Some(from), true) => pointer("from", from)?,
            (None, false) => PointerBuf::new(),
            (None, true) => {
                return Err(invalid(
                    "`from` is required for move and copy".to_owned(),
                    self.path.referenced,
                ));
            }
            (Some(from), false) => {
                return Err(invalid(
                    "`from` is only allowed on move and copy".to_owned(),
                    from.referenced,
                ));
            }
        };
        if self.if_present && kind == OpKind::Add {
            return Err(invalid(
                "`ifPresent` is not allowed on add, which does not need its path to exist"
                    .to_owned(),
                self.path.referenced,
            ));
        }
        let op = match kind {
            OpKind::Add => PatchOperation::Add(AddOperation { path, value }),
            OpKind::Remove => PatchOperation::Remove(RemoveOperation { path }),
            OpKind::Replace => PatchOperation::Replace(ReplaceOperation { path, value }),
            OpKind::Move => PatchOperation::Move(MoveOperation { from, path }),
            OpKind::Copy => PatchOperation::Copy(CopyOperation { from, path }),
            OpKind::Test => PatchOperation::Test(TestOperation { path, value }),
        };
        Ok(Operation {
            op,
            if_present: self.if_present,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every patch file in `charts-patches/` is compiled in, and nothing else is listed.
    #[test]
    fn every_patch_file_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts-patches");
        let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
            .expect("charts-patches/ is readable")
            .map(|entry| entry.expect("directory entry").path())
            .filter(|path| path.is_file() && is_yaml(path))
            .map(|path| {
                path.file_name()
                    .expect("file name")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let embedded: BTreeSet<String> = EMBEDDED
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .collect();
        assert_eq!(
            on_disk, embedded,
            "charts-patches/ and patch::EMBEDDED differ: add the file to EMBEDDED"
        );
        assert_eq!(
            embedded.len(),
            EMBEDDED.len(),
            "EMBEDDED lists a file twice"
        );
    }

    /// The embedded set parses and is the same as loading the directory.
    #[test]
    fn embedded_patches_load() {
        let embedded = PatchSet::embedded().expect("embedded patches are valid");
        assert!(!embedded.all().is_empty());
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts-patches");
        let loaded = PatchSet::load_dir(&dir).expect("charts-patches/ loads");
        let names = |set: &PatchSet| set.all().iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&embedded), names(&loaded));
        for patch in embedded.all() {
            assert!(
                !patch.reason.contains('\n'),
                "reason of `{}` is one line",
                patch.name
            );
        }
    }

    #[test]
    fn target_display() {
        let mut target = Target {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: None,
            namespace: Some("ns".into()),
        };
        assert_eq!(target.to_string(), "ConfigMap ns/* (v1)");
        target.name = Some("cm".into());
        assert_eq!(target.to_string(), "ConfigMap ns/cm (v1)");
    }
}
