//! The member's health machine as a table: from each state it can be in,
//! what one event leads to (state, effects). Then the invariants, on every
//! (state, event) pair and on generated event sequences.

use super::*;
use proptest::prelude::*;

const LOST_AFTER: Duration = Duration::from_secs(60);

/// Instants as seconds after `origin` (a test's clock).
struct Clock {
    origin: Instant,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    fn at(&self, seconds: u64) -> Instant {
        self.origin + Duration::from_secs(seconds)
    }
}

fn registered() -> Event {
    Event::Registered {
        new_kubeconfig: true,
        new_generation: true,
        spec_problem: None,
    }
}

fn no_answer() -> Answer {
    Answer::NoAnswer("connection refused".into())
}

fn refusal() -> Refusal {
    Refusal::ReachesHome {
        home: "home".into(),
        identity: "uid-home".into(),
    }
}

/// A member driven by `events`, each at the given second.
fn driven(clock: &Clock, events: Vec<(u64, Event)>) -> MemberHealth {
    let mut health = MemberHealth::new(LOST_AFTER);
    for (second, event) in events {
        health.step(event, clock.at(second));
    }
    health
}

/// Every state a member can be in, reached by events; the table's steps
/// happen at second 100, so "fresh" is 10 s since ready and "stale" 100 s.
fn every_state(clock: &Clock) -> Vec<(&'static str, MemberHealth)> {
    let connected = |second| vec![(0, registered()), (second, Event::Connected)];
    let good = |second| (second, Event::Probed(Answer::Good));
    let with = |mut first: Vec<(u64, Event)>, rest: Vec<(u64, Event)>| {
        first.extend(rest);
        first
    };
    let states = vec![
        ("connecting", vec![(0, registered())]),
        ("unready fresh", connected(90)),
        ("unready stale", connected(0)),
        (
            "unready swept fresh",
            with(
                connected(0),
                vec![
                    good(85),
                    (85, Event::Swept { sweep: 1, ok: true }),
                    (90, Event::Probed(no_answer())),
                ],
            ),
        ),
        ("sweeping fresh", with(connected(0), vec![good(90)])),
        ("sweeping stale", with(connected(0), vec![good(0)])),
        (
            "sweeping, sweep failed",
            with(
                connected(0),
                vec![
                    good(90),
                    (
                        90,
                        Event::Swept {
                            sweep: 1,
                            ok: false,
                        },
                    ),
                ],
            ),
        ),
        (
            "ready fresh",
            with(
                connected(0),
                vec![good(90), (90, Event::Swept { sweep: 1, ok: true })],
            ),
        ),
        (
            "ready stale",
            with(
                connected(0),
                vec![good(0), (0, Event::Swept { sweep: 1, ok: true })],
            ),
        ),
        (
            "ready, sweeping",
            with(
                connected(0),
                vec![
                    good(90),
                    (90, Event::Swept { sweep: 1, ok: true }),
                    (90, Event::SweepDue),
                ],
            ),
        ),
        (
            "lost",
            with(connected(0), vec![(70, Event::Probed(no_answer()))]),
        ),
        ("deregistered", vec![(0, registered()), (0, Event::Removed)]),
    ];
    states
        .into_iter()
        .map(|(name, events)| (name, driven(clock, events)))
        .collect()
}

/// Examples of every event. The match has an arm per variant and each arm
/// names the next: a new variant does not compile until it has examples
/// here, and then rows in the table.
fn every_event() -> Vec<(&'static str, Event)> {
    let mut all = Vec::new();
    let mut next = Some(registered());
    while let Some(event) = next.take() {
        let examples = match event {
            Event::Registered { .. } => {
                next = Some(Event::SecretChanged);
                vec![
                    ("registered", registered()),
                    (
                        "respecified",
                        Event::Registered {
                            new_kubeconfig: false,
                            new_generation: true,
                            spec_problem: None,
                        },
                    ),
                    (
                        "respecified badly",
                        Event::Registered {
                            new_kubeconfig: false,
                            new_generation: true,
                            spec_problem: Some("spec.addressTemplate: bad".into()),
                        },
                    ),
                ]
            }
            Event::SecretChanged => {
                next = Some(Event::Connected);
                vec![("secret changed", event)]
            }
            Event::Connected => {
                next = Some(Event::ConnectFailed(String::new()));
                vec![("connected", event)]
            }
            Event::ConnectFailed(_) => {
                next = Some(Event::Probed(Answer::Good));
                vec![("connect failed", Event::ConnectFailed("no key".into()))]
            }
            Event::Probed(_) => {
                next = Some(Event::Refused);
                every_answer()
                    .into_iter()
                    .map(|(name, answer)| (name, Event::Probed(answer)))
                    .collect()
            }
            Event::Refused => {
                next = Some(Event::SweepDue);
                vec![("refused", event)]
            }
            Event::SweepDue => {
                next = Some(Event::Swept { sweep: 0, ok: true });
                vec![("sweep due", event)]
            }
            Event::Swept { .. } => {
                next = Some(Event::Removed);
                vec![
                    ("swept", Event::Swept { sweep: 1, ok: true }),
                    (
                        "sweep failed",
                        Event::Swept {
                            sweep: 1,
                            ok: false,
                        },
                    ),
                    ("swept, later sweep", Event::Swept { sweep: 2, ok: true }),
                ]
            }
            Event::Removed => vec![("removed", event)],
        };
        all.extend(examples);
    }
    all
}

/// Every kind of probe answer (an arm per variant, as for events).
fn every_answer() -> Vec<(&'static str, Answer)> {
    let mut all = Vec::new();
    let mut next = Some(Answer::Good);
    while let Some(answer) = next.take() {
        let name = match answer {
            Answer::Good => {
                next = Some(no_answer());
                "probed good"
            }
            Answer::NoAnswer(_) => {
                next = Some(Answer::Refused(refusal()));
                "probed, no answer"
            }
            Answer::Refused(_) => {
                next = Some(Answer::IdentityUnknown(String::new()));
                "probed, refused"
            }
            Answer::IdentityUnknown(_) => "probed, identity unknown",
        };
        all.push((name, answer));
    }
    all
}

/// The name of every kind of state: an arm per variant (and per value of
/// `swept`), so a new variant does not compile until it is named here.
fn state_kind(state: &State) -> &'static str {
    match state {
        State::Connecting => "connecting",
        State::Unready { swept: false, .. } => "unready",
        State::Unready { swept: true, .. } => "unready swept",
        State::Sweeping { .. } => "sweeping",
        State::Ready { .. } => "ready",
        State::Lost => "lost",
        State::Deregistered => "deregistered",
    }
}

/// Every kind of state, one of each, chained through `state_kind`'s arms.
fn every_state_kind() -> Vec<&'static str> {
    let now = Instant::now();
    let mut all = Vec::new();
    let mut next = Some(State::Connecting);
    while let Some(state) = next.take() {
        next = match state {
            State::Connecting => Some(State::Unready {
                since: now,
                swept: false,
            }),
            State::Unready { swept: false, .. } => Some(State::Unready {
                since: now,
                swept: true,
            }),
            State::Unready { swept: true, .. } => Some(State::Sweeping { last_ready: now }),
            State::Sweeping { .. } => Some(State::Ready { last_ready: now }),
            State::Ready { .. } => Some(State::Lost),
            State::Lost => Some(State::Deregistered),
            State::Deregistered => None,
        };
        all.push(state_kind(&state));
    }
    all
}

fn state_name(health: &MemberHealth) -> String {
    let state = state_kind(health.state());
    match health.sweeping {
        Some(sweep) => format!("{state} (sweep {sweep})"),
        None => state.to_string(),
    }
}

fn effect_names(effects: &[Effect]) -> String {
    let names: Vec<String> = effects
        .iter()
        .map(|effect| match effect {
            Effect::Connect => "connect".to_string(),
            Effect::Disconnect => "disconnect".to_string(),
            Effect::Probe => "probe".to_string(),
            Effect::Sweep { sweep } => format!("sweep {sweep}"),
            Effect::Report(condition) if condition.ready => "report ready".to_string(),
            Effect::Report(_) => "report".to_string(),
            Effect::FailOver => "fail over".to_string(),
            Effect::NoLongerLost => "no longer lost".to_string(),
        })
        .collect();
    names.join(", ")
}

/// (state, event) → "next state: effects", for every pair. Only the states
/// where time matters have a stale variant: the rest go the same way.
const TABLE: &[(&str, &[(&str, &str)])] = &[
    (
        "connecting",
        &[
            ("registered", "connecting: connect"),
            ("respecified", "connecting: "),
            ("respecified badly", "connecting: "),
            ("secret changed", "connecting: connect"),
            ("connected", "unready: probe"),
            ("connect failed", "connecting: report"),
            ("probed good", "connecting: "),
            ("probed, no answer", "connecting: "),
            ("probed, refused", "connecting: "),
            ("probed, identity unknown", "connecting: "),
            ("refused", "connecting: "),
            ("sweep due", "connecting: "),
            ("swept", "connecting: "),
            ("sweep failed", "connecting: "),
            ("swept, later sweep", "connecting: "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "unready fresh",
        &[
            ("registered", "unready: connect"),
            ("respecified", "unready: probe"),
            ("respecified badly", "unready: probe"),
            ("secret changed", "unready: connect"),
            ("connected", "unready: probe"),
            ("connect failed", "unready: report"),
            ("probed good", "sweeping (sweep 1): report, sweep 1"),
            ("probed, no answer", "unready: report"),
            ("probed, refused", "unready: report"),
            ("probed, identity unknown", "unready: report"),
            ("refused", "unready: "),
            ("sweep due", "unready: "),
            ("swept", "unready: "),
            ("sweep failed", "unready: "),
            ("swept, later sweep", "unready: "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "unready stale",
        &[
            ("registered", "unready: connect"),
            ("respecified", "unready: probe"),
            ("respecified badly", "unready: probe"),
            ("secret changed", "unready: connect"),
            ("connected", "unready: probe"),
            ("connect failed", "unready: report"),
            ("probed good", "sweeping (sweep 1): report, sweep 1"),
            ("probed, no answer", "lost: report, fail over"),
            ("probed, refused", "lost: report, fail over"),
            ("probed, identity unknown", "lost: report, fail over"),
            ("refused", "unready: "),
            ("sweep due", "unready: "),
            ("swept", "unready: "),
            ("sweep failed", "unready: "),
            ("swept, later sweep", "unready: "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "unready swept fresh",
        &[
            ("registered", "unready swept: connect"),
            ("respecified", "unready swept: probe"),
            ("respecified badly", "unready swept: probe"),
            ("secret changed", "unready swept: connect"),
            ("connected", "unready swept: probe"),
            ("connect failed", "unready swept: report"),
            ("probed good", "ready: report ready"),
            ("probed, no answer", "unready swept: report"),
            ("probed, refused", "unready swept: report"),
            ("probed, identity unknown", "unready swept: report"),
            ("refused", "unready swept: "),
            ("sweep due", "unready swept: "),
            ("swept", "unready swept: "),
            ("sweep failed", "unready swept: "),
            ("swept, later sweep", "unready swept: "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "sweeping fresh",
        &[
            ("registered", "sweeping (sweep 1): connect"),
            ("respecified", "sweeping (sweep 1): probe"),
            ("respecified badly", "sweeping (sweep 1): probe"),
            ("secret changed", "sweeping (sweep 1): connect"),
            ("connected", "unready: probe"),
            ("connect failed", "sweeping (sweep 1): report"),
            ("probed good", "sweeping (sweep 1): report"),
            ("probed, no answer", "unready (sweep 1): report"),
            ("probed, refused", "unready (sweep 1): report"),
            ("probed, identity unknown", "unready (sweep 1): report"),
            ("refused", "unready (sweep 1): "),
            ("sweep due", "sweeping (sweep 1): "),
            ("swept", "ready: report ready"),
            ("sweep failed", "sweeping: "),
            ("swept, later sweep", "sweeping (sweep 1): "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "sweeping stale",
        &[
            ("registered", "sweeping (sweep 1): connect"),
            ("respecified", "sweeping (sweep 1): probe"),
            ("respecified badly", "sweeping (sweep 1): probe"),
            ("secret changed", "sweeping (sweep 1): connect"),
            ("connected", "unready: probe"),
            ("connect failed", "sweeping (sweep 1): report"),
            ("probed good", "sweeping (sweep 1): report"),
            ("probed, no answer", "lost: report, fail over"),
            ("probed, refused", "lost: report, fail over"),
            ("probed, identity unknown", "lost: report, fail over"),
            ("refused", "unready (sweep 1): "),
            ("sweep due", "sweeping (sweep 1): "),
            ("swept", "ready: report ready"),
            ("sweep failed", "sweeping: "),
            ("swept, later sweep", "sweeping (sweep 1): "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "sweeping, sweep failed",
        &[
            ("registered", "sweeping: connect"),
            ("respecified", "sweeping: probe"),
            ("respecified badly", "sweeping: probe"),
            ("secret changed", "sweeping: connect"),
            ("connected", "unready: probe"),
            ("connect failed", "sweeping: report"),
            ("probed good", "sweeping (sweep 2): report, sweep 2"),
            ("probed, no answer", "unready: report"),
            ("probed, refused", "unready: report"),
            ("probed, identity unknown", "unready: report"),
            ("refused", "unready: "),
            ("sweep due", "sweeping: "),
            ("swept", "sweeping: "),
            ("sweep failed", "sweeping: "),
            ("swept, later sweep", "sweeping: "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "ready fresh",
        &[
            ("registered", "ready: connect"),
            ("respecified", "ready: probe"),
            ("respecified badly", "ready: probe"),
            ("secret changed", "ready: connect"),
            ("connected", "unready swept: probe"),
            ("connect failed", "ready: report"),
            ("probed good", "ready: report ready"),
            ("probed, no answer", "unready swept: report"),
            ("probed, refused", "unready swept: report"),
            ("probed, identity unknown", "unready swept: report"),
            ("refused", "unready swept: "),
            ("sweep due", "ready (sweep 2): sweep 2"),
            ("swept", "ready: "),
            ("sweep failed", "ready: "),
            ("swept, later sweep", "ready: "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "ready stale",
        &[
            ("registered", "ready: connect"),
            ("respecified", "ready: probe"),
            ("respecified badly", "ready: probe"),
            ("secret changed", "ready: connect"),
            ("connected", "unready swept: probe"),
            ("connect failed", "ready: report"),
            ("probed good", "ready: report ready"),
            ("probed, no answer", "lost: report, fail over"),
            ("probed, refused", "lost: report, fail over"),
            ("probed, identity unknown", "lost: report, fail over"),
            ("refused", "unready swept: "),
            ("sweep due", "ready (sweep 2): sweep 2"),
            ("swept", "ready: "),
            ("sweep failed", "ready: "),
            ("swept, later sweep", "ready: "),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "ready, sweeping",
        &[
            ("registered", "ready (sweep 2): connect"),
            ("respecified", "ready (sweep 2): probe"),
            ("respecified badly", "ready (sweep 2): probe"),
            ("secret changed", "ready (sweep 2): connect"),
            ("connected", "unready swept: probe"),
            ("connect failed", "ready (sweep 2): report"),
            ("probed good", "ready (sweep 2): report ready"),
            ("probed, no answer", "unready swept (sweep 2): report"),
            ("probed, refused", "unready swept (sweep 2): report"),
            (
                "probed, identity unknown",
                "unready swept (sweep 2): report",
            ),
            ("refused", "unready swept (sweep 2): "),
            ("sweep due", "ready (sweep 2): "),
            ("swept", "ready (sweep 2): "),
            ("sweep failed", "ready (sweep 2): "),
            ("swept, later sweep", "ready: report ready"),
            ("removed", "deregistered: disconnect, fail over"),
        ],
    ),
    (
        "lost",
        &[
            ("registered", "lost: connect"),
            ("respecified", "lost: probe"),
            ("respecified badly", "lost: probe"),
            ("secret changed", "lost: connect"),
            ("connected", "lost: probe"),
            ("connect failed", "lost: report"),
            (
                "probed good",
                "sweeping (sweep 1): report, no longer lost, sweep 1",
            ),
            ("probed, no answer", "lost: report"),
            ("probed, refused", "lost: report"),
            ("probed, identity unknown", "lost: report"),
            ("refused", "lost: "),
            ("sweep due", "lost: "),
            ("swept", "lost: "),
            ("sweep failed", "lost: "),
            ("swept, later sweep", "lost: "),
            ("removed", "deregistered: disconnect"),
        ],
    ),
    (
        "deregistered",
        &[
            ("registered", "connecting: no longer lost, connect"),
            ("respecified", "connecting: no longer lost, connect"),
            ("respecified badly", "connecting: no longer lost, connect"),
            ("secret changed", "deregistered: "),
            ("connected", "deregistered: "),
            ("connect failed", "deregistered: "),
            ("probed good", "deregistered: "),
            ("probed, no answer", "deregistered: "),
            ("probed, refused", "deregistered: "),
            ("probed, identity unknown", "deregistered: "),
            ("refused", "deregistered: "),
            ("sweep due", "deregistered: "),
            ("swept", "deregistered: "),
            ("sweep failed", "deregistered: "),
            ("swept, later sweep", "deregistered: "),
            ("removed", "deregistered: "),
        ],
    ),
];

#[test]
fn every_state_meets_every_event_as_the_table_says() {
    let clock = Clock::new();
    let (states, events) = (every_state(&clock), every_event());
    let mut differences = Vec::new();
    for (state, health) in &states {
        let row = TABLE
            .iter()
            .find(|(name, _)| name == state)
            .unwrap_or_else(|| panic!("no row for state {state}"))
            .1;
        assert_eq!(row.len(), events.len(), "one entry per event for {state}");
        for (event, happening) in &events {
            let expected = row
                .iter()
                .find(|(name, _)| name == event)
                .unwrap_or_else(|| panic!("no entry for {state} × {event}"))
                .1;
            let mut next = health.clone();
            let effects = next.step(happening.clone(), clock.at(100));
            let found = format!("{}: {}", state_name(&next), effect_names(&effects));
            if found != expected {
                differences.push(format!("{state} × {event}: {found} (table: {expected})"));
            }
        }
    }
    assert_eq!(TABLE.len(), states.len(), "one row per state");
    for kind in every_state_kind() {
        assert!(
            states
                .iter()
                .any(|(_, health)| state_kind(health.state()) == kind),
            "the table has no row in a state of kind {kind}"
        );
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// What must hold after `event` took `before` to `after` with `effects`.
fn check_step(
    before: &MemberHealth,
    event: &Event,
    after: &MemberHealth,
    effects: &[Effect],
    now: Instant,
) -> Result<(), String> {
    let fails_over = effects.contains(&Effect::FailOver);
    if fails_over {
        match (before.state(), after.state()) {
            (State::Unready { since, .. }, State::Lost)
            | (State::Sweeping { last_ready: since }, State::Lost)
            | (State::Ready { last_ready: since }, State::Lost) => {
                if now.saturating_duration_since(*since) < LOST_AFTER {
                    return Err("failed over before the lost timeout".into());
                }
            }
            (before, State::Deregistered) if *before != State::Lost => {}
            (before, after) => return Err(format!("failed over from {before:?} to {after:?}")),
        }
    }
    if after.is_lost() && !before.is_lost() && !fails_over {
        return Err("lost without failing over".into());
    }
    if *event == Event::Probed(Answer::Good)
        && !matches!(before.state(), State::Connecting | State::Deregistered)
        && !matches!(after.state(), State::Ready { .. } | State::Sweeping { .. })
    {
        return Err(format!("answered well, yet {:?}", after.state()));
    }
    let sweeps = effects
        .iter()
        .filter(|e| matches!(e, Effect::Sweep { .. }))
        .count();
    if sweeps > 0 && !matches!(after.state(), State::Ready { .. } | State::Sweeping { .. }) {
        return Err(format!("swept while {:?}", after.state()));
    }
    if sweeps > 0 && before.sweeping.is_some() {
        return Err("a second sweep while one was in flight".into());
    }
    if after.takes_replicas() && !matches!(after.state(), State::Ready { .. }) {
        return Err(format!("takes replicas while {:?}", after.state()));
    }
    for effect in effects {
        if let Effect::Report(condition) = effect
            && condition.ready != after.takes_replicas()
            && !matches!(event, Event::ConnectFailed(_))
        {
            return Err(format!("reported {condition:?} for {:?}", after.state()));
        }
    }
    Ok(())
}

#[test]
fn no_step_between_table_states_breaks_the_invariants() {
    let clock = Clock::new();
    for (state, health) in every_state(&clock) {
        for (event, happening) in every_event() {
            let mut after = health.clone();
            let effects = after.step(happening.clone(), clock.at(100));
            if let Err(broken) = check_step(&health, &happening, &after, &effects, clock.at(100)) {
                panic!("{state} × {event}: {broken}");
            }
        }
    }
}

/// An event of a generated sequence; a sweep's answer names the latest sweep
/// started or an older one.
#[derive(Debug, Clone)]
enum Step {
    Event(Event),
    SweptLatest(bool),
    SweptOlder,
}

/// One step of a generated sequence, decoded from a random number (ten
/// thousand sequences of these generate far faster than of a tree of
/// strategies): which event, probes the most often, and how many seconds
/// pass before it.
fn decode(code: u32) -> (Step, u64) {
    const WAITS: [u64; 6] = [0, 1, 5, 20, 59, 61];
    let wait = WAITS[(code >> 8) as usize % WAITS.len()];
    let flag = |bit: u32| code & (1 << (16 + bit)) != 0;
    let answer = match (code >> 20) % 10 {
        0..=3 => Answer::Good,
        4..=7 => no_answer(),
        8 => Answer::Refused(refusal()),
        _ => Answer::IdentityUnknown("home unknown".into()),
    };
    let step = match code % 24 {
        0 => Step::Event(Event::Registered {
            new_kubeconfig: flag(0),
            new_generation: flag(1),
            spec_problem: flag(2).then(|| "bad".to_string()),
        }),
        1 => Step::Event(Event::SecretChanged),
        2 | 3 => Step::Event(Event::Connected),
        4 => Step::Event(Event::ConnectFailed("no key".into())),
        5..=14 => Step::Event(Event::Probed(answer)),
        15 => Step::Event(Event::Refused),
        16 | 17 => Step::Event(Event::SweepDue),
        18..=21 => Step::SweptLatest(flag(3)),
        22 => Step::SweptOlder,
        _ => Step::Event(Event::Removed),
    };
    (step, wait)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// Any sequence of events, seconds apart: every step keeps the
    /// invariants; failover comes only after the timeout since the last
    /// good probe or connection; after a loss the member takes replicas
    /// only once a sweep started after it succeeded.
    #[test]
    fn any_event_sequence_keeps_the_invariants(
        codes in prop::collection::vec(any::<u32>(), 1..40)
    ) {
        let clock = Clock::new();
        let mut health = MemberHealth::new(LOST_AFTER);
        let mut now = 0;
        let mut last_good_or_connected: Option<u64> = None;
        let mut latest_sweep = 0;
        // Whether a sweep is owed (from registration, and after each loss),
        // and the sweeps started since it is owed.
        let mut sweep_owed = true;
        let mut sweeps_since_owed: Vec<u64> = Vec::new();
        for (step, wait) in codes.into_iter().map(decode) {
            now += wait;
            let event = match step {
                Step::Event(event) => event,
                Step::SweptLatest(ok) => Event::Swept { sweep: latest_sweep, ok },
                Step::SweptOlder => Event::Swept { sweep: latest_sweep.saturating_sub(1), ok: true },
            };
            let before = health.clone();
            let effects = health.step(event.clone(), clock.at(now));
            check_step(&before, &event, &health, &effects, clock.at(now))
                .map_err(|broken| TestCaseError::fail(format!("{event:?} from {:?}: {broken}", before.state())))?;
            let connected = !matches!(before.state(), State::Connecting | State::Deregistered);
            match &event {
                Event::Connected if before.state() != &State::Deregistered => last_good_or_connected = Some(now),
                Event::Probed(Answer::Good) if connected => last_good_or_connected = Some(now),
                Event::Swept { sweep, ok: true } if sweeps_since_owed.contains(sweep) => sweep_owed = false,
                _ => {}
            }
            if effects.contains(&Effect::FailOver) && health.state() == &State::Lost {
                let since = last_good_or_connected.ok_or_else(|| TestCaseError::fail("lost before any connection"))?;
                prop_assert!(now - since >= LOST_AFTER.as_secs(), "lost {}s after the last good probe", now - since);
            }
            if health.is_lost() {
                sweep_owed = true;
                sweeps_since_owed.clear();
            }
            for effect in &effects {
                if let Effect::Sweep { sweep } = effect {
                    latest_sweep = *sweep;
                    sweeps_since_owed.push(*sweep);
                }
            }
            prop_assert!(!(health.takes_replicas() && sweep_owed), "takes replicas before a sweep since its loss or registration");
        }
    }
}

#[test]
fn the_ready_condition_says_why_in_the_words_of_each_state() {
    let clock = Clock::new();
    let states = every_state(&clock);
    let condition = |name: &str| {
        states
            .iter()
            .find(|(state, _)| *state == name)
            .map(|(_, health)| health.condition())
            .expect("a state of the table")
    };
    let ready = condition("ready fresh");
    assert_eq!(
        (ready.ready, ready.reason, ready.message.as_str()),
        (true, reason::PROBE_SUCCEEDED, "the API server answers")
    );
    let sweeping = condition("sweeping fresh");
    assert_eq!(
        (sweeping.ready, sweeping.reason, sweeping.message.as_str()),
        (
            false,
            reason::PROBE_FAILED,
            "the API server answers; removing leftovers before it takes replicas"
        )
    );
    let lost = condition("lost");
    assert_eq!(
        (lost.ready, lost.reason, lost.message.as_str()),
        (
            false,
            reason::PROBE_FAILED,
            "lost (no good probe for 60s): connection refused"
        )
    );
    let mut refused = driven(&clock, vec![(0, registered()), (0, Event::Connected)]);
    refused.step(Event::Probed(Answer::Refused(refusal())), clock.at(1));
    let shown = refused.condition();
    assert_eq!(shown.reason, member_identity::reason::REACHES_HOME);
    assert_eq!(shown.message, refusal().to_string());
    let mut misspecified = driven(
        &clock,
        vec![
            (0, registered()),
            (0, Event::Connected),
            (0, Event::Probed(Answer::Good)),
            (0, Event::Swept { sweep: 1, ok: true }),
        ],
    );
    misspecified.step(
        Event::Registered {
            new_kubeconfig: false,
            new_generation: true,
            spec_problem: Some("spec.addressTemplate: no {svc}".into()),
        },
        clock.at(1),
    );
    let shown = misspecified.condition();
    assert!(!misspecified.takes_replicas());
    assert_eq!(
        (shown.ready, shown.reason, shown.message.as_str()),
        (
            false,
            reason::PROBE_FAILED,
            "spec.addressTemplate: no {svc}"
        )
    );
}

#[test]
fn a_probe_answer_follows_the_standing_then_the_reply() {
    let accepted = Standing::Accepted {
        identity: "uid-a".into(),
    };
    let home_known: Result<String, String> = Ok("uid-home".into());
    let home_unread: Result<String, String> = Err("timeout".into());
    let reached: Result<String, String> = Ok("uid-a".into());
    let unreached: Result<String, String> = Err("refused".into());
    let refused = Standing::Refused(refusal());
    let cases = [
        (&accepted, &reached, &home_known, Answer::Good),
        (
            &accepted,
            &unreached,
            &home_known,
            Answer::NoAnswer("refused".into()),
        ),
        (
            &refused,
            &unreached,
            &home_known,
            Answer::Refused(refusal()),
        ),
        (
            &Standing::Unknown,
            &reached,
            &home_unread,
            Answer::IdentityUnknown("waiting for the home cluster's identity (timeout)".into()),
        ),
        (
            &Standing::Unknown,
            &unreached,
            &home_unread,
            Answer::NoAnswer("refused".into()),
        ),
    ];
    for (standing, reached, home, expected) in cases {
        assert_eq!(
            Answer::of(standing, reached, home),
            expected,
            "{standing:?} {reached:?}"
        );
    }
}

#[test]
fn a_recorded_placement_waits_for_a_connection_and_never_uses_a_lost_member() {
    let clock = Clock::new();
    let states = every_state(&clock);
    let answer = |name: &str, accepted: bool| {
        states
            .iter()
            .find(|(state, _)| *state == name)
            .and_then(|(_, health)| health.for_recorded_placement("m", accepted))
    };
    assert_eq!(answer("connecting", true), None);
    assert_eq!(answer("unready fresh", false), None);
    assert_eq!(answer("unready fresh", true), Some(Ok(())));
    assert_eq!(answer("ready fresh", true), Some(Ok(())));
    assert_eq!(
        answer("lost", true),
        Some(Err("member cluster m was lost".into()))
    );
    assert_eq!(
        answer("deregistered", true),
        Some(Err("there is no MemberCluster m".into()))
    );
    let mut unusable = driven(&clock, vec![(0, registered())]);
    unusable.step(Event::ConnectFailed("no key".into()), clock.at(1));
    assert_eq!(
        unusable.for_recorded_placement("m", true),
        Some(Err("member cluster m is unusable: no key".into()))
    );
}
