//! The replicas' views, and the status's `tasks` and `aggregate` kept with
//! them: each change of a view or a restart count updates its replica's
//! entry and the counts, so that the status is ready to write as it is.

use super::*;

impl JobState {
    /// Takes `view` as its replica's.
    pub(super) fn set_view(&mut self, view: ReplicaView) {
        let key = view.key;
        // Its place among the replicas of its type, in index order.
        let place = self
            .views
            .range(ReplicaKey::new(key.replica_type, i32::MIN)..key)
            .count();
        let shown = view.replica_status();
        *status::phase_count(&mut self.status.aggregate, view.phase) += 1;
        let replaced = self.views.insert(key, view);
        if let Some(old) = &replaced {
            *status::phase_count(&mut self.status.aggregate, old.phase) -= 1;
        }
        let Some(task) = self.task_mut(key.replica_type) else {
            // A type the job does not run: counted, not listed.
            return;
        };
        match task.replica_status.get_mut(place) {
            Some(entry) if replaced.is_some() => *entry = shown,
            _ => task
                .replica_status
                .insert(place.min(task.replica_status.len()), shown),
        }
    }

    /// Forgets every view: the replicas they showed are being replaced.
    pub(super) fn clear_views(&mut self) {
        self.views.clear();
        self.status.aggregate = Aggregate::default();
        for task in &mut self.status.tasks {
            task.replica_status.clear();
        }
    }

    /// Counts one restart of a replica of `replica_type`.
    pub(super) fn count_restart(&mut self, replica_type: ReplicaType) {
        let count = self.restart_counts.entry(replica_type).or_default();
        *count += 1;
        let count = *count;
        if let Some(task) = self.task_mut(replica_type) {
            task.restart_count = count;
        }
    }

    /// Runs `replicas` from now on: `tasks` lists their types, afresh
    /// (at admission, or an edit before the job started: rare).
    pub(super) fn accept_replicas(&mut self, replicas: Replicas) {
        self.replicas = replicas;
        self.status.tasks = status::tasks(
            self.views.values(),
            &self.restart_counts,
            &self.replicas.types(),
        );
    }

    fn task_mut(&mut self, replica_type: ReplicaType) -> Option<&mut TaskStatus> {
        self.status
            .tasks
            .iter_mut()
            .find(|t| t.replica_type == replica_type.as_str())
    }
}

impl Step<'_> {
    /// A Creating view for each replica of `assignment` that has none.
    pub(super) fn creating_views(&mut self, assignment: &Assignment) {
        for (key, cluster) in assignment {
            if !self.job.views.contains_key(key) {
                let pod = key.object_name(&self.job.name);
                let view = ReplicaView::creating(*key, pod, Some(cluster.clone()));
                self.job.set_view(view);
            }
        }
    }
}
