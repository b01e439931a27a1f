//! The demo's progress, without I/O: what a job's status on home says (a
//! [`JobView`]), what changed between two views (one line each), the live
//! table a terminal redraws, the summary, and whether every job reached the
//! phase its manifest expects. Times are durations since the demo started,
//! passed in by the caller, so everything here is deterministic.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use kube::ResourceExt;

use crate::api::{
    ConditionStatus, JobCondition, JobConditionType, JobPhase, MemberCluster, ReplicaPhase,
    TaskStatus, TensorFlowTrainingJob,
};

/// The Initialized condition's reason while a job waits for a placement.
const WAITING_REASON: &str = "WaitingForCapacity";

/// A job's identity on home. Shown as its name in `default`, else `ns/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey {
    pub namespace: String,
    pub name: String,
}

impl JobKey {
    pub fn of(job: &TensorFlowTrainingJob) -> JobKey {
        JobKey {
            namespace: job.namespace().unwrap_or_else(|| "default".to_string()),
            name: job.name_any(),
        }
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace == "default" {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A phase a manifest may expect, in any letter case (`Unknown` is no goal).
pub fn parse_phase(text: &str) -> Option<JobPhase> {
    JobPhase::ALL
        .into_iter()
        .filter(|p| *p != JobPhase::Unknown)
        .find(|p| p.as_str().eq_ignore_ascii_case(text.trim()))
}

/// `1 job`, `2 jobs`.
pub fn jobs(count: usize) -> String {
    if count == 1 {
        "1 job".to_string()
    } else {
        format!("{count} jobs")
    }
}

/// A duration as people read it in the demo: `12.3s`.
pub fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// One replica as the job's status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    /// The replica without the job's name, e.g. `worker-3`.
    pub name: String,
    pub cluster: Option<String>,
    pub phase: ReplicaPhase,
    /// Why it failed or is stuck, e.g. `exit code 137, OOMKilled`.
    pub detail: Option<String>,
}

/// Replicas that changed to the same state, in one sentence:
/// `chief-0 worker-0..2 on member-1: Running`.
fn describe(
    names: &[&str],
    cluster: Option<&str>,
    phase: ReplicaPhase,
    detail: Option<&str>,
) -> String {
    let names = compress(names);
    let mut text = match cluster {
        Some(cluster) => format!("{names} on {cluster}: {}", phase.as_str()),
        None => format!("{names}: {}", phase.as_str()),
    };
    if let Some(detail) = detail {
        text.push_str(&format!(" ({detail})"));
    }
    text
}

/// Waiting reasons every starting pod goes through: not worth a line.
const ROUTINE_WAITING: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// The reason inside a container state such as `Terminated(OOMKilled)`.
fn state_reason(state: &str) -> Option<&str> {
    let inner = state.split_once('(')?.1.strip_suffix(')')?;
    (!inner.is_empty()).then_some(inner)
}

fn replica_detail(replica: &crate::api::ReplicaStatus) -> Option<String> {
    let main = replica
        .containers
        .iter()
        .find(|c| c.name == crate::api::TENSORFLOW_CONTAINER)
        .or(replica.containers.first())?;
    let reason = main.state.as_deref().and_then(state_reason);
    match replica.phase {
        ReplicaPhase::Failed => match (main.exit_code, reason) {
            (Some(code), Some(reason)) => Some(format!("exit code {code}, {reason}")),
            (Some(code), None) => Some(format!("exit code {code}")),
            (None, reason) => reason.map(str::to_string),
        },
        ReplicaPhase::Pending | ReplicaPhase::Unknown => reason
            .filter(|r| !ROUTINE_WAITING.contains(r))
            .map(str::to_string),
        _ => None,
    }
}

/// What the demo shows of one job, read from its object on home.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobView {
    pub phase: Option<JobPhase>,
    /// In status order: chief, worker, ps, evaluator, each by index.
    pub replicas: Vec<ReplicaState>,
    /// `tasks[].restartCount` by replica type, in status order.
    pub restarts: Vec<(String, i32)>,
    /// The WaitingForCapacity message while the job waits for a placement.
    pub waiting: Option<String>,
    /// `Reason: message` of the Failed condition, once it is True.
    pub failure: Option<String>,
    /// The controller has placed the job, or knows it must wait, or ended
    /// it: the next job may be submitted without racing it for capacity.
    pub admitted: bool,
}

fn condition(conditions: &[JobCondition], kind: JobConditionType) -> Option<&JobCondition> {
    conditions.iter().find(|c| c.condition_type == kind)
}

impl JobView {
    pub fn of(job: &TensorFlowTrainingJob) -> JobView {
        let status = job.status.clone().unwrap_or_default();
        let prefix = format!("{}-", job.name_any());
        let replicas = status
            .tasks
            .iter()
            .flat_map(|t: &TaskStatus| t.replica_status.iter())
            .map(|r| ReplicaState {
                name: r.name.strip_prefix(&prefix).unwrap_or(&r.name).to_string(),
                cluster: r.cluster.clone(),
                phase: r.phase,
                detail: replica_detail(r),
            })
            .collect();
        let restarts = status
            .tasks
            .iter()
            .map(|t| (t.replica_type.clone(), t.restart_count))
            .collect();
        let waiting = condition(&status.conditions, JobConditionType::Initialized)
            .filter(|c| {
                c.status == ConditionStatus::False && c.reason.as_deref() == Some(WAITING_REASON)
            })
            .map(|c| {
                c.message
                    .clone()
                    .unwrap_or_else(|| WAITING_REASON.to_string())
            });
        let failure = condition(&status.conditions, JobConditionType::Failed)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| match (&c.reason, &c.message) {
                (Some(reason), Some(message)) => format!("{reason}: {message}"),
                (Some(text), None) | (None, Some(text)) => text.clone(),
                (None, None) => "Failed".to_string(),
            });
        let admitted = status
            .placement
            .as_ref()
            .is_some_and(|p| p.assignment.is_some())
            || waiting.is_some()
            || matches!(
                status.phase,
                Some(JobPhase::Paused | JobPhase::Succeeded | JobPhase::Failed)
            );
        JobView {
            phase: status.phase,
            replicas,
            restarts,
            waiting,
            failure,
            admitted,
        }
    }

    pub fn total_restarts(&self) -> i32 {
        self.restarts.iter().map(|(_, n)| n).sum()
    }

    /// Replicas per cluster, e.g. `{"member-1": 3, "member-2": 2}`.
    pub fn placement(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for cluster in self.replicas.iter().filter_map(|r| r.cluster.as_ref()) {
            *counts.entry(cluster.clone()).or_default() += 1;
        }
        counts
    }

    fn placement_text(&self) -> String {
        let placement = self.placement();
        if placement.is_empty() {
            return "-".to_string();
        }
        placement
            .iter()
            .map(|(cluster, n)| format!("{cluster}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What changed from `before` to `after`, one sentence each.
pub fn changes(before: &JobView, after: &JobView) -> Vec<String> {
    let mut lines = Vec::new();
    if after.phase != before.phase
        && let Some(phase) = after.phase
    {
        match (&after.failure, phase) {
            (Some(failure), JobPhase::Failed) => {
                lines.push(format!("phase {} ({failure})", phase.as_str()));
            }
            _ => lines.push(format!("phase {}", phase.as_str())),
        }
    } else if after.failure != before.failure
        && let Some(failure) = &after.failure
    {
        lines.push(failure.clone());
    }
    if after.waiting != before.waiting
        && let Some(waiting) = &after.waiting
    {
        lines.push(waiting.clone());
    }
    // Replicas that changed to the same state together make one line.
    type State<'a> = (Option<&'a str>, ReplicaPhase, Option<&'a str>);
    let mut groups: Vec<(State, Vec<&str>)> = Vec::new();
    for replica in &after.replicas {
        if before.replicas.iter().find(|r| r.name == replica.name) == Some(replica) {
            continue;
        }
        let state = (
            replica.cluster.as_deref(),
            replica.phase,
            replica.detail.as_deref(),
        );
        match groups.iter_mut().find(|(s, _)| *s == state) {
            Some((_, names)) => names.push(&replica.name),
            None => groups.push((state, vec![&replica.name])),
        }
    }
    for ((cluster, phase, detail), names) in groups {
        lines.push(describe(&names, cluster, phase, detail));
    }
    for (replica_type, count) in &after.restarts {
        let earlier = before
            .restarts
            .iter()
            .find(|(t, _)| t == replica_type)
            .map_or(0, |(_, n)| *n);
        if *count > earlier {
            let times = if *count == 1 { "time" } else { "times" };
            lines.push(format!("{replica_type} restarted ({count} {times} so far)"));
        }
    }
    lines
}

/// Whether a job needs no more watching: it shows the phase it is expected
/// to reach, or a phase it can never leave.
pub fn settled(expected: JobPhase, phase: Option<JobPhase>) -> bool {
    phase.is_some_and(|p| p == expected || p.is_terminal())
}

/// How a job's part in the demo ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It settled at this time.
    Settled(Duration),
    /// The deadline passed at this time.
    TimedOut(Duration),
    /// The API server refused it.
    NotSubmitted(String),
}

/// One change, timed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub at: Duration,
    pub job: String,
    pub text: String,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:>6}] {}: {}", seconds(self.at), self.job, self.text)
    }
}

/// One job of the demo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    pub key: JobKey,
    pub expected: JobPhase,
    pub submitted: Option<Duration>,
    pub view: JobView,
    pub end: Option<End>,
}

impl Tracked {
    /// From submission to the end (or to `now` while it runs).
    fn duration(&self, now: Duration) -> Option<Duration> {
        let from = self.submitted?;
        let to = match &self.end {
            Some(End::Settled(at) | End::TimedOut(at)) => *at,
            _ => now,
        };
        Some(to.saturating_sub(from))
    }

    fn phase_text(&self) -> &'static str {
        self.view.phase.map_or("-", JobPhase::as_str)
    }
}

/// A job that did not reach its expected phase, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub job: String,
    pub why: String,
}

/// Every job of the demo, in submission order.
#[derive(Debug, Clone)]
pub struct Tracker {
    jobs: Vec<Tracked>,
    /// How long a job may take from submission to settling.
    timeout: Duration,
    /// How long the next submission waits at most for the previous job to
    /// be admitted.
    pace: Duration,
}

impl Tracker {
    pub fn new(jobs: Vec<(JobKey, JobPhase)>, timeout: Duration, pace: Duration) -> Tracker {
        Tracker {
            jobs: jobs
                .into_iter()
                .map(|(key, expected)| Tracked {
                    key,
                    expected,
                    submitted: None,
                    view: JobView::default(),
                    end: None,
                })
                .collect(),
            timeout,
            pace,
        }
    }

    pub fn jobs(&self) -> &[Tracked] {
        &self.jobs
    }

    /// The job to submit now, if any: jobs go one at a time, each once the
    /// previous one is admitted (or ended, or `pace` has passed), so that
    /// placements happen in submission order.
    pub fn next_submission(&self, now: Duration) -> Option<usize> {
        let index = self
            .jobs
            .iter()
            .position(|j| j.submitted.is_none() && j.end.is_none())?;
        let Some(previous) = index.checked_sub(1).and_then(|i| self.jobs.get(i)) else {
            return Some(index);
        };
        let ready = previous.view.admitted
            || previous.end.is_some()
            || previous
                .submitted
                .is_some_and(|at| now.saturating_sub(at) >= self.pace);
        ready.then_some(index)
    }

    pub fn submitted(&mut self, index: usize, now: Duration) -> Option<Line> {
        let job = self.jobs.get_mut(index)?;
        job.submitted = Some(now);
        Some(Line {
            at: now,
            job: job.key.to_string(),
            text: format!("submitted (expected phase {})", job.expected.as_str()),
        })
    }

    pub fn not_submitted(&mut self, index: usize, now: Duration, error: String) -> Option<Line> {
        let job = self.jobs.get_mut(index)?;
        let text = format!("not submitted: {error}");
        job.end = Some(End::NotSubmitted(error));
        Some(Line {
            at: now,
            job: job.key.to_string(),
            text,
        })
    }

    /// Takes in a newer version of a job; the lines say what changed.
    /// Jobs the demo did not submit are ignored.
    pub fn observe(&mut self, job: &TensorFlowTrainingJob, now: Duration) -> Vec<Line> {
        let key = JobKey::of(job);
        let Some(tracked) = self
            .jobs
            .iter_mut()
            .find(|j| j.key == key && j.submitted.is_some())
        else {
            return Vec::new();
        };
        let view = JobView::of(job);
        let lines = changes(&tracked.view, &view)
            .into_iter()
            .map(|text| Line {
                at: now,
                job: key.to_string(),
                text,
            })
            .collect();
        if tracked.end.is_none() && settled(tracked.expected, view.phase) {
            tracked.end = Some(End::Settled(now));
        }
        tracked.view = view;
        lines
    }

    /// Gives up on the jobs whose deadline has passed.
    pub fn expire(&mut self, now: Duration) -> Vec<Line> {
        let timeout = self.timeout;
        let mut lines = Vec::new();
        for job in &mut self.jobs {
            let overdue = job
                .submitted
                .is_some_and(|at| now.saturating_sub(at) >= timeout);
            if job.end.is_none() && overdue {
                job.end = Some(End::TimedOut(now));
                lines.push(Line {
                    at: now,
                    job: job.key.to_string(),
                    text: format!(
                        "gave up after {}: still {}",
                        seconds(timeout),
                        job.phase_text()
                    ),
                });
            }
        }
        lines
    }

    /// Every job has ended its part.
    pub fn done(&self) -> bool {
        self.jobs.iter().all(|j| j.end.is_some())
    }

    /// Why a job did not reach its expected phase; `None` when it did.
    fn failure(&self, job: &Tracked) -> Option<String> {
        let phase = job.view.phase;
        let expected = job.expected.as_str();
        let detail = job
            .view
            .failure
            .as_ref()
            .or(job.view.waiting.as_ref())
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        match &job.end {
            Some(End::NotSubmitted(error)) => Some(format!("not submitted: {error}")),
            Some(End::TimedOut(_)) => Some(format!(
                "expected {expected}, still {} after {}{detail}",
                job.phase_text(),
                seconds(self.timeout)
            )),
            _ if phase == Some(job.expected) => None,
            Some(End::Settled(_)) => Some(format!(
                "expected {expected}, ended {}{detail}",
                job.phase_text()
            )),
            None => Some(format!(
                "expected {expected}, still {} when the demo stopped{detail}",
                job.phase_text()
            )),
        }
    }

    /// The jobs that did not reach their expected phase.
    pub fn failures(&self) -> Vec<Failure> {
        self.jobs
            .iter()
            .filter_map(|j| {
                Some(Failure {
                    job: j.key.to_string(),
                    why: self.failure(j)?,
                })
            })
            .collect()
    }

    /// The live table a terminal redraws: a header, per job one line, then
    /// one line per cluster it uses (replicas grouped by phase), and what it
    /// waits for or why it failed. Lines are cut to `width` characters.
    pub fn live(&self, header: &str, now: Duration, width: usize) -> Vec<String> {
        let mut rows = vec![vec![
            "JOB".to_string(),
            "PHASE".to_string(),
            "RESTARTS".to_string(),
            "TIME".to_string(),
        ]];
        let mut details: Vec<Vec<String>> = vec![Vec::new()];
        let cluster_width = self
            .jobs
            .iter()
            .flat_map(|j| j.view.replicas.iter())
            .filter_map(|r| r.cluster.as_ref().map(String::len))
            .max()
            .unwrap_or(1);
        for job in &self.jobs {
            let (phase, restarts, time) = match (&job.end, job.submitted) {
                (Some(End::NotSubmitted(_)), _) => {
                    ("not submitted".to_string(), String::new(), String::new())
                }
                (_, None) => ("queued".to_string(), String::new(), String::new()),
                _ => (
                    // Submitted, and the controller has written no status yet.
                    job.view
                        .phase
                        .map_or("submitted", JobPhase::as_str)
                        .to_string(),
                    job.view.total_restarts().to_string(),
                    job.duration(now).map(seconds).unwrap_or_default(),
                ),
            };
            rows.push(vec![job.key.to_string(), phase, restarts, time]);
            details.push(job_details(job, self.timeout, cluster_width));
        }
        let table = table(&rows);
        let mut lines = vec![header.to_string()];
        for (row, extra) in table.into_iter().zip(details) {
            lines.push(row);
            lines.extend(extra.into_iter().map(|d| format!("  {d}")));
        }
        lines.into_iter().map(|l| fit(&l, width)).collect()
    }

    /// The table printed at the end, and the verdict under it.
    pub fn summary(&self, now: Duration) -> String {
        let mut rows = vec![
            ["JOB", "PLACEMENT", "RESTARTS", "PHASE", "TIME", "RESULT"]
                .map(str::to_string)
                .to_vec(),
        ];
        for job in &self.jobs {
            let result = match self.failure(job) {
                None => "ok".to_string(),
                Some(_) => match &job.end {
                    Some(End::TimedOut(_)) => "timed out".to_string(),
                    Some(End::NotSubmitted(_)) => "not submitted".to_string(),
                    _ => format!("expected {}", job.expected.as_str()),
                },
            };
            rows.push(vec![
                job.key.to_string(),
                job.view.placement_text(),
                job.view.total_restarts().to_string(),
                job.phase_text().to_string(),
                job.duration(now).map(seconds).unwrap_or_else(|| "-".into()),
                result,
            ]);
        }
        let mut out = table(&rows).join("\n");
        out.push('\n');
        let failures = self.failures();
        if failures.is_empty() {
            let subject = match self.jobs.len() {
                1 => "The job".to_string(),
                n => format!("All {n} jobs"),
            };
            out.push_str(&format!(
                "{subject} reached the expected phase ({}).\n",
                seconds(now)
            ));
        } else {
            out.push_str(&format!(
                "{} of {} did not reach the expected phase ({}):\n",
                failures.len(),
                jobs(self.jobs.len()),
                seconds(now)
            ));
            for failure in failures {
                out.push_str(&format!("  {}: {}\n", failure.job, failure.why));
            }
        }
        out
    }
}

/// The lines under a job in the live table; cluster names padded to `width`.
fn job_details(job: &Tracked, timeout: Duration, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut clusters: BTreeMap<&str, Vec<(ReplicaPhase, Vec<&str>)>> = BTreeMap::new();
    for replica in &job.view.replicas {
        let groups = clusters
            .entry(replica.cluster.as_deref().unwrap_or("-"))
            .or_default();
        match groups.iter_mut().find(|(p, _)| *p == replica.phase) {
            Some((_, names)) => names.push(&replica.name),
            None => groups.push((replica.phase, vec![&replica.name])),
        }
    }
    for (cluster, groups) in clusters {
        let text: Vec<String> = groups
            .iter()
            .map(|(phase, names)| format!("{} {}", phase.as_str(), compress(names)))
            .collect();
        lines.push(format!("{cluster:<width$}  {}", text.join(" · ")));
    }
    match &job.end {
        Some(End::NotSubmitted(error)) => lines.push(error.clone()),
        Some(End::TimedOut(_)) => lines.push(format!("gave up after {}", seconds(timeout))),
        _ => {}
    }
    if let Some(text) = job.view.failure.as_ref().or(job.view.waiting.as_ref()) {
        lines.extend(clauses(text));
    }
    lines
}

/// A long message as lines a terminal need not cut: each `; ` clause on
/// its own, indented under the first (`waiting for capacity: home: …` puts
/// each cluster's reason on a line).
fn clauses(message: &str) -> Vec<String> {
    let (head, rest) = match message.split_once(": ") {
        Some((head, rest)) if rest.contains("; ") => (format!("{head}:"), rest),
        _ => return vec![message.to_string()],
    };
    let mut lines = vec![head];
    lines.extend(rest.split("; ").map(|clause| format!("  {clause}")));
    lines
}

/// Replica names with runs of consecutive indices folded:
/// `chief-0 worker-0 worker-1 worker-2` → `chief-0 worker-0..2`.
pub fn compress(names: &[&str]) -> String {
    let parse = |name: &str| -> Option<(String, u32)> {
        let (kind, index) = name.rsplit_once('-')?;
        Some((kind.to_string(), index.parse().ok()?))
    };
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(String, u32, u32)> = None;
    let flush = |run: &mut Option<(String, u32, u32)>, out: &mut Vec<String>| {
        if let Some((kind, first, last)) = run.take() {
            out.push(if first == last {
                format!("{kind}-{first}")
            } else {
                format!("{kind}-{first}..{last}")
            });
        }
    };
    for name in names {
        match (parse(name), run.as_mut()) {
            (Some((kind, index)), Some((current, _, last)))
                if *current == kind && index == *last + 1 =>
            {
                *last = index;
            }
            (Some((kind, index)), _) => {
                flush(&mut run, &mut out);
                run = Some((kind, index, index));
            }
            (None, _) => {
                flush(&mut run, &mut out);
                out.push(name.to_string());
            }
        }
    }
    flush(&mut run, &mut out);
    out.join(" ")
}

/// Rows as left-aligned columns two spaces apart, without trailing blanks.
pub fn table(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(&widths) {
                line.push_str(cell);
                line.push_str(&" ".repeat(width - cell.chars().count() + 2));
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// Cuts a line to `width` characters, marking the cut with `…`.
pub fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// What a terminal needs to replace the `previous` lines drawn last with
/// `frame`: cursor up, clear to the end of the screen, the new lines.
pub fn redraw(previous: usize, frame: &[String]) -> String {
    let mut out = String::new();
    if previous > 0 {
        out.push_str(&format!("\r\x1b[{previous}A"));
    }
    out.push_str("\x1b[J");
    for line in frame {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Why a member cannot take jobs yet, or `None` once its probe says Ready
/// and its capacity is reported (placement needs both).
pub fn member_not_ready(member: &MemberCluster) -> Option<String> {
    let status = member.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.condition_type == crate::api::READY_CONDITION);
    match ready {
        Some(c) if c.status == "True" && !status.allocatable.is_empty() => None,
        Some(c) if c.status == "True" => Some("no capacity reported yet".to_string()),
        Some(c) => Some(format!(
            "not Ready: {}",
            c.message.as_deref().unwrap_or("no message")
        )),
        None => Some("not probed yet".to_string()),
    }
}

/// What `--keep` prints after the summary: where the kubeconfigs are and
/// commands to paste.
pub fn keep_instructions(kubeconfigs: &[(String, String)], metrics_url: &str) -> String {
    let mut out =
        String::from("The clusters and the controller stay up until Ctrl-C.\n\nKubeconfigs:\n");
    let width = kubeconfigs.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, path) in kubeconfigs {
        out.push_str(&format!("  {name:<width$}  {path}\n"));
    }
    if let Some((_, home)) = kubeconfigs.first() {
        out.push_str("\nTry:\n");
        for args in [
            "get tensorflowtrainingjobs -A",
            "get membercluster",
            "get events -A",
        ] {
            out.push_str(&format!("  kubectl --kubeconfig {home} {args}\n"));
        }
        for (_, path) in kubeconfigs {
            out.push_str(&format!("  kubectl --kubeconfig {path} get pods -A\n"));
        }
        out.push_str(&format!(
            "  curl -s {metrics_url} | grep ^tfjob_federator_jobs\n"
        ));
        out.push_str(&format!(
            "\nThe controller keeps running: submit more jobs with\n  kubectl --kubeconfig {home} apply -f JOB.yaml\n"
        ));
    }
    out.push_str(&format!("\nMetrics: {metrics_url}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(name: &str, status: serde_json::Value) -> TensorFlowTrainingJob {
        serde_json::from_value(json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicaSpecs": []},
            "status": status,
        }))
        .expect("a job")
    }

    fn replica(name: &str, cluster: &str, phase: &str) -> serde_json::Value {
        json!({"name": name, "phase": phase, "cluster": cluster})
    }

    /// A running job `name` with replicas on member-1 and member-2.
    fn running(name: &str) -> serde_json::Value {
        let r = |replica_name: &str, cluster: &str, phase: &str| {
            replica(&format!("{name}-{replica_name}"), cluster, phase)
        };
        json!({"phase": "Running", "tasks": [
            {"type": "chief", "restartCount": 0, "replicaStatus": [r("chief-0", "member-1", "Running")]},
            {"type": "worker", "restartCount": 0, "replicaStatus": [
                r("worker-0", "member-1", "Running"),
                r("worker-1", "member-2", "Pending"),
                r("worker-2", "member-2", "Running"),
            ]},
        ]})
    }

    fn key(name: &str) -> JobKey {
        JobKey {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_view_reads_phase_replicas_placement_and_restarts() {
        let view = JobView::of(&job("split", running("split")));
        assert_eq!(view.phase, Some(JobPhase::Running));
        assert_eq!(view.replicas[1].name, "worker-0");
        assert_eq!(view.replicas[2].cluster.as_deref(), Some("member-2"));
        assert_eq!(
            view.placement(),
            BTreeMap::from([("member-1".to_string(), 2), ("member-2".to_string(), 2)])
        );
        assert_eq!(view.placement_text(), "member-1: 2, member-2: 2");
        assert_eq!(view.total_restarts(), 0);
        assert!(!view.admitted, "no placement annotation, not waiting");
    }

    #[test]
    fn waiting_failure_and_admission_come_from_conditions_and_annotation() {
        let waiting = JobView::of(&job(
            "whole",
            json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
                "reason": "WaitingForCapacity", "message": "waiting for capacity: member-1: insufficient nvidia.com/gpu (need 16, free 8)"}]}),
        ));
        assert_eq!(
            waiting.waiting.as_deref(),
            Some("waiting for capacity: member-1: insufficient nvidia.com/gpu (need 16, free 8)")
        );
        assert!(waiting.admitted);
        let failed = JobView::of(&job(
            "bad",
            json!({"phase": "Failed", "conditions": [
                {"type": "Completed", "status": "False", "reason": "Failed", "message": "The job has failed."},
                {"type": "Failed", "status": "True", "reason": "ReplicaFailed", "message": "replica worker-0 exited with code 1"},
            ]}),
        ));
        assert_eq!(
            failed.failure.as_deref(),
            Some("ReplicaFailed: replica worker-0 exited with code 1")
        );
        let succeeded = JobView::of(&job(
            "fine",
            json!({"phase": "Succeeded", "conditions": [{"type": "Failed", "status": "False", "reason": "Succeeded"}]}),
        ));
        assert_eq!(
            succeeded.failure, None,
            "a False Failed condition is no failure"
        );
        let placed = JobView::of(&job(
            "placed",
            json!({"placement": {"epoch": 0, "assignment": {"worker-0": "home"}}}),
        ));
        assert!(placed.admitted);
    }

    #[test]
    fn a_failed_replica_shows_its_exit_code_and_reason() {
        let view = JobView::of(&job(
            "retry",
            json!({"phase": "Running", "tasks": [{"type": "worker", "restartCount": 1, "replicaStatus": [{
                "name": "retry-worker-0", "phase": "Failed", "cluster": "home",
                "containers": [{"name": "tensorflow", "state": "Terminated(OOMKilled)", "exitCode": 137}]},
                {"name": "retry-worker-1", "phase": "Pending", "cluster": "home",
                "containers": [{"name": "tensorflow", "state": "Waiting(ContainerCreating)"}]}]}]}),
        ));
        assert_eq!(
            changes(&JobView::default(), &view)[1..3],
            [
                "worker-0 on home: Failed (exit code 137, OOMKilled)",
                "worker-1 on home: Pending",
            ],
            "routine waiting reasons are left out"
        );
    }

    #[test]
    fn changes_name_the_phase_each_changed_replica_and_restarts() {
        let first = JobView::of(&job("split", running("split")));
        let all_new = changes(&JobView::default(), &first);
        assert_eq!(
            all_new,
            [
                "phase Running",
                "chief-0 worker-0 on member-1: Running",
                "worker-1 on member-2: Pending",
                "worker-2 on member-2: Running",
            ]
        );
        let mut status = running("split");
        status["tasks"][1]["replicaStatus"][1]["phase"] = json!("Running");
        status["tasks"][1]["restartCount"] = json!(2);
        let second = JobView::of(&job("split", status));
        assert_eq!(
            changes(&first, &second),
            [
                "worker-1 on member-2: Running",
                "worker restarted (2 times so far)"
            ]
        );
        assert!(changes(&second, &second).is_empty());
    }

    #[test]
    fn a_failed_phase_carries_the_reason_and_a_new_wait_is_reported() {
        let failed = JobView {
            phase: Some(JobPhase::Failed),
            failure: Some("ReplicaFailed: replica worker-0 exited with code 1".into()),
            ..Default::default()
        };
        assert_eq!(
            changes(&JobView::default(), &failed),
            ["phase Failed (ReplicaFailed: replica worker-0 exited with code 1)"]
        );
        let pending = JobView {
            phase: Some(JobPhase::Pending),
            ..Default::default()
        };
        let waiting = JobView {
            waiting: Some("waiting for capacity: home: not Ready".into()),
            ..pending.clone()
        };
        assert_eq!(
            changes(&pending, &waiting),
            ["waiting for capacity: home: not Ready"]
        );
    }

    #[test]
    fn a_job_settles_at_its_expected_phase_or_a_terminal_one() {
        assert!(settled(JobPhase::Succeeded, Some(JobPhase::Succeeded)));
        assert!(settled(JobPhase::Succeeded, Some(JobPhase::Failed)));
        assert!(settled(JobPhase::Running, Some(JobPhase::Running)));
        assert!(!settled(JobPhase::Succeeded, Some(JobPhase::Running)));
        assert!(!settled(JobPhase::Succeeded, None));
    }

    #[test]
    fn expected_phases_parse_in_any_case_but_unknown_is_no_goal() {
        assert_eq!(parse_phase("failed"), Some(JobPhase::Failed));
        assert_eq!(parse_phase(" Running "), Some(JobPhase::Running));
        assert_eq!(parse_phase("Unknown"), None);
        assert_eq!(parse_phase("Done"), None);
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn tracker() -> Tracker {
        Tracker::new(
            vec![
                (key("a"), JobPhase::Succeeded),
                (key("b"), JobPhase::Succeeded),
                (key("c"), JobPhase::Running),
            ],
            secs(60),
            secs(5),
        )
    }

    #[test]
    fn submissions_wait_for_the_previous_job_to_be_admitted() {
        let mut t = tracker();
        assert_eq!(t.next_submission(secs(0)), Some(0));
        let line = t.submitted(0, secs(0)).expect("a line");
        assert_eq!(
            line.to_string(),
            "[  0.0s] a: submitted (expected phase Succeeded)"
        );
        assert_eq!(t.next_submission(secs(1)), None, "a is not placed yet");
        t.observe(
            &job("a", json!({"placement": {"epoch": 0, "assignment": {}}})),
            secs(1),
        );
        assert_eq!(t.next_submission(secs(1)), Some(1));
        t.submitted(1, secs(1));
        assert_eq!(t.next_submission(secs(2)), None);
        assert_eq!(
            t.next_submission(secs(6)),
            Some(2),
            "after `pace` the next goes anyway"
        );
        t.not_submitted(2, secs(6), "denied".into());
        assert_eq!(t.next_submission(secs(7)), None, "nothing left");
    }

    #[test]
    fn jobs_the_demo_did_not_submit_are_ignored() {
        let mut t = tracker();
        assert!(t.observe(&job("a", running("split")), secs(1)).is_empty());
        assert!(
            t.observe(&job("other", running("split")), secs(1))
                .is_empty()
        );
        assert_eq!(t.jobs()[0].view, JobView::default());
    }

    fn finished_tracker() -> Tracker {
        let mut t = tracker();
        for i in 0..3 {
            t.submitted(i, secs(i as u64));
        }
        t.observe(
            &job(
                "a",
                json!({"phase": "Succeeded", "tasks": [{"type": "worker", "restartCount": 2, "replicaStatus": [
                    replica("a-worker-0", "home", "Succeeded"), replica("a-worker-1", "member-1", "Succeeded")]}]}),
            ),
            secs(10),
        );
        t.observe(
            &job(
                "b",
                json!({"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "reason": "ReplicaFailed",
                    "message": "replica worker-0 (pod b-worker-0) exited with code 1; restartPolicy Never does not restart it"}],
                    "tasks": [{"type": "worker", "replicaStatus": [replica("b-worker-0", "member-2", "Failed")]}]}),
            ),
            secs(11),
        );
        t.observe(&job("c", json!({"phase": "Running"})), secs(12));
        t
    }

    #[test]
    fn the_verdict_names_each_job_that_missed_its_phase_and_why() {
        let t = finished_tracker();
        assert!(t.done());
        assert_eq!(
            t.failures(),
            [Failure {
                job: "b".into(),
                why: "expected Succeeded, ended Failed: ReplicaFailed: replica worker-0 (pod b-worker-0) exited with code 1; restartPolicy Never does not restart it".into(),
            }]
        );
    }

    #[test]
    fn a_job_past_its_deadline_is_given_up_with_what_it_waits_for() {
        let mut t = Tracker::new(vec![(key("w"), JobPhase::Succeeded)], secs(30), secs(5));
        t.submitted(0, secs(2));
        t.observe(
            &job(
                "w",
                json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
                "reason": "WaitingForCapacity", "message": "waiting for capacity: home: insufficient nvidia.com/gpu (need 16, free 0)"}]}),
            ),
            secs(3),
        );
        assert!(
            t.expire(secs(31)).is_empty(),
            "30s from submission, not from start"
        );
        let lines = t.expire(secs(32));
        assert_eq!(lines[0].text, "gave up after 30.0s: still Pending");
        assert!(t.done());
        assert_eq!(
            t.failures()[0].why,
            "expected Succeeded, still Pending after 30.0s: waiting for capacity: home: insufficient nvidia.com/gpu (need 16, free 0)"
        );
        assert!(t.expire(secs(40)).is_empty(), "given up once");
    }

    #[test]
    fn a_job_that_leaves_its_expected_phase_afterwards_fails_the_verdict() {
        let mut t = finished_tracker();
        let ok_before = t.failures().iter().all(|f| f.job != "c");
        assert!(ok_before);
        t.observe(&job("c", json!({"phase": "Failed"})), secs(20));
        assert!(t.failures().iter().any(|f| f.job == "c"));
    }

    #[test]
    fn the_summary_lists_placement_restarts_phase_and_time() {
        let summary = finished_tracker().summary(secs(30));
        let expected = "\
JOB  PLACEMENT             RESTARTS  PHASE      TIME   RESULT
a    home: 1, member-1: 1  2         Succeeded  10.0s  ok
b    member-2: 1           0         Failed     10.0s  expected Succeeded
c    -                     0         Running    10.0s  ok
1 of 3 jobs did not reach the expected phase (30.0s):
  b: expected Succeeded, ended Failed: ReplicaFailed: replica worker-0 (pod b-worker-0) exited with code 1; restartPolicy Never does not restart it
";
        assert_eq!(summary, expected);
        let mut good = Tracker::new(vec![(key("a"), JobPhase::Succeeded)], secs(60), secs(5));
        good.submitted(0, secs(0));
        good.observe(&job("a", json!({"phase": "Succeeded"})), secs(3));
        assert!(
            good.summary(secs(3))
                .ends_with("The job reached the expected phase (3.0s).\n")
        );
    }

    #[test]
    fn the_live_table_groups_replicas_by_cluster_and_phase() {
        let mut t = tracker();
        t.submitted(0, secs(1));
        t.observe(&job("a", running("a")), secs(4));
        t.submitted(1, secs(2));
        t.observe(
            &job(
                "b",
                json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
                "reason": "WaitingForCapacity", "message": "waiting for capacity: home: not Ready; member-1: insufficient nvidia.com/gpu (need 16, free 8)"}]}),
            ),
            secs(3),
        );
        let lines = t.live("demo · 5.0s", secs(5), 80);
        assert_eq!(
            lines,
            [
                "demo · 5.0s",
                "JOB  PHASE    RESTARTS  TIME",
                "a    Running  0         4.0s",
                "  member-1  Running chief-0 worker-0",
                "  member-2  Pending worker-1 · Running worker-2",
                "b    Pending  0         3.0s",
                "  waiting for capacity:",
                "    home: not Ready",
                "    member-1: insufficient nvidia.com/gpu (need 16, free 8)",
                "c    queued",
            ]
        );
        let narrow = t.live("demo", secs(5), 20);
        assert!(narrow.iter().all(|l| l.chars().count() <= 20));
        assert_eq!(narrow[3], "  member-1  Running…");
    }

    #[test]
    fn messages_without_clauses_stay_one_line() {
        assert_eq!(
            clauses("ReplicaFailed: replica worker-0 exited with code 1"),
            ["ReplicaFailed: replica worker-0 exited with code 1"]
        );
        assert_eq!(
            clauses(
                "ReplicaFailed: replica worker-0 exited with code 1; restartPolicy Never does not restart it"
            ),
            [
                "ReplicaFailed:",
                "  replica worker-0 exited with code 1",
                "  restartPolicy Never does not restart it"
            ]
        );
    }

    #[test]
    fn compress_folds_consecutive_indices_of_one_type() {
        assert_eq!(
            compress(&[
                "chief-0", "worker-0", "worker-1", "worker-2", "worker-4", "ps-0"
            ]),
            "chief-0 worker-0..2 worker-4 ps-0"
        );
        assert_eq!(compress(&["odd", "worker-1"]), "odd worker-1");
        assert_eq!(compress(&[]), "");
    }

    #[test]
    fn redraw_moves_up_over_the_last_frame_and_clears_it() {
        let frame = vec!["a".to_string(), "b".to_string()];
        assert_eq!(redraw(0, &frame), "\x1b[Ja\nb\n");
        assert_eq!(redraw(3, &frame), "\r\x1b[3A\x1b[Ja\nb\n");
    }

    #[test]
    fn a_member_is_ready_with_a_true_condition_and_capacity() {
        let member = |status: serde_json::Value| -> MemberCluster {
            serde_json::from_value(json!({
                "apiVersion": "federation.tfjob.io/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": "member-1"},
                "spec": {"kubeconfigSecretRef": {"name": "member-1", "namespace": "tfjob-federator"}},
                "status": status,
            }))
            .expect("a member")
        };
        assert_eq!(
            member_not_ready(&member(json!({}))).as_deref(),
            Some("not probed yet")
        );
        let ready = json!({"type": "Ready", "status": "True", "message": "the API server answers"});
        assert_eq!(
            member_not_ready(&member(json!({"conditions": [ready]}))).as_deref(),
            Some("no capacity reported yet")
        );
        assert_eq!(
            member_not_ready(&member(
                json!({"conditions": [ready], "allocatable": {"cpu": "128"}})
            )),
            None
        );
        assert_eq!(
            member_not_ready(&member(json!({"conditions": [
                {"type": "Ready", "status": "False", "message": "probe failed"}]})))
            .as_deref(),
            Some("not Ready: probe failed")
        );
    }

    #[test]
    fn keep_instructions_give_paths_and_commands_for_every_cluster() {
        let text = keep_instructions(
            &[
                ("home".into(), "/tmp/d/home.kubeconfig".into()),
                ("member-1".into(), "/tmp/d/member-1.kubeconfig".into()),
            ],
            "http://127.0.0.1:9090/metrics",
        );
        assert!(
            text.contains("Metrics: http://127.0.0.1:9090/metrics\n"),
            "{text}"
        );
        assert!(
            text.contains("  home      /tmp/d/home.kubeconfig\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "kubectl --kubeconfig /tmp/d/home.kubeconfig get tensorflowtrainingjobs -A"
            )
        );
        assert!(text.contains("kubectl --kubeconfig /tmp/d/home.kubeconfig get membercluster"));
        assert!(text.contains("kubectl --kubeconfig /tmp/d/member-1.kubeconfig get pods -A"));
    }
}
