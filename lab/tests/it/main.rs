//! Integration tests, compiled into one binary (one link instead of one per file).

mod architecture;
mod cli_conventions;
mod cli_sim;
mod common;
mod converge;
mod crash;
mod crdschema;
mod docker;
mod engine;
mod kube_api;
mod lifecycle;
mod ownership;
mod patch_files;
mod plan;
mod preflight;
mod resume;
mod sim;
mod tools;
mod topology;
mod up_hazards;
mod verify_hops;
mod verify_run;
mod workflow;
