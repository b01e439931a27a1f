//! Leader election (`run --leader-elect`): of several replicas only the
//! Lease holder runs the actors and is ready; a standby takes over when the
//! leader dies (after the Lease expires) or stops (at once: it releases).
//! On both grounds; on the real one the replicas run under the identity
//! `deploy/controller.yaml` ships, whose Role allows the Lease in the
//! namespace `tfjob-federator` only.

#[macro_use]
mod common;

use common::observe;
use common::real::Ground;
use common::setup::{Env, LEASE_NAMESPACE, Setup};
use common::sim_kube::set_faults;
use common::wait::eventually;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::json;
use tfjob_federator::api::TensorFlowTrainingJob;

const WAIT: Duration = Duration::from_secs(30);

async fn ready(addr: std::net::SocketAddr) -> (u16, String) {
    observe::get(addr, "/readyz").await
}

async fn holder(system: &Env) -> Option<String> {
    let lease = Api::<Lease>::namespaced(system.client.clone(), LEASE_NAMESPACE)
        .get_opt("tfjob-federator")
        .await
        .ok()??;
    lease.spec?.holder_identity
}

/// Starts the system with replica `first` leading, returns it once ready.
async fn first_leading(ground: Ground, lease_ms: u64) -> Env {
    let system = Setup::on(ground)
        .leader_elect("first")
        .settings(&format!("leaseDurationMs: {lease_ms}\n"))
        .start()
        .await;
    eventually("the first replica ready", WAIT, async || {
        (ready(system.metrics()).await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(holder(&system).await.as_deref(), Some("first"));
    system
}

async fn submit(system: &Env, name: &str, run_seconds: &str) -> Api<TensorFlowTrainingJob> {
    let jobs: Api<TensorFlowTrainingJob> = Api::namespaced(system.client.clone(), "default");
    let job: TensorFlowTrainingJob = serde_json::from_value(json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": name},
        "spec": {"replicaSpecs": [{"type": "worker", "replicas": 2, "template": {
            "metadata": {"annotations": {"sim.federation.tfjob.io/run-seconds": run_seconds}},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}}]},
    }))
    .expect("a job");
    jobs.create(&Default::default(), &job)
        .await
        .expect("job created");
    jobs
}

async fn wait_phase(
    jobs: &Api<TensorFlowTrainingJob>,
    name: &str,
    phase: &str,
) -> TensorFlowTrainingJob {
    eventually(&format!("{name} {phase}"), WAIT, async || {
        let job = jobs.get(name).await.ok()?;
        let current = serde_json::to_value(job.status.as_ref()?.phase?).ok()?;
        (current == phase).then_some(job)
    })
    .await
}

async fn a_standby_waits_unready_and_takes_over_when_the_leader_dies(ground: Ground) {
    let mut system = first_leading(ground, 2000).await;
    let mut second = system.start_replica("second").await;
    let second_addr = second.metrics;
    for _ in 0..5 {
        let (status, body) = ready(second_addr).await;
        assert_eq!(status, 503, "a standby is not ready: {body}");
        assert!(body.contains("leadership"), "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = observe::get(second_addr, "/healthz").await;
    assert_eq!(status, 200, "a standby is alive");

    let jobs = submit(&system, "steady", "4").await;
    wait_phase(&jobs, "steady", "Running").await;
    // The leader dies without releasing: the Lease expires, then the standby leads.
    let died = Instant::now();
    system.kill_controller();
    eventually("the standby leading and ready", WAIT, async || {
        (ready(second_addr).await.0 == 200).then_some(())
    })
    .await;
    assert!(
        died.elapsed() >= Duration::from_millis(1500),
        "took over only once the Lease could have expired: {:?}",
        died.elapsed()
    );
    assert_eq!(holder(&system).await.as_deref(), Some("second"));
    let done = wait_phase(&jobs, "steady", "Succeeded").await;
    assert_eq!(
        done.status.map(|s| s.backoff_count),
        Some(0),
        "the new leader adopted the pods, it did not restart them"
    );
    second.check_alive();
}

async fn a_leader_that_stops_hands_over_at_once(ground: Ground) {
    // A long Lease: a takeover well before it expires proves the release.
    let mut system = first_leading(ground, 30_000).await;
    let second = system.start_replica("second").await;
    let second_addr = second.metrics;
    assert_eq!(ready(second_addr).await.0, 503, "standing by");
    let stopped = Instant::now();
    let status = system.terminate_controller();
    assert!(status.success(), "a clean stop: {status}");
    eventually("the standby leading", WAIT, async || {
        (ready(second_addr).await.0 == 200).then_some(())
    })
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "taken over long before the Lease would expire: {:?}",
        stopped.elapsed()
    );
    assert_eq!(holder(&system).await.as_deref(), Some("second"));
}

/// With a quarter of home's requests failing, the leader once lost its
/// Lease and exited within seconds. A burst of errors shorter than the
/// Lease must cost it nothing.
async fn a_leader_keeps_its_lease_through_a_burst_of_errors(ground: Ground) {
    let lease_ms = 3000;
    let mut system = first_leading(ground, lease_ms).await;
    let home = system.client.clone();
    let lease = || async {
        Api::<Lease>::namespaced(home.clone(), LEASE_NAMESPACE)
            .get("tfjob-federator")
            .await
            .expect("the Lease")
            .spec
            .expect("a spec")
    };
    let before = lease().await;
    let faults = |rate: f64| json!({"errorRate": rate});
    set_faults(&home, faults(0.3)).await;
    let burst = Instant::now();
    while burst.elapsed() < Duration::from_millis(4 * lease_ms) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        system.check_controller_alive();
    }
    set_faults(&home, faults(0.0)).await;
    let after = lease().await;
    assert_eq!(
        after.holder_identity.as_deref(),
        Some("first"),
        "still the leader"
    );
    assert_eq!(
        after.lease_transitions, before.lease_transitions,
        "the Lease never changed hands"
    );
    assert_eq!(ready(system.metrics()).await.0, 200, "still ready");
}

on_both_grounds!(
    a_leader_keeps_its_lease_through_a_burst_of_errors,
    a_standby_waits_unready_and_takes_over_when_the_leader_dies,
    a_leader_that_stops_hands_over_at_once,
);
