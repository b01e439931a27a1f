//! The demo's wiring: simulated clusters on one tokio runtime, the
//! controller in an actix System on another, the jobs submitted and
//! followed through a watch on home, the output. Decisions come from
//! `progress`; this module only does the I/O.
//!
//! Two runtimes so that shutdown goes in order: the controller's runtime is
//! dropped first (its actors, watches and connections with it), then the
//! clusters stop, so the controller never sees them vanish and logs nothing.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

use super::manifest::{self, DemoJob};
use super::progress::{self, Tracker};
use super::{DemoError, DemoOptions, Ended, Signal};
use crate::api::{MemberCluster, TensorFlowTrainingJob};
use crate::config::ControllerConfig;
use crate::telemetry::{self, MetricsServer};
use crate::{controller, join};
use kube_sim::{self as sim, RunningCluster, SimOptions};

/// How long registered members may take to answer their first probe.
const MEMBERS_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a submission waits for the previous job to be placed (which
/// takes well under a second unless the controller is stuck).
const PACE: Duration = Duration::from_secs(10);
/// How often deadlines are checked and a terminal's table redrawn.
const TICK: Duration = Duration::from_millis(250);
/// The terminal width assumed when `COLUMNS` is not set.
const DEFAULT_COLUMNS: usize = 80;
/// The field manager of the namespaces the demo creates.
const MANAGER: &str = "tfjob-federator-demo";

/// Runs a whole demo; returns once everything it started has stopped.
pub fn run(options: &DemoOptions) -> Result<Ended, DemoError> {
    if options.clusters == 0 {
        return Err(DemoError::NoClusters);
    }
    let (jobs, source) = load_jobs(&options.files)?;
    let (dir, temporary) = match &options.kubeconfig_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("tfjob-federator-demo-{}", std::process::id())),
            true,
        ),
    };
    let sim_runtime = runtime()?;
    let controller_runtime = runtime()?;
    let system = actix::System::with_tokio_rt(move || controller_runtime);
    let mut clusters = Vec::new();
    let mut out = Output::new();
    let plan = Plan {
        jobs,
        source,
        dir: &dir,
        options,
    };
    let result = system.block_on(drive(sim_runtime.handle(), &mut clusters, plan, &mut out));
    // The controller's runtime goes first (see above), then the clusters.
    drop(system);
    sim_runtime.block_on(async {
        for cluster in clusters {
            cluster.stop().await;
        }
    });
    if temporary {
        // Best effort: a leftover directory in /tmp harms nobody.
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// Where the metrics can be scraped (a wildcard address shown as loopback).
fn metrics_url(server: &MetricsServer) -> String {
    let mut addr = server.addr();
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{addr}/metrics")
}

fn runtime() -> Result<tokio::runtime::Runtime, DemoError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(DemoError::Runtime)
}

/// The jobs to submit and a phrase saying where they come from.
fn load_jobs(files: &[PathBuf]) -> Result<(Vec<DemoJob>, String), DemoError> {
    if files.is_empty() {
        return Ok((manifest::examples()?, "config/examples".to_string()));
    }
    let mut jobs = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|source| DemoError::Read {
            path: path.display().to_string(),
            source,
        })?;
        jobs.extend(manifest::parse(&path.display().to_string(), &text)?);
    }
    manifest::check_unique(&jobs)?;
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    Ok((jobs, names.join(", ")))
}

struct Plan<'a> {
    jobs: Vec<DemoJob>,
    source: String,
    dir: &'a Path,
    options: &'a DemoOptions,
}

/// What stays up after the jobs are done: the controller (dropping it
/// stops it) and the kubeconfigs to show with `--keep`.
struct Finished {
    tracker: Tracker,
    _controller: controller::Controller,
    metrics: MetricsServer,
    kubeconfigs: Vec<(String, String)>,
}

struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals, DemoError> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).map_err(DemoError::Signals)?,
            terminate: signal(SignalKind::terminate()).map_err(DemoError::Signals)?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::Interrupt,
            _ = self.terminate.recv() => Signal::Terminate,
        }
    }
}

async fn drive(
    sim_runtime: &tokio::runtime::Handle,
    clusters: &mut Vec<RunningCluster>,
    plan: Plan<'_>,
    out: &mut Output,
) -> Result<Ended, DemoError> {
    let mut signals = Signals::install()?;
    let started = Instant::now();
    let keep = plan.options.keep;
    let outcome = tokio::select! {
        finished = follow_jobs(sim_runtime, clusters, plan, out, started) => Ok(finished?),
        signal = signals.next() => Err(signal),
    };
    let finished = match outcome {
        Ok(finished) => finished,
        Err(signal) => {
            out.end_progress();
            out.say(&format!(
                "Interrupted by {}: stopping the controller and the clusters.",
                signal.name()
            ));
            return Ok(Ended::Interrupted(signal));
        }
    };
    out.end_progress();
    out.say("");
    out.say(finished.tracker.summary(started.elapsed()).trim_end());
    let passed = finished.tracker.failures().is_empty();
    if keep {
        out.say("");
        let url = metrics_url(&finished.metrics);
        out.say(progress::keep_instructions(&finished.kubeconfigs, &url).trim_end());
        let signal = signals.next().await;
        out.say(&format!(
            "{}: stopping the controller and the clusters.",
            signal.name()
        ));
    }
    finished.metrics.stop().await;
    Ok(Ended::Finished { passed })
}

/// Starts the clusters and the controller, submits the jobs and follows
/// them until each has settled or timed out.
async fn follow_jobs(
    sim_runtime: &tokio::runtime::Handle,
    clusters: &mut Vec<RunningCluster>,
    plan: Plan<'_>,
    out: &mut Output,
    started: Instant,
) -> Result<Finished, DemoError> {
    let names = sim::cluster_names(plan.options.clusters);
    let clusters_text = if names.len() == 1 {
        "cluster"
    } else {
        "clusters"
    };
    out.say(&format!(
        "Starting {} simulated {clusters_text}: {}",
        names.len(),
        names.join(", ")
    ));
    for name in &names {
        let cluster = name.clone();
        let handle = sim_runtime
            .spawn(async move { sim::start_cluster(&cluster, &SimOptions::default()).await })
            .await
            .map_err(|e| e.to_string())
            .and_then(|started| started.map_err(|e| e.to_string()))
            .map_err(|message| DemoError::Cluster {
                name: name.clone(),
                message,
            })?;
        clusters.push(handle);
    }
    let paths =
        sim::write_kubeconfigs(plan.dir, clusters).map_err(|source| DemoError::Kubeconfigs {
            dir: plan.dir.display().to_string(),
            source,
        })?;
    out.say(&format!("Kubeconfigs in {}", plan.dir.display()));
    let kubeconfigs: Vec<(String, String)> = names
        .iter()
        .cloned()
        .zip(paths.iter().map(|p| p.display().to_string()))
        .collect();
    let texts: Vec<(String, String)> = clusters
        .iter()
        .map(|c| (c.name.clone(), c.kubeconfig()))
        .collect();
    let Some(((_, home_kubeconfig), members)) = texts.split_first() else {
        return Err(DemoError::NoClusters);
    };
    join::register_members(home_kubeconfig, members).await?;
    let home_path = paths.first().map(PathBuf::as_path);
    let home = controller::client(home_path, None).await?;
    let running = controller::start(
        controller::kube_config(home_path, None).await?,
        // The simulated clusters are one clusterset, home too: its
        // replicas are exported like the members', so a job may be split
        // over all of them.
        ControllerConfig {
            home_export_services: true,
            ..ControllerConfig::default()
        },
    )
    .await?;
    let addr = plan.options.metrics_addr;
    let metrics = telemetry::serve(addr, running.metrics(), running.readiness())
        .map_err(|source| DemoError::Metrics { addr, source })?;
    out.say(&format!("Metrics on {}", metrics_url(&metrics)));
    let member_names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    if member_names.is_empty() {
        out.say("Controller started on home (no members: a single-cluster operator)");
    } else {
        out.say(&format!(
            "Controller started; members registered: {}",
            member_names.join(", ")
        ));
        wait_members_ready(&home, &member_names).await?;
        out.say(&format!(
            "Members Ready after {}",
            progress::seconds(started.elapsed())
        ));
    }
    ensure_namespaces(&home, &plan.jobs).await?;
    let pacing = if plan.jobs.len() > 1 {
        ", each once the previous one is placed"
    } else {
        ""
    };
    out.say(&format!(
        "Submitting {} from {}{pacing}",
        progress::jobs(plan.jobs.len()),
        plan.source
    ));
    let header = format!("tfjob-federator demo · {}", names.join(", "));
    let tracker = follow(&home, &plan, out, started, &header).await?;
    Ok(Finished {
        tracker,
        _controller: running,
        metrics,
        kubeconfigs,
    })
}

/// Waits until every member answers its probe and reports capacity, so
/// that the first placement sees every cluster.
async fn wait_members_ready(home: &Client, names: &[String]) -> Result<(), DemoError> {
    let api: Api<MemberCluster> = Api::all(home.clone());
    let deadline = Instant::now() + MEMBERS_READY_TIMEOUT;
    loop {
        let waiting: Vec<String> = match api.list(&Default::default()).await {
            Ok(list) => names
                .iter()
                .filter_map(|name| {
                    let member = list.items.iter().find(|m| m.name_any() == *name);
                    let why = match member {
                        Some(m) => progress::member_not_ready(m)?,
                        None => "not registered".to_string(),
                    };
                    Some(format!("{name}: {why}"))
                })
                .collect(),
            Err(e) => vec![format!("listing MemberClusters: {e}")],
        };
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DemoError::MembersNotReady {
                seconds: MEMBERS_READY_TIMEOUT.as_secs(),
                detail: waiting.join("; "),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The namespaces the jobs name, created when missing.
async fn ensure_namespaces(home: &Client, jobs: &[DemoJob]) -> Result<(), DemoError> {
    let api: Api<Namespace> = Api::all(home.clone());
    let namespaces: BTreeSet<&str> = jobs.iter().map(|j| j.key.namespace.as_str()).collect();
    for namespace in namespaces {
        let body =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        api.patch(
            namespace,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(&body),
        )
        .await
        .map_err(|source| DemoError::Namespace {
            namespace: namespace.to_string(),
            source,
        })?;
    }
    Ok(())
}

/// Submits the jobs one by one and follows them through a watch on home
/// until each has settled or timed out.
async fn follow(
    home: &Client,
    plan: &Plan<'_>,
    out: &mut Output,
    started: Instant,
    header: &str,
) -> Result<Tracker, DemoError> {
    let mut tracker = Tracker::new(
        plan.jobs
            .iter()
            .map(|j| (j.key.clone(), j.expected))
            .collect(),
        plan.options.job_timeout,
        PACE,
    );
    let all: Api<TensorFlowTrainingJob> = Api::all(home.clone());
    let mut events = watcher(all, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut lines = Vec::new();
    loop {
        let now = started.elapsed();
        while let Some(index) = tracker.next_submission(now) {
            let Some(job) = plan.jobs.get(index) else {
                break;
            };
            let api: Api<TensorFlowTrainingJob> = Api::namespaced(home.clone(), &job.key.namespace);
            let line = match api.create(&PostParams::default(), &job.job).await {
                Ok(_) => tracker.submitted(index, now),
                Err(e) => tracker.not_submitted(index, now, api_message(e)),
            };
            lines.extend(line);
        }
        lines.extend(tracker.expire(now));
        out.progress(&tracker, &lines, header, now);
        lines.clear();
        if tracker.done() {
            return Ok(tracker);
        }
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job))) => {
                    lines = tracker.observe(&job, started.elapsed());
                }
                Some(Ok(_)) => {}
                // The watcher backs off and retries; a job that stops
                // changing meanwhile runs into its deadline.
                Some(Err(e)) => tracing::debug!(error = %e, "watching the jobs failed; retrying"),
                None => return Err(DemoError::WatchEnded),
            },
            _ = ticker.tick() => {}
        }
    }
}

/// The API server's own message when there is one: it says what is wrong
/// with the job.
fn api_message(error: kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message,
        other => other.to_string(),
    }
}

/// Standard output: a table redrawn in place on a terminal, one line per
/// change otherwise. Write errors (a closed pipe) are ignored: there is no
/// one left to tell.
struct Output {
    terminal: bool,
    width: usize,
    /// Lines of the table drawn last, to move back over.
    drawn: usize,
}

impl Output {
    fn new() -> Output {
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|c| *c > 20)
            .unwrap_or(DEFAULT_COLUMNS);
        Output {
            terminal: std::io::stdout().is_terminal(),
            // One column spare: a line filling the last column makes some
            // terminals wrap, and the redraw would miscount.
            width: columns - 1,
            drawn: 0,
        }
    }

    fn write(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }

    fn say(&self, text: &str) {
        self.write(&format!("{text}\n"));
    }

    fn progress(
        &mut self,
        tracker: &Tracker,
        lines: &[progress::Line],
        header: &str,
        now: Duration,
    ) {
        if self.terminal {
            let header = format!("{header} · {}", progress::seconds(now));
            let frame = tracker.live(&header, now, self.width);
            self.write(&progress::redraw(self.drawn, &frame));
            self.drawn = frame.len();
        } else {
            for line in lines {
                self.say(&line.to_string());
            }
        }
    }

    /// The table drawn last stays; what follows goes under it.
    fn end_progress(&mut self) {
        self.drawn = 0;
    }
}
