//! The controller end to end, each part in a process of its own:
//! `cargo bench --bench controller` (the book's docs/src/benchmarks/controller.md
//! says what every figure means and how it is measured).
//!
//! Per workload, started fresh:
//! - the clusters: `tfjob-federator sim --register …` (the binary cargo
//!   built with this bench's profile: release under `cargo bench`, debug
//!   under CI's `cargo test --bench controller` smoke run) or, with `BENCH_GROUND=real`,
//!   `hack/real-clusters` with the same flags; ready once `DIR/ready` exists;
//! - the ground's raw ceiling: pod creates/s from 8 clients straight to
//!   home, before the controller starts (pods no scheduler takes; deleted after);
//! - the controller: `tfjob-federator run --kubeconfig DIR/home.kubeconfig
//!   --metrics-addr 127.0.0.1:PORT [--config $BENCH_CONTROLLER_CONFIG]`,
//!   killed when the workload ends;
//! - the load generator, here: 4 clients submitting jobs as fast as they
//!   go, or one job every 1/rate seconds; watches on home (jobs) and on every
//!   cluster (the managed pods) timestamp every event as it arrives.
//!
//! Workloads (`BENCH_WORKLOADS=a,b,c,d,e,f,h`; `b` is `b-pack` and `b-spread`, `h`
//! is `h-plain` and `h-large`):
//! (a) 1,000 jobs × 4 replicas on home alone, as fast as possible;
//! (b) 1,000 jobs × 8 replicas (1 GPU each) over home + 3 members, Pack and
//!     Spread, room for all at once, as fast as possible;
//! (c) 50 jobs/s for 60 s, 8 replicas, Spread, home + 3 members;
//! (d) 10,000 jobs × 8 replicas that keep running: memory, idle CPU;
//! (e) placement: home + 100 members × 50 nodes, 1,000 jobs of 8 GPUs where
//!     about 600 fit at a time; the rest are placed as jobs end;
//! (f) a backlog: 2,000 jobs × 8 replicas (d's shape) created while no
//!     controller runs, then the controller started: time to all Running
//!     against the ceiling, peak and after-drain RSS against the RSS of the
//!     same jobs submitted with the controller running (a run of its own);
//! (h) one job at the size bound validation enforces, its pods kept
//!     running, with a plain template (`h-plain`) and the largest template
//!     (`h-large`): the controller's peak memory against the chart's limit;
//! (g) not in the default list (it needs Kueue, which CI does not build):
//!     the comparison with Kueue MultiKueue on the real ground, whatever
//!     `BENCH_GROUND` says (`BENCH_WORKLOADS=g`, or any of `g-direct`,
//!     `g-ours`, `g-kueue` = both Kueue configurations, `g-kueue-shipped`,
//!     `g-kueue-lifted`). Four variants, each on fresh real clusters (home +
//!     2 members, the same nodes for all: room for every job's pods on any
//!     one cluster, so none waits for capacity whatever its balance): 200
//!     jobs (`BENCH_G_JOBS`) of 8 pods of 100m cpu that keep running,
//!     submitted as fast as the 4 clients go:
//!     `g-direct`, no dispatcher: the load generator creates each job's 8
//!     pods itself (8 creates at once), straight on a member, member-1 and
//!     member-2 job by job: the ground's limit;
//!     `g-ours`, our controller: TensorFlowTrainingJobs of 1 chief + 7
//!     workers, Pack, `clusterNames` the two members and `allowSplit: false`
//!     (whole jobs, never on home);
//!     `g-kueue-shipped` and `g-kueue-lifted`: `hack/kueue-up --config
//!     shipped|lifted --foreground` (Kueue v0.17.0 out of cluster: a
//!     MultiKueue manager on home, a Kueue on each member; its header says
//!     what "lifted" lifts and what v0.17.0 cannot), then batch/v1 Jobs on
//!     home (parallelism = completions = 8, the label
//!     `kueue.x-k8s.io/queue-name=bench`), their pods grouped on the members
//!     by `batch.kubernetes.io/job-name`. Kueue's binary must exist
//!     (`hack/build-kueue`); the bench does not build it.
//!     Figures: jobs/s (jobs ÷ first submit → the last job's pods all
//!     Running), submit → all the job's pods Running p50/p95/p99, the
//!     dispatcher's CPU (our controller; Kueue's three processes) and peak
//!     RSS, the API servers' CPU in total and per job with each member's
//!     share, over first submit → 5 s after the last job's pods all run;
//!     the API servers' writes per job from every client (home's, the
//!     members'), by resource and verb, from their `apiserver_request_total`;
//!     then a comparison block with the issue's acceptance criteria.
//!
//! Sizes: `BENCH_SCALE` (a factor on every job count and on (c)'s duration),
//! `BENCH_A_JOBS`, `BENCH_B_JOBS`, `BENCH_B_MEMBERS` (3), `BENCH_C_RATE`, `BENCH_C_SECONDS`,
//! `BENCH_D_JOBS`, `BENCH_E_JOBS`, `BENCH_F_JOBS`, `BENCH_G_JOBS`, `BENCH_H_WORKERS`, `BENCH_H_PS`,
//! `BENCH_H_TEMPLATE_BYTES`, `BENCH_E_MEMBERS`, `BENCH_E_NODES`,
//! `BENCH_IDLE_SECONDS`, `BENCH_CEILING_PODS`, `BENCH_DEADLINE_SECONDS`;
//! `BENCH_SMOKE=1` makes every workload tiny (CI); `BENCH_CONTROLLER_PREFIX`
//! runs the controller under a profiler. The process exits
//! non-zero when a job does not reach its expected phase in time, a
//! submission fails, or the controller or the clusters die.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tfjob_federator::api::{JobPhase, MemberCluster, TensorFlowTrainingJob};
use tfjob_federator::demo::progress;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NAMESPACE: &str = "default";
/// The size bound of one job the door enforces (docs/src/api/door.md):
/// replicas over all types, and template bytes × replicas.
const BOUND_REPLICAS: usize = tfjob_federator::api::MAX_TOTAL_REPLICAS as usize;
const BOUND_TEMPLATE_BYTES: usize =
    tfjob_federator::api::MAX_TEMPLATE_BYTES_TIMES_REPLICAS / BOUND_REPLICAS;
/// The chart's memory limit for the controller, and the room a job at the
/// bound must leave in it for other jobs (docs/src/api/door.md: about 2,000 live jobs of
/// 8 replicas at (d)'s 0.1 MiB per job).
const CHART_MEMORY_LIMIT_MIB: f64 = 1024.0;
const ROOM_FOR_OTHERS_MIB: f64 = 256.0;
/// Concurrent submitting clients, each with a connection of its own.
const SUBMITTERS: usize = 4;
/// Concurrent clients of the ceiling measurement (as `benches/sim.rs`).
const CEILING_CLIENTS: usize = 8;
const MANAGED: &str = "app.kubernetes.io/managed-by=tfjob-federator";
const JOB_NAME_LABEL: &str = "federation.tfjob.io/job-name";
const CEILING_LABEL: &str = "bench.tfjob.io/ceiling";
/// (g-direct): the job a pod the load generator created belongs to.
const DIRECT_JOB_LABEL: &str = "bench.tfjob.io/job";
/// (g-kueue-*): the label Kubernetes' Job controller puts on a Job's pods.
const BATCH_JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// (g-kueue-*): the LocalQueue `hack/kueue-up` makes in namespace default.
const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// (g): pods per job.
const G_PODS: usize = 8;
/// GPUs per simulated node in the GPU workloads (b, c): few nodes, room for
/// every replica.
const GPUS_PER_NODE: u32 = 32;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ground {
    Sim,
    Real,
}

enum Load {
    /// `SUBMITTERS` clients, each submitting its next job once the last one is answered.
    AsFastAsPossible,
    /// One job every 1/`per_second` seconds (answers not awaited), for `jobs` jobs.
    Rate { per_second: f64 },
}

/// The phase a job must reach for the workload to pass.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Succeeded,
    /// Running with every pod up: the pods keep running (workload d).
    Running,
    /// Every pod of the job Running, whatever made them (g: no job object
    /// of ours in `g-direct` and Kueue's variants).
    PodsRunning,
}

/// What turns the jobs of (g) into pods on the members.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dispatcher {
    /// Nothing: the load generator creates the pods on the members itself.
    Direct,
    /// Our controller.
    Ours,
    /// Kueue MultiKueue (`hack/kueue-up`), with its shipped or lifted configuration.
    Kueue(KueueConfig),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum KueueConfig {
    Shipped,
    Lifted,
}

impl KueueConfig {
    /// `hack/kueue-up --config` takes it.
    fn as_str(self) -> &'static str {
        match self {
            KueueConfig::Shipped => "shipped",
            KueueConfig::Lifted => "lifted",
        }
    }
}

impl Dispatcher {
    /// The label that selects the jobs' pods on every cluster, and whose
    /// value names the job a pod belongs to.
    fn pod_label(self) -> &'static str {
        match self {
            Dispatcher::Direct => DIRECT_JOB_LABEL,
            Dispatcher::Ours => JOB_NAME_LABEL,
            Dispatcher::Kueue(_) => BATCH_JOB_NAME_LABEL,
        }
    }
}

/// What each job of a workload looks like.
struct Shape {
    /// 1 chief + this many workers (+ `ps`).
    workers: usize,
    ps: usize,
    /// Bytes of an annotation on every template (a large template).
    padding_bytes: usize,
    /// One `nvidia.com/gpu` per replica (and 100m cpu); else 100m cpu only.
    gpu: bool,
    /// `spec.scheduler.federation.strategy`.
    strategy: Option<&'static str>,
    /// `sim.federation.tfjob.io/run-seconds` (pending 0.1 s).
    run_seconds: f64,
    /// Whole jobs on the members alone: `clusterNames` every member,
    /// `allowSplit: false`.
    members_only: bool,
}

impl Shape {
    fn replicas(&self) -> usize {
        1 + self.workers + self.ps
    }
}

/// One workload: one fresh set of clusters and one controller.
struct Workload {
    key: &'static str,
    what: &'static str,
    members: usize,
    nodes: usize,
    gpus_per_node: u32,
    jobs: usize,
    load: Load,
    shape: Shape,
    expect: Expect,
    /// (d): memory with every job live, then idle CPU.
    idle: bool,
    /// (e): the placement histogram.
    placement: bool,
    /// (f): the jobs are created before the controller starts.
    backlog: bool,
    /// Targets of the issue that apply to this workload.
    targets: Targets,
    /// (g): the comparison's dispatcher, on the real ground whatever
    /// `BENCH_GROUND` says.
    compare: Option<Dispatcher>,
}

#[derive(Default)]
struct Targets {
    dispatch_ratio: bool,
    /// Seconds from the first submit until the last job's pods all exist.
    all_pods_created_s: Option<f64>,
    submit_to_pods_p99_ms: Option<f64>,
    pod_to_job_p99_ms: Option<f64>,
    writes_per_job: Option<f64>,
    /// (f): drain ≥ 0.5 of the ceiling, peak RSS ≤ 1.2 × the steady state.
    drain: bool,
}

struct Settings {
    ground: Ground,
    smoke: bool,
    scale: f64,
    ceiling_pods: usize,
    idle: Duration,
    config: Option<PathBuf>,
    deadline: Option<Duration>,
}

/// `name` parsed, if set; an unparsable value is an error, not a default.
fn env_parse<T: FromStr>(name: &str) -> anyhow::Result<Option<T>> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| anyhow::anyhow!("{name}={text:?} does not parse")),
        _ => Ok(None),
    }
}

impl Settings {
    fn from_env() -> anyhow::Result<Settings> {
        let ground = match std::env::var("BENCH_GROUND").as_deref() {
            Ok("real") => Ground::Real,
            Ok("sim") | Ok("") | Err(_) => Ground::Sim,
            Ok(other) => bail!("BENCH_GROUND={other:?}: sim (default) or real"),
        };
        let smoke = std::env::var("BENCH_SMOKE").is_ok_and(|v| v != "0" && !v.is_empty());
        let scale = env_parse::<f64>("BENCH_SCALE")?.unwrap_or(1.0);
        anyhow::ensure!(scale > 0.0, "BENCH_SCALE must be positive");
        let ceiling_pods = env_parse("BENCH_CEILING_PODS")?.unwrap_or(if smoke {
            100
        } else {
            ((2_000.0 * scale.min(1.0)) as usize).max(100)
        });
        let idle = Duration::from_secs_f64(env_parse("BENCH_IDLE_SECONDS")?.unwrap_or(if smoke {
            2.0
        } else {
            30.0
        }));
        Ok(Settings {
            ground,
            smoke,
            scale,
            ceiling_pods,
            idle,
            config: env_parse::<PathBuf>("BENCH_CONTROLLER_CONFIG")?,
            deadline: env_parse::<f64>("BENCH_DEADLINE_SECONDS")?.map(Duration::from_secs_f64),
        })
    }

    /// `var` if set, else the smoke size, else `full` × `BENCH_SCALE` (at least 1).
    fn count(&self, var: &str, full: usize, smoke: usize) -> anyhow::Result<usize> {
        Ok(match env_parse::<usize>(var)? {
            Some(n) => n,
            None if self.smoke => smoke,
            None => ((full as f64 * self.scale).round() as usize).max(1),
        })
    }

    fn workloads(&self) -> anyhow::Result<Vec<Workload>> {
        let selected: Vec<String> = std::env::var("BENCH_WORKLOADS")
            .unwrap_or_else(|_| "a,b,c,d,e,f,h".into())
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect();
        const KEYS: [&str; 17] = [
            "a",
            "b",
            "b-pack",
            "b-spread",
            "c",
            "d",
            "e",
            "f",
            "g",
            "g-direct",
            "g-ours",
            "g-kueue",
            "g-kueue-shipped",
            "g-kueue-lifted",
            "h",
            "h-plain",
            "h-large",
        ];
        for key in &selected {
            anyhow::ensure!(
                KEYS.contains(&key.as_str()),
                "BENCH_WORKLOADS: unknown workload {key:?} ({})",
                KEYS.join(", ")
            );
        }
        let wanted = |key: &str| {
            selected.iter().any(|s| {
                s == key
                    || key
                        .strip_prefix(s.as_str())
                        .is_some_and(|r| r.starts_with('-'))
            })
        };
        let mut all = Vec::new();

        let jobs = self.count("BENCH_A_JOBS", 1_000, 10)?;
        all.push(Workload {
            key: "a",
            what: "single cluster, as fast as possible",
            members: 0,
            // 80 replicas of 100m per node at most (the default node holds 110 pods).
            nodes: (jobs * 4).div_ceil(80).clamp(2, 50),
            gpus_per_node: 4,
            jobs,
            load: Load::AsFastAsPossible,
            shape: Shape {
                workers: 3,
                gpu: false,
                strategy: None,
                ps: 0,
                padding_bytes: 0,
                run_seconds: 1.0,
                members_only: false,
            },
            expect: Expect::Succeeded,
            idle: false,
            placement: false,
            backlog: false,
            compare: None,
            targets: Targets {
                dispatch_ratio: true,
                writes_per_job: Some(16.0),
                ..Targets::default()
            },
        });

        let jobs = self.count("BENCH_B_JOBS", 1_000, 10)?;
        let members = env_parse("BENCH_B_MEMBERS")?.unwrap_or(3);
        for strategy in ["Pack", "Spread"] {
            all.push(Workload {
                key: if strategy == "Pack" {
                    "b-pack"
                } else {
                    "b-spread"
                },
                what: "federated, as fast as possible, room for every job at once",
                members,
                nodes: gpu_nodes(jobs * 8, members + 1),
                gpus_per_node: GPUS_PER_NODE,
                jobs,
                load: Load::AsFastAsPossible,
                shape: Shape {
                    workers: 7,
                    gpu: true,
                    strategy: Some(strategy),
                    ps: 0,
                    padding_bytes: 0,
                    run_seconds: 1.0,
                    members_only: false,
                },
                expect: Expect::Succeeded,
                idle: false,
                placement: false,
                backlog: false,
                compare: None,
                targets: Targets {
                    dispatch_ratio: true,
                    all_pods_created_s: Some(10.0),
                    ..Targets::default()
                },
            });
        }

        let rate =
            env_parse::<f64>("BENCH_C_RATE")?.unwrap_or(if self.smoke { 10.0 } else { 50.0 });
        let seconds = env_parse::<f64>("BENCH_C_SECONDS")?.unwrap_or(if self.smoke {
            2.0
        } else {
            60.0 * self.scale
        });
        anyhow::ensure!(rate > 0.0, "BENCH_C_RATE must be positive");
        let jobs = ((rate * seconds).round() as usize).max(1);
        all.push(Workload {
            key: "c",
            what: "sustained rate, for latency",
            members: 3,
            // A job lives about 2 s; room for 20 s worth of jobs at once.
            nodes: gpu_nodes(jobs.min((rate * 20.0).ceil() as usize) * 8, 4),
            gpus_per_node: GPUS_PER_NODE,
            jobs,
            load: Load::Rate { per_second: rate },
            shape: Shape {
                workers: 7,
                gpu: true,
                strategy: Some("Spread"),
                ps: 0,
                padding_bytes: 0,
                run_seconds: 1.0,
                members_only: false,
            },
            expect: Expect::Succeeded,
            idle: false,
            placement: false,
            backlog: false,
            compare: None,
            targets: Targets {
                submit_to_pods_p99_ms: Some(1_000.0),
                pod_to_job_p99_ms: Some(500.0),
                ..Targets::default()
            },
        });

        let jobs = self.count("BENCH_D_JOBS", 10_000, 50)?;
        all.push(Workload {
            idle: true,
            targets: Targets {
                dispatch_ratio: true,
                ..Targets::default()
            },
            ..live_jobs("d", "many live jobs: memory, then idle CPU", jobs)
        });

        let jobs = self.count("BENCH_F_JOBS", 2_000, 50)?;
        all.push(Workload {
            backlog: true,
            targets: Targets {
                drain: true,
                ..Targets::default()
            },
            ..live_jobs(
                "f",
                "a backlog: the jobs exist before the controller starts",
                jobs,
            )
        });

        let jobs = self.count("BENCH_E_JOBS", 1_000, 20)?;
        let members = env_parse("BENCH_E_MEMBERS")?.unwrap_or(if self.smoke { 5 } else { 100 });
        let nodes: usize = env_parse("BENCH_E_NODES")?.unwrap_or(if self.smoke { 5 } else { 50 });
        all.push(Workload {
            key: "e",
            what: "placement: many members, jobs wait for capacity that jobs free as they end",
            members,
            nodes,
            // At least one 8-GPU job per cluster; with 50 nodes of 1 GPU,
            // 6 per cluster.
            gpus_per_node: u32::try_from(8usize.div_ceil(nodes.max(1))).unwrap_or(8),
            jobs,
            load: Load::AsFastAsPossible,
            shape: Shape {
                workers: 7,
                gpu: true,
                strategy: Some("Pack"),
                ps: 0,
                padding_bytes: 0,
                run_seconds: 2.0,
                members_only: false,
            },
            expect: Expect::Succeeded,
            idle: false,
            placement: true,
            backlog: false,
            compare: None,
            targets: Targets::default(),
        });

        // One job at the size bound validation enforces (docs/src/api/door.md,
        // "The job-size bound"), with a plain template and with the largest one.
        // 1 chief, the rest half workers and half ps.
        let workers = self.count("BENCH_H_WORKERS", (BOUND_REPLICAS - 1).div_ceil(2), 4)?;
        let ps = self.count("BENCH_H_PS", (BOUND_REPLICAS - 1) / 2, 4)?;
        // The largest padding that keeps every template within the bound
        // (1 KiB for the rest of the template).
        let large = env_parse("BENCH_H_TEMPLATE_BYTES")?.unwrap_or(if self.smoke {
            1_000
        } else {
            BOUND_TEMPLATE_BYTES - 1_024
        });
        for (key, padding_bytes) in [("h-plain", 0), ("h-large", large)] {
            all.push(Workload {
                key,
                what: "one job at the size bound: peak memory",
                members: 0,
                nodes: (1 + workers + ps).div_ceil(100).max(2),
                gpus_per_node: 4,
                jobs: 1,
                load: Load::AsFastAsPossible,
                shape: Shape {
                    workers,
                    gpu: false,
                    strategy: None,
                    ps,
                    padding_bytes,
                    run_seconds: 86_400.0,
                    members_only: false,
                },
                expect: Expect::Running,
                idle: false,
                placement: false,
                backlog: false,
                compare: None,
                targets: Targets::default(),
            });
        }

        // (g), selected by name only (not in the default list): the
        // comparison with Kueue MultiKueue on the real ground.
        let jobs = self.count("BENCH_G_JOBS", 200, 10)?;
        for (key, dispatcher) in [
            ("g-direct", Dispatcher::Direct),
            ("g-ours", Dispatcher::Ours),
            ("g-kueue-shipped", Dispatcher::Kueue(KueueConfig::Shipped)),
            ("g-kueue-lifted", Dispatcher::Kueue(KueueConfig::Lifted)),
        ] {
            all.push(Workload {
                key,
                what: match dispatcher {
                    Dispatcher::Direct => {
                        "the ground's limit: each job's pods created straight on a member by the load generator, no dispatcher"
                    }
                    Dispatcher::Ours => {
                        "our controller: whole jobs on the members (Pack, clusterNames member-1 and member-2, allowSplit false)"
                    }
                    Dispatcher::Kueue(KueueConfig::Shipped) => {
                        "Kueue MultiKueue v0.17.0 with its shipped client settings: batch/v1 Jobs on home"
                    }
                    Dispatcher::Kueue(KueueConfig::Lifted) => {
                        "Kueue MultiKueue v0.17.0 with its limits lifted (qps -1, concurrency 50; see hack/kueue-up): batch/v1 Jobs on home"
                    }
                },
                members: 2,
                // Room for every job's pods on any one cluster (100 of a
                // node's 110 pods), whatever the dispatcher's balance:
                // no variant waits for capacity.
                nodes: (jobs * G_PODS).div_ceil(100) + 1,
                gpus_per_node: 4,
                jobs,
                load: Load::AsFastAsPossible,
                shape: Shape {
                    workers: G_PODS - 1,
                    gpu: false,
                    strategy: Some("Pack"),
                    ps: 0,
                    padding_bytes: 0,
                    run_seconds: 86_400.0,
                    members_only: true,
                },
                expect: Expect::PodsRunning,
                idle: false,
                placement: false,
                backlog: false,
                compare: Some(dispatcher),
                targets: Targets::default(),
            });
        }

        Ok(all.into_iter().filter(|w| wanted(w.key)).collect())
    }
}

/// `jobs` jobs of 8 cpu-only replicas that keep running, Spread over
/// home + 3 members (d, f).
fn live_jobs(key: &'static str, what: &'static str, jobs: usize) -> Workload {
    Workload {
        key,
        what,
        members: 3,
        // Spread: a quarter of the pods per cluster, at most 100 of the
        // 110 a node holds.
        nodes: (jobs * 8).div_ceil(4 * 100).max(2),
        gpus_per_node: 4,
        jobs,
        load: Load::AsFastAsPossible,
        shape: Shape {
            workers: 7,
            gpu: false,
            strategy: Some("Spread"),
            ps: 0,
            padding_bytes: 0,
            run_seconds: 86_400.0,
            members_only: false,
        },
        expect: Expect::Running,
        idle: false,
        placement: false,
        backlog: false,
        compare: None,
        targets: Targets::default(),
    }
}

/// Nodes per cluster for `replicas` GPU replicas over `clusters` clusters,
/// with 10 % to spare (Pack fills clusters unevenly by whole jobs).
fn gpu_nodes(replicas: usize, clusters: usize) -> usize {
    (replicas * 11 / 10)
        .div_ceil(clusters * GPUS_PER_NODE as usize)
        .max(1)
        + 1
}

impl Workload {
    /// The ground this workload runs on: (g) always on the real one.
    fn ground(&self, settings: &Settings) -> Ground {
        if self.compare.is_some() {
            Ground::Real
        } else {
            settings.ground
        }
    }

    fn describe(&self, ground: Ground) -> String {
        if let Some(dispatcher) = self.compare {
            let jobs = match dispatcher {
                Dispatcher::Direct => "jobs' pods",
                Dispatcher::Ours => "TensorFlowTrainingJobs (1 chief + 7 workers)",
                Dispatcher::Kueue(_) => "batch/v1 Jobs (parallelism = completions = 8)",
            };
            return format!(
                "({}) {}: {} {jobs} × {G_PODS} pods (100m cpu each; pods keep running); home + {} members, {} nodes per cluster; as fast as {SUBMITTERS} clients go; ground {:?}",
                self.key, self.what, self.jobs, self.members, self.nodes, ground,
            );
        }
        let load = match self.load {
            Load::AsFastAsPossible => format!("as fast as {SUBMITTERS} clients go"),
            Load::Rate { per_second } => format!(
                "{per_second} jobs/s for {:.1} s",
                self.jobs as f64 / per_second
            ),
        };
        let requests = if self.shape.gpu {
            "1 GPU + 100m cpu each"
        } else {
            "100m cpu each"
        };
        let clusters = if self.members == 0 {
            "home only".to_string()
        } else {
            format!("home + {} members", self.members)
        };
        let strategy = self
            .shape
            .strategy
            .filter(|_| self.members > 0)
            .map(|s| format!(", {s}"))
            .unwrap_or_default();
        let run = if self.expect == Expect::Running {
            "pods keep running".to_string()
        } else {
            format!("pods run {} s", self.shape.run_seconds)
        };
        format!(
            "({}) {}: {} jobs × {} replicas (1 chief + {} workers + {} ps, {requests}{}; {run}){strategy}; {clusters}, {} nodes × {} GPUs per cluster; {load}; ground {:?}",
            self.key,
            self.what,
            self.jobs,
            self.shape.replicas(),
            self.shape.workers,
            self.shape.ps,
            if self.shape.padding_bytes > 0 {
                format!(
                    ", a {} B annotation on each template",
                    self.shape.padding_bytes
                )
            } else {
                String::new()
            },
            self.nodes,
            self.gpus_per_node,
            ground,
        )
    }

    fn job(&self, name: &str) -> anyhow::Result<TensorFlowTrainingJob> {
        let resources = if self.shape.gpu {
            json!({"requests": {"cpu": "100m", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}})
        } else {
            json!({"requests": {"cpu": "100m"}})
        };
        let replica = |replica_type: &str, replicas: usize| {
            json!({
                "type": replica_type,
                "replicas": replicas,
                "template": {
                    "metadata": {"annotations": {
                        "sim.federation.tfjob.io/pending-seconds": "0.1",
                        "sim.federation.tfjob.io/run-seconds": self.shape.run_seconds.to_string(),
                    }},
                    "spec": {"containers": [{
                        "name": "tensorflow",
                        "image": "tensorflow/tensorflow:2.15.0",
                        "command": ["python", "/app/train.py"],
                        "resources": resources,
                    }]},
                },
            })
        };
        let mut specs = vec![replica("chief", 1), replica("worker", self.shape.workers)];
        if self.shape.ps > 0 {
            specs.push(replica("ps", self.shape.ps));
        }
        if self.shape.padding_bytes > 0 {
            let padding = "x".repeat(self.shape.padding_bytes);
            for spec in &mut specs {
                spec["template"]["metadata"]["annotations"]["bench.example.com/padding"] =
                    json!(padding);
            }
        }
        let mut spec = json!({"replicaSpecs": specs});
        if let Some(strategy) = self.shape.strategy {
            spec["scheduler"] = json!({"federation": {"strategy": strategy}});
        }
        if self.shape.members_only {
            let members: Vec<String> = cluster_names(self.members).into_iter().skip(1).collect();
            spec["scheduler"]["federation"]["clusterNames"] = json!(members);
            spec["scheduler"]["federation"]["allowSplit"] = json!(false);
        }
        serde_json::from_value(json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        }))
        .context("the bench job is not a valid TensorFlowTrainingJob")
    }

    fn deadline(&self, settings: &Settings) -> Duration {
        settings.deadline.unwrap_or_else(|| {
            if self.compare.is_some() {
                // Kueue's shipped settings ran about 0.9 jobs/s with a
                // p50 of two minutes (issue 26): room for a third of that.
                return Duration::from_secs_f64(120.0 + 3.0 * self.jobs as f64);
            }
            let submitting = match self.load {
                Load::Rate { per_second } => self.jobs as f64 / per_second,
                Load::AsFastAsPossible => 0.0,
            };
            let per_job = if settings.ground == Ground::Real {
                0.5
            } else {
                0.2
            };
            Duration::from_secs_f64(60.0 + submitting + per_job * self.jobs as f64)
        })
    }
}

fn job_name(n: usize) -> String {
    format!("bench-{n:05}")
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run_all() {
        println!("FAILED: {e:#}");
        std::process::exit(1);
    }
}

fn run_all() -> anyhow::Result<()> {
    let settings = Settings::from_env()?;
    let binary = controller_binary()?;
    let workloads = settings.workloads()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let scaled = settings.smoke || settings.scale != 1.0;
    println!(
        "controller benchmark: {} workload(s) on the {:?} ground{}, binary {}{}{}",
        workloads.len(),
        settings.ground,
        if workloads.iter().any(|w| w.compare.is_some()) {
            " ((g) on the real one)"
        } else {
            ""
        },
        binary.display(),
        if scaled {
            " (sizes reduced: the targets are for the full sizes)"
        } else {
            ""
        },
        if cfg!(debug_assertions) {
            " (a debug build: its times and CPU say nothing of the release's)"
        } else {
            ""
        }
    );
    println!();
    let mut results = Vec::new();
    let mut failed = Vec::new();
    for workload in &workloads {
        println!("{}", workload.describe(workload.ground(&settings)));
        match runtime.block_on(run_workload(workload, &settings, &binary)) {
            Ok(result) => results.push(result),
            Err(e) => {
                println!("  FAILED: {e:#}");
                failed.push(workload.key);
            }
        }
        println!();
    }
    summary(&results);
    if !failed.is_empty() {
        bail!("workload(s) {} failed", failed.join(", "));
    }
    Ok(())
}

/// The binary cargo built with this bench's profile (`cargo bench`: the
/// bench profile, which is release; `cargo test --bench`: debug).
fn controller_binary() -> anyhow::Result<PathBuf> {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_tfjob-federator"));
    if !path.exists() {
        bail!(
            "{} is missing: run `cargo build --release --bin tfjob-federator` (or `cargo bench --bench controller`, which builds it)",
            path.display()
        );
    }
    Ok(path)
}

/// A child process, killed when dropped (the real-clusters launcher is
/// first asked to stop by closing its standard input).
struct Proc {
    what: &'static str,
    child: Child,
    log: PathBuf,
    stops_on_eof: bool,
}

impl Proc {
    fn spawn(
        what: &'static str,
        mut command: Command,
        log: PathBuf,
        stops_on_eof: bool,
    ) -> anyhow::Result<Proc> {
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = command
            .stdin(if stops_on_eof {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {what}: {command:?}"))?;
        Ok(Proc {
            what,
            child,
            log,
            stops_on_eof,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error when the process has exited, with the end of its log.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!(
                "the {} process exited ({status}); the end of its log {}:\n{}",
                self.what,
                self.log.display(),
                log_tail(&self.log, 20)
            ),
            Err(e) => bail!("the {} process cannot be waited for: {e}", self.what),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.stops_on_eof {
            drop(self.child.stdin.take());
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // The children first: a profiler's wrapper (`BENCH_CONTROLLER_PREFIX`)
        // does not pass SIGKILL on to the controller it runs.
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &self.pid().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Starts the clusters (`sim` or `hack/real-clusters`) and waits for `DIR/ready`.
async fn start_ground(
    w: &Workload,
    ground: Ground,
    binary: &Path,
    dir: &Path,
) -> anyhow::Result<Proc> {
    let flags = [
        "--clusters".to_string(),
        (w.members + 1).to_string(),
        "--kubeconfig-dir".to_string(),
        dir.display().to_string(),
        "--nodes".to_string(),
        w.nodes.to_string(),
        "--gpus-per-node".to_string(),
        w.gpus_per_node.to_string(),
        "--register".to_string(),
    ];
    let (mut command, limit, what) = match ground {
        Ground::Sim => {
            let mut command = Command::new(binary);
            command.arg("sim");
            (command, Duration::from_secs(300), "clusters (sim)")
        }
        Ground::Real => {
            let mut command = Command::new(repo_path("hack/real-clusters"));
            command.env("REAL_CLUSTERS_EXIT_ON_STDIN_EOF", "1");
            // A first run builds Kubernetes from Go modules.
            (
                command,
                Duration::from_secs(45 * 60),
                "clusters (hack/real-clusters)",
            )
        }
    };
    command.args(&flags);
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "warn");
    }
    let mut ground = Proc::spawn(
        what,
        command,
        dir.join("clusters.log"),
        ground == Ground::Real,
    )?;
    let started = Instant::now();
    while !dir.join("ready").exists() {
        ground.check_alive()?;
        if started.elapsed() > limit {
            bail!(
                "the clusters are not ready after {limit:?}; log: {}",
                ground.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "  clusters: {} ready in {:.1} s (pid {})",
        what,
        started.elapsed().as_secs_f64(),
        ground.pid()
    );
    Ok(ground)
}

async fn client(dir: &Path, cluster: &str) -> anyhow::Result<kube::Client> {
    let path = dir.join(format!("{cluster}.kubeconfig"));
    let kubeconfig =
        Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("using {}", path.display()))?;
    kube::Client::try_from(config).context("building a kube client")
}

fn cluster_names(members: usize) -> Vec<String> {
    std::iter::once("home".to_string())
        .chain((1..=members).map(|i| format!("member-{i}")))
        .collect()
}

/// The ground's raw ceiling: `total` pods created by `CEILING_CLIENTS`
/// clients straight to home (pods naming a scheduler nobody runs, so the
/// API server alone is measured); creates per second. Deletes them after.
async fn ceiling(dir: &Path, total: usize) -> anyhow::Result<f64> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"labels": {CEILING_LABEL: "true"}},
        "spec": {
            "restartPolicy": "Never",
            "schedulerName": "bench-nobody",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }))
    .context("the ceiling pod is not a valid Pod")?;
    let next = Arc::new(AtomicUsize::new(0));
    let mut apis = Vec::new();
    for _ in 0..CEILING_CLIENTS {
        apis.push(Api::<Pod>::namespaced(
            client(dir, "home").await?,
            NAMESPACE,
        ));
    }
    let started = Instant::now();
    let tasks: Vec<_> = apis
        .into_iter()
        .map(|api| {
            let (next, mut pod) = (next.clone(), pod.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        return anyhow::Ok(());
                    }
                    pod.metadata.name = Some(format!("bench-ceiling-{n}"));
                    api.create(&PostParams::default(), &pod)
                        .await
                        .with_context(|| format!("creating ceiling pod {n}"))?;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.context("a ceiling client panicked")??;
    }
    let elapsed = started.elapsed();
    let api = Api::<Pod>::namespaced(client(dir, "home").await?, NAMESPACE);
    let selector = ListParams::default().labels(&format!("{CEILING_LABEL}=true"));
    api.delete_collection(&DeleteParams::default(), &selector)
        .await
        .context("deleting the ceiling pods")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = api
            .list_metadata(&selector)
            .await
            .context("listing the ceiling pods")?;
        if left.items.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "{} ceiling pods still there 60 s after their deletion",
                left.items.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rate = total as f64 / elapsed.as_secs_f64();
    println!(
        "  ground ceiling: {total} pods from {CEILING_CLIENTS} clients straight to home in {:.2} s = {rate:.0} creates/s",
        elapsed.as_secs_f64()
    );
    Ok(rate)
}

/// Starts `run` against home and waits for /readyz, then for every member's `Ready`.
async fn start_controller(
    binary: &Path,
    dir: &Path,
    settings: &Settings,
    members: usize,
) -> anyhow::Result<(Proc, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port")?
        .port();
    // A profiler to run the controller under (`BENCH_CONTROLLER_PREFIX=
    // "heaptrack -o FILE"`): the CPU and RSS figures are then the wrapper's.
    let prefix = std::env::var("BENCH_CONTROLLER_PREFIX").unwrap_or_default();
    let mut command = match prefix.split_whitespace().collect::<Vec<_>>().as_slice() {
        [] => Command::new(binary),
        [wrapper, args @ ..] => {
            let mut command = Command::new(wrapper);
            command.args(args).arg(binary);
            command
        }
    };
    command
        .arg("run")
        .arg("--kubeconfig")
        .arg(dir.join("home.kubeconfig"))
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"));
    if let Some(config) = &settings.config {
        command.arg("--config").arg(config);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "warn");
    }
    let mut controller = Proc::spawn("controller", command, dir.join("controller.log"), false)?;
    let started = Instant::now();
    let limit = Duration::from_secs(120);
    loop {
        controller.check_alive()?;
        if let Ok((200, _)) = http_get(port, "/readyz").await {
            break;
        }
        if started.elapsed() > limit {
            bail!("the controller is not ready after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let api: Api<MemberCluster> = Api::all(client(dir, "home").await?);
    loop {
        controller.check_alive()?;
        let list = api
            .list(&ListParams::default())
            .await
            .context("listing MemberClusters")?;
        let not_ready: Vec<String> = list
            .items
            .iter()
            .filter_map(|m| {
                progress::member_not_ready(m)
                    .map(|why| format!("{}: {why}", m.metadata.name.as_deref().unwrap_or("?")))
            })
            .collect();
        if list.items.len() == members && not_ready.is_empty() {
            break;
        }
        if started.elapsed() > limit {
            bail!(
                "{} of {members} members registered, not Ready after {limit:?}: {}",
                list.items.len(),
                not_ready.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "  controller: ready in {:.1} s (pid {}, metrics on 127.0.0.1:{port})",
        started.elapsed().as_secs_f64(),
        controller.pid()
    );
    Ok((controller, port))
}

/// A plain HTTP/1.0 GET on loopback: (status code, body).
async fn http_get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        anyhow::Ok(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .with_context(|| format!("GET {path}: no answer in 10 s"))??;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: not an HTTP answer"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("GET {path}: no status code in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// The controller's metrics, parsed from the Prometheus text format.
struct Scrape {
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    async fn take(port: u16) -> anyhow::Result<Scrape> {
        let (code, body) = http_get(port, "/metrics").await?;
        anyhow::ensure!(code == 200, "GET /metrics answered {code}");
        Ok(Scrape::parse(&body))
    }

    fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let value: f64 = value.trim().parse().ok()?;
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => (name, rest.strip_suffix('}')?),
                    None => (series, ""),
                };
                let labels = labels
                    .split("\",")
                    .filter(|l| !l.is_empty())
                    .filter_map(|pair| {
                        let (k, v) = pair.split_once("=\"")?;
                        Some((k.to_string(), v.trim_end_matches('"').to_string()))
                    })
                    .collect();
                Some((name.to_string(), labels, value))
            })
            .collect();
        Scrape { samples }
    }

    fn series<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
        self.samples
            .iter()
            .filter(move |(n, _, _)| n == name)
            .map(|(_, l, v)| (l, *v))
    }

    /// API writes (create, update, patch, delete) by kind: pods, services,
    /// status (`tensorflowtrainingjobs/status`), events, other.
    fn writes(&self) -> BTreeMap<&'static str, f64> {
        let mut kinds: BTreeMap<&'static str, f64> = BTreeMap::new();
        for (labels, value) in self.series("tfjob_federator_api_requests_total") {
            let verb = labels.get("verb").map_or("", String::as_str);
            if !["create", "update", "patch", "delete"].contains(&verb) {
                continue;
            }
            let kind = match labels.get("resource").map_or("", String::as_str) {
                "pods" => "pods",
                "services" => "services",
                "tensorflowtrainingjobs/status" => "status",
                "events" => "events",
                _ => "other",
            };
            *kinds.entry(kind).or_default() += value;
        }
        kinds
    }

    /// Every API request (reads and watches too), by "verb resource code".
    fn requests(&self) -> BTreeMap<String, f64> {
        self.requests_where(|_, _| true)
    }

    /// API writes answered with an error, by "verb resource code".
    fn write_errors(&self) -> BTreeMap<String, f64> {
        self.requests_where(|verb, code| {
            ["create", "update", "patch", "delete"].contains(&verb) && !code.starts_with('2')
        })
    }

    /// The API requests whose verb and code `keep` keeps, by "verb resource code".
    fn requests_where(&self, keep: impl Fn(&str, &str) -> bool) -> BTreeMap<String, f64> {
        let mut requests = BTreeMap::new();
        for (labels, value) in self.series("tfjob_federator_api_requests_total") {
            let get = |key: &str| labels.get(key).map_or("", String::as_str);
            if keep(get("verb"), get("code")) {
                *requests
                    .entry(format!(
                        "{} {} {}",
                        get("verb"),
                        get("resource"),
                        get("code")
                    ))
                    .or_default() += value;
            }
        }
        requests
    }

    /// Cumulative buckets (upper bound, count) of a histogram, ascending.
    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = self
            .series(&bucket)
            .filter_map(|(labels, v)| {
                let le = labels.get("le")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        buckets
    }

    fn sum_by(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        for (labels, value) in self.series(name) {
            *sums
                .entry(labels.get(label).cloned().unwrap_or_default())
                .or_default() += value;
        }
        sums
    }
}

/// CPU seconds (utime + stime, and those of reaped children) of `root` and
/// every live descendant: the controller, the `sim` process, or the
/// real-clusters launcher with its API servers, etcd and the rest.
fn tree_cpu_seconds(root: u32) -> f64 {
    let ticks: u64 = process_tree(root).iter().map(|(_, ticks)| ticks).sum();
    ticks as f64 / clock_ticks_per_second()
}

/// CPU seconds of each kube-apiserver under the real-clusters launcher
/// `root`, by the cluster its `--etcd-prefix=/<cluster>` names (none on
/// the simulator, one process for every cluster).
fn apiserver_cpu_seconds(root: u32) -> BTreeMap<String, f64> {
    process_tree(root)
        .into_iter()
        .filter_map(|(pid, ticks)| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if !args.first()?.ends_with("kube-apiserver") {
                return None;
            }
            let cluster = args
                .iter()
                .find_map(|a| a.strip_prefix("--etcd-prefix=/"))?;
            Some((cluster.to_string(), ticks as f64 / clock_ticks_per_second()))
        })
        .collect()
}

/// `root` and every live descendant: pid and CPU ticks (utime + stime,
/// and those of reaped children).
fn process_tree(root: u32) -> Vec<(u32, u64)> {
    let mut parents: Vec<(u32, u32, u64)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // Fields after the command (which may hold spaces): state, ppid, …
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let number = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let ticks = number(11) + number(12) + number(13) + number(14);
            parents.push((pid, number(1) as u32, ticks));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(parents.iter().filter(|p| p.1 == parent).map(|p| p.0));
        i += 1;
    }
    parents
        .iter()
        .filter(|p| tree.contains(&p.0))
        .map(|p| (p.0, p.2))
        .collect()
}

/// One line of a per-cluster figure (pods, an API server's CPU) with the
/// busiest member's share of the members' total, against the issue's bound
/// (no member's API server carries more than 60 % of a burst).
/// Returns that share, in %.
fn print_member_share(
    what: &str,
    values: &BTreeMap<String, f64>,
    unit: &str,
    decimals: usize,
) -> f64 {
    let each: Vec<String> = values
        .iter()
        .map(|(cluster, v)| format!("{cluster} {v:.decimals$}{unit}"))
        .collect();
    let members: Vec<f64> = values
        .iter()
        .filter(|(cluster, _)| cluster.starts_with("member-"))
        .map(|(_, v)| *v)
        .collect();
    let total: f64 = members.iter().sum();
    let busiest = 100.0 * members.iter().copied().fold(0.0, f64::max) / total.max(1e-9);
    println!(
        "  {what} by cluster: {}; the busiest member's share of the members': {busiest:.0} %{}",
        each.join(", "),
        against(busiest, Bound::AtMost(60.0), " %")
    );
    busiest
}

/// CPU seconds (utime + stime) of this process alone: the load generator
/// and its watches (its children, the clusters and the controller, apart).
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let number = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (number(11) + number(12)) as f64 / clock_ticks_per_second()
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A `/proc/PID/status` figure in kB (VmRSS, VmHWM), as MiB.
fn proc_status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// What the watches saw of one job, timestamped on arrival.
#[derive(Default)]
struct JobTrack {
    /// Just before its create request was sent.
    submitted: Option<Instant>,
    submit_error: Option<String>,
    /// First event of each of its pods, by pod name.
    pods_created: HashMap<String, Instant>,
    /// First event showing each pod Running (or past it: Succeeded, Failed).
    pods_up: HashMap<String, Instant>,
    /// First job event with phase Running or Succeeded.
    up: Option<Instant>,
    ended: Option<(JobPhase, Instant)>,
    phase: Option<JobPhase>,
    last_condition: String,
}

#[derive(Default)]
struct Track {
    jobs: HashMap<String, JobTrack>,
    /// The managed pods each cluster's watch saw, by name.
    pods_by_cluster: BTreeMap<String, HashSet<String>>,
    watch_errors: usize,
    /// Re-lists after the first: events may have been missed.
    relists: usize,
}

type Shared = Arc<Mutex<Track>>;

fn lock(track: &Shared) -> MutexGuard<'_, Track> {
    track
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn record_job(track: &Shared, job: TensorFlowTrainingJob, now: Instant) {
    let Some(name) = job.metadata.name else {
        return;
    };
    let mut track = lock(track);
    let seen = track.jobs.entry(name).or_default();
    let Some(status) = job.status else { return };
    seen.phase = status.phase;
    if let Some(c) = status.conditions.last() {
        seen.last_condition = format!(
            "{:?} {:?} {}: {}",
            c.condition_type,
            c.status,
            c.reason.as_deref().unwrap_or(""),
            c.message.as_deref().unwrap_or("")
        );
    }
    if matches!(status.phase, Some(JobPhase::Running | JobPhase::Succeeded)) && seen.up.is_none() {
        seen.up = Some(now);
    }
    if let Some(phase) = status.phase.filter(|p| p.is_terminal())
        && seen.ended.is_none()
    {
        seen.ended = Some((phase, now));
    }
}

/// Records a pod of the job its label `job_label` names.
fn record_pod(track: &Shared, cluster: &str, job_label: &str, pod: Pod, now: Instant) {
    let (Some(name), Some(job)) = (
        pod.metadata.name,
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(job_label))
            .cloned(),
    ) else {
        return;
    };
    let up = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running" | "Succeeded" | "Failed")
    );
    let mut track = lock(track);
    track
        .pods_by_cluster
        .entry(cluster.to_string())
        .or_default()
        .insert(name.clone());
    let seen = track.jobs.entry(job).or_default();
    seen.pods_created.entry(name.clone()).or_insert(now);
    if up {
        seen.pods_up.entry(name).or_insert(now);
    }
}

/// The bench's watch tasks, stopped when dropped (before their clusters go).
#[derive(Default)]
struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Follows `api` with kube's watcher, feeding every object to `record`;
/// the receiver fires once the first list is done.
fn follow<K>(
    watches: &mut Watches,
    api: Api<K>,
    config: watcher::Config,
    track: Shared,
    record: impl Fn(&Shared, K, Instant) + Send + 'static,
) -> tokio::sync::oneshot::Receiver<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let (ready, listed) = tokio::sync::oneshot::channel();
    watches.0.push(tokio::spawn(async move {
        let mut ready = Some(ready);
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let now = Instant::now();
            match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    record(&track, object, now)
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Ok(watcher::Event::Init) if ready.is_none() => lock(&track).relists += 1,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "a bench watch failed; retrying");
                    lock(&track).watch_errors += 1;
                }
            }
        }
    }));
    listed
}

/// Watches the jobs on home and the managed pods on every cluster into
/// `track`; returns once each has listed.
async fn watch_jobs_and_pods(
    dir: &Path,
    members: usize,
    track: &Shared,
) -> anyhow::Result<Watches> {
    watch_clusters(dir, members, track, true, MANAGED, JOB_NAME_LABEL).await
}

/// Watches, into `track`, the TensorFlowTrainingJobs on home (`jobs`) and
/// on every cluster the pods `selector` selects, each the pod of the job
/// its label `job_label` names; returns once each watch has listed.
async fn watch_clusters(
    dir: &Path,
    members: usize,
    track: &Shared,
    jobs: bool,
    selector: &str,
    job_label: &'static str,
) -> anyhow::Result<Watches> {
    let mut watches = Watches::default();
    let mut listed = Vec::new();
    if jobs {
        listed.push(follow(
            &mut watches,
            Api::<TensorFlowTrainingJob>::namespaced(client(dir, "home").await?, NAMESPACE),
            watcher::Config::default(),
            track.clone(),
            record_job,
        ));
    }
    for cluster in cluster_names(members) {
        listed.push(follow(
            &mut watches,
            Api::<Pod>::all(client(dir, &cluster).await?),
            watcher::Config::default().labels(selector),
            track.clone(),
            move |track, pod, now| record_pod(track, &cluster, job_label, pod, now),
        ));
    }
    for ready in listed {
        tokio::time::timeout(Duration::from_secs(60), ready)
            .await
            .context("a bench watch did not list in 60 s")?
            .context("a bench watch ended before it listed")?;
    }
    Ok(watches)
}

/// Submits the workload's TensorFlowTrainingJobs; returns when every
/// create was answered.
async fn submit(w: &Workload, dir: &Path, track: &Shared) -> anyhow::Result<()> {
    submit_with(w, track, tf_creator(w, dir).await?).await
}

/// Creates job `n` as a TensorFlowTrainingJob on home.
async fn tf_creator(w: &Workload, dir: &Path) -> anyhow::Result<Create> {
    home_creator(dir, w.job(&job_name(0))?).await
}

/// Creates job `n` on home as a copy of `template` named `job_name(n)`,
/// each submitter with a client of its own.
async fn home_creator<K>(dir: &Path, template: K) -> anyhow::Result<Create>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default,
{
    let template = Arc::new(template);
    let mut apis = Vec::new();
    for _ in 0..SUBMITTERS {
        apis.push(Api::<K>::namespaced(client(dir, "home").await?, NAMESPACE));
    }
    Ok(Arc::new(move |submitter, n| {
        let (api, mut job) = (apis[submitter].clone(), (*template).clone());
        Box::pin(async move {
            job.meta_mut().name = Some(job_name(n));
            api.create(&PostParams::default(), &job).await?;
            Ok(())
        })
    }))
}

/// Submits job `n` with the client of submitter `submitter`
/// (0..`SUBMITTERS`): one create, or (g-direct) the job's pods.
type Create = Arc<
    dyn Fn(usize, usize) -> futures::future::BoxFuture<'static, anyhow::Result<()>> + Send + Sync,
>;

/// Submits the workload's jobs with `create`, at the workload's load; a
/// job's submit time is taken just before `create` starts, its error kept
/// as its `submit_error`. Returns when every create was answered.
async fn submit_with(w: &Workload, track: &Shared, create: Create) -> anyhow::Result<()> {
    let track = track.clone();
    let submit_one = move |submitter: usize, n: usize| {
        let (track, create) = (track.clone(), create.clone());
        async move {
            let name = job_name(n);
            lock(&track).jobs.entry(name.clone()).or_default().submitted = Some(Instant::now());
            if let Err(e) = create(submitter, n).await {
                lock(&track).jobs.entry(name).or_default().submit_error = Some(format!("{e:#}"));
            }
        }
    };
    let mut tasks = Vec::new();
    match w.load {
        Load::AsFastAsPossible => {
            let next = Arc::new(AtomicUsize::new(0));
            for submitter in 0..SUBMITTERS {
                let (next, total, submit_one) = (next.clone(), w.jobs, submit_one.clone());
                tasks.push(tokio::spawn(async move {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= total {
                            break;
                        }
                        submit_one(submitter, n).await;
                    }
                }));
            }
        }
        Load::Rate { per_second } => {
            let start = tokio::time::Instant::now();
            for n in 0..w.jobs {
                tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / per_second))
                    .await;
                tasks.push(tokio::spawn(submit_one(n % SUBMITTERS, n)));
            }
        }
    }
    for task in tasks {
        task.await.context("a submitting client panicked")?;
    }
    Ok(())
}

/// Waits until every job reached the expected phase; an error when one
/// cannot (it failed, was not submitted), the deadline passes, or a process died.
async fn wait_for_jobs(
    w: &Workload,
    track: &Shared,
    processes: &mut [&mut Proc],
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        for process in processes.iter_mut() {
            process.check_alive()?;
        }
        let (mut done, mut bad, mut waiting) = (0, Vec::new(), Vec::new());
        {
            let track = lock(track);
            for n in 0..w.jobs {
                let name = job_name(n);
                let Some(job) = track.jobs.get(&name) else {
                    waiting.push(format!("{name}: not seen"));
                    continue;
                };
                if let Some(error) = &job.submit_error {
                    bad.push(format!("{name}: not submitted: {error}"));
                    continue;
                }
                let reached = match w.expect {
                    Expect::Succeeded => matches!(job.ended, Some((JobPhase::Succeeded, _))),
                    Expect::Running => {
                        job.phase == Some(JobPhase::Running)
                            && job.pods_up.len() == w.shape.replicas()
                    }
                    Expect::PodsRunning => job.pods_up.len() >= w.shape.replicas(),
                };
                let phase = job.phase.map_or("no phase", JobPhase::as_str);
                if reached {
                    done += 1;
                } else if job.ended.is_some() {
                    bad.push(format!(
                        "{name}: {phase}; last condition {}",
                        job.last_condition
                    ));
                } else {
                    waiting.push(format!(
                        "{name}: {phase}, {} pods seen, {} up; last condition {}",
                        job.pods_created.len(),
                        job.pods_up.len(),
                        job.last_condition
                    ));
                }
            }
        }
        if !bad.is_empty() {
            bail!(
                "{} job(s) cannot reach their expected phase: {}",
                bad.len(),
                bad.iter().take(10).cloned().collect::<Vec<_>>().join("; ")
            );
        }
        if done == w.jobs {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} of {} jobs did not reach their expected phase in time: {}",
                waiting.len(),
                w.jobs,
                waiting
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The controller's API writes per job between two scrapes, by kind, with
/// the writes answered with an error.
fn print_writes(before: &Scrape, after: &Scrape, jobs: f64, target: Option<f64>) {
    let (writes_before, writes_after) = (before.writes(), after.writes());
    let mut total = 0.0;
    let mut kinds = Vec::new();
    for kind in ["pods", "services", "status", "events", "other"] {
        let delta = writes_after.get(kind).copied().unwrap_or_default()
            - writes_before.get(kind).copied().unwrap_or_default();
        total += delta;
        kinds.push(format!("{kind} {:.2}", delta / jobs));
    }
    let errors_before = before.write_errors();
    let errors: Vec<String> = after
        .write_errors()
        .into_iter()
        .map(|(what, n)| {
            (
                n - errors_before.get(&what).copied().unwrap_or_default(),
                what,
            )
        })
        .filter(|(n, _)| *n > 0.0)
        .map(|(n, what)| format!("{what}: {n:.0}"))
        .collect();
    println!(
        "  API writes per job: {:.2} ({}){}",
        total / jobs,
        kinds.join(", "),
        target
            .map(|t| against(total / jobs, Bound::AtMost(t), ""))
            .unwrap_or_default()
    );
    if !errors.is_empty() {
        println!(
            "  writes answered with an error (verb resource code: count): {}",
            errors.join(", ")
        );
    }
}

/// (g): every API server's write requests from all its clients (the
/// dispatcher, the load generator, kube-scheduler, kube-controller-manager,
/// kwok), by cluster and "resource[/subresource] VERB", from its own
/// `apiserver_request_total`: what a job costs the ground, and who asks.
async fn apiserver_writes(
    dir: &Path,
    members: usize,
) -> anyhow::Result<BTreeMap<String, BTreeMap<String, f64>>> {
    let mut by_cluster = BTreeMap::new();
    for cluster in cluster_names(members) {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .context("a GET of /metrics")?;
        let text = client(dir, &cluster)
            .await?
            .request_text(request)
            .await
            .with_context(|| format!("GET /metrics of {cluster}'s API server"))?;
        let mut writes: BTreeMap<String, f64> = BTreeMap::new();
        for (labels, value) in Scrape::parse(&text).series("apiserver_request_total") {
            let get = |key: &str| labels.get(key).map_or("", String::as_str);
            if !["POST", "PUT", "PATCH", "DELETE", "APPLY"].contains(&get("verb")) {
                continue;
            }
            let resource = match get("subresource") {
                "" => get("resource").to_string(),
                sub => format!("{}/{sub}", get("resource")),
            };
            *writes
                .entry(format!("{resource} {}", get("verb")))
                .or_default() += value;
        }
        by_cluster.insert(cluster, writes);
    }
    Ok(by_cluster)
}

/// (g): the API servers' writes per job between two `apiserver_writes`,
/// home's and the members' together, the largest first.
fn print_apiserver_writes(
    before: &BTreeMap<String, BTreeMap<String, f64>>,
    after: &BTreeMap<String, BTreeMap<String, f64>>,
    jobs: f64,
) {
    for (side, home) in [("home's", true), ("the members'", false)] {
        let mut per_job: BTreeMap<&str, f64> = BTreeMap::new();
        for (cluster, writes) in after.iter().filter(|(c, _)| (*c == "home") == home) {
            for (what, n) in writes {
                let earlier = before
                    .get(cluster)
                    .and_then(|w| w.get(what))
                    .copied()
                    .unwrap_or_default();
                *per_job.entry(what).or_default() += (n - earlier) / jobs;
            }
        }
        let mut largest: Vec<(&str, f64)> =
            per_job.into_iter().filter(|(_, n)| *n >= 0.05).collect();
        largest.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = largest.iter().map(|(_, n)| n).sum();
        let each: Vec<String> = largest
            .iter()
            .map(|(what, n)| format!("{what} {n:.2}"))
            .collect();
        println!(
            "  {side} API server writes per job, every client: {total:.2} ({})",
            each.join(", ")
        );
    }
}

/// Waits until the controller's writes have stopped changing for `quiet`
/// (trailing status writes count: detail-only changes wait up to 4 ×
/// `statusDetailIntervalMs`, 4 s by default), at most 30 s.
async fn settle(port: u16, controller: &mut Proc, quiet: Duration) -> anyhow::Result<Scrape> {
    let total = |s: &Scrape| s.writes().values().sum::<f64>();
    let mut last = Scrape::take(port).await?;
    let mut unchanged_since = Instant::now();
    let started = Instant::now();
    while unchanged_since.elapsed() < quiet && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        controller.check_alive()?;
        let next = Scrape::take(port).await?;
        if total(&next) != total(&last) {
            unchanged_since = Instant::now();
        }
        last = next;
    }
    Ok(last)
}

/// The figures of one workload, for the summary.
struct Figures {
    key: &'static str,
    /// (g): the dispatcher's (none for `g-direct`).
    controller_cpu_per_1000: f64,
    clusters_cpu_per_1000: f64,
    /// (g): what the comparison compares.
    compare: Option<Compared>,
}

/// One variant of (g), for the comparison.
struct Compared {
    key: &'static str,
    dispatcher: Dispatcher,
    jobs: usize,
    /// Jobs ÷ (first submit → the last job's pods all Running).
    jobs_per_s: f64,
    /// Submit → all the job's pods Running, ms.
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    /// CPU seconds of the dispatcher's processes; none for `g-direct`.
    dispatcher_cpu: Option<f64>,
    /// Every kube-apiserver's CPU seconds, summed, and per job.
    apiservers_cpu: f64,
    apiservers_cpu_per_job: f64,
    /// The busiest member API server's share of the members' CPU, %.
    busiest_member_share: f64,
    /// The dispatcher's peak RSS (Kueue: its processes' peaks summed), MiB.
    peak_rss_mib: Option<f64>,
}

async fn run_workload(w: &Workload, settings: &Settings, binary: &Path) -> anyhow::Result<Figures> {
    let dir = std::env::temp_dir().join(format!(
        "bench-controller-{}-{}-{:06x}",
        std::process::id(),
        w.key,
        fastrand::u32(..0x100_0000)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = if let Some(dispatcher) = w.compare {
        measure_compare(w, dispatcher, settings, binary, &dir).await
    } else if w.backlog {
        measure_backlog(w, settings, binary, &dir).await
    } else {
        measure(w, settings, binary, &dir).await
    };
    // BENCH_KEEP_LOGS=1 keeps them after a good run too (with RUST_LOG
    // set, the controller's log is the profile of what it did).
    let keep = std::env::var_os("BENCH_KEEP_LOGS").is_some_and(|v| v == "1");
    match &result {
        Ok(_) if !keep => {
            let _ = std::fs::remove_dir_all(&dir);
        }
        _ => println!("  (logs kept in {})", dir.display()),
    }
    result
}

async fn measure(
    w: &Workload,
    settings: &Settings,
    binary: &Path,
    dir: &Path,
) -> anyhow::Result<Figures> {
    let mut ground = start_ground(w, settings.ground, binary, dir).await?;
    let ceiling = ceiling(dir, settings.ceiling_pods).await?;
    let (mut controller, port) = start_controller(binary, dir, settings, w.members).await?;

    let track: Shared = Arc::default();
    // Declared after the processes: dropped, so stopped, before them.
    let _watches = watch_jobs_and_pods(dir, w.members, &track).await?;

    let before = Scrape::take(port).await?;
    let controller_cpu = tree_cpu_seconds(controller.pid());
    let clusters_cpu = tree_cpu_seconds(ground.pid());
    let apiservers_cpu = apiserver_cpu_seconds(ground.pid());
    let bench_cpu = own_cpu_seconds();
    let first_submit = Instant::now();
    let deadline = first_submit + w.deadline(settings);
    // A refused create shows as a job that cannot reach its phase.
    submit(w, dir, &track).await?;
    let submitted_in = first_submit.elapsed();
    wait_for_jobs(w, &track, &mut [&mut controller, &mut ground], deadline).await?;
    let done_in = first_submit.elapsed();
    // Short in a smoke run, which asserts nothing about the figures.
    let quiet = Duration::from_secs(if settings.smoke { 1 } else { 5 });
    let after = settle(port, &mut controller, quiet).await?;
    let controller_cpu = tree_cpu_seconds(controller.pid()) - controller_cpu;
    let clusters_cpu = tree_cpu_seconds(ground.pid()) - clusters_cpu;
    let apiservers_cpu: BTreeMap<String, f64> = apiserver_cpu_seconds(ground.pid())
        .into_iter()
        .map(|(cluster, cpu)| {
            let before = apiservers_cpu.get(&cluster).copied().unwrap_or_default();
            (cluster, cpu - before)
        })
        .collect();
    let bench_cpu = own_cpu_seconds() - bench_cpu;

    let jobs = w.jobs as f64;
    // The watches wait for this lock: no await while it is held.
    {
        let track_now = lock(&track);
        let tracked: Vec<&JobTrack> = (0..w.jobs)
            .filter_map(|n| track_now.jobs.get(&job_name(n)))
            .collect();
        println!(
            "  submitted {} jobs in {:.2} s; every job {} after {:.2} s",
            w.jobs,
            submitted_in.as_secs_f64(),
            if w.expect == Expect::Running {
                "Running with every pod up"
            } else {
                "Succeeded"
            },
            done_in.as_secs_f64()
        );

        // Dispatch: pods created per second between the first submit and the last pod created.
        let pods_created: usize = tracked.iter().map(|j| j.pods_created.len()).sum();
        let last_pod = tracked
            .iter()
            .flat_map(|j| j.pods_created.values())
            .max()
            .copied()
            .unwrap_or(first_submit);
        let window = (last_pod - first_submit).as_secs_f64().max(1e-9);
        let pods_per_s = pods_created as f64 / window;
        println!(
            "  dispatched: {pods_created} pods of {} jobs in {window:.2} s (first submit → last pod created): {:.1} jobs/s, {pods_per_s:.0} pods/s",
            w.jobs,
            jobs / window
        );
        let ratio = pods_per_s / ceiling;
        let ratio_target = if settings.ground == Ground::Real {
            0.7
        } else {
            0.5
        };
        println!(
            "  dispatch ratio (pods/s ÷ ceiling): {ratio:.2}{}",
            if w.targets.dispatch_ratio {
                against(ratio, Bound::AtLeast(ratio_target), "")
            } else {
                String::new()
            }
        );
        if let Some(target) = w.targets.all_pods_created_s {
            // The job whose pods were all there last.
            let last_job = tracked
                .iter()
                .filter_map(|j| all_at(&j.pods_created, w.shape.replicas()))
                .max()
                .map_or(f64::NAN, |t| (t - first_submit).as_secs_f64());
            println!(
                "  first submit → the last job's pods all created: {last_job:.2} s{}",
                against(last_job, Bound::AtMost(target), " s")
            );
        }

        let to_pods: Vec<f64> = tracked
            .iter()
            .filter_map(|j| {
                Some(ms(
                    all_at(&j.pods_created, w.shape.replicas())?,
                    j.submitted?,
                ))
            })
            .collect();
        let to_up: Vec<f64> = tracked
            .iter()
            .filter_map(|j| Some(ms(j.up?, j.submitted?)))
            .collect();
        let pod_to_job: Vec<f64> = tracked
            .iter()
            .filter_map(|j| Some(ms(j.up?, all_at(&j.pods_up, w.shape.replicas())?)))
            .collect();
        print_latency(
            "submit → all the job's pods created",
            to_pods,
            w.jobs,
            w.targets.submit_to_pods_p99_ms,
        );
        print_latency("submit → job Running (or Succeeded)", to_up, w.jobs, None);
        print_latency(
            "last pod Running (pod watch) → job Running (job watch)",
            pod_to_job,
            w.jobs,
            w.targets.pod_to_job_p99_ms,
        );
        if w.members > 1 {
            let pods = track_now
                .pods_by_cluster
                .iter()
                .map(|(cluster, names)| (cluster.clone(), names.len() as f64))
                .collect();
            print_member_share("pods", &pods, "", 0);
            if !apiservers_cpu.is_empty() {
                print_member_share("API servers' CPU", &apiservers_cpu, " s", 2);
            }
        }
        if track_now.relists > 0 || track_now.watch_errors > 0 {
            println!(
                "  note: the bench's watches re-listed {} times and failed {} times: events may have been missed",
                track_now.relists, track_now.watch_errors
            );
        }
    }

    print_writes(&before, &after, jobs, w.targets.writes_per_job);

    let per_1000 = |cpu: f64| cpu / jobs * 1000.0;
    let share = controller_cpu / clusters_cpu.max(1e-9);
    println!(
        "  CPU: controller {controller_cpu:.2} s = {:.2} s per 1,000 jobs; clusters ({} process{}) {clusters_cpu:.2} s = {:.2} s per 1,000 jobs; controller/clusters {share:.2}{}",
        per_1000(controller_cpu),
        if settings.ground == Ground::Sim {
            "the sim"
        } else {
            "the real-clusters"
        },
        if settings.ground == Ground::Sim {
            ""
        } else {
            " tree"
        },
        per_1000(clusters_cpu),
        against(share, Bound::AtMost(0.5), "")
    );
    println!(
        "  (the load generator and its watches, this process: {bench_cpu:.2} s of CPU in the same window)"
    );
    let peak = proc_status_mib(controller.pid(), "VmHWM").unwrap_or(f64::NAN);
    let now = proc_status_mib(controller.pid(), "VmRSS").unwrap_or(f64::NAN);
    if w.idle {
        println!(
            "  controller RSS with all {} jobs live: {now:.0} MiB (peak {peak:.0} MiB){}",
            w.jobs,
            against(now, Bound::AtMost(1024.0), " MiB")
        );
        let cpu = tree_cpu_seconds(controller.pid());
        let writes: f64 = after.writes().values().sum();
        tokio::time::sleep(settings.idle).await;
        controller.check_alive()?;
        let idle_cpu = tree_cpu_seconds(controller.pid()) - cpu;
        let idle_writes = Scrape::take(port).await?.writes().values().sum::<f64>() - writes;
        let percent = idle_cpu / settings.idle.as_secs_f64() * 100.0;
        println!(
            "  idle controller CPU over {:.0} s once nothing changes: {percent:.2} % of one core ({idle_writes:.0} API writes meanwhile){}",
            settings.idle.as_secs_f64(),
            against(percent, Bound::AtMost(2.0), " %")
        );
    } else if w.key.starts_with('h') {
        println!(
            "  controller peak RSS (VmHWM) with this one job: {peak:.0} MiB, now {now:.0} MiB; the chart's limit 1024 MiB leaves {:.0} MiB for other jobs{}",
            1024.0 - peak,
            against(
                peak,
                Bound::AtMost(CHART_MEMORY_LIMIT_MIB - ROOM_FOR_OTHERS_MIB),
                " MiB"
            )
        );
    } else {
        println!("  controller peak RSS (VmHWM): {peak:.0} MiB");
    }

    if w.placement {
        let (b0, b1) = (
            before.buckets("tfjob_federator_placement_duration_seconds"),
            after.buckets("tfjob_federator_placement_duration_seconds"),
        );
        let buckets: Vec<(f64, f64)> = b1
            .iter()
            .map(|&(le, n)| (le, n - b0.iter().find(|b| b.0 == le).map_or(0.0, |b| b.1)))
            .collect();
        let count = buckets.last().map_or(0.0, |b| b.1);
        let p99 = buckets
            .iter()
            .find(|b| b.1 >= 0.99 * count)
            .map_or(f64::NAN, |b| b.0);
        let (a0, a1) = (
            before.sum_by("tfjob_federator_placement_attempts_total", "outcome"),
            after.sum_by("tfjob_federator_placement_attempts_total", "outcome"),
        );
        let outcomes: Vec<String> = a1
            .iter()
            .map(|(outcome, n)| {
                format!(
                    "{:.0} {outcome}",
                    n - a0.get(outcome).copied().unwrap_or(0.0)
                )
            })
            .collect();
        let decisions: f64 = a1.values().sum::<f64>() - a0.values().sum::<f64>();
        println!(
            "  placement decision p99: ≤ {:.2} ms (the upper bound of the histogram bucket holding it: 1-2.5-5 steps){}; {decisions:.0} decisions ({})",
            p99 * 1000.0,
            against(p99 * 1000.0, Bound::AtMost(5.0), " ms"),
            outcomes.join(", ")
        );
    }

    Ok(Figures {
        key: w.key,
        controller_cpu_per_1000: per_1000(controller_cpu),
        clusters_cpu_per_1000: per_1000(clusters_cpu),
        compare: None,
    })
}

/// (f)'s first run: the same jobs submitted with the controller running.
struct Arriving {
    /// The controller's RSS with every job live, MiB.
    steady: f64,
    /// First submit → every job Running.
    done_in: Duration,
}

/// (f): the jobs submitted with the controller running (its steady RSS
/// with them live), then on fresh clusters the same jobs created first and
/// the controller started after: time to all Running against the ground's
/// ceiling measured on those clusters, peak and after-drain RSS.
async fn measure_backlog(
    w: &Workload,
    settings: &Settings,
    binary: &Path,
    dir: &Path,
) -> anyhow::Result<Figures> {
    let quiet = Duration::from_secs(if settings.smoke { 1 } else { 5 });
    let arriving = {
        let dir = dir.join("arriving");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut ground = start_ground(w, settings.ground, binary, &dir).await?;
        let (mut controller, port) = start_controller(binary, &dir, settings, w.members).await?;
        let track: Shared = Arc::default();
        let _watches = watch_jobs_and_pods(&dir, w.members, &track).await?;
        let cpu_before = tree_cpu_seconds(controller.pid()) + tree_cpu_seconds(ground.pid());
        let first_submit = Instant::now();
        submit(w, &dir, &track).await?;
        let deadline = first_submit + w.deadline(settings);
        wait_for_jobs(w, &track, &mut [&mut controller, &mut ground], deadline).await?;
        let done_in = first_submit.elapsed();
        let cpu = tree_cpu_seconds(controller.pid()) + tree_cpu_seconds(ground.pid()) - cpu_before;
        settle(port, &mut controller, quiet).await?;
        let steady = proc_status_mib(controller.pid(), "VmRSS").unwrap_or(f64::NAN);
        let peak = proc_status_mib(controller.pid(), "VmHWM").unwrap_or(f64::NAN);
        println!(
            "  arriving with the controller running: every job Running {:.2} s after the first submit (controller and sim busy {:.2} cores); controller RSS {steady:.0} MiB with all {} jobs live (peak {peak:.0} MiB)",
            done_in.as_secs_f64(),
            cpu / done_in.as_secs_f64(),
            w.jobs
        );
        Arriving { steady, done_in }
    };

    let mut ground = start_ground(w, settings.ground, binary, dir).await?;
    let ceiling = ceiling(dir, settings.ceiling_pods).await?;
    let track: Shared = Arc::default();
    let _watches = watch_jobs_and_pods(dir, w.members, &track).await?;
    let submitting = Instant::now();
    submit(w, dir, &track).await?;
    println!(
        "  backlog: {} jobs created in {:.2} s with no controller running",
        w.jobs,
        submitting.elapsed().as_secs_f64()
    );
    let clusters_cpu = tree_cpu_seconds(ground.pid());
    let started = Instant::now();
    let (mut controller, port) = start_controller(binary, dir, settings, w.members).await?;
    let ready_in = started.elapsed();
    wait_for_jobs(
        w,
        &track,
        &mut [&mut controller, &mut ground],
        started + w.deadline(settings),
    )
    .await?;
    let drained_in = started.elapsed();
    let controller_cpu = tree_cpu_seconds(controller.pid());
    let clusters_cpu = tree_cpu_seconds(ground.pid()) - clusters_cpu;
    let peak = proc_status_mib(controller.pid(), "VmHWM").unwrap_or(f64::NAN);
    let pods = w.jobs * w.shape.replicas();
    let pods_per_s = pods as f64 / drained_in.as_secs_f64();
    let ratio = pods_per_s / ceiling;
    let last_pod = {
        let track = lock(&track);
        track
            .jobs
            .values()
            .flat_map(|j| j.pods_created.values())
            .max()
            .map_or(f64::NAN, |t| ms(*t, started) / 1000.0)
    };
    println!(
        "  drain: controller started → every job Running with every pod up in {:.2} s (ready after {:.2} s, the last pod created after {last_pod:.2} s): {pods} pods, {pods_per_s:.0} pods/s",
        drained_in.as_secs_f64(),
        ready_in.as_secs_f64(),
    );
    println!(
        "  drain ratio (pods/s ÷ ceiling): {ratio:.3}{}",
        if w.targets.drain {
            against(ratio, Bound::AtLeast(0.5), "")
        } else {
            String::new()
        }
    );
    println!(
        "  CPU over the drain: controller {controller_cpu:.2} s, the sim {clusters_cpu:.2} s, in {:.2} s on {} cores (busy {:.2} cores)",
        drained_in.as_secs_f64(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        (controller_cpu + clusters_cpu) / drained_in.as_secs_f64()
    );
    // Whether a backlog still waits on something of its own: the same jobs
    // arriving with the controller running are the machine's pace.
    println!(
        "  drain pace ÷ the same jobs' pace arriving with the controller running: {:.2}",
        arriving.done_in.as_secs_f64() / drained_in.as_secs_f64()
    );
    // What the drain asked of the API servers, per job (its last status
    // writes included): the profile of where its time could go.
    let requests = settle(port, &mut controller, quiet).await?.requests();
    let per_job: Vec<String> = requests
        .iter()
        .map(|(kind, n)| format!("{kind}: {:.2}", n / w.jobs as f64))
        .collect();
    println!(
        "  requests per job by verb, resource and code: {}",
        per_job.join(", ")
    );
    let after = proc_status_mib(controller.pid(), "VmRSS").unwrap_or(f64::NAN);
    let steady = arriving.steady;
    let ratio_peak = peak / steady;
    println!(
        "  controller RSS: peak during the drain {peak:.0} MiB, after it {after:.0} MiB; steady state with the same jobs arriving {steady:.0} MiB; peak ÷ steady {ratio_peak:.2}{}",
        if w.targets.drain {
            against(ratio_peak, Bound::AtMost(1.2), "")
        } else {
            String::new()
        }
    );
    let per_1000 = |cpu: f64| cpu / w.jobs as f64 * 1000.0;
    Ok(Figures {
        key: w.key,
        controller_cpu_per_1000: per_1000(controller_cpu),
        clusters_cpu_per_1000: per_1000(clusters_cpu),
        compare: None,
    })
}

/// (g): the pod template of `g-direct`'s pods and of Kueue's Jobs: the
/// requests and the simulated kubelet's annotations of our replicas
/// (pending 0.1 s, then Running for `run_seconds`).
fn g_pod_template(w: &Workload, labels: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {
            "labels": labels,
            "annotations": {
                "sim.federation.tfjob.io/pending-seconds": "0.1",
                "sim.federation.tfjob.io/run-seconds": w.shape.run_seconds.to_string(),
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "tensorflow",
                "image": "tensorflow/tensorflow:2.15.0",
                "command": ["python", "/app/train.py"],
                "resources": {"requests": {"cpu": "100m"}},
            }],
        },
    })
}

/// (g-direct): creates job `n`'s pods, all at once, straight on a member
/// (member-1 for even `n`, member-2 for odd: the balanced limit), each
/// submitter with a client of its own per member.
async fn direct_creator(w: &Workload, dir: &Path) -> anyhow::Result<Create> {
    let members: Vec<String> = cluster_names(w.members).into_iter().skip(1).collect();
    anyhow::ensure!(!members.is_empty(), "g-direct needs a member");
    let mut apis: Vec<Vec<Api<Pod>>> = Vec::new();
    for _ in 0..SUBMITTERS {
        let mut each = Vec::new();
        for member in &members {
            each.push(Api::<Pod>::namespaced(
                client(dir, member).await?,
                NAMESPACE,
            ));
        }
        apis.push(each);
    }
    let mut template = g_pod_template(w, json!({}));
    template["apiVersion"] = json!("v1");
    template["kind"] = json!("Pod");
    let template: Arc<Pod> =
        Arc::new(serde_json::from_value(template).context("the g-direct pod is not a valid Pod")?);
    let replicas = w.shape.replicas();
    Ok(Arc::new(move |submitter, n| {
        let each = &apis[submitter];
        let api = each[n % each.len()].clone();
        let template = template.clone();
        Box::pin(async move {
            let job = job_name(n);
            let creates = (0..replicas).map(|i| {
                let mut pod = (*template).clone();
                pod.metadata.name = Some(format!("{job}-{i}"));
                pod.metadata.labels = Some([(DIRECT_JOB_LABEL.to_string(), job.clone())].into());
                let api = api.clone();
                async move { api.create(&PostParams::default(), &pod).await }
            });
            futures::future::try_join_all(creates).await?;
            Ok(())
        })
    }))
}

/// (g-kueue-*): creates job `n` as a batch/v1 Job on home in Kueue's
/// queue (parallelism = completions = the job's pods).
async fn kueue_creator(w: &Workload, dir: &Path) -> anyhow::Result<Create> {
    let replicas = w.shape.replicas();
    let template: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"namespace": NAMESPACE, "labels": {KUEUE_QUEUE_LABEL: "bench"}},
        "spec": {
            "parallelism": replicas,
            "completions": replicas,
            "backoffLimit": 0,
            "template": g_pod_template(w, json!({})),
        },
    }))
    .context("the g-kueue Job is not a valid Job")?;
    home_creator(dir, template).await
}

/// Kueue MultiKueue as `hack/kueue-up --foreground` runs it: stopped (its
/// processes with it) when dropped, by closing the script's standard input.
struct KueueRun {
    script: Proc,
    /// Each Kueue process: the cluster it serves and its pid (`WORK/pids`).
    pids: Vec<(String, u32)>,
}

/// Starts `hack/kueue-up` on the running real clusters of `dir` and waits
/// for its `WORK/ready` (every queue Active, every worker connected).
async fn start_kueue(dir: &Path, config: KueueConfig) -> anyhow::Result<KueueRun> {
    let binary = repo_path("target/kube/bin/kueue");
    if !binary.exists() {
        bail!(
            "{} is missing: build Kueue first with hack/build-kueue (minutes on two cores; the Kueue variants of (g) need it, CI does not build it)",
            binary.display()
        );
    }
    let work = dir.join("kueue");
    let mut command = Command::new(repo_path("hack/kueue-up"));
    command
        .arg("--kubeconfig-dir")
        .arg(dir)
        .args(["--config", config.as_str(), "--work"])
        .arg(&work)
        .arg("--foreground")
        .env("KUEUE_UP_EXIT_ON_STDIN_EOF", "1");
    let mut script = Proc::spawn(
        "Kueue (hack/kueue-up)",
        command,
        dir.join("kueue-up.log"),
        true,
    )?;
    let started = Instant::now();
    let limit = Duration::from_secs(600);
    while !work.join("ready").exists() {
        script.check_alive()?;
        if started.elapsed() > limit {
            bail!(
                "Kueue is not ready after {limit:?}; the end of {}:\n{}",
                script.log.display(),
                log_tail(&script.log, 20)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pids_file = work.join("pids");
    let pids: Vec<(String, u32)> = std::fs::read_to_string(&pids_file)
        .with_context(|| format!("reading {}", pids_file.display()))?
        .lines()
        .filter_map(|line| {
            let (cluster, pid) = line.split_once(' ')?;
            Some((cluster.to_string(), pid.trim().parse().ok()?))
        })
        .collect();
    anyhow::ensure!(
        !pids.is_empty(),
        "{} names no Kueue process",
        pids_file.display()
    );
    println!(
        "  Kueue ({} configuration): ready in {:.1} s (pids {}; logs in {})",
        config.as_str(),
        started.elapsed().as_secs_f64(),
        pids.iter()
            .map(|(cluster, pid)| format!("{cluster} {pid}"))
            .collect::<Vec<_>>()
            .join(", "),
        work.join("logs").display()
    );
    Ok(KueueRun { script, pids })
}

/// (g): one variant of the comparison on fresh real clusters: the
/// dispatcher (none, ours, Kueue) started, the jobs submitted as fast as
/// the clients go, until every job's pods all run.
async fn measure_compare(
    w: &Workload,
    dispatcher: Dispatcher,
    settings: &Settings,
    binary: &Path,
    dir: &Path,
) -> anyhow::Result<Figures> {
    let mut ground = start_ground(w, Ground::Real, binary, dir).await?;
    // Declared after the ground: dropped, so stopped, before it (Kueue's
    // webhooks would refuse pods and Jobs once it is gone).
    let mut controller = None;
    let mut metrics_port = None;
    let mut kueue = None;
    let create = match dispatcher {
        Dispatcher::Direct => direct_creator(w, dir).await?,
        Dispatcher::Ours => {
            let (started, port) = start_controller(binary, dir, settings, w.members).await?;
            (controller, metrics_port) = (Some(started), Some(port));
            tf_creator(w, dir).await?
        }
        Dispatcher::Kueue(config) => {
            kueue = Some(start_kueue(dir, config).await?);
            kueue_creator(w, dir).await?
        }
    };
    // The dispatcher's processes: what its CPU and RSS are read from.
    let processes: Vec<(String, u32)> = match (&controller, &kueue) {
        (Some(controller), _) => vec![("controller".to_string(), controller.pid())],
        (_, Some(kueue)) => kueue.pids.clone(),
        _ => Vec::new(),
    };

    let track: Shared = Arc::default();
    let selector = match dispatcher {
        Dispatcher::Ours => MANAGED,
        other => other.pod_label(),
    };
    let _watches = watch_clusters(
        dir,
        w.members,
        &track,
        dispatcher == Dispatcher::Ours,
        selector,
        dispatcher.pod_label(),
    )
    .await?;

    // The API servers at rest on this ground, for scale: the nodes'
    // heartbeats, leases, and the dispatcher's own idle requests.
    let sample = Duration::from_secs(if settings.smoke { 1 } else { 5 });
    let total = |cpu: &BTreeMap<String, f64>| cpu.values().sum::<f64>();
    let at_rest = total(&apiserver_cpu_seconds(ground.pid()));
    tokio::time::sleep(sample).await;
    let apiservers_before = apiserver_cpu_seconds(ground.pid());
    let at_rest = (total(&apiservers_before) - at_rest) / sample.as_secs_f64();

    let dispatcher_before: Vec<f64> = processes
        .iter()
        .map(|(_, pid)| tree_cpu_seconds(*pid))
        .collect();
    let scrape_before = match metrics_port {
        Some(port) => Some(Scrape::take(port).await?),
        None => None,
    };
    let writes_before = apiserver_writes(dir, w.members).await?;
    let clusters_before = tree_cpu_seconds(ground.pid());
    let bench_before = own_cpu_seconds();
    let first_submit = Instant::now();
    let deadline = first_submit + w.deadline(settings);
    submit_with(w, &track, create).await?;
    let submitted_in = first_submit.elapsed();
    {
        let mut alive: Vec<&mut Proc> = std::iter::once(&mut ground)
            .chain(controller.as_mut())
            .chain(kueue.as_mut().map(|k| &mut k.script))
            .collect();
        wait_for_jobs(w, &track, &mut alive, deadline).await?;
        // The burst's trailing writes (job status, Kueue's status copies)
        // count too: the same tail for every variant.
        tokio::time::sleep(sample).await;
        for process in alive.iter_mut() {
            process.check_alive()?;
        }
    }
    let window = first_submit.elapsed();
    let dispatcher_cpu: Vec<f64> = processes
        .iter()
        .zip(&dispatcher_before)
        .map(|((_, pid), before)| tree_cpu_seconds(*pid) - before)
        .collect();
    let peaks: Vec<Option<f64>> = processes
        .iter()
        .map(|(_, pid)| proc_status_mib(*pid, "VmHWM"))
        .collect();
    let clusters_cpu = tree_cpu_seconds(ground.pid()) - clusters_before;
    let apiservers_cpu: BTreeMap<String, f64> = apiserver_cpu_seconds(ground.pid())
        .into_iter()
        .map(|(cluster, cpu)| {
            let before = apiservers_before.get(&cluster).copied().unwrap_or_default();
            (cluster, cpu - before)
        })
        .collect();
    let bench_cpu = own_cpu_seconds() - bench_before;
    let writes_after = apiserver_writes(dir, w.members).await?;
    let scrape_after = match metrics_port {
        Some(port) => Some(Scrape::take(port).await?),
        None => None,
    };

    let jobs = w.jobs as f64;
    let replicas = w.shape.replicas();
    // The watches wait for this lock: no await while it is held.
    let track_now = lock(&track);
    let tracked: Vec<&JobTrack> = (0..w.jobs)
        .filter_map(|n| track_now.jobs.get(&job_name(n)))
        .collect();
    let last_up = tracked
        .iter()
        .filter_map(|j| all_at(&j.pods_up, replicas))
        .max()
        .map_or(f64::NAN, |t| (t - first_submit).as_secs_f64());
    let jobs_per_s = jobs / last_up;
    println!(
        "  submitted {} jobs in {:.2} s; the last job's {replicas} pods all Running {last_up:.2} s after the first submit: {jobs_per_s:.2} jobs/s, {:.0} pods/s",
        w.jobs,
        submitted_in.as_secs_f64(),
        jobs * replicas as f64 / last_up,
    );
    let to_created: Vec<f64> = tracked
        .iter()
        .filter_map(|j| Some(ms(all_at(&j.pods_created, replicas)?, j.submitted?)))
        .collect();
    let mut to_running: Vec<f64> = tracked
        .iter()
        .filter_map(|j| Some(ms(all_at(&j.pods_up, replicas)?, j.submitted?)))
        .collect();
    print_latency(
        "submit → all the job's pods created",
        to_created,
        w.jobs,
        None,
    );
    print_latency(
        "submit → all the job's pods Running",
        to_running.clone(),
        w.jobs,
        None,
    );
    to_running.sort_by(f64::total_cmp);
    let pods: BTreeMap<String, f64> = track_now
        .pods_by_cluster
        .iter()
        .map(|(cluster, names)| (cluster.clone(), names.len() as f64))
        .collect();
    print_member_share("pods", &pods, "", 0);
    if pods.get("home").is_some_and(|n| *n > 0.0) {
        println!("  note: pods on home: the jobs were meant for the members alone");
    }
    let busiest = print_member_share("API servers' CPU", &apiservers_cpu, " s", 2);
    if track_now.relists > 0 || track_now.watch_errors > 0 {
        println!(
            "  note: the bench's watches re-listed {} times and failed {} times: events may have been missed",
            track_now.relists, track_now.watch_errors
        );
    }
    drop(track_now);

    if let (Some(before), Some(after)) = (&scrape_before, &scrape_after) {
        print_writes(before, after, jobs, None);
    }
    print_apiserver_writes(&writes_before, &writes_after, jobs);
    let apiservers_total = total(&apiservers_cpu);
    println!(
        "  API servers' CPU over the {:.1} s from the first submit to {:.0} s after the last job's pods all ran: {apiservers_total:.2} s, {:.3} s per job (at rest before the burst: {at_rest:.3} s per s)",
        window.as_secs_f64(),
        sample.as_secs_f64(),
        apiservers_total / jobs,
    );
    // A fold, not `sum`: the sum of nothing (g-direct) is -0.0.
    let dispatcher_total: f64 = dispatcher_cpu.iter().fold(0.0, |a, b| a + b);
    let peak_total: Option<f64> = peaks.iter().copied().sum();
    match dispatcher {
        Dispatcher::Direct => {
            println!("  dispatcher: none (the load generator creates the pods; its CPU is below)")
        }
        _ => {
            let each: Vec<String> = processes
                .iter()
                .zip(&dispatcher_cpu)
                .zip(&peaks)
                .map(|(((what, pid), cpu), peak)| {
                    format!(
                        "{what} (pid {pid}) {cpu:.2} s, peak RSS {:.0} MiB",
                        peak.unwrap_or(f64::NAN)
                    )
                })
                .collect();
            println!(
                "  dispatcher CPU: {dispatcher_total:.2} s, {:.3} s per job; peak RSS {:.0} MiB{} ({})",
                dispatcher_total / jobs,
                peak_total.unwrap_or(f64::NAN),
                if processes.len() > 1 {
                    ", the processes' peaks summed"
                } else {
                    ""
                },
                each.join("; ")
            );
        }
    }
    println!(
        "  CPU in the same window: the real-clusters tree (API servers, etcd, controller managers, schedulers, kwok, the launcher) {clusters_cpu:.2} s; the load generator and its watches, this process, {bench_cpu:.2} s"
    );

    let quantile_ms = |q| quantile(&to_running, q);
    let per_1000 = |cpu: f64| cpu / jobs * 1000.0;
    Ok(Figures {
        key: w.key,
        controller_cpu_per_1000: per_1000(dispatcher_total),
        clusters_cpu_per_1000: per_1000(clusters_cpu),
        compare: Some(Compared {
            key: w.key,
            dispatcher,
            jobs: w.jobs,
            jobs_per_s,
            p50_ms: quantile_ms(0.50),
            p95_ms: quantile_ms(0.95),
            p99_ms: quantile_ms(0.99),
            dispatcher_cpu: (dispatcher != Dispatcher::Direct).then_some(dispatcher_total),
            apiservers_cpu: apiservers_total,
            apiservers_cpu_per_job: apiservers_total / jobs,
            busiest_member_share: busiest,
            peak_rss_mib: peak_total.filter(|_| dispatcher != Dispatcher::Direct),
        }),
    })
}

/// (g): the variants side by side, then the issue's acceptance criteria,
/// each with its target, value and verdict. MultiKueue's figure in each is
/// its better configuration's on that figure (the stricter reading).
fn print_comparison(results: &[Figures]) {
    let g: Vec<&Compared> = results.iter().filter_map(|r| r.compare.as_ref()).collect();
    if g.is_empty() {
        return;
    }
    println!();
    println!(
        "comparison (g): the real ground, whole {G_PODS}-pod jobs on 2 members (submit → all pods Running, s; CPU s; RSS MiB)"
    );
    println!(
        "  {:<16} {:>5} {:>7} {:>7} {:>7} {:>7} {:>15} {:>15} {:>14} {:>9}",
        "variant",
        "jobs",
        "jobs/s",
        "p50",
        "p95",
        "p99",
        "dispatcher CPU",
        "API CPU (/job)",
        "busiest member",
        "peak RSS"
    );
    for c in &g {
        println!(
            "  {:<16} {:>5} {:>7.2} {:>7.1} {:>7.1} {:>7.1} {:>15} {:>15} {:>13.0}% {:>9}",
            c.key,
            c.jobs,
            c.jobs_per_s,
            c.p50_ms / 1000.0,
            c.p95_ms / 1000.0,
            c.p99_ms / 1000.0,
            c.dispatcher_cpu
                .map_or("none".to_string(), |cpu| format!("{cpu:.2}")),
            format!("{:.2} ({:.3})", c.apiservers_cpu, c.apiservers_cpu_per_job),
            c.busiest_member_share,
            c.peak_rss_mib
                .map_or("-".to_string(), |rss| format!("{rss:.0}")),
        );
    }
    let find = |d: Dispatcher| g.iter().copied().find(|c| c.dispatcher == d);
    let kueue: Vec<&Compared> = g
        .iter()
        .copied()
        .filter(|c| matches!(c.dispatcher, Dispatcher::Kueue(_)))
        .collect();
    // MultiKueue's best on one figure: the highest or the lowest.
    let best = |figure: fn(&Compared) -> f64, highest: bool| {
        kueue.iter().copied().max_by(|a, b| {
            let order = figure(a).total_cmp(&figure(b));
            if highest { order } else { order.reverse() }
        })
    };
    println!("acceptance (issue 26, item 5 (g)):");
    let Some(ours) = find(Dispatcher::Ours) else {
        println!("  not judged: g-ours did not run");
        return;
    };
    match find(Dispatcher::Direct) {
        Some(direct) => {
            let ratio = ours.jobs_per_s / direct.jobs_per_s;
            println!(
                "  jobs/s, ours ÷ the direct baseline: {:.2} ÷ {:.2} = {ratio:.2}{}",
                ours.jobs_per_s,
                direct.jobs_per_s,
                against(ratio, Bound::AtLeast(0.8), "")
            );
        }
        None => println!("  jobs/s against the direct baseline: not judged, g-direct did not run"),
    }
    match best(|c| c.jobs_per_s, true) {
        Some(k) => {
            let ratio = ours.jobs_per_s / k.jobs_per_s;
            println!(
                "  jobs/s, ours ÷ MultiKueue's best configuration ({}): {:.2} ÷ {:.2} = {ratio:.2}{}",
                k.key,
                ours.jobs_per_s,
                k.jobs_per_s,
                against(ratio, Bound::AtLeast(4.0), "")
            );
        }
        None => println!("  against MultiKueue: not judged, neither g-kueue variant ran"),
    }
    if let Some(k) = best(|c| c.p50_ms, false) {
        let ratio = ours.p99_ms / k.p50_ms;
        println!(
            "  submit → all pods Running, ours' p99 ÷ MultiKueue's best p50 ({}): {:.1} s ÷ {:.1} s = {ratio:.2}{}",
            k.key,
            ours.p99_ms / 1000.0,
            k.p50_ms / 1000.0,
            against(ratio, Bound::AtMost(0.5), "")
        );
    }
    if let Some(k) = best(|c| c.apiservers_cpu_per_job, false) {
        let ratio = ours.apiservers_cpu_per_job / k.apiservers_cpu_per_job;
        println!(
            "  API servers' CPU per job, ours ÷ MultiKueue's lower ({}): {:.3} s ÷ {:.3} s = {ratio:.2}{}",
            k.key,
            ours.apiservers_cpu_per_job,
            k.apiservers_cpu_per_job,
            against(ratio, Bound::AtMost(0.4), "")
        );
    }
    println!(
        "  the busiest member API server's share of the members' CPU, ours: {:.0} %{}",
        ours.busiest_member_share,
        against(ours.busiest_member_share, Bound::AtMost(60.0), " %")
    );
}

/// When the last of `replicas` pods got there, once all have.
fn all_at(pods: &HashMap<String, Instant>, replicas: usize) -> Option<Instant> {
    if pods.len() < replicas {
        return None;
    }
    pods.values().max().copied()
}

/// `later - earlier` in milliseconds, negative when `later` came first.
fn ms(later: Instant, earlier: Instant) -> f64 {
    if later >= earlier {
        (later - earlier).as_secs_f64() * 1000.0
    } else {
        -((earlier - later).as_secs_f64() * 1000.0)
    }
}

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn print_latency(what: &str, mut values: Vec<f64>, jobs: usize, p99_target: Option<f64>) {
    values.sort_by(f64::total_cmp);
    let negative = values.iter().filter(|v| **v < 0.0).count();
    let p99 = quantile(&values, 0.99);
    println!(
        "  {what}: p50 {:.0} ms, p95 {:.0} ms, p99 {p99:.0} ms, max {:.0} ms ({} of {jobs} jobs{}){}",
        quantile(&values, 0.50),
        quantile(&values, 0.95),
        values.last().copied().unwrap_or(f64::NAN),
        values.len(),
        if negative > 0 {
            format!(
                "; {negative} negative: the job's event arrived before the pod's, the watches lag differently"
            )
        } else {
            String::new()
        },
        p99_target
            .map(|t| against(p99, Bound::AtMost(t), " ms"))
            .unwrap_or_default()
    );
}

enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

/// "; target ≤ 16: 0.45× the target, met"
fn against(value: f64, bound: Bound, unit: &str) -> String {
    let (sign, target, met) = match bound {
        Bound::AtLeast(t) => ("≥", t, value >= t),
        Bound::AtMost(t) => ("≤", t, value <= t),
    };
    format!(
        "; target {sign} {target}{unit}: {:.2}× the target, {}",
        value / target,
        if met { "met" } else { "NOT MET" }
    )
}

fn summary(results: &[Figures]) {
    if results.is_empty() {
        return;
    }
    println!(
        "summary: CPU seconds per 1,000 jobs, controller (for (g), the dispatcher) / clusters"
    );
    for r in results {
        println!(
            "  ({}) {:.2} / {:.2}",
            r.key, r.controller_cpu_per_1000, r.clusters_cpu_per_1000
        );
    }
    let cpu = |keys: &[&str]| {
        let picked: Vec<f64> = results
            .iter()
            .filter(|r| keys.contains(&r.key))
            .map(|r| r.controller_cpu_per_1000)
            .collect();
        (!picked.is_empty()).then(|| picked.iter().sum::<f64>() / picked.len() as f64)
    };
    if let (Some(busy), Some(live)) = (cpu(&["b-pack", "b-spread", "c"]), cpu(&["d"])) {
        println!(
            "  controller CPU per job, (d) ÷ mean of (b)/(c): {:.2} (target: flat, about 1)",
            live / busy
        );
    }
    print_comparison(results);
}
