//! Checks JSON against `protocol/native-messaging.schema.json`, the contract
//! the SDK and the extension are generated from. A validator for exactly the
//! keywords that file uses (a test fails on any other, so the file cannot
//! quietly outgrow it): `$ref` (to `#/$defs/…`), `type`, `properties`,
//! `required`, `additionalProperties` (false, or the schema of a map's
//! values), `enum`, `const`, `oneOf`,
//! `items`, `maxItems`, `minLength`, `minimum`; annotations are ignored.

use std::path::PathBuf;

use serde_json::{Map, Value};

const ANNOTATIONS: &[&str] = &["$schema", "$id", "title", "description", "$defs"];
const KEYWORDS: &[&str] = &[
    "$ref",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "oneOf",
    "items",
    "maxItems",
    "minLength",
    "minimum",
];

pub struct Schema {
    root: Value,
}

impl Schema {
    /// The checked-in contract.
    pub fn native_messaging() -> Schema {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../protocol/native-messaging.schema.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let root: Value = serde_json::from_str(&text).expect("the schema is JSON");
        let schema = Schema { root };
        schema.check_keywords(&schema.root, "#");
        schema
    }

    /// The definition `#/$defs/<name>`.
    pub fn def(&self, name: &str) -> &Value {
        self.root["$defs"]
            .get(name)
            .unwrap_or_else(|| panic!("the schema has no $defs/{name}"))
    }

    /// Errors of `value` against `#/$defs/<name>` (empty when it conforms).
    pub fn errors(&self, name: &str, value: &Value) -> Vec<String> {
        let mut errors = Vec::new();
        self.check(self.def(name), value, "", &mut errors);
        errors
    }

    /// Panics with every error unless `value` conforms to `#/$defs/<name>`.
    pub fn assert_valid(&self, name: &str, value: &Value) {
        let errors = self.errors(name, value);
        assert!(
            errors.is_empty(),
            "not a valid {name}: {}\n{value:#}",
            errors.join("; ")
        );
    }

    fn check_keywords(&self, node: &Value, at: &str) {
        let Value::Object(map) = node else { return };
        for (key, sub) in map {
            let known = KEYWORDS.contains(&key.as_str()) || ANNOTATIONS.contains(&key.as_str());
            assert!(known, "schema keyword {key:?} at {at} is not supported");
            match key.as_str() {
                "properties" | "$defs" => {
                    for (name, s) in sub.as_object().expect("an object") {
                        self.check_keywords(s, &format!("{at}/{key}/{name}"));
                    }
                }
                "oneOf" => {
                    for (i, s) in sub.as_array().expect("an array").iter().enumerate() {
                        self.check_keywords(s, &format!("{at}/oneOf/{i}"));
                    }
                }
                "items" => self.check_keywords(sub, &format!("{at}/items")),
                "additionalProperties" => match sub {
                    Value::Bool(false) => {}
                    Value::Object(_) => {
                        self.check_keywords(sub, &format!("{at}/additionalProperties"))
                    }
                    _ => panic!("additionalProperties at {at}: only false or a schema"),
                },
                _ => {}
            }
        }
    }

    fn resolve<'a>(&'a self, reference: &str) -> &'a Value {
        let name = reference
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("unsupported $ref {reference}"));
        self.def(name)
    }

    fn check(&self, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
        let Value::Object(s) = schema else { return };
        let here = if at.is_empty() { "/" } else { at };
        if let Some(Value::String(r)) = s.get("$ref") {
            self.check(self.resolve(r), value, at, errors);
        }
        if let Some(t) = s.get("type") {
            let types: Vec<&str> = match t {
                Value::String(one) => vec![one.as_str()],
                Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            if !types.iter().any(|t| type_matches(t, value)) {
                errors.push(format!("{here}: expected {types:?}, got {value}"));
                return;
            }
        }
        if let Some(c) = s.get("const")
            && c != value
        {
            errors.push(format!("{here}: expected {c}, got {value}"));
        }
        if let Some(Value::Array(options)) = s.get("enum")
            && !options.contains(value)
        {
            errors.push(format!("{here}: {value} is not one of {options:?}"));
        }
        if let Some(Value::Array(options)) = s.get("oneOf") {
            let matching: Vec<usize> = (0..options.len())
                .filter(|&i| {
                    let mut e = Vec::new();
                    self.check(&options[i], value, at, &mut e);
                    e.is_empty()
                })
                .collect();
            if matching.len() != 1 {
                let why = if matching.is_empty() {
                    // Say why the closest option failed.
                    let mut best: Option<Vec<String>> = None;
                    for option in options {
                        let mut e = Vec::new();
                        self.check(option, value, at, &mut e);
                        if best.as_ref().is_none_or(|b| e.len() < b.len()) {
                            best = Some(e);
                        }
                    }
                    best.unwrap_or_default().join("; ")
                } else {
                    format!("options {matching:?} all match")
                };
                errors.push(format!("{here}: matches no single oneOf option ({why})"));
            }
        }
        if let Value::Object(obj) = value {
            self.check_object(s, obj, at, errors);
        }
        if let Value::Array(items) = value {
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push(format!("{here}: {} items, at most {max}", items.len()));
            }
            if let Some(item) = s.get("items") {
                for (i, v) in items.iter().enumerate() {
                    self.check(item, v, &format!("{at}/{i}"), errors);
                }
            }
        }
        if let (Some(min), Value::String(text)) =
            (s.get("minLength").and_then(Value::as_u64), value)
            && (text.chars().count() as u64) < min
        {
            errors.push(format!("{here}: shorter than {min}"));
        }
        if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), value.as_f64())
            && n < min
        {
            errors.push(format!("{here}: {n} is below {min}"));
        }
    }

    fn check_object(
        &self,
        s: &Map<String, Value>,
        obj: &Map<String, Value>,
        at: &str,
        errors: &mut Vec<String>,
    ) {
        let here = if at.is_empty() { "/" } else { at };
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = s.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(name) {
                    errors.push(format!("{here}: missing {name:?}"));
                }
            }
        }
        for (name, v) in obj {
            match props.and_then(|p| p.get(name)) {
                Some(sub) => self.check(sub, v, &format!("{at}/{name}"), errors),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        errors.push(format!("{here}: unexpected property {name:?}"))
                    }
                    Some(values @ Value::Object(_)) => {
                        self.check(values, v, &format!("{at}/{name}"), errors)
                    }
                    _ => {}
                },
            }
        }
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        _ => panic!("unsupported type {t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_validator_catches_what_it_should() {
        let schema = Schema::native_messaging();
        let usage = json!({"totalTokens": 3, "inputTokens": 2, "outputTokens": 1});
        assert!(schema.errors("Usage", &usage).is_empty());
        let missing = json!({"totalTokens": 3, "inputTokens": 2});
        assert!(!schema.errors("Usage", &missing).is_empty());
        let extra = json!({"totalTokens": 3, "inputTokens": 2, "outputTokens": 1, "x": 1});
        assert!(!schema.errors("Usage", &extra).is_empty());
        let wrong = json!({"totalTokens": "3", "inputTokens": 2, "outputTokens": 1});
        assert!(!schema.errors("Usage", &wrong).is_empty());
    }
}
