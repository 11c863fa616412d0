//! Integration tests, compiled into one binary (one link instead of one per file).

mod cli_sim;
mod common;
mod crash;
mod crdschema;
mod damaged;
mod docker;
mod engine;
mod kube_api;
mod lifecycle;
mod patch_files;
mod plan;
mod resume;
mod robustness;
mod sim;
mod tools;
mod topology;
mod up_hazards;
mod verify_hops;
mod workflow;
