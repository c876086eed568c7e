//! The native host as Chrome runs it, for the cross-process tests: argv[1] =
//! the extension origin, cwd = its folder, length-prefixed JSON frames on
//! stdin/stdout; a stub `pedelec-agent` as the provider.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::*;

/// Built into the host (docs/native-messaging.md).
pub const EXTENSION: &str = "chrome-extension://ekeclpceddngodnkncegoclkkeknaacb/";
pub const MAX_FRAME: usize = 1 << 20;

/// One reassembled message from the host's stdout.
pub struct Received {
    pub value: Value,
    /// The message's serialized text as reassembled.
    pub text: String,
    /// How many frames carried it (more than one: chunked).
    pub frames: usize,
}

pub struct Host {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub incoming: mpsc::UnboundedReceiver<Result<Received, String>>,
    pub stash: VecDeque<Received>,
    pub next_id: u64,
}

/// Reads frames, checks Chrome's 1 MiB bound, reassembles `chunk` frames.
pub async fn read_frames(
    mut stdout: tokio::process::ChildStdout,
    tx: mpsc::UnboundedSender<Result<Received, String>>,
) {
    let mut parts: Vec<String> = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if stdout.read_exact(&mut len).await.is_err() {
            return;
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            let _ = tx.send(Err(format!("frame of {len} bytes exceeds 1 MiB")));
            return;
        }
        let mut body = vec![0; len];
        if stdout.read_exact(&mut body).await.is_err() {
            let _ = tx.send(Err("stdout ended inside a frame".into()));
            return;
        }
        let text = match String::from_utf8(body) {
            Ok(t) => t,
            Err(_) => {
                let _ = tx.send(Err("frame is not UTF-8".into()));
                return;
            }
        };
        let value: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                let _ = tx.send(Err(format!("frame is not JSON: {e}: {text:.200}")));
                return;
            }
        };
        let received = if value["type"] == "chunk" {
            if value["index"].as_u64() != Some(parts.len() as u64) {
                let _ = tx.send(Err(format!("chunk out of order: {}", value["index"])));
                return;
            }
            parts.push(value["data"].as_str().unwrap_or_default().to_string());
            if parts.len() as u64 != value["count"].as_u64().unwrap_or(0) {
                continue;
            }
            let frames = parts.len();
            let text = std::mem::take(&mut parts).concat();
            match serde_json::from_str(&text) {
                Ok(value) => Received {
                    value,
                    text,
                    frames,
                },
                Err(e) => {
                    let _ = tx.send(Err(format!("reassembled message is not JSON: {e}")));
                    return;
                }
            }
        } else {
            Received {
                value,
                text,
                frames: 1,
            }
        };
        if tx.send(Ok(received)).is_err() {
            return;
        }
    }
}

pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

impl Host {
    /// Starts the host exactly as Chrome does.
    pub fn spawn(env: &TestEnv, extension: &str) -> Host {
        Host::spawn_with_args(env, &[extension])
    }

    /// As a browser starts it with `args`: Chrome's `[origin]`, Firefox's
    /// `[manifest path, add-on id]`.
    pub fn spawn_with_args(env: &TestEnv, args: &[&str]) -> Host {
        Host::spawn_reading(env, args, read_frames)
    }

    /// [`Host::spawn_with_args`] with `reader` reading the host's stdout into
    /// `incoming` instead of [`read_frames`] (a page that lags, say).
    pub fn spawn_reading<F, Fut>(env: &TestEnv, args: &[&str], reader: F) -> Host
    where
        F: FnOnce(
            tokio::process::ChildStdout,
            mpsc::UnboundedSender<Result<Received, String>>,
        ) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let exe = env_bin_dir(env).join("pedelec-native-host");
        assert!(
            exe.exists(),
            "{} missing: cargo build --workspace --bins",
            exe.display()
        );
        let mut cmd = env.command(&exe);
        cmd.args(args)
            .current_dir(exe.parent().unwrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(env.root.path().join("host.stderr")).unwrap());
        set_own_process_group(&mut cmd);
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn pedelec-native-host");
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(reader(child.stdout.take().unwrap(), tx));
        Host {
            stdin: child.stdin.take(),
            child,
            incoming,
            stash: VecDeque::new(),
            next_id: 0,
        }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    pub async fn send(&mut self, message: &Value) {
        self.send_raw(&frame(message.to_string().as_bytes())).await;
    }

    pub async fn recv(&mut self) -> Received {
        match tokio::time::timeout(PATIENCE, self.incoming.recv()).await {
            Ok(Some(Ok(r))) => r,
            Ok(Some(Err(e))) => panic!("bad output from the host: {e}"),
            Ok(None) => panic!("host stdout closed"),
            Err(_) => panic!("nothing from the host within the ceiling"),
        }
    }

    /// Reads until the reply with `id`, keeping everything else for later.
    pub async fn reply_to(&mut self, id: &Value) -> Received {
        if let Some(i) = self.stash.iter().position(|r| &r.value["id"] == id) {
            return self.stash.remove(i).unwrap();
        }
        loop {
            let r = self.recv().await;
            if &r.value["id"] == id && r.value.get("ok").is_some() {
                return r;
            }
            self.stash.push_back(r);
        }
    }

    /// Sends a request as the tests' page ([`ORIGIN`]) and returns the whole
    /// reply `{id, ok, …}`.
    pub async fn call(&mut self, kind: &str, payload: Value) -> Value {
        self.call_as(ORIGIN, kind, payload).await
    }

    /// Sends a request with `origin` (another page, or the extension's own
    /// pages) and returns the whole reply `{id, ok, …}`.
    pub async fn call_as(&mut self, origin: &str, kind: &str, payload: Value) -> Value {
        self.next_id += 1;
        let id = json!(format!("r{}", self.next_id));
        self.send(&json!({"id": id, "type": kind, "origin": origin, "payload": payload}))
            .await;
        self.reply_to(&id).await.value
    }

    /// A request that must succeed; returns its result.
    pub async fn ok(&mut self, kind: &str, payload: Value) -> Value {
        let reply = self.call(kind, payload).await;
        assert_eq!(reply["ok"], true, "{kind} failed: {reply}");
        reply["result"].clone()
    }

    /// The error code of a request that must fail.
    pub async fn err(&mut self, kind: &str, payload: Value) -> String {
        let reply = self.call(kind, payload).await;
        assert_eq!(reply["ok"], false, "{kind} should fail: {reply}");
        reply["error"]["code"].as_str().unwrap().to_string()
    }

    /// The next event frame (of any session), stashed ones first.
    pub async fn event(&mut self) -> Received {
        if let Some(i) = self.stash.iter().position(|r| r.value["type"] == "event") {
            return self.stash.remove(i).unwrap();
        }
        loop {
            let r = self.recv().await;
            if r.value["type"] == "event" {
                return r;
            }
            self.stash.push_back(r);
        }
    }

    /// Events of `session` up to and including the one `done` accepts; events
    /// of other sessions stay stashed.
    pub async fn events_until(
        &mut self,
        session: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let pos = self
                .stash
                .iter()
                .position(|r| r.value["type"] == "event" && r.value["sessionId"] == session);
            let r = match pos {
                Some(i) => self.stash.remove(i).unwrap(),
                None => {
                    let r = self.recv().await;
                    if r.value["type"] != "event" || r.value["sessionId"] != session {
                        self.stash.push_back(r);
                        continue;
                    }
                    r
                }
            };
            let finished = done(&r.value["event"]);
            seen.push(r.value);
            if finished {
                return seen;
            }
        }
    }

    /// Closes stdin and waits for the exit; returns the exit code and how long it took.
    pub async fn close_and_wait(&mut self) -> (Option<i32>, Duration) {
        let pid = self.child.id().expect("host still running");
        assert!(alive(pid), "host exited before stdin closed");
        drop(self.stdin.take());
        let start = Instant::now();
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("host did not exit after stdin closed")
            .unwrap();
        (status.code(), start.elapsed())
    }
}

/// The bin dir the env's processes use (a private copy when a stub agent is
/// installed, else target/debug).
pub fn env_bin_dir(env: &TestEnv) -> PathBuf {
    env.extra_env
        .get("PEDELEC_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(bin_dir)
}

/// The stub agent. The user's text picks the behaviour:
/// `@@stream N` prints N chat deltas; `@@two` streams two messages; `@@fail`
/// reports a model error; `@@load D T` streams D deltas with T page tool
/// calls between them (exit 3 if one fails); `@@tool` calls the page's `get_page` tool
/// and reports pedelec-cli's output as its chat; `@@big` calls `big_tool` with the
/// args in `<root>/big.json` (read from stdin: too large for argv).
pub fn agent_script(env: &TestEnv) -> String {
    let cli = bin_dir().join("pedelec-cli").display().to_string();
    let big = env.root.path().join("big.json").display().to_string();
    format!(
        r#"[ "$1" = "--version" ] && echo "pedelec-agent 0.0.0-stub" && exit 0
prompt=$(/bin/cat)
echo '{{"type":"session","id":"stub-session"}}'
report() {{
  esc=$(printf '%s' "$1" | /bin/sed 's/\\/\\\\/g; s/"/\\"/g' | /usr/bin/tr -d '\n')
  printf '{{"type":"chat","text":"%s"}}\n' "$esc"
}}
case "$prompt" in
  *"@@stream "*)
    n=$(printf '%s' "$prompt" | /bin/sed -n 's/.*@@stream \([0-9]*\).*/\1/p' | /usr/bin/tail -n 1)
    /usr/bin/awk -v n="$n" 'BEGIN {{ for (i = 0; i < n; i++) printf "{{\"type\":\"chat_delta\",\"text\":\"d%d \"}}\n", i }}'
    echo '{{"type":"usage","input":10,"output":5}}'
    ;;
  *"@@paced "*)
    set -- $(printf '%s' "$prompt" | /bin/sed -n 's/.*@@paced \([0-9]*\) \([0-9]*\).*/\1 \2/p' | /usr/bin/tail -n 1)
    /usr/bin/awk -v n="$1" -v b="$2" 'BEGIN {{ for (i = 0; i < n; i++) {{ printf "{{\"type\":\"chat_delta\",\"text\":\"d%d \"}}\n", i; if (i % b == b - 1) {{ fflush(); system("sleep 0.01") }} }} }}'
    ;;
  *"@@two"*)
    echo '{{"type":"chat_delta","text":"Hel"}}'
    echo '{{"type":"chat_delta","text":"lo"}}'
    echo '{{"type":"chat","text":"Hello"}}'
    echo '{{"type":"chat_delta","text":"Bye"}}'
    echo '{{"type":"chat","text":"Bye"}}'
    echo '{{"type":"usage","input":10,"output":5}}'
    ;;
  *"@@fail"*)
    echo '{{"type":"error","message":"the model is not loaded","details":{{"model":"llama3.2"}}}}'
    exit 1
    ;;
  *"@@load "*)
    set -- $(printf '%s' "$prompt" | /bin/sed -n 's/.*@@load \([0-9]*\) \([0-9]*\).*/\1 \2/p' | /usr/bin/tail -n 1)
    per=$(( $1 / $2 )); i=0; k=0
    while [ $k -lt $2 ]; do
      /usr/bin/awk -v s=$i -v n=$per 'BEGIN {{ for (j = s; j < s + n; j++) printf "{{\"type\":\"chat_delta\",\"text\":\"d%d \"}}\n", j }}'
      i=$((i + per))
      {cli} --thread-id "$PEDELEC_THREAD_ID" tool-call get_page "{{\"q\":\"$k\"}}" > /dev/null || exit 3
      k=$((k + 1))
    done
    echo '{{"type":"usage","input":10,"output":5}}'
    ;;
  *"@@wait "*)
    file=$(printf '%s' "$prompt" | /bin/sed -n 's/.*@@wait \([^ ]*\).*/\1/p' | /usr/bin/tail -n 1)
    /usr/bin/env > "$file.tmp" && /bin/mv "$file.tmp" "$file"
    /bin/sleep 120 &
    wait
    ;;
  *"@@tool"*)
    report "$({cli} --thread-id "$PEDELEC_THREAD_ID" tool-call get_page '{{"q":"title"}}')"
    ;;
  *"@@big"*)
    out=$({cli} --thread-id "$PEDELEC_THREAD_ID" tool-call big_tool - < {big})
    report "$(printf '%s' "$out" | /usr/bin/head -c 200)"
    ;;
  *)
    echo '{{"type":"chat","text":"hello"}}'
    ;;
esac"#
    )
}

pub fn skills() -> Value {
    json!({
        "guidance": "Use get_page for page context.",
        "tools": [
            {"name": "get_page", "description": "Read the page.",
             "argsSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
            {"name": "big_tool", "description": "Takes a large blob.",
             "argsSchema": {"type": "object", "properties": {"blob": {"type": "string"}}, "required": ["blob"]}}
        ]
    })
}

/// Services up with the stub agent and an Ollama model configured.
pub async fn services(env: &mut TestEnv) -> Launcher {
    let script = agent_script(env);
    env.install_stub_agent(&script);
    let launcher = env.up().await;
    env.update_settings(settings_with_default_models(&[("ollama", "llama3.2")]))
        .await;
    launcher
}

/// create_session (ollama, with the tools) + attach; returns the session id.
pub async fn open_session(host: &mut Host) -> String {
    let created = host
        .ok(
            "create_session",
            json!({"provider": "ollama", "skills": skills(), "autoEndOnDisconnect": false}),
        )
        .await;
    let id = created["sessionId"].as_str().unwrap().to_string();
    assert_eq!(created["provider"], "ollama");
    assert_eq!(created["snapshot"]["status"], "idle");
    let attached = host.ok("attach", json!({"sessionId": id})).await;
    assert_eq!(attached["sessionId"], id.as_str());
    assert_eq!(attached["snapshot"]["status"], "idle");
    id
}

pub fn finished(e: &Value) -> bool {
    e["type"] == "operation_finished"
}

pub fn frame_kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let ev = &e["event"];
            match ev["type"].as_str().unwrap() {
                "status" => format!("status:{}", ev["status"].as_str().unwrap()),
                "operation_finished" => {
                    format!("operation_finished:{}", ev["outcome"].as_str().unwrap())
                }
                other => other.to_string(),
            }
        })
        .collect()
}

pub fn assert_consecutive(events: &[Value]) {
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    for w in seqs.windows(2) {
        assert_eq!(w[1], w[0] + 1, "seqs not consecutive: {seqs:?}");
    }
}

pub fn frame_delta_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["event"]["type"] == "chat_delta")
        .map(|e| e["event"]["text"].as_str().unwrap())
        .collect()
}

pub fn expected_deltas(n: usize) -> String {
    (0..n).map(|i| format!("d{i} ")).collect()
}
