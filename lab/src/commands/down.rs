//! `ocm-lab down`: deletes the lab's clusters and contexts, and nothing else (only what the ownership
//! record proves the lab created; a damaged record is read around, never trusted for more). Under the lab
//! lock, the `down` workflow; when it succeeds the lab's journal, simulated world, ownership record and last
//! verification are forgotten. A simulated lab whose saved world is damaged is torn down as empty.

use super::runner::{Workflow, run_workflows};
use crate::cli::{DownArgs, RunArgs};
use crate::error::Error;

pub fn run(args: &DownArgs, host: &crate::topology::Host) -> Result<(), Error> {
    run_workflows(&RunArgs::from(args), args.output, &[Workflow::Down], host)
}
