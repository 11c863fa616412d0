//! Where a run's time went: each step's start and end, and the critical path (the chain of steps the
//! total waited on). Computed from the step graph and the times the engine saw, so it says the same
//! thing for a real lab (wall time) and the simulated lab (Tokio's clock, virtual time in benchmarks).

use serde::Serialize;

use crate::workflow::Plan;

/// One step instance that ran in this run (steps carried over from an interrupted run are left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepTime {
    pub step: String,
    /// Milliseconds since the run started: when the step began its first attempt.
    pub start_ms: u64,
    /// When the step ended.
    pub end_ms: u64,
    /// How long the step was ready (its needs done) but had not started: waiting for a free slot.
    #[serde(skip_serializing_if = "is_zero")]
    pub queued_ms: u64,
}

impl StepTime {
    pub fn elapsed_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The timing summary of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timing {
    /// Every step that ran, slowest first.
    pub steps: Vec<StepTime>,
    /// The chain of steps the run's end waited on, first step first: each one's end released the next
    /// (the latest-ending of its needs). Its durations plus the gaps between them make up the total.
    pub critical_path: Vec<StepTime>,
}

/// Builds the summary from the engine's record: `times[i]` is `Some((start, end))` for plan step `i` if it
/// ran to the end in this run.
pub fn summarize(plan: &Plan, times: &[Option<(u64, u64)>]) -> Timing {
    let index: std::collections::HashMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // When each step became ready: the end of its latest need that ran in this run (the run's start for
    // a root). Every such need is a candidate, one that ended in the run's first millisecond (end 0) too:
    // the path walks back through needs only, so it always starts at a root or at a step whose needs
    // were carried over from an interrupted run.
    let ready_at = |i: usize| -> (u64, Option<usize>) {
        plan.steps[i]
            .needs
            .iter()
            .filter_map(|n| index.get(n.as_str()).copied())
            .filter_map(|n| times[n].map(|(_, end)| (end, n)))
            // ties go to the need listed first, so the path is stable
            .fold(None::<(u64, usize)>, |best, cur| match best {
                Some(b) if b.0 >= cur.0 => Some(b),
                _ => Some(cur),
            })
            .map_or((0, None), |(end, n)| (end, Some(n)))
    };
    let time = |i: usize| {
        let (start, end) = times[i].expect("ran");
        StepTime {
            step: plan.steps[i].id.clone(),
            start_ms: start,
            end_ms: end,
            queued_ms: start.saturating_sub(ready_at(i).0),
        }
    };
    let ran: Vec<usize> = (0..plan.steps.len())
        .filter(|i| times[*i].is_some())
        .collect();
    let mut steps: Vec<StepTime> = ran.iter().map(|&i| time(i)).collect();
    steps.sort_by(|a, b| {
        b.elapsed_ms()
            .cmp(&a.elapsed_ms())
            .then(a.start_ms.cmp(&b.start_ms))
    });
    // The path ends at the step that ended last and walks back through the need that released each step.
    // Ends are whole milliseconds, so a step and the need it waited on can end in the same one: a tie goes
    // to the last in plan order, which puts every step after its needs (the final `verify`, not `prune`).
    let mut path = Vec::new();
    let last = ran
        .iter()
        .copied()
        .fold(None::<usize>, |best, i| match best {
            Some(b) if times[b].expect("ran").1 > times[i].expect("ran").1 => Some(b),
            _ => Some(i),
        });
    let mut at = last;
    while let Some(i) = at {
        path.push(time(i));
        at = ready_at(i).1;
    }
    path.reverse();
    Timing {
        steps,
        critical_path: path,
    }
}

/// The summary as text lines for a terminal: the critical path, then the slowest steps off it.
pub fn lines(t: &Timing, total_ms: u64) -> Vec<String> {
    let mut out = Vec::new();
    if t.steps.is_empty() {
        return out;
    }
    out.push(format!(
        "where the time went ({} in all): the critical path",
        fmt_ms(total_ms)
    ));
    for s in &t.critical_path {
        // Below half a second the gap is the engine's own bookkeeping, not a wait worth a word.
        let queued = if s.queued_ms >= 500 {
            format!(" (waited {} for a free slot)", fmt_ms(s.queued_ms))
        } else {
            String::new()
        };
        out.push(format!(
            "  {:>8}  {:>8} → {:<8} {}{queued}",
            fmt_ms(s.elapsed_ms()),
            fmt_ms(s.start_ms),
            fmt_ms(s.end_ms),
            s.step
        ));
    }
    let off: Vec<&StepTime> = t
        .steps
        .iter()
        .filter(|s| !t.critical_path.iter().any(|p| p.step == s.step))
        .take(5)
        .collect();
    if !off.is_empty() {
        out.push("slowest steps off the critical path:".to_owned());
        for s in off {
            out.push(format!("  {:>8}  {}", fmt_ms(s.elapsed_ms()), s.step));
        }
    }
    out
}

pub(crate) fn fmt_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::PlannedStep;

    fn step(id: &str, needs: &[&str]) -> std::sync::Arc<PlannedStep> {
        std::sync::Arc::new(PlannedStep {
            id: id.into(),
            step: id.into(),
            item: None,
            uses: "test".into(),
            description: None,
            with: Default::default(),
            needs: needs.iter().map(|n| (*n).to_owned()).collect(),
            timeout: std::time::Duration::from_secs(60),
            retry: Default::default(),
            objects: Default::default(),
            chart: None,
        })
    }

    fn plan(steps: Vec<std::sync::Arc<PlannedStep>>) -> Plan {
        Plan {
            workflow: "up".into(),
            lab: "t".into(),
            steps,
        }
    }

    /// The steps of the critical path, in order.
    fn path(t: &Timing) -> Vec<&str> {
        t.critical_path.iter().map(|s| s.step.as_str()).collect()
    }

    /// A diamond with a long and a short branch, and a side branch that ends early:
    ///
    /// ```text
    /// create-hub 0–60 ─┬─ hub-ocm 60–120 ───────┬─ join 130–150 ─ verify 150–155
    /// create-spoke 0–70 ─ klusterlet 70–130 ──────┘
    /// docs 0–3
    /// ```
    #[test]
    fn the_critical_path_follows_the_need_that_released_each_step() {
        let plan = plan(vec![
            step("create-hub", &[]),
            step("create-spoke", &[]),
            step("docs", &[]),
            step("hub-ocm", &["create-hub"]),
            step("klusterlet", &["create-spoke"]),
            step("join", &["hub-ocm", "klusterlet"]),
            step("verify", &["join"]),
        ]);
        let times = vec![
            Some((0, 60_000)),
            Some((0, 70_000)),
            Some((0, 3_000)),
            Some((60_000, 120_000)),
            Some((70_000, 130_000)),
            Some((130_000, 150_000)),
            Some((150_000, 155_000)),
        ];
        let t = summarize(&plan, &times);
        assert_eq!(path(&t), ["create-spoke", "klusterlet", "join", "verify"]);
        assert_eq!(t.steps[0].step, "create-spoke"); // 70 s, the slowest
        assert_eq!(t.steps.last().unwrap().step, "docs");
        assert!(t.steps.iter().all(|s| s.queued_ms == 0));
        let text = lines(&t, 155_000).join("\n");
        assert!(text.contains("155.0s in all"), "{text}");
        assert!(
            text.contains("slowest steps off the critical path:\n     60.0s  create-hub"),
            "{text}"
        );
    }

    /// The `up` graph's shape with a tie, a latest need listed last, and a step ready before it started;
    /// the path must pick each step's latest need by time, not by its place in `needs`:
    ///
    /// ```text
    /// create-spoke 0–90 ─ klusterlet 90–150 ──────────────┐
    /// create-hub 0–60 ─ hub-manager 60–70 ─ hub-ready 70–150 ┴ join 150–151 ─┬─ addon 160–220 ─ verify 220–221
    ///                   hub-manager ─ sets 70–71 ───────────────────────────┘ (addon waited 9 s for a slot)
    /// ```
    #[test]
    fn the_critical_path_is_chosen_by_end_time_and_its_parts_add_up_to_the_total() {
        let plan = plan(vec![
            step("create-hub", &[]),
            step("create-spoke", &[]),
            step("hub-manager", &["create-hub"]),
            step("hub-ready", &["hub-manager"]),
            step("klusterlet", &["create-spoke"]),
            step("sets", &["hub-manager"]),
            // klusterlet and hub-ready both end at 150: a tie goes to the need listed first.
            step("join", &["klusterlet", "hub-ready"]),
            // join (151) is the latest need, listed after sets (71).
            step("addon", &["sets", "join"]),
            step("verify", &["addon"]),
        ]);
        let times = vec![
            Some((0, 60_000)),
            Some((0, 90_000)),
            Some((60_000, 70_000)),
            Some((70_000, 150_000)),
            Some((90_000, 150_000)),
            Some((70_000, 71_000)),
            Some((150_000, 151_000)),
            Some((160_000, 220_000)),
            Some((220_000, 221_000)),
        ];
        let t = summarize(&plan, &times);
        let path: Vec<(&str, u64)> = t
            .critical_path
            .iter()
            .map(|s| (s.step.as_str(), s.queued_ms))
            .collect();
        assert_eq!(
            path,
            [
                ("create-spoke", 0),
                ("klusterlet", 0),
                ("join", 0),
                ("addon", 9_000),
                ("verify", 0)
            ]
        );
        // Every millisecond of the total is on the path: its steps' durations plus their waits for a slot.
        let sum: u64 = t
            .critical_path
            .iter()
            .map(|s| s.elapsed_ms() + s.queued_ms)
            .sum();
        assert_eq!(sum, 221_000);
        let text = lines(&t, 221_000).join("\n");
        assert!(text.contains("(waited 9.0s for a free slot)"), "{text}");
    }

    #[test]
    fn a_step_that_waited_for_a_slot_shows_its_queue_time_and_skipped_steps_are_left_out() {
        let plan = plan(vec![step("a", &[]), step("b", &[]), step("c", &["a", "b"])]);
        // `b` did not run to its end in this run (no times); `c` started 3 s after `a` ended.
        let times = vec![Some((0, 10_000)), None, Some((13_000, 14_000))];
        let t = summarize(&plan, &times);
        let path: Vec<(&str, u64)> = t
            .critical_path
            .iter()
            .map(|s| (s.step.as_str(), s.queued_ms))
            .collect();
        assert_eq!(path, [("a", 0), ("c", 3_000)]);
        assert_eq!(t.steps.len(), 2);
    }

    /// Times are whole milliseconds since the run started, so a quick first step ends at 0 (as `preflight`
    /// does on a fast machine); it still released the steps that need it and heads the path.
    #[test]
    fn a_need_that_ended_in_the_first_millisecond_is_still_on_the_path() {
        let plan = plan(vec![
            step("preflight", &[]),
            step("network", &["preflight"]),
            step("create", &["network", "preflight"]),
        ]);
        let times = vec![Some((0, 0)), Some((0, 0)), Some((0, 5))];
        let t = summarize(&plan, &times);
        assert_eq!(path(&t), ["preflight", "network", "create"]);
    }

    /// A last step quicker than a millisecond ends in the same one as the need it waited on: the path ends
    /// at the step that waited, not at its need.
    #[test]
    fn the_step_that_ended_last_is_the_one_that_waited_when_ends_tie() {
        let plan = plan(vec![
            step("create", &[]),
            step("prune", &["create"]),
            step("verify", &["prune", "create"]),
        ]);
        let times = vec![Some((0, 40)), Some((40, 52)), Some((52, 52))];
        let t = summarize(&plan, &times);
        assert_eq!(path(&t), ["create", "prune", "verify"]);
    }

    #[test]
    fn no_steps_run_means_no_summary() {
        let plan = plan(vec![step("a", &[])]);
        let t = summarize(&plan, &[None]);
        assert!(t.critical_path.is_empty());
        assert!(lines(&t, 0).is_empty());
    }
}
