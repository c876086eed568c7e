//! Claude Code (`claude -p --output-format stream-json --verbose`).
//!
//! Output: `system`/`init` carries `session_id`; chat is the `text` blocks of top-level
//! `assistant` messages (tool use and thinking blocks are not chat, and neither are messages of
//! sub-agents, which carry a `parent_tool_use_id`). When partial messages are on, `stream_event`
//! `text_delta`s arrive first as chat deltas; the completed `assistant` message is still the chat
//! (the SDK's `onChat` gets each completed message, deltas are a best-effort extra).
//!
//! A failed API call shows up as a *synthetic* assistant message (`model: "<synthetic>"`, a
//! top-level `error` field) holding "API Error: …", then `result` with `is_error: true`. That text
//! is the error's message and is not chat, so synthetic messages are held until `result`
//! decides: error → [`Event::Error`], success → [`Event::Chat`].
//!
//! Usage comes from `result.usage` and covers this invocation only (increments). Anthropic's
//! `input_tokens` excludes cached prompt tokens, so `cache_creation_input_tokens` and
//! `cache_read_input_tokens` are added to make `input` mean "all prompt tokens" as for the other
//! providers.

use serde_json::{Value, json};

use super::{
    Access, CommandLine, Event, LineParser, SessionOnce, TurnSpec, str_at, text_blocks, u64_at,
};

pub const PROGRAM: &str = "claude";

/// `claude -p …`, prompt on stdin. Runs in the workspace (`cwd`): claude has no directory flag.
/// As root it needs `IS_SANDBOX=1` in its environment (the spawner's job). Partial messages
/// are on so the answer streams into the page as it is written. Every value is one `--name=`
/// argument: the option lists are variadic, and a model must not be read as an option.
pub fn command(turn: &TurnSpec) -> CommandLine {
    let mut cmd = CommandLine::new(PROGRAM, turn);
    cmd.arg("-p")
        .arg("--output-format")
        .arg("stream-json")
        .arg("--verbose")
        .arg("--include-partial-messages");
    for flag in permission_flags(turn) {
        cmd.arg(flag);
    }
    if let Some(cli) = &turn.mcp {
        // `--mcp-config` is variadic: the `=` form keeps it to one value.
        // Strict: the user's own servers (~/.claude.json, a project
        // .mcp.json) do not join Pedelec's turn.
        cmd.arg("--strict-mcp-config")
            .arg(format!("--mcp-config={}", mcp_config(cli)));
        // Wait for the server before the first request (claude gives up
        // after about 2 s otherwise), and give it only the variables named in
        // its config, not claude's whole environment (API keys included).
        cmd.env
            .push(("MCP_CONNECTION_NONBLOCKING".into(), "0".into()));
        cmd.env
            .push(("CLAUDE_CODE_MCP_ALLOWLIST_ENV".into(), "1".into()));
    }
    if let Some(model) = &turn.model {
        cmd.arg(format!("--model={model}"));
    }
    if let Some(effort) = &turn.effort {
        cmd.arg(format!("--effort={effort}"));
    }
    if let Some(id) = &turn.resume_id {
        cmd.arg("--resume").arg(id);
    }
    cmd
}

/// Tools claude must not use below [`Access::Edit`]: every one that writes a file.
pub const WRITE_TOOLS: &str = "Edit,MultiEdit,Write,NotebookEdit";

/// claude's permissions for a level. Full: no checks at all. Below: claude's
/// own rules decide, and in `-p` nobody can approve, so whatever the rules do
/// not allow is refused to the model at once. Allowed at both: the page's
/// MCP tools (`mcp__pedelec`, every tool of that server) and the shell
/// commands that start with `pedelec-cli` (by name or by the prompt's path);
/// reading needs no permission. Tools adds the write tools to the refused
/// ones; Edit accepts file edits inside the working directory (the
/// workspace), not outside it, and no other command.
fn permission_flags(turn: &TurnSpec) -> Vec<String> {
    let mode = match turn.access {
        Access::Full => return vec!["--dangerously-skip-permissions".to_string()],
        Access::Edit => "acceptEdits",
        Access::Tools => "default",
    };
    let mut allowed = vec![format!("mcp__{}", super::MCP_SERVER)];
    allowed.extend(
        turn.tool_commands()
            .into_iter()
            // claude splits the list at commas and spaces.
            .filter(|c| !c.contains([',', ' ', '(', ')']))
            .map(|c| format!("Bash({c}:*)")),
    );
    let mut flags = vec![
        format!("--permission-mode={mode}"),
        format!("--allowedTools={}", allowed.join(",")),
    ];
    if turn.access == Access::Tools {
        flags.push(format!("--disallowedTools={WRITE_TOOLS}"));
    }
    flags
}

/// The `--mcp-config` JSON: `${NAME}` placeholders that claude expands from
/// its own environment, so no value is on argv.
fn mcp_config(cli: &std::path::Path) -> String {
    use super::{MCP_ARGS, MCP_ENV, MCP_SERVER};
    let env: serde_json::Map<String, Value> = MCP_ENV
        .iter()
        .map(|name| (name.to_string(), Value::from(format!("${{{name}}}"))))
        .collect();
    serde_json::json!({"mcpServers": {MCP_SERVER: {
        "command": cli.to_string_lossy(),
        "args": MCP_ARGS,
        "env": env,
    }}})
    .to_string()
}

#[derive(Debug, Default)]
pub struct Parser {
    session: SessionOnce,
    /// Text of synthetic assistant messages, waiting for `result`.
    synthetic: Option<String>,
    synthetic_is_error: bool,
    done: bool,
}

fn top_level(v: &Value) -> bool {
    v.get("parent_tool_use_id").is_none_or(Value::is_null)
}

impl Parser {
    /// Only text deltas are chat; tool-input and thinking deltas are not.
    fn stream_event(&mut self, event: &Value, out: &mut Vec<Event>) {
        if str_at(event, "type") != Some("content_block_delta") {
            return;
        }
        let delta = event.get("delta").unwrap_or(&Value::Null);
        if str_at(delta, "type") != Some("text_delta") {
            return;
        }
        if let Some(text) = str_at(delta, "text").filter(|t| !t.is_empty()) {
            out.push(Event::ChatDelta(text.to_owned()));
        }
    }

    fn assistant(&mut self, v: &Value, out: &mut Vec<Event>) {
        let message = v.get("message").unwrap_or(&Value::Null);
        let texts = text_blocks(message.get("content"));
        if texts.is_empty() {
            return;
        }
        let is_error = v.get("error").is_some_and(|e| !e.is_null());
        if is_error || str_at(message, "model") == Some("<synthetic>") {
            let held = self.synthetic.get_or_insert_with(String::new);
            for text in texts {
                if !held.is_empty() {
                    held.push('\n');
                }
                held.push_str(&text);
            }
            self.synthetic_is_error |= is_error;
            return;
        }
        out.extend(texts.into_iter().map(Event::Chat));
    }

    fn result(&mut self, v: &Value, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(u) = v.get("usage") {
            let input = u64_at(u, "input_tokens")
                .saturating_add(u64_at(u, "cache_creation_input_tokens"))
                .saturating_add(u64_at(u, "cache_read_input_tokens"));
            let output = u64_at(u, "output_tokens");
            if input > 0 || output > 0 {
                out.push(Event::usage(input, output, false));
            }
        }
        let subtype = str_at(v, "subtype").unwrap_or_default();
        let failed = v.get("is_error").and_then(Value::as_bool) == Some(true)
            || subtype.starts_with("error");
        let synthetic = self.synthetic.take();
        if !failed {
            out.extend(synthetic.map(Event::Chat));
            return;
        }
        let errors = v.get("errors").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        });
        let message = synthetic
            .or_else(|| str_at(v, "result").map(str::to_owned))
            .or(errors)
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| format!("claude failed ({subtype})"));
        let details = v
            .get("api_error_status")
            .filter(|s| !s.is_null())
            .map(|s| json!({ "api_error_status": s }));
        out.push(Event::Error {
            message,
            details,
            code: None,
        });
    }
}

impl LineParser for Parser {
    fn parse_object(&mut self, v: &Value, out: &mut Vec<Event>) {
        match str_at(v, "type").unwrap_or_default() {
            "system" if str_at(v, "subtype") == Some("init") => {
                self.session.offer(str_at(v, "session_id"), out)
            }
            "stream_event" if top_level(v) => {
                if let Some(event) = v.get("event") {
                    self.stream_event(event, out);
                }
            }
            "assistant" if top_level(v) => self.assistant(v, out),
            "result" => self.result(v, out),
            _ => {}
        }
    }

    fn finish(&mut self) -> Vec<Event> {
        // No `result` line (claude was killed or crashed): decide on what was held.
        match self.synthetic.take() {
            Some(message) if self.synthetic_is_error => vec![Event::Error {
                message,
                details: None,
                code: None,
            }],
            Some(text) => vec![Event::Chat(text)],
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Provider;
    use super::super::testutil::*;
    use super::*;

    const SESSION: &str = "96322f40-dcc6-4052-b9dc-a96dd23d58a5";

    #[test]
    fn run1_text_after_tool_use() {
        assert_stream(
            Provider::Claude,
            &fixture("claude_run1.jsonl"),
            &[
                session(SESSION),
                chat("MOCK_DONE: the command ran."),
                usage(222, 44, false),
            ],
        );
    }

    #[test]
    fn run2_deltas_then_the_completed_message() {
        assert_stream(
            Provider::Claude,
            &fixture("claude_run2.jsonl"),
            &[
                session(SESSION),
                delta("MOCK_DON"),
                delta("E: the command ran."),
                chat("MOCK_DONE: the command ran."),
                usage(111, 22, false),
            ],
        );
    }

    #[test]
    fn err_synthetic_text_is_the_error_not_chat() {
        assert_stream(
            Provider::Claude,
            &fixture("claude_err.jsonl"),
            &[
                session("2fa108e0-df14-4e95-beff-2f4ddfb51b5d"),
                error(
                    "API Error: 400 mock anthropic error 400",
                    Some(json!({"api_error_status": 400})),
                ),
            ],
        );
    }

    #[test]
    fn cache_tokens_count_as_input() {
        let mut p = Parser::default();
        let got = p.parse_line(
            r#"{"type":"result","is_error":false,"usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":7}}"#,
        );
        assert_eq!(got, vec![usage(1105, 7, false)]);
    }

    #[test]
    fn subagent_and_non_text_blocks_are_not_chat() {
        let mut p = Parser::default();
        let sub = r#"{"type":"assistant","parent_tool_use_id":"toolu_1","message":{"id":"m1","content":[{"type":"text","text":"inner"}]}}"#;
        assert!(p.parse_line(sub).is_empty());
        let mixed = r#"{"type":"assistant","parent_tool_use_id":null,"message":{"id":"m2","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"a"},{"type":"tool_use","id":"t","name":"Bash","input":{}},{"type":"text","text":"b"}]}}"#;
        assert_eq!(p.parse_line(mixed), vec![chat("a"), chat("b")]);
    }

    #[test]
    fn synthetic_without_result_follows_its_error_flag() {
        let mut p = Parser::default();
        p.parse_line(r#"{"type":"assistant","error":"unknown","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: boom"}]}}"#);
        assert_eq!(p.finish(), vec![error("API Error: boom", None)]);

        let mut p = Parser::default();
        p.parse_line(r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"No response requested."}]}}"#);
        assert_eq!(
            p.parse_line(r#"{"type":"result","subtype":"success","is_error":false}"#),
            vec![chat("No response requested.")]
        );
    }

    #[test]
    fn error_result_without_synthetic_text() {
        let mut p = Parser::default();
        assert_eq!(
            p.parse_line(r#"{"type":"result","subtype":"error_max_turns","is_error":true}"#),
            vec![error("claude failed (error_max_turns)", None)]
        );
    }

    #[test]
    fn command_lines() {
        let first = command(&turn("hi", None, None, None));
        assert_eq!(first.program, "claude");
        assert_eq!(
            args(&first),
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
                "--dangerously-skip-permissions"
            ]
        );
        assert_eq!(first.stdin.as_deref(), Some("hi"));
        assert_eq!(first.cwd, std::path::Path::new("/ws/a b"));

        let full = command(&turn(
            "more",
            Some("claude-sonnet-4-5"),
            Some("high"),
            Some(SESSION),
        ));
        assert_eq!(
            args(&full)[6..],
            [
                "--model=claude-sonnet-4-5",
                "--effort=high",
                "--resume",
                SESSION
            ]
        );
        assert_eq!(full.stdin.as_deref(), Some("more"));
    }

    #[test]
    fn below_full_claude_checks_permissions_and_lets_the_page_tools_through() {
        let at = |access| {
            let cmd = command(&TurnSpec {
                access,
                tool_cli: Some("/opt/pedelec/pedelec-cli".into()),
                ..turn("hi", None, None, None)
            });
            args(&cmd)[5..].to_vec()
        };
        let allowed =
            "--allowedTools=mcp__pedelec,Bash(pedelec-cli:*),Bash(/opt/pedelec/pedelec-cli:*)";
        assert_eq!(
            at(Access::Tools),
            [
                "--permission-mode=default",
                allowed,
                "--disallowedTools=Edit,MultiEdit,Write,NotebookEdit"
            ]
        );
        assert_eq!(at(Access::Edit), ["--permission-mode=acceptEdits", allowed]);
        assert_eq!(at(Access::Full), ["--dangerously-skip-permissions"]);
        // A path claude would split is left out; the bare name still works.
        let spaced = command(&TurnSpec {
            access: Access::Edit,
            tool_cli: Some("/opt/my tools/pedelec-cli".into()),
            ..turn("hi", None, None, None)
        });
        assert!(
            args(&spaced).contains(&"--allowedTools=mcp__pedelec,Bash(pedelec-cli:*)".to_string())
        );
    }
}
