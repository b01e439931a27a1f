//! The one child-process type of the tests: every program a test starts
//! (the controller, the simulator CLI, `hack/real-clusters`, Prometheus,
//! kubectl) runs as a [`Process`], whose output goes to files the test can
//! read while it runs and shows when it fails, and which is stopped when
//! dropped, so that a failed test leaves nothing running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a process that stops at the end of its input
/// ([`Process::spawn_stopped_by_stdin_eof`]) may take before it is killed.
const STDIN_EOF_GRACE: Duration = Duration::from_secs(20);
/// How long a process may take to exit after SIGTERM.
const TERMINATE_GRACE: Duration = Duration::from_secs(60);

/// A child process, stopped when dropped: killed (SIGKILL), or, when
/// started with [`Process::spawn_stopped_by_stdin_eof`], given its end of
/// input and time to clean up.
pub struct Process {
    /// What it is, for messages.
    what: String,
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Process {
    /// Starts `command` (no input) with its stdout and stderr appended to `log`.
    pub fn spawn(what: &str, command: &mut Command, log: &Path) -> Process {
        Process::start(what, command, log, log, Stdio::null())
    }

    /// Starts `command` with `stdin`, its stdout and stderr each written to
    /// a file of its own.
    pub fn spawn_split(
        what: &str,
        command: &mut Command,
        stdin: Stdio,
        stdout: &Path,
        stderr: &Path,
    ) -> Process {
        Process::start(what, command, stdout, stderr, stdin)
    }

    /// Starts `command`, a program that stops and cleans up by itself when
    /// its standard input ends: dropped, it gets its end of input first (so
    /// it also stops when the test process dies, which closes the pipe).
    pub fn spawn_stopped_by_stdin_eof(what: &str, command: &mut Command, log: &Path) -> Process {
        Process::start(what, command, log, log, Stdio::piped())
    }

    fn start(
        what: &str,
        command: &mut Command,
        stdout: &Path,
        stderr: &Path,
        stdin: Stdio,
    ) -> Process {
        let open = |path: &Path| {
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(path)
                .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
        };
        let child = command
            .stdin(stdin)
            .stdout(open(stdout))
            .stderr(open(stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
        Process {
            what: what.to_string(),
            child,
            stdout: stdout.to_path_buf(),
            stderr: stderr.to_path_buf(),
        }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed on stdout so far (with stderr, when they share a file).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Its exit status, once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Panics, with what it printed, when it has exited.
    #[track_caller]
    pub fn check_alive(&mut self) {
        if let Some(status) = self.exited() {
            panic!("{} exited early ({status}); {}", self.what, self.output());
        }
    }

    /// Sends signal `name` (`TERM`, `INT`, …).
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -s {name} {}", self.what);
    }

    /// SIGTERM, then its exit status (it must exit within a minute).
    #[track_caller]
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.exit_within(TERMINATE_GRACE).unwrap_or_else(|| {
            panic!(
                "{} did not exit within {TERMINATE_GRACE:?} of SIGTERM; {}",
                self.what,
                self.output()
            )
        })
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its exit status once it exits by itself, or None when it still runs
    /// after `limit`. A blocking wait: `Drop` needs one, and std has no
    /// `wait` with a timeout.
    pub fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What it printed, for a failure message.
    pub fn output(&self) -> String {
        if self.stdout == self.stderr {
            format!("its output ({}):\n{}", self.stdout.display(), self.stdout())
        } else {
            format!(
                "its stdout:\n{}\nits stderr:\n{}",
                self.stdout(),
                self.stderr()
            )
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(stdin) = self.child.stdin.take() {
            drop(stdin);
            if self.exit_within(STDIN_EOF_GRACE).is_some() {
                return;
            }
        }
        self.kill();
    }
}
