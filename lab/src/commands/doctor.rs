//! `ocm-lab doctor`: whether this machine can run the lab, from the checks in [`super::checks`].

pub use super::checks::*;

/// `ocm-lab doctor`: every finding with what to do; exit 1 when something would stop `up`.
pub fn run(
    args: &crate::cli::DoctorArgs,
    host: &crate::topology::Host,
) -> Result<(), crate::error::Error> {
    use super::checks::{doctor_error, failed, render};
    use super::runner::{Purpose, open_backends};
    use super::runtime;
    use crate::state::StateDir;
    let output = args.output.output;
    let args = crate::cli::RunArgs::from(args);
    let (loaded, sources, patches) = super::inputs(&args.lab, host)?;
    super::warn(&loaded);
    let state = StateDir::for_run(&loaded.lab.name, args.simulate)?;
    let rt = runtime()?;
    let opened = open_backends(&rt, &args, &state, Purpose::Doctor, &loaded.lab)?;
    let images = crate::images::for_doctor(&loaded.lab, &sources, &patches);
    let findings = opened.doctor_findings(&rt, &loaded.lab, &state, &images, &Default::default());
    rt.shutdown_background();
    super::document(output, &findings, || render(&findings))?;
    if failed(&findings) {
        Err(doctor_error(&findings))
    } else {
        Ok(())
    }
}
