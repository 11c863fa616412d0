//! Workflows: the steps of `up`, `verify`, `down` and `reset` as data, and their rendering into a plan.
//!
//! A workflow file (`workflows/*.yaml`) lists steps with `id`, `uses`, `with`, `needs`, `foreach`, `if`,
//! `timeout` and `retry`. [`plan::plan`] expands `foreach` against a [`crate::topology::Lab`], renders every
//! template with minijinja (strict: an undefined variable is an error), resolves `needs` to concrete step
//! instances, checks the graph for cycles, and renders the manifests and chart values each step applies.

pub mod catalog;
pub mod plan;
pub mod spec;

pub use crate::charts::ChartPlan;
pub use catalog::Catalog;
pub use plan::{Plan, PlannedStep, Retry};
pub use spec::{Sources, WorkflowFile};
