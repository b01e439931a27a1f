//! Helpers for tests that run the real `kubectl` against a simulated cluster
//! (one in-process cluster per test) or a real one (`hack/real-clusters`,
//! shared by the tests of a binary, each in a namespace of its own): a
//! private temp dir holding the kubeconfig, kubectl's cache dir and the
//! manifests, synchronous kubectl runs with a deadline, and background
//! kubectl processes (`get -w`, `wait`) whose output is inspected while they
//! run. The tests are synchronous: a `Kubectl` has a runtime of its own.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
use kube_sim::{self as sim, RunningCluster, SimOptions};
use serde_json::Value;

use super::process::Process;
use super::real::{self, Ground, Launcher, client_for, with_namespace};
use super::wait::eventually;

/// The longest a single foreground kubectl run may take.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for output of a background kubectl.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(15);

/// The kubectl binary: `$KUBECTL` if set, else the first `kubectl` on PATH.
pub fn kubectl_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(explicit) = std::env::var_os("KUBECTL") {
            return PathBuf::from(explicit);
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "kubectl was not found on PATH ({}). These tests run the real kubectl \
                     (v1.32) against the simulated API server; install it or point $KUBECTL at it.",
                    path.to_string_lossy()
                )
            })
    })
}

/// One test's cluster with a private directory for kubectl: its kubeconfig
/// (with the test's namespace, when it has one, as the default), kubectl's
/// cache dir and the manifests.
pub struct Kubectl {
    pub ground: Ground,
    /// The namespace kubectl uses when a command names none.
    pub namespace: String,
    runtime: Option<tokio::runtime::Runtime>,
    handle: Option<RunningCluster>,
    /// A real cluster of the test's own ([`Kubectl::on_private`]).
    private: Option<Launcher>,
    /// An admin client, for requests kubectl never sends.
    client: kube::Client,
    /// A namespace of the test's own, deleted at the end on a shared cluster.
    own_namespace: bool,
    pub dir: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
    /// The turn of this test at cluster-wide names, while it holds it.
    turn: Mutex<Option<MutexGuard<'static, ()>>>,
    /// `kubectl delete` arguments run when the test ends on a shared cluster.
    at_end: Mutex<Vec<Vec<String>>>,
    /// How many kubectl runs wrote their output files (each run its own).
    runs: AtomicUsize,
}

/// Tests sharing a real cluster take turns at the cluster-wide names they
/// all use (the `widgets.example.com` CRD: kubectl resolves `widget` and
/// `wg` by name, whatever the group).
static CLUSTER_WIDE_TURN: Mutex<()> = Mutex::new(());

impl Kubectl {
    /// Starts a simulated cluster on its own runtime and writes its
    /// kubeconfig into a fresh temp dir. `test` names the dir, to find it
    /// after a failure. kubectl works in `default`.
    pub fn start(test: &str) -> Kubectl {
        let runtime = runtime();
        let handle = runtime
            .block_on(sim::start_cluster("home", &SimOptions::default()))
            .expect("start simulated cluster");
        let kubeconfig = handle.kubeconfig();
        Kubectl::with(Ground::Sim, runtime, Some(handle), &kubeconfig, test, None)
    }

    /// A simulated cluster of the test's own, or the real cluster the test
    /// binary shares; kubectl works in a namespace of the test's own.
    pub fn on(ground: Ground, test: &str) -> Kubectl {
        match ground {
            Ground::Sim => Kubectl::sim(test),
            Ground::Real => {
                let runtime = runtime();
                let kubeconfig = runtime.block_on(real::one_cluster()).kubeconfig("home");
                Kubectl::real_with(runtime, &kubeconfig, test, None)
            }
        }
    }

    /// A cluster of the test's own on either ground: as [`Kubectl::start`]
    /// on the simulator; on the real ground a fresh `hack/real-clusters`
    /// (for cluster-wide objects that must not be there already).
    pub fn on_private(ground: Ground, test: &str) -> Kubectl {
        match ground {
            Ground::Sim => Kubectl::start(test),
            Ground::Real => {
                let runtime = runtime();
                let private = runtime.block_on(Launcher::start(&["--clusters", "1"]));
                let kubeconfig = private.kubeconfig("home");
                Kubectl::real_with(runtime, &kubeconfig, test, Some(private))
            }
        }
    }

    /// A simulated cluster of the test's own, kubectl working in a fresh
    /// namespace of the test (as on the real ground).
    pub fn sim(test: &str) -> Kubectl {
        let runtime = runtime();
        let handle = runtime
            .block_on(sim::start_cluster("home", &SimOptions::default()))
            .expect("start simulated cluster");
        let kubeconfig = handle.kubeconfig();
        let namespace = runtime.block_on(test_namespace(&kubeconfig, test));
        Kubectl::with(
            Ground::Sim,
            runtime,
            Some(handle),
            &kubeconfig,
            test,
            Some(namespace),
        )
    }

    /// The shared real cluster that `kubeconfig` (a file of
    /// `hack/real-clusters`) reaches, kubectl working in a fresh namespace
    /// of the test.
    fn real_with(
        runtime: tokio::runtime::Runtime,
        kubeconfig: &Path,
        test: &str,
        private: Option<Launcher>,
    ) -> Kubectl {
        let kubeconfig = std::fs::read_to_string(kubeconfig)
            .unwrap_or_else(|e| panic!("read {}: {e}", kubeconfig.display()));
        let namespace = runtime.block_on(test_namespace(&kubeconfig, test));
        let mut kubectl = Kubectl::with(
            Ground::Real,
            runtime,
            None,
            &kubeconfig,
            test,
            Some(namespace),
        );
        kubectl.private = private;
        kubectl
    }

    fn with(
        ground: Ground,
        runtime: tokio::runtime::Runtime,
        handle: Option<RunningCluster>,
        kubeconfig_yaml: &str,
        test: &str,
        namespace: Option<String>,
    ) -> Kubectl {
        let binary = kubectl_binary();
        let dir = std::env::temp_dir().join(format!("kubectl-{test}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let kubeconfig_yaml = match &namespace {
            Some(namespace) => with_namespace(kubeconfig_yaml, namespace),
            None => kubeconfig_yaml.to_string(),
        };
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, &kubeconfig_yaml).expect("write kubeconfig");
        let client = runtime.block_on(client_for(&kubeconfig_yaml));
        let cache = dir.join("cache");
        let this = Kubectl {
            ground,
            namespace: namespace.clone().unwrap_or_else(|| "default".into()),
            runtime: Some(runtime),
            handle,
            private: None,
            client,
            own_namespace: namespace.is_some(),
            dir,
            kubeconfig,
            cache,
            turn: Mutex::new(None),
            at_end: Mutex::new(Vec::new()),
            runs: AtomicUsize::new(0),
        };
        // Fail early and clearly if the binary does not run at all.
        let version = this.run(&["version", "--client"]);
        assert!(
            version.status.success(),
            "{} does not run: {version}",
            binary.display()
        );
        this
    }

    /// Sends one request to the cluster without kubectl (for bodies kubectl
    /// never sends), as the admin of the kubeconfig; returns the status code
    /// and the JSON body.
    pub fn raw_request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Value) {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::from(body.to_vec()))
            .expect("request");
        let runtime = self.runtime.as_ref().expect("runtime");
        let (status, bytes) = runtime.block_on(async {
            let response = tokio::time::timeout(RUN_TIMEOUT, self.client.send(request))
                .await
                .unwrap_or_else(|_| panic!("{method} {path}: no answer within {RUN_TIMEOUT:?}"))
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
            let status = response.status().as_u16();
            let bytes = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: reading the body: {e}"))
                .to_bytes();
            (status, bytes)
        });
        let json = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{method} {path}: body is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        (status, json)
    }

    /// On a shared real cluster: waits until no other test of this binary
    /// uses the cluster-wide names that tests share, and keeps them for this
    /// test until it ends (a no-op on the simulator, and when already held).
    pub fn take_turn(&self) {
        if self.ground != Ground::Real {
            return;
        }
        let mut turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        if turn.is_none() {
            *turn = Some(CLUSTER_WIDE_TURN.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// Deletes `kind name` when the test ends, passed or not, on a shared
    /// cluster (a simulated one goes as a whole).
    pub fn delete_at_end(&self, kind: &str, name: &str) {
        self.at_end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(vec![kind.to_string(), name.to_string()]);
    }

    /// Writes a file (a manifest) into the temp dir and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).expect("write file");
        path.to_string_lossy().into_owned()
    }

    /// kubectl with `args` started, its output in files of this run's own.
    fn launch(&self, args: &[&str], stdin: Stdio) -> Process {
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        let mut command = Command::new(kubectl_binary());
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("KUBECACHEDIR", &self.cache)
            .env_remove("KUBECONFIG")
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .env_remove("KUBECTL_KUBERC");
        Process::spawn_split(
            &format!("`kubectl {}`", args.join(" ")),
            &mut command,
            stdin,
            &self.dir.join(format!("run-{run}.stdout")),
            &self.dir.join(format!("run-{run}.stderr")),
        )
    }

    /// Runs kubectl to completion (at most [`RUN_TIMEOUT`]).
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, None)
    }

    /// Runs kubectl with `input` on its stdin.
    pub fn run_with_stdin(&self, args: &[&str], input: Option<&str>) -> Run {
        let stdin = match input {
            Some(input) => {
                let run = self.runs.load(Ordering::Relaxed);
                let path = self.dir.join(format!("run-{run}.stdin"));
                std::fs::write(&path, input).expect("write kubectl's input");
                Stdio::from(std::fs::File::open(&path).expect("kubectl's input"))
            }
            None => Stdio::null(),
        };
        let mut process = self.launch(args, stdin);
        let status = process.exit_within(RUN_TIMEOUT).unwrap_or_else(|| {
            // kubectl is a Go program: SIGQUIT makes it print every
            // goroutine's stack (on stderr) and exit, which shows the
            // request it waited on; the server's answer to a request of
            // our own shows whether the server was answering at all.
            process.signal("QUIT");
            let _ = process.exit_within(Duration::from_secs(5));
            let started = std::time::Instant::now();
            let (code, _) = self.raw_request("GET", "/version", "application/json", b"");
            panic!(
                "kubectl {} did not finish within {RUN_TIMEOUT:?} (GET /version answered {code} \
                 in {:?} just after); {}",
                args.join(" "),
                started.elapsed(),
                process.output()
            )
        });
        Run {
            args: args.join(" "),
            status,
            stdout: process.stdout(),
            stderr: process.stderr(),
        }
    }

    /// Runs kubectl and asserts that it succeeded.
    pub fn ok(&self, args: &[&str]) -> Run {
        self.run(args).success()
    }

    /// Runs kubectl and asserts that it failed.
    pub fn fails(&self, args: &[&str]) -> Run {
        self.run(args).failure()
    }

    /// `kubectl <args> -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        self.ok(&all).json()
    }

    /// Starts kubectl in the background; it is killed when the handle drops.
    pub fn spawn(&self, args: &[&str]) -> Background {
        Background {
            args: args.join(" "),
            process: self.launch(args, Stdio::null()),
            runtime: self.runtime.as_ref().expect("runtime").handle().clone(),
        }
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        if self.handle.is_none() {
            let at_end =
                std::mem::take(&mut *self.at_end.lock().unwrap_or_else(|e| e.into_inner()));
            for target in at_end.iter().rev() {
                let mut args = vec!["delete", "--ignore-not-found", "--timeout=20s"];
                args.extend(target.iter().map(String::as_str));
                let run = self.run(&args);
                if !run.status.success() {
                    eprintln!("cleaning up: {run}");
                }
            }
        }
        // The cluster-wide names are free again.
        drop(self.turn.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(runtime) = self.runtime.take() {
            match self.handle.take() {
                Some(handle) => runtime.block_on(handle.stop()),
                // On a shared cluster the namespace goes, with what the
                // test left in it.
                None if self.own_namespace => {
                    let namespaces: Api<Namespace> = Api::all(self.client.clone());
                    let _ = runtime
                        .block_on(namespaces.delete(&self.namespace, &DeleteParams::background()));
                }
                None => {}
            }
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
        // A private real cluster stops (its launcher cleans up) before the
        // files go.
        drop(self.private.take());
        if std::thread::panicking() {
            eprintln!("kubectl test files kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The result of one finished kubectl run.
pub struct Run {
    pub args: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`kubectl {}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args, self.status, self.stdout, self.stderr
        )
    }
}

impl Run {
    #[track_caller]
    pub fn success(self) -> Run {
        assert!(self.status.success(), "expected success: {self}");
        self
    }

    #[track_caller]
    pub fn failure(self) -> Run {
        assert!(!self.status.success(), "expected a failure: {self}");
        assert_eq!(
            self.status.code(),
            Some(1),
            "kubectl reports errors with exit code 1: {self}"
        );
        self
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self}"))
    }

    #[track_caller]
    pub fn stdout_has(self, needle: &str) -> Run {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}: {self}"
        );
        self
    }

    #[track_caller]
    pub fn stderr_has(self, needle: &str) -> Run {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}: {self}"
        );
        self
    }

    /// Non-empty stdout lines split into whitespace-separated cells.
    pub fn table(&self) -> Vec<Vec<String>> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    }

    /// A printed table cut at the columns of its header line, so that an
    /// empty cell stays an empty string in its column.
    pub fn columns(&self) -> Vec<Vec<String>> {
        let mut lines = self.stdout.lines().filter(|l| !l.trim().is_empty());
        let Some(header) = lines.next() else {
            return Vec::new();
        };
        let mut starts = Vec::new();
        let mut previous = ' ';
        for (i, c) in header.char_indices() {
            if c != ' ' && previous == ' ' {
                starts.push(i);
            }
            previous = c;
        }
        std::iter::once(header)
            .chain(lines)
            .map(|line| {
                starts
                    .iter()
                    .enumerate()
                    .map(|(n, &start)| {
                        let end = starts.get(n + 1).copied().unwrap_or(line.len());
                        line.get(start.min(line.len())..end.min(line.len()))
                            .unwrap_or_default()
                            .trim()
                            .to_string()
                    })
                    .collect()
            })
            .collect()
    }
}

/// A kubectl process running in the background.
pub struct Background {
    args: String,
    process: Process,
    /// The runtime of the [`Kubectl`] that started it, for waiting.
    runtime: tokio::runtime::Handle,
}

impl Background {
    pub fn stdout(&self) -> String {
        self.process.stdout()
    }

    pub fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// The complete JSON documents printed so far (kubectl prints one
    /// indented document per object or watch event).
    pub fn json_documents(&self) -> Vec<Value> {
        json_documents(&self.stdout())
    }

    /// Polls the printed JSON documents until `done` accepts them.
    #[track_caller]
    pub fn wait_for_documents(
        &mut self,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let stdout = self.wait_for_output(what, |stdout, _| done(&json_documents(stdout)));
        json_documents(&stdout)
    }

    /// Polls what it printed until `done(stdout, stderr)` holds; returns
    /// stdout then. Fails when it exits first, or after [`EVENT_TIMEOUT`].
    #[track_caller]
    pub fn wait_for_output(&mut self, what: &str, done: impl Fn(&str, &str) -> bool) -> String {
        let what = format!("`kubectl {}` to print {what}", self.args);
        let runtime = self.runtime.clone();
        runtime.block_on(eventually(&what, EVENT_TIMEOUT, async || {
            // Exited first: then the output read next is all it printed.
            let exited = self.process.exited();
            let stdout = self.stdout();
            if done(&stdout, &self.stderr()) {
                return Ok(stdout);
            }
            if let Some(status) = exited {
                panic!(
                    "{what}, but it exited ({status}); {}",
                    self.process.output()
                );
            }
            Err(self.process.output())
        }))
    }

    /// Asserts that the process is still running.
    #[track_caller]
    pub fn assert_running(&mut self) {
        self.process.check_alive();
    }

    /// Waits for the process to exit by itself (at most [`EVENT_TIMEOUT`]).
    #[track_caller]
    pub fn finish(mut self) -> Run {
        let status = self.process.exit_within(EVENT_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "`kubectl {}` did not exit within {EVENT_TIMEOUT:?}; {}",
                self.args,
                self.process.output()
            )
        });
        Run {
            args: self.args.clone(),
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }
}

/// The complete JSON documents of `text`.
fn json_documents(text: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build tokio runtime")
}

async fn test_namespace(kubeconfig_yaml: &str, test: &str) -> String {
    real::test_namespace(&client_for(kubeconfig_yaml).await, test).await
}
