//! `ocm-lab completions <shell>`: a shell completion script (clap_complete).

use super::stdout;
use crate::cli::Cli;
use crate::error::Error;

pub fn run(shell: clap_complete::Shell) -> Result<(), Error> {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut <Cli as clap::CommandFactory>::command(),
        "ocm-lab",
        &mut script,
    );
    stdout(&String::from_utf8_lossy(&script))
}
