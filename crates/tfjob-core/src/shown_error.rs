//! What of an API server's error answer may be shown in a status or a log.
//!
//! A member's kubeconfig may name any server, and whatever answers there
//! writes the error body: a web page, another service's text, a token
//! echoed back. kube-client turns an error answer that is not a Kubernetes
//! `Status` into one whose message is the whole body; copied into a
//! MemberCluster's `Ready` message or a log line, that body would be
//! published to everyone who may read either. So the one rule: a Kubernetes
//! `Status` (`status: Failure`, as every API server writes it) is shown by
//! its code, reason and message (bounded); anything else by its HTTP code
//! and size alone.

use kube::core::Status;
use kube::core::response::StatusSummary;

/// The reason kube-client gives the `Status` it makes of an error answer
/// that is not one (`handle_api_errors`): its message is the raw body.
pub const NOT_A_STATUS_REASON: &str = "Failed to parse error data";

/// At most this many characters of a Status' message are shown.
pub const MESSAGE_LIMIT: usize = 512;

/// Whether `status` came from an API server as a Kubernetes `Status`.
pub fn is_kubernetes_status(status: &Status) -> bool {
    status.reason != NOT_A_STATUS_REASON && status.status == Some(StatusSummary::Failure)
}

/// The text of an error answer that may be shown: see the module's rule.
pub fn shown_status(status: &Status) -> String {
    if !is_kubernetes_status(status) {
        return format!(
            "HTTP {} with a body that is not a Kubernetes Status ({} bytes, not shown)",
            status.code,
            status.message.len()
        );
    }
    let mut message: String = status
        .message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MESSAGE_LIMIT)
        .collect();
    if status.message.chars().count() > MESSAGE_LIMIT {
        message.push('…');
    }
    match status.reason.as_str() {
        "" => format!("HTTP {}: {message}", status.code),
        reason => format!("HTTP {} {reason}: {message}", status.code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Status kube-client makes of a body that is not one.
    fn reconstructed(body: &str, code: u16) -> Status {
        Status::failure(body, NOT_A_STATUS_REASON).with_code(code)
    }

    #[test]
    fn a_body_that_is_not_a_status_shows_only_its_code_and_size() {
        let page = "<html><body>secret-marker</body></html>";
        let shown = shown_status(&reconstructed(page, 404));
        assert_eq!(
            shown,
            format!(
                "HTTP 404 with a body that is not a Kubernetes Status ({} bytes, not shown)",
                page.len()
            )
        );
        // JSON that is not a Status (no `status: Failure`) is not one either.
        let json: Status =
            serde_json::from_str(r#"{"message": "secret-marker", "code": 500}"#).expect("parses");
        assert!(!shown_status(&json).contains("secret-marker"));
    }

    #[test]
    fn a_kubernetes_status_shows_code_reason_and_bounded_message() {
        let status: Status = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"namespaces \"kube-system\" is forbidden","reason":"Forbidden","code":403}"#,
        )
        .expect("a Status");
        assert_eq!(
            shown_status(&status),
            "HTTP 403 Forbidden: namespaces \"kube-system\" is forbidden"
        );
        let long = Status::failure(&"x\n".repeat(600), "Invalid").with_code(422);
        let shown = shown_status(&long);
        assert!(shown.ends_with('…') && !shown.contains('\n'), "{shown}");
        assert!(shown.chars().count() < MESSAGE_LIMIT + 30);
    }
}
