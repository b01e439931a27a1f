//! A job's lifecycle, decided without I/O: what follows a replica's exit
//! (`restart`) and the job's state machine (`machine`), which the
//! `JobActor` only carries out, and each replica's pod and service
//! (`replica`), which the `ReplicaActor` carries out.

pub mod machine;
pub mod refusal;
pub mod replica;
mod replica_events;
mod restart;

pub use restart::*;

#[cfg(test)]
mod tests {
    /// The lifecycle decides without I/O: its files name no client,
    /// runtime or actor crate (a CI check, as the design promises).
    #[test]
    fn the_lifecycle_does_no_io() {
        let files = [
            ("machine.rs", include_str!("machine.rs")),
            ("machine_tests.rs", include_str!("machine_tests.rs")),
            ("restart.rs", include_str!("restart.rs")),
            ("refusal.rs", include_str!("refusal.rs")),
            ("replica.rs", include_str!("replica.rs")),
            ("replica_events.rs", include_str!("replica_events.rs")),
            ("replica_tests.rs", include_str!("replica_tests.rs")),
        ];
        for (file, text) in files {
            for io in ["kube", "tokio", "actix", "hyper", "std::net", "std::fs"] {
                let uses = text
                    .lines()
                    .filter(|line| {
                        line.contains(&format!("{io}::")) || line.contains(&format!("use {io}"))
                    })
                    .collect::<Vec<_>>();
                assert!(uses.is_empty(), "lifecycle/{file} uses {io}: {uses:?}");
            }
        }
    }
}
