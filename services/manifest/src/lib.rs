//! The skills manifest `{guidance, tools[{name, description, argsSchema, timeoutMs?}]}`
//! and its validation. Every rejection names the JSON pointer of the
//! offending node so a page author can find it at once. ToolBridgeService
//! keeps the parsed manifest of each thread; SessionService checks a create's
//! manifest with the same parser, so a bad one is refused with the same error
//! before the bridge ever sees it.
//!
//! Rules beyond the plain shape:
//! - `guidance` and `tools` may be absent (an app without tools); `null` counts
//!   as absent for the optional fields (`guidance`, `timeoutMs`).
//! - Every schema node needs `type` or `oneOf`; a type-specific keyword on a
//!   node of another type (`minLength` on a number, say) is rejected rather
//!   than silently ignored, because it is always a mistake in the page.
//! - `pattern` is compiled with the `regex` crate (no look-around or
//!   back-references); the compiled patterns are kept with the tool so a call
//!   never recompiles them.

#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};

use regex::Regex;
use serde_json::{Map, Value as Json};

pub const MAX_TOOLS: usize = 128;
pub const MAX_GUIDANCE_BYTES: usize = 32 * 1024;
pub const MAX_NAME_CHARS: usize = 64;
/// Upper bound for any timeout, so a typo cannot park a call for days.
pub const MAX_TIMEOUT_MS: u32 = 10 * 60 * 1000;
pub const DEFAULT_TIMEOUT_MS: u32 = 60_000;
/// Nested schemas are walked recursively; bound the depth so a hostile
/// manifest cannot exhaust the stack.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Bound on a compiled pattern's size (bytes of the regex program).
const MAX_PATTERN_PROGRAM: usize = 1 << 20;
/// Distinct `pattern`s in a whole manifest: each is compiled at every
/// registration (ToolBridge restarts included), so a hostile page must not
/// get to make that arbitrarily expensive.
pub const MAX_PATTERNS: usize = 256;
/// One tool's argsSchema, as compact JSON.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

const TOP_KEYS: &[&str] = &["guidance", "tools"];
const TOOL_KEYS: &[&str] = &["name", "description", "argsSchema", "timeoutMs"];
const TYPES: &[&str] = &["string", "number", "integer", "boolean", "array", "object"];
/// Keywords of full JSON Schema that are known not to be supported; they get
/// a clearer message than an unknown keyword.
const UNSUPPORTED: &[&str] = &[
    "$defs",
    "$ref",
    "additionalProperties",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "format",
];
const KNOWN: &[&str] = &[
    "type",
    "description",
    "default",
    "examples",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "items",
    "properties",
    "required",
    "title",
    "oneOf",
];

/// The node types a type-specific keyword applies to; `None` for keywords
/// valid on every node.
fn applies_to(keyword: &str) -> Option<&'static [&'static str]> {
    match keyword {
        "minimum" | "maximum" => Some(&["number", "integer"]),
        "minLength" | "maxLength" | "pattern" => Some(&["string"]),
        "minItems" | "maxItems" | "items" => Some(&["array"]),
        "properties" | "required" => Some(&["object"]),
        _ => None,
    }
}

/// A rejection: where (JSON pointer into the manifest) and why. Each service
/// reports it as `TOOLS_MANIFEST_INVALID` with this message and
/// [`ManifestError::details`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the tools manifest is invalid at {pointer}: {message}")]
pub struct ManifestError {
    pub pointer: String,
    pub message: String,
}

impl ManifestError {
    fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        ManifestError {
            pointer: pointer.into(),
            message: message.into(),
        }
    }

    /// The error's details on the wire: the pointer, as `path`.
    pub fn details(&self) -> Json {
        serde_json::json!({"path": self.pointer})
    }
}

/// A validated manifest.
#[derive(Clone, Debug, Default)]
pub struct Manifest {
    pub guidance: String,
    pub tools: Vec<Tool>,
}

/// One validated tool.
#[derive(Clone, Debug)]
pub struct Tool {
    pub name: String,
    pub description: String,
    /// The argsSchema exactly as registered (returned by tool-spec).
    pub args_schema: Map<String, Json>,
    pub timeout_ms: Option<u32>,
    pub patterns: Patterns,
}

impl Tool {
    /// The tool's own timeout, else the default.
    pub fn effective_timeout_ms(&self) -> u32 {
        self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)
    }
}

/// The compiled `pattern`s of one tool's schema, by source text.
#[derive(Clone, Debug, Default)]
pub struct Patterns {
    compiled: HashMap<String, Regex>,
    /// How many more distinct patterns may be compiled (the manifest's cap).
    left: usize,
}

impl Patterns {
    pub fn get(&self, source: &str) -> Option<&Regex> {
        self.compiled.get(source)
    }

    fn len(&self) -> usize {
        self.compiled.len()
    }

    fn compile(&mut self, source: &str) -> Result<(), String> {
        if !self.compiled.contains_key(source) {
            if self.left == 0 {
                return Err(format!(
                    "more than {MAX_PATTERNS} distinct patterns in the manifest"
                ));
            }
            let re = regex::RegexBuilder::new(source)
                .size_limit(MAX_PATTERN_PROGRAM)
                .build()
                .map_err(|e| format!("pattern does not compile: {e}"))?;
            self.compiled.insert(source.to_string(), re);
            self.left -= 1;
        }
        Ok(())
    }
}

/// Whether validating `doc` compiles a regex: a `pattern` key anywhere in it.
/// (Over-counts a property that happens to be named `pattern`; that only
/// sends its validation to the blocking pool.)
pub fn has_patterns(doc: &Map<String, Json>) -> bool {
    fn any(v: &Json) -> bool {
        match v {
            Json::Object(m) => has_patterns(m),
            Json::Array(items) => items.iter().any(any),
            _ => false,
        }
    }
    doc.iter().any(|(k, v)| k == "pattern" || any(v))
}

impl Manifest {
    /// Validates a manifest document and keeps what the bridge needs.
    pub fn parse(doc: &Map<String, Json>) -> Result<Manifest, ManifestError> {
        if let Some(key) = doc.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
            return Err(ManifestError::new(
                child("", key),
                format!("unknown manifest key \"{key}\" (allowed: guidance, tools)"),
            ));
        }
        let guidance = match doc.get("guidance") {
            None | Some(Json::Null) => String::new(),
            Some(Json::String(s)) if s.len() > MAX_GUIDANCE_BYTES => {
                return Err(ManifestError::new(
                    "/guidance",
                    format!(
                        "guidance is {} bytes; the limit is {MAX_GUIDANCE_BYTES}",
                        s.len()
                    ),
                ));
            }
            Some(Json::String(s)) => s.clone(),
            Some(_) => return Err(ManifestError::new("/guidance", "guidance must be a string")),
        };
        let tools = match doc.get("tools") {
            None => &[][..],
            Some(Json::Array(items)) => items.as_slice(),
            Some(_) => return Err(ManifestError::new("/tools", "tools must be an array")),
        };
        if tools.len() > MAX_TOOLS {
            return Err(ManifestError::new(
                "/tools",
                format!("{} tools; at most {MAX_TOOLS} are allowed", tools.len()),
            ));
        }
        let mut seen = HashSet::new();
        let mut parsed = Vec::with_capacity(tools.len());
        let mut patterns = 0;
        for (i, tool) in tools.iter().enumerate() {
            let tool = parse_tool(tool, &format!("/tools/{i}"), MAX_PATTERNS - patterns)?;
            patterns += tool.patterns.len();
            if !seen.insert(tool.name.clone()) {
                return Err(ManifestError::new(
                    format!("/tools/{i}/name"),
                    format!("tool name \"{}\" is used twice", tool.name),
                ));
            }
            parsed.push(tool);
        }
        Ok(Manifest {
            guidance,
            tools: parsed,
        })
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// No tools and no guidance: nothing to tell the agent.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.guidance.trim().is_empty()
    }
}

/// `patterns_left`: how many more distinct patterns the manifest may hold.
fn parse_tool(value: &Json, ptr: &str, patterns_left: usize) -> Result<Tool, ManifestError> {
    let obj = value
        .as_object()
        .ok_or_else(|| ManifestError::new(ptr, "a tool must be a JSON object"))?;
    if let Some(key) = obj.keys().find(|k| !TOOL_KEYS.contains(&k.as_str())) {
        return Err(ManifestError::new(
            child(ptr, key),
            format!(
                "unknown tool key \"{key}\" (allowed: name, description, argsSchema, timeoutMs)"
            ),
        ));
    }
    let name = match obj.get("name") {
        Some(Json::String(s)) if valid_name(s) => s.clone(),
        Some(Json::String(s)) => {
            return Err(ManifestError::new(
                child(ptr, "name"),
                format!("tool name \"{s}\" must match ^[A-Za-z][A-Za-z0-9_.-]{{0,63}}$"),
            ));
        }
        Some(_) => {
            return Err(ManifestError::new(
                child(ptr, "name"),
                "name must be a string",
            ));
        }
        None => return Err(ManifestError::new(ptr, "a tool needs a name")),
    };
    let description = match obj.get("description") {
        Some(Json::String(s)) => s.clone(),
        Some(_) => {
            return Err(ManifestError::new(
                child(ptr, "description"),
                "description must be a string",
            ));
        }
        None => return Err(ManifestError::new(ptr, "a tool needs a description")),
    };
    let timeout_ms = match obj.get("timeoutMs") {
        None | Some(Json::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) if ms >= 1 && ms <= u64::from(MAX_TIMEOUT_MS) => Some(ms as u32),
            _ => {
                return Err(ManifestError::new(
                    child(ptr, "timeoutMs"),
                    format!("timeoutMs must be an integer from 1 to {MAX_TIMEOUT_MS}"),
                ));
            }
        },
    };
    let schema_ptr = child(ptr, "argsSchema");
    let schema = match obj.get("argsSchema") {
        Some(Json::Object(m)) => m,
        Some(_) => {
            return Err(ManifestError::new(
                schema_ptr,
                "argsSchema must be a JSON object",
            ));
        }
        None => return Err(ManifestError::new(ptr, "a tool needs an argsSchema")),
    };
    let size = serde_json::to_string(schema).map_or(usize::MAX, |s| s.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(ManifestError::new(
            schema_ptr,
            format!("argsSchema is {size} bytes of JSON; the limit is {MAX_SCHEMA_BYTES}"),
        ));
    }
    let mut patterns = Patterns {
        compiled: HashMap::new(),
        left: patterns_left,
    };
    check_node(schema, &schema_ptr, 0, &mut patterns)?;
    if schema.get("type").and_then(Json::as_str) != Some("object") {
        return Err(ManifestError::new(
            child(&schema_ptr, "type"),
            "the root of argsSchema must have type \"object\"",
        ));
    }
    Ok(Tool {
        name,
        description,
        args_schema: schema.clone(),
        timeout_ms,
        patterns,
    })
}

/// `^[A-Za-z][A-Za-z0-9_.-]{0,63}$` without a regex.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && name.len() <= MAX_NAME_CHARS
}

/// Appends one reference token to a JSON pointer, escaped per RFC 6901.
pub fn child(ptr: &str, token: &str) -> String {
    let mut out = String::with_capacity(ptr.len() + token.len() + 1);
    out.push_str(ptr);
    out.push('/');
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

fn check_node(
    node: &Map<String, Json>,
    ptr: &str,
    depth: usize,
    patterns: &mut Patterns,
) -> Result<(), ManifestError> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(ManifestError::new(
            ptr,
            format!("schemas may nest at most {MAX_SCHEMA_DEPTH} levels"),
        ));
    }
    for key in node.keys() {
        if UNSUPPORTED.contains(&key.as_str()) {
            return Err(ManifestError::new(
                child(ptr, key),
                format!("keyword \"{key}\" is not supported in argsSchema"),
            ));
        }
        if !KNOWN.contains(&key.as_str()) {
            return Err(ManifestError::new(
                child(ptr, key),
                format!("unknown keyword \"{key}\" in argsSchema"),
            ));
        }
    }
    let ty = match node.get("type") {
        None => None,
        Some(Json::String(t)) if TYPES.contains(&t.as_str()) => Some(t.as_str()),
        Some(_) => {
            return Err(ManifestError::new(
                child(ptr, "type"),
                "type must be one of string, number, integer, boolean, array, object",
            ));
        }
    };
    if ty.is_none() && !node.contains_key("oneOf") {
        return Err(ManifestError::new(
            ptr,
            "a schema node needs \"type\" or \"oneOf\"",
        ));
    }
    for key in node.keys() {
        if let Some(types) = applies_to(key)
            && !ty.is_some_and(|t| types.contains(&t))
        {
            return Err(ManifestError::new(
                child(ptr, key),
                format!("\"{key}\" applies only to {} nodes", types.join(" or ")),
            ));
        }
    }
    for (key, value) in node {
        let at = child(ptr, key);
        match key.as_str() {
            "description" | "title" if !value.is_string() => {
                return Err(ManifestError::new(at, format!("{key} must be a string")));
            }
            "examples" if !value.is_array() => {
                return Err(ManifestError::new(at, "examples must be an array"));
            }
            "enum" if value.as_array().is_none_or(|a| a.is_empty()) => {
                return Err(ManifestError::new(at, "enum must be a non-empty array"));
            }
            "minimum" | "maximum" if !value.is_number() => {
                return Err(ManifestError::new(at, format!("{key} must be a number")));
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" if value.as_u64().is_none() => {
                return Err(ManifestError::new(
                    at,
                    format!("{key} must be a non-negative integer"),
                ));
            }
            "pattern" => {
                let source = value
                    .as_str()
                    .ok_or_else(|| ManifestError::new(&at, "pattern must be a string"))?;
                patterns
                    .compile(source)
                    .map_err(|e| ManifestError::new(&at, e))?;
            }
            "items" => {
                let items = value.as_object().ok_or_else(|| {
                    ManifestError::new(&at, "items must be one schema (a JSON object)")
                })?;
                check_node(items, &at, depth + 1, patterns)?;
            }
            "properties" => {
                let props = value
                    .as_object()
                    .ok_or_else(|| ManifestError::new(&at, "properties must be a JSON object"))?;
                for (name, schema) in props {
                    let prop_ptr = child(&at, name);
                    let schema = schema.as_object().ok_or_else(|| {
                        ManifestError::new(&prop_ptr, "a property schema must be a JSON object")
                    })?;
                    check_node(schema, &prop_ptr, depth + 1, patterns)?;
                }
            }
            "required" => check_required(node, value, &at)?,
            "oneOf" => {
                let options = value
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| ManifestError::new(&at, "oneOf must be a non-empty array"))?;
                for (i, option) in options.iter().enumerate() {
                    let option_ptr = format!("{at}/{i}");
                    let option = option.as_object().ok_or_else(|| {
                        ManifestError::new(&option_ptr, "a oneOf entry must be a JSON object")
                    })?;
                    check_node(option, &option_ptr, depth + 1, patterns)?;
                }
            }
            _ => {}
        }
    }
    check_range(node, ptr, "minimum", "maximum", Json::as_f64)?;
    check_range(node, ptr, "minLength", "maxLength", Json::as_f64)?;
    check_range(node, ptr, "minItems", "maxItems", Json::as_f64)?;
    Ok(())
}

fn check_required(node: &Map<String, Json>, value: &Json, at: &str) -> Result<(), ManifestError> {
    let names = value
        .as_array()
        .ok_or_else(|| ManifestError::new(at, "required must be an array of property names"))?;
    let props = node.get("properties").and_then(Json::as_object);
    let mut seen = HashSet::new();
    for (i, name) in names.iter().enumerate() {
        let item_ptr = format!("{at}/{i}");
        let name = name
            .as_str()
            .ok_or_else(|| ManifestError::new(&item_ptr, "a required entry must be a string"))?;
        if !seen.insert(name) {
            return Err(ManifestError::new(
                item_ptr,
                format!("\"{name}\" is listed twice in required"),
            ));
        }
        if !props.is_some_and(|p| p.contains_key(name)) {
            return Err(ManifestError::new(
                item_ptr,
                format!("required names \"{name}\", which is not in properties"),
            ));
        }
    }
    Ok(())
}

fn check_range(
    node: &Map<String, Json>,
    ptr: &str,
    low: &str,
    high: &str,
    num: fn(&Json) -> Option<f64>,
) -> Result<(), ManifestError> {
    if let (Some(lo), Some(hi)) = (node.get(low).and_then(num), node.get(high).and_then(num))
        && lo > hi
    {
        return Err(ManifestError::new(
            child(ptr, low),
            format!("{low} ({lo}) is greater than {high} ({hi})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(schema: Json) -> Json {
        json!({"guidance": "g", "tools": [{"name": "t", "description": "d", "argsSchema": schema}]})
    }

    fn parse(doc: Json) -> Result<Manifest, ManifestError> {
        Manifest::parse(doc.as_object().expect("object"))
    }

    fn schema_err(schema: Json) -> ManifestError {
        parse(manifest(schema)).expect_err("should be rejected")
    }

    fn object_with(prop: Json) -> Json {
        json!({"type": "object", "properties": {"x": prop}})
    }

    #[test]
    fn accepts_the_example_manifest() {
        let m = parse(json!({
            "guidance": "Use get_current_page when you need browser page context.",
            "tools": [
                {"name": "get_current_page", "description": "Read the page.",
                 "argsSchema": {"type": "object", "properties": {}, "required": []}},
                {"name": "update_counter", "description": "Update the counter.",
                 "argsSchema": {"type": "object", "required": ["delta"],
                    "properties": {"delta": {"type": "number", "description": "Counter delta."}}},
                 "timeoutMs": 5000}
            ]
        }))
        .unwrap();
        assert_eq!(m.tools.len(), 2);
        assert_eq!(
            m.tool("update_counter").unwrap().effective_timeout_ms(),
            5000
        );
        assert_eq!(
            m.tool("get_current_page").unwrap().effective_timeout_ms(),
            DEFAULT_TIMEOUT_MS
        );
    }

    #[test]
    fn accepts_every_node_type_and_keyword() {
        let schema = json!({
            "type": "object",
            "title": "Args",
            "description": "all of it",
            "default": {},
            "examples": [{}],
            "required": ["s", "n"],
            "properties": {
                "s": {"type": "string", "minLength": 1, "maxLength": 9, "pattern": "^[a-z]+$",
                      "enum": ["ab", "cd"], "default": "ab", "examples": ["cd"], "title": "S"},
                "n": {"type": "number", "minimum": -1.5, "maximum": 10},
                "i": {"type": "integer", "minimum": 0, "maximum": 3, "enum": [1, 2]},
                "b": {"type": "boolean", "description": "flag"},
                "a": {"type": "array", "items": {"type": "string"}, "minItems": 0, "maxItems": 4},
                "o": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"]},
                "u": {"oneOf": [{"type": "string"}, {"type": "integer"}], "description": "either"}
            }
        });
        let m = parse(manifest(schema)).unwrap();
        assert!(m.tools[0].patterns.get("^[a-z]+$").is_some());
    }

    #[test]
    fn rejects_each_unsupported_keyword_with_its_pointer() {
        for kw in UNSUPPORTED {
            let err = schema_err(object_with(json!({"type": "string", *kw: 1})));
            assert_eq!(
                err.pointer,
                format!("/tools/0/argsSchema/properties/x/{kw}"),
                "{kw}"
            );
            assert!(err.message.contains(kw), "{}", err.message);
        }
        let err = schema_err(json!({"type": "object", "additionalProperties": false}));
        assert_eq!(err.pointer, "/tools/0/argsSchema/additionalProperties");
    }

    /// Every keyword of JSON Schema 2020-12 and draft-07 (plus OpenAPI's
    /// `nullable`) outside the supported subset, at the root and on a nested
    /// node: refused, naming the keyword and its pointer.
    #[test]
    fn rejects_every_json_schema_keyword_outside_the_subset() {
        const ALL_OTHERS: &[&str] = &[
            "$schema",
            "$id",
            "$anchor",
            "$dynamicRef",
            "$dynamicAnchor",
            "$recursiveRef",
            "$recursiveAnchor",
            "$vocabulary",
            "$comment",
            "$defs",
            "$ref",
            "definitions",
            "allOf",
            "anyOf",
            "not",
            "if",
            "then",
            "else",
            "dependentSchemas",
            "dependencies",
            "prefixItems",
            "additionalItems",
            "contains",
            "minContains",
            "maxContains",
            "uniqueItems",
            "unevaluatedItems",
            "patternProperties",
            "additionalProperties",
            "propertyNames",
            "unevaluatedProperties",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "const",
            "multipleOf",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "format",
            "contentEncoding",
            "contentMediaType",
            "contentSchema",
            "deprecated",
            "readOnly",
            "writeOnly",
            "nullable",
        ];
        for kw in ALL_OTHERS {
            assert!(!KNOWN.contains(kw), "{kw} is supported");
            let nested = schema_err(object_with(
                json!({"type": "array", "items": {"type": "string", *kw: true}}),
            ));
            assert_eq!(
                nested.pointer,
                format!(
                    "/tools/0/argsSchema/properties/x/items/{}",
                    kw.replace('~', "~0").replace('/', "~1")
                ),
                "{kw}"
            );
            assert!(nested.message.contains(kw), "{kw}: {}", nested.message);
            let root = schema_err(json!({"type": "object", *kw: {}}));
            assert_eq!(root.pointer, format!("/tools/0/argsSchema/{kw}"), "{kw}");
        }
    }

    #[test]
    fn rejects_unknown_keyword_deep_inside() {
        let err = schema_err(object_with(json!({
            "type": "array",
            "items": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {"y": {"type": "string", "contentEncoding": "x"}}}]}
        })));
        assert_eq!(
            err.pointer,
            "/tools/0/argsSchema/properties/x/items/oneOf/1/properties/y/contentEncoding"
        );
    }

    #[test]
    fn escapes_pointer_tokens() {
        let err = schema_err(
            json!({"type": "object", "properties": {"a/b~c": {"type": "string", "format": "uri"}}}),
        );
        assert_eq!(err.pointer, "/tools/0/argsSchema/properties/a~1b~0c/format");
    }

    #[test]
    fn root_must_be_object() {
        assert_eq!(
            schema_err(json!({"type": "string"})).pointer,
            "/tools/0/argsSchema/type"
        );
        assert_eq!(
            schema_err(json!({"oneOf": [{"type": "object"}]})).pointer,
            "/tools/0/argsSchema/type"
        );
        let err = parse(json!({"tools": [{"name": "t", "description": "d", "argsSchema": []}]}))
            .unwrap_err();
        assert_eq!(err.pointer, "/tools/0/argsSchema");
    }

    #[test]
    fn rejects_malformed_keyword_values() {
        let cases = [
            (json!({"type": "str"}), "type"),
            (json!({"type": ["string", "null"]}), "type"),
            (json!({"type": "string", "description": 3}), "description"),
            (json!({"type": "string", "title": true}), "title"),
            (json!({"type": "string", "examples": "x"}), "examples"),
            (json!({"type": "string", "enum": []}), "enum"),
            (json!({"type": "number", "minimum": "1"}), "minimum"),
            (json!({"type": "number", "maximum": null}), "maximum"),
            (json!({"type": "string", "minLength": -1}), "minLength"),
            (json!({"type": "string", "maxLength": 1.5}), "maxLength"),
            (json!({"type": "string", "pattern": "(unclosed"}), "pattern"),
            (json!({"type": "string", "pattern": 5}), "pattern"),
            (json!({"type": "array", "minItems": "1"}), "minItems"),
            (json!({"type": "array", "maxItems": -2}), "maxItems"),
            (
                json!({"type": "array", "items": [{"type": "string"}]}),
                "items",
            ),
            (json!({"type": "object", "properties": []}), "properties"),
            (json!({"oneOf": []}), "oneOf"),
            (json!({"oneOf": {"type": "string"}}), "oneOf"),
            (
                json!({"type": "string", "minLength": 5, "maxLength": 2}),
                "minLength",
            ),
            (
                json!({"type": "number", "minimum": 5, "maximum": 2}),
                "minimum",
            ),
            (json!({"type": "number", "minLength": 1}), "minLength"),
            (
                json!({"type": "string", "items": {"type": "string"}}),
                "items",
            ),
            (json!({"type": "boolean", "properties": {}}), "properties"),
            (
                json!({"oneOf": [{"type": "string"}], "pattern": "a"}),
                "pattern",
            ),
        ];
        for (node, kw) in cases {
            let err = schema_err(object_with(node.clone()));
            assert_eq!(
                err.pointer,
                format!("/tools/0/argsSchema/properties/x/{kw}"),
                "{node}: {}",
                err.message
            );
        }
    }

    #[test]
    fn node_needs_type_or_one_of() {
        let err = schema_err(object_with(json!({"description": "typeless"})));
        assert_eq!(err.pointer, "/tools/0/argsSchema/properties/x");
        let err = schema_err(object_with(json!("string")));
        assert_eq!(err.pointer, "/tools/0/argsSchema/properties/x");
    }

    #[test]
    fn required_must_name_properties() {
        let err = schema_err(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}),
        );
        assert_eq!(err.pointer, "/tools/0/argsSchema/required/1");
        let err = schema_err(json!({"type": "object", "required": [1]}));
        assert_eq!(err.pointer, "/tools/0/argsSchema/required/0");
        let err = schema_err(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "a"]}),
        );
        assert_eq!(err.pointer, "/tools/0/argsSchema/required/1");
        let err = schema_err(json!({"type": "object", "required": "a"}));
        assert_eq!(err.pointer, "/tools/0/argsSchema/required");
    }

    #[test]
    fn bounds_nesting_depth() {
        let mut node = json!({"type": "string"});
        for _ in 0..40 {
            node = json!({"type": "array", "items": node});
        }
        let err = schema_err(object_with(node));
        assert!(err.message.contains("nest"), "{}", err.message);
    }

    #[test]
    fn checks_manifest_shape() {
        let ok = json!({"type": "object"});
        let err = parse(json!({"guidance": "", "tools": [], "skills": 1})).unwrap_err();
        assert_eq!(err.pointer, "/skills");
        assert!(err.message.contains("skills"));
        assert_eq!(
            parse(json!({"guidance": 3})).unwrap_err().pointer,
            "/guidance"
        );
        let big = "x".repeat(MAX_GUIDANCE_BYTES + 1);
        assert_eq!(
            parse(json!({"guidance": big})).unwrap_err().pointer,
            "/guidance"
        );
        assert!(parse(json!({"guidance": "x".repeat(MAX_GUIDANCE_BYTES)})).is_ok());
        assert_eq!(parse(json!({"tools": {}})).unwrap_err().pointer, "/tools");
        let many: Vec<Json> = (0..=MAX_TOOLS)
            .map(|i| json!({"name": format!("t{i}"), "description": "", "argsSchema": ok}))
            .collect();
        assert_eq!(parse(json!({"tools": many})).unwrap_err().pointer, "/tools");
        assert!(parse(json!({"tools": many[..MAX_TOOLS]})).is_ok());
        let dup = json!({"tools": [
            {"name": "a", "description": "", "argsSchema": ok},
            {"name": "a", "description": "", "argsSchema": ok}]});
        assert_eq!(parse(dup).unwrap_err().pointer, "/tools/1/name");
        let extra =
            json!({"tools": [{"name": "a", "description": "", "argsSchema": ok, "handler": 1}]});
        assert_eq!(parse(extra).unwrap_err().pointer, "/tools/0/handler");
        let no_desc = json!({"tools": [{"name": "a", "argsSchema": ok}]});
        assert_eq!(parse(no_desc).unwrap_err().pointer, "/tools/0");
        let bad_desc = json!({"tools": [{"name": "a", "description": 1, "argsSchema": ok}]});
        assert_eq!(parse(bad_desc).unwrap_err().pointer, "/tools/0/description");
        assert!(parse(json!({})).unwrap().is_empty());
    }

    #[test]
    fn patterns_are_found_at_any_depth_and_only_there() {
        let nested = manifest(json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}}
        }}));
        assert!(has_patterns(nested.as_object().unwrap()));
        let plain = manifest(json!({"type": "object", "properties": {"q": {"type": "string"}}}));
        assert!(!has_patterns(plain.as_object().unwrap()));
    }

    #[test]
    fn patterns_and_schema_size_are_capped() {
        let with_patterns = |n: usize, offset: usize| {
            let props: Map<String, Json> = (0..n)
                .map(|i| {
                    (
                        format!("p{i}"),
                        json!({"type": "string", "pattern": format!("^a{{{}}}$", i + offset)}),
                    )
                })
                .collect();
            json!({"type": "object", "properties": props})
        };
        let tools = |schemas: Vec<Json>| {
            let tools: Vec<Json> = schemas
                .into_iter()
                .enumerate()
                .map(|(i, s)| json!({"name": format!("t{i}"), "description": "d", "argsSchema": s}))
                .collect();
            json!({"tools": tools})
        };
        // 256 distinct patterns across two tools are fine; one more is not.
        let ok = tools(vec![with_patterns(200, 0), with_patterns(56, 200)]);
        assert!(parse(ok).is_ok());
        let err = parse(tools(vec![with_patterns(200, 0), with_patterns(57, 200)])).unwrap_err();
        assert!(
            err.message.contains("more than 256 distinct patterns"),
            "{}",
            err.message
        );
        assert!(
            err.pointer.starts_with("/tools/1/argsSchema/properties/"),
            "{}",
            err.pointer
        );
        // One tool's repeated pattern is compiled, and counted, once.
        let props: Map<String, Json> = (0..300)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "pattern": "^x+$"}),
                )
            })
            .collect();
        assert!(parse(tools(vec![json!({"type": "object", "properties": props})])).is_ok());
        // An oversized schema is refused before any walk.
        let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        let err = parse(tools(vec![big])).unwrap_err();
        assert_eq!(err.pointer, "/tools/0/argsSchema");
        assert!(
            err.message.contains("the limit is 65536"),
            "{}",
            err.message
        );
    }

    #[test]
    fn checks_names_and_timeouts() {
        let tool = |name: Json, timeout: Json| {
            parse(
                json!({"tools": [{"name": name, "description": "", "argsSchema": {"type": "object"}, "timeoutMs": timeout}]}),
            )
        };
        for good in ["a", "A.b-c_d9", &format!("a{}", "b".repeat(63))] {
            assert!(tool(json!(good), Json::Null).is_ok(), "{good}");
        }
        for bad in [
            "",
            "9a",
            "_a",
            "a b",
            "a/b",
            "é",
            &format!("a{}", "b".repeat(64)),
        ] {
            let err = tool(json!(bad), Json::Null).unwrap_err();
            assert_eq!(err.pointer, "/tools/0/name", "{bad}");
        }
        assert_eq!(
            tool(json!(1), Json::Null).unwrap_err().pointer,
            "/tools/0/name"
        );
        assert_eq!(
            tool(json!("a"), json!(1500)).unwrap().tools[0].timeout_ms,
            Some(1500)
        );
        for bad in [
            json!(0),
            json!(-5),
            json!(1.5),
            json!("100"),
            json!(MAX_TIMEOUT_MS + 1),
        ] {
            let err = tool(json!("a"), bad.clone()).unwrap_err();
            assert_eq!(err.pointer, "/tools/0/timeoutMs", "{bad}");
        }
    }
}
