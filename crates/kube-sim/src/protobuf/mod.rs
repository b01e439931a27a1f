//! Request bodies in Kubernetes' protobuf encoding
//! (`application/vnd.kubernetes.protobuf`), as kubectl's typed clients send
//! them (`kubectl create namespace|configmap|secret|deployment …`), decoded
//! into the JSON the store handles.
//!
//! The envelope is the 4 bytes `k8s\0` and a `runtime.Unknown` (typeMeta,
//! raw, contentEncoding, contentType); `raw` is the object's message from
//! Kubernetes' generated.proto files. The fields of every message the
//! simulator accepts are in `schema.txt`, written by `generate.py` from the
//! `k8s-pb` crate (field numbers) and `k8s-openapi` (JSON names). Messages
//! with a JSON form of their own (times, quantities, int-or-string, raw
//! JSON, schema unions) are converted here by name.
//!
//! Go's protobuf code writes every non-pointer field of an object, set or
//! not; its JSON omits the unset ones. So a zero scalar (`""`, `0`, `false`)
//! is dropped unless the schema marks the field `!` (required, or a pointer
//! whose zero means something, like `replicas` or `runAsUser`).

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Map, Number, Value};

use super::error::{ApiError, ApiResult};

/// The media type of a protobuf body.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";
/// Deeper nesting than any Kubernetes object has (schemas included).
const MAX_DEPTH: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Single,
    Repeated,
    Map,
    /// A Go struct embedded with `json:",inline"`: its fields go into the parent.
    Inline,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Type {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Double,
    Message(String),
}

#[derive(Debug)]
struct Field {
    json: String,
    label: Label,
    ty: Type,
    keep_zero: bool,
}

#[derive(Debug)]
struct Schema {
    /// (apiVersion, kind) → message.
    kinds: HashMap<(String, String), String>,
    /// message → field number → field.
    messages: HashMap<String, HashMap<u64, Field>>,
}

fn parse_schema(text: &str) -> Result<Schema, String> {
    let mut schema = Schema {
        kinds: HashMap::new(),
        messages: HashMap::new(),
    };
    let mut current: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("schema.txt line {}: {line:?}", n + 1);
        match words.as_slice() {
            ["=", api_version, kind, message] => {
                schema.kinds.insert(
                    (api_version.to_string(), kind.to_string()),
                    message.to_string(),
                );
            }
            ["@", message] => {
                schema.messages.insert(message.to_string(), HashMap::new());
                current = Some(message.to_string());
            }
            [tag, json, label, ty, rest @ ..] => {
                let tag: u64 = tag.parse().map_err(|_| bad())?;
                let label = match *label {
                    "o" => Label::Single,
                    "r" => Label::Repeated,
                    "m" => Label::Map,
                    "i" => Label::Inline,
                    _ => return Err(bad()),
                };
                let ty = match *ty {
                    "string" => Type::String,
                    "bytes" => Type::Bytes,
                    "bool" => Type::Bool,
                    "int32" => Type::Int32,
                    "int64" => Type::Int64,
                    "double" => Type::Double,
                    other => Type::Message(other.to_string()),
                };
                let keep_zero = match rest {
                    [] => false,
                    ["!"] => true,
                    _ => return Err(bad()),
                };
                let message = current
                    .as_ref()
                    .and_then(|m| schema.messages.get_mut(m))
                    .ok_or_else(bad)?;
                message.insert(
                    tag,
                    Field {
                        json: json.to_string(),
                        label,
                        ty,
                        keep_zero,
                    },
                );
            }
            _ => return Err(bad()),
        }
    }
    Ok(schema)
}

fn schema() -> ApiResult<&'static Schema> {
    static SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| parse_schema(include_str!("schema.txt")))
        .as_ref()
        .map_err(|e| ApiError::internal(format!("protobuf schema: {e}")))
}

/// Whether a Content-Type (parameters allowed) is the protobuf one.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or_default().trim() == MEDIA_TYPE
}

fn malformed(what: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("error decoding protobuf request body: {what}"))
}

fn unsupported(message: impl Into<String>) -> ApiError {
    ApiError::unsupported_media_type(message)
}

/// Decodes a protobuf request body into the object's JSON (with
/// `apiVersion` and `kind` from the envelope). 400 for a malformed body,
/// 415 for a kind or encoding the simulator cannot decode.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let schema = schema()?;
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        malformed("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]")
    })?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    let mut content_encoding = String::new();
    let mut reader = Reader::new(envelope);
    while let Some((tag, wire)) = reader.key()? {
        match (tag, wire) {
            (1, WIRE_LEN) => {
                let mut type_meta = Reader::new(reader.len_delimited()?);
                while let Some((tag, wire)) = type_meta.key()? {
                    match (tag, wire) {
                        (1, WIRE_LEN) => api_version = utf8(type_meta.len_delimited()?)?,
                        (2, WIRE_LEN) => kind = utf8(type_meta.len_delimited()?)?,
                        _ => type_meta.skip(wire)?,
                    }
                }
            }
            (2, WIRE_LEN) => raw = reader.len_delimited()?,
            (3, WIRE_LEN) => content_encoding = utf8(reader.len_delimited()?)?,
            _ => reader.skip(wire)?,
        }
    }
    if !content_encoding.is_empty() {
        return Err(unsupported(format!(
            "protobuf bodies with contentEncoding {content_encoding:?} are not supported"
        )));
    }
    // Typed clients label DeleteOptions with the group version they call.
    let key = if kind == "DeleteOptions" {
        ("meta.k8s.io/v1".to_string(), kind.clone())
    } else {
        (api_version.clone(), kind.clone())
    };
    let message = schema
        .kinds
        .get(&key)
        .ok_or_else(|| {
            unsupported(format!(
                "the simulator cannot decode a protobuf body of kind {kind:?} in version {api_version:?}; send it as application/json"
            ))
        })?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    let decoder = Decoder { schema };
    if let Value::Object(fields) = decoder.message(message, raw, 0)? {
        object.extend(fields);
    }
    Ok(Value::Object(object))
}

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

/// Reads protobuf wire format.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn varint(&mut self) -> ApiResult<u64> {
        let mut value = 0u64;
        for (i, byte) in self.buf.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(malformed("truncated or overlong varint"))
    }

    /// The next field's number and wire type, or None at the end.
    fn key(&mut self) -> ApiResult<Option<(u64, u8)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = key >> 3;
        if tag == 0 {
            return Err(malformed("field number 0"));
        }
        Ok(Some((tag, (key & 7) as u8)))
    }

    fn take(&mut self, n: usize) -> ApiResult<&'a [u8]> {
        if n > self.buf.len() {
            return Err(malformed("truncated message"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn len_delimited(&mut self) -> ApiResult<&'a [u8]> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| malformed("length out of range"))?;
        self.take(n)
    }

    fn fixed64(&mut self) -> ApiResult<u64> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(array))
    }

    fn skip(&mut self, wire: u8) -> ApiResult<()> {
        match wire {
            WIRE_VARINT => self.varint().map(drop),
            WIRE_FIXED64 => self.take(8).map(drop),
            WIRE_LEN => self.len_delimited().map(drop),
            WIRE_FIXED32 => self.take(4).map(drop),
            other => Err(malformed(format!("unsupported wire type {other}"))),
        }
    }
}

fn utf8(bytes: &[u8]) -> ApiResult<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| malformed("string field is not valid UTF-8"))
}

fn json_bytes(bytes: &[u8], what: &str) -> ApiResult<Value> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|_| {
        unsupported(format!(
            "{what} in a protobuf body holds no JSON; the simulator reads only JSON there"
        ))
    })
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        _ => false,
    }
}

fn number_from_f64(value: f64) -> ApiResult<Value> {
    // Go prints whole floats without a fraction.
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        return Ok(Value::from(value as i64));
    }
    Number::from_f64(value)
        .map(Value::Number)
        .ok_or_else(|| malformed("a double field is not a finite number"))
}

struct Decoder {
    schema: &'static Schema,
}

impl Decoder {
    /// One value of a field as it came off the wire.
    fn scalar(&self, ty: &Type, wire: u8, reader: &mut Reader, depth: usize) -> ApiResult<Value> {
        let expect = |want: u8| {
            if wire == want {
                Ok(())
            } else {
                Err(malformed(format!(
                    "wire type {wire} for a {ty:?} field (expected {want})"
                )))
            }
        };
        match ty {
            Type::String => {
                expect(WIRE_LEN)?;
                Ok(Value::String(utf8(reader.len_delimited()?)?))
            }
            Type::Bytes => {
                expect(WIRE_LEN)?;
                Ok(Value::String(
                    base64::engine::general_purpose::STANDARD.encode(reader.len_delimited()?),
                ))
            }
            Type::Bool => {
                expect(WIRE_VARINT)?;
                Ok(Value::Bool(reader.varint()? != 0))
            }
            Type::Int32 => {
                expect(WIRE_VARINT)?;
                Ok(Value::from(reader.varint()? as i64 as i32))
            }
            Type::Int64 => {
                expect(WIRE_VARINT)?;
                Ok(Value::from(reader.varint()? as i64))
            }
            Type::Double => {
                expect(WIRE_FIXED64)?;
                number_from_f64(f64::from_bits(reader.fixed64()?))
            }
            Type::Message(name) => {
                expect(WIRE_LEN)?;
                self.message(name, reader.len_delimited()?, depth + 1)
            }
        }
    }

    /// A message as JSON: an object, or the JSON form of a special message
    /// (`Null` for a zero time, which is then left out).
    fn message(&self, name: &str, bytes: &[u8], depth: usize) -> ApiResult<Value> {
        if depth > MAX_DEPTH {
            return Err(malformed("messages nested too deeply"));
        }
        let short = name.rsplit('.').next().unwrap_or(name);
        match short {
            "Time"
            | "MicroTime"
            | "Duration"
            | "Quantity"
            | "IntOrString"
            | "FieldsV1"
            | "RawExtension"
            | "Json"
            | "JsonSchemaPropsOrArray"
            | "JsonSchemaPropsOrBool"
            | "JsonSchemaPropsOrStringArray" => return self.special(short, bytes, depth),
            _ => {}
        }
        let fields = self
            .schema
            .messages
            .get(name)
            .ok_or_else(|| ApiError::internal(format!("protobuf schema lacks {name}")))?;
        let mut object = Map::new();
        let mut reader = Reader::new(bytes);
        while let Some((tag, wire)) = reader.key()? {
            let Some(field) = fields.get(&tag) else {
                // A field newer than the schema: skipped, as Go skips it.
                reader.skip(wire)?;
                continue;
            };
            match field.label {
                Label::Inline => {
                    if let Value::Object(fields) =
                        self.scalar(&field.ty, wire, &mut reader, depth)?
                    {
                        object.extend(fields);
                    }
                }
                Label::Single => {
                    let value = self.scalar(&field.ty, wire, &mut reader, depth)?;
                    let drop = value.is_null()
                        || (!field.keep_zero
                            && !matches!(field.ty, Type::Message(_))
                            && is_zero(&value));
                    if drop {
                        object.remove(&field.json);
                    } else {
                        object.insert(field.json.clone(), value);
                    }
                }
                Label::Repeated => {
                    let packed = wire == WIRE_LEN
                        && matches!(
                            field.ty,
                            Type::Bool | Type::Int32 | Type::Int64 | Type::Double
                        );
                    let mut values = Vec::new();
                    if packed {
                        let mut inner = Reader::new(reader.len_delimited()?);
                        let wire = if field.ty == Type::Double {
                            WIRE_FIXED64
                        } else {
                            WIRE_VARINT
                        };
                        while !inner.buf.is_empty() {
                            values.push(self.scalar(&field.ty, wire, &mut inner, depth)?);
                        }
                    } else {
                        values.push(self.scalar(&field.ty, wire, &mut reader, depth)?);
                    }
                    let entry = object
                        .entry(field.json.clone())
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(items) = entry {
                        items.extend(values);
                    }
                }
                Label::Map => {
                    if wire != WIRE_LEN {
                        return Err(malformed(format!("wire type {wire} for a map entry")));
                    }
                    let mut entry = Reader::new(reader.len_delimited()?);
                    let mut key = String::new();
                    let mut value = None;
                    while let Some((tag, wire)) = entry.key()? {
                        match tag {
                            1 => key = utf8(entry.len_delimited()?)?,
                            2 => value = Some(self.scalar(&field.ty, wire, &mut entry, depth)?),
                            _ => entry.skip(wire)?,
                        }
                    }
                    let value = match value {
                        Some(v) => v,
                        None => self.zero(&field.ty, depth)?,
                    };
                    let map = object
                        .entry(field.json.clone())
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(map) = map {
                        map.insert(key, value);
                    }
                }
            }
        }
        Ok(Value::Object(object))
    }

    /// The value of a map entry that has none on the wire.
    fn zero(&self, ty: &Type, depth: usize) -> ApiResult<Value> {
        Ok(match ty {
            Type::String | Type::Bytes => Value::String(String::new()),
            Type::Bool => Value::Bool(false),
            Type::Int32 | Type::Int64 | Type::Double => Value::from(0),
            Type::Message(name) => self.message(name, &[], depth + 1)?,
        })
    }

    fn special(&self, short: &str, bytes: &[u8], depth: usize) -> ApiResult<Value> {
        const PROPS: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps";
        let mut ints: HashMap<u64, i64> = HashMap::new();
        let mut lens: HashMap<u64, Vec<&[u8]>> = HashMap::new();
        let mut reader = Reader::new(bytes);
        while let Some((tag, wire)) = reader.key()? {
            match wire {
                WIRE_VARINT => {
                    ints.insert(tag, reader.varint()? as i64);
                }
                WIRE_LEN => lens.entry(tag).or_default().push(reader.len_delimited()?),
                _ => reader.skip(wire)?,
            }
        }
        let int = |tag| ints.get(&tag).copied().unwrap_or(0);
        let last = |tag| lens.get(&tag).and_then(|v| v.last().copied());
        let text = |tag| last(tag).map(utf8).transpose();
        Ok(match short {
            "Time" | "MicroTime" => {
                let (seconds, nanos) = (int(1), int(2) as i32);
                if seconds == 0 && nanos == 0 {
                    return Ok(Value::Null);
                }
                let ts = jiff::Timestamp::new(seconds, nanos)
                    .map_err(|e| malformed(format!("time out of range: {e}")))?;
                let format = if short == "Time" {
                    "%Y-%m-%dT%H:%M:%SZ"
                } else {
                    "%Y-%m-%dT%H:%M:%S%.6fZ"
                };
                Value::String(ts.strftime(format).to_string())
            }
            "Duration" => Value::String(go_duration(int(1))),
            "Quantity" => Value::String(text(1)?.unwrap_or_default()),
            "IntOrString" => {
                if int(1) == 1 {
                    Value::String(text(3)?.unwrap_or_default())
                } else {
                    Value::from(int(2) as i32)
                }
            }
            "FieldsV1" | "RawExtension" | "Json" => json_bytes(last(1).unwrap_or_default(), short)?,
            "JsonSchemaPropsOrArray" => match lens.get(&2) {
                Some(items) => Value::Array(
                    items
                        .iter()
                        .map(|b| self.message(PROPS, b, depth + 1))
                        .collect::<ApiResult<_>>()?,
                ),
                None => match last(1) {
                    Some(b) => self.message(PROPS, b, depth + 1)?,
                    None => Value::Null,
                },
            },
            "JsonSchemaPropsOrBool" => match last(2) {
                Some(b) => self.message(PROPS, b, depth + 1)?,
                None => Value::Bool(int(1) != 0),
            },
            "JsonSchemaPropsOrStringArray" => match lens.get(&2) {
                Some(items) => Value::Array(
                    items
                        .iter()
                        .map(|b| utf8(b).map(Value::String))
                        .collect::<ApiResult<_>>()?,
                ),
                None => match last(1) {
                    Some(b) => self.message(PROPS, b, depth + 1)?,
                    None => Value::Null,
                },
            },
            _ => return Err(ApiError::internal(format!("no conversion for {short}"))),
        })
    }
}

/// A duration in nanoseconds as Go's `time.Duration.String` prints it.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let trim = |whole: u64, frac: u64, digits: usize| {
        let frac = format!("{frac:0digits$}");
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{frac}")
        }
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", trim(n / 1_000, n % 1_000, 3));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", trim(n / 1_000_000, n % 1_000_000, 6));
    }
    let seconds = n / 1_000_000_000;
    let secs = trim(seconds % 60, n % 1_000_000_000, 9);
    let (hours, minutes) = (seconds / 3600, seconds / 60 % 60);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{secs}s")
    } else {
        format!("{sign}{secs}s")
    }
}

#[cfg(test)]
mod tests;
