//! A client of `pedelec-native-host` speaking Chrome's framing over its stdio,
//! as the extension does: requests matched to replies by id, events handed
//! to a channel with their arrival time, tool requests answered at once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};

use crate::env::{BenchEnv, EXTENSION, ORIGIN, PATIENCE, mono_ns, register_group};

/// An event frame as read from the host's stdout, and when (CLOCK_MONOTONIC
/// ns). The body stays bytes until a consumer looks, and then only the fields
/// it needs are parsed: a burst is 200,000 frames on two shared cores, and a
/// `Value` tree per frame made this harness a bigger consumer of CPU than the
/// host it measures.
pub struct Incoming {
    pub at_ns: u64,
    pub body: Vec<u8>,
}

impl Incoming {
    /// The fields of the frame the delta check reads.
    pub fn frame(&self) -> Result<EventFrame<'_>, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("event frame: {e}"))
    }

    /// The frame as text, for error messages.
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }
}

/// `{sessionId, seq, at, event:{type, text?, outcome?}}` of an event frame.
#[derive(Deserialize)]
pub struct EventFrame<'a> {
    #[serde(rename = "sessionId", default, borrow)]
    pub session_id: Cow<'a, str>,
    #[serde(default)]
    pub seq: u64,
    /// A merged chat delta's first seq (docs/native-messaging.md §4).
    #[serde(rename = "firstSeq", default)]
    pub first_seq: Option<u64>,
    /// SessionService's emit, wall-clock ms.
    #[serde(default)]
    pub at: Option<f64>,
    #[serde(default, borrow)]
    pub event: Option<EventBody<'a>>,
}

#[derive(Deserialize)]
pub struct EventBody<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub outcome: Option<Cow<'a, str>>,
}

/// Just enough of any frame to tell what it is.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    ok: Option<bool>,
    #[serde(default, borrow)]
    event: Option<HeadEvent<'a>>,
}

#[derive(Deserialize)]
struct HeadEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
}

struct Shared {
    /// None once closed.
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    /// Answer every tool_request event with a submit_tool_result right away.
    auto_answer: AtomicBool,
    answers_sent: AtomicU64,
    /// Replies to the automatic answers that were not ok.
    answers_failed: AtomicU64,
    protocol_error: Mutex<Option<String>>,
    /// Arrival time of each tool_request answered automatically.
    tool_requests: Stamps,
}

/// Arrival times (CLOCK_MONOTONIC ns) of tool_request events at the answering client.
pub type Stamps = Arc<Mutex<Vec<u64>>>;

pub struct Host {
    pub child: Child,
    pub pid: u32,
    shared: Arc<Shared>,
    pub events: mpsc::UnboundedReceiver<Incoming>,
    next_id: u64,
}

pub fn frame(value: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(value).expect("serialize");
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

impl Host {
    /// Starts the host as Chrome does: argv[1] the extension origin, cwd its folder.
    pub fn spawn(env: &BenchEnv) -> Result<Host, String> {
        let mut cmd = env.command("pedelec-native-host");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(env.root.join("host.stderr"))
            .map_err(|e| e.to_string())?;
        cmd.arg(EXTENSION)
            .current_dir(&env.bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn pedelec-native-host: {e}"))?;
        let pid = child.id().unwrap_or(0);
        register_group(pid);
        let shared = Arc::new(Shared {
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            pending: Mutex::new(HashMap::new()),
            auto_answer: AtomicBool::new(false),
            answers_sent: AtomicU64::new(0),
            answers_failed: AtomicU64::new(0),
            protocol_error: Mutex::new(None),
            tool_requests: Stamps::default(),
        });
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(read_frames(
            child.stdout.take().unwrap(),
            shared.clone(),
            tx,
        ));
        Ok(Host {
            child,
            pid,
            shared,
            events,
            next_id: 1,
        })
    }

    pub fn set_auto_answer(&self, on: bool) {
        self.shared.auto_answer.store(on, Ordering::SeqCst);
    }

    pub fn stamps(&self) -> Stamps {
        self.shared.tool_requests.clone()
    }

    pub fn answers(&self) -> (u64, u64) {
        (
            self.shared.answers_sent.load(Ordering::SeqCst),
            self.shared.answers_failed.load(Ordering::SeqCst),
        )
    }

    pub fn protocol_error(&self) -> Option<String> {
        self.shared.protocol_error.lock().unwrap().clone()
    }

    /// Sends a request and waits for its reply; Err on `ok:false` or no reply.
    pub async fn call(&mut self, kind: &str, payload: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let (tx, rx) = oneshot::channel();
        self.shared.pending.lock().unwrap().insert(id, tx);
        let bytes = frame(&json!({"id": id, "type": kind, "origin": ORIGIN, "payload": payload}));
        {
            let mut stdin = self.shared.stdin.lock().await;
            stdin
                .as_mut()
                .ok_or("host stdin closed")?
                .write_all(&bytes)
                .await
                .map_err(|e| format!("write to host: {e}"))?;
        }
        let reply = match tokio::time::timeout(PATIENCE, rx).await {
            Ok(Ok(v)) => v,
            Ok(Err(_)) => {
                return Err(format!(
                    "host closed its stdout before answering {kind}{}",
                    self.protocol_error()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ));
            }
            Err(_) => return Err(format!("no reply to {kind} within {PATIENCE:?}")),
        };
        if reply["ok"] == true {
            Ok(reply["result"].clone())
        } else {
            Err(format!("{kind}: {}", reply["error"]))
        }
    }

    /// The next event (bounded wait).
    pub async fn event(&mut self) -> Result<Incoming, String> {
        match tokio::time::timeout(PATIENCE, self.events.recv()).await {
            Ok(Some(e)) => Ok(e),
            Ok(None) => Err("host stdout closed".into()),
            Err(_) => Err("no event within the ceiling".into()),
        }
    }

    /// Drops events already queued (from earlier phases).
    pub fn drain(&mut self) {
        while self.events.try_recv().is_ok() {}
    }

    /// Closes stdin and waits (bounded) for the host to exit.
    pub async fn close(mut self) {
        // Dropping the handle closes the pipe: the host sees EOF.
        self.shared.stdin.lock().await.take();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = self.child.kill().await;
    }
}

async fn read_frames(
    stdout: ChildStdout,
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Incoming>,
) {
    let mut r = BufReader::with_capacity(1 << 18, stdout);
    let mut parts: Vec<String> = Vec::new();
    let mut answer_id = 0u64;
    let fail = |msg: String| {
        *shared.protocol_error.lock().unwrap() = Some(msg);
    };
    loop {
        let mut len = [0u8; 4];
        if r.read_exact(&mut len).await.is_err() {
            break;
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > 1 << 20 {
            fail(format!("frame of {len} bytes exceeds Chrome's 1 MiB"));
            break;
        }
        let mut body = vec![0; len];
        if r.read_exact(&mut body).await.is_err() {
            fail("stdout ended inside a frame".into());
            break;
        }
        let at_ns = mono_ns();
        let plain_event = match serde_json::from_slice::<Head>(&body) {
            Ok(head) => {
                head.ok.is_none()
                    && head.kind.as_deref() != Some("chunk")
                    && head.event.is_none_or(|e| e.kind != "tool_request")
            }
            Err(e) => {
                fail(format!("frame is not JSON: {e}"));
                break;
            }
        };
        if plain_event {
            if tx.send(Incoming { at_ns, body }).is_err() {
                break;
            }
            continue;
        }
        let mut value: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                fail(format!("frame is not JSON: {e}"));
                break;
            }
        };
        let mut body = Some(body);
        if value["type"] == "chunk" {
            parts.push(value["data"].as_str().unwrap_or_default().to_string());
            if parts.len() as u64 != value["count"].as_u64().unwrap_or(0) {
                continue;
            }
            match serde_json::from_str(&std::mem::take(&mut parts).concat()) {
                Ok(v) => {
                    value = v;
                    body = None;
                }
                Err(e) => {
                    fail(format!("chunks do not reassemble: {e}"));
                    break;
                }
            }
        }
        if value.get("ok").is_some() {
            let waiter = value["id"]
                .as_u64()
                .and_then(|id| shared.pending.lock().unwrap().remove(&id));
            match waiter {
                Some(w) => {
                    let _ = w.send(value);
                }
                None if value["ok"] != true => {
                    shared.answers_failed.fetch_add(1, Ordering::SeqCst);
                }
                None => {}
            }
            continue;
        }
        if value["type"] == "event"
            && value["event"]["type"] == "tool_request"
            && shared.auto_answer.load(Ordering::SeqCst)
        {
            answer_id += 1;
            shared.tool_requests.lock().unwrap().push(at_ns);
            let answer = frame(&json!({
                "id": format!("answer-{answer_id}"),
                "type": "submit_tool_result",
                "origin": ORIGIN,
                "payload": {
                    "sessionId": value["sessionId"],
                    "toolRequestId": value["event"]["toolRequestId"],
                    "result": {"echo": value["event"]["args"]["q"]},
                },
            }));
            let mut stdin = shared.stdin.lock().await;
            if let Some(stdin) = stdin.as_mut()
                && stdin.write_all(&answer).await.is_ok()
            {
                shared.answers_sent.fetch_add(1, Ordering::SeqCst);
            }
        }
        let body = body.unwrap_or_else(|| serde_json::to_vec(&value).expect("serialize"));
        if tx.send(Incoming { at_ns, body }).is_err() {
            break;
        }
    }
    // Wake every waiter: their sender is dropped with the map entries.
    shared.pending.lock().unwrap().clear();
}
