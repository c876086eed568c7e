//! Ollama, through Pedelec's own agent (`pedelec-agent`).
//!
//! # Command line
//!
//! `pedelec-agent --model M --workspace W [--session-id ID]`, run in `W`, prompt on stdin (read
//! to EOF). `--model` is required ([`super::Provider::needs_model`]); effort has no flag, it is
//! part of the model choice.
//!
//! # Stdout contract (JSON Lines, UTF-8, one object per line)
//!
//! Every line is a JSON object with a string `type`. Unknown types and unknown fields are
//! ignored, so the agent can add either without breaking older services; anything that is not a
//! JSON object (for example a stray log line) is ignored too. Diagnostics go to stderr.
//!
//! | line | meaning |
//! |---|---|
//! | `{"type":"session","id":"…"}` | the agent's session id; passed back as `--session-id` on the next turn. Print it first, once. |
//! | `{"type":"chat_delta","text":"…"}` | a fragment of the assistant message being streamed |
//! | `{"type":"chat","text":"…"}` | a whole assistant message. After `chat_delta`s it closes the streamed message and repeats its full text: deltas are a best-effort live view, `chat` is the message (the SDK's `onChat`). |
//! | `{"type":"usage","input":N,"output":N}` | tokens of one model call, an increment: `input` = prompt tokens (Ollama's `prompt_eval_count`), `output` = generated tokens (`eval_count`) |
//! | `{"type":"error","message":"…","code":"…"?,"details":{…}?}` | the turn failed; `message` is shown to the user, optional `details` is any JSON, optional `code` names the failure (below). At most one, then exit non-zero. |
//!
//! The `code` of an error line is one of [`AGENT_CODES`]: the model server is unreachable
//! (`PROVIDER_UNREACHABLE`), refused the key (`PROVIDER_AUTH_FAILED`), does not know the model
//! (`PROVIDER_MODEL_NOT_FOUND`), is rate limiting (`PROVIDER_RATE_LIMITED`) or answered something
//! that is not the chat stream (`PROVIDER_INVALID_RESPONSE`). Any other value, or none, is
//! `PROVIDER_FAILED` (docs/agent.md).
//!
//! Example turn:
//!
//! ```text
//! {"type":"session","id":"a1"}
//! {"type":"chat_delta","text":"Hel"}
//! {"type":"chat_delta","text":"lo"}
//! {"type":"chat","text":"Hello"}
//! {"type":"usage","input":120,"output":2}
//! ```

use pedelec_common::Code;
use serde_json::Value;

use super::{Access, CommandLine, Event, LineParser, SessionOnce, TurnSpec, str_at, u64_at};

pub const PROGRAM: &str = pedelec_common::Program::Agent.file_name();

/// The codes an error line may carry; the agent cannot claim any other
/// (a thread or tool code would mislead the SDK).
pub const AGENT_CODES: [Code; 6] = [
    Code::PROVIDER_FAILED,
    Code::PROVIDER_UNREACHABLE,
    Code::PROVIDER_AUTH_FAILED,
    Code::PROVIDER_MODEL_NOT_FOUND,
    Code::PROVIDER_RATE_LIMITED,
    Code::PROVIDER_INVALID_RESPONSE,
];

/// The Pedelec code of an error line's `code`.
fn agent_code(code: Option<&str>) -> Code {
    code.and_then(Code::parse)
        .filter(|c| AGENT_CODES.contains(c))
        .unwrap_or(Code::PROVIDER_FAILED)
}

/// The agent runs no commands at any level; at [`Access::Tools`] it is told
/// `--read-only` and offers no tool that writes (docs/agent.md).
pub fn command(turn: &TurnSpec) -> CommandLine {
    let mut cmd = CommandLine::new(PROGRAM, turn);
    if let Some(model) = &turn.model {
        cmd.arg(format!("--model={model}"));
    }
    cmd.arg("--workspace").arg(&turn.workspace);
    if let Some(id) = &turn.resume_id {
        cmd.arg("--session-id").arg(id);
    }
    if turn.access == Access::Tools {
        cmd.arg("--read-only");
    }
    cmd
}

#[derive(Debug, Default)]
pub struct Parser {
    session: SessionOnce,
    /// An error was reported; later ones are ignored (at most one per turn).
    failed: bool,
}

impl LineParser for Parser {
    fn parse_object(&mut self, v: &Value, out: &mut Vec<Event>) {
        let text = str_at(v, "text").filter(|t| !t.is_empty());
        match str_at(v, "type").unwrap_or_default() {
            "session" => self.session.offer(str_at(v, "id"), out),
            "chat_delta" => {
                if let Some(text) = text {
                    out.push(Event::ChatDelta(text.to_owned()));
                }
            }
            "chat" => out.extend(text.map(|t| Event::Chat(t.to_owned()))),
            "usage" => {
                let (input, output) = (u64_at(v, "input"), u64_at(v, "output"));
                if input > 0 || output > 0 {
                    out.push(Event::usage(input, output, false));
                }
            }
            "error" if !self.failed => {
                self.failed = true;
                let message = str_at(v, "message")
                    .filter(|m| !m.is_empty())
                    .unwrap_or("pedelec-agent failed")
                    .to_owned();
                let details = v.get("details").filter(|d| !d.is_null()).cloned();
                let code = Some(agent_code(str_at(v, "code")));
                out.push(Event::Error {
                    message,
                    details,
                    code,
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
    use serde_json::json;

    #[test]
    fn contract_example() {
        let stream = concat!(
            "{\"type\":\"session\",\"id\":\"a1\"}\n",
            "agent log line that is not JSON\n",
            "{\"type\":\"chat_delta\",\"text\":\"Hel\"}\n",
            "{\"type\":\"chat_delta\",\"text\":\"lo ✓\"}\n",
            "{\"type\":\"chat\",\"text\":\"Hello ✓\"}\n",
            "{\"type\":\"tool\",\"name\":\"x\"}\n",
            "{\"type\":\"usage\",\"input\":120,\"output\":2}\n",
            "{\"type\":\"chat\",\"text\":\"Second, unstreamed\"}\n",
            "{\"type\":\"error\",\"message\":\"ollama: model not found\",\"details\":{\"status\":404}}\n",
            "{\"type\":\"error\",\"message\":\"again\"}",
        );
        assert_stream(
            Provider::Ollama,
            stream.as_bytes(),
            &[
                session("a1"),
                delta("Hel"),
                delta("lo ✓"),
                chat("Hello ✓"),
                usage(120, 2, false),
                chat("Second, unstreamed"),
                Event::Error {
                    message: "ollama: model not found".into(),
                    details: Some(json!({"status": 404})),
                    code: Some(Code::PROVIDER_FAILED),
                },
            ],
        );
    }

    #[test]
    fn error_codes_map_to_pedelec_codes() {
        let code_of = |line: &str| match Parser::default().parse_line(line).pop() {
            Some(Event::Error { code, .. }) => code,
            other => panic!("{other:?}"),
        };
        for code in AGENT_CODES {
            let line = format!(r#"{{"type":"error","message":"m","code":"{code}"}}"#);
            assert_eq!(code_of(&line), Some(code));
        }
        for other in [
            r#"{"type":"error","message":"m"}"#,
            r#"{"type":"error","message":"m","code":"THREAD_ACCESS_DENIED"}"#,
            r#"{"type":"error","message":"m","code":"nonsense"}"#,
            r#"{"type":"error","message":"m","code":7}"#,
        ] {
            assert_eq!(code_of(other), Some(Code::PROVIDER_FAILED), "{other}");
        }
    }

    #[test]
    fn command_lines() {
        let first = command(&turn("hi", Some("qwen3:8b"), Some("high"), None));
        assert_eq!(first.program, "pedelec-agent");
        assert_eq!(args(&first), ["--model=qwen3:8b", "--workspace", "/ws/a b"]);
        assert_eq!(first.stdin.as_deref(), Some("hi"));

        let resumed = command(&turn("more", Some("qwen3:8b"), None, Some("a1")));
        assert_eq!(args(&resumed)[3..], ["--session-id", "a1"]);
        assert_eq!(resumed.stdin.as_deref(), Some("more"));

        for (access, read_only) in [
            (Access::Tools, true),
            (Access::Edit, false),
            (Access::Full, false),
        ] {
            let cmd = command(&TurnSpec {
                access,
                ..turn("hi", Some("qwen3:8b"), None, None)
            });
            assert_eq!(
                args(&cmd).contains(&"--read-only".to_string()),
                read_only,
                "{access:?}"
            );
        }
    }
}
