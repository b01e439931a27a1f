//! proptest strategies for arbitrary JSON documents: the simulator's
//! property tests feed them to its patch code, the controller's feed them,
//! in a job's words, to its reading, validation and builders.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Any JSON value, at most `depth` deep and a few entries wide; strings
/// and object keys are drawn partly from `words` and `keys`, so that a
/// domain's parsers see their own vocabulary, not only noise.
pub fn json(
    depth: u32,
    words: Vec<&'static str>,
    keys: Vec<&'static str>,
) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z0-9./:$-]{0,12}".prop_map(Value::String),
        prop::sample::select(with_noise(words)).prop_map(|s| Value::String(s.to_string())),
    ];
    let key = prop_oneof![
        prop::sample::select(with_noise(keys)).prop_map(str::to_string),
        "[a-zA-Z]{1,8}",
    ];
    leaf.prop_recursive(depth, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `words`, never empty (`select` needs one).
fn with_noise(mut words: Vec<&'static str>) -> Vec<&'static str> {
    words.push("");
    words
}
