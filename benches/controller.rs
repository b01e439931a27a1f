//! The controller end to end, in a release build: `cargo bench --bench controller`.
//! Simulated clusters and the controller run in this process and meet over
//! loopback HTTP, as in `tfjob-federator demo`; jobs are submitted through
//! the API and followed through a watch on home.
//!
//! 1. Single cluster (home only, 50 nodes): `CONTROLLER_BENCH_JOBS` jobs
//!    (default 1,000) of 1 chief + 3 workers, cpu requests only, submitted
//!    by 4 concurrent clients as fast as they go.
//! 2. Federated (home + 2 members, home a target too): `CONTROLLER_BENCH_FEDERATED_JOBS`
//!    jobs (default 300) of 1 chief + 7 workers with 1 GPU each, Pack
//!    strategy, on 30 nodes of 8 GPUs per cluster: room for about a third
//!    of the jobs at a time, so that the rest wait for capacity.
//!
//! Every replica stays Pending 0.1 s and runs 1 s. The controller runs with
//! `ControllerConfig::default()`. Numbers come from a watch on home and from
//! the controller's own metrics (its Prometheus text); the process exits
//! non-zero when a job does not succeed. `RUST_LOG` sets the log level
//! (default warn, on stderr).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube_sim::{self as sim, NodeShape, RunningCluster, SimOptions};
use serde_json::{Value, json};
use tfjob_federator::api::{
    JobPhase, MemberCluster, TensorFlowTrainingJob, TensorFlowTrainingJobStatus,
};
use tfjob_federator::config::ControllerConfig;
use tfjob_federator::demo::progress;
use tfjob_federator::telemetry::Metrics;
use tfjob_federator::{controller, join};

const NAMESPACE: &str = "default";
/// Concurrent submitting clients, each with a connection of its own.
const CLIENTS: usize = 4;
/// Enough for the defaults to finish several times over; a job still
/// running then is stuck.
const DEADLINE: Duration = Duration::from_secs(150);
/// Setup steps (controller sync, members Ready) take well under a second.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// After the last job ends, the watch goes on until it has been quiet this
/// long, so that trailing status writes count too: detail-only changes wait
/// up to 4 × `statusDetailIntervalMs` (4 s by default).
const SETTLE: Duration = Duration::from_secs(5);
/// How often the controller's own count of Succeeded jobs is read, to tell
/// its progress from the watch's (which lags when the CPUs are saturated).
const SAMPLE: Duration = Duration::from_millis(100);

/// What a scenario runs.
struct Scenario {
    title: String,
    /// Member clusters besides home.
    members: usize,
    nodes: NodeShape,
    jobs: usize,
    job: fn(&str) -> TensorFlowTrainingJob,
    federated: bool,
}

/// One replica type of a bench job; every replica is Pending 0.1 s and runs 1 s.
fn replica_spec(replica_type: &str, replicas: i32, resources: Value) -> Value {
    json!({
        "type": replica_type,
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": {
                "sim.federation.tfjob.io/pending-seconds": "0.1",
                "sim.federation.tfjob.io/run-seconds": "1",
            }},
            "spec": {"containers": [{
                "name": "tensorflow",
                "image": "tensorflow/tensorflow:2.15.0",
                "command": ["python", "/app/train.py"],
                "resources": resources,
            }]},
        },
    })
}

fn job_of(name: &str, spec: Value) -> TensorFlowTrainingJob {
    serde_json::from_value(json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }))
    .expect("the bench job is a valid TensorFlowTrainingJob")
}

/// 1 chief + 3 workers asking for cpu only.
fn cpu_job(name: &str) -> TensorFlowTrainingJob {
    let cpu = json!({"requests": {"cpu": "100m"}});
    job_of(
        name,
        json!({"replicaSpecs": [replica_spec("chief", 1, cpu.clone()), replica_spec("worker", 3, cpu)]}),
    )
}

/// 1 chief (cpu) + 7 workers with 1 GPU each, packed.
fn gpu_job(name: &str) -> TensorFlowTrainingJob {
    let chief = json!({"requests": {"cpu": "1"}});
    let worker =
        json!({"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}});
    job_of(
        name,
        json!({
            "scheduler": {"federation": {"strategy": "Pack"}},
            "replicaSpecs": [replica_spec("chief", 1, chief), replica_spec("worker", 7, worker)],
        }),
    )
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let single = env_count("CONTROLLER_BENCH_JOBS", 1_000);
    let federated = env_count("CONTROLLER_BENCH_FEDERATED_JOBS", 300);
    let scenarios = [
        Scenario {
            title: format!(
                "single cluster: {single} jobs × 4 replicas (1 chief + 3 workers, 100m cpu each), home only, 50 nodes"
            ),
            members: 0,
            nodes: NodeShape {
                count: 50,
                ..Default::default()
            },
            jobs: single,
            job: cpu_job,
            federated: false,
        },
        // 30 nodes × 8 GPUs hold 34 jobs of 7 GPUs per cluster, 102 at a
        // time in all: most jobs are placed as they come, the rest wait
        // for capacity.
        Scenario {
            title: format!(
                "federated: {federated} jobs × 8 replicas (1 chief + 7 workers with 1 GPU each), Pack, home + 2 members, 30 nodes × 8 GPUs each"
            ),
            members: 2,
            nodes: NodeShape {
                count: 30,
                gpus: 8,
                ..Default::default()
            },
            jobs: federated,
            job: gpu_job,
            federated: true,
        },
    ];
    let mut passed = true;
    for scenario in scenarios.iter().filter(|s| s.jobs > 0) {
        passed &= run(scenario);
    }
    if !passed {
        std::process::exit(1);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

/// Runs one scenario and prints its block; true when every job succeeded.
///
/// The clusters run on one runtime and the controller in an actix System
/// on another, as in `demo`: the controller's is dropped first (its actors,
/// watches and connections with it), then the clusters stop, so the
/// controller never sees them vanish. The submitting and watching clients
/// get a third: the System runs every actor on the thread that drives it,
/// and a watch served there would see events late whenever the actors are
/// busy, as users of the controller never do.
fn run(scenario: &Scenario) -> bool {
    let sim_runtime = runtime();
    let client_runtime = runtime();
    let options = SimOptions {
        nodes: scenario.nodes.clone(),
        ..Default::default()
    };
    let clusters: Vec<RunningCluster> = sim_runtime.block_on(async {
        let mut clusters = Vec::new();
        for name in sim::cluster_names(scenario.members + 1) {
            clusters.push(
                sim::start_cluster(&name, &options)
                    .await
                    .expect("a simulated cluster starts"),
            );
        }
        clusters
    });
    let kubeconfigs: Vec<(String, String)> = clusters
        .iter()
        .map(|c| (c.name.clone(), c.kubeconfig()))
        .collect();
    let controller_runtime = runtime();
    let system = actix::System::with_tokio_rt(move || controller_runtime);
    let passed = system.block_on(drive(scenario, &kubeconfigs, client_runtime.handle()));
    drop(system);
    drop(client_runtime);
    sim_runtime.block_on(async {
        for cluster in clusters {
            cluster.stop().await;
        }
    });
    passed
}

async fn kube_config(kubeconfig: &str) -> kube::Config {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("the kubeconfig parses");
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("the kubeconfig is usable")
}

async fn client(kubeconfig: &str) -> kube::Client {
    kube::Client::try_from(kube_config(kubeconfig).await).expect("the client builds")
}

/// Polls `missing` until it names nothing missing; panics after `SETUP_TIMEOUT`.
async fn wait_until<F, Fut>(what: &str, mut missing: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let Some(why) = missing().await else { return };
        assert!(Instant::now() < deadline, "{what}: {why}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sets up the controller, runs the jobs (the clients on `clients`), prints the block.
async fn drive(
    scenario: &Scenario,
    kubeconfigs: &[(String, String)],
    clients: &tokio::runtime::Handle,
) -> bool {
    let ((_, home_kubeconfig), members) =
        kubeconfigs.split_first().expect("there is a home cluster");
    join::register_members(home_kubeconfig, members)
        .await
        .expect("the CRDs install and the members register");
    let running = controller::start(
        kube_config(home_kubeconfig).await,
        ControllerConfig::default(),
    )
    .await
    .expect("the controller starts");
    let readiness = running.readiness();
    wait_until("the controller syncs", || {
        let missing = readiness.check().err();
        async move { missing }
    })
    .await;
    let member_api: Api<MemberCluster> = Api::all(client(home_kubeconfig).await);
    let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    wait_until("the members turn Ready", || {
        let (api, names) = (member_api.clone(), names.clone());
        async move {
            let list = match api.list(&Default::default()).await {
                Ok(list) => list,
                Err(e) => return Some(format!("listing MemberClusters: {e}")),
            };
            names.iter().find_map(|name| {
                match list
                    .items
                    .iter()
                    .find(|m| m.metadata.name.as_ref() == Some(name))
                {
                    Some(member) => {
                        progress::member_not_ready(member).map(|why| format!("{name}: {why}"))
                    }
                    None => Some(format!("{name}: not registered")),
                }
            })
        }
    })
    .await;

    let outcome = clients
        .spawn(follow(
            scenario.jobs,
            scenario.job,
            home_kubeconfig.clone(),
            running.metrics(),
        ))
        .await
        .expect("the clients finish");
    let metrics = running.metrics().encode().expect("the metrics encode");
    report(scenario, &outcome, &metrics)
}

/// What the watch saw of one job.
#[derive(Default)]
struct Seen {
    status: Option<TensorFlowTrainingJobStatus>,
    /// Events whose status differs from the one before: status writes (a
    /// write that leaves the stored object as it was makes no event, as on
    /// Kubernetes, so it is not counted here).
    status_writes: usize,
    /// Status writes seen after the one that ended the job.
    writes_after_end: usize,
    running: Option<Instant>,
    ended: Option<(JobPhase, Instant)>,
}

struct Outcome {
    /// Submission start of each job, by name.
    submitted: HashMap<String, Instant>,
    not_submitted: Vec<String>,
    jobs: HashMap<String, Seen>,
    first_submit: Instant,
    last_submit_done: Instant,
    /// When the watch saw the last job end (or the deadline passed).
    finished: Instant,
    /// When the controller's gauge first counted every job Succeeded.
    all_written: Option<Instant>,
    /// Re-lists of the watch after the first: events may have been missed.
    relists: usize,
}

fn job_name(n: usize) -> String {
    format!("bench-{n:05}")
}

/// Submits `total` jobs shaped by `shape` from `CLIENTS` clients and
/// follows them through a watch on home until each has ended, then for
/// `SETTLE`; meanwhile samples the controller's `metrics`.
async fn follow(
    total: usize,
    shape: fn(&str) -> TensorFlowTrainingJob,
    home_kubeconfig: String,
    metrics: Arc<Metrics>,
) -> Outcome {
    let api: Api<TensorFlowTrainingJob> =
        Api::namespaced(client(&home_kubeconfig).await, NAMESPACE);
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    // The watch is established before the first submission.
    loop {
        match events.next().await {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(_) => {}
            None => panic!("the job watch ended before it started"),
        }
    }

    let next = Arc::new(AtomicUsize::new(0));
    let mut submitters = Vec::new();
    for _ in 0..CLIENTS {
        submitters.push(Api::<TensorFlowTrainingJob>::namespaced(
            client(&home_kubeconfig).await,
            NAMESPACE,
        ));
    }
    let first_submit = Instant::now();
    let tasks: Vec<_> = submitters
        .into_iter()
        .map(|api| {
            let next = next.clone();
            tokio::spawn(async move {
                let mut submitted = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        return submitted;
                    }
                    let name = job_name(n);
                    let at = Instant::now();
                    let result = api.create(&PostParams::default(), &shape(&name)).await;
                    let error = result.err().map(|e| e.to_string());
                    submitted.push((name, at, Instant::now(), error));
                }
            })
        })
        .collect();

    let mut jobs: HashMap<String, Seen> = HashMap::new();
    let mut relists = 0;
    let mut ended = 0;
    let deadline = first_submit + DEADLINE;
    let mut finished = None;
    let mut all_written = None;
    let mut sampler = tokio::time::interval(SAMPLE);
    let mut last_event = first_submit;
    loop {
        // Until every job ended: up to the deadline; then until SETTLE passes quietly.
        let until = match finished {
            None => deadline,
            Some(_) => last_event + SETTLE,
        };
        let event = tokio::select! {
            event = events.next() => event,
            _ = sampler.tick(), if all_written.is_none() => {
                let text = metrics.encode().unwrap_or_default();
                let succeeded = sample(&text, "tfjob_federator_jobs{phase=\"Succeeded\"}");
                if succeeded.is_some_and(|n| n >= total as f64) {
                    all_written = Some(Instant::now());
                }
                continue;
            }
            _ = tokio::time::sleep_until(until.into()) => break,
        };
        last_event = Instant::now();
        let job = match event {
            Some(Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job))) => job,
            Some(Ok(watcher::Event::Init)) => {
                relists += 1;
                continue;
            }
            Some(Ok(_)) => continue,
            // The watcher backs off and retries; a missed change shows in
            // the next event or the job runs into the deadline.
            Some(Err(e)) => {
                tracing::warn!(error = %e, "watching the jobs failed; retrying");
                continue;
            }
            None => break,
        };
        let Some(name) = job.metadata.name.clone() else {
            continue;
        };
        let seen = jobs.entry(name).or_default();
        if job.status != seen.status {
            seen.status_writes += 1;
            if seen.ended.is_some() {
                seen.writes_after_end += 1;
            }
        }
        let now = last_event;
        let phase = job.status.as_ref().and_then(|s| s.phase);
        if phase == Some(JobPhase::Running) && seen.running.is_none() {
            seen.running = Some(now);
        }
        if let Some(phase) = phase.filter(|p| p.is_terminal())
            && seen.ended.is_none()
        {
            seen.ended = Some((phase, now));
            ended += 1;
            if ended == total {
                finished = Some(now);
            }
        }
        seen.status = job.status;
    }
    let finished = finished.unwrap_or_else(Instant::now);

    let mut submitted = HashMap::new();
    let mut not_submitted = Vec::new();
    let mut last_submit_done = first_submit;
    for task in tasks {
        for (name, at, done, error) in task.await.expect("a submitting client finishes") {
            last_submit_done = last_submit_done.max(done);
            match error {
                Some(error) => not_submitted.push(format!("{name}: {error}")),
                None => {
                    submitted.insert(name, at);
                }
            }
        }
    }
    Outcome {
        submitted,
        not_submitted,
        jobs,
        first_submit,
        last_submit_done,
        finished,
        all_written,
        relists,
    }
}

/// The value of one series (name and labels as exported) in Prometheus text.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// A histogram read back from Prometheus text.
struct Histogram {
    /// (upper bound, cumulative count), ascending; the last is +Inf.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    fn read(metrics: &str, name: &str) -> Histogram {
        let prefix = format!("{name}_bucket{{le=\"");
        let buckets = metrics
            .lines()
            .filter_map(|line| {
                let (le, count) = line.strip_prefix(&prefix)?.split_once("\"} ")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, count.trim().parse().ok()?))
            })
            .collect();
        Histogram {
            buckets,
            sum: sample(metrics, &format!("{name}_sum")).unwrap_or(0.0),
            count: sample(metrics, &format!("{name}_count")).unwrap_or(0.0),
        }
    }

    /// As Prometheus' histogram_quantile: linear within the bucket holding
    /// the rank; the highest finite bound when the rank is in +Inf.
    fn quantile(&self, q: f64) -> f64 {
        let rank = q * self.count;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(upper, cumulative) in &self.buckets {
            if cumulative >= rank {
                if upper.is_infinite() {
                    return lower;
                }
                let share = if cumulative > below {
                    (rank - below) / (cumulative - below)
                } else {
                    0.0
                };
                return lower + (upper - lower) * share;
            }
            (lower, below) = (upper, cumulative);
        }
        lower
    }

    fn mean(&self) -> f64 {
        if self.count > 0.0 {
            self.sum / self.count
        } else {
            0.0
        }
    }
}

/// The q-quantile (nearest rank) of sorted values.
fn nearest_rank(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn seconds_as_ms(s: f64) -> String {
    format!("{:.0} ms", s * 1000.0)
}

fn seconds_as_us(s: f64) -> String {
    format!("{:.0} µs", s * 1_000_000.0)
}

/// Peak resident set of the process (VmHWM), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Prints the scenario's block; true when every job was submitted and succeeded.
fn report(scenario: &Scenario, outcome: &Outcome, metrics: &str) -> bool {
    let n = scenario.jobs;
    println!("{}", scenario.title);
    let succeeded = outcome
        .jobs
        .values()
        .filter(|s| matches!(s.ended, Some((JobPhase::Succeeded, _))))
        .count();
    let wall = outcome.finished - outcome.first_submit;
    println!(
        "  wall time, first submit until the watch saw every job end: {:.1} s; {succeeded}/{n} Succeeded",
        wall.as_secs_f64(),
    );
    let written = outcome.all_written.map_or("never".to_string(), |at| {
        format!("{:.1} s", (at - outcome.first_submit).as_secs_f64())
    });
    println!(
        "  (the controller counted all {n} Succeeded after {written}, sampled every {} ms; submitting took {:.1} s from {CLIENTS} clients)",
        SAMPLE.as_millis(),
        (outcome.last_submit_done - outcome.first_submit).as_secs_f64(),
    );
    println!(
        "  throughput: {:.1} jobs/s, {:.0} replicas/s",
        n as f64 / wall.as_secs_f64(),
        (n * replicas_of(scenario)) as f64 / wall.as_secs_f64(),
    );

    let mut to_running: Vec<Duration> = outcome
        .submitted
        .iter()
        .filter_map(|(name, at)| Some(outcome.jobs.get(name)?.running? - *at))
        .collect();
    to_running.sort();
    let unseen = outcome.submitted.len() - to_running.len();
    let unseen_note = if unseen > 0 {
        format!(" ({unseen} jobs never seen Running)")
    } else {
        String::new()
    };
    println!(
        "  submit to Running, create request to watch event: p50 {}, p95 {}, p99 {}, max {}{unseen_note}",
        ms(nearest_rank(&to_running, 0.50)),
        ms(nearest_rank(&to_running, 0.95)),
        ms(nearest_rank(&to_running, 0.99)),
        ms(to_running.last().copied().unwrap_or_default()),
    );
    let histogram = Histogram::read(metrics, "tfjob_federator_job_submit_to_running_seconds");
    println!(
        "  submit to Running, controller histogram (from the whole-second creationTimestamp, {:.0} observations): p50 {}, p95 {}, p99 {}, mean {}",
        histogram.count,
        seconds_as_ms(histogram.quantile(0.50)),
        seconds_as_ms(histogram.quantile(0.95)),
        seconds_as_ms(histogram.quantile(0.99)),
        seconds_as_ms(histogram.mean()),
    );

    let writes_total = sample(metrics, "tfjob_federator_status_writes_total").unwrap_or(0.0);
    let per_job: Vec<usize> = outcome.jobs.values().map(|s| s.status_writes).collect();
    let after_end: usize = outcome.jobs.values().map(|s| s.writes_after_end).sum();
    println!(
        "  status writes per job: mean {:.2} (status_writes_total {writes_total:.0} / {n}); seen by the watch: mean {:.2}, max {}, {after_end} after a job ended",
        writes_total / n.max(1) as f64,
        per_job.iter().sum::<usize>() as f64 / per_job.len().max(1) as f64,
        per_job.iter().max().copied().unwrap_or(0),
    );
    if outcome.relists > 0 {
        println!(
            "  note: the watch re-listed {} times; it may have missed status changes",
            outcome.relists
        );
    }

    if scenario.federated {
        let placement = Histogram::read(metrics, "tfjob_federator_placement_duration_seconds");
        let attempts = |outcome: &str| {
            sample(
                metrics,
                &format!("tfjob_federator_placement_attempts_total{{outcome=\"{outcome}\"}}"),
            )
            .unwrap_or(0.0)
        };
        println!(
            "  placement decision: p50 {}, p95 {} (interpolated in ×4 buckets), mean {}; {:.0} decisions taking {:.2} s in all: {:.0} placed, {:.0} waiting, {:.0} unplaceable",
            seconds_as_us(placement.quantile(0.50)),
            seconds_as_us(placement.quantile(0.95)),
            seconds_as_us(placement.mean()),
            placement.count,
            placement.sum,
            attempts("placed"),
            attempts("waiting"),
            attempts("unplaceable"),
        );
        println!("  jobs by cluster: {}", jobs_by_cluster(outcome));
    } else if let Some(mib) = peak_rss_mib() {
        println!(
            "  peak RSS (VmHWM) of the whole process, simulated cluster included: {mib:.0} MiB"
        );
    }

    let failures = failures(scenario, outcome);
    for line in failures.iter().take(20) {
        println!("  FAILED {line}");
    }
    if failures.len() > 20 {
        println!("  … and {} more", failures.len() - 20);
    }
    println!();
    failures.is_empty()
}

fn replicas_of(scenario: &Scenario) -> usize {
    (scenario.job)("count")
        .spec
        .replica_specs
        .iter()
        .map(|s| usize::try_from(s.replicas).unwrap_or(0))
        .sum()
}

/// Where each job's replicas ran, from its last status: one cluster, or split.
fn jobs_by_cluster(outcome: &Outcome) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for seen in outcome.jobs.values() {
        let clusters: BTreeSet<&str> = seen
            .status
            .iter()
            .flat_map(|s| &s.tasks)
            .flat_map(|t| &t.replica_status)
            .filter_map(|r| r.cluster.as_deref())
            .collect();
        let key = match clusters.len() {
            0 => "unknown".to_string(),
            1 => clusters.into_iter().collect(),
            _ => "split".to_string(),
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
        .iter()
        .map(|(cluster, n)| format!("{cluster} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every job that was not submitted or did not succeed, and why.
fn failures(scenario: &Scenario, outcome: &Outcome) -> Vec<String> {
    let mut failures = outcome.not_submitted.clone();
    for n in 0..scenario.jobs {
        let name = job_name(n);
        if !outcome.submitted.contains_key(&name) {
            continue;
        }
        let seen = outcome.jobs.get(&name);
        let phase = seen
            .and_then(|s| s.status.as_ref())
            .and_then(|s| s.phase)
            .map_or("no phase", JobPhase::as_str);
        if phase == JobPhase::Succeeded.as_str() {
            continue;
        }
        let condition = seen
            .and_then(|s| s.status.as_ref())
            .and_then(|s| s.conditions.last())
            .map(|c| {
                format!(
                    "{:?} {:?} {}: {}",
                    c.condition_type,
                    c.status,
                    c.reason.as_deref().unwrap_or(""),
                    c.message.as_deref().unwrap_or("")
                )
            })
            .unwrap_or_default();
        failures.push(format!("{name}: {phase}; last condition {condition}"));
    }
    failures
}
