//! ocm-lab's core: everything the product does below its command line.
//!
//! The flow (ARCHITECTURE.md): a topology file is parsed and validated into a [`topology::Lab`]; a workflow
//! is rendered against it into a [`workflow::Plan`]; the engine runs the plan's steps through the actions
//! against the backend traits (`backend`), whose real implementations drive Docker, kind, Helm and the
//! Kubernetes API. The simulated lab (crate `ocm-lab-sim`) implements the same traits from outside.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod actions;
pub mod backend;
pub mod charts;
pub mod diag;
pub mod embedded;
pub mod engine;
pub mod exercise;
pub mod patch;
pub mod state;
pub mod step;
pub mod text;
pub mod topology;
pub mod verify;
pub mod workflow;
