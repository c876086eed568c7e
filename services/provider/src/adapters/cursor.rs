//! Cursor Agent (`cursor-agent -p --output-format stream-json`).
//!
//! Output (documented format, no captured run; see `testdata/README.md`): every line carries
//! `session_id`; `type: "assistant"` lines hold one complete message whose `text` blocks are chat.
//! With `--stream-partial-output` (which Pedelec passes) the text also arrives as it is
//! generated: each chunk is an `assistant` line with `timestamp_ms`, which becomes a chat delta,
//! and the complete message still follows as an `assistant` line without `timestamp_ms`, which
//! is the chat. An `assistant` line that carries a `model_call_id` repeats text already sent as
//! chunks (Cursor's staff on their forum, thread 156289: the form to skip), so it is ignored.
//! `user` echoes, `thinking` and `tool_call` lines are not chat, and the terminal
//! `result.result` repeats the whole text, so it is not chat either. `result` with
//! `is_error: true` is the turn's error. Cursor reports no token usage.

use serde_json::Value;

use super::{Access, CommandLine, Event, LineParser, SessionOnce, TurnSpec, str_at, text_blocks};

pub const PROGRAM: &str = "cursor-agent";

/// `cursor-agent -p …`, prompt on stdin, partial text streamed. Effort has no flag: it is part
/// of the model choice. Per level: Full runs every command (`--force`); Edit leaves it out, so
/// commands need an approval nobody can give in print mode and do not run (edits in the
/// workspace do); Tools also asks for cursor's read-only mode (`--mode=ask`).
pub fn command(turn: &TurnSpec) -> CommandLine {
    let mut cmd = CommandLine::new(PROGRAM, turn);
    cmd.arg("-p")
        .arg("--workspace")
        .arg(&turn.workspace)
        .arg("--output-format")
        .arg("stream-json")
        .arg("--stream-partial-output");
    match turn.access {
        Access::Full => cmd.arg("--force"),
        Access::Edit => &mut cmd,
        Access::Tools => cmd.arg("--mode=ask"),
    };
    if let Some(model) = &turn.model {
        cmd.arg(format!("--model={model}"));
    }
    if let Some(id) = &turn.resume_id {
        cmd.arg("--resume").arg(id);
    }
    cmd
}

#[derive(Debug, Default)]
pub struct Parser {
    session: SessionOnce,
    failed: bool,
}

impl LineParser for Parser {
    fn parse_object(&mut self, v: &Value, out: &mut Vec<Event>) {
        self.session.offer(str_at(v, "session_id"), out);
        match str_at(v, "type").unwrap_or_default() {
            "assistant" if v.get("model_call_id").is_some() => {}
            "assistant" => {
                let content = v.get("message").and_then(|m| m.get("content"));
                let texts = text_blocks(content).into_iter();
                if v.get("timestamp_ms").is_some() {
                    out.extend(texts.map(Event::ChatDelta));
                } else {
                    out.extend(texts.map(Event::Chat));
                }
            }
            "result"
                if !self.failed && v.get("is_error").and_then(Value::as_bool) == Some(true) =>
            {
                self.failed = true;
                let message = str_at(v, "result")
                    .filter(|m| !m.is_empty())
                    .unwrap_or("cursor-agent failed")
                    .to_owned();
                out.push(Event::Error {
                    message,
                    details: None,
                    code: None,
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Provider;
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn run1_documented_stream() {
        assert_stream(
            Provider::Cursor,
            &testdata("cursor_run1.jsonl"),
            &[
                session("5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c"),
                chat("I'll run it now."),
                chat("MOCK_DONE: the command ran — ✓"),
            ],
        );
    }

    /// `--stream-partial-output`: chunks with `timestamp_ms` are deltas, the
    /// `model_call_id` repeat is skipped, the complete message is the chat.
    #[test]
    fn partial_output_streams_deltas_then_the_complete_message() {
        assert_stream(
            Provider::Cursor,
            &testdata("cursor_partial.jsonl"),
            &[
                session("5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c"),
                delta("I'll run "),
                delta("it now."),
                chat("I'll run it now."),
                delta("MOCK_DONE: "),
                delta("the command ran — ✓"),
                chat("MOCK_DONE: the command ran — ✓"),
            ],
        );
    }

    #[test]
    fn err_result() {
        assert_stream(
            Provider::Cursor,
            &testdata("cursor_err.jsonl"),
            &[
                session("9a8b7c6d-5e4f-4321-8765-43210fedcba9"),
                error("mock model error 400", None),
            ],
        );
    }

    #[test]
    fn command_lines() {
        let first = command(&turn("hi", None, Some("high"), None));
        assert_eq!(first.program, "cursor-agent");
        assert_eq!(
            args(&first),
            [
                "-p",
                "--workspace",
                "/ws/a b",
                "--output-format",
                "stream-json",
                "--stream-partial-output",
                "--force"
            ]
        );
        assert_eq!(first.stdin.as_deref(), Some("hi"));

        let full = command(&turn("more", Some("sonnet-4"), None, Some("S1")));
        assert_eq!(args(&full)[7..], ["--model=sonnet-4", "--resume", "S1"]);
        let level = |access| {
            let cmd = command(&TurnSpec {
                access,
                ..turn("hi", None, None, None)
            });
            args(&cmd)[6..].to_vec()
        };
        assert_eq!(level(Access::Full), ["--force"]);
        assert!(level(Access::Edit).is_empty());
        assert_eq!(level(Access::Tools), ["--mode=ask"]);
        assert_eq!(full.stdin.as_deref(), Some("more"));
    }
}
