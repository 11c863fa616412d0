//! Integration tests, compiled into one binary (one link instead of one per file).

mod cli_conventions;
mod cli_sim;
mod common;
mod converge;
mod crash;
mod crdschema;
mod docker;
mod engine;
mod klusterlet_first;
mod kube_api;
mod lifecycle;
mod ownership;
mod patch_files;
mod plan;
mod preflight;
mod resume;
mod sim;
mod timing;
mod tools;
mod topology;
mod up_hazards;
mod up_reads;
mod verify_hops;
mod verify_run;
mod workflow;
