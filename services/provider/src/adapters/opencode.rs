//! OpenCode (`opencode run --format json`).
//!
//! Output: every line carries the session as top-level `sessionID`; `type: "text"` lines hold a
//! finished text part in `part.text` (tool use, step markers and reasoning are not chat);
//! `step_finish.part.tokens` is the usage of one model call (an increment). OpenCode's
//! `tokens.input` leaves out cache reads and writes, which are added back so `input` means "all
//! prompt tokens" as for the other providers. A failure is `type: "error"` with the provider's
//! message in `error.data.message`; the whole `error` object is kept as details.

use serde_json::Value;

use super::{Access, CommandLine, Event, LineParser, SessionOnce, TurnSpec, str_at, u64_at};

pub const PROGRAM: &str = "opencode";

/// `opencode run …`, prompt on stdin.
///
/// No `-` at the end, unlike codex: `opencode run` has no stdin marker: it joins its positional
/// message words and then appends piped stdin after a newline, so a `-` would reach the model as
/// a stray first line. With no positional message the prompt is stdin alone. Below
/// [`Access::Full`] permissions are checked ([`config`]); `run` refuses what would need asking.
pub fn command(turn: &TurnSpec) -> CommandLine {
    let mut cmd = CommandLine::new(PROGRAM, turn);
    cmd.arg("run")
        .arg("--format")
        .arg("json")
        .arg("--dir")
        .arg(&turn.workspace);
    if turn.access.is_full() {
        cmd.arg("--dangerously-skip-permissions");
    }
    if let Some(config) = config(turn) {
        cmd.env.push((CONFIG_ENV.into(), config));
    }
    if let Some(model) = &turn.model {
        cmd.arg(format!("--model={model}"));
    }
    if let Some(effort) = &turn.effort {
        cmd.arg(format!("--variant={effort}"));
    }
    if let Some(id) = &turn.resume_id {
        cmd.arg("--session").arg(id);
    }
    cmd
}

/// Where opencode takes extra config: only from its environment; it is
/// merged over the user's own config.
pub const CONFIG_ENV: &str = "OPENCODE_CONFIG_CONTENT";

/// The turn's extra config, `run` and `serve` alike: the page's MCP server
/// ([`mcp_config`]) and, below [`Access::Full`], the level's permissions
/// ([`permission_config`]). `None` when there is neither.
pub fn config(turn: &TurnSpec) -> Option<String> {
    let mut config = serde_json::Map::new();
    if let Some(cli) = &turn.mcp {
        config.extend(mcp_config(cli).as_object().cloned().unwrap_or_default());
    }
    if let Some(permission) = permission_config(turn) {
        config.insert("permission".into(), permission);
    }
    (!config.is_empty()).then(|| Value::Object(config).to_string())
}

/// opencode's `permission` config for a level below Full (`None` at Full,
/// where nothing is checked): no command but `pedelec-cli` (by name or the
/// prompt's path; the last matching pattern wins, `*` comes first), no file
/// outside the workspace (`external_directory`), no web requests, no
/// sub-agents (they would run under their own rules); file edits only at
/// Edit. MCP tools (the page's) and reading are allowed.
pub fn permission_config(turn: &TurnSpec) -> Option<Value> {
    let edit = match turn.access {
        Access::Full => return None,
        Access::Edit => "allow",
        Access::Tools => "deny",
    };
    let mut bash = serde_json::Map::new();
    bash.insert("*".into(), "deny".into());
    for command in turn.tool_commands() {
        bash.insert(format!("{command} *"), "allow".into());
    }
    Some(serde_json::json!({
        "edit": edit,
        "bash": bash,
        "external_directory": "deny",
        "webfetch": "deny",
        "websearch": "deny",
        "task": "deny",
    }))
}

/// `{"mcp":{"pedelec":{…}}}`: placeholders only, `{env:NAME}` is filled in by
/// opencode.
fn mcp_config(cli: &std::path::Path) -> Value {
    use super::{MCP_ARGS, MCP_ENV, MCP_SERVER};
    let mut command = vec![Value::from(cli.to_string_lossy())];
    command.extend(MCP_ARGS.iter().map(|a| Value::from(*a)));
    let environment: serde_json::Map<String, Value> = MCP_ENV
        .iter()
        .map(|name| (name.to_string(), Value::from(format!("{{env:{name}}}"))))
        .collect();
    serde_json::json!({"mcp": {MCP_SERVER: {
        "type": "local",
        "command": command,
        "enabled": true,
        "environment": environment,
    }}})
}

/// The usage of one model call from a step-finish part's `tokens` (the same
/// shape in `run --format json` and in `opencode serve`'s events), with cache
/// reads and writes counted as input; `None` when it is empty.
pub fn step_usage(tokens: &Value) -> Option<Event> {
    let cache = tokens.get("cache").unwrap_or(&Value::Null);
    let input = u64_at(tokens, "input")
        .saturating_add(u64_at(cache, "read"))
        .saturating_add(u64_at(cache, "write"));
    let output = u64_at(tokens, "output");
    (input > 0 || output > 0).then(|| Event::usage(input, output, false))
}

/// opencode's own text of an error object (`{name, data: {message}}`).
pub fn error_message(e: &Value) -> String {
    e.get("data")
        .and_then(|d| str_at(d, "message"))
        .or_else(|| str_at(e, "message"))
        .or_else(|| str_at(e, "name"))
        .filter(|m| !m.is_empty())
        .unwrap_or("opencode failed")
        .to_owned()
}

#[derive(Debug, Default)]
pub struct Parser {
    session: SessionOnce,
    failed: bool,
}

impl LineParser for Parser {
    fn parse_object(&mut self, v: &Value, out: &mut Vec<Event>) {
        self.session.offer(str_at(v, "sessionID"), out);
        let part = v.get("part").unwrap_or(&Value::Null);
        match str_at(v, "type").unwrap_or_default() {
            "text" => {
                if let Some(text) = str_at(part, "text").filter(|t| !t.is_empty()) {
                    out.push(Event::Chat(text.to_owned()));
                }
            }
            "step_finish" => {
                out.extend(part.get("tokens").and_then(step_usage));
            }
            "error" if !self.failed => {
                self.failed = true;
                let error = v.get("error").cloned();
                let message = error_message(error.as_ref().unwrap_or(&Value::Null));
                out.push(Event::Error {
                    message,
                    details: error,
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

    const SESSION: &str = "ses_dd2a7897fffeDHAglomGSUFLvm";

    #[test]
    fn run1_tool_step_then_text() {
        assert_stream(
            Provider::Opencode,
            &fixture("opencode_run1.jsonl"),
            &[
                session(SESSION),
                usage(100, 20, false),
                chat("MOCK_DONE: the command ran."),
                usage(100, 20, false),
            ],
        );
    }

    #[test]
    fn run2_resumed() {
        assert_stream(
            Provider::Opencode,
            &fixture("opencode_run2.jsonl"),
            &[
                session(SESSION),
                chat("MOCK_DONE: the command ran."),
                usage(100, 20, false),
            ],
        );
    }

    #[test]
    fn err_keeps_provider_message() {
        let bytes = fixture("opencode_err.jsonl");
        let line = std::str::from_utf8(&bytes).unwrap().lines().next().unwrap();
        let details = serde_json::from_str::<Value>(line).unwrap()["error"].clone();
        assert_eq!(details["name"], "APIError");
        assert_stream(
            Provider::Opencode,
            &bytes,
            &[
                session("ses_dd2a6ed6cffe5lSGvTfH8yCzcW"),
                error("mock chat error 400", Some(details)),
            ],
        );
    }

    #[test]
    fn cache_tokens_count_as_input() {
        let mut p = Parser::default();
        let got = p.parse_line(
            r#"{"type":"step_finish","part":{"tokens":{"total":1,"input":10,"output":3,"reasoning":2,"cache":{"write":5,"read":50}}}}"#,
        );
        assert_eq!(got, vec![usage(65, 3, false)]);
    }

    #[test]
    fn command_lines() {
        let first = command(&turn("hi", None, None, None));
        assert_eq!(first.program, "opencode");
        assert_eq!(
            args(&first),
            [
                "run",
                "--format",
                "json",
                "--dir",
                "/ws/a b",
                "--dangerously-skip-permissions"
            ]
        );
        assert_eq!(first.stdin.as_deref(), Some("hi"));

        let full = command(&turn("more", Some("mock/m1"), Some("high"), Some(SESSION)));
        assert_eq!(
            args(&full)[6..],
            ["--model=mock/m1", "--variant=high", "--session", SESSION]
        );
        assert_eq!(full.stdin.as_deref(), Some("more"));
    }

    #[test]
    fn below_full_opencode_checks_permissions_from_its_config() {
        let at = |access| {
            command(&TurnSpec {
                access,
                tool_cli: Some("/opt/pedelec/pedelec-cli".into()),
                ..turn("hi", None, None, None)
            })
        };
        let full = at(Access::Full);
        assert!(args(&full).contains(&"--dangerously-skip-permissions".to_string()));
        assert!(full.env.is_empty());
        for (access, edit) in [(Access::Tools, "deny"), (Access::Edit, "allow")] {
            let cmd = at(access);
            assert!(!args(&cmd).iter().any(|a| a.contains("dangerously")));
            let [(name, config)] = &cmd.env[..] else {
                panic!("{:?}", cmd.env)
            };
            assert_eq!(name, CONFIG_ENV);
            let config: Value = serde_json::from_str(config).unwrap();
            assert_eq!(
                config,
                serde_json::json!({"permission": {
                    "edit": edit,
                    "bash": {"*": "deny", "pedelec-cli *": "allow", "/opt/pedelec/pedelec-cli *": "allow"},
                    "external_directory": "deny",
                    "webfetch": "deny",
                    "websearch": "deny",
                    "task": "deny",
                }}),
                "{access:?}"
            );
        }
    }
}
