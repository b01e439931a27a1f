//! From every stage, what the first sample of every kind of event leads
//! to, as a table.

use super::*;

#[test]
fn every_kind_of_event_has_samples_of_its_kind() {
    for &expected in EventKind::ALL {
        let samples = samples(expected);
        assert!(!samples.is_empty(), "{expected:?}");
        for sample in &samples {
            assert_eq!(kind(sample), expected, "{sample:?}");
        }
    }
}

/// From every stage, the first sample of every kind of event: the stage
/// after it and the effects.
#[test]
fn transitions() {
    use Stage::*;
    // One row per stage, one cell per kind of event in `EventKind::ALL`'s order:
    // PodSeen(p1 Running), PodGone(p1), PodCreated(Made p2), PodRead(Found p1),
    // ServiceCreated(Made s1), ServiceRead(Found s1), ServiceDeleted,
    // Restart(p1), Finish(Unfinished), TearDown, RetryDue(Pod).
    let rows: &[(Stage, [&str; 11])] = &[
        (
            Absent,
            [
                "Live: Report(Running)",
                "Creating: CreatePod(1)",
                "Live: Report(Pending)",
                "Absent:",
                "Absent: Export",
                "Absent:",
                "Absent:",
                "Creating: CreatePod(2)",
                "Finished: Report(Deleted blocked)",
                "TearingDown: ReadPod Report(Deleted blocked)",
                "Creating: CreatePod(1)",
            ],
        ),
        (
            Creating,
            [
                "Live: Report(Running)",
                "Creating:",
                "Live: Report(Pending)",
                "Creating:",
                "Creating: Export",
                "Creating:",
                "Creating:",
                "Creating:",
                "Finished:",
                "TearingDown: ReadPod",
                "Creating:",
            ],
        ),
        (
            Live,
            [
                "Live: Report(Running)",
                "Vanished: Report(Deleted)",
                "Live:",
                "Live:",
                "Live:",
                "Live:",
                "Live:",
                "Replacing: DeletePod(p1)",
                "CleaningUp: DeletePod(p1) DeleteService(s1)",
                "TearingDown: DeletePod(p1) DeleteService(s1)",
                "Live:",
            ],
        ),
        (
            Replacing,
            [
                "Replacing: Report(Running)",
                "Creating: CreatePod(2) Report(Creating)",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "CleaningUp: DeleteService(s1)",
                "TearingDown: DeleteService(s1)",
                "Replacing:",
            ],
        ),
        (
            Vanished,
            [
                "Live: Report(Running)",
                "Vanished:",
                "Live: Report(Pending)",
                "Vanished:",
                "Vanished:",
                "Vanished:",
                "Vanished:",
                "Creating: CreatePod(2) Report(Creating)",
                "CleaningUp: DeleteService(s1)",
                "TearingDown: ReadPod DeleteService(s1)",
                "Vanished:",
            ],
        ),
        (
            ClearingStale,
            [
                "Live: Report(Running)",
                "Creating: CreatePod(1)",
                "Live: Report(Pending)",
                "ClearingStale:",
                "ClearingStale:",
                "ClearingStale:",
                "ClearingStale:",
                "ClearingStale:",
                "CleaningUp: DeleteService(s1) Report(Deleted)",
                "TearingDown: DeleteService(s1) Report(Deleted)",
                "ClearingStale:",
            ],
        ),
        (
            Blocked,
            [
                "Live: Report(Running)",
                "Creating: CreatePod(1)",
                "Live: Report(Pending)",
                "Blocked:",
                "Blocked:",
                "Blocked:",
                "Blocked:",
                "Blocked:",
                "CleaningUp: DeleteService(s1) Report(Deleted blocked)",
                "TearingDown: ReadPod DeleteService(s1) Report(Deleted blocked)",
                "Blocked:",
            ],
        ),
        (
            Finished,
            [
                "CleaningUp: DeletePod(p1) DeleteService(s1) Report(Running)",
                "CleaningUp: DeleteService(s1) Report(Deleted)",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "TearingDown: DeletePod(p1) DeleteService(s1)",
                "Finished:",
            ],
        ),
        (
            CleaningUp,
            [
                "CleaningUp: Report(Running)",
                "CleaningUp: Report(Deleted)",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "TearingDown:",
                "CleaningUp:",
            ],
        ),
        (
            TearingDown,
            [
                "TearingDown: Report(Running)",
                "TearingDown: Report(Deleted)",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
            ],
        ),
        (
            TornDown,
            [
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
            ],
        ),
    ];
    let stages: Vec<Stage> = rows.iter().map(|(stage, _)| *stage).collect();
    assert_eq!(stages, Stage::ALL, "one row per stage, in order");
    let mut cells = 0;
    for (from, expected) in rows {
        for (&kind, expected) in EventKind::ALL.iter().zip(expected) {
            let (mut state, _) = reach(*from);
            let event = samples(kind).remove(0);
            let effects = names(&state.step(event));
            let got = format!("{:?}: {}", state.stage(), effects.join(" "));
            assert_eq!(got.trim_end(), *expected, "{from:?} on {kind:?}");
            cells += 1;
        }
    }
    assert_eq!(cells, Stage::ALL.len() * EventKind::ALL.len());
}
