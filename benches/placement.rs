//! One placement decision alone, the pure `placement::place` with no actor,
//! client or other process around it: `cargo bench --bench placement`.
//! The shape of the controller benchmark's (e): home + 100 members × 50
//! nodes of 1 GPU, jobs of 8 replicas with 1 GPU each, Pack; the clusters'
//! free GPUs vary from decision to decision (a member is full, half full,
//! or free), so the tightest fitting cluster is anywhere in the list.
//! It prints p50/p99/max over `PLACEMENT_BENCH_DECISIONS` (10,000) decisions:
//! what (e)'s histogram shows beyond this is the machine, not the decision.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tfjob_federator::api::{ReplicaKey, ReplicaType};
use tfjob_federator::placement::{self, ClusterState, Demand, GPU, Policy, Resources};

const MEMBERS: usize = 100;
const NODES: usize = 50;

fn node(gpus: i64) -> Resources {
    BTreeMap::from([
        ("cpu".to_string(), 32_000),
        ("memory".to_string(), 128 << 30),
        ("pods".to_string(), 110_000),
        (GPU.to_string(), gpus * 1000),
    ])
}

/// Home and the members, with `busy(i)` of member i's nodes taken.
fn clusters(busy: impl Fn(usize) -> usize) -> Vec<ClusterState> {
    (0..=MEMBERS)
        .map(|i| ClusterState {
            name: if i == 0 {
                "home".to_string()
            } else {
                format!("member-{i:03}")
            },
            member: i > 0,
            ready: true,
            nodes: (0..NODES)
                .map(|n| node(if n < busy(i) { 0 } else { 1 }))
                .collect(),
            ..ClusterState::default()
        })
        .collect()
}

fn main() {
    let decisions: usize = std::env::var("PLACEMENT_BENCH_DECISIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let demands: Vec<Demand> = (0..8)
        .map(|i| Demand {
            key: if i == 0 {
                ReplicaKey::new(ReplicaType::Chief, 0)
            } else {
                ReplicaKey::new(ReplicaType::Worker, i - 1)
            },
            requests: BTreeMap::from([("cpu".to_string(), 100), (GPU.to_string(), 1000)]),
        })
        .collect();
    let policy = Policy::default();
    let states: Vec<Vec<ClusterState>> = (0..16)
        .map(|round| clusters(move |i| (i * 7 + round * 13) % (NODES + 1)))
        .collect();
    let mut took: Vec<Duration> = Vec::with_capacity(decisions);
    let mut placed = 0usize;
    for d in 0..decisions {
        let state = &states[d % states.len()];
        let started = Instant::now();
        let decision = placement::place(&demands, state, &policy);
        took.push(started.elapsed());
        placed += usize::from(decision.is_ok());
    }
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q).ceil() as usize).clamp(1, took.len()) - 1];
    println!(
        "placement::place, {} clusters × {NODES} nodes, 8 replicas, Pack: {decisions} decisions ({placed} placed): p50 {:?}, p99 {:?}, max {:?}; target p99 ≤ 5 ms: {}",
        MEMBERS + 1,
        at(0.5),
        at(0.99),
        at(1.0),
        if at(0.99) <= Duration::from_millis(5) {
            "met"
        } else {
            "NOT MET"
        }
    );
}
