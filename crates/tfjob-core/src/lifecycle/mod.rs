//! A job's lifecycle, decided without I/O: what follows a replica's exit
//! (`restart`) and a cluster's loss (`loss`), the job's state machine (`machine`), which the
//! `JobActor` only carries out, and each replica's pod and service
//! (`replica`), which the `ReplicaActor` carries out.

pub mod loss;
pub mod machine;
pub mod refusal;
pub mod replica;
mod restart;

pub use loss::Loss;
pub use restart::*;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`, this one (which reads files) aside.
    fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("the lifecycle's folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path.ends_with("lifecycle/mod.rs")
            {
                found.push(path);
            }
        }
    }

    /// The lifecycle decides without I/O: its files (every one, so that a
    /// new file cannot be left out) name no client, runtime or actor crate
    /// (a CI check, as the design promises).
    #[test]
    fn the_lifecycle_does_no_io() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lifecycle");
        let mut files = Vec::new();
        sources(&dir, &mut files);
        assert!(files.len() > 10, "the lifecycle's files: {files:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for io in ["kube", "tokio", "actix", "hyper", "std::net", "std::fs"] {
                let uses = text
                    .lines()
                    .filter(|line| {
                        line.contains(&format!("{io}::")) || line.contains(&format!("use {io}"))
                    })
                    .collect::<Vec<_>>();
                assert!(uses.is_empty(), "{} uses {io}: {uses:?}", file.display());
            }
        }
    }
}
