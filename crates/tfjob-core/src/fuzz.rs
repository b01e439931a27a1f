//! Property tests of what parses untrusted input (issue 12): arbitrary
//! jobs through reading, validation and the builders, and arbitrary
//! quantities. None may panic, hang or allocate beyond bounds. (Generated
//! event sequences through the job's state machine are among its
//! invariant tests, `lifecycle/machine/tests/invariants.rs`.) Arbitrary JSON comes from
//! `proptest_json`, in a job's words.
//! proptest keeps every failing case it finds in `proptest-regressions/`
//! (committed), and replays them first on every run; inputs found to hurt
//! in any other way are kept as files in `crates/tfjob-core/corpus/` and replayed by
//! `the_corpus_of_past_poison_inputs_stays_harmless`.

use proptest::prelude::*;
use serde_json::Value;

/// Any JSON value, at most `depth` deep, in a job's words now and then.
pub fn json(depth: u32) -> impl Strategy<Value = Value> {
    proptest_json::json(
        depth,
        vec![
            "worker",
            "chief",
            "ps",
            "evaluator",
            "tensorflow",
            "OnFailure",
            "Never",
            "Always",
            "ExitCode",
            "All",
            "none",
            "Pack",
            "Spread",
            "Weighted",
            "1",
            "-1",
            "2147483647",
            "1e308",
            "inf",
        ],
        keys(),
    )
}

/// Keys a job's JSON uses.
fn keys() -> Vec<&'static str> {
    vec![
        "replicaSpecs",
        "type",
        "replicas",
        "restartPolicy",
        "template",
        "spec",
        "containers",
        "name",
        "image",
        "ports",
        "containerPort",
        "resources",
        "limits",
        "requests",
        "nvidia.com/gpu",
        "cpu",
        "runPolicy",
        "backoffLimit",
        "activeDeadlineSeconds",
        "cleanUpPolicy",
        "runMode",
        "debug",
        "pause",
        "enabled",
        "resumeSpecs",
        "command",
        "args",
        "scheduler",
        "federation",
        "strategy",
        "weights",
        "clusterNames",
        "t9kScheduler",
        "queue",
        "priority",
        "tensorboardSpec",
        "metadata",
        "annotations",
        "securityContext",
        "privileged",
        "volumes",
        "hostPath",
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TensorFlowTrainingJob;
    use crate::builders::{self, PodMode, PodParams, Topology};

    /// A job object with `spec` as its spec, read as the controller reads it.
    fn read(spec: Value) -> Option<TensorFlowTrainingJob> {
        let object = serde_json::json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": "fuzz", "namespace": "ns", "uid": "u"},
            "spec": spec,
        });
        serde_path_to_error::deserialize::<_, TensorFlowTrainingJob>(object).ok()
    }

    /// A spec that reads: replicaSpecs of arbitrary parts.
    fn spec() -> impl Strategy<Value = Value> {
        // Mostly valid parts, so the builders see valid jobs too.
        let replica = (
            prop::sample::select(vec!["worker", "worker", "worker", "ps", "evaluator", "chief", "other"]),
            prop_oneof![8 => 1i64..4, 1 => Just(-1i64), 1 => Just(5000), 1 => Just(2147483647)],
            json(4),
            prop::sample::select(vec!["Never", "OnFailure", "Always", "ExitCode", "Never", "bogus"]),
        )
            .prop_map(|(t, n, template, policy)| {
                serde_json::json!({"type": t, "replicas": n, "restartPolicy": policy,
                    "template": {"spec": {"containers": [{"name": "tensorflow", "image": "i"}]}, "x": template}})
            });
        let run_policy = prop_oneof![
            Just(serde_json::json!({})),
            (-2i64..5).prop_map(|n| serde_json::json!({"backoffLimit": n, "cleanUpPolicy": "all"})),
            json(3),
        ];
        let run_mode = prop_oneof![
            Just(serde_json::json!({})),
            Just(serde_json::json!({"debug": {"enabled": true}})),
            Just(
                serde_json::json!({"pause": {"enable": true, "resumeSpecs": [{"type": "worker", "args": ["--x"]}]}})
            ),
            json(3),
        ];
        (prop::collection::vec(replica, 1..3), run_policy, run_mode).prop_map(|(replicas, run_policy, run_mode)| {
            serde_json::json!({"replicaSpecs": replicas, "runPolicy": run_policy, "runMode": run_mode})
        })
    }

    /// Validation, placement's view and, for a valid job, every builder:
    /// no panic, nothing sized by an unchecked count.
    fn exercise(job: &TensorFlowTrainingJob) {
        let valid = crate::validation::validate(job).is_ok();
        let keys = job.spec.replica_keys();
        assert!(keys.len() <= 4 * crate::api::MAX_REPLICAS as usize);
        let _ = crate::placement::demands(job);
        let _ = crate::placement::Policy::of_job(job);
        if valid {
            let topology = Topology::new("home");
            for key in keys.iter().take(8) {
                let params = PodParams {
                    topology: &topology,
                    epoch: 1,
                    mode: PodMode::Debug,
                    owner: None,
                };
                let _ = builders::build_pod(job, *key, &params);
                let _ = builders::build_service(job, *key, 1, None);
            }
            let _ = builders::build_pod_group(job, 1, None);
            let _ = builders::build_tensorboard(job);
        }
    }

    /// Every input that once crashed, aborted or stalled the controller
    /// (`crates/tfjob-core/corpus/`, one job per file; add each new one found) goes the
    /// controller's way: decoded as listed, read, validated, built.
    #[test]
    fn the_corpus_of_past_poison_inputs_stays_harmless() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("the corpus directory") {
            let path = entry.expect("a corpus entry").path();
            let text = std::fs::read_to_string(&path).expect("a corpus file");
            let listed: crate::api::ListedJob =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
            if let crate::api::ListedJob::Readable(job) = listed {
                exercise(&job);
            }
        }
        assert!(seen >= 8, "the corpus is there: {seen} files");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Any JSON as a spec: reading fails or yields a job; validation and,
        /// for a valid job, every builder finish without panic.
        #[test]
        fn any_job_is_read_validated_and_built_without_panic(spec in prop_oneof![1 => json(5), 3 => spec()]) {
            if let Some(job) = read(spec) {
                exercise(&job);
            }
        }

        /// Any text as a quantity.
        #[test]
        fn any_quantity_parses_or_is_refused(text in ".{0,40}") {
            let _ = crate::quantity::parse_milli(&text);
        }
    }
}
