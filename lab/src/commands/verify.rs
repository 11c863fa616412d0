//! `ocm-lab verify`: proves the properties and accessProviders flow end to end on a lab that is up (and says
//! what to run when it is not), under the lab lock: the `verify` workflow, its table printed (and written as
//! `--junit`). It changes nothing in the lab and downloads nothing.

use super::runner::{Workflow, run_workflows};
use crate::cli::{RunArgs, VerifyArgs};
use crate::error::Error;

pub fn run(args: &VerifyArgs, host: &crate::topology::Host) -> Result<(), Error> {
    run_workflows(&RunArgs::from(args), args.output, &[Workflow::Verify], host)
}
