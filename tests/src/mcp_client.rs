//! A scripted MCP client on `pedelec-cli mcp`'s stdio, playing the agent CLI:
//! newline-delimited JSON-RPC 2.0, as codex, Claude Code and opencode speak it.
//! Written by hand (not with an SDK) so the tests see exactly the bytes an
//! agent CLI would, and so the benchmark measures the server, not a client.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, Command};

use crate::{PATIENCE, bin};

/// The environment an agent CLI forwards to its MCP server.
#[derive(Clone, Debug)]
pub struct McpEnv {
    pub thread_id: String,
    pub token: String,
    pub runtime_dir: String,
}

pub struct McpClient {
    child: Child,
    stdin: Box<dyn AsyncWrite + Send + Unpin>,
    lines: Lines<BufReader<Box<dyn AsyncRead + Send + Unpin>>>,
    next_id: u64,
    /// Notifications read while waiting for a response.
    pub notifications: VecDeque<Value>,
}

impl McpClient {
    /// Starts `pedelec-cli mcp` with only `env` (as codex's `env_vars` gives it).
    pub fn spawn(env: &McpEnv) -> McpClient {
        McpClient::spawn_program(&bin("pedelec-cli"), env)
    }

    /// [`McpClient::spawn`] with a given `pedelec-cli` (the benchmark's build).
    pub fn spawn_program(program: &std::path::Path, env: &McpEnv) -> McpClient {
        let mut cmd = McpClient::command(program, env);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn pedelec-cli mcp");
        let stdin = Box::new(child.stdin.take().unwrap());
        let stdout = Box::new(child.stdout.take().unwrap());
        McpClient::new(child, stdin, stdout)
    }

    /// [`McpClient::spawn`] with one end of a Unix socket pair as the
    /// server's stdin and stdout, as Node's child processes (claude's) get.
    pub fn spawn_over_socket(env: &McpEnv) -> McpClient {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut cmd = McpClient::command(&bin("pedelec-cli"), env);
        let their_stdin = OwnedFd::from(theirs.try_clone().unwrap());
        cmd.stdin(Stdio::from(their_stdin))
            .stdout(Stdio::from(OwnedFd::from(theirs)));
        let child = cmd.spawn().expect("spawn pedelec-cli mcp");
        ours.set_nonblocking(true).unwrap();
        let (read, write) = tokio::net::UnixStream::from_std(ours).unwrap().into_split();
        McpClient::new(child, Box::new(write), Box::new(read))
    }

    fn command(program: &std::path::Path, env: &McpEnv) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PEDELEC_THREAD_ID", &env.thread_id)
            .env("PEDELEC_TOOL_TOKEN", &env.token)
            .env("PEDELEC_RUNTIME_DIR", &env.runtime_dir)
            .arg("mcp")
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        cmd
    }

    fn new(
        child: Child,
        stdin: Box<dyn AsyncWrite + Send + Unpin>,
        stdout: Box<dyn AsyncRead + Send + Unpin>,
    ) -> McpClient {
        McpClient {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 1,
            notifications: VecDeque::new(),
        }
    }

    /// Spawns and does the handshake: `initialize`, then `notifications/initialized`.
    pub async fn start(env: &McpEnv) -> (McpClient, Value) {
        McpClient::handshake(McpClient::spawn(env)).await
    }

    /// `initialize` and `notifications/initialized` on a spawned client.
    pub async fn handshake(mut client: McpClient) -> (McpClient, Value) {
        let init = client
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "pedelec-tests", "version": "0"}}),
            )
            .await;
        client.notify("notifications/initialized", json!({})).await;
        (client, init)
    }

    pub async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Sends a request and returns its id without waiting.
    pub async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// The next message from the server (a ceiling of [`PATIENCE`]).
    pub async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
            .await
            .expect("pedelec-cli mcp answered in time")
            .expect("read stdout")
            .expect("pedelec-cli mcp closed its stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// The response to request `id`; notifications met on the way are kept.
    pub async fn response(&mut self, id: u64) -> Value {
        loop {
            let msg = self.read().await;
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return msg;
            }
            self.notifications.push_back(msg);
        }
    }

    /// A request's whole response (`result` or `error`).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.response(id).await
    }

    /// `tools/call`'s result object.
    pub async fn call(&mut self, tool: &str, args: Value) -> Value {
        let resp = self
            .request("tools/call", json!({"name": tool, "arguments": args}))
            .await;
        resp.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call {tool} got no result: {resp}"))
    }

    /// Closes stdin (what an agent CLI does at its end) and waits for the exit.
    pub async fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin);
        tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("pedelec-cli mcp exits on stdin EOF")
            .unwrap()
    }
}

/// The text of a tool result's single text block.
pub fn result_text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {result}"))
}
