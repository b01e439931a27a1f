//! The placement queue: jobs waiting for a placement, and the capacity held
//! for jobs placed whose pods the clusters do not show yet.
//!
//! Decisions are made one at a time, in order of priority (higher first),
//! then age, then uid, so that every decision sees the holds of the ones
//! before it. Waiting jobs are kept by [`shape`](super::shape): jobs of one
//! shape fit or fail alike, and within one epoch of capacity (until it may
//! have grown, [`Queue::capacity_may_have_grown`]) capacity only shrinks,
//! so once a shape fails, every job of it waits until the next epoch. A
//! pass therefore visits the head of each shape not yet failed, and the
//! jobs it places — never the whole queue: a new job costs one decision,
//! a pod that ends one decision per shape. A waiting job hears why it
//! waits when it joins and when the reason changes.
//!
//! Generic over the reply handle `R`, which the caller uses to answer the
//! job (an actor's address in the controller, anything in tests).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use super::ledger::charge;
use super::{Assignment, ClusterState, Demand, Ledger, PodNames, Policy, Unplaceable, shape};

/// A job asking to be placed.
#[derive(Debug, Clone)]
pub struct Request<R> {
    pub job_uid: String,
    pub priority: i32,
    /// RFC 3339 creation time: older jobs go first at equal priority.
    pub created: String,
    pub demands: Vec<Demand>,
    /// How its pods are named: their holds go as the clusters show them.
    pub pods: PodNames,
    pub policy: Policy,
    pub reply: R,
}

/// What a pass tells the jobs.
#[derive(Debug)]
pub enum Answer<R> {
    /// Placed: the request left the queue and its capacity is held until
    /// [`Queue::release`].
    Placed {
        request: Box<Request<R>>,
        assignment: Assignment,
    },
    /// Still waiting, for a reason the job has not heard yet.
    Waits { reply: R, reason: Unplaceable },
}

/// Queue order: higher priority, then older, then uid.
type Key = (Reverse<i32>, String, String);

#[derive(Debug)]
struct Waiting<R> {
    request: Request<R>,
    shape: String,
    last_reason: Option<Unplaceable>,
}

/// The waiting jobs of one shape.
#[derive(Debug, Default)]
struct Shape {
    order: BTreeSet<Key>,
    /// The capacity epoch in which this shape last failed.
    failed_in: Option<u64>,
    /// Why it last failed; every member but `unheard` was told.
    reason: Option<Unplaceable>,
    /// Members that joined since the reason was last told.
    unheard: Vec<String>,
}

/// Jobs waiting for a placement, and the holds of jobs placed.
#[derive(Debug)]
pub struct Queue<R> {
    waiting: HashMap<String, Waiting<R>>,
    shapes: HashMap<String, Shape>,
    ledger: Ledger,
    /// Counts the moments capacity may have grown.
    capacity_epoch: u64,
}

impl<R> Default for Queue<R> {
    fn default() -> Self {
        Queue {
            waiting: HashMap::new(),
            shapes: HashMap::new(),
            ledger: Ledger::default(),
            capacity_epoch: 0,
        }
    }
}

fn key_of<R>(request: &Request<R>) -> Key {
    (
        Reverse(request.priority),
        request.created.clone(),
        request.job_uid.clone(),
    )
}

impl<R: Clone> Queue<R> {
    /// Queues a job (replacing its earlier request, if any); the next
    /// [`Queue::try_waiting`] tries it, or tells it why its shape waits.
    pub fn request(&mut self, request: Request<R>) {
        self.withdraw(&request.job_uid);
        let shape_name = shape(&request.demands, &request.policy);
        let group = self.shapes.entry(shape_name.clone()).or_default();
        group.order.insert(key_of(&request));
        group.unheard.push(request.job_uid.clone());
        self.waiting.insert(
            request.job_uid.clone(),
            Waiting {
                request,
                shape: shape_name,
                last_reason: None,
            },
        );
    }

    /// The job's pods are visible, or it ended or paused: its hold and its
    /// request go, and the capacity it held may serve others.
    pub fn release(&mut self, job_uid: &str) {
        self.ledger.release(job_uid);
        self.withdraw(job_uid);
        self.capacity_may_have_grown();
    }

    /// Drops the holds of the pods `shown(cluster, pod key)` says their
    /// clusters now charge themselves ([`Ledger::forget_shown`]); call it
    /// before taking the snapshot a pass decides on.
    pub fn forget_shown_pods(&mut self, shown: impl FnMut(&str, &str) -> bool) {
        self.ledger.forget_shown(shown);
    }

    /// A pod ended, a node or cluster came, a hold went: every shape is
    /// worth another try.
    pub fn capacity_may_have_grown(&mut self) {
        self.capacity_epoch += 1;
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whether a pass would decide or tell anything: a shape not failed in
    /// this epoch, or a job that has not heard its shape's reason.
    pub fn has_work(&self) -> bool {
        self.shapes
            .values()
            .any(|s| s.failed_in != Some(self.capacity_epoch) || !s.unheard.is_empty())
    }

    /// Tries the head of every shape not failed in this epoch, in queue
    /// order, with `decide`, given `clusters` with the holds taken out; a
    /// shape that places its head tries its next job. A placed job's
    /// capacity is held (and taken out) at once, so the next decision sees
    /// it. Then the jobs of failed shapes that have not heard why, hear it.
    pub fn try_waiting(
        &mut self,
        clusters: &[ClusterState],
        mut decide: impl FnMut(&[Demand], &Policy, &[ClusterState]) -> Result<Assignment, Unplaceable>,
    ) -> Vec<Answer<R>> {
        let mut answers = Vec::new();
        let epoch = self.capacity_epoch;
        // Heads in queue order: the smallest key first.
        let mut heads: BinaryHeap<Reverse<(Key, String)>> = self
            .shapes
            .iter()
            .filter(|(_, s)| s.failed_in != Some(epoch))
            .filter_map(|(name, s)| Some(Reverse((s.order.first()?.clone(), name.clone()))))
            .collect();
        let mut available = if heads.is_empty() {
            Vec::new()
        } else {
            self.ledger.apply(clusters)
        };
        while let Some(Reverse((key, shape_name))) = heads.pop() {
            let Some(waiting) = self.waiting.get(&key.2) else {
                continue;
            };
            match decide(
                &waiting.request.demands,
                &waiting.request.policy,
                &available,
            ) {
                Ok(assignment) => {
                    let Some(waiting) = self.withdraw(&key.2) else {
                        continue;
                    };
                    let request = waiting.request;
                    self.ledger.reserve(
                        &request.job_uid,
                        &request.pods,
                        &request.demands,
                        &assignment,
                    );
                    for demand in &request.demands {
                        if let Some(cluster) = assignment.get(&demand.key) {
                            charge(&mut available, cluster, &demand.requests);
                        }
                    }
                    answers.push(Answer::Placed {
                        request: Box::new(request),
                        assignment,
                    });
                    if let Some(next) = self.shapes.get(&shape_name).and_then(|s| s.order.first()) {
                        heads.push(Reverse((next.clone(), shape_name)));
                    }
                }
                Err(reason) => {
                    if let Some(group) = self.shapes.get_mut(&shape_name) {
                        group.failed_in = Some(epoch);
                        if group.reason.as_ref() != Some(&reason) {
                            // A new reason: every member hears it.
                            group.reason = Some(reason);
                            group.unheard = group.order.iter().map(|k| k.2.clone()).collect();
                        }
                    }
                }
            }
        }
        self.tell_unheard(&mut answers);
        answers
    }

    /// Tells the members of failed shapes that have not heard the reason.
    fn tell_unheard(&mut self, answers: &mut Vec<Answer<R>>) {
        for group in self.shapes.values_mut() {
            // After a pass every shape left has failed in this epoch.
            let Some(reason) = &group.reason else {
                continue;
            };
            for uid in group.unheard.drain(..) {
                let Some(waiting) = self.waiting.get_mut(&uid) else {
                    continue;
                };
                if waiting.last_reason.as_ref() != Some(reason) {
                    waiting.last_reason = Some(reason.clone());
                    answers.push(Answer::Waits {
                        reply: waiting.request.reply.clone(),
                        reason: reason.clone(),
                    });
                }
            }
        }
    }

    fn withdraw(&mut self, job_uid: &str) -> Option<Waiting<R>> {
        let waiting = self.waiting.remove(job_uid)?;
        if let Some(group) = self.shapes.get_mut(&waiting.shape) {
            group.order.remove(&key_of(&waiting.request));
            if group.order.is_empty() {
                self.shapes.remove(&waiting.shape);
            }
        }
        Some(waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ReplicaKey, ReplicaType};
    use crate::placement::{ClusterState, GPU, Resources, place};

    fn gpus(n: i64) -> Resources {
        [(GPU.to_string(), n)].into_iter().collect()
    }

    fn request(
        uid: &str,
        priority: i32,
        created: &str,
        workers: i64,
        each: i64,
    ) -> Request<String> {
        Request {
            job_uid: uid.into(),
            priority,
            created: created.into(),
            demands: (0..workers)
                .map(|index| Demand {
                    key: ReplicaKey {
                        replica_type: ReplicaType::Worker,
                        index: index as i32,
                    },
                    requests: gpus(each),
                })
                .collect(),
            pods: PodNames {
                namespace: "team".into(),
                job: uid.into(),
            },
            policy: Policy::default(),
            reply: uid.into(),
        }
    }

    /// One member of `free` GPUs on one node.
    fn cluster(free: i64) -> Vec<ClusterState> {
        vec![ClusterState {
            name: "a".into(),
            member: true,
            ready: true,
            nodes: vec![gpus(free)],
            ..Default::default()
        }]
    }

    /// Decides against `clusters`, counting decisions.
    fn pass(
        queue: &mut Queue<String>,
        clusters: &[ClusterState],
        decisions: &mut usize,
    ) -> Vec<String> {
        let answers = queue.try_waiting(clusters, |demands, policy, available| {
            *decisions += 1;
            place(demands, available, policy)
        });
        answers
            .into_iter()
            .map(|answer| match answer {
                Answer::Placed { request, .. } => format!("{} placed", request.job_uid),
                Answer::Waits { reply, .. } => format!("{reply} waits"),
            })
            .collect()
    }

    #[test]
    fn higher_priority_then_older_first_and_holds_are_seen_by_the_next() {
        let mut queue = Queue::default();
        queue.request(request("young", 0, "2026-01-02T00:00:00Z", 1, 4));
        queue.request(request("old", 0, "2026-01-01T00:00:00Z", 1, 4));
        queue.request(request("urgent", 5, "2026-01-03T00:00:00Z", 1, 4));
        let mut decisions = 0;
        // 8 GPUs: two jobs of 4 fit, the third waits behind their holds.
        let told = pass(&mut queue, &cluster(8), &mut decisions);
        assert_eq!(told, ["urgent placed", "old placed", "young waits"]);
        assert_eq!(queue.len(), 1);
    }

    /// (what happens before the pass, answers of the pass, decisions made)
    #[test]
    fn a_job_is_tried_again_only_when_capacity_may_have_grown() {
        type Step = fn(&mut Queue<String>);
        let cases: [(&str, Step, &[&str], usize); 4] = [
            ("nothing changed", |_| {}, &[], 0),
            (
                "capacity may have grown, still too little",
                |q| q.capacity_may_have_grown(),
                &[],
                1,
            ),
            ("a hold released", |q| q.release("someone-else"), &[], 1),
            (
                "the job asks again",
                |q| q.request(request("big", 0, "t", 1, 16)),
                &["big waits"],
                1,
            ),
        ];
        for (what, step, told, decided) in cases {
            let mut queue = Queue::default();
            queue.request(request("big", 0, "t", 1, 16));
            let mut decisions = 0;
            assert_eq!(pass(&mut queue, &cluster(8), &mut decisions), ["big waits"]);
            step(&mut queue);
            let mut decisions = 0;
            assert_eq!(
                pass(&mut queue, &cluster(8), &mut decisions),
                told,
                "{what}"
            );
            assert_eq!(decisions, decided, "{what}");
        }
    }

    #[test]
    fn jobs_of_one_shape_are_decided_once_per_pass() {
        let mut queue = Queue::default();
        for uid in ["j1", "j2", "j3"] {
            queue.request(request(uid, 0, uid, 2, 8));
        }
        queue.request(request("small", 0, "j4", 1, 1));
        let mut decisions = 0;
        let mut told = pass(&mut queue, &cluster(4), &mut decisions);
        told.sort();
        assert_eq!(told, ["j1 waits", "j2 waits", "j3 waits", "small placed"]);
        assert_eq!(
            decisions, 2,
            "one decision for the three alike, one for small"
        );
        // Capacity grew: one decision for the shape, not one per job, and
        // no job hears the same reason again.
        queue.capacity_may_have_grown();
        let mut decisions = 0;
        assert!(pass(&mut queue, &cluster(4), &mut decisions).is_empty());
        assert_eq!(decisions, 1);
    }

    #[test]
    fn a_job_joining_a_shape_that_failed_hears_why_without_a_decision() {
        let mut queue = Queue::default();
        queue.request(request("first", 0, "1", 1, 16));
        let mut decisions = 0;
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["first waits"]
        );
        assert!(!queue.has_work(), "nothing to decide or tell");
        queue.request(request("second", 0, "2", 1, 16));
        assert!(queue.has_work());
        let mut decisions = 0;
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["second waits"]
        );
        assert_eq!(decisions, 0, "its shape failed in this epoch");
    }

    #[test]
    fn released_jobs_leave_the_queue_and_free_their_hold() {
        let mut queue = Queue::default();
        queue.request(request("first", 0, "1", 1, 8));
        queue.request(request("second", 0, "2", 1, 8));
        let mut decisions = 0;
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["first placed", "second waits"]
        );
        // A paused job withdraws; its request goes, it is never placed.
        queue.release("second");
        assert!(queue.is_empty());
        queue.request(request("third", 0, "3", 1, 8));
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["third waits"],
            "first's hold still counts"
        );
        queue.release("first");
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["third placed"]
        );
    }

    #[test]
    fn a_new_request_of_a_job_replaces_its_old_one() {
        let mut queue = Queue::default();
        queue.request(request("job", 0, "1", 1, 16));
        queue.request(request("job", 3, "1", 1, 2));
        assert_eq!(queue.len(), 1);
        let mut decisions = 0;
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["job placed"]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn a_waiting_job_hears_again_only_when_the_reason_changes() {
        let mut queue = Queue::default();
        queue.request(request("job", 0, "1", 1, 16));
        let mut decisions = 0;
        assert_eq!(pass(&mut queue, &cluster(8), &mut decisions), ["job waits"]);
        queue.capacity_may_have_grown();
        assert!(pass(&mut queue, &cluster(8), &mut decisions).is_empty());
        queue.capacity_may_have_grown();
        let mut down = cluster(8);
        down[0].ready = false;
        assert_eq!(pass(&mut queue, &down, &mut decisions), ["job waits"]);
        assert_eq!(decisions, 3);
    }

    /// A placed job's pods count once, whether or not its cluster shows
    /// them yet: held until it does, then charged by the cluster alone. With
    /// 8 GPUs and 4 taken by "first", a job of 4 fits and one more GPU never
    /// does, however many of first's pods the cluster shows.
    #[test]
    fn a_hold_goes_pod_by_pod_as_the_cluster_shows_the_pods() {
        for shown in 0..=4 {
            let mut queue = Queue::default();
            queue.request(request("first", 0, "1", 4, 1));
            let mut decisions = 0;
            assert_eq!(
                pass(&mut queue, &cluster(8), &mut decisions),
                ["first placed"]
            );
            queue.request(request("second", 0, "2", 4, 1));
            queue.request(request("third", 0, "3", 1, 1));
            let names: Vec<String> = (0..shown)
                .map(|i| format!("team/first-worker-{i}"))
                .collect();
            queue.forget_shown_pods(|cluster, pod| {
                cluster == "a" && names.iter().any(|name| name == pod)
            });
            assert_eq!(
                pass(&mut queue, &cluster(8 - shown), &mut decisions),
                ["second placed", "third waits"],
                "{shown} of first's pods shown"
            );
        }
    }

    #[test]
    fn a_pod_shown_on_another_cluster_keeps_its_hold() {
        let mut queue = Queue::default();
        queue.request(request("first", 0, "1", 1, 8));
        let mut decisions = 0;
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["first placed"]
        );
        queue.forget_shown_pods(|cluster, pod| cluster == "b" && pod == "team/first-worker-0");
        queue.request(request("second", 0, "2", 1, 8));
        assert_eq!(
            pass(&mut queue, &cluster(8), &mut decisions),
            ["second waits"]
        );
    }
}
