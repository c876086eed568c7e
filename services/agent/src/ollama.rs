//! Ollama's `/api/chat`: the request, and its streamed NDJSON answer parsed
//! chunk by chunk (https://github.com/ollama/ollama/blob/main/docs/api.md).

use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::error::AgentError;
use crate::http::{self, Endpoint, Http, HttpError};
use crate::output::Output;

/// Longest NDJSON line accepted from the server.
const MAX_LINE: usize = 4 << 20;
/// Bytes of an error body kept for its message.
const ERROR_BODY: usize = 64 << 10;

/// One streamed line of `/api/chat`.
#[derive(Debug, Default, Deserialize, PartialEq)]
pub struct Chunk {
    #[serde(default)]
    pub message: Option<ChunkMessage>,
    #[serde(default)]
    pub done: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub prompt_eval_count: Option<u64>,
    #[serde(default)]
    pub eval_count: Option<u64>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
pub struct ChunkMessage {
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ToolCall {
    pub function: FunctionCall,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    /// An object; some models send it as a JSON string, see [`FunctionCall::args`].
    #[serde(default)]
    pub arguments: Json,
}

impl FunctionCall {
    /// The arguments as an object: a string holding JSON is parsed, absent is `{}`.
    pub fn args(&self) -> Json {
        match &self.arguments {
            Json::Null => json!({}),
            Json::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Json::String(s.clone())),
            other => other.clone(),
        }
    }
}

/// Cuts a byte stream into lines whatever the chunk boundaries, and parses
/// each non-empty line as a [`Chunk`].
#[derive(Debug, Default)]
pub struct NdjsonParser {
    buf: Vec<u8>,
}

impl NdjsonParser {
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<Chunk>, AgentError> {
        let mut out = Vec::new();
        while let Some(i) = bytes.iter().position(|&b| b == b'\n') {
            self.buf.extend_from_slice(&bytes[..i]);
            bytes = &bytes[i + 1..];
            let line = std::mem::take(&mut self.buf);
            if let Some(chunk) = parse_line(&line)? {
                out.push(chunk);
            }
        }
        if self.buf.len() + bytes.len() > MAX_LINE {
            return Err(AgentError::InvalidResponse(format!(
                "a line of the stream is over {MAX_LINE} bytes"
            )));
        }
        self.buf.extend_from_slice(bytes);
        Ok(out)
    }

    /// End of the body: a last line without its newline.
    pub fn finish(&mut self) -> Result<Option<Chunk>, AgentError> {
        let line = std::mem::take(&mut self.buf);
        parse_line(&line)
    }
}

fn parse_line(line: &[u8]) -> Result<Option<Chunk>, AgentError> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(text).map(Some).map_err(|e| {
        let shown: String = text.chars().take(200).collect();
        AgentError::InvalidResponse(format!("a line is not a chat chunk ({e}): {shown}"))
    })
}

/// What one model call produced.
#[derive(Debug, Default, PartialEq)]
pub struct Round {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Round {
    /// Folds one chunk in; returns the text to stream as a delta, if any.
    /// An `error` member mid-stream fails the round.
    pub fn absorb(&mut self, chunk: Chunk) -> Result<Option<String>, AgentError> {
        if let Some(message) = chunk.error {
            return Err(AgentError::Model {
                status: None,
                message,
            });
        }
        self.input_tokens += chunk.prompt_eval_count.unwrap_or(0);
        self.output_tokens += chunk.eval_count.unwrap_or(0);
        let Some(message) = chunk.message else {
            return Ok(None);
        };
        self.tool_calls.extend(message.tool_calls);
        if message.content.is_empty() {
            return Ok(None);
        }
        self.content.push_str(&message.content);
        Ok(Some(message.content))
    }
}

pub struct Client {
    pub http: Http,
    pub endpoint: Endpoint,
    pub api_key: Option<pedelec_common::secret::Secret>,
    pub model: String,
}

impl Client {
    /// One streamed call: deltas printed as they arrive; returns the round
    /// once the server says `done`.
    pub async fn chat(
        &self,
        messages: &[Json],
        tools: &[Json],
        out: &mut Output,
    ) -> Result<Round, AgentError> {
        let mut body = json!({ "model": self.model, "messages": messages, "stream": true });
        if !tools.is_empty() {
            body["tools"] = Json::Array(tools.to_vec());
        }
        let body = serde_json::to_vec(&body)
            .map_err(|e| AgentError::Usage(format!("cannot encode the request: {e}")))?;
        let unreachable = |reason: String| AgentError::Unreachable {
            endpoint: self.endpoint.url.clone(),
            reason,
        };
        let mut resp = self
            .http
            .post_json(
                &self.endpoint,
                "/api/chat",
                self.api_key.as_ref().map(|k| k.expose()),
                body,
            )
            .await
            .map_err(|e| match e {
                HttpError::Connect(r) => unreachable(r),
                HttpError::Protocol(r) => AgentError::InvalidResponse(r),
                e @ HttpError::KeyOverPlainHttp(_) => AgentError::KeyOverPlainHttp(e.to_string()),
            })?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let body = http::read_body(resp.body_mut(), ERROR_BODY)
                .await
                .unwrap_or_default();
            return Err(self.status_error(status, http::error_message(&body)));
        }
        let mut parser = NdjsonParser::default();
        let mut round = Round::default();
        let body = resp.body_mut();
        loop {
            let chunks = match body.frame().await {
                Some(frame) => {
                    let frame = frame.map_err(|e| {
                        AgentError::InvalidResponse(format!("the stream broke: {e}"))
                    })?;
                    match frame.into_data() {
                        Ok(data) => parser.push(&data)?,
                        Err(_) => Vec::new(),
                    }
                }
                None => {
                    let last = parser.finish()?;
                    let done = last.as_ref().is_some_and(|c| c.done || c.error.is_some());
                    if let Some(chunk) = last
                        && let Some(delta) = round.absorb(chunk)?
                    {
                        out.delta(&delta);
                    }
                    if done {
                        return Ok(round);
                    }
                    return Err(AgentError::InvalidResponse(
                        "the stream ended before the server said done".into(),
                    ));
                }
            };
            for chunk in chunks {
                let done = chunk.done;
                if let Some(delta) = round.absorb(chunk)? {
                    out.delta(&delta);
                }
                if done {
                    return Ok(round);
                }
            }
        }
    }

    fn status_error(&self, status: u16, message: String) -> AgentError {
        match status {
            401 | 403 => AgentError::AuthFailed { status, message },
            404 => AgentError::ModelNotFound {
                model: self.model.clone(),
                message,
            },
            429 => AgentError::RateLimited { message },
            _ => AgentError::Model {
                status: Some(status),
                message,
            },
        }
    }
}

/// Whether a failure says the model cannot take `tools` (Ollama answers 400
/// "… does not support tools"): the round is then retried without them.
pub fn is_tools_unsupported(e: &AgentError) -> bool {
    matches!(e, AgentError::Model { status: Some(400), message } if message.contains("does not support tools"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(parser: &mut NdjsonParser, pieces: &[&[u8]]) -> Vec<Chunk> {
        let mut out = Vec::new();
        for p in pieces {
            out.extend(parser.push(p).unwrap());
        }
        out.extend(parser.finish().unwrap());
        out
    }

    #[test]
    fn lines_split_across_reads_parse_whole() {
        let mut p = NdjsonParser::default();
        let chunks = all(
            &mut p,
            &[
                br#"{"message":{"role":"assistant","content":"Hel"#,
                b"lo\"},\"done\":false}\n\n{\"message\":{\"content\":\" \xe2\x9c",
                b"\x93\"},\"done\":false}\r\n{\"done\":true,\"prompt_eval_count\":12,\"eval_count\":3}",
            ],
        );
        let mut round = Round::default();
        let deltas: Vec<_> = chunks
            .into_iter()
            .filter_map(|c| round.absorb(c).unwrap())
            .collect();
        assert_eq!(deltas, ["Hello", " ✓"]);
        assert_eq!(round.content, "Hello ✓");
        assert_eq!((round.input_tokens, round.output_tokens), (12, 3));
        assert!(round.tool_calls.is_empty());
    }

    #[test]
    fn tool_calls_are_collected_with_object_or_string_arguments() {
        let mut p = NdjsonParser::default();
        let chunks = all(
            &mut p,
            &[
                br#"{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"read_file","arguments":{"path":"a.txt"}}}]},"done":false}
{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_page","arguments":"{\"q\":1}"}}]},"done":false}
{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}
"#,
            ],
        );
        let mut round = Round::default();
        for c in chunks {
            assert_eq!(round.absorb(c).unwrap(), None);
        }
        let calls: Vec<_> = round
            .tool_calls
            .iter()
            .map(|c| (c.function.name.as_str(), c.function.args()))
            .collect();
        assert_eq!(
            calls,
            [
                ("read_file", json!({"path": "a.txt"})),
                ("get_page", json!({"q": 1}))
            ]
        );
    }

    #[test]
    fn a_line_that_is_not_json_is_an_invalid_response() {
        let mut p = NdjsonParser::default();
        let err = p.push(b"<html>oops</html>\n").unwrap_err();
        assert_eq!(err.code().as_str(), "PROVIDER_INVALID_RESPONSE");
        let mut p = NdjsonParser::default();
        assert!(p.push(b"{\"done\":").unwrap().is_empty());
        assert!(p.finish().is_err());
    }

    #[test]
    fn an_error_line_fails_the_round() {
        let mut round = Round::default();
        let chunk: Chunk = serde_json::from_str(r#"{"error":"out of memory"}"#).unwrap();
        let err = round.absorb(chunk).unwrap_err();
        assert_eq!(err.to_string(), "the Ollama server failed: out of memory");
        assert_eq!(err.code().as_str(), "PROVIDER_FAILED");
    }

    #[test]
    fn statuses_map_to_errors() {
        let c = Client {
            http: Http::new(None).unwrap(),
            endpoint: Endpoint::parse("http://127.0.0.1:1").unwrap(),
            api_key: None,
            model: "m".into(),
        };
        let code = |s| c.status_error(s, "x".into()).code().as_str();
        assert_eq!(code(401), "PROVIDER_AUTH_FAILED");
        assert_eq!(code(403), "PROVIDER_AUTH_FAILED");
        assert_eq!(code(404), "PROVIDER_MODEL_NOT_FOUND");
        assert_eq!(code(429), "PROVIDER_RATE_LIMITED");
        assert_eq!(code(500), "PROVIDER_FAILED");
        let unsupported = c.status_error(400, "llama2 does not support tools".into());
        assert!(is_tools_unsupported(&unsupported));
        assert!(!is_tools_unsupported(
            &c.status_error(500, "does not support tools".into())
        ));
    }
}
