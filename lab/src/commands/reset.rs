//! `ocm-lab reset`: brings a used lab back to its just-up state without re-creating clusters. It needs a
//! lab that is up. On a real lab the doctor's checks run first: a reset that could not finish its `up` does
//! not start deleting either. Then, under one lock, the `reset` workflow removes what participants added,
//! and the `up` workflow restores what they changed and verifies. One lock over both, so no other command
//! can take the lab between the prune and the `up`. `--bundle` is checked and loaded first, as for `up`.

use super::runner::{Workflow, run_workflows};
use crate::cli::{RunArgs, UpArgs};
use crate::error::Error;

pub fn run(args: &UpArgs, host: &crate::topology::Host) -> Result<(), Error> {
    let mut run = RunArgs::from(args);
    let preloaded =
        super::bundle::preload(&args.lab, host, args.sim.simulate, args.bundle.as_deref())?;
    run.bundled_tools = preloaded.tools;
    run.image_aliases = preloaded.image_aliases;
    // A running exercise is healed first, exactly as `exercise stop` heals it: what it changed need not be
    // anything the topology declares (a label a participant's `up` would keep).
    if let Some(healed) = super::exercise::heal_before_reset(&args.lab, host, args.sim)? {
        tracing::info!("healed exercise `{}` before the reset", healed.name);
    }
    run_workflows(&run, args.output, &[Workflow::Reset, Workflow::Up], host)
}
