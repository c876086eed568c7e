//! Antigravity (`agy -p PROMPT --output-format stream-json`).
//!
//! Output (documented format, no captured run; see `testdata/README.md`): lines are keyed by
//! `event`. `init` carries `conversation_id` (also repeated inside later payloads, which serves
//! as a fallback); the chat is `result.response` only: agy documents no partial output, so the
//! `text_delta`s of `step_update`s are ignored and the text is never doubled (docs/decisions.md,
//! "Provider adapters"). `result.status: "ERROR"` (or a non-empty `result.error`) is the turn's
//! error with agy's own `result.error` text. agy's `result.usage` is not reported.

use serde_json::Value;

use super::{CommandLine, Event, LineParser, SessionOnce, TurnSpec, str_at};

pub const PROGRAM: &str = "agy";

/// `agy -p=PROMPT …`: the prompt goes in argv, so stdin is `None` (null). It is one
/// `-p=` argument, so a prompt that starts with `-` is never read as an option (agy's
/// flag parser takes the value after `=` whole); its size is capped by
/// [`super::MAX_ARGV_PROMPT`]. There is no workspace flag; agy works in `cwd`. Effort
/// has no flag: it is part of the model choice.
pub fn command(turn: &TurnSpec) -> CommandLine {
    let mut cmd = CommandLine::new(PROGRAM, turn);
    cmd.stdin = None;
    let mut prompt = std::ffi::OsString::from("-p=");
    prompt.push(&turn.prompt);
    cmd.arg(prompt).arg("--output-format").arg("stream-json");
    if let Some(model) = &turn.model {
        cmd.arg(format!("--model={model}"));
    }
    if let Some(id) = &turn.resume_id {
        cmd.arg("--conversation").arg(id);
    }
    cmd
}

#[derive(Debug, Default)]
pub struct Parser {
    session: SessionOnce,
    done: bool,
}

impl LineParser for Parser {
    fn parse_object(&mut self, v: &Value, out: &mut Vec<Event>) {
        let event = str_at(v, "event").unwrap_or_default();
        let payload = v.get(event).unwrap_or(&Value::Null);
        let id = str_at(v, "conversation_id").or_else(|| str_at(payload, "conversation_id"));
        self.session.offer(id, out);
        if event != "result" || self.done {
            return;
        }
        self.done = true;
        let error = str_at(payload, "error").filter(|e| !e.is_empty());
        let response = str_at(payload, "response").filter(|r| !r.trim().is_empty());
        if str_at(payload, "status") == Some("ERROR") || error.is_some() {
            let message = error
                .or(response)
                .unwrap_or("antigravity failed")
                .to_owned();
            out.push(Event::Error {
                message,
                details: None,
                code: None,
            });
        } else if let Some(text) = response {
            out.push(Event::Chat(text.to_owned()));
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
            Provider::Antigravity,
            &testdata("antigravity_run1.jsonl"),
            &[
                session("3e1f0c2d-7a9b-4c5d-8e6f-0a1b2c3d4e5f"),
                chat("MOCK_DONE: the command ran."),
            ],
        );
    }

    #[test]
    fn err_result() {
        assert_stream(
            Provider::Antigravity,
            &testdata("antigravity_err.jsonl"),
            &[
                session("7c6b5a49-3827-4160-9f8e-7d6c5b4a3928"),
                error("model request failed: 400 mock error", None),
            ],
        );
    }

    #[test]
    fn session_from_payload_when_init_lacks_it() {
        let mut p = Parser::default();
        assert!(
            p.parse_line(r#"{"event":"init","init":{"cwd":"/w"}}"#)
                .is_empty()
        );
        assert_eq!(
            p.parse_line(r#"{"event":"step_update","step_update":{"conversation_id":"c9"}}"#),
            vec![session("c9")]
        );
    }

    #[test]
    fn command_lines() {
        let first = command(&turn("-do it", None, Some("high"), None));
        assert_eq!(first.program, "agy");
        // One argument: a prompt that starts with `-` cannot read as an option.
        assert_eq!(
            args(&first),
            ["-p=-do it", "--output-format", "stream-json"]
        );
        let flaglike = command(&turn("--dangerously-skip-permissions", None, None, None));
        assert_eq!(args(&flaglike)[0], "-p=--dangerously-skip-permissions");
        assert_eq!(args(&flaglike).len(), 3);
        assert_eq!(first.stdin, None);
        assert_eq!(first.cwd, std::path::Path::new("/ws/a b"));

        let full = command(&turn("more", Some("gemini-3-flash"), None, Some("C1")));
        assert_eq!(
            args(&full)[3..],
            ["--model=gemini-3-flash", "--conversation", "C1"]
        );
    }
}
