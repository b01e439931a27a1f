//! Simulated API server throughput and memory, measured through kube-rs over
//! loopback HTTP (release build): `cargo bench --bench sim`.
//!
//! 1. Pod creates per second from 8 concurrent clients while 2 watches stream
//!    every event, on a simulated cluster and, in the same run, on a real one
//!    (`hack/real-clusters --clusters 1`: kube-apiserver and etcd, reached
//!    through its fault proxy as every client is), with the ratio of the
//!    two: the ceiling the controller's own throughput is held to.
//! 2. Resident memory of the process once 100,000 typical pods are stored.
//! 3. Scheduler and kubelet: 10,000 pods created on a cluster of 50 nodes,
//!    time until every one is bound and Succeeded.
//!
//! `SIM_BENCH_PODS` overrides the pod count of part 2.
//! `REAL_BENCH_PODS` the pod count on the real cluster (default 6,000).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube_sim::{self as sim, SimOptions};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;

use common::real;

const CLIENTS: usize = 8;
const WATCHES: usize = 2;
const THROUGHPUT_PODS: usize = 24_000;
const LIFECYCLE_PODS: usize = 10_000;
const LIFECYCLE_NODES: usize = 50;

/// A pod shaped like the ones the controller creates: labels, annotations,
/// one container with env, resources and a port. It names a scheduler the
/// cluster does not run, so parts 1 and 2 measure the API server alone.
fn typical_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/managed-by": "tfjob-federator",
                "federation.tfjob.io/job-name": "mnist",
                "federation.tfjob.io/job-uid": "6f1c1f0e-2b7e-4d7e-9a39-0f0f6f4f2a11",
                "federation.tfjob.io/replica-type": "worker",
                "federation.tfjob.io/replica-index": "3",
                "federation.tfjob.io/placement-epoch": "0",
            },
            "annotations": {"sim.federation.tfjob.io/run-seconds": "30"},
        },
        "spec": {
            "restartPolicy": "Never",
            "schedulerName": "benchmark-idle",
            "containers": [{
                "name": "tensorflow",
                "image": "tensorflow/tensorflow:2.15.0-gpu",
                "command": ["python", "/app/train.py", "--epochs=10"],
                "env": [{"name": "TF_CONFIG", "value": "{\"cluster\":{\"worker\":[\"mnist-worker-0.default.svc:2222\",\"mnist-worker-1.default.svc:2222\"]},\"task\":{\"type\":\"worker\",\"index\":3},\"environment\":\"cloud\"}"}],
                "ports": [{"name": "tfjob-port", "containerPort": 2222}],
                "resources": {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
            }],
        },
    }))
    .expect("the typical pod is a valid Pod")
}

/// Creates `total` pods named `<prefix>-<n>` from `CLIENTS` clients; returns the elapsed time.
async fn create_pods(kubeconfig: &str, prefix: &str, total: usize) -> Duration {
    create_pods_shaped(kubeconfig, prefix, total, typical_pod).await
}

/// A short pod that fits many to a node: it runs the kubelet's default second.
fn short_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"sim.federation.tfjob.io/pending-seconds": "0.1", "sim.federation.tfjob.io/run-seconds": "1"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
    }))
    .expect("the short pod is a valid Pod")
}

async fn create_pods_shaped(
    kubeconfig: &str,
    prefix: &str,
    total: usize,
    shape: fn(&str) -> Pod,
) -> Duration {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let api: Api<Pod> = Api::namespaced(real::client_for(kubeconfig).await, "default");
        let next = next.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= total {
                    break;
                }
                api.create(&PostParams::default(), &shape(&format!("{prefix}-{n}")))
                    .await
                    .expect("create succeeds");
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    started.elapsed()
}

/// Part 1 on one cluster: `total` pods from `CLIENTS` clients while
/// `WATCHES` watches follow them; creates per second. Every create must
/// reach every watch.
async fn creates_per_second(ground: &str, kubeconfig: &str, total: usize) -> f64 {
    let seen = Arc::new(AtomicU64::new(0));
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        let api: Api<Pod> = Api::namespaced(real::client_for(kubeconfig).await, "default");
        let seen = seen.clone();
        watches.push(tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(_)) = event {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let elapsed = create_pods(kubeconfig, "throughput", total).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.load(Ordering::Relaxed) < (total * WATCHES) as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for watch in watches {
        watch.abort();
    }
    let delivered = seen.load(Ordering::Relaxed);
    let rate = total as f64 / elapsed.as_secs_f64();
    println!(
        "creates ({ground}): {total} pods from {CLIENTS} clients with {WATCHES} watches in {:.2}s = {rate:.0} creates/s; watch events delivered {delivered}/{}",
        elapsed.as_secs_f64(),
        total * WATCHES
    );
    assert_eq!(
        delivered,
        (total * WATCHES) as u64,
        "every create reaches both watches"
    );
    rate
}

fn resident_memory_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[tokio::main]
async fn main() {
    let pods: usize = std::env::var("SIM_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let cluster = sim::start_cluster("bench", &SimOptions::default())
        .await
        .expect("cluster starts");
    let kubeconfig = cluster.kubeconfig();

    let simulated = creates_per_second("simulated", &kubeconfig, THROUGHPUT_PODS).await;
    let real_pods: usize = std::env::var("REAL_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6_000);
    let real = {
        let launcher = real::Launcher::start(&["--clusters", "1"]).await;
        let kubeconfig = std::fs::read_to_string(launcher.kubeconfig("home"))
            .expect("the real cluster's kubeconfig");
        creates_per_second("real", &kubeconfig, real_pods).await
    };
    println!(
        "ceiling: simulated {simulated:.0} creates/s, real {real:.0} creates/s: the simulator is {:.1}x the real API server",
        simulated / real
    );

    let remaining = pods.saturating_sub(THROUGHPUT_PODS);
    create_pods(&kubeconfig, "memory", remaining).await;
    let api: Api<Pod> = Api::namespaced(real::client_for(&kubeconfig).await, "default");
    let page = api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
        .expect("list succeeds");
    let stored = page.items.len() as i64 + page.metadata.remaining_item_count.unwrap_or(0);
    println!(
        "memory: {stored} pods stored, resident set {:.0} MiB (whole process: server, clients, watches)",
        resident_memory_bytes() as f64 / (1024.0 * 1024.0)
    );
    cluster.stop().await;
    lifecycle().await;
}

/// Part 3: every pod bound by the scheduler and run to Succeeded by the kubelet.
async fn lifecycle() {
    let options = SimOptions {
        nodes: sim::NodeShape {
            count: LIFECYCLE_NODES,
            ..Default::default()
        },
        ..Default::default()
    };
    let cluster = sim::start_cluster("lifecycle", &options)
        .await
        .expect("cluster starts");
    let kubeconfig = cluster.kubeconfig();
    let api: Api<Pod> = Api::namespaced(real::client_for(&kubeconfig).await, "default");
    let succeeded = Arc::new(AtomicU64::new(0));
    let counter = succeeded.clone();
    tokio::spawn(async move {
        let mut done = std::collections::HashSet::new();
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event
                && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
                && done.insert(pod.metadata.name.clone())
            {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let started = Instant::now();
    let created = create_pods_shaped(&kubeconfig, "short", LIFECYCLE_PODS, short_pod).await;
    let deadline = started + Duration::from_secs(120);
    while succeeded.load(Ordering::Relaxed) < LIFECYCLE_PODS as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = succeeded.load(Ordering::Relaxed);
    println!(
        "lifecycle: {done}/{LIFECYCLE_PODS} pods on {LIFECYCLE_NODES} nodes bound and Succeeded {:.1}s after the first create (creating took {:.1}s)",
        started.elapsed().as_secs_f64(),
        created.as_secs_f64()
    );
    assert_eq!(done, LIFECYCLE_PODS as u64, "every pod finishes");
    cluster.stop().await;
}
