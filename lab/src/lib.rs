//! ocm-lab: a declarative local Open Cluster Management lab for the Cluster Inventory API.
//!
//! This crate is the command line: clap definitions ([`cli`]), one module per command ([`commands`]), the
//! image list ([`images`]) and the top-level error. Everything below it (topology, plan, engine, actions,
//! backends) is `ocm-lab-core`, re-exported here so `ocm_lab::topology` and the rest keep their paths. The
//! simulated lab (`ocm-lab-sim`) is reached only where `--simulate` opens backends, behind the `simulate`
//! feature.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub use ocm_lab_core::*;

pub mod cli;
pub mod commands;
pub mod error;
pub mod images;
mod run;
pub mod simulate;

pub use error::render;
pub use run::main;
