use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::signing::{Signer, subject};

const LOST: u64 = 60_000;

fn settings(lost: u64, fence_after: u64, grace: u64, skew: u64, probe: u64) -> Settings {
    Settings {
        cluster_lost_timeout_ms: lost,
        fence_after_ms: fence_after,
        fence_pod_grace_ms: grace,
        clock_skew_margin_ms: skew,
        member_probe_interval_ms: probe,
    }
}

#[test]
fn the_settings_check_refuses_a_lost_timeout_that_does_not_wait_for_the_fence() {
    // (lost, fenceAfter, grace, skew, probe) → refused, with the words the error must name.
    // An empty list: accepted.
    let table: &[(Settings, &[&str])] = &[
        // The shipped defaults.
        (settings(LOST, 30_000, 10_000, 5_000, 5_000), &[]),
        // The tests' fast loss.
        (settings(3_000, 1_250, 1_000, 250, 500), &[]),
        // Equal is not enough: it must exceed.
        (
            settings(45_000, 30_000, 10_000, 5_000, 5_000),
            &[
                "clusterLostTimeoutMs (45000)",
                "fenceAfterMs (30000)",
                "fencePodGraceMs (10000)",
                "clockSkewMarginMs (5000)",
                "= 45000",
            ],
        ),
        (settings(45_001, 30_000, 10_000, 5_000, 5_000), &[]),
        (
            settings(3_000, 2_000, 1_000, 0, 500),
            &["clusterLostTimeoutMs (3000)", "fenceAfterMs (2000)"],
        ),
        // No overflow past u64::MAX: saturates, and is refused.
        (
            settings(u64::MAX, u64::MAX, 1_000, 1, 1),
            &["clusterLostTimeoutMs", "fenceAfterMs"],
        ),
        // A fence quicker than two renewals and the skew would fence a member that is not cut off.
        (
            settings(LOST, 10_000, 10_000, 5_000, 5_000),
            &[
                "fenceAfterMs (10000)",
                "memberProbeIntervalMs (5000)",
                "= 15000",
            ],
        ),
        (settings(LOST, 15_000, 10_000, 5_000, 5_000), &[]),
        // No grace would force-delete pods.
        (
            settings(LOST, 30_000, 999, 5_000, 5_000),
            &["fencePodGraceMs (999)"],
        ),
        (
            settings(LOST, 30_000, 0, 0, 5_000),
            &["fencePodGraceMs (0)"],
        ),
    ];
    for (settings, refused) in table {
        match check(settings) {
            Ok(()) => assert!(
                refused.is_empty(),
                "{settings:?} accepted, expected refused"
            ),
            Err(e) => {
                assert!(!refused.is_empty(), "{settings:?} refused: {e}");
                let text = e.to_string();
                for word in *refused {
                    assert!(text.contains(word), "{settings:?}: {text} lacks {word}");
                }
            }
        }
    }
}

#[test]
fn the_fence_deletes_with_the_pods_grace_capped_and_never_none() {
    // (fencePodGraceMs, pod's terminationGracePeriodSeconds) → seconds
    let table = [
        (10_000, None, 10),
        (60_000, None, 30),
        (10_000, Some(5), 5),
        (10_000, Some(0), 1),
        (1_500, Some(30), 1),
        (2_000, Some(30), 2),
        (10_000, Some(-3), 1),
        (u64::MAX, None, 30),
    ];
    for (grace_ms, pod, expected) in table {
        assert_eq!(grace_seconds(grace_ms, pod), expected, "{grace_ms} {pod:?}");
    }
}

fn pod(labels: &[(&str, &str)], signature: Option<String>) -> Pod {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let annotations =
        signature.map(|s| BTreeMap::from([(FENCE_SIGNATURE_ANNOTATION.to_string(), s)]));
    Pod {
        metadata: ObjectMeta {
            name: Some("job-worker-1".into()),
            labels: Some(labels),
            annotations,
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

#[test]
fn only_pods_whose_fence_signature_verifies_are_stoppable() {
    let signer = Signer::new(b"0123456789abcdef0123456789abcdef", None);
    let verifier = FenceVerifier::new(signer.fence_key());
    let ours = [
        (MANAGED_BY_LABEL, MANAGER),
        (JOB_UID_LABEL, "uid-1"),
        (REPLICA_TYPE_LABEL, "worker"),
        (REPLICA_INDEX_LABEL, "1"),
        (PLACEMENT_EPOCH_LABEL, "3"),
    ];
    let good = verifier.sign(&subject("uid-1", "worker-1", "3", "Pod"));
    let stranger = FenceVerifier::new(b"another controller's fence key..");
    let table: Vec<(&str, Pod, bool)> = vec![
        (
            "signed for exactly its labels",
            pod(&ours, Some(good.clone())),
            true,
        ),
        ("labels copied, no signature", pod(&ours, None), false),
        (
            "labels copied, the controller's signature instead",
            pod(
                &ours,
                Some(signer.sign(&subject("uid-1", "worker-1", "3", "Pod"))),
            ),
            false,
        ),
        (
            "another controller's fence signature",
            pod(
                &ours,
                Some(stranger.sign(&subject("uid-1", "worker-1", "3", "Pod"))),
            ),
            false,
        ),
        (
            "a signature moved to another replica",
            pod(
                &[
                    (MANAGED_BY_LABEL, MANAGER),
                    (JOB_UID_LABEL, "uid-1"),
                    (REPLICA_TYPE_LABEL, "worker"),
                    (REPLICA_INDEX_LABEL, "0"),
                    (PLACEMENT_EPOCH_LABEL, "3"),
                ],
                Some(good.clone()),
            ),
            false,
        ),
        (
            "a signature moved to another epoch",
            pod(
                &[
                    (MANAGED_BY_LABEL, MANAGER),
                    (JOB_UID_LABEL, "uid-1"),
                    (REPLICA_TYPE_LABEL, "worker"),
                    (REPLICA_INDEX_LABEL, "1"),
                    (PLACEMENT_EPOCH_LABEL, "4"),
                ],
                Some(good.clone()),
            ),
            false,
        ),
        (
            "not managed by us",
            pod(&ours[1..], Some(good.clone())),
            false,
        ),
        (
            "no job uid",
            pod(
                &[
                    (MANAGED_BY_LABEL, MANAGER),
                    (REPLICA_TYPE_LABEL, "worker"),
                    (REPLICA_INDEX_LABEL, "1"),
                ],
                Some(good.clone()),
            ),
            false,
        ),
        ("garbage signature", pod(&ours, Some("!!".into())), false),
    ];
    for (what, pod, expected) in table {
        assert_eq!(stoppable(&verifier, &pod), expected, "{what}");
    }
}

#[test]
fn a_pod_the_controller_signs_is_stoppable_by_its_fence() {
    use crate::api::{ReplicaKey, ReplicaType};
    use crate::signing::Trust;
    use std::sync::Arc;
    let signer = Arc::new(Signer::new(b"0123456789abcdef0123456789abcdef", None));
    let trust = Trust {
        signer: signer.clone(),
        job_uid: "uid-1".into(),
        replica: ReplicaKey {
            replica_type: ReplicaType::Worker,
            index: 1,
        },
    };
    let worker = ReplicaType::Worker.to_string();
    let mut signed = pod(
        &[
            (MANAGED_BY_LABEL, MANAGER),
            (JOB_UID_LABEL, "uid-1"),
            (REPLICA_TYPE_LABEL, worker.as_str()),
            (REPLICA_INDEX_LABEL, "1"),
            (PLACEMENT_EPOCH_LABEL, "3"),
        ],
        None,
    );
    trust.sign(&mut signed.metadata, 3, "Pod");
    assert!(stoppable(&FenceVerifier::new(signer.fence_key()), &signed));
    let mut service_meta = ObjectMeta::default();
    trust.sign(&mut service_meta, 3, "Service");
    assert!(
        !service_meta
            .annotations
            .unwrap_or_default()
            .contains_key(FENCE_SIGNATURE_ANNOTATION),
        "only pods carry a fence signature"
    );
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).expect("a time")
}

fn lease(renewed: Option<i64>, fence_after_s: Option<u64>) -> Event {
    Event::Lease(Some(ControllerLease {
        renew_time: renewed.map(at),
        fence_after: fence_after_s.map(Duration::from_secs),
        pod_grace_ms: None,
    }))
}

/// One step of a story: at second `t` on both clocks (the member's wall
/// clock runs `skew` seconds ahead of the controller's), `event` → decision.
struct Step {
    t: u64,
    event: Event,
    expect: fn(&Decision) -> bool,
    what: &'static str,
}

fn step(t: u64, event: Event, expect: fn(&Decision) -> bool, what: &'static str) -> Step {
    Step {
        t,
        event,
        expect,
        what,
    }
}

fn keep(d: &Decision) -> bool {
    matches!(d, Decision::Keep { .. })
}
fn stop(d: &Decision) -> bool {
    matches!(d, Decision::Stop { .. })
}
fn stopping(d: &Decision) -> bool {
    *d == Decision::Stopping
}
fn resume(d: &Decision) -> bool {
    *d == Decision::Resume
}
fn idle(d: &Decision) -> bool {
    *d == Decision::Idle
}

fn run(story: &str, skew: i64, steps: Vec<Step>) {
    let start = Instant::now();
    let mut fence = Fence::new(Duration::from_secs(30));
    for Step {
        t,
        event,
        expect,
        what,
    } in steps
    {
        let wall = at(t as i64 + skew);
        let decision = fence.step(event, wall, start + Duration::from_secs(t));
        assert!(expect(&decision), "{story}, t={t}s ({what}): {decision:?}");
        assert_eq!(fence.is_stopping(), decision.stops(), "{story}, t={t}s");
    }
}

#[test]
fn the_fence_stops_the_pods_once_the_lease_is_stale_and_resumes_when_renewed() {
    run(
        "a partition and its end",
        0,
        vec![
            step(
                0,
                Event::Tick,
                idle,
                "no Lease seen yet: nothing to fence against",
            ),
            step(0, lease(Some(0), None), keep, "fresh"),
            step(5, lease(Some(5), None), keep, "renewed"),
            step(20, Event::Tick, keep, "15s old"),
            step(34, Event::Tick, keep, "29s old"),
            step(35, Event::Tick, stop, "30s old: stale"),
            step(36, Event::Tick, stopping, "still stale"),
            step(
                50,
                lease(Some(5), None),
                stopping,
                "the same renewal again (a resync)",
            ),
            step(60, lease(Some(60), None), resume, "renewed again"),
            step(61, Event::Tick, keep, "fresh"),
            step(95, Event::Tick, stop, "stale again"),
        ],
    );
}

#[test]
fn the_recheck_is_due_when_the_lease_would_turn_stale() {
    let start = Instant::now();
    let mut fence = Fence::new(Duration::from_secs(30));
    let decision = fence.step(lease(Some(0), None), at(10), start);
    assert_eq!(
        decision,
        Decision::Keep {
            recheck_in: Duration::from_secs(20)
        },
        "by the wall clock"
    );
    let decision = fence.step(Event::Tick, at(12), start + Duration::from_secs(2));
    assert_eq!(
        decision,
        Decision::Keep {
            recheck_in: Duration::from_secs(18)
        }
    );
}

#[test]
fn the_controllers_fence_after_wins_over_the_fences_default() {
    run(
        "the Lease says 10s",
        0,
        vec![
            step(0, lease(Some(0), Some(10)), keep, "fresh"),
            step(9, Event::Tick, keep, "9s"),
            step(10, Event::Tick, stop, "10s: the controller's fenceAfterMs"),
        ],
    );
}

#[test]
fn whichever_clock_sees_staleness_first_stops_the_pods() {
    run(
        "the member's clock is 20s behind the controller's: its own monotonic clock still stops in time",
        -20,
        vec![
            step(0, lease(Some(0), None), keep, "renewTime looks 20s ahead"),
            step(29, Event::Tick, keep, "seen 29s ago"),
            step(30, Event::Tick, stop, "seen 30s ago"),
        ],
    );
    run(
        "a fence started during a partition: the wall clock says the Lease is old",
        0,
        vec![
            step(
                100,
                lease(Some(60), None),
                stop,
                "renewed 40s ago by the stamps",
            ),
            step(101, Event::Tick, stopping, "still"),
        ],
    );
    run(
        "a slow watch: seen late, stale by the stamps",
        0,
        vec![
            step(
                20,
                lease(Some(0), None),
                keep,
                "seen 20s after it was stamped",
            ),
            step(
                30,
                Event::Tick,
                stop,
                "30s after the stamp, 10s after it was seen",
            ),
        ],
    );
}

#[test]
fn a_deleted_lease_or_a_lease_never_renewed_behaves() {
    run(
        "the Lease is deleted while stopping: nothing to fence against any more",
        0,
        vec![
            step(0, lease(Some(0), None), keep, "fresh"),
            step(30, Event::Tick, stop, "stale"),
            step(31, Event::Lease(None), resume, "deleted"),
            step(100, Event::Tick, idle, "no Lease"),
            step(100, lease(Some(100), None), keep, "back"),
        ],
    );
    run(
        "a Lease without renewTime counts from when it was seen",
        0,
        vec![
            step(0, lease(None, None), keep, "seen"),
            step(29, Event::Tick, keep, "29s"),
            step(30, Event::Tick, stop, "30s"),
        ],
    );
}

/// What the controller read of a fence's Lease.
type Read = Result<Option<FenceLease>, String>;

fn fence_lease(renewed: Option<i64>, duration: Option<u64>) -> Read {
    Ok(Some(FenceLease {
        holder: Some("fence-7d9".into()),
        renew_time: renewed.map(at),
        duration: duration.map(Duration::from_secs),
    }))
}

#[test]
fn the_fenced_condition_says_whether_a_fence_renews_its_lease() {
    let skew = Duration::from_secs(5);
    // (read, now) → fenced, reason, words
    let table: Vec<(Read, i64, bool, &str, &str)> = vec![
        (
            fence_lease(Some(0), Some(15)),
            3,
            true,
            reason::FENCE_RENEWING,
            "fence-7d9 renews its Lease tfjob-federator/tfjob-federator-fence (last 3s ago)",
        ),
        (
            fence_lease(Some(0), Some(15)),
            20,
            true,
            reason::FENCE_RENEWING,
            "last 20s ago",
        ),
        (
            fence_lease(Some(0), Some(15)),
            21,
            false,
            reason::FENCE_STALE,
            "last renewed 21s ago, and holds 15s",
        ),
        (
            fence_lease(Some(10), Some(15)),
            0,
            true,
            reason::FENCE_RENEWING,
            "last 0s ago",
        ),
        (
            fence_lease(None, Some(15)),
            0,
            false,
            reason::FENCE_STALE,
            "never renewed",
        ),
        (Ok(None), 0, false, reason::NO_FENCE, "no fence runs there"),
        (
            Err("403 forbidden".into()),
            0,
            false,
            reason::FENCE_UNKNOWN,
            "cannot be read: 403 forbidden",
        ),
    ];
    for (read, now, fenced, why, words) in table {
        let unrenewed = condition(&Err("403 forbidden".into()), &read, at(now), skew);
        assert_eq!(
            (unrenewed.fenced, unrenewed.reason),
            (false, reason::LEASE_NOT_RENEWED)
        );
        assert!(unrenewed.message.starts_with(NO_FENCE) && unrenewed.message.contains("cannot renew its Lease tfjob-federator/tfjob-federator-controller on the member: 403 forbidden"), "{unrenewed:?}");
        let condition = condition(&Ok(()), &read, at(now), skew);
        assert_eq!(
            (condition.fenced, condition.reason),
            (fenced, why),
            "{read:?} at {now}: {condition:?}"
        );
        assert!(
            condition.message.contains(words),
            "{condition:?} lacks {words}"
        );
        if !fenced {
            assert!(condition.message.starts_with(NO_FENCE), "{condition:?}");
        }
    }
}
