//! `tfjob-federator demo` as a user runs it: the binary itself, with stdout
//! not a terminal, so the output is one line per change, then the summary.

#[macro_use]
mod common;

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::process::Process;
use common::wait::eventually;

/// The whole default demo must end within this (the acceptance limit).
const DEMO_LIMIT: Duration = Duration::from_secs(120);
/// Ample for the small jobs of the other tests.
const SHORT: Duration = Duration::from_secs(60);

/// A running `demo`, stopped when dropped; its output files are removed
/// then, unless the test failed.
struct Demo {
    process: Process,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Demo {
    fn start(name: &str, args: &[&str]) -> Demo {
        let output =
            std::env::temp_dir().join(format!("tfjob-demo-test-{}-{name}", std::process::id()));
        let (stdout, stderr) = (
            output.with_extension("stdout"),
            output.with_extension("stderr"),
        );
        let process = Process::spawn_split(
            "the demo",
            Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
                .arg("demo")
                .args(args)
                .env_remove("RUST_LOG"),
            Stdio::null(),
            &stdout,
            &stderr,
        );
        Demo {
            process,
            stdout,
            stderr,
        }
    }

    /// The complete lines printed on stdout so far.
    fn lines(&self) -> Vec<String> {
        self.process
            .stdout()
            .split_inclusive('\n')
            .filter_map(|line| line.strip_suffix('\n'))
            .map(str::to_string)
            .collect()
    }

    /// Waits until stdout has a line that satisfies `check`; fails when the
    /// demo exits first, or after `limit`.
    async fn wait_for_line(
        &mut self,
        what: &str,
        limit: Duration,
        check: impl Fn(&str) -> bool,
    ) -> String {
        let what = format!("a line with {what}");
        eventually(&what, limit, async || {
            // Exited first: then the lines read next are all it printed.
            let exited = self.process.exited();
            if let Some(line) = self.lines().into_iter().find(|l| check(l)) {
                return Ok(line);
            }
            if let Some(status) = exited {
                panic!(
                    "{what}, but the demo exited ({status}); {}",
                    self.process.output()
                );
            }
            Err(self.process.output())
        })
        .await
    }

    /// Waits for the demo to exit (at most `limit`); returns the exit
    /// status, stdout and stderr.
    async fn finish(mut self, limit: Duration) -> (ExitStatus, String, String) {
        let status = eventually("the demo to exit", limit, async || {
            self.process.exited().ok_or_else(|| self.process.output())
        })
        .await;
        (status, self.process.stdout(), self.process.stderr())
    }

    /// The directory `Kubeconfigs in DIR` names.
    async fn kubeconfig_dir(&mut self) -> PathBuf {
        let line = self
            .wait_for_line("the kubeconfig directory", SHORT, |l| {
                l.starts_with("Kubeconfigs in ")
            })
            .await;
        PathBuf::from(line.trim_start_matches("Kubeconfigs in "))
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "the demo's output is kept in {} and {}",
                self.stdout.display(),
                self.stderr.display()
            );
        } else {
            let _ = std::fs::remove_file(&self.stdout);
            let _ = std::fs::remove_file(&self.stderr);
        }
    }
}

/// The summary table as rows of cells, keyed by the header's column names.
fn summary_rows(output: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let lines: Vec<&str> = output.lines().collect();
    let header_at = lines
        .iter()
        .position(|l| l.starts_with("JOB") && l.contains("PLACEMENT"))
        .unwrap_or_else(|| panic!("no summary table in:\n{output}"));
    let header = lines[header_at];
    let starts: Vec<(usize, &str)> = header
        .split_whitespace()
        .map(|name| (header.find(name).unwrap_or(0), name))
        .collect();
    lines[header_at + 1..]
        .iter()
        .take_while(|l| !l.is_empty() && !l.contains("expected phase ("))
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(i, (start, name))| {
                    let end = starts.get(i + 1).map_or(line.len(), |(s, _)| *s);
                    let cell = line.get(*start..end.min(line.len())).unwrap_or("");
                    (name.to_string(), cell.trim().to_string())
                })
                .collect()
        })
        .collect()
}

fn write_job(name: &str, body: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "tfjob-demo-test-{}-{name}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, body).expect("write the job manifest");
    path
}

/// A job of `replicas` workers with one GPU each whose pods exit with
/// `exit_codes` after `run_seconds`.
fn job_yaml(name: &str, replicas: u32, exit_codes: &str, run_seconds: u32) -> String {
    format!(
        "apiVersion: batch.tensorstack.dev/v1beta1
kind: TensorFlowTrainingJob
metadata:
  name: {name}
spec:
  replicaSpecs:
    - type: worker
      replicas: {replicas}
      template:
        metadata:
          annotations:
            sim.federation.tfjob.io/exit-codes: \"{exit_codes}\"
            sim.federation.tfjob.io/run-seconds: \"{run_seconds}\"
        spec:
          containers:
            - name: tensorflow
              image: tf
              resources:
                limits: {{nvidia.com/gpu: 1}}
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_demo_brings_every_example_to_its_expected_phase_in_time() {
    let started = Instant::now();
    let demo = Demo::start("default", &[]);
    let (status, stdout, stderr) = demo.finish(DEMO_LIMIT).await;
    let took = started.elapsed();
    assert!(
        status.success(),
        "the demo failed ({status}):\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(took < DEMO_LIMIT, "the demo took {took:?}");
    let rows = summary_rows(&stdout);
    let expected = [
        ("mnist-ps", "Succeeded"),
        ("mnist-debug", "Running"),
        ("mnist-retry", "Succeeded"),
        ("resnet-split", "Succeeded"),
        ("bert-wait", "Succeeded"),
    ];
    assert_eq!(
        rows.iter().map(|r| r["JOB"].as_str()).collect::<Vec<_>>(),
        expected.map(|(job, _)| job),
        "one summary row per example:\n{stdout}"
    );
    for (row, (job, phase)) in rows.iter().zip(expected) {
        assert_eq!(row["PHASE"], phase, "{job}:\n{stdout}");
        assert_eq!(row["RESULT"], "ok", "{job}:\n{stdout}");
        assert!(
            ["home", "member-1", "member-2"]
                .iter()
                .any(|c| row["PLACEMENT"].contains(&format!("{c}: "))),
            "{job} shows where its replicas ran: {:?}",
            row["PLACEMENT"]
        );
    }
    let split = &rows[3]["PLACEMENT"];
    let counts: Vec<u32> = split
        .split(", ")
        .filter_map(|part| part.split_once(": ")?.1.parse().ok())
        .collect();
    assert!(
        counts.len() >= 2 && counts.iter().sum::<u32>() == 10,
        "resnet-split's 10 replicas span clusters: {split}"
    );
    assert_eq!(
        rows[2]["RESTARTS"], "2",
        "mnist-retry restarts each worker once"
    );
    assert!(
        stdout.contains("mnist-retry: worker restarted"),
        "the restart shows as it happens:\n{stdout}"
    );
    assert!(
        stdout.contains("bert-wait: waiting for capacity: ")
            && stdout.contains("insufficient nvidia.com/gpu (need 16"),
        "bert-wait waits for a whole cluster, and says why:\n{stdout}"
    );
    for job in [
        "mnist-ps",
        "mnist-debug",
        "mnist-retry",
        "resnet-split",
        "bert-wait",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(&format!("] {job}: ")) && l.contains(" on ")),
            "{job}'s replicas show their cluster as they change:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("All 5 jobs reached the expected phase"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fails_makes_the_demo_fail_and_say_which_and_why() {
    let file = write_job("broken", &job_yaml("broken-train", 2, "1", 1));
    let path = file.to_string_lossy().into_owned();
    let (status, stdout, stderr) = Demo::start("broken", &["-f", &path]).finish(SHORT).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        status.code(),
        Some(1),
        "a job that missed its phase exits 1:\n{stdout}\nstderr:\n{stderr}"
    );
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("  broken-train: "))
        .unwrap_or_else(|| panic!("no line names the job:\n{stdout}"));
    assert!(
        verdict.contains("expected Succeeded, ended Failed: ReplicaFailed: ")
            && verdict.contains("exited with code 1"),
        "the reason comes from the job's Failed condition: {verdict}"
    );
    assert!(
        stdout.contains("1 of 1 job did not reach the expected phase"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_stays_up_with_working_kubeconfigs_until_sigint() {
    let file = write_job("keep", &job_yaml("kept", 1, "0", 1));
    let path = file.to_string_lossy().into_owned();
    let mut demo = Demo::start("keep", &["--keep", "-f", &path]);
    let dir = demo.kubeconfig_dir().await;
    let command = demo
        .wait_for_line("the kubectl command for the jobs", SHORT, |l| {
            l.trim_start().starts_with("kubectl --kubeconfig ")
                && l.ends_with(" get tensorflowtrainingjobs -A")
        })
        .await;
    let kubeconfig = command
        .trim()
        .trim_start_matches("kubectl --kubeconfig ")
        .trim_end_matches(" get tensorflowtrainingjobs -A")
        .to_string();
    assert_eq!(PathBuf::from(&kubeconfig), dir.join("home.kubeconfig"));
    demo.wait_for_line("the member's pods command", SHORT, |l| {
        l.contains("member-2.kubeconfig get pods -A")
    })
    .await;
    let printed = demo.lines().join("\n");
    assert!(
        printed.contains("The job reached the expected phase"),
        "the summary comes first:\n{printed}"
    );
    let kubectl = Command::new(common::kubectl::kubectl_binary())
        .args([
            "--kubeconfig",
            &kubeconfig,
            "get",
            "tensorflowtrainingjobs",
            "-A",
        ])
        .output()
        .expect("kubectl runs");
    let listed = String::from_utf8_lossy(&kubectl.stdout);
    assert!(
        kubectl.status.success() && listed.contains("kept") && listed.contains("Succeeded"),
        "kubectl reads the job through the printed kubeconfig:\n{listed}{}",
        String::from_utf8_lossy(&kubectl.stderr)
    );
    demo.process.signal("INT");
    let (status, stdout, stderr) = demo.finish(Duration::from_secs(20)).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        status.code(),
        Some(0),
        "after the summary, Ctrl-C ends --keep with the summary's code:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("SIGINT: stopping the controller and the clusters."));
    assert!(
        !dir.exists(),
        "the temporary kubeconfig directory is removed"
    );
}

/// Starts a demo whose job runs for minutes, sends `signal` once the job
/// runs, and checks the exit code and the clean-up.
async fn interrupted_while_running(name: &str, signal: &str, code: i32) {
    let file = write_job(name, &job_yaml(name, 1, "0", 600));
    let path = file.to_string_lossy().into_owned();
    let mut demo = Demo::start(name, &["-f", &path]);
    let dir = demo.kubeconfig_dir().await;
    demo.wait_for_line("the job running", SHORT, |l| {
        l.ends_with(&format!("{name}: phase Running"))
    })
    .await;
    demo.process.signal(signal);
    let (status, stdout, stderr) = demo.finish(Duration::from_secs(20)).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        status.code(),
        Some(code),
        "SIG{signal} before the summary:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("Interrupted by SIG{signal}")),
        "{stdout}"
    );
    assert!(
        !stdout.contains("PLACEMENT"),
        "no summary after an interruption"
    );
    assert!(!dir.exists(), "the clean-up ran: {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_jobs_run_shuts_down_with_130() {
    interrupted_while_running("endless-int", "INT", 130).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_jobs_run_shuts_down_with_143() {
    interrupted_while_running("endless-term", "TERM", 143).await;
}
