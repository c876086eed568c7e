//! Validation of a call's arguments against its tool's argsSchema (a schema
//! already accepted by [`crate::manifest`], so keywords are well-formed here).
//! Properties not named in `properties` are allowed: the subset has no
//! `additionalProperties`.

use serde_json::{Map, Value as Json};

use crate::manifest::{Patterns, child};

/// The first failing argument: its JSON pointer within the args ("" is the
/// args object itself) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgsError {
    pub path: String,
    pub message: String,
}

impl ArgsError {
    fn new(path: &str, message: impl Into<String>) -> Self {
        ArgsError {
            path: path.to_string(),
            message: message.into(),
        }
    }
}

/// Checks `args` (must be a JSON object) against `schema`.
pub fn validate_args(
    schema: &Map<String, Json>,
    args: &Json,
    patterns: &Patterns,
) -> Result<(), ArgsError> {
    if !args.is_object() {
        return Err(ArgsError::new(
            "",
            format!("the arguments must be a JSON object, not {}", kind(args)),
        ));
    }
    check(schema, args, "", patterns)
}

fn check(
    schema: &Map<String, Json>,
    value: &Json,
    path: &str,
    patterns: &Patterns,
) -> Result<(), ArgsError> {
    if let Some(ty) = schema.get("type").and_then(Json::as_str)
        && !type_matches(ty, value)
    {
        return Err(ArgsError::new(
            path,
            format!("expected {ty}, got {}", kind(value)),
        ));
    }
    if let Some(Json::Array(options)) = schema.get("enum")
        && !options.iter().any(|o| json_eq(o, value))
    {
        let list: Vec<String> = options.iter().map(Json::to_string).collect();
        return Err(ArgsError::new(
            path,
            format!("must be one of {}", list.join(", ")),
        ));
    }
    match value {
        Json::Number(n) => {
            let n = n.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = schema.get("minimum").and_then(Json::as_f64)
                && n < min
            {
                return Err(ArgsError::new(path, format!("must be at least {min}")));
            }
            if let Some(max) = schema.get("maximum").and_then(Json::as_f64)
                && n > max
            {
                return Err(ArgsError::new(path, format!("must be at most {max}")));
            }
        }
        Json::String(s) => {
            // Lengths count Unicode characters, as the page's JS would roughly see
            // them, not UTF-8 bytes.
            let len = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Json::as_u64)
                && len < min
            {
                return Err(ArgsError::new(
                    path,
                    format!("must be at least {min} characters long (is {len})"),
                ));
            }
            if let Some(max) = schema.get("maxLength").and_then(Json::as_u64)
                && len > max
            {
                return Err(ArgsError::new(
                    path,
                    format!("must be at most {max} characters long (is {len})"),
                ));
            }
            if let Some(source) = schema.get("pattern").and_then(Json::as_str) {
                // The manifest compiled every pattern; a missing one would be a
                // bridge bug, so fail closed rather than skip the check.
                let matched = patterns.get(source).is_some_and(|re| re.is_match(s));
                if !matched {
                    return Err(ArgsError::new(
                        path,
                        format!("does not match the pattern {source:?}"),
                    ));
                }
            }
        }
        Json::Array(items) => {
            let len = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Json::as_u64)
                && len < min
            {
                return Err(ArgsError::new(
                    path,
                    format!("must have at least {min} items (has {len})"),
                ));
            }
            if let Some(max) = schema.get("maxItems").and_then(Json::as_u64)
                && len > max
            {
                return Err(ArgsError::new(
                    path,
                    format!("must have at most {max} items (has {len})"),
                ));
            }
            if let Some(item_schema) = schema.get("items").and_then(Json::as_object) {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}/{i}"), patterns)?;
                }
            }
        }
        Json::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Json::as_array) {
                for name in required.iter().filter_map(Json::as_str) {
                    if !map.contains_key(name) {
                        return Err(ArgsError::new(
                            &child(path, name),
                            format!("the required property \"{name}\" is missing"),
                        ));
                    }
                }
            }
            if let Some(props) = schema.get("properties").and_then(Json::as_object) {
                for (name, prop_schema) in props {
                    if let (Some(v), Some(s)) = (map.get(name), prop_schema.as_object()) {
                        check(s, v, &child(path, name), patterns)?;
                    }
                }
            }
        }
        _ => {}
    }
    if let Some(Json::Array(options)) = schema.get("oneOf") {
        let matches = options
            .iter()
            .filter_map(Json::as_object)
            .filter(|o| check(o, value, path, patterns).is_ok())
            .count();
        if matches != 1 {
            return Err(ArgsError::new(
                path,
                format!(
                    "matches {matches} of the {} oneOf alternatives; exactly one must match",
                    options.len()
                ),
            ));
        }
    }
    Ok(())
}

fn type_matches(ty: &str, value: &Json) -> bool {
    match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => is_integer(value),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

/// A number with no fractional part (`2.0` counts, as in JSON Schema).
fn is_integer(value: &Json) -> bool {
    match value {
        Json::Number(n) => {
            n.is_i64()
                || n.is_u64()
                || n.as_f64()
                    .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
        }
        _ => false,
    }
}

/// JSON equality where numbers compare by value (`1` equals `1.0`).
fn json_eq(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(n) if n.is_f64() => "number",
        Json::Number(_) => "integer",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Manifest;
    use serde_json::json;

    /// Validates `args` against a root object schema with one property `x`.
    fn check_x(prop: Json, x: Json) -> Result<(), ArgsError> {
        check_root(
            json!({"type": "object", "properties": {"x": prop}}),
            json!({"x": x}),
        )
    }

    fn check_root(schema: Json, args: Json) -> Result<(), ArgsError> {
        let m = Manifest::parse(
            json!({"tools": [{"name": "t", "description": "", "argsSchema": schema}]})
                .as_object()
                .unwrap(),
        )
        .expect("schema accepted");
        let tool = &m.tools[0];
        validate_args(&tool.args_schema, &args, &tool.patterns)
    }

    fn fails_at(result: Result<(), ArgsError>, path: &str) -> String {
        let err = result.expect_err("should fail");
        assert_eq!(err.path, path, "{}", err.message);
        err.message
    }

    #[test]
    fn args_must_be_an_object() {
        for args in [json!(null), json!([]), json!("x"), json!(1)] {
            fails_at(check_root(json!({"type": "object"}), args), "");
        }
        assert!(check_root(json!({"type": "object"}), json!({"extra": 1})).is_ok());
    }

    #[test]
    fn types() {
        let cases = [
            ("string", json!("s"), json!(1)),
            ("number", json!(1.5), json!("1")),
            ("integer", json!(2), json!(2.5)),
            ("boolean", json!(true), json!(0)),
            ("array", json!([1]), json!({})),
            ("object", json!({}), json!([])),
        ];
        for (ty, good, bad) in cases {
            assert!(check_x(json!({"type": ty}), good).is_ok(), "{ty}");
            let msg = fails_at(check_x(json!({"type": ty}), bad), "/x");
            assert!(msg.contains(ty), "{msg}");
        }
        assert!(check_x(json!({"type": "integer"}), json!(2.0)).is_ok());
        assert!(check_x(json!({"type": "number"}), json!(3)).is_ok());
        fails_at(check_x(json!({"type": "string"}), json!(null)), "/x");
    }

    #[test]
    fn enum_values() {
        let schema = json!({"type": "string", "enum": ["a", "b"]});
        assert!(check_x(schema.clone(), json!("b")).is_ok());
        fails_at(check_x(schema, json!("c")), "/x");
        let nums = json!({"type": "number", "enum": [1, 2.5]});
        assert!(check_x(nums.clone(), json!(1.0)).is_ok());
        fails_at(check_x(nums, json!(2)), "/x");
    }

    #[test]
    fn numeric_range() {
        let schema = json!({"type": "number", "minimum": 1, "maximum": 2.5});
        assert!(check_x(schema.clone(), json!(1)).is_ok());
        assert!(check_x(schema.clone(), json!(2.5)).is_ok());
        fails_at(check_x(schema.clone(), json!(0.9)), "/x");
        fails_at(check_x(schema, json!(3)), "/x");
        let int = json!({"type": "integer", "minimum": -2, "maximum": 2});
        fails_at(check_x(int.clone(), json!(-3)), "/x");
        assert!(check_x(int, json!(-2)).is_ok());
    }

    #[test]
    fn string_lengths_count_characters() {
        let schema = json!({"type": "string", "minLength": 2, "maxLength": 3});
        assert!(check_x(schema.clone(), json!("éé")).is_ok());
        assert!(check_x(schema.clone(), json!("日本語")).is_ok());
        fails_at(check_x(schema.clone(), json!("é")), "/x");
        fails_at(check_x(schema, json!("abcd")), "/x");
    }

    #[test]
    fn pattern_is_a_search() {
        let schema = json!({"type": "string", "pattern": "[0-9]{2}"});
        assert!(check_x(schema.clone(), json!("ab12cd")).is_ok());
        fails_at(check_x(schema, json!("ab1cd")), "/x");
        let anchored = json!({"type": "string", "pattern": "^[a-z]+$"});
        fails_at(check_x(anchored, json!("abc1")), "/x");
    }

    #[test]
    fn arrays() {
        let schema =
            json!({"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"}});
        assert!(check_x(schema.clone(), json!([1, 2])).is_ok());
        fails_at(check_x(schema.clone(), json!([])), "/x");
        fails_at(check_x(schema.clone(), json!([1, 2, 3])), "/x");
        fails_at(check_x(schema, json!([1, "2"])), "/x/1");
    }

    #[test]
    fn objects_properties_and_required() {
        let schema = json!({
            "type": "object",
            "required": ["a"],
            "properties": {
                "a": {"type": "object", "required": ["b"], "properties": {"b": {"type": "string"}, "c/d": {"type": "integer"}}}
            }
        });
        assert!(check_root(schema.clone(), json!({"a": {"b": "x", "more": true}})).is_ok());
        fails_at(check_root(schema.clone(), json!({})), "/a");
        fails_at(check_root(schema.clone(), json!({"a": {}})), "/a/b");
        fails_at(check_root(schema.clone(), json!({"a": {"b": 1}})), "/a/b");
        fails_at(
            check_root(schema, json!({"a": {"b": "x", "c/d": "no"}})),
            "/a/c~1d",
        );
    }

    #[test]
    fn one_of_needs_exactly_one_match() {
        let schema = json!({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}]});
        assert!(check_x(schema.clone(), json!("abc")).is_ok());
        assert!(check_x(schema.clone(), json!(4)).is_ok());
        fails_at(check_x(schema, json!("abcd")), "/x");
        let overlapping = json!({"oneOf": [{"type": "number"}, {"type": "integer"}]});
        let msg = fails_at(check_x(overlapping.clone(), json!(2)), "/x");
        assert!(msg.contains("matches 2"), "{msg}");
        assert!(check_x(overlapping, json!(2.5)).is_ok());
    }
}
