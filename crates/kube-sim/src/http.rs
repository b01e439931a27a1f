//! Request parsing and response building shared by the API handlers:
//! query strings as upstream decodes them, content negotiation, bodies.

use std::collections::HashMap;
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::{Response, StatusCode, header};
use serde_json::Value;

use super::error::ApiError;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Query parameters; repeated keys keep the last value, empty pairs are
/// skipped (kube-rs sends URLs like `...?&force=true`).
#[derive(Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        Query(
            form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Booleans as Go's strconv.ParseBool reads them.
    pub fn flag(&self, key: &str) -> bool {
        matches!(
            self.get(key),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True")
        )
    }

    pub fn number(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid value for {key}: {v}")))
            })
            .transpose()
    }
}

/// What the client asked to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    Full,
    /// `as=Table` (kubectl get).
    Table,
    /// `as=PartialObjectMetadata[List]` (metadata-only clients).
    Metadata,
}

pub fn representation(accept: Option<&str>) -> Representation {
    let accept = accept.unwrap_or_default();
    // Clients list preferences in order; the first one we can serve wins.
    for media in accept.split(',') {
        let media = media.trim();
        if media.contains("as=Table") {
            return Representation::Table;
        }
        if media.contains("as=PartialObjectMetadata") {
            return Representation::Metadata;
        }
        if media.starts_with("application/json") || media.starts_with("*/*") || media.is_empty() {
            return Representation::Full;
        }
    }
    Representation::Full
}

pub fn bytes_response(status: StatusCode, content_type: &str, body: Bytes) -> Response<Body> {
    let mut resp = Response::new(Full::new(body).boxed_unsync());
    *resp.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

pub fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    bytes_response(
        status,
        "application/json",
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

pub fn error_response(err: &ApiError) -> Response<Body> {
    let mut resp = json_response(err.status_code(), &err.to_status());
    if err.code == 429 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    resp
}

/// Parses a JSON request body; an empty body is an error unless allowed.
/// The deepest JSON the simulator reads or stores. kube-apiserver reads up
/// to 10,000 levels; the simulator's recursive code (decoding, pruning,
/// managed fields) must stay within a thread's stack, and 512 is far past
/// the 128 levels of a default serde_json reader, which clients may hit.
pub const MAX_DEPTH: usize = 512;

/// How deeply JSON text nests: brackets outside strings, counted without
/// parsing (so without recursion).
pub fn nesting(text: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in text {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

pub fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    let bad =
        |detail: String| ApiError::bad_request(format!("error decoding request body: {detail}"));
    if nesting(body) > MAX_DEPTH {
        return Err(bad(format!("nested deeper than {MAX_DEPTH} levels")));
    }
    let mut reader = serde_json::Deserializer::from_slice(body);
    reader.disable_recursion_limit();
    let value = serde::Deserialize::deserialize(&mut reader).map_err(|e| bad(e.to_string()))?;
    reader.end().map_err(|e| bad(e.to_string()))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn bodies_nest_up_to_the_bound_past_serde_jsons_own() {
        assert_eq!(nesting(br#"{"a": "[{[", "b": [1, {"c": "\"]"}]}"#), 3);
        assert!(parse_json(nested(300).as_bytes()).is_ok(), "past 128");
        assert!(parse_json(nested(MAX_DEPTH).as_bytes()).is_ok());
        let refused = parse_json(nested(MAX_DEPTH + 1).as_bytes()).expect_err("too deep");
        assert!(
            refused.message.contains("nested deeper than 512"),
            "{}",
            refused.message
        );
        assert!(parse_json(b"{} trailing").is_err(), "one value only");
        assert!(
            parse_json(nested(100_000).as_bytes()).is_err(),
            "no stack overflow"
        );
    }
}
