//! The one way the tests wait: [`eventually`].

use std::time::{Duration, Instant};

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(50);

/// What one look of [`eventually`] found: done with a value, or not yet
/// (with what it saw instead, when there is something to say).
pub trait Observation<T> {
    fn into_result(self) -> Result<T, Option<String>>;
}

impl<T> Observation<T> for Option<T> {
    fn into_result(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T> Observation<T> for Result<T, String> {
    fn into_result(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

/// Polls `check` until it is done (`Some`, or `Ok`) and returns its value;
/// after `limit` fails the test with `what` and the last thing `check` saw
/// (its `Err`).
pub async fn eventually<T, O: Observation<T>>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> O,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let last = match check().await.into_result() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if Instant::now() > deadline {
            match last {
                Some(last) => {
                    panic!("timed out after {limit:?} waiting for {what}; last seen: {last}")
                }
                None => panic!("timed out after {limit:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(POLL).await;
    }
}
