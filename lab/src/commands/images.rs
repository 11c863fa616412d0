//! `ocm-lab images`: the images a lab runs ([`crate::images`]).

use crate::images::{list, render_list};

/// `ocm-lab images …`.
pub fn run(
    c: &crate::cli::ImagesCommand,
    host: &crate::topology::Host,
) -> Result<(), crate::error::Error> {
    use std::io::Write as _;
    match c {
        crate::cli::ImagesCommand::List(args) => {
            let (loaded, sources, patches) = super::inputs(&args.lab, host)?;
            let plan = crate::workflow::plan::plan(
                &loaded.lab,
                &sources,
                &crate::actions::Registry,
                &patches,
                "up",
            )?;
            let images = list(&loaded.lab, &plan)?;
            let text = match args.output.output {
                crate::cli::Output::Human => render_list(&images),
                crate::cli::Output::Json => format!(
                    "{}\n",
                    serde_json::to_string(&images).expect("image lists serialize")
                ),
                crate::cli::Output::Yaml => {
                    serde_saphyr::to_string(&images).expect("image lists serialize to YAML")
                }
            };
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(crate::error::Error::Stdout)
        }
    }
}
