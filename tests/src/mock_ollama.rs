//! A mock Ollama server (and Tavily endpoint) on 127.0.0.1:0 for pedelec-agent:
//! `POST /api/chat` answers what the test's script says (a streamed NDJSON
//! chat, an HTTP error status, or a body that is not NDJSON), `GET /api/tags`
//! lists one model, `POST /search` answers like Tavily. Every request is
//! recorded with its headers and JSON body.
//!
//! Plain HTTP/1.1 over tokio, one request per connection and the body
//! delimited by closing it, so each chunk goes out as its own write and
//! the client sees the stream as a real server streams it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    /// The body as JSON (Null when empty or not JSON).
    pub body: Json,
}

impl Recorded {
    /// The chat messages of an `/api/chat` request.
    pub fn messages(&self) -> Vec<Json> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|d| d["function"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The content of the last message (the user's text, or a tool's answer).
    pub fn last_content(&self) -> String {
        self.messages()
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    /// The role of the last message.
    pub fn last_role(&self) -> String {
        self.messages()
            .last()
            .and_then(|m| m["role"].as_str())
            .unwrap_or_default()
            .to_string()
    }
}

/// What `/api/chat` answers.
pub enum Reply {
    /// 200 with these NDJSON lines, each written (and flushed) on its own.
    Stream(Vec<Json>),
    /// An error status with a JSON `{"error": message}` body.
    Status(u16, String),
    /// 200 with this body as is (for invalid responses).
    Raw(String),
}

pub type Script = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

pub struct MockOllama {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockOllama {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Tavily key the mock accepts on `/search`.
pub const TAVILY_KEY: &str = "tvly-test-key";

impl MockOllama {
    /// Serves `script` for `/api/chat` until dropped.
    pub async fn start(script: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> MockOllama {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::new(script);
        let rec = Arc::clone(&recorded);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (rec, script) = (Arc::clone(&rec), Arc::clone(&script));
                tokio::spawn(async move {
                    let _ = serve(stream, rec, script).await;
                });
            }
        });
        MockOllama {
            url,
            recorded,
            task,
        }
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().unwrap().clone()
    }

    /// The `/api/chat` requests so far.
    pub fn chats(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == "/api/chat")
            .collect()
    }
}

async fn serve(
    mut stream: TcpStream,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    script: Script,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_string();
    let path = first.next().unwrap_or_default().to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let req = Recorded {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Json::Null),
    };
    recorded.lock().unwrap().push(req.clone());
    match req.path.as_str() {
        "/api/chat" => match script(&req) {
            Reply::Stream(lines) => {
                head_ok(&mut stream, "application/x-ndjson").await?;
                for line in lines {
                    let mut text = line.to_string();
                    text.push('\n');
                    stream.write_all(text.as_bytes()).await?;
                    stream.flush().await?;
                }
            }
            Reply::Status(status, message) => {
                respond(&mut stream, status, &json!({ "error": message })).await?
            }
            Reply::Raw(text) => {
                head_ok(&mut stream, "text/html").await?;
                stream.write_all(text.as_bytes()).await?;
            }
        },
        "/api/tags" => {
            let tags = json!({"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest"}]});
            respond(&mut stream, 200, &tags).await?
        }
        "/search" => {
            let authorized = req.headers.get("authorization").map(String::as_str)
                == Some(&format!("Bearer {TAVILY_KEY}")[..]);
            if authorized {
                let q = req.body["query"].as_str().unwrap_or_default();
                let results = json!({"query": q, "results": [
                    {"title": "Pedelec", "url": "https://example.org/pedelec", "content": format!("About {q}."), "score": 0.9}
                ]});
                respond(&mut stream, 200, &results).await?
            } else {
                respond(
                    &mut stream,
                    401,
                    &json!({"detail": {"error": "Unauthorized"}}),
                )
                .await?
            }
        }
        _ => respond(&mut stream, 404, &json!({"error": "not found"})).await?,
    }
    stream.shutdown().await
}

async fn head_ok(stream: &mut TcpStream, content_type: &str) -> std::io::Result<()> {
    let head =
        format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await
}

async fn respond(stream: &mut TcpStream, status: u16, body: &Json) -> std::io::Result<()> {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await
}

/// A streamed text answer: one chunk per piece, then `done` with the token counts.
pub fn text_reply(pieces: &[&str], prompt_tokens: u64, eval_tokens: u64) -> Reply {
    let mut lines: Vec<Json> = pieces
        .iter()
        .map(|p| json!({"model": "m", "message": {"role": "assistant", "content": p}, "done": false}))
        .collect();
    lines.push(done(prompt_tokens, eval_tokens));
    Reply::Stream(lines)
}

/// A streamed answer asking for one tool call.
pub fn tool_call_reply(name: &str, arguments: Json) -> Reply {
    Reply::Stream(vec![
        json!({"model": "m", "message": {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}, "done": false}),
        done(5, 1),
    ])
}

/// The final chunk of a stream.
pub fn done(prompt_tokens: u64, eval_tokens: u64) -> Json {
    json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true,
        "done_reason": "stop", "prompt_eval_count": prompt_tokens, "eval_count": eval_tokens})
}
