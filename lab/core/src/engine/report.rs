//! The one task that owns the terminal: live progress (indicatif, one line per running step) or one JSON
//! object per event per line.
//!
//! People read what changed: a step that found nothing to do is counted in the summary line, not listed,
//! a step's notes (what it removed, what it kept) are on its line,
//! and the timing breakdown follows only a run that asked for it or a long one that changed something
//! ([`ShowTiming`]). Check results are not listed one by one
//! either: the verification table after the run shows every one, failures with their details. On a
//! terminal every line is cut to its width (`…`), so a long command never wraps over the live spinners.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::step::events::{Event, Outcome, Stamped};

/// How the reporter shows a run (the front maps its `--output` onto this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Live progress on stderr and a summary, for people.
    Human,
    /// One JSON object per event per line on stdout.
    Json,
}

/// When a person is told where the time went (the critical path and the slowest steps). The JSON stream
/// always carries the `timing` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShowTiming {
    /// Asked for (`--timing`): after every run.
    Always,
    /// After a run that changed something and took at least this long: a slow run says why.
    AfterMs(u64),
    /// Never.
    Never,
}

impl ShowTiming {
    /// Whether a run that took `total_ms` and changed `changed` steps shows it.
    pub fn shows(self, total_ms: u64, changed: usize) -> bool {
        match self {
            ShowTiming::Always => true,
            ShowTiming::AfterMs(at) => changed > 0 && total_ms >= at,
            ShowTiming::Never => false,
        }
    }
}

/// Consumes events until the channel closes. Returns every event seen, for the caller's summary.
pub async fn reporter(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Stamped>,
    style: Style,
    timing: ShowTiming,
) -> Vec<Stamped> {
    let mut seen = Vec::new();
    let mut human = (style == Style::Human).then(|| Human::new(timing));
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
    if let Some(mut h) = human {
        // Bars of steps that never reported an end (a run cut short by Ctrl-C) still tick on their own
        // thread and would redraw a stale spinner line after the run's last words: stop them first.
        for (_, bar) in h.bars.drain() {
            bar.finish_and_clear();
            h.multi.remove(&bar);
        }
        h.multi.clear().ok();
    }
    seen
}

/// What a person reads on stderr (when it is not a terminal) for these events: the lines the reporter writes
/// in [`Style::Human`], without the live progress.
pub fn human_text(events: &[Stamped], timing: ShowTiming) -> String {
    let mut human = Human::new(timing);
    human.tty = false;
    human.multi.set_draw_target(ProgressDrawTarget::hidden());
    human.captured = Some(std::cell::RefCell::new(String::new()));
    for e in events {
        human.show(e);
    }
    human.captured.take().unwrap_or_default().into_inner()
}

/// A failed step's line: how long it ran, the backend that failed when it was one, and the error.
fn failed_line(
    step: &str,
    elapsed_ms: u64,
    backend: Option<crate::backend::Backend>,
    error: &str,
) -> String {
    let by = backend
        .map(|b| format!(" ({})", b.human()))
        .unwrap_or_default();
    format!(
        "  ✗ {step} failed after {}{by}: {error}",
        fmt_ms(elapsed_ms)
    )
}

struct Human {
    multi: MultiProgress,
    bars: HashMap<String, ProgressBar>,
    /// The notes of each running step: what it did, shown on its line.
    notes: HashMap<String, Vec<String>>,
    /// Steps of this run that changed something.
    changed: usize,
    /// The run is on the simulated lab: said again on its last line, where a person looks last.
    simulated: bool,
    tty: bool,
    timing: ShowTiming,
    /// Lines kept here instead of written ([`human_text`]).
    captured: Option<std::cell::RefCell<String>>,
}

impl Human {
    fn new(timing: ShowTiming) -> Self {
        let tty = std::io::stderr().is_terminal();
        let target = if tty {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Human {
            multi: MultiProgress::with_draw_target(target),
            bars: HashMap::new(),
            simulated: false,
            notes: HashMap::new(),
            changed: 0,
            tty,
            timing,
            captured: None,
        }
    }

    /// A finished line: above the live bars on a terminal, plain on stderr otherwise.
    fn line(&self, text: String) {
        if let Some(captured) = &self.captured {
            let mut captured = captured.borrow_mut();
            captured.push_str(&text);
            captured.push('\n');
        } else if self.tty {
            let width = console::Term::stderr().size().1;
            let _ = self.multi.println(fit(&text, width.into()));
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
            } => {
                self.simulated = *simulated;
                let sim = if *simulated {
                    " on the SIMULATED lab (a test double, not real clusters)"
                } else {
                    ""
                };
                let steps = crate::text::count(*steps, "step", "steps");
                self.line(format!("ocm-lab {workflow}: lab `{lab}`, {steps}{sim}"));
            }
            Event::StepStarted {
                step,
                uses,
                attempt,
            } => self.step_started(step, uses, *attempt),
            Event::StepProgress { step, message } => {
                if let Some(b) = self.bars.get(step) {
                    b.set_message(message.clone());
                }
            }
            Event::StepNote { step, message } => {
                self.notes
                    .entry(step.clone())
                    .or_default()
                    .push(message.clone());
            }
            Event::StepRetrying {
                step,
                attempt,
                error,
                backoff_ms,
            } => {
                self.finish_bar(step);
                self.notes.remove(step);
                self.line(format!(
                    "  ↻ {step}: attempt {attempt} failed: {error}; retrying in {}",
                    fmt_ms(*backoff_ms)
                ));
            }
            Event::StepFinished {
                step,
                outcome,
                elapsed_ms,
            } => self.step_finished(step, *outcome, *elapsed_ms),
            Event::StepFailed {
                step,
                error,
                help,
                elapsed_ms,
                backend,
            } => {
                self.finish_bar(step);
                self.line(failed_line(step, *elapsed_ms, *backend, error));
                if let Some(h) = help {
                    self.line(format!("    help: {h}"));
                }
            }
            Event::StepCancelled { step } => {
                self.finish_bar(step);
                self.line(format!("  ⊘ {step} cancelled"));
            }
            // Listed once, in the verification table printed after the run.
            Event::Result { .. } => {}
            // Where the time went, when asked, or after a long run that did something; a quick run, or
            // one that changed nothing, is described by its summary line.
            Event::Timing { total_ms, .. } if !self.timing.shows(*total_ms, self.changed) => {}
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
                failed,
                cancelled,
            } => {
                let verdict = match (ok, failed, cancelled) {
                    (true, _, _) => "done".to_owned(),
                    (false, _, true) => "cancelled".to_owned(),
                    (false, Some(f), _) => format!("FAILED at {f}"),
                    (false, None, false) => "FAILED".to_owned(),
                };
                self.run_finished(&verdict, *elapsed_ms, *changed, *unchanged);
            }
        }
    }

    /// The run's summary line.
    fn run_finished(&mut self, verdict: &str, elapsed_ms: u64, changed: usize, unchanged: usize) {
        let sim = if self.simulated {
            " (SIMULATED lab)"
        } else {
            ""
        };
        self.line(format!(
            "{verdict} in {}: {changed} changed, {unchanged} unchanged{sim}",
            fmt_ms(elapsed_ms),
        ));
    }

    /// A step's spinner, with its action (and attempt, on a retry).
    fn step_started(&mut self, step: &str, uses: &str, attempt: u32) {
        let bar = self.multi.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("  {spinner} {prefix} {wide_msg} {elapsed}")
                .expect("valid template"),
        );
        bar.set_prefix(step.to_owned());
        bar.set_message(if attempt > 1 {
            format!("{uses} (attempt {attempt})")
        } else {
            uses.to_owned()
        });
        bar.enable_steady_tick(Duration::from_millis(120));
        self.bars.insert(step.to_owned(), bar);
    }

    /// A finished step's line: listed when it changed something or has notes.
    fn step_finished(&mut self, step: &str, outcome: Outcome, elapsed_ms: u64) {
        self.finish_bar(step);
        let notes = self.notes.remove(step).unwrap_or_default();
        let what = if notes.is_empty() {
            String::new()
        } else {
            format!(": {}", notes.join("; "))
        };
        // Unchanged steps are counted in the summary line, not listed, unless they
        // have something to say (a network kept because it is in use).
        if outcome == Outcome::Changed {
            self.changed += 1;
        }
        if outcome == Outcome::Changed || !notes.is_empty() {
            self.line(format!("  ✓ {step}{what} {}", fmt_ms(elapsed_ms)));
        }
    }

    /// Ends a step's spinner. Its notes stay until it finishes (a retried step's notes start over).
    fn finish_bar(&mut self, step: &str) {
        if let Some(b) = self.bars.remove(step) {
            b.finish_and_clear();
            self.multi.remove(&b);
        }
    }
}

use crate::step::timing::fmt_ms;

/// `text` cut to `width` terminal columns, with `…` where it was cut (0: unknown width, left whole).
fn fit(text: &str, width: usize) -> std::borrow::Cow<'_, str> {
    if width == 0 {
        return text.into();
    }
    console::truncate_str(text, width, "…")
}

#[cfg(test)]
mod tests {
    use super::{ShowTiming, fit};

    #[test]
    fn the_timing_breakdown_follows_a_run_that_asked_or_took_long() {
        assert!(ShowTiming::Always.shows(40, 0));
        let long = ShowTiming::AfterMs(300_000);
        assert!(
            !long.shows(53, 12),
            "a quick run: its summary line says enough"
        );
        assert!(long.shows(300_000, 12));
        assert!(!long.shows(900_000, 0), "a long run that changed nothing");
        assert!(!ShowTiming::Never.shows(900_000, 12));
    }

    #[test]
    fn long_lines_are_cut_to_the_terminal_width_not_wrapped() {
        let kind = "  ✓ create[hub]: kind create cluster --name hub --image kindest/node:v1.36.1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef 41s";
        let cut = fit(kind, 80);
        assert_eq!(console::measure_text_width(&cut), 80, "{cut}");
        assert!(cut.ends_with('…') && cut.starts_with("  ✓ create[hub]: kind create cluster"));
        assert_eq!(fit("  ✓ network 3ms", 80), "  ✓ network 3ms");
        assert_eq!(fit(kind, 0), kind, "unknown width: whole");
        // Wide characters count as two columns and are never split.
        assert_eq!(console::measure_text_width(&fit("日本語のテキスト", 7)), 7);
    }
}
