//! Real TensorFlow on real nodes (docs/src/testing/real-tensorflow.md):
//! the example jobs of `config/examples/tensorflow/` run by each cluster's
//! kubelet and containerd from the TensorFlow image (`tensorflow-cpu` of
//! `hack/tf-venv`), each task learning its cluster from the `TF_CONFIG` the
//! controller wrote and finding its peers through CoreDNS, under the
//! identities `deploy/` ships. TensorFlow is the judge: a wrong task type,
//! index, port or address form fails the training, not a string comparison
//! of ours. A test kills or holds a task from the host (its container's
//! PID 1 takes SIGKILL and SIGSTOP from there, nothing else).

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use common::federation::*;
use common::fence::{direct_client, sample_jobs, start_fence};
use common::tensorflow::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

/// Home and two members exporting their services (clusterset.local names
/// resolve) and admitting the examples' hostPath, the controller as
/// deployed, and the member identity allowed `pods/log`
/// (docs/src/kubectl-plugin.md).
async fn tf_federation() -> Federation {
    tf_federation_with(HOME_NOT_TARGET).await
}

/// [`tf_federation`] with the controller's `settings`.
async fn tf_federation_with(settings: &str) -> Federation {
    let f = federation(Ground::Real).settings(settings).start().await;
    f.patch_members(json!({"exportServices": true, "podPolicy": {"allowHostPath": true}}))
        .await;
    real::grant_member_logs(real::three_clusters().await, &["member-1", "member-2"]).await;
    f
}

async fn multi_worker_mirrored_job_spread_over_both_members_succeeds() {
    let f = tf_federation().await;
    // The clusters are this test's from here (tests take turns on them).
    let started = Instant::now();
    // Its pods are kept (the example deletes a worker still running when
    // worker-0, the master, ends): worker-1's log is read after the end.
    f.submit(example(
        "multi-worker-mirrored.yaml",
        "tf-mwms",
        30,
        json!({"runPolicy": {"backoffLimit": 3, "cleanUpPolicy": "none"}}),
    ))
    .await;
    let done = succeeded(&f, "tf-mwms", TF_TEST_LIMIT).await;
    eventually("worker-1 ended", TF_TEST_LIMIT, async || {
        f.pods_on("tf-mwms", &["member-1", "member-2"])
            .await
            .values()
            .flatten()
            .any(|p| {
                p.metadata.name.as_deref() == Some("tf-mwms-worker-1")
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            })
            .then_some(())
    })
    .await;
    let placed = clusters_of(&done);
    assert_ne!(
        placed["worker-0"], placed["worker-1"],
        "split over both members: {placed:?}"
    );
    let log = plugin(
        &f.kubeconfig("home"),
        &["logs", "tf-mwms", "-n", &f.namespace],
    )
    .await;
    assert!(log.contains("worker-0: 2 replicas in sync"), "{log}");
    assert!(log.contains("worker-0: step 30/30 loss "), "{log}");
    let other = plugin(
        &f.kubeconfig("home"),
        &["logs", "tf-mwms", "worker-1", "-n", &f.namespace],
    )
    .await;
    assert!(other.contains("worker-1: trained 30 steps"), "{other}");
    eprintln!(
        "tf-mwms trained over both members in {:.1?}",
        started.elapsed()
    );
    assert!(started.elapsed() < TF_TEST_LIMIT);
}

/// The host processes of the job's replica `task` (`worker-1`): its
/// environment names the job's uid and the task in TF_CONFIG.
fn processes_of(job_uid: &str, kind: &str, index: u32, program: &str) -> Vec<i32> {
    let uid = format!("JOB_UID={job_uid}");
    let task = format!("\"task\":{{\"type\":\"{kind}\",\"index\":{index}}}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let environ = String::from_utf8_lossy(&environ);
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if environ.split('\0').any(|kv| kv == uid)
            && environ.contains(&task)
            && String::from_utf8_lossy(&cmdline).contains(program)
        {
            out.push(pid);
        }
    }
    out
}

/// The settings of the loss scenario: members only; a member is lost 12 s
/// after its last good probe, and its fence deletes the pods there 6 s
/// after the controller's last renewal, with 1 s of grace and 4 s of margin
/// for the clocks and the member's slowness (6 + 1 + 4 < 12): a replica's
/// old pod is stopped before its new one starts. The margin is the real
/// kubelet's: on this loaded two-core machine a deleted pod was still
/// Running more than 3 s after the fence's delete with 1 s of grace, and
/// its new copy was already created with a margin of 0.5 s. (TensorFlow
/// processes starting at once on two cores stall the API
/// servers for seconds: a fence 3 s after the last renewal stopped
/// reachable members' pods.)
const FENCED_LOSS: &str = "homeIsTarget: false\nmemberProbeIntervalMs: 500\n\
                           clusterLostTimeoutMs: 12000\nfenceAfterMs: 6000\n\
                           fencePodGraceMs: 1000\nclockSkewMarginMs: 4000\n";
/// The loss scenario's limit: seven TensorFlow containers start before the
/// loss and four after it, on two cores (307 s with three jobs alone on
/// our machine; in CI, beside clippy, the chiefs took more than 180 s to
/// reach step 20).
const LOSS_TEST_LIMIT: std::time::Duration = std::time::Duration::from_secs(480);
const MEMBERS: [&str; 2] = ["member-1", "member-2"];

/// The PS example as `name` with one ps and `workers` workers, each worker
/// asking for `worker_resources`, placed by the `federation` policy.
fn ps_job(
    name: &str,
    steps: u32,
    workers: i64,
    worker_resources: Value,
    federation: Value,
) -> Value {
    let mut job = example(
        "ps-strategy.yaml",
        name,
        steps,
        json!({"scheduler": {"federation": federation}}),
    );
    for replica in job["spec"]["replicaSpecs"]
        .as_array_mut()
        .expect("replicaSpecs")
    {
        match replica["type"].as_str() {
            Some("ps") => replica["replicas"] = json!(1),
            Some("worker") => {
                replica["replicas"] = json!(workers);
                replica["template"]["spec"]["containers"][0]["resources"] =
                    worker_resources.clone();
            }
            _ => {}
        }
    }
    job
}

/// How many of the job's replicas its status shows Running on `cluster`.
fn running_on(job: &Value, cluster: &str) -> usize {
    job["status"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["replicaStatus"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["phase"] == "Running" && r["cluster"] == cluster)
        .count()
}

/// The job's pods on `cluster`: (uid, its container's restartCount) by name.
async fn pods_of(f: &Federation, job: &str, cluster: &str) -> BTreeMap<String, (String, i32)> {
    f.pods_on(job, &[cluster])
        .await
        .into_values()
        .flatten()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .map_or(-1, |c| c.restart_count);
            (
                p.metadata.name.clone().unwrap_or_default(),
                (p.metadata.uid.clone().unwrap_or_default(), restarts),
            )
        })
        .collect()
}

/// The uid and log of the pod named `pod` on `cluster` now, if it has one.
async fn log_of(f: &Federation, cluster: &str, pod: &str) -> Option<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(f.clients[cluster].clone(), &f.namespace);
    let uid = pods.get(pod).await.ok()?.metadata.uid?;
    let log = pods.logs(pod, &Default::default()).await.ok()?;
    Some((uid, log))
}

/// The log of the pod named `pod` on `cluster` ("" before it has one).
async fn current_log(f: &Federation, cluster: &str, pod: &str) -> String {
    log_of(f, cluster, pod)
        .await
        .map(|(_, log)| log)
        .unwrap_or_default()
}

/// The last step a chief's log printed (0 before the first).
fn last_step(log: &str) -> u32 {
    log.lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once(": step ")?;
            rest.split_once('/')?.0.parse().ok()
        })
        .max()
        .unwrap_or(0)
}

/// The addresses `name` resolves to inside the container of `pod` on
/// `cluster` (its resolver asks its cluster's DNS Service), sorted; none
/// while it does not resolve.
async fn resolves_in(f: &Federation, cluster: &str, pod: &str, name: &str) -> Vec<String> {
    let program = format!(
        "import socket\ntry:\n    print(*sorted({{a[4][0] for a in socket.getaddrinfo('{name}', 2222)}}))\nexcept OSError:\n    pass"
    );
    let output = tokio::process::Command::new(common::kubectl::kubectl_binary())
        .arg("--kubeconfig")
        .arg(f.kubeconfig(cluster))
        .args(["exec", "-n", &f.namespace, pod, "-c", "tensorflow", "--"])
        .args(["python3", "-c", &program])
        .output()
        .await
        .expect("kubectl runs");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Sends SIGSTOP or SIGCONT (`signal`) to the chief process(es) of job
/// `uid`; how many took it.
fn signal_chief(uid: &str, signal: &str) -> usize {
    processes_of(uid, "chief", 0, "ps_strategy.py")
        .into_iter()
        .filter(|pid| {
            std::process::Command::new("kill")
                .args([&format!("-{signal}"), &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        })
        .count()
}

/// A member lost mid-training, a fence on each member (docs/src/placement/failover.md,
/// docs/src/members/fence.md); two PS jobs, their chiefs on member-1:
/// - `tf-part` (`failover: LostReplicas`): chief, ps and worker-0 on
///   member-1, worker-1 alone on member-2 (Pack splits it: its workers ask
///   for 2 GPUs each, and two short holds leave 3 free on member-1 and 2 on
///   member-2; they end before the loss, so member-1 has room for what
///   moves). Worker-1 moves to member-1; the chief, the ps and worker-0
///   keep their pods, uids and restart counts; the chief, one process
///   throughout, takes worker-1 back at its clusterset.local address and
///   trains to the end.
/// - `tf-whole` (`Job`, Spread): worker-0 alone on member-2. The whole job
///   restarts on member-1 and resumes from its checkpoint.
///
/// (A lost ps moving its whole job under `LostReplicas` is
/// `tests/failover.rs`'s, on both grounds: TensorFlow adds nothing to that
/// decision that `tf-whole`'s resume does not show.)
///
/// No replica ever runs on both members at once. Each chief is held
/// (SIGSTOP) from its twentieth step until the loss is acted on: the loss then
/// always comes mid-training, and tf-part's worker-1 is back before its
/// chief goes on, however long TensorFlow takes to start on a loaded
/// machine (much longer than the training left). Its chief goes on once
/// worker-1's clusterset name resolves to the new pod alone, asked inside
/// the chief's container (member-1's CoreDNS, from the imports of the
/// member that now exports it).
async fn a_lost_member_moves_a_worker_alone_under_lost_replicas_and_whole_jobs_otherwise() {
    const STEPS: u32 = 60;
    let f = tf_federation_with(FENCED_LOSS).await;
    // The clusters are this test's from here (tests take turns on them).
    let started = Instant::now();
    let mut fences = Vec::new();
    for member in MEMBERS {
        fences.push(start_fence(&f, member).await);
    }
    // Pods holding GPUs for 10 s.
    for (hold, member, gpus) in [("hold-1", "member-1", 1), ("hold-2", "member-2", 2)] {
        f.submit(sleeping(
            gpu_job(
                hold,
                &[("worker", 1, gpus)],
                json!({"scheduler": {"federation": {"clusterNames": [member]}}}),
                "10",
            ),
            10,
        ))
        .await;
    }
    for hold in ["hold-1", "hold-2"] {
        f.wait_phase(hold, "Running", TF_TEST_LIMIT).await;
    }
    let small = json!({"requests": {"cpu": "100m", "memory": "256Mi"}});
    f.submit(ps_job(
        "tf-part",
        STEPS,
        2,
        json!({"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"nvidia.com/gpu": 2}}),
        json!({"failover": "LostReplicas"}),
    ))
    .await;
    f.submit(ps_job(
        "tf-whole",
        STEPS,
        1,
        small,
        json!({"strategy": "Spread", "failover": "Job"}),
    ))
    .await;
    let layout = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(replica, cluster)| (replica.to_string(), cluster.to_string()))
            .collect()
    };
    let (one, two) = ("member-1", "member-2");
    let jobs = [
        (
            "tf-part",
            layout(&[
                ("chief-0", one),
                ("ps-0", one),
                ("worker-0", one),
                ("worker-1", two),
            ]),
        ),
        (
            "tf-whole",
            layout(&[("chief-0", one), ("ps-0", one), ("worker-0", two)]),
        ),
    ];
    let mut uids = BTreeMap::new();
    for (job, layout) in &jobs {
        let running = f
            .wait_job(job, "every replica running", TF_TEST_LIMIT, |j| {
                j["status"]["aggregate"]["running"] == json!(layout.len())
            })
            .await;
        assert_eq!(&assignment_of(&running), layout, "{job}");
        let uid = running["metadata"]["uid"].as_str().expect("uid");
        uids.insert(*job, uid.to_string());
    }
    for member in MEMBERS {
        let members = f.members();
        eventually(&format!("{member} Fenced"), TF_TEST_LIMIT, async || {
            let status = members.get(member).await.ok()?.status?;
            status
                .conditions
                .iter()
                .any(|c| c.condition_type == "Fenced" && c.status == "True")
                .then_some(())
        })
        .await;
    }
    // Member-1 has room for what moves.
    for hold in ["hold-1", "hold-2"] {
        f.wait_phase(hold, "Succeeded", TF_TEST_LIMIT).await;
    }
    // A chief prints step 20 after its checkpoint of step 10 is written
    // (held at step 10 it may be mid-save, and a whole restart would find
    // no checkpoint). The two are watched together, each held as soon as
    // it is there: one waited for after another may have finished by then.
    let mut held_at = BTreeMap::new();
    // TensorFlow's start-up is all this waits for: it gets what is left of
    // the test's limit.
    let mut behind = String::new();
    eventually(
        "every chief at step 20, held",
        LOSS_TEST_LIMIT.saturating_sub(started.elapsed()),
        async || {
            behind.clear();
            for (job, _) in &jobs {
                let chief = format!("{job}-chief-0");
                if held_at.contains_key(job) {
                    continue;
                }
                let log = current_log(&f, "member-1", &chief).await;
                if last_step(&log) < 20 {
                    let tail: Vec<&str> = log.lines().rev().take(5).collect();
                    behind.push_str(&format!("\n{chief}'s last lines: {tail:?}"));
                    continue;
                }
                assert_eq!(signal_chief(&uids[job], "STOP"), 1, "{job}'s chief held");
                held_at.insert(*job, last_step(&current_log(&f, "member-1", &chief).await));
            }
            if held_at.len() == jobs.len() {
                Ok(())
            } else {
                Err(behind.clone())
            }
        },
    )
    .await;
    assert!(
        held_at.values().all(|step| (20..STEPS).contains(step)),
        "the loss comes mid-training: {held_at:?}"
    );
    let mut before = BTreeMap::new();
    for (job, _) in &jobs {
        before.insert(*job, pods_of(&f, job, "member-1").await);
    }
    let mut clients = Vec::new();
    for member in MEMBERS {
        clients.push((member.to_string(), direct_client(&f, member).await));
    }
    let (seen, stop, sampler) = sample_jobs(clients, &jobs.each_ref().map(|(job, _)| *job));

    set_faults(&f.clients["member-2"], json!({"partitioned": true})).await;
    eprintln!(
        "{:.1?}: member-2 partitioned, the chiefs held at {held_at:?}",
        started.elapsed()
    );
    // The whole failover: counted (written before any teardown), then the
    // old chief goes on to take its deletion.
    f.wait_job("tf-whole", "a whole failover counted", TF_TEST_LIMIT, |j| {
        j["status"]["backoffCount"] == json!(1)
    })
    .await;
    signal_chief(&uids["tf-whole"], "CONT");
    let part = f
        .wait_job(
            "tf-part",
            "worker-1 running on member-1",
            TF_TEST_LIMIT,
            |j| running_on(j, "member-1") == 4,
        )
        .await;
    eventually(
        "tf-part's worker-1 serving on member-1",
        TF_TEST_LIMIT,
        async || {
            let log = current_log(&f, "member-1", "tf-part-worker-1").await;
            log.contains("worker-1: serving at ").then_some(())
        },
    )
    .await;
    let worker_1 = Api::<Pod>::namespaced(f.clients["member-1"].clone(), &f.namespace)
        .get("tf-part-worker-1")
        .await
        .expect("tf-part-worker-1 on member-1");
    let address = worker_1
        .status
        .and_then(|s| s.pod_ip)
        .expect("worker-1's pod address");
    let name = format!("tf-part-worker-1.{}.svc.clusterset.local", f.namespace);
    eventually(
        "tf-part's chief resolving worker-1 to its pod on member-1 alone",
        TF_TEST_LIMIT,
        async || {
            let resolved = resolves_in(&f, "member-1", "tf-part-chief-0", &name).await;
            (resolved == [address.as_str()]).then_some(())
        },
    )
    .await;
    assert_eq!(signal_chief(&uids["tf-part"], "CONT"), 1, "tf-part's chief");
    eprintln!(
        "{:.1?}: tf-part's worker-1 serves on member-1",
        started.elapsed()
    );
    for (job, layout) in &jobs[1..] {
        f.wait_job(
            job,
            "running again, whole on member-1",
            TF_TEST_LIMIT,
            |j| running_on(j, "member-1") == layout.len(),
        )
        .await;
    }
    eprintln!("{:.1?}: every job running on member-1", started.elapsed());
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    sampler.await.expect("the sampler ends");
    let seen = std::sync::Arc::try_unwrap(seen)
        .expect("the sampler is done")
        .into_inner()
        .expect("lock");

    // tf-part: worker-1 alone moved, its one restart counted; the others
    // kept their pods (uid and restarts) under their own epoch.
    assert_eq!(
        assignment_of(&part).values().collect::<Vec<_>>(),
        ["member-1"; 4],
        "{}",
        part["status"]
    );
    assert_eq!(
        part["status"]["backoffCount"],
        json!(1),
        "{}",
        part["status"]
    );
    assert_eq!(
        restart_counts(&part),
        [("chief", 0), ("ps", 0), ("worker", 1)]
            .map(|(t, n)| (t.to_string(), n))
            .into(),
        "{}",
        part["status"]
    );
    let after = pods_of(&f, "tf-part", "member-1").await;
    for replica in ["chief-0", "ps-0", "worker-0"] {
        let pod = format!("tf-part-{replica}");
        assert_eq!(
            after.get(&pod),
            before["tf-part"].get(&pod),
            "{pod} kept its pod and restart count: {:?} -> {after:?}",
            before["tf-part"]
        );
        assert_eq!(
            before["tf-part"][&pod].1, 0,
            "{pod}: {:?}",
            before["tf-part"]
        );
    }
    let epoch = part["status"]["placement"]["epoch"]
        .as_u64()
        .expect("an epoch");
    assert_kept_their_epoch(&part, epoch - 1, &["chief-0", "ps-0", "worker-0"]);
    // tf-whole: every pod replaced.
    let after = pods_of(&f, "tf-whole", "member-1").await;
    for (pod, (uid, _)) in &before["tf-whole"] {
        assert!(
            after.get(pod).is_some_and(|(new, _)| new != uid),
            "tf-whole: {pod} was replaced: {:?} -> {after:?}",
            before["tf-whole"]
        );
    }
    // No replica had live pods on both members at once, and the ones that
    // moved were seen on both, first member-2, then member-1.
    assert!(seen.samples > 20, "the members were sampled: {seen:?}");
    assert!(seen.overlaps.is_empty(), "no overlap: {:?}", seen.overlaps);
    for pod in ["tf-part-worker-1", "tf-whole-worker-0"] {
        assert_eq!(
            seen.live_on.get(pod).map(|c| c.len()),
            Some(2),
            "{pod} seen live on both members: {seen:?}"
        );
    }

    for (job, _) in &jobs {
        succeeded(&f, job, LOSS_TEST_LIMIT.saturating_sub(started.elapsed())).await;
    }
    eprintln!("{:.1?}: every job succeeded", started.elapsed());
    // tf-part's chief, one process from its first step to its last, saw
    // worker-1 fail, took it back, and trained on to the end.
    let log = current_log(&f, "member-1", "tf-part-chief-0").await;
    assert!(log.contains("chief-0: no checkpoint in "), "{log}");
    assert!(!log.contains("resumed from"), "{log}");
    let failed = log
        .find("Worker /job:worker/replica:0/task:1 failed")
        .unwrap_or_else(|| panic!("the chief saw worker-1 go: {log}"));
    let recovered = log
        .find("Worker /job:worker/replica:0/task:1 has been recovered")
        .unwrap_or_else(|| panic!("the chief took worker-1 back: {log}"));
    let last = log
        .find(&format!("chief-0: step {STEPS}/{STEPS} loss "))
        .unwrap_or_else(|| panic!("the last step: {log}"));
    assert!(failed < recovered && recovered < last, "{log}");
    // The whole restart resumed from the checkpoints of its first run (the
    // chief's pod now is the one the restart made: it kept its pod).
    let log = current_log(&f, "member-1", "tf-whole-chief-0").await;
    let resumed = log
        .lines()
        .find_map(|l| {
            l.split_once("resumed from ")?
                .1
                .split_once(" at step ")?
                .1
                .parse::<u32>()
                .ok()
        })
        .unwrap_or_else(|| panic!("tf-whole: resumed from a checkpoint: {log}"));
    assert!((10..STEPS).contains(&resumed), "{held_at:?}: {log}");
    assert!(
        log.contains(&format!("chief-0: step {STEPS}/{STEPS} loss ")),
        "tf-whole: {log}"
    );
    set_faults(&f.clients["member-2"], json!({"partitioned": false})).await;
    for mut fence in fences {
        fence.check_alive();
        fence.terminate();
    }
    eprintln!(
        "a member lost under two PS jobs, both finished in {:.1?}",
        started.elapsed()
    );
    assert!(started.elapsed() < LOSS_TEST_LIMIT);
}

/// `job` (a [`gpu_job`]) as a real node runs it: each replica sleeps
/// `seconds` in the python image, asking for a tenth of a core.
fn sleeping(mut job: Value, seconds: u32) -> Value {
    for replica in job["spec"]["replicaSpecs"]
        .as_array_mut()
        .expect("replicaSpecs")
    {
        let container = &mut replica["template"]["spec"]["containers"][0];
        container["image"] = json!("localhost/tfjob-federator/python:3");
        container["imagePullPolicy"] = json!("IfNotPresent");
        container["command"] = json!([
            "python3",
            "-c",
            format!("import time; time.sleep({seconds})")
        ]);
        container["resources"]["requests"]["cpu"] = json!("100m");
    }
    job
}

/// SIGKILL to every process of replica worker-1 of job `uid`.
fn kill_worker_1(uid: &str, program: &str) {
    let victims = processes_of(uid, "worker", 1, program);
    assert!(!victims.is_empty(), "worker-1's process runs on this host");
    for pid in &victims {
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(killed.success(), "kill -KILL {pid}");
    }
}

/// MultiWorkerMirroredStrategy loses a worker: its replica is restarted by
/// the controller (counted once), the survivor restarts TensorFlow in place
/// (its container does not fail), both resume from the latest checkpoint in
/// the job's shared directory and finish.
async fn a_mirrored_worker_killed_under_on_failure_restarts_once_and_both_resume_from_the_checkpoint()
 {
    let f = tf_federation().await;
    // The clusters are this test's from here (tests take turns on them).
    let started = Instant::now();
    // Its pods are kept: the restarted worker-1's log is read after the end.
    f.submit(example(
        "multi-worker-mirrored.yaml",
        "tf-mwms-kill",
        300,
        json!({"runPolicy": {"backoffLimit": 3, "cleanUpPolicy": "none"}}),
    ))
    .await;
    let job = f
        .wait_job("tf-mwms-kill", "both workers running", TF_TEST_LIMIT, |j| {
            j["status"]["aggregate"]["running"] == json!(2)
        })
        .await;
    let uid = job["metadata"]["uid"].as_str().expect("uid").to_string();
    let placed = clusters_of(&job);
    assert_ne!(placed["worker-0"], placed["worker-1"], "{placed:?}");
    // A checkpoint or three first.
    eventually("worker-0 at step 30", TF_TEST_LIMIT, async || {
        let pods: Api<Pod> = Api::namespaced(f.clients[&placed["worker-0"]].clone(), &f.namespace);
        let log = pods
            .logs("tf-mwms-kill-worker-0", &Default::default())
            .await
            .ok()?;
        log.contains("worker-0: step 30/300").then_some(())
    })
    .await;
    kill_worker_1(&uid, "multi_worker_mirrored.py");
    let done = succeeded(
        &f,
        "tf-mwms-kill",
        TF_TEST_LIMIT.saturating_sub(started.elapsed()),
    )
    .await;
    let workers = done["status"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["type"] == "worker")
        .cloned()
        .expect("the worker task");
    assert_eq!(
        workers["restartCount"],
        json!(1),
        "one restart: {}",
        done["status"]
    );
    assert_eq!(
        done["status"]["backoffCount"],
        json!(1),
        "counted once: {}",
        done["status"]
    );
    let survivor = plugin(
        &f.kubeconfig("home"),
        &["logs", "tf-mwms-kill", "-n", &f.namespace],
    )
    .await;
    assert!(survivor.contains("worker-0: a peer failed"), "{survivor}");
    assert!(survivor.contains("worker-0: resumed from "), "{survivor}");
    assert!(
        survivor.contains("worker-0: step 300/300 loss "),
        "{survivor}"
    );
    // The restarted worker-1 (the pod under its name now) resumed too.
    let restarted = eventually("the restarted worker-1's end", TF_TEST_LIMIT, async || {
        let log = current_log(&f, &placed["worker-1"], "tf-mwms-kill-worker-1").await;
        log.contains("worker-1: trained 300 steps").then_some(log)
    })
    .await;
    assert!(restarted.contains("worker-1: resumed from "), "{restarted}");
    eprintln!(
        "tf-mwms-kill: a worker killed, both resumed and finished in {:.1?}",
        started.elapsed()
    );
    assert!(started.elapsed() < TF_TEST_LIMIT);
}

/// ParameterServerStrategy split over both members, with a sidecar
/// evaluator (tensorflow#46169). The chief, the coordinator, reaches every
/// ps and worker by the addresses of its `TF_CONFIG` (the clusterset.local
/// ones of the other member's replicas, resolved by CoreDNS): the variables
/// live on the ps, the steps run on the workers, so its last step proves
/// it. The coordinator connects to every task of its cluster, so with the
/// evaluator, which serves nothing, in the chief's `TF_CONFIG` it would
/// wait forever: the training tasks' cluster lists no evaluator, the
/// evaluator's lists itself. The evaluator evaluates the chief's
/// checkpoints, the last one too (the job keeps its pods: `cleanUpPolicy:
/// none`). Every pod runs on its member's real node, in containerd.
async fn a_ps_job_with_a_sidecar_evaluator_split_over_two_members_trains_and_evaluates() {
    let f = tf_federation().await;
    // The clusters are this test's from here (tests take turns on them).
    let started = Instant::now();
    let mut job = example(
        "ps-strategy.yaml",
        "tf-ps",
        40,
        json!({"runPolicy": {"backoffLimit": 3, "cleanUpPolicy": "none"}}),
    );
    let replicas = job["spec"]["replicaSpecs"]
        .as_array_mut()
        .expect("replicaSpecs");
    let mut evaluator = replicas[0].clone();
    evaluator["type"] = json!("evaluator");
    evaluator["restartPolicy"] = json!("Never");
    replicas.push(evaluator);
    f.submit(job).await;
    let running = f
        .wait_job(
            "tf-ps",
            "every replica placed and running",
            TF_TEST_LIMIT,
            |j| clusters_of(j).len() == 6 && j["status"]["aggregate"]["running"] == json!(6),
        )
        .await;
    let placed = clusters_of(&running);
    let used: BTreeSet<&String> = placed.values().collect();
    assert_eq!(used.len(), 2, "Spread uses both members: {placed:?}");
    let chief_cluster = placed["chief-0"].clone();
    let config = tf_config(&f, &chief_cluster, "tf-ps-chief-0").await;
    assert_eq!(config["task"], json!({"type": "chief", "index": 0}));
    for (replica, address) in addresses(&config) {
        assert!(
            address.ends_with(".svc.clusterset.local:2222"),
            "over two members every replica has its clusterset address: {replica} {address}"
        );
    }
    let across: Vec<(String, String)> = addresses(&config)
        .into_iter()
        .filter(|(replica, _)| placed[replica] != chief_cluster)
        .collect();
    assert!(!across.is_empty(), "{placed:?}");
    for (replica, lists_evaluator) in [
        ("chief-0", false),
        ("ps-0", false),
        ("worker-1", false),
        ("evaluator-0", true),
    ] {
        let config = tf_config(&f, &placed[replica], &format!("tf-ps-{replica}")).await;
        assert_eq!(
            config["cluster"].get("evaluator").is_some(),
            lists_evaluator,
            "{replica}: {config}"
        );
        assert_eq!(
            config["cluster"]["worker"].as_array().map(Vec::len),
            Some(2)
        );
    }
    let done = succeeded(&f, "tf-ps", TF_TEST_LIMIT).await;
    assert_eq!(
        done["status"]["backoffCount"],
        json!(0),
        "{}",
        done["status"]
    );
    let log = plugin(
        &f.kubeconfig("home"),
        &["logs", "tf-ps", "-n", &f.namespace],
    )
    .await;
    assert!(log.contains("chief-0: step 40/40 loss "), "{log}");
    for (_, address) in &across {
        assert!(
            log.contains(address.as_str()),
            "the chief read {address} from TF_CONFIG: {log}"
        );
    }
    let tail = plugin(
        &f.kubeconfig("home"),
        &["logs", "tf-ps", "-n", &f.namespace, "--tail", "1"],
    )
    .await;
    assert!(
        tail.starts_with("chief-0: trained 40 steps; checkpoint "),
        "{tail}"
    );
    let evaluated = eventually(
        "the evaluator's last evaluation",
        TF_TEST_LIMIT,
        async || {
            let log = plugin(
                &f.kubeconfig("home"),
                &["logs", "tf-ps", "evaluator-0", "-n", &f.namespace],
            )
            .await;
            log.contains("evaluator-0: evaluated ckpt-40 at step 40: loss ")
                .then_some(log)
        },
    )
    .await;
    assert!(
        evaluated.contains("evaluator-0: evaluated ckpt-"),
        "{evaluated}"
    );
    for member in used {
        let pods: Api<Pod> = Api::namespaced(f.clients[member].clone(), &f.namespace);
        for pod in pods.list(&Default::default()).await.expect("pods") {
            let spec = pod.spec.as_ref().expect("spec");
            assert_eq!(spec.node_name, Some(format!("{member}-node")));
            let id = real::container_id(&pod);
            assert!(
                id.starts_with("containerd://"),
                "{:?}: {id:?}",
                pod.metadata.name
            );
        }
    }
    eprintln!(
        "tf-ps trained and evaluated over both members in {:.1?}",
        started.elapsed()
    );
    assert!(started.elapsed() < TF_TEST_LIMIT);
}

macro_rules! real_ground {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            super::$name().await
        }
    )*};
}

mod on_real_nodes {
    real_ground!(
        a_ps_job_with_a_sidecar_evaluator_split_over_two_members_trains_and_evaluates,
        multi_worker_mirrored_job_spread_over_both_members_succeeds,
        a_lost_member_moves_a_worker_alone_under_lost_replicas_and_whole_jobs_otherwise,
        a_mirrored_worker_killed_under_on_failure_restarts_once_and_both_resume_from_the_checkpoint,
    );
}
