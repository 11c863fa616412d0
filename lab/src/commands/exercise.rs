//! `ocm-lab exercise`: workshop exercises. `list` reads the exercise files only; `start` and `stop` take the
//! lab lock, break or heal through the lab's cluster APIs (recorded in the state folder, see
//! `exercise::run`) and save the simulated world; `check` runs the `verify` workflow and judges its
//! saved report against the running exercise's hop.

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::runner::{self, Purpose, Workflow};
use super::{document, stdout};
use crate::cli::{
    ExerciseCheckArgs, ExerciseCommand, ExerciseListArgs, ExerciseStartArgs, ExerciseStopArgs,
    LabArgs, RunArgs, SimArgs, StreamOutput,
};
use crate::error::Error;
use crate::exercise::run::{self as ex_run, Running, Verdict};
use crate::exercise::{self, Exercise};
use crate::state::StateDir;
use crate::step::RunCtx;
use crate::step::events::Events;
use crate::topology::{Host, Lab};
use crate::verify::report::LastVerification;

pub fn run(command: &ExerciseCommand, host: &Host) -> Result<(), Error> {
    match command {
        ExerciseCommand::List(a) => list(a),
        ExerciseCommand::Start(a) => start(a, host),
        ExerciseCommand::Check(a) => check(a, host),
        ExerciseCommand::Stop(a) => stop(a, host),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary<'a> {
    name: &'a str,
    title: &'a str,
    hop: String,
    learn: &'a str,
    hints: usize,
}

fn list(a: &ExerciseListArgs) -> Result<(), Error> {
    let all = exercise::load_all(a.dir.exercises.as_deref())?;
    let rows: Vec<Summary<'_>> = all
        .iter()
        .map(|e| Summary {
            name: &e.name,
            title: &e.title,
            hop: e.hop.name(),
            learn: &e.learn,
            hints: e.hints.len(),
        })
        .collect();
    document(a.output.output, &rows, || {
        let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let h = rows.iter().map(|r| r.hop.len()).max().unwrap_or(0);
        let mut out = format!("{:w$}  {:h$}  TITLE\n", "NAME", "HOP");
        for r in &rows {
            out.push_str(&format!("{:w$}  {:h$}  {}\n", r.name, r.hop, r.title));
        }
        out.push_str("\nStart one with `ocm-lab exercise start NAME`.\n");
        out
    })
}

/// What an exercise command works on: the lab, its state folder, the run's arguments.
struct Target {
    lab: Lab,
    state: StateDir,
    run: RunArgs,
    patches: crate::patch::PatchSet,
}

fn target(lab_args: &LabArgs, host: &Host, sim: SimArgs) -> Result<Target, Error> {
    let (loaded, _, patches) = super::inputs(lab_args, host)?;
    super::warn(&loaded);
    let run = RunArgs::from((lab_args, sim));
    let lab = loaded.lab;
    let state = StateDir::for_run(&lab.name, run.simulate)?;
    runner::ensure_up(&lab, &state, &run)?;
    Ok(Target {
        lab,
        state,
        run,
        patches,
    })
}

/// Runs `f` against the lab under its lock, and saves the simulated world afterwards (also when `f` failed:
/// what it changed is recorded and happened).
fn with_lab<T>(
    t: &Target,
    command: &str,
    f: impl AsyncFnOnce(&RunCtx) -> Result<T, ex_run::RunError>,
) -> Result<T, Error> {
    let _lock = t.state.lock(&t.lab.name, command)?;
    let rt = runner::runtime()?;
    let opened = runner::open_backends(
        &rt,
        &t.run,
        &t.state,
        Purpose::Run(Workflow::Verify),
        &t.lab,
    )?;
    let (events, _rx) = Events::channel();
    let ctx = RunCtx::new(
        t.lab.clone(),
        opened.backends.clone(),
        t.state.clone(),
        t.patches.clone(),
        events,
        CancellationToken::new(),
    );
    let result = rt.block_on(f(&ctx));
    drop(ctx);
    opened.save(&t.state)?;
    rt.shutdown_background();
    Ok(result?)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Started<'a> {
    #[serde(flatten)]
    running: &'a Running,
    task: String,
    learn: &'a str,
    simulated: bool,
}

fn start(a: &ExerciseStartArgs, host: &Host) -> Result<(), Error> {
    let all = exercise::load_all(a.dir.exercises.as_deref())?;
    let ex = exercise::find(&all, &a.name)?;
    let t = target(&(&a.lab).into(), host, a.sim)?;
    // Rendered first: an exercise this lab cannot run fails before anything is touched.
    ex.steps(&t.lab)?;
    let running = with_lab(&t, "exercise start", async |ctx| {
        ex_run::start(ctx, ex).await
    })?;
    let doc = Started {
        running: &running,
        task: ex.task_for(&t.lab),
        learn: &ex.learn,
        simulated: t.run.simulate,
    };
    document(a.output.output, &doc, || {
        format!(
            "Exercise `{}` started{}: {}\n\n{}\n\nWhen you think it is fixed: `{}`. Stuck? `{} --hint`.\n",
            running.name,
            if t.run.simulate {
                " on the SIMULATED lab"
            } else {
                ""
            },
            running.title,
            doc.task,
            t.run.command_line("exercise check"),
            t.run.command_line("exercise check"),
        )
    })
}

fn stop(a: &ExerciseStopArgs, host: &Host) -> Result<(), Error> {
    let t = target(&(&a.lab).into(), host, a.sim)?;
    let healed = with_lab(&t, "exercise stop", async |ctx| ex_run::stop(ctx).await)?
        .ok_or(ex_run::RunError::NotRunning)?;
    document(a.output.output, &healed, || {
        format!(
            "Exercise `{}` stopped: what it changed is back as it was.\n",
            healed.name
        )
    })
}

/// Heals the running exercise, if any, before `reset` (whose own steps restore only what the topology
/// declares, and keep what the participants labelled).
pub fn heal_before_reset(
    lab_args: &LabArgs,
    host: &Host,
    sim: SimArgs,
) -> Result<Option<Running>, Error> {
    let (loaded, _, patches) = super::inputs(lab_args, host)?;
    let run = RunArgs::from((lab_args, sim));
    let state = StateDir::for_run(&loaded.lab.name, run.simulate)?;
    if ex_run::running(&state)?.is_none() {
        return Ok(None);
    }
    let t = Target {
        lab: loaded.lab,
        state,
        run,
        patches,
    };
    with_lab(&t, "reset", async |ctx| ex_run::stop(ctx).await)
}

/// The verdict line `check -o json` ends with.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Checked<'a> {
    event: &'static str,
    exercise: &'a str,
    expected_hop: String,
    solved: bool,
    #[serde(flatten)]
    verdict: &'a Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'a str>,
    hints_shown: usize,
    hints: usize,
}

fn check(a: &ExerciseCheckArgs, host: &Host) -> Result<(), Error> {
    let mut t = target(&(&a.lab).into(), host, a.sim)?;
    t.run.verify_timeout = Some(a.timeout);
    let (running, mut record) = ex_run::running(&t.state)?.ok_or(ex_run::RunError::NotRunning)?;
    let all = exercise::load_all(a.dir.exercises.as_deref())?;
    let ex: Option<&Exercise> = all.iter().find(|e| e.name == running.name);
    let last = |s: &StateDir| -> Result<Option<String>, Error> {
        Ok(s.last_verification_report::<LastVerification>()?
            .map(|r| r.run))
    };
    let before = last(&t.state)?;
    let verified = runner::run_workflows(&t.run, a.output, &[Workflow::Verify], host);
    let report = t.state.last_verification_report::<LastVerification>()?;
    let results = match report {
        Some(r) if Some(&r.run) != before.as_ref() => r.results,
        // Verification did not get as far as checking: its own error says why.
        _ => return verified,
    };
    let verdict = ex_run::judge(running.hop, &results);
    let solved = verdict == Verdict::Solved;
    let hints = ex.map_or(&[][..], |e| e.hints.as_slice());
    let hint = (a.hint && !solved && !hints.is_empty()).then(|| {
        let i = record.hints_shown.min(hints.len() - 1);
        record.hints_shown = (i + 1).max(record.hints_shown);
        (i, render_hint(ex, &t.lab, &hints[i]))
    });
    if hint.is_some() {
        ex_run::save_record(&t.state, &record)?;
    }
    let doc = Checked {
        event: "exercise-checked",
        exercise: &running.name,
        expected_hop: running.hop.name(),
        solved,
        verdict: &verdict,
        hint: hint.as_ref().map(|(_, h)| h.as_str()),
        hints_shown: record.hints_shown,
        hints: hints.len(),
    };
    let text = match a.output {
        StreamOutput::Json => format!(
            "{}\n",
            serde_json::to_string(&doc).expect("verdicts serialize")
        ),
        StreamOutput::Human => {
            human_verdict(&t.run, &running, &verdict, hint.as_ref(), hints.len())
        }
    };
    stdout(&text)?;
    if solved {
        Ok(())
    } else {
        Err(Error::ExerciseUnsolved {
            exercise: running.name.clone(),
            help: t.run.command_line("exercise check --hint"),
        })
    }
}

fn render_hint(ex: Option<&Exercise>, lab: &Lab, hint: &str) -> String {
    ex.map_or_else(|| hint.to_owned(), |e| e.render_text(lab, hint))
}

fn human_verdict(
    run: &RunArgs,
    running: &Running,
    verdict: &Verdict,
    hint: Option<&(usize, String)>,
    hints: usize,
) -> String {
    let mut out = match verdict {
        Verdict::Solved => format!(
            "\n✔ Solved: {}. `{}` ends the exercise.\n",
            running.title,
            run.command_line("exercise stop")
        ),
        Verdict::Broken {
            hop,
            check,
            spoke,
            namespace,
            ..
        } => format!(
            "\n✘ Not solved yet: verify names hop `{}` ({check} of {spoke} in {namespace}).\n",
            hop.map_or_else(|| "?".to_owned(), |h| h.name()),
        ),
    };
    if let Some((i, h)) = hint {
        out.push_str(&format!("Hint {} of {hints}: {h}\n", i + 1));
    }
    out
}
