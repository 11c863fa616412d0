//! ocm-lab: a declarative local Open Cluster Management lab for the Cluster Inventory API.
//!
//! The flow (DESIGN.md): a topology file is parsed and validated into a [`topology::Lab`]; a workflow is
//! rendered against it into a [`workflow::Plan`]; the engine runs the plan's steps against backends.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod actions;
pub mod backend;
pub mod charts;
pub mod cli;
pub mod commands;
pub mod diag;
pub mod embedded;
pub mod engine;
pub mod error;
pub mod images;
pub mod patch;
mod run;
pub mod sim;
pub mod state;
pub mod step;
pub mod text;
pub mod topology;
pub mod verify;
pub mod workflow;

pub use run::{main, render};
