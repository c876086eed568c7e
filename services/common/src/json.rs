//! JSON (serde_json) <-> `google.protobuf.Value` / `Struct`, so JSON payloads
//! cross gRPC as plain JSON for grpcurl users.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use serde_json::{Map, Number, Value as Json};

pub fn to_value(json: &Json) -> Value {
    let kind = match json {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        Json::Object(map) => Kind::StructValue(to_struct(map)),
    };
    Value { kind: Some(kind) }
}

pub fn to_struct(map: &Map<String, Json>) -> Struct {
    Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

pub fn from_value(value: &Value) -> Json {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(list)) => Json::Array(list.values.iter().map(from_value).collect()),
        Some(Kind::StructValue(s)) => Json::Object(from_struct(s)),
    }
}

pub fn from_struct(s: &Struct) -> Map<String, Json> {
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), from_value(v)))
        .collect()
}

/// Protobuf numbers are doubles; integral ones come back as JSON integers so
/// `{"delta": 1}` round-trips as `1`, not `1.0`.
fn number(n: f64) -> Json {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        Json::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n).map(Json::Number).unwrap_or(Json::Null)
    }
}

/// The length of `json` serialized compactly, without building the text.
pub fn json_len(json: &Json) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a Value to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counter, json);
    counter.0
}

/// A tool result's size as [`crate::MAX_TOOL_RESULT_BYTES`] counts it.
pub fn tool_result_len(result: &Json) -> usize {
    json_len(result)
}

/// A tool error's size as [`crate::MAX_TOOL_RESULT_BYTES`] counts it: the
/// `{"code","message","details"}` object the agent receives.
pub fn tool_error_len(code: &str, message: &str, details: Option<&Json>) -> usize {
    json_len(&serde_json::json!({"code": code, "message": message, "details": details}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_are_those_of_the_json_text() {
        let doc = json!({"a": [1, "x\"y"], "b": null});
        assert_eq!(json_len(&doc), serde_json::to_string(&doc).unwrap().len());
        assert_eq!(tool_result_len(&json!("xy")), 4);
        assert_eq!(
            tool_error_len("E", "m", None),
            r#"{"code":"E","details":null,"message":"m"}"#.len()
        );
    }

    #[test]
    fn round_trips_nested_json() {
        let doc = json!({"a": [1, 2.5, "x", null, true], "b": {"c": -3}});
        assert_eq!(from_value(&to_value(&doc)), doc);
    }

    #[test]
    fn non_finite_numbers_become_null() {
        let v = Value {
            kind: Some(Kind::NumberValue(f64::NAN)),
        };
        assert_eq!(from_value(&v), Json::Null);
    }
}
