//! The demo's progress as text: one sentence per change between two views,
//! the live table a terminal redraws, the summary with its verdict, and what
//! `--keep` prints. Apart from the data it reads (`view` and the tracker) so
//! that the layout can change without touching what is known.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::{End, JobView, Line, Tracked, Tracker};
use crate::api::{JobPhase, ReplicaPhase};

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

impl JobView {
    /// Replicas per cluster as the summary shows them: `member-1: 2, member-2: 1`.
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

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:>6}] {}: {}", seconds(self.at), self.job, self.text)
    }
}

impl Tracker {
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
    use serde_json::json;

    use super::*;
    use crate::demo::progress::fixtures::{finished_tracker, job, key, running, secs, tracker};

    #[test]
    fn the_placement_counts_replicas_per_cluster() {
        let view = JobView::of(&job("split", running("split")));
        assert_eq!(view.placement_text(), "member-1: 2, member-2: 2");
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
                "reason": "WaitingForCapacity", "message": "waiting for capacity: home: not Ready; member-1: insufficient nvidia.com/gpu (need 16)"}]}),
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
                "    member-1: insufficient nvidia.com/gpu (need 16)",
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
