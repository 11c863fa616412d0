//! The `ocm-lab` binary: everything lives in the library so tests can call it in-process.

fn main() -> std::process::ExitCode {
    ocm_lab::main(std::env::args_os())
}
