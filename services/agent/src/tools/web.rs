//! Web search through Tavily (`POST /search`, basic depth, at most 5
//! results), offered only when a Tavily key is configured.

use serde_json::{Value as Json, json};

use pedelec_common::Code;

use crate::error::AgentError;
use crate::http::{self, Endpoint, Http, HttpError};

pub const DEFAULT_ENDPOINT: &str = "https://api.tavily.com";
pub const MAX_RESULTS: u32 = 5;
const MAX_BODY: usize = 1 << 20;
/// Characters of each result's content passed to the model.
const MAX_CONTENT: usize = 2000;

pub struct WebSearch {
    pub http: Http,
    pub endpoint: String,
    pub key: pedelec_common::secret::Secret,
}

impl WebSearch {
    pub async fn search(&self, query: &str) -> Result<Json, AgentError> {
        let fail = |m: String| {
            AgentError::tool(Code::TOOL_HANDLER_ERROR, format!("web search failed: {m}"))
        };
        if query.trim().is_empty() {
            return Err(AgentError::tool(Code::TOOL_ARGS_INVALID, "query: required"));
        }
        let endpoint = Endpoint::parse(&self.endpoint).map_err(fail)?;
        let body = json!({
            "query": query,
            "search_depth": "basic",
            "max_results": MAX_RESULTS,
        });
        let body = serde_json::to_vec(&body).map_err(|e| fail(e.to_string()))?;
        let mut resp = self
            .http
            .post_json(&endpoint, "/search", Some(self.key.expose()), body)
            .await
            .map_err(|e| match e {
                HttpError::Connect(r) | HttpError::Protocol(r) => fail(r),
                e @ HttpError::KeyOverPlainHttp(_) => fail(e.to_string()),
            })?;
        let status = resp.status().as_u16();
        let bytes = http::read_body(resp.body_mut(), MAX_BODY)
            .await
            .map_err(|e| fail(e.to_string()))?;
        if !(200..300).contains(&status) {
            return Err(fail(format!(
                "HTTP {status}: {}",
                http::error_message(&bytes)
            )));
        }
        let doc: Json =
            serde_json::from_slice(&bytes).map_err(|e| fail(format!("not JSON: {e}")))?;
        let results: Vec<Json> = doc["results"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .take(MAX_RESULTS as usize)
            .map(|r| {
                let content: String = r["content"]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .take(MAX_CONTENT)
                    .collect();
                json!({"title": r["title"], "url": r["url"], "content": content})
            })
            .collect();
        Ok(json!({"query": query, "results": results}))
    }
}
