//! The one task that owns the terminal: live progress (indicatif, one line per running step) or one JSON
//! object per event per line.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::step::events::{Event, Outcome, ResultStatus, Stamped};

/// How the reporter shows a run (the front maps its `--output` onto this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Live progress on stderr and a summary, for people.
    Human,
    /// One JSON object per event per line on stdout.
    Json,
}

/// Consumes events until the channel closes. Returns every event seen, for the caller's summary.
pub async fn reporter(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Stamped>,
    style: Style,
) -> Vec<Stamped> {
    let mut seen = Vec::new();
    let mut human = (style == Style::Human).then(Human::new);
    while let Some(e) = rx.recv().await {
        match &mut human {
            Some(h) => h.show(&e),
            None => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string(&e).expect("events serialize")
                );
            }
        }
        seen.push(e);
    }
    if let Some(h) = human {
        h.multi.clear().ok();
    }
    seen
}

struct Human {
    multi: MultiProgress,
    bars: HashMap<String, ProgressBar>,
    tty: bool,
}

impl Human {
    fn new() -> Self {
        let tty = std::io::stderr().is_terminal();
        let target = if tty {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Human {
            multi: MultiProgress::with_draw_target(target),
            bars: HashMap::new(),
            tty,
        }
    }

    /// A finished line: above the live bars on a terminal, plain on stderr otherwise.
    fn line(&self, text: String) {
        if self.tty {
            let _ = self.multi.println(text);
        } else {
            let _ = writeln!(std::io::stderr(), "{text}");
        }
    }

    fn show(&mut self, e: &Stamped) {
        match &e.event {
            Event::RunStarted {
                lab,
                workflow,
                steps,
                simulated,
                resumed,
            } => {
                let sim = if *simulated {
                    " on the SIMULATED lab (a test double, not real clusters)"
                } else {
                    ""
                };
                let resumed = if *resumed > 0 {
                    format!(", resuming: {resumed} already done")
                } else {
                    String::new()
                };
                let steps = crate::text::count(*steps, "step", "steps");
                self.line(format!(
                    "ocm-lab {workflow}: lab `{lab}`, {steps}{sim}{resumed}"
                ));
            }
            Event::StepStarted {
                step,
                uses,
                attempt,
            } => {
                let bar = self.multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix} {wide_msg} {elapsed}")
                        .expect("valid template"),
                );
                bar.set_prefix(step.clone());
                bar.set_message(if *attempt > 1 {
                    format!("{uses} (attempt {attempt})")
                } else {
                    uses.clone()
                });
                bar.enable_steady_tick(Duration::from_millis(120));
                self.bars.insert(step.clone(), bar);
            }
            Event::StepProgress { step, message } => {
                if let Some(b) = self.bars.get(step) {
                    b.set_message(message.clone());
                }
            }
            Event::StepRetrying {
                step,
                attempt,
                error,
                backoff_ms,
            } => {
                self.finish_bar(step);
                self.line(format!(
                    "  ↻ {step}: attempt {attempt} failed: {error}; retrying in {}",
                    fmt_ms(*backoff_ms)
                ));
            }
            Event::StepFinished {
                step,
                outcome,
                elapsed_ms,
            } => {
                self.finish_bar(step);
                let what = match outcome {
                    Outcome::Changed => "",
                    Outcome::Unchanged => " (unchanged)",
                    Outcome::Resumed => " (done in an earlier run)",
                };
                if *outcome != Outcome::Resumed {
                    self.line(format!("  ✓ {step}{what} {}", fmt_ms(*elapsed_ms)));
                }
            }
            Event::StepFailed {
                step,
                error,
                help,
                elapsed_ms,
            } => {
                self.finish_bar(step);
                self.line(format!(
                    "  ✗ {step} failed after {}: {error}",
                    fmt_ms(*elapsed_ms)
                ));
                if let Some(h) = help {
                    self.line(format!("    help: {h}"));
                }
            }
            Event::StepCancelled { step } => {
                self.finish_bar(step);
                self.line(format!("  ⊘ {step} cancelled"));
            }
            Event::Result {
                check,
                subject,
                status,
                detail,
                hop,
                permanent,
            } => {
                let mark = match status {
                    ResultStatus::Pass => "✓",
                    ResultStatus::Fail => "✗",
                    ResultStatus::Skip => "-",
                };
                let hop = hop.as_ref().map(|h| format!("[{h}] ")).unwrap_or_default();
                let permanent = if *permanent {
                    " (permanent: not waited for)"
                } else {
                    ""
                };
                self.line(format!(
                    "  {mark} {check:<17} {subject:<32} {hop}{detail}{permanent}"
                ));
            }
            Event::Timing { timing, total_ms } => {
                for l in crate::step::timing::lines(timing, *total_ms) {
                    self.line(l);
                }
            }
            Event::RunFinished {
                ok,
                elapsed_ms,
                changed,
                unchanged,
                resumed,
                failed,
                cancelled,
            } => {
                let verdict = match (ok, failed, cancelled) {
                    (true, _, _) => "done".to_owned(),
                    (false, _, true) => "cancelled".to_owned(),
                    (false, Some(f), _) => format!("FAILED at {f}"),
                    (false, None, false) => "FAILED".to_owned(),
                };
                self.line(format!(
                    "{verdict} in {}: {changed} changed, {unchanged} unchanged{}",
                    fmt_ms(*elapsed_ms),
                    if *resumed > 0 {
                        format!(", {resumed} done earlier")
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }

    fn finish_bar(&mut self, step: &str) {
        if let Some(b) = self.bars.remove(step) {
            b.finish_and_clear();
            self.multi.remove(&b);
        }
    }
}

use crate::step::timing::fmt_ms;
