//! The jobs a demo submits: the examples built into the binary (a copy of
//! `config/examples/*.yaml`, so `demo` runs from any directory) or the
//! `-f` files, each with the phase it is expected to reach. Pure: the
//! caller reads the files.

use kube::ResourceExt;
use serde::Deserialize;

use super::progress::{self, JobKey};
use crate::api::{JobPhase, TensorFlowTrainingJob};

/// Annotation on a job manifest: the phase the demo expects the job to
/// reach (any letter case); Succeeded when absent.
pub const EXPECTED_PHASE_ANNOTATION: &str = "demo.federation.tfjob.io/expected-phase";

/// `config/examples/*.yaml` by file name, submitted in this (file-name)
/// order. A test checks that this matches the directory.
pub const EXAMPLES: [(&str, &str); 5] = [
    (
        "chief-workers-ps.yaml",
        include_str!("../../config/examples/chief-workers-ps.yaml"),
    ),
    (
        "gang-debug-tensorboard.yaml",
        include_str!("../../config/examples/gang-debug-tensorboard.yaml"),
    ),
    (
        "restart-on-exit-code.yaml",
        include_str!("../../config/examples/restart-on-exit-code.yaml"),
    ),
    (
        "split-across-clusters.yaml",
        include_str!("../../config/examples/split-across-clusters.yaml"),
    ),
    (
        "wait-for-capacity.yaml",
        include_str!("../../config/examples/wait-for-capacity.yaml"),
    ),
];

/// Why a manifest cannot be used; `file` names where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ManifestError {
    pub file: String,
    pub message: String,
}

/// One job to submit.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoJob {
    pub job: TensorFlowTrainingJob,
    pub key: JobKey,
    pub expected: JobPhase,
}

/// Every TensorFlowTrainingJob in a YAML text (documents separated by
/// `---`; empty documents are skipped, anything else is an error).
pub fn parse(file: &str, text: &str) -> Result<Vec<DemoJob>, ManifestError> {
    let error = |message: String| ManifestError {
        file: file.to_string(),
        message,
    };
    let mut jobs = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let at = |message: String| error(format!("document {}: {message}", index + 1));
        let value = serde_yaml::Value::deserialize(document).map_err(|e| at(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let api_version = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if kind != "TensorFlowTrainingJob" || api_version != "batch.tensorstack.dev/v1beta1" {
            return Err(at(format!(
                "not a batch.tensorstack.dev/v1beta1 TensorFlowTrainingJob (apiVersion {api_version:?}, kind {kind:?})"
            )));
        }
        let mut job: TensorFlowTrainingJob = serde_path_to_error::deserialize(value)
            .map_err(|e| at(format!("{}: {}", e.path(), e.inner())))?;
        if job.metadata.name.as_deref().unwrap_or("").is_empty() {
            return Err(at("metadata.name is required".into()));
        }
        let expected = match job.annotations().get(EXPECTED_PHASE_ANNOTATION) {
            None => JobPhase::Succeeded,
            Some(text) => progress::parse_phase(text).ok_or_else(|| {
                at(format!(
                    "annotation {EXPECTED_PHASE_ANNOTATION}: {text:?} is not one of Pending, Running, Paused, Resuming, Succeeded, Failed"
                ))
            })?,
        };
        if job.metadata.namespace.is_none() {
            job.metadata.namespace = Some("default".to_string());
        }
        jobs.push(DemoJob {
            key: JobKey::of(&job),
            job,
            expected,
        });
    }
    if jobs.is_empty() {
        return Err(error("no TensorFlowTrainingJob in it".into()));
    }
    Ok(jobs)
}

/// Rejects two manifests for the same job: the second could not be created.
pub fn check_unique(jobs: &[DemoJob]) -> Result<(), ManifestError> {
    for (i, job) in jobs.iter().enumerate() {
        if jobs[..i].iter().any(|j| j.key == job.key) {
            return Err(ManifestError {
                file: job.key.to_string(),
                message: "the job appears twice".into(),
            });
        }
    }
    Ok(())
}

/// The built-in examples, parsed.
pub fn examples() -> Result<Vec<DemoJob>, ManifestError> {
    let mut jobs = Vec::new();
    for (name, text) in EXAMPLES {
        jobs.extend(parse(&format!("config/examples/{name}"), text)?);
    }
    check_unique(&jobs)?;
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_built_in_examples_are_the_example_directory() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
        let mut on_disk: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("config/examples exists")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .map(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (name, std::fs::read_to_string(&p).expect("readable example"))
            })
            .collect();
        on_disk.sort();
        let built_in: Vec<(String, String)> = EXAMPLES
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        assert!(
            built_in == on_disk,
            "src/demo/manifest.rs EXAMPLES must list every config/examples/*.yaml in file-name order"
        );
    }

    #[test]
    fn every_example_parses_with_its_expected_phase() {
        let jobs = examples().expect("examples parse");
        let expected: Vec<(String, JobPhase)> = jobs
            .iter()
            .map(|j| (j.key.to_string(), j.expected))
            .collect();
        assert_eq!(
            expected,
            [
                ("mnist-ps".to_string(), JobPhase::Succeeded),
                ("mnist-debug".to_string(), JobPhase::Running),
                ("mnist-retry".to_string(), JobPhase::Succeeded),
                ("resnet-split".to_string(), JobPhase::Succeeded),
                ("bert-wait".to_string(), JobPhase::Succeeded),
            ]
        );
    }

    const JOB: &str = "apiVersion: batch.tensorstack.dev/v1beta1\nkind: TensorFlowTrainingJob\nspec:\n  replicaSpecs: []\nmetadata:\n  name: one\n";

    #[test]
    fn several_documents_and_the_annotation_are_read() {
        let text = format!(
            "---\n{JOB}---\napiVersion: batch.tensorstack.dev/v1beta1\nkind: TensorFlowTrainingJob\nspec:\n  replicaSpecs: []\nmetadata:\n  name: two\n  namespace: team\n  annotations:\n    {EXPECTED_PHASE_ANNOTATION}: failed\n---\n"
        );
        let jobs = parse("jobs.yaml", &text).expect("parses");
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].key.to_string(), "one");
        assert_eq!(jobs[0].expected, JobPhase::Succeeded);
        assert_eq!(jobs[0].job.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(jobs[1].key.to_string(), "team/two");
        assert_eq!(jobs[1].expected, JobPhase::Failed);
    }

    #[test]
    fn bad_manifests_say_which_file_and_document() {
        let other = parse(
            "pod.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n",
        )
        .expect_err("not a job");
        assert_eq!(other.file, "pod.yaml");
        assert!(other.message.starts_with("document 1: not a"), "{other}");
        let phase = parse(
            "job.yaml",
            &format!("{JOB}  annotations:\n    {EXPECTED_PHASE_ANNOTATION}: Done\n"),
        )
        .expect_err("bad phase");
        assert!(phase.message.contains("\"Done\" is not one of"), "{phase}");
        let nameless = parse(
            "job.yaml",
            "apiVersion: batch.tensorstack.dev/v1beta1\nkind: TensorFlowTrainingJob\nmetadata: {}\nspec: {}\n",
        )
        .expect_err("no name");
        assert!(nameless.message.contains("metadata.name"), "{nameless}");
        let empty = parse("empty.yaml", "---\n").expect_err("nothing");
        assert_eq!(empty.message, "no TensorFlowTrainingJob in it");
        let typed = parse(
            "job.yaml",
            "apiVersion: batch.tensorstack.dev/v1beta1\nkind: TensorFlowTrainingJob\nmetadata: {name: j}\nspec:\n  replicaSpecs:\n  - type: worker\n    replicas: many\n",
        )
        .expect_err("replicas is a number");
        assert!(
            typed
                .message
                .starts_with("document 1: spec.replicaSpecs[0].replicas: invalid type"),
            "{typed}"
        );
        let broken = parse("broken.yaml", "kind: [").expect_err("not YAML");
        assert!(broken.message.starts_with("document 1:"), "{broken}");
    }

    #[test]
    fn the_same_job_twice_is_rejected() {
        let mut jobs = parse("a.yaml", JOB).expect("parses");
        jobs.extend(parse("b.yaml", JOB).expect("parses"));
        let error = check_unique(&jobs).expect_err("duplicate");
        assert_eq!(error.to_string(), "one: the job appears twice");
    }
}
