//! The health of one member cluster, as a pure state machine: whether it
//! takes replicas, when it is lost (and the jobs placed there fail over),
//! and when what no job accounts for is swept from it. The
//! MemberSupervisor feeds it what its connection, probes and sweeps found,
//! and carries out the [`Effect`]s; the decision of who a member is stays
//! in `member_identity`, and reaches this machine as a probe's [`Answer`].
//!
//! A member is lost after `clusterLostTimeoutMs` without a good probe (one
//! the cluster answered as the cluster it stands for), counted from its
//! last good probe or its connection, whichever came later. It takes new
//! replicas only once swept: when first connected, and again when it
//! answers after being lost. A sweep started before a loss or through an
//! older connection says nothing of the cluster now, and is not counted.

use std::time::{Duration, Instant};

use crate::api::reason;
use crate::member_identity::{self, Refusal, Standing};

/// Where a member stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Registered; no connection built yet, or none could be.
    Connecting,
    /// Connected, without a good probe since `since` (the last good probe,
    /// or the connection). `swept`: leftovers were removed since it was
    /// connected or came back.
    Unready { since: Instant, swept: bool },
    /// Answers as the cluster it stands for; leftovers are removed before
    /// it takes replicas.
    Sweeping { last_ready: Instant },
    /// Answers and was swept: takes replicas.
    Ready { last_ready: Instant },
    /// No good probe for the lost timeout: its jobs fail over.
    Lost,
    /// Its MemberCluster was deleted: lost to the jobs placed there.
    Deregistered,
}

/// What a probe found, with the member's standing (`member_identity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It answered, and is the cluster it stands for.
    Good,
    /// It did not answer: why.
    NoAnswer(String),
    /// It answered, but is refused.
    Refused(Refusal),
    /// It answered, but who it is cannot be decided yet: why.
    IdentityUnknown(String),
}

impl Answer {
    /// The answer of a probe that reached `reached` (or why nothing), for a
    /// member of `standing`, while home's identity is `home_identity`.
    pub fn of(
        standing: &Standing,
        reached: &Result<String, String>,
        home_identity: &Result<String, String>,
    ) -> Answer {
        match (standing, reached) {
            (Standing::Refused(refusal), _) => Answer::Refused(refusal.clone()),
            (_, Err(why)) => Answer::NoAnswer(why.clone()),
            (Standing::Unknown, Ok(_)) => Answer::IdentityUnknown(match home_identity {
                Err(why) => format!("waiting for the home cluster's identity ({why})"),
                Ok(_) => "waiting for the cluster's identity".to_string(),
            }),
            (Standing::Accepted { .. }, Ok(_)) => Answer::Good,
        }
    }
}

/// What happened to the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Its MemberCluster was created or changed: whether its kubeconfig
    /// reference or its generation changed, and what in its spec keeps it
    /// from taking replicas.
    Registered {
        new_kubeconfig: bool,
        new_generation: bool,
        spec_problem: Option<String>,
    },
    /// Its kubeconfig Secret changed.
    SecretChanged,
    /// A client was built from a new Secret: a new connection.
    Connected,
    /// No client could be built: why.
    ConnectFailed(String),
    /// A probe of the current connection answered.
    Probed(Answer),
    /// Its standing turned to refused between probes.
    Refused,
    /// The periodic sweep is due.
    SweepDue,
    /// The sweep `sweep` ended, or failed.
    Swept { sweep: u64, ok: bool },
    /// Its MemberCluster was deleted.
    Removed,
}

/// What the supervisor does for the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Build a client from its kubeconfig Secret.
    Connect,
    /// Drop its connection and informers.
    Disconnect,
    /// Probe it now.
    Probe,
    /// Remove the leftovers no job accounts for; answer with `Swept { sweep }`.
    Sweep { sweep: u64 },
    /// Write its Ready condition (and heartbeat).
    Report(Condition),
    /// It is lost: the jobs placed there fail over.
    FailOver,
    /// It is no longer lost (it answered, or was registered again).
    NoLongerLost,
}

/// A member's Ready condition: true when it takes replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

/// One member's health (see the module's comment).
#[derive(Debug, Clone)]
pub struct MemberHealth {
    state: State,
    lost_after: Duration,
    /// The last probe's answer, for the Ready condition's words.
    answer: Answer,
    spec_problem: Option<String>,
    /// Why its kubeconfig cannot be used, until a connection is built.
    unusable: Option<String>,
    /// The sweep in flight that counts.
    sweeping: Option<u64>,
    sweeps_started: u64,
}

impl MemberHealth {
    /// A member just registered, lost after `lost_after` without a good probe.
    pub fn new(lost_after: Duration) -> MemberHealth {
        MemberHealth {
            state: State::Connecting,
            lost_after,
            answer: Answer::NoAnswer("not probed yet".to_string()),
            spec_problem: None,
            unusable: None,
            sweeping: None,
            sweeps_started: 0,
        }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// Whether new replicas may go there.
    pub fn takes_replicas(&self) -> bool {
        matches!(self.state, State::Ready { .. }) && self.spec_problem.is_none()
    }

    /// Whether the jobs placed there fail over.
    pub fn is_lost(&self) -> bool {
        matches!(self.state, State::Lost | State::Deregistered)
    }

    /// Whether a placement recorded earlier may use it now (`accepted`: its
    /// standing): Ok, Err why not, or None while that is not known yet.
    pub fn for_recorded_placement(&self, name: &str, accepted: bool) -> Option<Result<(), String>> {
        if self.state == State::Deregistered {
            return Some(Err(format!("there is no MemberCluster {name}")));
        }
        if let Some(why) = &self.unusable {
            return Some(Err(format!("member cluster {name} is unusable: {why}")));
        }
        match self.state {
            State::Connecting => None,
            State::Lost => Some(Err(format!("member cluster {name} was lost"))),
            // Not (yet) known to be the cluster it stands for: as for an
            // unreachable one, wait until it is, or is lost.
            _ if !accepted => None,
            _ => Some(Ok(())),
        }
    }

    /// The Ready condition its status shows now.
    pub fn condition(&self) -> Condition {
        let (reason, mut message) = match &self.answer {
            Answer::Good => (
                reason::PROBE_SUCCEEDED,
                "the API server answers".to_string(),
            ),
            Answer::NoAnswer(why) => (reason::PROBE_FAILED, why.clone()),
            Answer::Refused(refusal) => (refusal.reason(), refusal.to_string()),
            Answer::IdentityUnknown(why) => {
                (member_identity::reason::IDENTITY_UNKNOWN, why.clone())
            }
        };
        match self.state {
            State::Lost => {
                message = format!(
                    "lost (no good probe for {}s): {message}",
                    self.lost_after.as_secs()
                );
            }
            State::Sweeping { .. } => {
                message.push_str("; removing leftovers before it takes replicas");
            }
            _ => {}
        }
        let ready = self.takes_replicas();
        if let Some(problem) = &self.spec_problem {
            message = problem.clone();
        }
        let reason = match (ready, reason) {
            (true, _) => reason::PROBE_SUCCEEDED,
            (false, reason::PROBE_SUCCEEDED) => reason::PROBE_FAILED,
            (false, reason) => reason,
        };
        Condition {
            ready,
            reason,
            message,
        }
    }

    /// Takes `event`, which happened at `now`; returns what to do.
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Effect> {
        if self.state == State::Deregistered && !matches!(event, Event::Registered { .. }) {
            return Vec::new();
        }
        match event {
            Event::Registered {
                new_kubeconfig,
                new_generation,
                spec_problem,
            } => self.registered(new_kubeconfig, new_generation, spec_problem),
            Event::SecretChanged => vec![Effect::Connect],
            Event::Connected => self.connected(now),
            Event::ConnectFailed(why) => {
                let message = why.clone();
                self.unusable = Some(why);
                vec![Effect::Report(Condition {
                    ready: false,
                    reason: reason::PROBE_FAILED,
                    message,
                })]
            }
            Event::Probed(answer) => self.probed(answer, now),
            Event::Refused => {
                self.state = match self.state {
                    State::Ready { last_ready } => State::Unready {
                        since: last_ready,
                        swept: true,
                    },
                    State::Sweeping { last_ready } => State::Unready {
                        since: last_ready,
                        swept: false,
                    },
                    ref other => other.clone(),
                };
                Vec::new()
            }
            Event::SweepDue => match self.state {
                State::Ready { .. } => self.start_sweep(),
                _ => Vec::new(),
            },
            Event::Swept { sweep, ok } => self.swept(sweep, ok),
            Event::Removed => {
                let already_lost = self.state == State::Lost;
                self.state = State::Deregistered;
                self.sweeping = None;
                if already_lost {
                    vec![Effect::Disconnect]
                } else {
                    vec![Effect::Disconnect, Effect::FailOver]
                }
            }
        }
    }

    fn registered(
        &mut self,
        new_kubeconfig: bool,
        new_generation: bool,
        spec_problem: Option<String>,
    ) -> Vec<Effect> {
        self.spec_problem = spec_problem;
        match self.state {
            State::Deregistered => {
                *self = MemberHealth {
                    spec_problem: self.spec_problem.take(),
                    ..MemberHealth::new(self.lost_after)
                };
                vec![Effect::NoLongerLost, Effect::Connect]
            }
            _ if new_kubeconfig => vec![Effect::Connect],
            // A new spec shows in the status at once; without a connection
            // there is nothing to probe yet.
            State::Connecting => Vec::new(),
            _ if new_generation => vec![Effect::Probe],
            _ => Vec::new(),
        }
    }

    /// A new connection: the lost timeout counts from now; whether it was
    /// lost or swept stays (the credentials changed, not the cluster).
    fn connected(&mut self, now: Instant) -> Vec<Effect> {
        self.unusable = None;
        // A sweep through the old connection says nothing of this one.
        self.sweeping = None;
        let swept = match self.state {
            State::Connecting | State::Sweeping { .. } => false,
            State::Unready { swept, .. } => swept,
            State::Ready { .. } => true,
            State::Lost | State::Deregistered => return vec![Effect::Probe],
        };
        self.state = State::Unready { since: now, swept };
        vec![Effect::Probe]
    }

    fn probed(&mut self, answer: Answer, now: Instant) -> Vec<Effect> {
        let good = answer == Answer::Good;
        let (since, swept) = match self.state {
            // No connection: a probe of none is no news.
            State::Connecting | State::Deregistered => return Vec::new(),
            State::Unready { since, swept } => (since, swept),
            State::Sweeping { last_ready } => (last_ready, false),
            State::Ready { last_ready } => (last_ready, true),
            State::Lost => (now, false),
        };
        self.answer = answer;
        let was_lost = self.state == State::Lost;
        let mut effects = Vec::new();
        self.state = match (good, was_lost) {
            (true, _) if swept => State::Ready { last_ready: now },
            (true, _) => State::Sweeping { last_ready: now },
            (false, true) => State::Lost,
            (false, false) if now.saturating_duration_since(since) >= self.lost_after => {
                // A sweep started before the loss does not count after it.
                self.sweeping = None;
                effects.push(Effect::FailOver);
                State::Lost
            }
            (false, false) => State::Unready { since, swept },
        };
        effects.insert(0, Effect::Report(self.condition()));
        if was_lost && good {
            effects.push(Effect::NoLongerLost);
        }
        if matches!(self.state, State::Sweeping { .. }) && self.sweeping.is_none() {
            effects.extend(self.start_sweep());
        }
        effects
    }

    fn start_sweep(&mut self) -> Vec<Effect> {
        if self.sweeping.is_some() {
            return Vec::new();
        }
        self.sweeps_started += 1;
        self.sweeping = Some(self.sweeps_started);
        vec![Effect::Sweep {
            sweep: self.sweeps_started,
        }]
    }

    /// A failed sweep is tried again at the next good probe.
    fn swept(&mut self, sweep: u64, ok: bool) -> Vec<Effect> {
        if self.sweeping != Some(sweep) {
            return Vec::new();
        }
        self.sweeping = None;
        if !ok {
            return Vec::new();
        }
        self.state = match self.state {
            State::Sweeping { last_ready } => State::Ready { last_ready },
            State::Unready { since, .. } => State::Unready { since, swept: true },
            ref other => other.clone(),
        };
        vec![Effect::Report(self.condition())]
    }
}

#[cfg(test)]
mod tests;
