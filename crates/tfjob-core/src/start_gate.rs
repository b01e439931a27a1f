//! How many jobs start at once. A job that starts (its placement, its
//! clusters' preparation, its pods' and services' creates) holds a share
//! of the gate, its replica count, until it has started: every replica has
//! its pod, or it waits (for capacity, a resume), or it ended. Past the
//! budget, jobs queue in the order they came, and start as earlier ones
//! free their share.
//!
//! Why: a controller that finds thousands of jobs at once (a mass
//! submission, or a controller that was down) would otherwise start every
//! one at the same moment: every job's requests queue at the API servers
//! together, each job's pods trickle in over the whole backlog's time (and
//! so do its status writes), and memory holds the whole backlog in flight.
//! Gated, jobs start in order and each runs as soon as its own pods are
//! made; the budget keeps enough jobs starting to fill every cluster's
//! create slots.
//!
//! A job larger than the budget starts alone once nothing else is starting,
//! so no job waits forever. Order is first come, first served: a small job
//! does not overtake a large one queued before it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// Replicas starting at once, over every job that starts.
pub const START_BUDGET: usize = 1024;

/// The jobs starting and queued, by key (a job's uid).
#[derive(Debug)]
pub struct StartGate<K> {
    budget: usize,
    /// Jobs starting, with the share each holds.
    starting: HashMap<K, usize>,
    held: usize,
    /// Jobs waiting to start, first come first; with the share each will hold.
    queue: VecDeque<(K, usize)>,
    queued: HashSet<K>,
}

impl<K: Clone + Eq + Hash> StartGate<K> {
    pub fn new(budget: usize) -> StartGate<K> {
        StartGate {
            budget: budget.max(1),
            starting: HashMap::new(),
            held: 0,
            queue: VecDeque::new(),
            queued: HashSet::new(),
        }
    }

    /// A job of `replicas` asks to start: true when it may now (it then
    /// holds its share until `started`), false when it is queued (or was
    /// already starting or queued).
    pub fn offer(&mut self, key: K, replicas: usize) -> bool {
        if self.starting.contains_key(&key) || self.queued.contains(&key) {
            return false;
        }
        let share = replicas.clamp(1, self.budget);
        if self.queue.is_empty() && self.fits(share) {
            self.hold(key, share);
            return true;
        }
        self.queued.insert(key.clone());
        self.queue.push_back((key, share));
        false
    }

    /// The job started (or went, or stopped starting for any reason): it
    /// frees its share, or leaves the queue. Returns the queued jobs that
    /// may start now, in order; each holds its share from now on.
    pub fn started(&mut self, key: &K) -> Vec<K> {
        if let Some(share) = self.starting.remove(key) {
            self.held -= share;
        } else if self.queued.remove(key) {
            self.queue.retain(|(queued, _)| queued != key);
        }
        let mut now = Vec::new();
        while let Some((_, share)) = self.queue.front() {
            if !self.fits(*share) {
                break;
            }
            let Some((key, share)) = self.queue.pop_front() else {
                break;
            };
            self.queued.remove(&key);
            self.hold(key.clone(), share);
            now.push(key);
        }
        now
    }

    /// Whether the job waits in the queue.
    pub fn is_queued(&self, key: &K) -> bool {
        self.queued.contains(key)
    }

    /// Jobs starting now.
    pub fn starting(&self) -> usize {
        self.starting.len()
    }

    /// Jobs waiting to start.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    fn fits(&self, share: usize) -> bool {
        self.starting.is_empty() || self.held + share <= self.budget
    }

    fn hold(&mut self, key: K, share: usize) {
        self.held += share;
        self.starting.insert(key, share);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn jobs_start_while_their_replicas_fit_the_budget_then_queue_in_order() {
        let mut gate = StartGate::new(20);
        assert!(gate.offer("a", 8));
        assert!(gate.offer("b", 8));
        assert!(!gate.offer("c", 8), "8 + 8 + 8 > 20");
        assert!(!gate.offer("d", 1), "no overtaking: c came first");
        assert_eq!((gate.starting(), gate.waiting()), (2, 2));
        assert_eq!(gate.started(&"a"), vec!["c", "d"]);
        assert_eq!(gate.started(&"b"), Vec::<&str>::new());
        assert_eq!((gate.starting(), gate.waiting()), (2, 0));
    }

    #[test]
    fn a_job_larger_than_the_budget_starts_alone_and_is_not_starved() {
        let mut gate = StartGate::new(10);
        assert!(gate.offer("small", 2));
        assert!(!gate.offer("huge", 2001));
        assert!(!gate.offer("after", 2));
        assert_eq!(gate.started(&"small"), vec!["huge"]);
        assert_eq!(gate.started(&"huge"), vec!["after"]);
        assert!(StartGate::new(10).offer("huge", 2001), "alone, at once");
    }

    #[test]
    fn a_queued_job_that_goes_leaves_the_queue_and_offers_are_idempotent() {
        let mut gate = StartGate::new(8);
        assert!(gate.offer("a", 8));
        assert!(!gate.offer("a", 8), "already starting");
        assert!(!gate.offer("b", 8));
        assert!(!gate.offer("b", 8));
        assert!(gate.is_queued(&"b"));
        assert_eq!(
            gate.started(&"b"),
            Vec::<&str>::new(),
            "b went while queued"
        );
        assert!(!gate.is_queued(&"b"));
        assert_eq!(gate.started(&"a"), Vec::<&str>::new());
        assert_eq!(gate.started(&"unknown"), Vec::<&str>::new());
        assert!(gate.offer("c", 8));
    }

    proptest! {
        /// Whatever the offers and starts: the starting jobs' shares stay
        /// within the budget unless one job starts alone, nothing waits
        /// while nothing starts, and every job offered starts exactly once.
        #[test]
        fn the_budget_holds_and_every_job_starts_once(
            budget in 1usize..40,
            sizes in proptest::collection::vec(1usize..60, 1..40),
            picks in proptest::collection::vec(any::<usize>(), 0..80),
        ) {
            let mut gate = StartGate::new(budget);
            let mut started_ever: Vec<usize> = Vec::new();
            let mut running: Vec<usize> = Vec::new();
            for (key, size) in sizes.iter().enumerate() {
                if gate.offer(key, *size) {
                    started_ever.push(key);
                    running.push(key);
                }
                prop_assert!(gate.held <= budget || gate.starting() == 1);
            }
            // The picks, then the first starting job until none is left.
            for pick in picks.into_iter().chain(std::iter::repeat_n(0, sizes.len())) {
                if running.is_empty() {
                    break;
                }
                let key = running.remove(pick % running.len());
                for now in gate.started(&key) {
                    started_ever.push(now);
                    running.push(now);
                }
                prop_assert!(gate.held <= budget || gate.starting() == 1);
                prop_assert!(gate.waiting() == 0 || gate.starting() > 0);
            }
            started_ever.sort_unstable();
            prop_assert_eq!(started_ever, (0..sizes.len()).collect::<Vec<_>>());
        }
    }
}
