//! `ocm-lab up`: brings the lab up and verifies it. On a real lab the doctor's checks run first (a lab never
//! starts half-way on a machine that cannot finish it); then, under the lab lock, the `up` workflow runs:
//! clusters, OCM, addons, and the verification, whose table is printed (and written as `--junit`). It may
//! download kind and helm unless `--no-download`. Running it again changes nothing; after a failure or
//! Ctrl-C it runs every step again, and each finds what is already done. With `--bundle`, the bundle is checked against the topology and its
//! images loaded into Docker before anything else (`commands/bundle.rs`).

use super::runner::{Workflow, run_workflows};
use crate::cli::{RunArgs, UpArgs};
use crate::error::Error;

pub fn run(args: &UpArgs, host: &crate::topology::Host) -> Result<(), Error> {
    let mut run = RunArgs::from(args);
    let preloaded =
        super::bundle::preload(&args.lab, host, args.sim.simulate, args.bundle.as_deref())?;
    run.bundled_tools = preloaded.tools;
    run.image_aliases = preloaded.image_aliases;
    run_workflows(&run, args.output, &[Workflow::Up], host)
}
