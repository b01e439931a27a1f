//! `kubectl-tfjob`: the kubectl plugin (`kubectl tfjob …`); the commands
//! are in `tfjob_federator::plugin`.

use anyhow::Context;
use clap::Parser;
use tfjob_federator::plugin::{self, Cli};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut out = std::io::stdout().lock();
    runtime.block_on(plugin::run(cli, &mut out))?;
    Ok(())
}
