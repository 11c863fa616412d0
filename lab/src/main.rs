//! The `ocm-lab` binary: everything lives in the library so tests can call it in-process.

/// mimalloc: the engine and the simulated lab allocate from several threads at once, where glibc's
/// malloc serializes them (README, Performance).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    ocm_lab::main(std::env::args_os())
}
