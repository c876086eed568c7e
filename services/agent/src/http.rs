//! A minimal HTTP/1.1 client over TCP (hyper 1): one connection per request,
//! plain `http://` only. The Ollama server is local in the common case; an
//! `https://` endpoint is refused with a clear message (see docs/agent.md).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed `http://host[:port][/base]` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as configured, for messages.
    pub url: String,
    host: String,
    port: u16,
    /// `host[:port]` as sent in the Host header.
    authority: String,
    /// The path prefix, without a trailing slash ("" for none).
    base_path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(format!(
                "{url}: https endpoints are not supported by this build of pedelec-agent; use an http:// endpoint (for example a local Ollama, or a TLS-terminating proxy on 127.0.0.1)"
            ));
        }
        let rest = lower
            .strip_prefix("http://")
            .map(|_| &url["http://".len()..])
            .ok_or_else(|| format!("{url}: not an http:// URL"))?;
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let authority = authority.rsplit('@').next().unwrap_or_default();
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{url}: unclosed IPv6 address"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| format!("{url}: bad port {p:?}"))?,
            None => 80,
        };
        let path = path.split(['?', '#']).next().unwrap_or_default();
        Ok(Endpoint {
            url: url.to_string(),
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            base_path: path.trim_end_matches('/').to_string(),
        })
    }

    /// The request target for `path` (which starts with `/`).
    pub fn target(&self, path: &str) -> String {
        format!("{}{path}", self.base_path)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Nothing answered (refused, no route, timeout): the server is unreachable.
    #[error("{0}")]
    Connect(String),
    /// The connection broke or the server spoke something other than HTTP.
    #[error("{0}")]
    Protocol(String),
}

/// POSTs a JSON body; the response body is left to stream.
pub async fn post_json(
    endpoint: &Endpoint,
    path: &str,
    bearer: Option<&str>,
    body: Vec<u8>,
) -> Result<Response<Incoming>, HttpError> {
    let connect = TcpStream::connect((endpoint.host.as_str(), endpoint.port));
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(HttpError::Connect(e.to_string())),
        Err(_) => {
            return Err(HttpError::Connect(format!(
                "no connection within {}s",
                CONNECT_TIMEOUT.as_secs()
            )));
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| HttpError::Protocol(e.to_string()))?;
    // The connection task ends when the response body is done or dropped.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::post(endpoint.target(path))
        .header(hyper::header::HOST, &endpoint.authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(
            hyper::header::ACCEPT,
            "application/x-ndjson, application/json",
        );
    if let Some(key) = bearer {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| HttpError::Protocol(format!("cannot build the request: {e}")))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| HttpError::Protocol(e.to_string()))
}

/// Reads a whole (error or small) body, keeping at most `limit` bytes.
pub async fn read_body(body: &mut Incoming, limit: usize) -> Result<Vec<u8>, HttpError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| HttpError::Protocol(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            let room = limit.saturating_sub(out.len());
            out.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    Ok(out)
}

/// The `error` member of a JSON error body (Ollama's and Tavily's shape), else
/// the body's text, shortened.
pub fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        for key in ["error", "detail", "message"] {
            match v.get(key) {
                Some(serde_json::Value::String(s)) => return s.clone(),
                Some(serde_json::Value::Object(o)) => {
                    if let Some(s) = o.get("error").and_then(|e| e.as_str()) {
                        return s.to_string();
                    }
                }
                _ => {}
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("http://127.0.0.1:11434").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 11434));
        assert_eq!(e.target("/api/chat"), "/api/chat");
        let e = Endpoint::parse("http://ollama.lan/proxy/").unwrap();
        assert_eq!((e.port, e.authority.as_str()), (80, "ollama.lan"));
        assert_eq!(e.target("/api/chat"), "/proxy/api/chat");
        let e = Endpoint::parse("http://[::1]:8080").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 8080));
        for bad in ["ftp://x", "http://", "http://h:port", "localhost:11434"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let https = Endpoint::parse("https://ollama.com").unwrap_err();
        assert!(
            https.contains("https endpoints are not supported"),
            "{https}"
        );
    }

    #[test]
    fn error_messages_come_from_the_body() {
        assert_eq!(
            error_message(br#"{"error":"model \"x\" not found"}"#),
            "model \"x\" not found"
        );
        assert_eq!(
            error_message(br#"{"detail":{"error":"Unauthorized"}}"#),
            "Unauthorized"
        );
        assert_eq!(error_message(b"  plain text\n"), "plain text");
        assert_eq!(error_message(b""), "(empty body)");
    }
}
