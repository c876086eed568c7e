//! A turn as one CLI process (`codex exec --json`, `claude -p`, …): spawned
//! in its own process group with the turn's environment, its stdout decoded
//! by the adapters into events, its stderr's tail kept for a failure's
//! details, and its group ended once the CLI has exited.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use pb::provider_event::Event as Out;
use pedelec_common::Code;
use pedelec_common::process::{self, failed_status};
use pedelec_proto::v1 as pb;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::time::Instant;

use super::events::{
    SEE_THE_LOG, STDERR_TAIL_KEY, Sink, Stop, error_event, exited, provider_error, refuse,
};
use super::job::Job;
use super::terminate::Group;
use crate::adapters::{Adapter, Decoder, Event, MAX_LINE};
use crate::launch::{AgentProcs, read_tail};

/// Linux's limit on one argv string (MAX_ARG_STRLEN, 32 pages), NUL included.
pub const MAX_ARG_BYTES: usize = 32 * 4096;

// A prompt on argv (`-p=<prompt>`) stays well within one argument.
const _: () = assert!(crate::adapters::MAX_ARGV_PROMPT + 16 < MAX_ARG_BYTES);

/// Bytes of stderr kept for a failure's details.
pub(super) const STDERR_TAIL: usize = 8 * 1024;

const READ_CHUNK: usize = 64 * 1024;

/// After the provider exits, how long its stdout may stay open (a leftover
/// background child holding the pipe) before the rest of the group is killed.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

impl Job {
    /// Runs the turn as one CLI process: its stdout decoded into events
    /// until it exits, its stderr's tail kept for a failure's details.
    pub(super) async fn run_cli(self, program: &Path, mut sink: Sink) {
        let line = self.provider.command(&self.turn);
        let (mut cmd, mut procs) = self.agent_command(program, &line.cwd).await;
        cmd.args(&line.args)
            .stdin(if line.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The CLI's own variables (e.g. opencode's config); never PATH.
        cmd.envs(line.env.iter().map(|(k, v)| (k, v)));
        let mut child = match process::spawn(&mut cmd).await {
            Ok(c) => c,
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => {
                let message = format!(
                    "could not start {}: its command line and environment are over the system's limit ({})",
                    self.spec.program,
                    io_reason(&e)
                );
                return refuse(&mut sink, Code::MESSAGE_TOO_LARGE, message).await;
            }
            Err(e) => {
                // The page hears what failed, not where (the workspace, the
                // program's path): those go to the log.
                tracing::warn!(session = %self.session_id, program = %program.display(), cwd = %line.cwd.display(), "could not start the agent: {e}");
                let message = format!(
                    "could not start {}: {}; {SEE_THE_LOG}",
                    self.spec.program,
                    io_reason(&e)
                );
                return refuse(&mut sink, Code::PROVIDER_FAILED, message).await;
            }
        };
        let pid = child.id().expect("a just-spawned child has a pid");
        procs.started(pid as i32);
        let record = self.records.as_ref().and_then(|r| r.write(&procs));
        let mut group = Group::new(procs, record);
        self.pgid.store(pid as i32, Ordering::Release);
        tracing::debug!(session = %self.session_id, provider = self.spec.code, pid, "turn started");

        if let (Some(mut stdin), Some(prompt)) = (child.stdin.take(), line.stdin) {
            tokio::spawn(async move {
                // A CLI may exit without reading its stdin; that is its business.
                let _ = stdin.write_all(prompt.as_bytes()).await;
            });
        }
        let stderr = tokio::spawn(read_tail(child.stderr.take(), STDERR_TAIL));
        let stdout = child.stdout.take();

        let mut run = TurnState {
            sink,
            decoder: Decoder::new(self.provider),
            dropped_logged: 0,
            had_chat: false,
            error: None,
        };
        let outcome = run.supervise(&mut child, stdout, &group.procs).await;
        let status = match outcome {
            Ok(status) => status,
            Err(stop) => {
                let status = group.terminate(&mut child, self.grace).await;
                stderr.abort();
                tracing::debug!(session = %self.session_id, pid, ?stop, ?status, "turn stopped");
                if stop == Stop::Cancelled {
                    run.sink.send_final(exited(status)).await;
                }
                return;
            }
        };
        // The leader is gone; members it left behind (no longer needed, they
        // would outlive the turn) go too.
        group.reap_leftovers(self.grace).await;
        let stderr_tail = tokio::time::timeout(DRAIN_AFTER_EXIT, stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        if !status.success() && !stderr_tail.trim().is_empty() {
            // The agent's own words stay here: the page hears only how it ended.
            tracing::warn!(
                session = %self.session_id,
                provider = self.spec.code,
                "{} {}; the end of its stderr:\n{}",
                self.spec.program,
                process::ended(status),
                stderr_tail.trim_end()
            );
        }
        let error = run.final_error(self.spec.program, status, &stderr_tail);
        if let Some(error) = error
            && run.sink.send(error).await.is_err()
        {
            return;
        }
        let _ = run.sink.send(exited(status)).await;
    }
}

/// The state of a turn while its process runs.
struct TurnState {
    sink: Sink,
    decoder: Decoder,
    dropped_logged: u64,
    had_chat: bool,
    /// The adapter's error, held until exit so the exit code and stderr can
    /// join its details (SessionService acts on it only at the end anyway).
    error: Option<(String, Option<Json>, Option<Code>)>,
}

impl TurnState {
    /// Forwards stdout until the process has exited and its stdout is drained.
    async fn supervise(
        &mut self,
        child: &mut Child,
        stdout: Option<tokio::process::ChildStdout>,
        procs: &AgentProcs,
    ) -> Result<ExitStatus, Stop> {
        let pid = procs.pgid() as u32;
        self.sink
            .send(Out::Started(pb::TurnStarted { pid }))
            .await?;
        let mut stdout = stdout;
        let mut buf = vec![0u8; READ_CHUNK];
        let mut status: Option<ExitStatus> = None;
        // Armed once the process has exited.
        let drain_deadline = tokio::time::sleep(Duration::from_secs(365 * 86400));
        tokio::pin!(drain_deadline);
        loop {
            if stdout.is_none()
                && let Some(status) = status
            {
                return Ok(status);
            }
            tokio::select! {
                read = read_some(&mut stdout, &mut buf), if stdout.is_some() => {
                    let events = match read {
                        Ok(n) if n > 0 => self.decoder.push(&buf[..n]),
                        _ => {
                            stdout = None;
                            self.decoder.finish()
                        }
                    };
                    self.forward(events).await?;
                }
                exit = child.wait(), if status.is_none() => {
                    status = Some(exit.unwrap_or_else(|e| {
                        tracing::warn!(pid, "waiting for the provider failed: {e}");
                        failed_status()
                    }));
                    drain_deadline.as_mut().reset(Instant::now() + DRAIN_AFTER_EXIT);
                }
                () = &mut drain_deadline, if status.is_some() => {
                    // Something it started still holds stdout; end it.
                    procs.kill();
                    stdout = None;
                    let events = self.decoder.finish();
                    self.forward(events).await?;
                }
                stop = self.sink.stopped() => return Err(stop),
            }
        }
    }

    async fn forward(&mut self, events: Vec<Event>) -> Result<(), Stop> {
        let dropped = self.decoder.dropped_lines();
        if dropped > self.dropped_logged {
            tracing::warn!(
                dropped,
                "provider printed a line over {MAX_LINE} bytes; it was discarded"
            );
            self.dropped_logged = dropped;
            // The client hears of it at once; the turn goes on, since such a
            // line is usually an echo of a large tool output, not the answer.
            let warning = provider_error(
                Code::MESSAGE_TOO_LARGE,
                format!("the agent printed a line over {MAX_LINE} bytes; it was dropped"),
                Some(&json!({ "droppedLines": dropped })),
            );
            self.sink.send(Out::Warning(warning)).await?;
        }
        for event in events {
            let out = match event {
                Event::SessionId(id) => Out::ProviderSessionId(pb::ProviderSessionId { id }),
                Event::ChatDelta(text) => {
                    self.had_chat = true;
                    Out::ChatDelta(text)
                }
                Event::Chat(text) => {
                    self.had_chat = true;
                    Out::Chat(text)
                }
                Event::Usage {
                    input,
                    output,
                    total,
                    cumulative,
                } => Out::Usage(pb::Usage {
                    total_tokens: total,
                    input_tokens: input,
                    output_tokens: output,
                    cumulative,
                }),
                Event::Error {
                    message,
                    details,
                    code,
                } => {
                    // Adapters report at most one; keep the first regardless.
                    self.error.get_or_insert((message, details, code));
                    continue;
                }
            };
            self.sink.send(out).await?;
        }
        Ok(())
    }

    /// The turn's error event, if it failed: the provider's own error, else a
    /// PROVIDER_FAILED naming the exit and the end of stderr.
    fn final_error(&mut self, program: &str, status: ExitStatus, stderr: &str) -> Option<Out> {
        let dropped = self.decoder.dropped_lines();
        let mut facts = serde_json::Map::new();
        if !status.success() {
            match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => facts.insert("exitCode".into(), json!(code)),
                (None, Some(sig)) => facts.insert("signal".into(), json!(sig)),
                _ => None,
            };
            if !stderr.trim().is_empty() {
                facts.insert(STDERR_TAIL_KEY.into(), json!(stderr));
            }
        }
        if dropped > 0 {
            facts.insert("droppedLines".into(), json!(dropped));
        }
        if let Some((message, details, code)) = self.error.take() {
            let details = match details {
                None if facts.is_empty() => None,
                None => Some(Json::Object(facts)),
                Some(Json::Object(mut map)) => {
                    for (k, v) in facts {
                        map.entry(k).or_insert(v);
                    }
                    Some(Json::Object(map))
                }
                Some(other) => Some(other),
            };
            let code = code.unwrap_or(Code::PROVIDER_FAILED);
            return Some(error_event(code, message, details));
        }
        if !status.success() {
            // Fixed words: stderr (paths, tokens, whatever the CLI printed)
            // stays in the log and in `stderrTail` for local callers.
            let message = format!("{program} {}; {SEE_THE_LOG}", process::ended(status));
            return Some(error_event(
                Code::PROVIDER_FAILED,
                message,
                Some(Json::Object(facts)),
            ));
        }
        if dropped > 0 && !self.had_chat {
            // The answer itself may have been the discarded line: a turn that
            // "completed" with nothing to show would hide that.
            let message = format!(
                "{program} printed a line over {MAX_LINE} bytes, which was discarded, and no other answer"
            );
            return Some(error_event(
                Code::PROVIDER_FAILED,
                message,
                Some(Json::Object(facts)),
            ));
        }
        None
    }
}

/// An I/O error's reason without the path or command it may name: the OS's
/// words for its errno (`No such file or directory (os error 2)`).
pub(super) fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(errno) => std::io::Error::from_raw_os_error(errno).to_string(),
        None => e.kind().to_string(),
    }
}

async fn read_some(
    stdout: &mut Option<tokio::process::ChildStdout>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match stdout {
        Some(s) => s.read(buf).await,
        None => std::future::pending().await,
    }
}
