//! The one place the product meets the simulated lab (crate `ocm-lab-sim`, cargo feature `simulate`):
//! `--simulate` opens its backends here instead of Docker, kind, Helm and the Kubernetes API. Nothing else
//! in the product knows it exists. Built without the feature, `--simulate` says so and does nothing.

use std::path::Path;

use crate::backend::Backends;
use crate::commands::purpose::Purpose;
#[cfg(feature = "simulate")]
use crate::commands::purpose::Workflow;
use crate::error::Error;
use crate::state::StateDir;
use crate::topology::Lab;

#[cfg(feature = "simulate")]
mod imp {
    use std::sync::Arc;

    use super::*;
    use crate::patch::PatchSet;
    use crate::topology::Provider;
    use ocm_lab_sim::SimLab;

    /// The simulated lab a command runs against, saved to the state folder when the command ends.
    pub struct Simulated(Arc<SimLab>);

    /// Opens the lab's saved simulated world (a new one if there is none) and its backends.
    pub fn open(
        command_line: &dyn Fn(&str) -> String,
        chart_patches: Option<&Path>,
        state: &StateDir,
        purpose: Purpose,
        lab: &Lab,
    ) -> Result<(Backends, Simulated), Error> {
        let path = state.sim_world();
        let sim = match SimLab::load(&path) {
            Ok(sim) => sim,
            // `down` of a simulated lab whose saved world cannot be read: there is nothing left to tear
            // down in the simulation, so the damaged file goes and `down` proceeds on an empty world.
            Err(e)
                if purpose == Purpose::Run(Workflow::Down)
                    && e.kind() == std::io::ErrorKind::InvalidData =>
            {
                tracing::warn!(
                    "{e}: nothing to tear down in the simulation, removing the damaged file"
                );
                std::fs::remove_file(&path).map_err(|source| Error::SimSave {
                    path: path.display().to_string(),
                    source,
                })?;
                SimLab::new()
            }
            Err(source) => {
                return Err(Error::SimLoad {
                    path: path.display().to_string(),
                    source,
                    help: format!(
                        "the saved simulated lab cannot be used: run `{}` (it removes the damaged file), then `{}`",
                        command_line("down"),
                        command_line("up")
                    ),
                });
            }
        };
        seed_existing_clusters(&sim, lab);
        // The simulated post-renderer applies the run's patches, as `__post-render` would.
        let patches = match chart_patches {
            None => PatchSet::embedded()?,
            Some(dir) => PatchSet::load_dir(dir)?,
        };
        Ok((sim.backends_with_patches(patches), Simulated(sim)))
    }

    /// The simulated lab models an `existing:` cluster as a cluster someone else already runs: it is in
    /// the simulated world (as a foreign cluster) from the first command on, and `down` never deletes it.
    fn seed_existing_clusters(sim: &SimLab, lab: &Lab) {
        sim.with_world(|w| {
            let names = w.cluster_names();
            let missing: Vec<String> = lab
                .clusters()
                .filter(|c| matches!(c.provider, Provider::Existing { .. }))
                .filter(|c| !names.contains(&c.name))
                .map(|c| c.name.clone())
                .collect();
            for name in &missing {
                w.add_foreign_cluster(name);
            }
        });
    }

    impl Simulated {
        /// Saves the simulated world, so the next command sees the same simulated lab.
        pub fn save(&self, state: &StateDir) -> Result<(), Error> {
            self.0
                .save(&state.sim_world())
                .map_err(|source| Error::SimSave {
                    path: state.sim_world().display().to_string(),
                    source,
                })
        }

        /// Whether the world holds clusters the lab did not create (its `existing:` clusters).
        pub fn has_foreign_clusters(&self) -> bool {
            self.0.has_foreign_clusters()
        }
    }

    /// A chart's objects as the simulated lab's models render them, after the chart patches: what
    /// `up --simulate` installs (for `plan --out --simulate`).
    pub fn render_chart(
        chart: &crate::charts::ChartPlan,
        patches: &PatchSet,
    ) -> Result<crate::backend::Rendered, String> {
        ocm_lab_sim::render_chart_patched(chart, &chart.values, patches)
            .map_err(|e| format!("the simulated chart model failed: {e}"))
    }
}

#[cfg(not(feature = "simulate"))]
mod imp {
    use super::*;

    /// This build has no simulated lab: no value of this type exists.
    pub enum Simulated {}

    pub fn open(
        _: &dyn Fn(&str) -> String,
        _: Option<&Path>,
        _: &StateDir,
        _: Purpose,
        _: &Lab,
    ) -> Result<(Backends, Simulated), Error> {
        Err(Error::NoSimulation)
    }

    impl Simulated {
        pub fn save(&self, _: &StateDir) -> Result<(), Error> {
            match *self {}
        }
        pub fn has_foreign_clusters(&self) -> bool {
            match *self {}
        }
    }

    pub fn render_chart(
        _: &crate::charts::ChartPlan,
        _: &crate::patch::PatchSet,
    ) -> Result<crate::backend::Rendered, String> {
        Err(Error::NoSimulation.to_string())
    }
}

pub use imp::{Simulated, open, render_chart};
