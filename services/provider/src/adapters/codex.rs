//! Codex CLI (`codex exec --json`).
//!
//! Output: `thread.started.thread_id` is the session; only `item.completed` items of type
//! `agent_message` are chat (reasoning, command executions and `error` items, which codex uses
//! for warnings, are not); `turn.completed.usage` is the thread's running total, so it is
//! reported with `cumulative: true`. A failed turn prints a top-level `error` and then
//! `turn.failed` with the same text: the parser holds the first and reports one error.
//! Top-level `error` lines starting with "Reconnecting" are retry notices, not failures.

use serde_json::Value;

use super::{Access, CommandLine, Event, LineParser, SessionOnce, TurnSpec, str_at, u64_at};

pub const PROGRAM: &str = "codex";

/// `codex exec … -`, prompt on stdin.
///
/// On resume, `--cd` and `--sandbox` belong to `exec` and are not accepted after `resume`, so
/// every exec option (and `-c`, a global) goes before `resume ID`; `--model=` follows the id
/// (codex marks it global, so either place parses). The model is one argument, so no value can
/// be read as another option.
pub fn command(turn: &TurnSpec) -> CommandLine {
    let mut cmd = CommandLine::new(PROGRAM, turn);
    cmd.arg("exec")
        .arg("--cd")
        .arg(&turn.workspace)
        .arg("--sandbox")
        .arg(sandbox_mode(turn.access))
        .arg("--skip-git-repo-check")
        .arg("--json");
    for setting in access_settings(turn.access) {
        cmd.arg("-c").arg(setting);
    }
    if let Some(cli) = &turn.mcp {
        for setting in mcp_settings(cli) {
            cmd.arg("-c").arg(setting);
        }
    }
    let effort = turn.effort.as_deref().map(|e| {
        // The value is parsed as TOML; a JSON string literal is a valid TOML basic string.
        format!("model_reasoning_effort={}", serde_json::Value::from(e))
    });
    if let Some(id) = &turn.resume_id {
        if let Some(effort) = effort {
            cmd.arg("-c").arg(effort);
        }
        cmd.arg("resume").arg(id);
        if let Some(model) = &turn.model {
            cmd.arg(format!("--model={model}"));
        }
    } else {
        if let Some(model) = &turn.model {
            cmd.arg(format!("--model={model}"));
        }
        if let Some(effort) = effort {
            cmd.arg("-c").arg(effort);
        }
    }
    cmd.arg("-");
    cmd
}

/// codex's sandbox for a level (`--sandbox`, the app-server's `sandbox`):
/// its own confinement of the commands and patches the model runs.
pub fn sandbox_mode(access: Access) -> &'static str {
    match access {
        Access::Tools => "read-only",
        Access::Edit => "workspace-write",
        Access::Full => "danger-full-access",
    }
}

/// `-c` overrides every level gets: never ask (nobody could answer, so a
/// refused action fails at once instead of waiting) and, at
/// [`Access::Edit`], no network for commands (codex's default, said
/// explicitly so a user's config cannot turn it on for a site).
pub fn access_settings(access: Access) -> Vec<String> {
    let mut out = vec![r#"approval_policy="never""#.to_string()];
    if access == Access::Edit {
        out.push("sandbox_workspace_write.network_access=false".to_string());
    }
    out
}

/// `-c` overrides registering `pedelec-cli mcp` for this run only (codex does
/// not persist them). Values are TOML; JSON strings and arrays are valid TOML.
/// codex gives an MCP server only HOME, PATH and a few more of its variables,
/// so `env_vars` names the ones to forward: names, never values, on argv.
/// `required` makes codex wait for the server (it starts answering within
/// milliseconds) instead of giving up on it after about a second.
/// `tool_timeout_sec` lets a call last as long as a page tool may (the
/// bridge's own 10-minute cap) instead of codex's shorter default.
/// `default_tools_approval_mode="approve"`: the page's tools are what the
/// site was granted at every level; below Full codex would otherwise ask to
/// approve each call and, with approval policy `never`, refuse it ("MCP tool
/// call requires approval").
pub(crate) fn mcp_settings(cli: &std::path::Path) -> Vec<String> {
    use super::{MCP_ARGS, MCP_ENV, MCP_SERVER};
    let json = |v: serde_json::Value| v.to_string();
    vec![
        format!(
            "mcp_servers.{MCP_SERVER}.command={}",
            json(cli.to_string_lossy().into())
        ),
        format!("mcp_servers.{MCP_SERVER}.args={}", json(MCP_ARGS.into())),
        format!("mcp_servers.{MCP_SERVER}.env_vars={}", json(MCP_ENV.into())),
        format!("mcp_servers.{MCP_SERVER}.required=true"),
        format!("mcp_servers.{MCP_SERVER}.tool_timeout_sec=600"),
        format!(r#"mcp_servers.{MCP_SERVER}.default_tools_approval_mode="approve""#),
    ]
}

#[derive(Debug, Default)]
pub struct Parser {
    session: SessionOnce,
    /// A top-level `error` waiting for `turn.failed` (which carries the same text) or for the
    /// end of the stream.
    pending_error: Option<String>,
    failed: bool,
}

/// Codex errors are often the upstream API's JSON body; when so, it is given as details too.
fn error_event(message: String) -> Event {
    let details = serde_json::from_str::<Value>(&message)
        .ok()
        .filter(Value::is_object);
    Event::Error {
        message,
        details,
        code: None,
    }
}

impl LineParser for Parser {
    fn parse_object(&mut self, v: &Value, out: &mut Vec<Event>) {
        match str_at(v, "type").unwrap_or_default() {
            "thread.started" => self.session.offer(str_at(v, "thread_id"), out),
            "item.completed" => {
                let item = v.get("item").unwrap_or(&Value::Null);
                if str_at(item, "type") == Some("agent_message")
                    && let Some(text) = str_at(item, "text").filter(|t| !t.is_empty())
                {
                    out.push(Event::Chat(text.to_owned()));
                }
            }
            "turn.completed" => {
                // Whatever went wrong before was recovered from.
                self.pending_error = None;
                if let Some(u) = v.get("usage") {
                    // cached_input_tokens is part of input_tokens and reasoning_output_tokens
                    // part of output_tokens, so they are not added again.
                    out.push(Event::usage(
                        u64_at(u, "input_tokens"),
                        u64_at(u, "output_tokens"),
                        true,
                    ));
                }
            }
            "error" => {
                let message = str_at(v, "message").unwrap_or_default();
                if !message.starts_with("Reconnecting") && !self.failed {
                    self.pending_error = Some(message.to_owned());
                }
            }
            "turn.failed" => {
                let held = self.pending_error.take();
                if !self.failed {
                    self.failed = true;
                    let own = v
                        .get("error")
                        .and_then(|e| str_at(e, "message"))
                        .filter(|m| !m.is_empty())
                        .map(str::to_owned);
                    let message = own
                        .or(held)
                        .unwrap_or_else(|| "codex turn failed".to_owned());
                    out.push(error_event(message));
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self) -> Vec<Event> {
        // An error line with no turn.failed after it (codex died): still a failure.
        match self.pending_error.take() {
            Some(message) if !self.failed => {
                self.failed = true;
                vec![error_event(message)]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Provider;
    use super::super::testutil::*;
    use super::*;

    fn run(name: &str, expected: &[Event]) {
        assert_stream(Provider::Codex, &fixture(name), expected);
    }

    #[test]
    fn run1_skips_warning_and_command_items() {
        run(
            "codex_run1.jsonl",
            &[
                session("01a22d56-6dbd-7423-8b44-de8c18989886"),
                chat("MOCK_DONE: the command ran."),
                usage(246, 90, true),
            ],
        );
    }

    #[test]
    fn run2_resumed_usage_is_cumulative() {
        run(
            "codex_run2.jsonl",
            &[
                session("01a22d56-6dbd-7423-8b44-de8c18989886"),
                chat("MOCK_DONE: the command ran."),
                usage(369, 135, true),
            ],
        );
    }

    #[test]
    fn err400_is_one_error_with_codex_text() {
        let text = r#"{"error": {"message": "mock bad request", "type": "invalid_request_error", "code": "mock_error"}}"#;
        run(
            "codex_err400.jsonl",
            &[
                session("01a22d5d-877c-7962-b04b-9a1c4bdb079b"),
                error(text, Some(serde_json::from_str(text).unwrap())),
            ],
        );
    }

    #[test]
    fn reasoning_and_reconnect_are_not_chat_or_errors() {
        run(
            "codex_reasoning_and_reconnect.jsonl",
            &[
                session("01a22d57-3951-7063-9026-4bddded5ecb7"),
                chat("MOCK_DONE: the command ran."),
                usage(123, 45, true),
            ],
        );
    }

    #[test]
    fn error_without_turn_failed_is_reported_at_end() {
        let mut p = Parser::default();
        assert!(
            p.parse_line(r#"{"type":"error","message":"stream broke"}"#)
                .is_empty()
        );
        assert_eq!(p.finish(), vec![error("stream broke", None)]);
    }

    #[test]
    fn error_then_success_is_not_an_error() {
        let mut p = Parser::default();
        p.parse_line(r#"{"type":"error","message":"hiccup"}"#);
        p.parse_line(r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":2}}"#);
        assert!(p.finish().is_empty());
    }

    #[test]
    fn junk_is_ignored() {
        let mut p = Parser::default();
        for line in [
            "",
            "not json",
            "[1,2]",
            "{",
            r#"{"type":7}"#,
            r#"{"type":"item.completed"}"#,
        ] {
            assert!(p.parse_line(line).is_empty(), "{line}");
        }
    }

    #[test]
    fn command_first_turn() {
        let cmd = command(&turn("hi", None, None, None));
        assert_eq!(cmd.program, "codex");
        assert_eq!(
            args(&cmd),
            [
                "exec",
                "--cd",
                "/ws/a b",
                "--sandbox",
                "danger-full-access",
                "--skip-git-repo-check",
                "--json",
                "-c",
                r#"approval_policy="never""#,
                "-"
            ]
        );
        assert_eq!(cmd.stdin.as_deref(), Some("hi"));
        assert_eq!(cmd.cwd, std::path::Path::new("/ws/a b"));
    }

    #[test]
    fn each_level_has_its_sandbox_and_never_asks() {
        for (access, mode, extra) in [
            (Access::Tools, "read-only", None),
            (
                Access::Edit,
                "workspace-write",
                Some("sandbox_workspace_write.network_access=false"),
            ),
            (Access::Full, "danger-full-access", None),
        ] {
            for resume in [None, Some("T1")] {
                let cmd = command(&TurnSpec {
                    access,
                    ..turn("x", None, None, resume)
                });
                let a = args(&cmd);
                assert_eq!(a[3..5], ["--sandbox", mode], "{access:?}");
                let settings: Vec<&str> = a
                    .windows(2)
                    .filter(|w| w[0] == "-c")
                    .map(|w| w[1].as_str())
                    .collect();
                let mut expected = vec![r#"approval_policy="never""#];
                expected.extend(extra);
                assert_eq!(settings, expected, "{access:?}");
            }
        }
    }

    #[test]
    fn command_model_and_effort() {
        let cmd = command(&turn("hi", Some("gpt-5.5"), Some("high"), None));
        assert_eq!(
            args(&cmd)[9..],
            [
                "--model=gpt-5.5",
                "-c",
                "model_reasoning_effort=\"high\"",
                "-"
            ]
        );
    }

    #[test]
    fn command_resume() {
        let cmd = command(&turn("more", Some("gpt-5.5"), Some("low"), Some("T1")));
        assert_eq!(
            args(&cmd),
            [
                "exec",
                "--cd",
                "/ws/a b",
                "--sandbox",
                "danger-full-access",
                "--skip-git-repo-check",
                "--json",
                "-c",
                r#"approval_policy="never""#,
                "-c",
                "model_reasoning_effort=\"low\"",
                "resume",
                "T1",
                "--model=gpt-5.5",
                "-"
            ]
        );
        assert_eq!(cmd.stdin.as_deref(), Some("more"));
        let plain = command(&turn("more", None, None, Some("T1")));
        assert_eq!(args(&plain)[9..], ["resume", "T1", "-"]);
    }

    #[test]
    fn effort_is_quoted_as_toml() {
        let cmd = command(&turn("x", None, Some("a\"b"), None));
        assert_eq!(args(&cmd)[10], r#"model_reasoning_effort="a\"b""#);
    }
}
