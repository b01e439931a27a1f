//! The HTTP front of one simulated cluster: routes Kubernetes API paths to
//! the store, serves discovery and OpenAPI, and the `/_sim/` admin paths.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use super::Cluster;
use super::error::{ApiError, ApiResult};
use super::http::{
    self, Body, Query, Representation, bytes_response, error_response, json_response,
};
use super::patch;
use super::protobuf;
use super::resources::ResourceType;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{self, Change, DeleteOptions, Deletion, ListQuery, Scope, Stored, WriteMeta};
use super::{discovery, openapi, table, watch};

/// A resource request after routing.
pub struct ResourceRequest {
    pub ty: Arc<ResourceType>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub status: bool,
    /// `/scale` (an `autoscaling/v1` Scale view of the object).
    pub scale: bool,
}

/// Entry point for every request on the cluster's port.
pub async fn handle(cluster: Arc<Cluster>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    if let Some(admin) = path.strip_prefix("/_sim/") {
        return super::faults::admin(&cluster, admin, req).await;
    }
    if let Err(e) = cluster.faults.before_request().await {
        return error_response(&e);
    }
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let resp = match route(&cluster, req).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    };
    tracing::debug!(cluster = %cluster.name, %method, %path, status = resp.status().as_u16(), elapsed_us = started.elapsed().as_micros() as u64, "request");
    resp
}

async fn route(cluster: &Arc<Cluster>, req: Request<Incoming>) -> ApiResult<Response<Body>> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let store = &cluster.store;
    match segments.as_slice() {
        ["version"] => Ok(json_response(StatusCode::OK, &discovery::version())),
        ["healthz" | "livez" | "readyz"] => Ok(bytes_response(
            StatusCode::OK,
            "text/plain",
            Bytes::from_static(b"ok"),
        )),
        ["api"] => Ok(json_response(
            StatusCode::OK,
            &discovery::core_versions(&cluster.address),
        )),
        ["apis"] => Ok(json_response(
            StatusCode::OK,
            &discovery::groups(&store.resource_types()),
        )),
        ["apis", group] => discovery::group(&store.resource_types(), group)
            .map(|g| json_response(StatusCode::OK, &g))
            .ok_or_else(not_served),
        ["api", "v1"] => Ok(json_response(
            StatusCode::OK,
            &discovery::resources(&store.resource_types(), "", "v1"),
        )),
        ["apis", group, version] => {
            let list = discovery::resources(&store.resource_types(), group, version);
            if list["resources"].as_array().is_some_and(|r| r.is_empty()) {
                return Err(not_served());
            }
            Ok(json_response(StatusCode::OK, &list))
        }
        ["openapi", "v3"] => Ok(json_response(
            StatusCode::OK,
            &openapi::root(&store.resource_types()),
        )),
        ["openapi", "v3", "api", "v1"] => Ok(json_response(
            StatusCode::OK,
            &openapi::group_version(&store.resource_types(), "", "v1"),
        )),
        ["openapi", "v3", "apis", group, version] => Ok(json_response(
            StatusCode::OK,
            &openapi::group_version(&store.resource_types(), group, version),
        )),
        ["api", "v1", "namespaces", namespace, "pods", name, "log"] => {
            if req.method() != Method::GET {
                return Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ));
            }
            let query = Query::parse(req.uri().query());
            let user_agent = header_value(&req, header::USER_AGENT);
            let access = super::Access {
                user_agent: user_agent.unwrap_or_default(),
                verb: "get",
                api_group: String::new(),
                resource: "pods/log".into(),
            };
            if let Ok(mut accesses) = cluster.accesses.lock() {
                accesses.insert(access);
            }
            if let Some(failure) = cluster.faults.targeted("get", "pods/log") {
                return Err(failure);
            }
            super::logs::serve(cluster, namespace, name, &query)
        }
        ["api", "v1", rest @ ..] => {
            let rr = resolve(cluster, "", "v1", rest)?;
            resource(cluster, rr, req).await
        }
        ["apis", group, version, rest @ ..] => {
            let rr = resolve(cluster, group, version, rest)?;
            resource(cluster, rr, req).await
        }
        _ => Err(not_served()),
    }
}

fn not_served() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Maps the path after `/api/v1` or `/apis/<g>/<v>` to a served type.
fn resolve(
    cluster: &Cluster,
    group: &str,
    version: &str,
    rest: &[&str],
) -> ApiResult<ResourceRequest> {
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && !(rest.len() == 3 && matches!(rest[2], "status" | "finalize"));
    let (namespace, rest) = if namespaced_path {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(*sub)),
        _ => return Err(not_served()),
    };
    let ty = cluster
        .store
        .resource_type(group, plural)
        .ok_or_else(not_served)?;
    let served = ty.version(version).ok_or_else(not_served)?;
    if namespace.is_some() && !ty.namespaced {
        return Err(not_served());
    }
    let (status, scale) = match sub {
        None => (false, false),
        Some("status") if served.status_subresource => (true, false),
        // Namespaces accept /finalize; the simulator treats it as a status write.
        Some("finalize") if plural == "namespaces" => (true, false),
        Some("scale") if ty.serves_scale() => (false, true),
        Some(_) => return Err(not_served()),
    };
    Ok(ResourceRequest {
        version: version.to_string(),
        namespace,
        name,
        status,
        scale,
        ty,
    })
}

/// The largest request body, as kube-apiserver's (3 MiB).
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How much of a body past the limit is read and dropped before the 413
/// answer. kube-apiserver answers a body over the limit and closes the
/// connection only after a pause in which the client reads the answer (Go's
/// `closeWriteAndWait`); hyper would close at once, with the rest of the
/// body unread in the socket, and the kernel's reset would reach a client
/// still sending before the answer does (a broken pipe instead of a 413).
/// Reading the rest first gives the client its answer; past this much, the
/// connection closes as it would have.
const DRAINED_PAST_LIMIT_BYTES: usize = 4 * MAX_BODY_BYTES;

async fn read_body(req: Request<Incoming>) -> ApiResult<Bytes> {
    let mut body = req.into_body();
    let mut kept = BytesMut::new();
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read = read.saturating_add(data.len());
        if read > MAX_BODY_BYTES + DRAINED_PAST_LIMIT_BYTES {
            break;
        }
        if read <= MAX_BODY_BYTES {
            kept.put(data);
        }
    }
    if read > MAX_BODY_BYTES {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {MAX_BODY_BYTES}"),
        ));
    }
    Ok(kept.freeze())
}

/// A create or update body: JSON, or protobuf as typed clients send it.
fn request_object(content_type: &str, raw: &[u8]) -> ApiResult<Value> {
    if protobuf::is_protobuf(content_type) {
        protobuf::decode(raw)
    } else {
        http::parse_json(raw)
    }
}

fn header_value(req: &Request<Incoming>, name: header::HeaderName) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The field manager of a write: the `fieldManager` parameter, else the user
/// agent's product name, as upstream derives it.
fn manager(query: &Query, user_agent: Option<&str>) -> String {
    query
        .get("fieldManager")
        .map(str::to_string)
        .unwrap_or_else(|| {
            user_agent
                .and_then(|ua| ua.split('/').next())
                .unwrap_or("unknown")
                .to_string()
        })
}

async fn resource(
    cluster: &Arc<Cluster>,
    rr: ResourceRequest,
    req: Request<Incoming>,
) -> ApiResult<Response<Body>> {
    let query = Query::parse(req.uri().query());
    let accept = header_value(&req, header::ACCEPT);
    let content_type = header_value(&req, header::CONTENT_TYPE).unwrap_or_default();
    let user_agent = header_value(&req, header::USER_AGENT);
    let method = req.method().clone();
    let repr = http::representation(accept.as_deref());
    let write = WriteMeta {
        manager: manager(&query, user_agent.as_deref()),
        now: store::now(),
        dry_run: query.get("dryRun").is_some(),
    };
    let store = &cluster.store;
    let scope = if rr.status {
        Scope::Status
    } else {
        Scope::Main
    };
    let ty = rr.ty.clone();
    let ns = rr.namespace.clone().unwrap_or_default();
    if let Some(access) = record_access(cluster, &rr, &method, &query, user_agent.as_deref()) {
        if let Some(failure) = cluster.faults.targeted(access.verb, &access.resource) {
            return Err(failure);
        }
        if let Some(delay) = cluster.faults.delay(access.verb, &access.resource) {
            tokio::time::sleep(delay).await;
        }
    }
    if rr.scale {
        return scale(cluster, &rr, method, req, &content_type, &write).await;
    }
    match (method, rr.name.clone()) {
        (Method::GET, None) if query.flag("watch") => {
            watch::serve(cluster.clone(), rr, &query, repr)
        }
        (Method::GET, None) => list(cluster, &rr, &query, repr),
        (Method::GET, Some(name)) => {
            let obj = store.get(&ty, &ns, &name)?;
            Ok(render_object(&rr, &obj, repr, StatusCode::OK))
        }
        (Method::POST, None) => {
            if ty.namespaced && rr.namespace.is_none() {
                return Err(not_served());
            }
            let body = request_object(&content_type, &read_body(req).await?)?;
            let body = validate_custom(&rr, body, &query)?;
            let created = store.create(&ty, &ns, body, &write)?;
            Ok(render_object(&rr, &created, repr, StatusCode::CREATED))
        }
        (Method::PUT, Some(name)) => {
            let body = request_object(&content_type, &read_body(req).await?)?;
            let body = validate_custom(&rr, body, &query)?;
            let updated = store.update(&ty, &ns, &name, scope, Change::Replace(body), &write)?;
            Ok(render_object(&rr, &updated, repr, StatusCode::OK))
        }
        (Method::PATCH, Some(name)) => {
            let raw = read_body(req).await?;
            let media = content_type
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string();
            let existed = store.get(&ty, &ns, &name).is_ok();
            let updated = match media.as_str() {
                "application/apply-patch+yaml" => {
                    if query.get("fieldManager").is_none() {
                        return Err(ApiError::bad_request(
                            "PATCH requests with an apply content type must include a fieldManager",
                        ));
                    }
                    let body: Value = serde_yaml::from_slice(&raw)
                        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                    let body = validate_custom(&rr, body, &query)?;
                    store.update(
                        &ty,
                        &ns,
                        &name,
                        scope,
                        Change::Apply {
                            body,
                            force: query.flag("force"),
                        },
                        &write,
                    )?
                }
                "application/merge-patch+json"
                | "application/json-patch+json"
                | "application/strategic-merge-patch+json" => {
                    if media == "application/strategic-merge-patch+json" && !ty.builtin {
                        return Err(ApiError::unsupported_media_type(
                            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                        ));
                    }
                    let doc = http::parse_json(&raw)?;
                    let apply_patch = |mut obj: Value| -> ApiResult<Value> {
                        let result = match media.as_str() {
                            "application/merge-patch+json" => patch::merge_patch(&mut obj, &doc),
                            "application/json-patch+json" => patch::json_patch(&mut obj, &doc),
                            _ => patch::strategic_merge_patch(&mut obj, &doc),
                        };
                        result.map_err(|e| patch_error(&ty.plural, &name, e))?;
                        validate_custom(&rr, obj, &query)
                    };
                    store.update(&ty, &ns, &name, scope, Change::Patch(&apply_patch), &write)?
                }
                other => {
                    return Err(ApiError::unsupported_media_type(format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
                    )));
                }
            };
            let code = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(render_object(&rr, &updated, repr, code))
        }
        (Method::DELETE, name) => {
            let raw = read_body(req).await?;
            let opts = delete_options(&raw, &content_type, &query)?;
            match name {
                Some(name) => match store.delete(&ty, &ns, &name, &opts)? {
                    Deletion::Pending(obj) => Ok(render_object(&rr, &obj, repr, StatusCode::OK)),
                    Deletion::Gone(obj) if ty.builtin => {
                        Ok(render_object(&rr, &obj, repr, StatusCode::OK))
                    }
                    Deletion::Gone(obj) => Ok(json_response(
                        StatusCode::OK,
                        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                "details": {"name": obj.name, "group": ty.group, "kind": ty.plural, "uid": obj.uid}}),
                    )),
                },
                None => {
                    let filter = selector_filter(&ty, &query)?;
                    let gone =
                        store.delete_collection(&ty, rr.namespace.as_deref(), &filter, &opts)?;
                    Ok(render_list(
                        &rr,
                        &gone,
                        store.current_rv(),
                        None,
                        None,
                        repr,
                    ))
                }
            }
        }
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}

/// Notes the kind of request for `GET /_sim/requests`, and returns it.
fn record_access(
    cluster: &Cluster,
    rr: &ResourceRequest,
    method: &Method,
    query: &Query,
    user_agent: Option<&str>,
) -> Option<super::Access> {
    let verb = match (method, rr.name.is_some()) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if query.flag("watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return None,
    };
    let access = super::Access {
        user_agent: user_agent.unwrap_or_default().to_string(),
        verb,
        api_group: rr.ty.group.clone(),
        resource: if rr.status {
            format!("{}/status", rr.ty.plural)
        } else if rr.scale {
            format!("{}/scale", rr.ty.plural)
        } else {
            rr.ty.plural.clone()
        },
    };
    if let Ok(mut accesses) = cluster.accesses.lock() {
        accesses.insert(access.clone());
    }
    Some(access)
}

/// `/scale` of a Deployment: GET, PUT (a Scale) and PATCH (merge, JSON or
/// strategic merge patch of the Scale, as `kubectl scale` sends) read and
/// write the object's `spec.replicas`.
async fn scale(
    cluster: &Cluster,
    rr: &ResourceRequest,
    method: Method,
    req: Request<Incoming>,
    content_type: &str,
    write: &WriteMeta,
) -> ApiResult<Response<Body>> {
    let store = &cluster.store;
    let ty = &rr.ty;
    let ns = rr.namespace.clone().unwrap_or_default();
    let name = rr.name.clone().ok_or_else(not_served)?;
    if method == Method::GET {
        let obj = store.get(ty, &ns, &name)?;
        return Ok(json_response(StatusCode::OK, &scale_of(&obj.value())));
    }
    let raw = read_body(req).await?;
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let change = match method {
        Method::PUT => {
            let body = request_object(content_type, &raw)?;
            check_scale_body(&body, &name)?;
            ScaleChange::Replace(body)
        }
        Method::PATCH => match media {
            "application/merge-patch+json"
            | "application/json-patch+json"
            | "application/strategic-merge-patch+json" => ScaleChange::Patch {
                json_patch: media == "application/json-patch+json",
                doc: http::parse_json(&raw)?,
            },
            other => {
                return Err(ApiError::unsupported_media_type(format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})"
                )));
            }
        },
        _ => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    // The Scale wanted, from the object's current one.
    let wanted = |mut current: Value| -> ApiResult<Value> {
        match &change {
            ScaleChange::Replace(body) => Ok(body.clone()),
            ScaleChange::Patch { json_patch, doc } => {
                // A Scale has no lists: a strategic merge is a merge.
                let result = if *json_patch {
                    patch::json_patch(&mut current, doc)
                } else {
                    patch::merge_patch(&mut current, doc)
                };
                result.map_err(|e| patch_error("scales", &name, e))?;
                Ok(current)
            }
        }
    };
    let target = super::error::Target {
        group: "autoscaling",
        plural: "scales",
        name: &name,
    };
    let set_replicas = |mut obj: Value| -> ApiResult<Value> {
        let scale = wanted(scale_of(&obj))?;
        let replicas = match scale.pointer("/spec/replicas") {
            None | Some(Value::Null) => 0,
            Some(v) => v.as_i64().ok_or_else(|| {
                ApiError::invalid(
                    &target,
                    "Scale",
                    "spec.replicas",
                    &format!("Invalid value: {v}: must be an integer"),
                )
            })?,
        };
        if !(0..=i64::from(i32::MAX)).contains(&replicas) {
            return Err(ApiError::invalid(
                &target,
                "Scale",
                "spec.replicas",
                &format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            ));
        }
        let rv = scale
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        let Value::Object(fields) = &mut obj else {
            return Err(ApiError::internal("stored object is not a JSON object"));
        };
        let spec = fields.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        if let Value::Object(spec) = spec {
            spec.insert("replicas".into(), json!(replicas));
        }
        // The Scale's resourceVersion is the object's: a stale one conflicts.
        if let (Some(rv), Some(Value::Object(meta))) = (rv, fields.get_mut("metadata")) {
            meta.insert("resourceVersion".into(), json!(rv));
        }
        Ok(obj)
    };
    let updated = store.update(
        ty,
        &ns,
        &name,
        Scope::Main,
        Change::Patch(&set_replicas),
        write,
    )?;
    Ok(json_response(StatusCode::OK, &scale_of(&updated.value())))
}

enum ScaleChange {
    Replace(Value),
    Patch { json_patch: bool, doc: Value },
}

/// A PUT body for `/scale`: an `autoscaling/v1` Scale of this object.
fn check_scale_body(body: &Value, name: &str) -> ApiResult<()> {
    let text = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    if !matches!(api_version, "" | "autoscaling/v1") || !matches!(kind, "" | "Scale") {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{api_version}\" cannot be handled as a Scale: the body of a /scale request must be an autoscaling/v1 Scale"
        )));
    }
    match text("/metadata/name") {
        "" => Ok(()),
        n if n == name => Ok(()),
        n => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
    }
}

/// The `autoscaling/v1` Scale of a Deployment (an unset `spec.replicas`
/// is 1, the Deployment default).
fn scale_of(obj: &Value) -> Value {
    let meta = |k: &str| obj.pointer(&format!("/metadata/{k}")).cloned();
    let mut metadata = serde_json::Map::new();
    for key in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta(key) {
            metadata.insert(key.into(), v);
        }
    }
    let replicas = obj
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let mut status = json!({
        "replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
    });
    if let Some(selector) = obj.pointer("/spec/selector").and_then(selector_string) {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas},
        "status": status,
    })
}

/// A LabelSelector as the string form `status.selector` of a Scale uses.
fn selector_string(selector: &Value) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    for expr in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = expr
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match expr.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_string(),
            Some("DoesNotExist") => format!("!{key}"),
            _ => continue,
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

fn patch_error(plural: &str, name: &str, e: patch::PatchError) -> ApiError {
    if e.is_bad_request() {
        ApiError::bad_request(e.to_string())
    } else {
        // Upstream answers these with NewGenericServerResponse(422) for no
        // particular resource: a generic message and empty details, which
        // kubectl prints as "The request is invalid: the server rejected …".
        tracing::debug!(resource = %plural, %name, error = %e, "patch rejected");
        ApiError {
            details: Some(json!({})),
            ..ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
        }
    }
}

/// Prunes a custom object to its CRD schema; `fieldValidation=Strict` turns
/// unknown fields into an error instead, as upstream.
fn validate_custom(rr: &ResourceRequest, obj: Value, query: &Query) -> ApiResult<Value> {
    let Some(schema) = rr.ty.version(&rr.version).and_then(|v| v.schema.as_ref()) else {
        return Ok(obj);
    };
    let (pruned, unknown) = super::schema::prune(obj, schema);
    if !unknown.is_empty() && query.get("fieldValidation") == Some("Strict") {
        let fields: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        // Upstream's wording for a decode error of a create or update body.
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            fields.join(", "),
            kind = rr.ty.kind,
            version = rr.version,
        )));
    }
    Ok(pruned)
}

fn delete_options(raw: &[u8], content_type: &str, query: &Query) -> ApiResult<DeleteOptions> {
    let body: Value = if raw.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        request_object(content_type, raw)?
    };
    let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
    let orphan = body
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| {
            query
                .get("orphanDependents")
                .map(|_| query.flag("orphanDependents"))
        });
    Ok(DeleteOptions {
        grace_period_seconds: body
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or(query.number("gracePeriodSeconds")?),
        propagation: text("propagationPolicy")
            .or_else(|| query.get("propagationPolicy").map(str::to_string))
            .or_else(|| orphan.map(|o| if o { "Orphan" } else { "Background" }.to_string())),
        precondition_uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        precondition_rv: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        dry_run: query.get("dryRun").is_some()
            || body
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()),
    })
}

/// The label and field selectors of a request as one predicate.
pub fn selector_filter(
    ty: &ResourceType,
    query: &Query,
) -> ApiResult<impl Fn(&Stored) -> bool + use<>> {
    let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(
        query.get("fieldSelector").unwrap_or_default(),
        &ty.all_field_labels(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let storage = ty.storage;
    Ok(move |o: &Stored| {
        labels.matches(&o.labels) && fields.matches(|f| o.field(&storage.field_label(f)))
    })
}

fn list(
    cluster: &Cluster,
    rr: &ResourceRequest,
    query: &Query,
    repr: Representation,
) -> ApiResult<Response<Body>> {
    let filter = selector_filter(&rr.ty, query)?;
    let limit = query
        .number("limit")?
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let rv = query.get("resourceVersion");
    let continue_token = query.get("continue");
    if continue_token.is_some() && rv.is_some_and(|rv| rv != "0") {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let exact = query.get("resourceVersionMatch") == Some("Exact") || limit.is_some();
    let exact_rv = match rv {
        Some(rv) if rv != "0" && exact => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        ),
        _ => None,
    };
    let page = cluster.store.list(
        &rr.ty,
        rr.namespace.as_deref(),
        &ListQuery {
            filter: &filter,
            limit,
            continue_token,
            exact_rv,
        },
    )?;
    Ok(render_list(
        rr,
        &page.items,
        page.rv,
        page.continue_token,
        page.remaining,
        repr,
    ))
}

fn render_object(
    rr: &ResourceRequest,
    obj: &Stored,
    repr: Representation,
    code: StatusCode,
) -> Response<Body> {
    match repr {
        Representation::Full => bytes_response(code, "application/json", obj.json.clone()),
        Representation::Metadata => json_response(code, &partial_metadata(&obj.value())),
        Representation::Table => json_response(
            code,
            &table::render(
                &rr.ty,
                &rr.version,
                std::slice::from_ref(&obj.value()),
                &obj.rv.to_string(),
                None,
            ),
        ),
    }
}

fn partial_metadata(obj: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

/// A list body, assembled from the stored bytes without re-encoding items.
fn render_list(
    rr: &ResourceRequest,
    items: &[Arc<Stored>],
    rv: u64,
    continue_token: Option<String>,
    remaining: Option<usize>,
    repr: Representation,
) -> Response<Body> {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = &continue_token {
        meta["continue"] = json!(token);
    }
    if let Some(n) = remaining {
        meta["remainingItemCount"] = json!(n);
    }
    match repr {
        Representation::Table => {
            let values: Vec<Value> = items.iter().map(|o| o.value()).collect();
            json_response(
                StatusCode::OK,
                &table::render(
                    &rr.ty,
                    &rr.version,
                    &values,
                    &rv.to_string(),
                    continue_token,
                ),
            )
        }
        Representation::Metadata => {
            let values: Vec<Value> = items.iter().map(|o| partial_metadata(&o.value())).collect();
            json_response(
                StatusCode::OK,
                &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": meta, "items": values}),
            )
        }
        Representation::Full => {
            let head = json!({"apiVersion": rr.ty.api_version(&rr.version), "kind": rr.ty.list_kind, "metadata": meta}).to_string();
            let mut buf = BytesMut::with_capacity(
                head.len() + 16 + items.iter().map(|o| o.json.len() + 1).sum::<usize>(),
            );
            // `head` is a JSON object: reopen it to append the items array.
            buf.put_slice(&head.as_bytes()[..head.len() - 1]);
            buf.put_slice(b",\"items\":[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    buf.put_u8(b',');
                }
                buf.put_slice(&item.json);
            }
            buf.put_slice(b"]}");
            bytes_response(StatusCode::OK, "application/json", buf.freeze())
        }
    }
}

/// How long a watch without `timeoutSeconds` stays open (upstream picks
/// 30–60 minutes at random).
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);
