//! Helpers for tests that run the real `kubectl` against a simulated cluster:
//! one in-process cluster per test, a private temp dir holding its
//! kubeconfig, kubectl's cache dir and the manifests, synchronous kubectl
//! runs with a deadline, and background kubectl processes (`get -w`, `wait`)
//! whose output is inspected while they run.
//!
//! Include with `#[path = "common/kubectl.rs"] mod kubectl_support;`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tfjob_federator::sim::{self, ClusterHandle, SimOptions};

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

/// One simulated cluster with a private directory for kubectl.
pub struct Kubectl {
    runtime: Option<tokio::runtime::Runtime>,
    handle: Option<ClusterHandle>,
    pub dir: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    /// Starts a cluster on its own runtime and writes its kubeconfig into a
    /// fresh temp dir. `test` names the dir, to find it after a failure.
    pub fn start(test: &str) -> Kubectl {
        let binary = kubectl_binary();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("build tokio runtime");
        let handle = runtime
            .block_on(sim::start_cluster("home", &SimOptions::default()))
            .expect("start simulated cluster");
        let dir = std::env::temp_dir().join(format!("kubectl-{test}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, handle.kubeconfig()).expect("write kubeconfig");
        let cache = dir.join("cache");
        let this = Kubectl {
            runtime: Some(runtime),
            handle: Some(handle),
            dir,
            kubeconfig,
            cache,
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

    pub fn url(&self) -> String {
        self.handle
            .as_ref()
            .map(ClusterHandle::url)
            .unwrap_or_default()
    }

    /// Sends one HTTP/1.1 request to the cluster without kubectl (for bodies
    /// kubectl never sends); returns the status code and the JSON body.
    pub fn raw_request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Value) {
        let url = self.url();
        let authority = url
            .strip_prefix("http://")
            .unwrap_or(&url)
            .trim_end_matches('/');
        let mut stream = std::net::TcpStream::connect(authority)
            .unwrap_or_else(|e| panic!("connect to {authority}: {e}"));
        stream
            .set_read_timeout(Some(RUN_TIMEOUT))
            .expect("set read timeout");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: {content_type}\r\n\
             Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("write request");
        stream.write_all(body).expect("write body");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).expect("read response");
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP head in {text:?}"));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        let json = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{method} {path}: body is not JSON ({e}): {text}"));
        (status, json)
    }

    /// Writes a file (a manifest) into the temp dir and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).expect("write file");
        path.to_string_lossy().into_owned()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(kubectl_binary());
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("KUBECACHEDIR", &self.cache)
            .env_remove("KUBECONFIG")
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .env_remove("KUBECTL_KUBERC")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs kubectl to completion (at most [`RUN_TIMEOUT`]).
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, None)
    }

    /// Runs kubectl with `input` on its stdin.
    pub fn run_with_stdin(&self, args: &[&str], input: Option<&str>) -> Run {
        let mut cmd = self.command(args);
        cmd.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", kubectl_binary().display()));
        if let Some(input) = input {
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(input.as_bytes()).expect("write stdin");
        }
        let stdout = Capture::start(child.stdout.take().expect("stdout"));
        let stderr = Capture::start(child.stderr.take().expect("stderr"));
        let deadline = Instant::now() + RUN_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for kubectl") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "kubectl {} did not finish within {RUN_TIMEOUT:?}; stdout: {} stderr: {}",
                    args.join(" "),
                    stdout.text(),
                    stderr.text()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        Run {
            args: args.join(" "),
            status,
            stdout: stdout.finish(),
            stderr: stderr.finish(),
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
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", kubectl_binary().display()));
        let stdout = Capture::start(child.stdout.take().expect("stdout"));
        let stderr = Capture::start(child.stderr.take().expect("stderr"));
        Background {
            args: args.join(" "),
            child,
            stdout,
            stderr,
        }
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        if let (Some(runtime), Some(handle)) = (self.runtime.take(), self.handle.take()) {
            runtime.block_on(handle.stop());
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
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
}

/// A pipe read to its end by a thread, readable while it fills.
struct Capture {
    buffer: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl Capture {
    fn start(mut pipe: impl Read + Send + 'static) -> Capture {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let thread = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => sink
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&chunk[..n]),
                }
            }
        });
        Capture {
            buffer,
            thread: Some(thread),
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    fn finish(mut self) -> String {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.text()
    }
}

/// A kubectl process running in the background.
pub struct Background {
    args: String,
    child: Child,
    stdout: Capture,
    stderr: Capture,
}

impl Background {
    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// The complete JSON documents printed so far (kubectl prints one
    /// indented document per object or watch event).
    pub fn json_documents(&self) -> Vec<Value> {
        let text = self.stdout();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .collect()
    }

    /// Polls the printed JSON documents until `done` accepts them.
    #[track_caller]
    pub fn wait_for_documents(
        &mut self,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        loop {
            let docs = self.json_documents();
            if done(&docs) {
                return docs;
            }
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let docs = self.json_documents();
                if done(&docs) {
                    return docs;
                }
                panic!(
                    "`kubectl {}` never printed {what} (exit: {exited:?}); stdout:\n{}\nstderr:\n{}",
                    self.args,
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asserts that the process is still running.
    #[track_caller]
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!(
                "`kubectl {}` exited early with {status}; stdout:\n{}\nstderr:\n{}",
                self.args,
                self.stdout(),
                self.stderr()
            );
        }
    }

    /// Waits for the process to exit by itself (at most [`EVENT_TIMEOUT`]).
    #[track_caller]
    pub fn finish(mut self) -> Run {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                panic!(
                    "`kubectl {}` did not exit within {EVENT_TIMEOUT:?}; stdout:\n{}\nstderr:\n{}",
                    self.args,
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Drop kills nothing now; give the readers their end of file.
        let stdout = std::mem::replace(&mut self.stdout, Capture::empty());
        let stderr = std::mem::replace(&mut self.stderr, Capture::empty());
        Run {
            args: self.args.clone(),
            status,
            stdout: stdout.finish(),
            stderr: stderr.finish(),
        }
    }
}

impl Capture {
    fn empty() -> Capture {
        Capture {
            buffer: Arc::new(Mutex::new(Vec::new())),
            thread: None,
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
