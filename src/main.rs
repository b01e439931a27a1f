//! The `tfjob-federator` command line (contract: docs/src/design/command-line.md).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kube_sim::{self as sim, NodeShape, SimOptions};
use tfjob_federator::config::ControllerConfig;
use tfjob_federator::demo::{self, DemoOptions};
use tfjob_federator::join::{self, JoinOptions};
use tfjob_federator::telemetry::{self, LogFormat, Metrics, Readiness, Synced};
use tfjob_federator::{api, controller, election, plan};

/// mimalloc instead of the C library's allocator: less CPU per job and a
/// smaller resident set at 10,000 jobs (docs/src/benchmarks/controller.md). Without the
/// `mimalloc` feature, the C library's, for heap profilers.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Runs TensorFlowTrainingJobs across several Kubernetes clusters"
)]
struct Cli {
    /// Log format (to stderr); the level comes from RUST_LOG (default info,
    /// warn for `demo`).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Try it without a cluster: start simulated clusters, register the
    /// members, start the controller, submit the example jobs and show their
    /// progress and a summary. Exit code 0 when every job reached the phase
    /// its manifest expects (annotation demo.federation.tfjob.io/expected-phase,
    /// default Succeeded), 1 otherwise, 130 (143) on SIGINT (SIGTERM) before
    /// the summary; with --keep, a signal after the summary exits with the
    /// summary's code.
    Demo {
        /// Number of clusters: `home`, then `member-1`, `member-2`, … (4
        /// nodes each, with 32 cpu, 128Gi and 4 nvidia.com/gpu per node).
        #[arg(long, default_value_t = 3)]
        clusters: usize,
        /// Submit the jobs in this file (YAML; several documents allowed)
        /// instead of the examples of config/examples; repeatable, submitted
        /// in the order given.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// After the summary, keep the clusters and the controller up until
        /// Ctrl-C, and print the kubeconfigs and kubectl commands to try.
        #[arg(long)]
        keep: bool,
        /// Write `<cluster>.kubeconfig` here (and keep it); default: a
        /// temporary directory, removed at the end.
        #[arg(long)]
        kubeconfig_dir: Option<PathBuf>,
        /// Seconds a job may take from its submission to its expected phase.
        #[arg(long, default_value_t = 90)]
        job_timeout: u64,
        /// Serve /metrics, /healthz and /readyz here, as `run` does; the
        /// default picks a free loopback port (printed), so a demo never
        /// fails for a port in use.
        #[arg(long, default_value = "127.0.0.1:0")]
        metrics_addr: std::net::SocketAddr,
    },
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
        /// Nodes per cluster.
        #[arg(long, default_value_t = NodeShape::default().count)]
        nodes: usize,
        /// Allocatable cpu per node (a Kubernetes quantity).
        #[arg(long, default_value_t = NodeShape::default().cpu, value_parser = quantity)]
        cpu_per_node: String,
        /// Allocatable memory per node (a Kubernetes quantity).
        #[arg(long, default_value_t = NodeShape::default().memory, value_parser = quantity)]
        memory_per_node: String,
        /// nvidia.com/gpu per node.
        #[arg(long, default_value_t = NodeShape::default().gpus)]
        gpus_per_node: u32,
        /// Install the CRDs on `home` and register the other clusters as
        /// members (Secret + MemberCluster), as `join` does.
        #[arg(long)]
        register: bool,
    },
    /// Register a member cluster on the home cluster.
    Join {
        /// The member's name (MemberCluster and Secret name).
        #[arg(long)]
        name: String,
        /// Kubeconfig of the member, stored in a Secret on home.
        #[arg(long)]
        member_kubeconfig: PathBuf,
        /// Kubeconfig of the home cluster (default: the usual inference).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// How peers elsewhere reach this member's services; placeholders
        /// `{service}`, `{namespace}`, `{cluster}`.
        #[arg(long)]
        address_template: Option<String>,
        /// Create a multicluster.x-k8s.io ServiceExport per replica service.
        #[arg(long)]
        export_services: bool,
    },
    /// Run the controller against real clusters until interrupted.
    Run {
        /// Kubeconfig of the home cluster (default: the usual inference).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Context in that kubeconfig.
        #[arg(long)]
        context: Option<String>,
        /// Controller settings (YAML); see config/default.yaml.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Where to serve /metrics (Prometheus), /healthz and /readyz; port 0
        /// picks a free port (logged).
        #[arg(long, default_value = "0.0.0.0:8080")]
        metrics_addr: std::net::SocketAddr,
        /// Run the actors only while this replica holds the Lease
        /// `tfjob-federator` on home (for several replicas); standbys serve
        /// /healthz and are not ready. Lease length: `leaseDurationMs`.
        #[arg(long)]
        leader_elect: bool,
        /// The Lease's namespace (default: $POD_NAMESPACE, else tfjob-federator).
        #[arg(long)]
        leader_elect_namespace: Option<String>,
        /// This replica's name in the Lease (default: $HOSTNAME, else random).
        #[arg(long)]
        leader_elect_identity: Option<String>,
    },
    /// Dry run: where each replica of a job would go, and why other clusters
    /// are passed over; or, with --lose, what losing clusters now would do
    /// to the running jobs.
    Plan {
        /// The job manifest (YAML).
        #[arg(
            short = 'f',
            long = "filename",
            required_unless_present = "lose",
            conflicts_with = "lose"
        )]
        file: Option<PathBuf>,
        /// Clusters to suppose lost now (comma-separated): which replicas of
        /// each running job would move and where, whole or partial, the
        /// restart counts after, and which jobs would fail.
        #[arg(long, value_delimiter = ',', num_args = 1..)]
        lose: Option<Vec<String>>,
        /// With --lose: only this job.
        job: Option<String>,
        /// With --lose: only jobs in this namespace (default: every namespace).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// With --lose: `json` prints the predictions as JSON.
        #[arg(short = 'o', long)]
        output: Option<String>,
        /// Kubeconfig of the home cluster (default: the usual inference).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Controller settings (YAML), for the home cluster's name.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// The member-side fence (docs/src/members/fence.md): run inside a member
    /// cluster with the member's own identity. Once the controller has not
    /// renewed its Lease there for fenceAfterMs, deletes every pod this
    /// federation placed on the member, until the Lease is renewed again.
    Fence {
        /// Kubeconfig of the member (default: in-cluster, or the usual inference).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Context in that kubeconfig.
        #[arg(long)]
        context: Option<String>,
        /// The controller's namespace on the member, where the Leases and
        /// the fence key are (default: $POD_NAMESPACE, else tfjob-federator).
        #[arg(long)]
        namespace: Option<String>,
        /// This fence's name in its Lease (default: $HOSTNAME, else random).
        #[arg(long)]
        identity: Option<String>,
        /// fenceAfterMs while the controller's Lease does not say it.
        #[arg(long, default_value_t = 30_000)]
        fence_after_ms: u64,
        /// fencePodGraceMs while the controller's Lease does not say it.
        #[arg(long, default_value_t = 10_000)]
        fence_pod_grace_ms: u64,
        /// How often the fence renews its own Lease (milliseconds).
        #[arg(long, default_value_t = 5_000)]
        renew_interval_ms: u64,
    },
    /// Print every CRD this controller owns, as YAML.
    Crd,
    /// Print the book's API reference of those CRDs, as Markdown
    /// (docs/src/api/reference.md).
    ApiReference,
}

/// Accepts only what parses as a Kubernetes quantity.
fn quantity(text: &str) -> Result<String, String> {
    tfjob_federator::quantity::parse_milli(text)
        .map(|_| text.to_string())
        .ok_or_else(|| format!("not a Kubernetes quantity: {text}"))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Crd = cli.command {
        // No logging or runtime: the output is meant for `> file` or kubectl.
        print!("{}", api::crds_yaml().context("serializing the CRDs")?);
        return Ok(());
    }
    if let Command::ApiReference = cli.command {
        print!("{}", api::reference_markdown());
        return Ok(());
    }
    // The demo's progress goes to stdout; only problems should join it.
    let default_level = match cli.command {
        Command::Demo { .. } => "warn",
        _ => "info",
    };
    telemetry::init(cli.log_format, default_level);
    match cli.command {
        Command::Demo {
            clusters,
            files,
            keep,
            kubeconfig_dir,
            job_timeout,
            metrics_addr,
        } => {
            let ended = demo::run(&DemoOptions {
                clusters,
                files,
                keep,
                kubeconfig_dir,
                job_timeout: std::time::Duration::from_secs(job_timeout),
                metrics_addr,
            })?;
            std::process::exit(ended.exit_code());
        }
        Command::Run {
            kubeconfig,
            context,
            config,
            metrics_addr,
            leader_elect,
            leader_elect_namespace,
            leader_elect_identity,
        } => {
            let config = ControllerConfig::load(config.as_deref())?;
            exit_on_panic();
            let election = leader_elect.then(|| election::Settings {
                namespace: leader_elect_namespace
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .unwrap_or_else(|| "tfjob-federator".into()),
                name: "tfjob-federator".into(),
                identity: leader_elect_identity
                    .or_else(|| std::env::var("HOSTNAME").ok())
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                lease_duration: config.lease_duration(),
            });
            // Actors need an actix System; kube futures run on its multi-thread tokio runtime.
            let system = actix::System::with_tokio_rt(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime can be built")
            });
            system.block_on(async move {
                let home = controller::kube_config(kubeconfig.as_deref(), context).await?;
                let metrics = Arc::new(Metrics::new()?);
                let readiness = Readiness::default();
                let server = telemetry::serve(metrics_addr, metrics.clone(), readiness.clone())
                    .with_context(|| format!("serving metrics on {metrics_addr}"))?;
                tracing::info!(addr = %server.addr(), "serving metrics");
                let mut leadership = None;
                if let Some(settings) = election {
                    // No retries inside a request: the election retries
                    // itself, quickly, and must see time pass.
                    let mut lease_config = home.clone();
                    lease_config.default_retry = false;
                    let client = telemetry::instrumented_client(
                        lease_config,
                        &config.home_cluster_name,
                        metrics.clone(),
                    )?;
                    tokio::select! {
                        led = election::lead(client, settings) => leadership = Some(led),
                        signal = wait_for_signal() => {
                            signal?;
                            server.stop().await;
                            return Ok(());
                        }
                    }
                }
                readiness.mark(Synced::Leading);
                let _running = controller::start_with(home, config, metrics, readiness).await?;
                tracing::info!("controller started");
                if let Some(leadership) = leadership.as_mut() {
                    tokio::select! {
                        signal = wait_for_signal() => signal?,
                        _ = leadership.lost() => {
                            anyhow::bail!("lost the leader Lease: stopping, so that only the new leader acts")
                        }
                    }
                } else {
                    wait_for_signal().await?;
                }
                tracing::info!("shutting down");
                if let Some(leadership) = leadership {
                    leadership.release().await;
                }
                server.stop().await;
                Ok(())
            })
        }
        Command::Fence {
            kubeconfig,
            context,
            namespace,
            identity,
            fence_after_ms,
            fence_pod_grace_ms,
            renew_interval_ms,
        } => {
            let options = tfjob_federator::member_fence::FenceOptions {
                kubeconfig,
                context,
                namespace: namespace
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .unwrap_or_else(|| tfjob_federator::fence::NAMESPACE.into()),
                identity: identity
                    .or_else(|| std::env::var("HOSTNAME").ok())
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                fence_after: std::time::Duration::from_millis(fence_after_ms),
                pod_grace_ms: fence_pod_grace_ms,
                // Under 100 ms the renewals would spin.
                renew_interval: std::time::Duration::from_millis(renew_interval_ms.max(100)),
            };
            let runtime = async_runtime()?;
            runtime.block_on(async move {
                let shutdown = async {
                    if let Err(e) = wait_for_signal().await {
                        tracing::warn!(error = %e, "waiting for a signal failed");
                    }
                };
                tfjob_federator::member_fence::run(options, shutdown).await
            })?;
            Ok(())
        }
        Command::Sim {
            clusters,
            kubeconfig_dir,
            watch_history,
            nodes,
            cpu_per_node,
            memory_per_node,
            gpus_per_node,
            register,
        } => {
            let nodes = NodeShape {
                count: nodes,
                cpu: cpu_per_node,
                memory: memory_per_node,
                gpus: gpus_per_node,
                ..NodeShape::default()
            };
            let runtime = async_runtime()?;
            runtime.block_on(run_sim(
                clusters,
                &kubeconfig_dir,
                SimOptions {
                    watch_history,
                    nodes,
                },
                register,
            ))
        }
        Command::Join {
            name,
            member_kubeconfig,
            kubeconfig,
            address_template,
            export_services,
        } => {
            let runtime = async_runtime()?;
            runtime.block_on(async move {
                let text = std::fs::read_to_string(&member_kubeconfig)
                    .with_context(|| format!("reading {}", member_kubeconfig.display()))?;
                let home = controller::client(kubeconfig.as_deref(), None).await?;
                join::join(
                    &home,
                    &name,
                    &text,
                    &JoinOptions {
                        address_template,
                        export_services,
                    },
                )
                .await?;
                println!("member cluster {name} registered");
                Ok(())
            })
        }
        Command::Plan {
            file,
            lose: Some(lose),
            job,
            namespace,
            output,
            kubeconfig,
            config,
        } if file.is_none() => {
            let config = ControllerConfig::load(config.as_deref())?;
            let lost = lose.into_iter().collect();
            let runtime = async_runtime()?;
            runtime.block_on(async move {
                let home = controller::client(kubeconfig.as_deref(), None).await?;
                let predictions =
                    plan::predict_loss(&home, &config, &lost, namespace.as_deref(), job.as_deref())
                        .await?;
                match output.as_deref() {
                    Some("json") => println!("{}", serde_json::to_string_pretty(&predictions)?),
                    Some(other) => anyhow::bail!("unknown output format {other:?} (json)"),
                    None => print!("{}", plan::loss_report(&lost, &predictions)),
                }
                Ok(())
            })
        }
        Command::Plan {
            file,
            kubeconfig,
            config,
            ..
        } => {
            let config = ControllerConfig::load(config.as_deref())?;
            let file = file.context("plan needs -f FILE or --lose CLUSTERS")?;
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let job: api::TensorFlowTrainingJob = serde_yaml::from_str(&text)
                .with_context(|| format!("{} is not a TensorFlowTrainingJob", file.display()))?;
            let runtime = async_runtime()?;
            runtime.block_on(async move {
                let home = controller::client(kubeconfig.as_deref(), None).await?;
                let clusters = plan::cluster_states(&home, &config).await?;
                print!("{}", plan::report(&job, &clusters));
                Ok(())
            })
        }
        Command::Crd | Command::ApiReference => Ok(()),
    }
}

async fn run_sim(
    count: usize,
    dir: &std::path::Path,
    options: SimOptions,
    register: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(count >= 1, "--clusters must be at least 1");
    let mut handles = Vec::new();
    for name in sim::cluster_names(count) {
        handles.push(
            sim::start_cluster(&name, &options)
                .await
                .with_context(|| format!("starting cluster {name}"))?,
        );
    }
    if register && let Some((home, members)) = handles.split_first() {
        let members: Vec<(String, String)> = members
            .iter()
            .map(|m| (m.name.clone(), m.kubeconfig()))
            .collect();
        join::register_members(&home.kubeconfig(), &members)
            .await
            .context("registering the member clusters")?;
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

/// A panic on any thread ends the process (after the usual message): a
/// worker thread or informer task that died quietly would leave its jobs
/// unserved, while a restarted controller rebuilds everything from the
/// clusters (and Kubernetes restarts it).
fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |panic| {
        report(panic);
        tracing::error!(%panic, "panicked: exiting so that a restart recovers");
        std::process::exit(70);
    }));
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

/// The multi-thread tokio runtime the one-shot commands run on.
fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}
