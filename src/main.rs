//! The `tfjob-federator` command line (contract: ARCHITECTURE.md §6).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tfjob_federator::sim::{self, SimOptions};
use tfjob_federator::telemetry::{self, LogFormat};

#[derive(Parser)]
#[command(
    version,
    about = "Runs TensorFlowTrainingJobs across several Kubernetes clusters"
)]
struct Cli {
    /// Log format; the level comes from RUST_LOG (default info).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve simulated Kubernetes clusters on 127.0.0.1 until interrupted.
    Sim {
        /// Number of clusters: `home`, then `member-1`, `member-2`, ….
        #[arg(long, default_value_t = 3)]
        clusters: usize,
        /// Where to write `<name>.kubeconfig` per cluster, then `ready`.
        #[arg(long)]
        kubeconfig_dir: PathBuf,
        /// Events each cluster keeps for watches and continue tokens; older
        /// resourceVersions get 410 Expired.
        #[arg(long, default_value_t = SimOptions::default().watch_history)]
        watch_history: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            Command::Sim {
                clusters,
                kubeconfig_dir,
                watch_history,
            } => run_sim(clusters, &kubeconfig_dir, SimOptions { watch_history }).await,
        }
    })
}

async fn run_sim(count: usize, dir: &std::path::Path, options: SimOptions) -> anyhow::Result<()> {
    anyhow::ensure!(count >= 1, "--clusters must be at least 1");
    let mut handles = Vec::new();
    for name in sim::cluster_names(count) {
        handles.push(
            sim::start_cluster(&name, &options)
                .await
                .with_context(|| format!("starting cluster {name}"))?,
        );
    }
    let paths = sim::write_kubeconfigs(dir, &handles)
        .with_context(|| format!("writing kubeconfigs to {}", dir.display()))?;
    for (handle, path) in handles.iter().zip(&paths) {
        println!("{}\t{}\t{}", handle.name, handle.url(), path.display());
    }
    wait_for_signal().await?;
    tracing::info!("shutting down");
    for handle in handles {
        handle.stop().await;
    }
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
