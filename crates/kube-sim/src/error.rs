//! API errors as the Kubernetes API server reports them: a `Status` object
//! with the upstream reason and HTTP code, which kube-rs and kubectl decode.

use hyper::StatusCode;
use serde_json::{Value, json};

/// A failed API request, rendered as a `metav1.Status` body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), when known.
    pub details: Option<Value>,
}

/// Identifies the object an error is about, for messages like `pods "x" not found`.
pub struct Target<'a> {
    pub group: &'a str,
    pub plural: &'a str,
    pub name: &'a str,
}

impl Target<'_> {
    /// `pods` for the core group, `tensorflowtrainingjobs.batch.tensorstack.dev` otherwise.
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn details(&self) -> Value {
        json!({"name": self.name, "group": self.group, "kind": self.plural})
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(t: &Target) -> Self {
        ApiError {
            details: Some(t.details()),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{}\" not found", t.qualified(), t.name),
            )
        }
    }

    pub fn already_exists(t: &Target) -> Self {
        ApiError {
            details: Some(t.details()),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{}\" already exists", t.qualified(), t.name),
            )
        }
    }

    pub fn conflict(t: &Target, why: &str) -> Self {
        ApiError {
            details: Some(t.details()),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": {why}",
                    t.qualified(),
                    t.name
                ),
            )
        }
    }

    /// The message upstream gives for a stale resourceVersion.
    pub fn stale(t: &Target) -> Self {
        Self::conflict(
            t,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one field cause, as upstream validation reports it.
    pub fn invalid(t: &Target, kind: &str, field: &str, detail: &str) -> Self {
        let qualified_kind = if t.group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{}", t.group)
        };
        ApiError {
            details: Some(json!({
                "name": t.name, "group": t.group, "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}],
            })),
            ..Self::new(
                422,
                "Invalid",
                format!(
                    "{qualified_kind} \"{}\" is invalid: {field}: {detail}",
                    t.name
                ),
            )
        }
    }

    /// 422 with every cause, worded as upstream joins them: one cause
    /// inline, several in brackets.
    pub fn invalid_causes(t: &Target, kind: &str, causes: &[super::validate::Cause]) -> Self {
        let qualified_kind = if t.group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{}", t.group)
        };
        let listed: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let joined = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let causes: Vec<Value> = causes.iter().map(super::validate::Cause::to_json).collect();
        ApiError {
            details: Some(json!({
                "name": t.name, "group": t.group, "kind": kind, "causes": causes,
            })),
            ..Self::new(
                422,
                "Invalid",
                format!("{qualified_kind} \"{}\" is invalid: {joined}", t.name),
            )
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
