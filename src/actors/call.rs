//! One way for every actor to call the API: the answers that mean "already
//! done" are outcomes, not errors (409 on a create: the object exists; 404
//! on a delete or a write: it is gone), and transient failures (429, 5xx,
//! no answer) are retried with capped exponential backoff and jitter.
//! Other refusals (400, 403, 422, …) are returned at once: retrying the
//! same request cannot help, the caller decides.

use std::future::Future;
use std::time::Duration;

/// What a request does, which decides how its answers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Create,
    Delete,
    /// A patch or an update of an object that should exist.
    Write,
}

/// How a call ended.
#[derive(Debug)]
pub enum Outcome<T> {
    Done(T),
    /// A create found the name taken (409).
    Exists,
    /// The object is not there (404 on a delete or a write).
    Gone,
}

/// Waits between tries: `first`, doubling up to `cap`, each ±20 %.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub first: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// Starting at `first`, at most 30 × `first` (and at least `first`).
    pub fn from(first: Duration) -> Backoff {
        Backoff {
            first,
            cap: first.saturating_mul(30),
        }
    }

    /// The wait before try `attempt + 1` (after `attempt` failures, from 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doubled = self
            .first
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        let base = doubled.min(self.cap.max(self.first));
        base.mul_f64(0.8 + 0.4 * fastrand::f64())
    }
}

/// Whether retrying the same request may succeed.
pub fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(e) => e.code == 429 || e.code >= 500,
        // Bodies that do not parse, bad requests we built: the same again.
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        // No answer, a broken connection, a timeout.
        _ => true,
    }
}

/// Runs `request` until it succeeds, ends in an outcome of `kind`, or
/// fails for good; `what` names it in the log.
pub async fn call<T, F, Fut>(
    kind: Kind,
    backoff: Backoff,
    what: &str,
    mut request: F,
) -> Result<Outcome<T>, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let mut attempt = 0u32;
    loop {
        let error = match request().await {
            Ok(value) => return Ok(Outcome::Done(value)),
            Err(kube::Error::Api(e)) if e.code == 409 && kind == Kind::Create => {
                return Ok(Outcome::Exists);
            }
            Err(kube::Error::Api(e)) if e.code == 404 && kind != Kind::Create => {
                return Ok(Outcome::Gone);
            }
            Err(error) => error,
        };
        if !is_transient(&error) {
            return Err(error);
        }
        attempt = attempt.saturating_add(1);
        let delay = backoff.delay(attempt);
        tracing::warn!(what, attempt, error = %crate::telemetry::shown(&error), retry_in_ms = delay.as_millis() as u64, "API call failed; retrying");
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Refused")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter() {
        let backoff = Backoff {
            first: Duration::from_millis(100),
            cap: Duration::from_millis(500),
        };
        for (attempt, base) in [(1, 100), (2, 200), (3, 400), (4, 500), (30, 500)] {
            let delay = backoff.delay(attempt).as_secs_f64() * 1000.0;
            let base = f64::from(base);
            assert!(
                (base * 0.8..=base * 1.2).contains(&delay),
                "try {attempt}: {delay} ms is not {base} ms ± 20 %"
            );
        }
    }

    #[test]
    fn only_transient_errors_are_retried() {
        assert!(is_transient(&api_error(500)));
        assert!(is_transient(&api_error(503)));
        assert!(is_transient(&api_error(429)));
        for code in [400, 403, 404, 409, 422] {
            assert!(!is_transient(&api_error(code)), "{code}");
        }
    }

    #[tokio::test]
    async fn outcomes_by_kind_and_retries_until_success() {
        let quick = Backoff {
            first: Duration::from_millis(1),
            cap: Duration::from_millis(2),
        };
        let exists = call(Kind::Create, quick, "t", || async {
            Err::<(), _>(api_error(409))
        })
        .await;
        assert!(matches!(exists, Ok(Outcome::Exists)));
        let gone = call(Kind::Delete, quick, "t", || async {
            Err::<(), _>(api_error(404))
        })
        .await;
        assert!(matches!(gone, Ok(Outcome::Gone)));
        let missing_on_create = call(Kind::Create, quick, "t", || async {
            Err::<(), _>(api_error(404))
        })
        .await;
        assert!(matches!(missing_on_create, Err(kube::Error::Api(e)) if e.code == 404));
        let forbidden = call(Kind::Write, quick, "t", || async {
            Err::<(), _>(api_error(403))
        })
        .await;
        assert!(matches!(forbidden, Err(kube::Error::Api(e)) if e.code == 403));
        let mut tries = 0;
        let flaky = call(Kind::Write, quick, "t", || {
            tries += 1;
            let answer = if tries < 3 {
                Err(api_error(503))
            } else {
                Ok(tries)
            };
            async move { answer }
        })
        .await;
        assert!(matches!(flaky, Ok(Outcome::Done(3))), "{flaky:?}");
    }
}
