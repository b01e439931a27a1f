use super::*;

fn res(cpu: i64, gpu: i64) -> Resources {
    BTreeMap::from([
        ("cpu".to_string(), cpu * 1000),
        (GPU.to_string(), gpu * 1000),
    ])
}

fn cluster(name: &str, nodes: usize, gpus_per_node: i64) -> ClusterState {
    ClusterState {
        name: name.into(),
        ready: true,
        nodes: vec![res(32, gpus_per_node); nodes],
        ..Default::default()
    }
}

fn job(workers: i32, ps: i32, gpus_per_worker: i64) -> Vec<Demand> {
    let mut d = vec![Demand {
        key: ReplicaKey::new(ReplicaType::Chief, 0),
        requests: res(1, gpus_per_worker),
    }];
    d.extend((0..workers).map(|i| Demand {
        key: ReplicaKey::new(ReplicaType::Worker, i),
        requests: res(1, gpus_per_worker),
    }));
    d.extend((0..ps).map(|i| Demand {
        key: ReplicaKey::new(ReplicaType::Ps, i),
        requests: res(1, 0),
    }));
    d
}

/// The pods of job `name` in the namespace "team".
fn pods(name: &str) -> PodNames {
    PodNames {
        namespace: "team".into(),
        job: name.into(),
    }
}

fn per_cluster(a: &Assignment) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for c in a.values() {
        *counts.entry(c.clone()).or_default() += 1;
    }
    counts
}

#[test]
fn demands_and_policy_come_from_the_job() {
    let job: TensorFlowTrainingJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob", "metadata": {"name": "j"},
        "spec": {"scheduler": {"federation": {"strategy": "Spread", "allowSplit": false}}, "replicaSpecs": [{"type": "worker", "replicas": 2, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": 2}, "requests": {"cpu": "500m"}}}]}}}]},
    }))
    .expect("valid job");
    let d = demands(&job);
    assert_eq!(d.len(), 2);
    assert_eq!(d[1].key, ReplicaKey::new(ReplicaType::Worker, 1));
    assert_eq!((d[0].requests[GPU], d[0].requests["cpu"]), (2000, 500));
    let policy = Policy::of_job(&job);
    assert_eq!(
        (policy.strategy, policy.allow_split),
        (FederationStrategy::Spread, false)
    );
}

#[test]
fn pack_puts_a_job_that_fits_on_the_tightest_single_cluster() {
    let clusters = vec![
        cluster("home", 4, 4),
        cluster("member-1", 2, 4),
        cluster("member-2", 1, 4),
    ];
    let a = place(&job(3, 1, 1), &clusters, &Policy::default()).expect("fits");
    assert_eq!(
        per_cluster(&a),
        BTreeMap::from([("member-2".to_string(), 5)]),
        "4 GPUs needed: member-2 is the best fit"
    );
}

#[test]
fn pack_passes_over_a_tighter_cluster_whose_nodes_cannot_hold_the_job() {
    // Three replicas of 2 GPUs: "fragmented" has the least free in total
    // (6, the job's) but only 1 per node; "b" and its twin "b-twin" have 8 on two
    // nodes and fit; "roomy" fits with 12. The best fit is "b", the first
    // of the two equally tight clusters that fit.
    let demands = job(2, 0, 2);
    let clusters = vec![
        cluster("roomy", 3, 4),
        cluster("fragmented", 6, 1),
        cluster("b", 2, 4),
        cluster("b-twin", 2, 4),
    ];
    let a = place(&demands, &clusters, &Policy::default()).expect("fits");
    assert_eq!(per_cluster(&a), BTreeMap::from([("b".to_string(), 3)]));
    let without_b: Vec<ClusterState> = clusters.iter().filter(|c| c.name != "b").cloned().collect();
    let a = place(&demands, &without_b, &Policy::default()).expect("fits");
    assert_eq!(per_cluster(&a), BTreeMap::from([("b-twin".to_string(), 3)]));
}

#[test]
fn pack_splits_over_the_fewest_clusters_and_keeps_ps_with_workers() {
    let clusters = vec![
        cluster("home", 1, 4),
        cluster("member-1", 2, 4),
        cluster("member-2", 1, 4),
    ];
    // 1 chief + 9 workers with 1 GPU each = 10 GPUs; 8 fit on member-1, the rest elsewhere.
    let a = place(&job(9, 2, 1), &clusters, &Policy::default()).expect("fits when split");
    let counts = per_cluster(&a);
    assert_eq!(counts.len(), 2, "two clusters suffice: {counts:?}");
    assert_eq!(
        counts.get("member-1"),
        Some(&10),
        "the roomiest takes 8 GPU replicas and both ps: {counts:?}"
    );
    for i in 0..2 {
        let ps = a
            .get(&ReplicaKey::new(ReplicaType::Ps, i))
            .expect("ps placed");
        assert!(
            a.iter()
                .any(|(k, c)| c == ps && k.replica_type == ReplicaType::Worker),
            "ps {i} shares a cluster with workers"
        );
    }
}

#[test]
fn no_split_explains_cluster_by_cluster() {
    let mut down = cluster("member-2", 4, 4);
    down.ready = false;
    let clusters = vec![cluster("member-1", 1, 4), down];
    let policy = Policy {
        allow_split: false,
        ..Policy::default()
    };
    let err = place(&job(7, 0, 1), &clusters, &policy).expect_err("8 GPUs fit nowhere");
    assert_eq!(
        err.to_string(),
        "member-1: insufficient nvidia.com/gpu (need 8); member-2: not Ready"
    );
}

#[test]
fn clusters_that_fail_alike_are_named_together_and_few() {
    let cases: [(usize, &str); 3] = [
        (2, "m-0, m-1: insufficient nvidia.com/gpu (need 8)"),
        (
            4,
            "m-0, m-1, m-2, m-3: insufficient nvidia.com/gpu (need 8)",
        ),
        (
            100,
            "m-0, m-1, m-10 and 97 more: insufficient nvidia.com/gpu (need 8)",
        ),
    ];
    let policy = Policy {
        allow_split: false,
        ..Policy::default()
    };
    for (members, told) in cases {
        let clusters: Vec<ClusterState> = (0..members)
            .map(|i| cluster(&format!("m-{i}"), 1, 4))
            .collect();
        let err = place(&job(7, 0, 1), &clusters, &policy).expect_err("8 GPUs fit nowhere");
        assert_eq!(err.to_string(), told, "{members} members");
    }
}

#[test]
fn a_replica_no_node_can_hold_is_reported() {
    let clusters = vec![cluster("member-1", 4, 2)];
    let err = place(&job(0, 0, 4), &clusters, &Policy::default()).expect_err("4 GPUs on one node");
    assert_eq!(
        err.to_string(),
        "member-1: no node can hold replica chief-0 as a whole"
    );
}

#[test]
fn spread_deals_replicas_evenly() {
    let clusters = vec![cluster("home", 4, 4), cluster("member-1", 4, 4)];
    let policy = Policy {
        strategy: FederationStrategy::Spread,
        ..Policy::default()
    };
    let a = place(&job(3, 0, 1), &clusters, &policy).expect("fits");
    assert_eq!(
        per_cluster(&a),
        BTreeMap::from([("home".to_string(), 2), ("member-1".to_string(), 2)])
    );
}

#[test]
fn spread_uses_the_clusters_with_room_when_the_first_ones_are_full() {
    let clusters = vec![
        cluster("home", 1, 0),
        cluster("member-1", 1, 0),
        cluster("member-2", 4, 4),
        cluster("member-3", 4, 4),
    ];
    let policy = Policy {
        strategy: FederationStrategy::Spread,
        ..Policy::default()
    };
    // A chief and one worker, a GPU each: dealt in name order they would
    // go to the full home and member-1.
    let a = place(&job(1, 0, 1), &clusters, &policy).expect("members 2 and 3 have room");
    assert_eq!(
        per_cluster(&a),
        BTreeMap::from([("member-2".to_string(), 1), ("member-3".to_string(), 1)])
    );
}

#[test]
fn spread_goes_over_fewer_clusters_when_one_is_full() {
    // Eight replicas of a GPU over four clusters: two each does not fit,
    // as home has no GPU left; the three members take them (3, 3, 2).
    let clusters = vec![
        cluster("home", 4, 0),
        cluster("member-1", 4, 4),
        cluster("member-2", 4, 4),
        cluster("member-3", 4, 4),
    ];
    let policy = Policy {
        strategy: FederationStrategy::Spread,
        ..Policy::default()
    };
    let a = place(&job(7, 0, 1), &clusters, &policy).expect("the members have room");
    let counts = per_cluster(&a);
    assert!(!counts.contains_key("home"), "{counts:?}");
    let mut shares: Vec<usize> = counts.values().copied().collect();
    shares.sort();
    assert_eq!(shares, [2, 3, 3], "{counts:?}");
    // Nowhere near enough room anywhere: still unplaceable, all or nothing.
    assert!(place(&job(20, 0, 4), &clusters, &policy).is_err());
}

#[test]
fn weighted_follows_the_weights() {
    let clusters = vec![
        cluster("home", 4, 4),
        cluster("member-1", 4, 4),
        cluster("member-2", 4, 4),
    ];
    let weights = BTreeMap::from([("member-1".to_string(), 3), ("member-2".to_string(), 1)]);
    let policy = Policy {
        strategy: FederationStrategy::Weighted,
        weights,
        ..Policy::default()
    };
    let a = place(&job(7, 0, 1), &clusters, &policy).expect("fits");
    assert_eq!(
        per_cluster(&a),
        BTreeMap::from([("member-1".to_string(), 6), ("member-2".to_string(), 2)])
    );
}

#[test]
fn eligibility_honours_names_selector_and_unschedulable() {
    let mut gpu = cluster("member-1", 1, 4);
    gpu.labels.insert("tier".into(), "gpu".into());
    let mut cordoned = cluster("member-2", 4, 4);
    cordoned.unschedulable = true;
    let clusters = vec![cluster("home", 4, 4), gpu, cordoned];
    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([("tier".to_string(), "gpu".to_string())])),
        ..Default::default()
    };
    let policy = Policy {
        selector: Some(selector),
        ..Policy::default()
    };
    let a = place(&job(1, 0, 1), &clusters, &policy).expect("member-1 fits");
    assert!(a.values().all(|c| c == "member-1"));
    let policy = Policy {
        names: vec!["member-2".into()],
        ..Policy::default()
    };
    let err =
        place(&job(1, 0, 1), &clusters, &policy).expect_err("only a cordoned cluster is named");
    assert_eq!(
        err.reasons.get("member-2").map(String::as_str),
        Some("unschedulable")
    );
    assert_eq!(
        err.reasons.get("home").map(String::as_str),
        Some("not in clusterNames")
    );
}

/// Issue 22: a `clusterNames` entry that names no registered cluster once
/// waited under "waiting for capacity" as if the cluster were full; the
/// reason now says the name is unknown (the job runs once a member of
/// that name registers).
#[test]
fn an_unknown_cluster_name_is_said_to_be_unknown() {
    let clusters = vec![cluster("home", 4, 4), cluster("member-1", 4, 4)];
    let policy = Policy {
        names: vec!["member-9".into()],
        ..Policy::default()
    };
    let err = place(&job(1, 0, 1), &clusters, &policy).expect_err("no such cluster");
    assert_eq!(
        err.reasons.get("member-9").map(String::as_str),
        Some(super::eligibility::UNKNOWN_CLUSTER)
    );
    assert!(
        err.to_string().contains("member-9: unknown cluster"),
        "{err}"
    );
    let policy = Policy {
        names: vec!["member-9".into(), "member-1".into()],
        ..Policy::default()
    };
    let a = place(&job(1, 0, 1), &clusters, &policy).expect("member-1 is named too");
    assert!(a.values().all(|c| c == "member-1"), "{a:?}");
}

#[test]
fn members_run_only_what_their_namespace_pod_security_admits() {
    use crate::api::PodSecurityLevel;
    let member = |name: &str, level: Option<PodSecurityLevel>| {
        let mut c = cluster(name, 4, 4);
        c.member = true;
        if let Some(level) = level {
            c.pod_security.insert("ml".into(), level);
        }
        c
    };
    let mut strict_default = member("member-3", None);
    strict_default.pod_policy.default_pod_security = PodSecurityLevel::Restricted;
    let clusters = vec![
        member("member-1", Some(PodSecurityLevel::Restricted)),
        member("member-2", Some(PodSecurityLevel::Baseline)),
        strict_default,
    ];
    let mut privileges = crate::isolation::Privileges::default();
    privileges.add(
        &Default::default(),
        &serde_json::from_value(serde_json::json!({"containers": [{"name": "tensorflow"}]}))
            .expect("a pod spec"),
    );
    let policy = Policy {
        namespace: "ml".into(),
        privileges,
        ..Policy::default()
    };
    let a = place(&job(2, 0, 1), &clusters, &policy).expect("member-2 admits it");
    assert!(a.values().all(|c| c == "member-2"), "{a:?}");
    let err = place(&job(9, 0, 2), &clusters, &policy).expect_err("too big for member-2");
    let why = "enforces Pod Security \"restricted\": allowPrivilegeEscalation != false \
               (container \"tensorflow\" must set securityContext.allowPrivilegeEscalation=false), \
               unrestricted capabilities (container \"tensorflow\" must set \
               securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or \
               container \"tensorflow\" must set securityContext.runAsNonRoot=true), \
               seccompProfile (pod or container \"tensorflow\" must set \
               securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";
    assert_eq!(
        err.reasons.get("member-1").map(String::as_str),
        Some(format!("namespace ml {why}").as_str())
    );
    assert_eq!(
        err.reasons.get("member-3").map(String::as_str),
        Some(format!("namespace ml {why}").as_str()),
        "no label: the member's default"
    );
}

#[test]
fn members_run_only_the_namespaces_they_allow() {
    let mut open = cluster("member-1", 4, 4);
    open.member = true;
    let mut listing = cluster("member-2", 4, 4);
    listing.member = true;
    listing.pod_policy.allowed_namespaces = vec!["research".into()];
    let clusters = vec![open, listing];
    let in_namespace = |namespace: &str| Policy {
        namespace: namespace.into(),
        names: vec!["member-2".into()],
        ..Policy::default()
    };
    let err = place(&job(1, 0, 1), &clusters, &in_namespace("ml")).expect_err("not allowed");
    assert_eq!(
        err.reasons.get("member-2").map(String::as_str),
        Some("namespace ml is not allowed (spec.podPolicy.allowedNamespaces)")
    );
    let a = place(&job(1, 0, 1), &clusters, &in_namespace("research")).expect("allowed");
    assert!(a.values().all(|c| c == "member-2"), "{a:?}");
}

#[test]
fn members_never_run_jobs_of_a_system_namespace() {
    let mut member = cluster("member-1", 4, 4);
    member.member = true;
    let clusters = vec![cluster("home", 1, 4), member];
    let policy = Policy {
        system_namespace: Some("kube-system".into()),
        ..Policy::default()
    };
    let err = place(&job(1, 0, 4), &clusters, &policy).expect_err("home is too small");
    assert_eq!(
        err.reasons.get("member-1").map(String::as_str),
        Some("the job's namespace is a system namespace there")
    );
    let a = place(&job(0, 0, 4), &clusters, &policy).expect("home fits the chief");
    assert!(a.values().all(|c| c == "home"));
    let job_in = |ns: &str| -> TensorFlowTrainingJob {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": "j", "namespace": ns}, "spec": {"replicaSpecs": []}}))
        .expect("a job")
    };
    assert_eq!(
        Policy::of_job(&job_in("kube-system"))
            .system_namespace
            .as_deref(),
        Some("kube-system")
    );
    assert_eq!(
        Policy::of_job(&job_in("tfjob-federator"))
            .system_namespace
            .as_deref(),
        Some("tfjob-federator")
    );
    assert_eq!(Policy::of_job(&job_in("ml")).system_namespace, None);
}

#[test]
fn jobs_differing_only_in_names_share_a_shape() {
    let policy = Policy::default();
    let a = job(2, 1, 4);
    let mut b = a.clone();
    b.reverse();
    assert_eq!(shape(&a, &policy), shape(&b, &policy));
    assert_ne!(shape(&a, &policy), shape(&job(2, 1, 2), &policy));
    let spread = Policy {
        strategy: FederationStrategy::Spread,
        ..Policy::default()
    };
    assert_ne!(shape(&a, &policy), shape(&a, &spread));
}

#[test]
fn the_ledger_keeps_concurrent_jobs_from_over_committing() {
    let clusters = vec![cluster("member-1", 1, 4)];
    let first = job(3, 0, 1);
    let a = place(&first, &clusters, &Policy::default()).expect("first fits");
    let mut ledger = Ledger::default();
    ledger.reserve("job-a", &pods("job-a"), &first, &a);
    let err = place(&job(0, 0, 1), &ledger.apply(&clusters), &Policy::default())
        .expect_err("the 4 GPUs are promised");
    assert!(
        err.to_string()
            .contains("insufficient nvidia.com/gpu (need 1)"),
        "{err}"
    );
    ledger.release("job-a");
    assert!(place(&job(0, 0, 1), &ledger.apply(&clusters), &Policy::default()).is_ok());
}

#[test]
fn replica_by_replica_failover_needs_members_with_stable_addresses() {
    let member = |name: &str, stable: bool| ClusterState {
        member: true,
        stable_addresses: stable,
        ..cluster(name, 2, 4)
    };
    let clusters = vec![member("member-1", false), member("member-2", true)];
    let policy = Policy {
        stable_addresses: true,
        ..Policy::default()
    };
    let placed = place(&job(2, 1, 1), &clusters, &policy).expect("member-2 has room");
    assert_eq!(
        per_cluster(&placed),
        BTreeMap::from([("member-2".into(), 4)])
    );
    let err = place(&job(2, 1, 1), &clusters[..1], &policy).expect_err("no member qualifies");
    assert_eq!(
        err.to_string(),
        format!("member-1: {}", eligibility::UNSTABLE_ADDRESSES)
    );
    // A job that fails over whole takes any member.
    assert!(place(&job(2, 1, 1), &clusters[..1], &Policy::default()).is_ok());
}

/// Places `jobs` equal jobs one after another, each against the capacity
/// the ones before it hold (as a placement pass charges them): the jobs
/// each cluster took, in name order.
fn burst(clusters: &[ClusterState], jobs: usize, demands: &[Demand]) -> BTreeMap<String, usize> {
    let mut ledger = Ledger::default();
    let mut taken = BTreeMap::new();
    for n in 0..jobs {
        let a = place(demands, &ledger.apply(clusters), &Policy::default())
            .unwrap_or_else(|e| panic!("job {n} of {jobs}: {e}"));
        let on = per_cluster(&a);
        assert_eq!(on.len(), 1, "job {n} is placed whole: {on:?}");
        for cluster in on.keys() {
            *taken.entry(cluster.clone()).or_default() += 1;
        }
        ledger.reserve(&format!("job-{n}"), &pods(&format!("job-{n}")), demands, &a);
    }
    taken
}

#[test]
fn pack_spreads_a_burst_of_equal_jobs_over_equal_clusters() {
    // 8 replicas of 1 GPU + 1 cpu; clusters of 16 nodes × 32 GPUs (512):
    // every job is far below a tenth of a cluster's room.
    let member = |name: &str| cluster(name, 16, 32);
    let cases: [(&[&str], usize, &[usize]); 5] = [
        (&["member-1", "member-2"], 1, &[1, 0]),
        (&["member-1", "member-2"], 2, &[1, 1]),
        (&["member-1", "member-2"], 7, &[4, 3]),
        (&["member-1", "member-2"], 100, &[50, 50]),
        (&["home", "member-1", "member-2"], 100, &[34, 33, 33]),
    ];
    for (names, jobs, expected) in cases {
        let clusters: Vec<ClusterState> = names.iter().map(|n| member(n)).collect();
        let taken = burst(&clusters, jobs, &job(7, 0, 1));
        let shares: Vec<usize> = names
            .iter()
            .map(|n| taken.get(*n).copied().unwrap_or(0))
            .collect();
        assert_eq!(shares, expected, "{jobs} jobs over {names:?}");
    }
}

#[test]
fn pack_sends_a_job_that_fits_one_cluster_there() {
    // A 16-GPU job: member-1 has as much room (16 GPUs) but on nodes of 2,
    // none of which holds a 4-GPU replica; member-2 fits it exactly;
    // member-3 is roomier but not Ready.
    let mut down = cluster("member-3", 8, 8);
    down.ready = false;
    let clusters = vec![cluster("member-1", 8, 2), cluster("member-2", 4, 4), down];
    let a = place(&job(3, 0, 4), &clusters, &Policy::default()).expect("member-2 fits");
    assert_eq!(per_cluster(&a), BTreeMap::from([("member-2".into(), 4)]));
}

/// What best fit keeps whole, case by case: the cluster with more room
/// than a tenth beyond the best fit's, for a bigger job that follows.
#[test]
fn pack_keeps_the_room_a_bigger_job_needs() {
    struct Case {
        what: &'static str,
        clusters: Vec<ClusterState>,
        small: Vec<Demand>,
        smalls: usize,
        /// Where every small job goes.
        goes_to: &'static str,
        /// Fits whole afterwards, nowhere split.
        big: Vec<Demand>,
    }
    let no_gpu = |name: &str, nodes: usize| cluster(name, nodes, 0);
    let cases = vec![
        Case {
            what: "a 4-GPU job fills the cluster with 4 free, not half the one with 8",
            clusters: vec![cluster("member-1", 2, 4), cluster("member-2", 1, 4)],
            small: job(3, 0, 1),
            smalls: 1,
            goes_to: "member-2",
            big: job(7, 0, 1),
        },
        Case {
            what: "1-GPU jobs on two equal 8-GPU clusters: each is an eighth of one, so they pack",
            clusters: vec![cluster("member-1", 2, 4), cluster("member-2", 2, 4)],
            small: job(0, 0, 1),
            smalls: 8,
            goes_to: "member-1",
            big: job(7, 0, 1),
        },
        Case {
            what: "a job without GPUs goes where the fewest GPUs are free",
            clusters: vec![cluster("member-1", 4, 4), no_gpu("member-2", 4)],
            small: job(3, 0, 0),
            smalls: 20,
            goes_to: "member-2",
            big: job(15, 0, 1),
        },
        Case {
            what: "unequal cpu: cpu jobs fill the tighter cluster, the roomier stays whole",
            clusters: vec![no_gpu("member-1", 4), no_gpu("member-2", 2)],
            small: job(7, 0, 0),
            smalls: 7,
            goes_to: "member-2",
            big: job(127, 0, 0),
        },
    ];
    let whole = Policy {
        allow_split: false,
        ..Policy::default()
    };
    for case in cases {
        let mut ledger = Ledger::default();
        for n in 0..case.smalls {
            let a = place(
                &case.small,
                &ledger.apply(&case.clusters),
                &Policy::default(),
            )
            .unwrap_or_else(|e| panic!("{}: small job {n}: {e}", case.what));
            assert!(
                a.values().all(|c| c == case.goes_to),
                "{}: small job {n} went to {:?}",
                case.what,
                per_cluster(&a)
            );
            ledger.reserve(
                &format!("small-{n}"),
                &pods(&format!("small-{n}")),
                &case.small,
                &a,
            );
        }
        place(&case.big, &ledger.apply(&case.clusters), &whole)
            .unwrap_or_else(|e| panic!("{}: the big job fits no more: {e}", case.what));
    }
}

/// The rule's own words, apart from the code's `near`.
fn within_a_tenth(a: i64, b: i64) -> bool {
    (a - b).abs() * 10 <= a.max(b)
}

proptest::proptest! {
    /// Pack's whole-job choice fits the job; it is the best fit or a
    /// cluster whose room is within a tenth of the best fit's; and no
    /// cluster so near is roomier than the one chosen.
    #[test]
    fn pack_chooses_a_near_best_fit_and_the_roomiest_of_them(
        shapes in proptest::collection::vec((1usize..6, 0i64..9), 1..6),
        workers in 0i32..8,
        gpus in 0i64..3,
    ) {
        let clusters: Vec<ClusterState> = shapes
            .iter()
            .enumerate()
            .map(|(i, (nodes, gpus_per_node))| cluster(&format!("m-{i}"), *nodes, *gpus_per_node))
            .collect();
        let demands = job(workers, 0, gpus);
        let all: Vec<&Demand> = demands.iter().collect();
        let fitting: Vec<&ClusterState> = clusters
            .iter()
            .filter(|c| pack_onto(&c.nodes, &all).is_ok())
            .collect();
        let whole = Policy { allow_split: false, ..Policy::default() };
        let Some(best) = fitting.iter().map(|c| room(c)).min() else {
            proptest::prop_assert!(place(&demands, &clusters, &whole).is_err());
            return Ok(());
        };
        let a = place(&demands, &clusters, &whole).expect("some cluster fits");
        let on = per_cluster(&a);
        proptest::prop_assert_eq!(on.len(), 1);
        let chosen = clusters.iter().find(|c| on.contains_key(&c.name)).expect("a cluster");
        proptest::prop_assert!(fitting.iter().any(|c| c.name == chosen.name));
        let near_best = |c: &ClusterState| {
            let r = room(c);
            within_a_tenth(r.0, best.0) && within_a_tenth(r.1, best.1)
        };
        proptest::prop_assert!(near_best(chosen), "{:?} chosen, best fit {:?}", room(chosen), best);
        for c in &fitting {
            proptest::prop_assert!(
                !(near_best(c) && room(c) > room(chosen)),
                "{} ({:?}) is near the best fit {:?} and roomier than {} ({:?})",
                c.name, room(c), best, chosen.name, room(chosen)
            );
        }
    }
}

fn unexported(name: &str, nodes: usize, gpus_per_node: i64) -> ClusterState {
    ClusterState {
        unreachable: unreachable_across_clusters(
            crate::builders::DEFAULT_ADDRESS_TEMPLATE,
            false,
            "exportServices",
        ),
        ..cluster(name, nodes, gpus_per_node)
    }
}

#[test]
fn only_exported_or_self_addressed_clusters_are_reachable_across_clusters() {
    use crate::builders::DEFAULT_ADDRESS_TEMPLATE;
    let why = unreachable_across_clusters(DEFAULT_ADDRESS_TEMPLATE, false, "exportServices")
        .expect("an MCS name nobody exports");
    assert!(
        why.contains("{service}.{namespace}.svc.clusterset.local")
            && why.contains("exportServices: false"),
        "{why}"
    );
    assert_eq!(
        unreachable_across_clusters(DEFAULT_ADDRESS_TEMPLATE, true, "exportServices"),
        None
    );
    // The operator's own template: their DNS answers it.
    assert_eq!(
        unreachable_across_clusters(
            "{service}.{namespace}.{cluster}.example.com",
            false,
            "exportServices"
        ),
        None
    );
}

#[test]
fn a_job_is_split_only_over_clusters_its_peers_can_reach() {
    // 8 GPUs over two clusters of 4: only a split fits.
    for strategy in [
        FederationStrategy::Pack,
        FederationStrategy::Spread,
        FederationStrategy::Weighted,
    ] {
        let policy = Policy {
            strategy,
            weights: BTreeMap::from([("member-1".to_string(), 1), ("member-2".to_string(), 1)]),
            ..Policy::default()
        };
        let exported = vec![cluster("member-1", 1, 4), cluster("member-2", 1, 4)];
        let a = place(&job(7, 0, 1), &exported, &policy).expect("split over exported members");
        assert_eq!(per_cluster(&a).len(), 2, "{strategy:?}");

        let one_unexported = vec![cluster("member-1", 1, 4), unexported("member-2", 1, 4)];
        let err =
            place(&job(7, 0, 1), &one_unexported, &policy).expect_err("no split onto member-2");
        let why = &err.reasons["member-2"];
        assert!(
            why.contains("not split onto") && why.contains("svc.clusterset.local"),
            "{strategy:?}: {why}"
        );
        assert!(
            !err.reasons["member-1"].contains("not split onto"),
            "{:?}",
            err.reasons
        );

        // A job that fits whole still goes to an unexported cluster.
        let a = place(&job(3, 0, 1), &one_unexported, &policy).expect("fits whole");
        assert_eq!(per_cluster(&a).len(), 1, "{strategy:?}: {a:?}");
    }
}

#[test]
fn a_split_leaves_out_the_unreachable_cluster_and_uses_the_others() {
    let clusters = vec![
        unexported("home", 1, 4),
        cluster("member-1", 1, 4),
        cluster("member-2", 1, 4),
    ];
    for strategy in [FederationStrategy::Pack, FederationStrategy::Spread] {
        let policy = Policy {
            strategy,
            ..Policy::default()
        };
        let a = place(&job(7, 0, 1), &clusters, &policy).expect("the members take it");
        assert_eq!(
            per_cluster(&a),
            BTreeMap::from([("member-1".to_string(), 4), ("member-2".to_string(), 4)]),
            "{strategy:?}"
        );
    }
}
