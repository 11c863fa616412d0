//! User-facing diagnostics for files we read: a problem, where it is (file, line, column), and what to do.
//!
//! Parse errors and semantic errors end up in the same [`FileDiagnostics`], rendered by miette as a snippet
//! of the file with the offending key underlined. The message itself also names the field path, so the
//! error stays useful when it is read as plain text (CI logs, `--output json`).

use std::fmt;

use miette::{Diagnostic, NamedSource, SourceSpan};
use serde_saphyr::Location;

/// How bad an [`Issue`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warning,
}

/// One problem in a file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Issue {
    pub level: Level,
    /// Dotted path of the field, e.g. `spec.spokes[1].properties.region`.
    pub field: String,
    pub message: String,
    pub help: Option<String>,
    pub span: Option<SourceSpan>,
    /// 1-based line and column, when known.
    pub line_col: Option<(usize, usize)>,
}

impl Diagnostic for Issue {
    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.level {
            Level::Error => miette::Severity::Error,
            Level::Warning => miette::Severity::Warning,
        })
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        let span = self.span?;
        Some(Box::new(std::iter::once(
            miette::LabeledSpan::new_with_span(Some(self.field.clone()), span),
        )))
    }
}

/// How many problems a report shows with a snippet each; the rest are counted in one line. A file with
/// thousands of mistakes (a generated topology) is answered at once, and the first screen is the one
/// people fix first.
pub const SHOWN: usize = 20;

/// All problems found in one file, with the file's text for snippets.
#[derive(Debug, thiserror::Error)]
pub struct FileDiagnostics {
    pub file: String,
    pub src: NamedSource<String>,
    pub issues: Vec<Issue>,
    /// "and N more problems", shown after the first [`SHOWN`] issues when there are more.
    more: Option<Issue>,
}

impl fmt::Display for FileDiagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let errors = self.errors().count();
        write!(
            f,
            "{}: {} {} found",
            self.file,
            errors,
            if errors == 1 { "problem" } else { "problems" }
        )
    }
}

impl Diagnostic for FileDiagnostics {
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.src)
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        Some(Box::new(
            self.issues
                .iter()
                .take(SHOWN)
                .chain(&self.more)
                .map(|i| i as &dyn Diagnostic),
        ))
    }
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new("ocm_lab::invalid_file"))
    }
}

impl FileDiagnostics {
    pub fn new(file: &str, text: &str, mut issues: Vec<Issue>) -> Self {
        // In file order, which is how people fix them.
        issues.sort_by_key(|i| i.line_col.unwrap_or((usize::MAX, 0)));
        let more = issues.get(SHOWN..).filter(|r| !r.is_empty()).map(|rest| {
            let errors = rest.iter().filter(|i| i.level == Level::Error).count();
            Issue {
                level: if errors > 0 {
                    Level::Error
                } else {
                    Level::Warning
                },
                field: String::new(),
                message: format!(
                    "and {} in {file}, not shown (the first {SHOWN} are above)",
                    crate::text::count(rest.len(), "more problem", "more problems")
                ),
                help: Some("fix these and run again: the next ones are shown then".to_owned()),
                span: None,
                line_col: None,
            }
        });
        Self {
            file: file.to_owned(),
            src: NamedSource::new(file, text.to_owned()),
            issues,
            more,
        }
    }

    pub fn errors(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.level == Level::Error)
    }

    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }

    /// The first [`SHOWN`] errors as `file:line:col: field: message (help)`, one per line, then how many
    /// more there are: the plain-text form for logs.
    pub fn plain(&self) -> String {
        let mut lines: Vec<String> = self.errors().take(SHOWN).map(|i| self.locate(i)).collect();
        let rest = self.errors().count().saturating_sub(SHOWN);
        if rest > 0 {
            lines.push(format!(
                "{}: and {} more",
                self.file,
                crate::text::count(rest, "error", "errors")
            ));
        }
        lines.join("\n")
    }

    /// `file:line:col: field: message`, the plain-text form of one issue.
    pub fn locate(&self, issue: &Issue) -> String {
        let at = match issue.line_col {
            Some((l, c)) => format!("{}:{l}:{c}", self.file),
            None => self.file.clone(),
        };
        let help = issue
            .help
            .as_deref()
            .map(|h| format!(" ({h})"))
            .unwrap_or_default();
        format!("{at}: {}: {}{help}", issue.field, issue.message)
    }
}

/// Collects issues while checking one file.
#[derive(Debug)]
pub struct Collector<'a> {
    text: &'a str,
    pub issues: Vec<Issue>,
    /// The byte offset of each line's start, built on the first located issue: each issue then finds its
    /// line at once instead of counting lines from the top of the file (quadratic in a file with an error
    /// on every line).
    line_starts: std::sync::OnceLock<Vec<usize>>,
}

impl<'a> Collector<'a> {
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            issues: Vec::new(),
            line_starts: std::sync::OnceLock::new(),
        }
    }

    /// Records an error at `loc` (if known).
    pub fn error(
        &mut self,
        loc: Option<&Location>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> &mut Issue {
        self.push(Level::Error, loc, field.into(), message.into())
    }

    /// Records a warning at `loc` (if known).
    pub fn warn(
        &mut self,
        loc: Option<&Location>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> &mut Issue {
        self.push(Level::Warning, loc, field.into(), message.into())
    }

    fn push(
        &mut self,
        level: Level,
        loc: Option<&Location>,
        field: String,
        message: String,
    ) -> &mut Issue {
        let (span, line_col) = match loc.filter(|l| l.line() > 0) {
            Some(l) => (
                Some(span_at(self.text, self.line_starts(), l)),
                Some((l.line() as usize, l.column() as usize)),
            ),
            None => (None, None),
        };
        self.issues.push(Issue {
            level,
            field,
            message,
            help: None,
            span,
            line_col,
        });
        self.issues.last_mut().expect("just pushed")
    }

    pub fn has_errors(&self) -> bool {
        self.issues.iter().any(|i| i.level == Level::Error)
    }

    fn line_starts(&self) -> &[usize] {
        self.line_starts.get_or_init(|| line_starts(self.text))
    }
}

/// The byte offset at which each line of `text` starts.
fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

impl Issue {
    pub fn help(&mut self, help: impl Into<String>) -> &mut Self {
        self.help = Some(help.into());
        self
    }
}

/// The byte span of a location in `text`: from its line and column, as long as the token there.
pub fn span_of(text: &str, loc: &Location) -> SourceSpan {
    span_at(text, &line_starts(text), loc)
}

/// [`span_of`] with the line starts of `text` at hand.
fn span_at(text: &str, line_starts: &[usize], loc: &Location) -> SourceSpan {
    let start = match line_starts.get((loc.line() as usize).saturating_sub(1)) {
        Some(&line) => {
            line + text[line..]
                .chars()
                .take_while(|c| *c != '\n')
                .take((loc.column() as usize).saturating_sub(1))
                .map(char::len_utf8)
                .sum::<usize>()
        }
        None => text.len(),
    };
    // Long values are underlined only at their start: the snippet is for finding the spot.
    let chars = (loc.span().len() as usize).clamp(1, 60);
    let len: usize = text[start..]
        .chars()
        .take(chars)
        .take_while(|c| *c != '\n')
        .map(char::len_utf8)
        .sum();
    SourceSpan::new(
        start.into(),
        len.max(1).min(text.len().saturating_sub(start)),
    )
}

/// Byte offset of a 1-based line and column (columns count characters).
pub fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            let col: usize = l
                .chars()
                .take(column.saturating_sub(1))
                .map(char::len_utf8)
                .sum();
            return offset + col;
        }
        offset += l.len();
    }
    text.len()
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(
            suggest(
                "cluster-proxyy",
                ["cluster-proxy", "managed-serviceaccount"]
            ),
            Some("cluster-proxy")
        );
        assert_eq!(
            suggest("bindto", ["bindTo", "clusters", "name"]),
            Some("bindTo")
        );
        assert_eq!(suggest("zzz", ["cluster-proxy"]), None);
    }

    #[test]
    fn byte_offsets_count_characters_per_line() {
        let text = "a: 1\nbé: 2\n  c: 3\n";
        assert_eq!(byte_offset(text, 1, 1), 0);
        assert_eq!(byte_offset(text, 2, 4), 9, "é is two bytes");
        assert_eq!(&text[byte_offset(text, 3, 3)..][..1], "c");
    }
}
