//! Access levels with the real `codex`, `claude` and `opencode` CLIs against
//! the mock model (docs/security.md, "Access levels"): at each level, through
//! ProviderService's RunTurn as SessionService sends it, the mock makes the
//! CLI call a page tool through `pedelec-cli` in its shell, run a command
//! that writes outside the workspace, and write files with its own write
//! tool outside and inside the workspace; the test checks what reached the
//! disk and that the page tool answered.
//!
//! codex runs below Full in its own sandbox (bubblewrap) nested in
//! Pedelec's view; its home is outside the temporary folder, as a user's
//! `~/.codex` is: codex re-executes itself as its sandbox helper through
//! aliases it makes in `$CODEX_HOME/tmp`, and it refuses to make them under
//! the system's temporary folder (then no command can run in its sandbox).
//!
//! A submodule of `agents_real` (it runs where the real CLIs' tests run, on
//! the release build). One TestEnv, one mock and one thread's tools per CLI;
//! the page side is this test, answering every tool call of the thread on
//! ToolBridge's Watch stream.

use std::path::{Path, PathBuf};

use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::{Value, json};

use super::{CLI_CEILING, Cli, Mock, configure, describe, settings};

const PAGE_NOTE: &str = "PAGE-LEVEL-5521";

/// One CLI's services with a registered page tool answered by the test.
struct Levels {
    cli: Cli,
    env: TestEnv,
    mock: Mock,
    _launcher: Launcher,
    provider: pedelec_common::clients::ProviderClient,
    thread: String,
    token: String,
    /// codex's home, outside /tmp (see the module's comment); last, so it
    /// is removed after the services and their agents are gone.
    _codex_home: Option<tempfile::TempDir>,
}

impl Levels {
    /// `services_env`: more variables for the services (the codex exec path).
    async fn start(cli: Cli, services_env: &[(&str, &str)]) -> Levels {
        let mut env = TestEnv::new();
        env.capture_service_secret();
        let mock = Mock::start();
        configure(&mut env, cli, mock.port);
        for (k, v) in services_env {
            env.extra_env.insert(k.to_string(), v.to_string());
        }
        let codex_home = (cli == Cli::Codex).then(|| {
            let dir = tempfile::Builder::new()
                .prefix("codex-home")
                .tempdir_in("/var/tmp")
                .expect("a codex home outside the temporary folder, wherever the checkout lies");
            agents::write_codex_mock_config(dir.path(), mock.port).unwrap();
            env.extra_env
                .insert("CODEX_HOME".into(), dir.path().display().to_string());
            dir
        });
        let launcher = env.up().await;
        let mut settings = settings(cli);
        if cli == Cli::Codex {
            // Shell tools only, as a user may set: below Full codex still
            // gets the page's tools natively (its sandbox keeps commands
            // from them), at Full it has only the shell path.
            settings.shell_tools_only = vec![cli.provider().into()];
        }
        env.update_settings(settings).await;
        let clients = env.service_clients().await;
        let thread = format!("thr_levels_{}", cli.program());
        let manifest = json!({"guidance": "", "tools": [{
            "name": "probe",
            "description": "Answers a note.",
            "argsSchema": {"type": "object", "properties": {}}
        }]});
        let mut bridge = clients.toolbridge();
        let token = bridge
            .register(pb::RegisterToolsRequest {
                session_id: thread.clone(),
                manifest: Some(pedelec_common::json::to_struct(
                    manifest.as_object().unwrap(),
                )),
                tool_token: String::new(),
            })
            .await
            .expect("register the page tool")
            .into_inner()
            .tool_token;
        // The page: every call of the thread is answered with the note.
        let mut watch = bridge
            .watch(pb::WatchToolsRequest {})
            .await
            .expect("watch the tool calls")
            .into_inner();
        let ours = thread.clone();
        tokio::spawn(async move {
            while let Ok(Some(event)) = watch.message().await {
                let Some(pb::tool_event::Event::Requested(r)) = event.event else {
                    continue;
                };
                if r.session_id != ours {
                    continue;
                }
                let result = pedelec_common::json::to_value(&json!({"note": PAGE_NOTE}));
                let _ = bridge
                    .resolve(pb::ResolveToolRequest {
                        session_id: r.session_id,
                        tool_request_id: r.tool_request_id,
                        outcome: Some(pb::resolve_tool_request::Outcome::Result(result)),
                    })
                    .await;
            }
        });
        Levels {
            cli,
            provider: clients.provider(),
            env,
            mock,
            _launcher: launcher,
            thread,
            token,
            _codex_home: codex_home,
        }
    }

    fn workspace(&self, level: pb::AccessLevel) -> PathBuf {
        let ws = self.env.root.path().join(format!("ws-{}", name(level)));
        std::fs::create_dir_all(&ws).unwrap();
        ws
    }

    /// A path outside the workspace, in the user's home.
    fn outside(&self, what: &str, level: pb::AccessLevel) -> PathBuf {
        self.env.home().join(format!("{what}-{}.txt", name(level)))
    }

    /// One turn at `level` with the mock following `script`; the chat text.
    async fn turn(&self, level: pb::AccessLevel, script: Value) -> String {
        self.mock.script(script).await;
        let tool_env = [
            (pedelec_common::env::THREAD_ID, self.thread.as_str()),
            (pedelec_common::env::TOOL_TOKEN, self.token.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let request = pb::RunTurnRequest {
            // A thread (and so a codex app-server or opencode server) per level.
            session_id: format!("{}_{}", self.thread, name(level)),
            provider: self.cli.provider().into(),
            profile: Some(pb::ResolvedProfile {
                model: self.cli.model().into(),
                ..Default::default()
            }),
            workspace: self.workspace(level).display().to_string(),
            prompt: "Do what the tool script says.".into(),
            provider_session_id: None,
            tool_env,
            access: level as i32,
        };
        let mut stream = self
            .provider
            .clone()
            .run_turn(request)
            .await
            .expect("RunTurn")
            .into_inner();
        let mut chat = String::new();
        let mut seen = Vec::new();
        loop {
            let event = tokio::time::timeout(CLI_CEILING, stream.message())
                .await
                .unwrap_or_else(|_| panic!("{:?} {level:?}: no event; seen {seen:?}", self.cli))
                .expect("the turn's stream")
                .and_then(|e| e.event);
            let Some(event) = event else { break };
            use pb::provider_event::Event as Out;
            match &event {
                Out::Chat(text) => chat.push_str(text),
                Out::Exited(_) => {
                    seen.push(format!("{event:?}"));
                    break;
                }
                _ => {}
            }
            seen.push(format!("{event:?}"));
        }
        eprintln!("{:?} {level:?}: {seen:?}", self.cli);
        chat
    }

    /// The CLI's own file-writing tool, writing `path`.
    fn write_tool(&self, path: &Path) -> Option<Value> {
        let content = "written by the agent";
        match self.cli {
            Cli::Claude => Some(json!({"mode": "tool", "tool_name": "Write",
                "tool_args": {"file_path": path, "content": content}, "final": "Wrote: {output}"})),
            Cli::OpenCode => Some(json!({"mode": "tool", "tool_name": "write",
                "tool_args": {"filePath": path, "content": content}, "final": "Wrote: {output}"})),
            // codex's freeform patch tool: a patch adding the file.
            Cli::Codex => Some(json!({"mode": "tool", "tool_name": "apply_patch",
                "tool_input": format!("*** Begin Patch\n*** Add File: {}\n+{content}\n*** End Patch\n",
                    path.display()),
                "final": "Wrote: {output}"})),
        }
    }

    /// The processes of this test's agents that are codex app-servers.
    fn app_servers(&self) -> Vec<String> {
        processes_using(&self.env.runtime_dir())
            .into_iter()
            .map(describe)
            .filter(|d| d.contains(Cli::Codex.server_word()) && !d.contains("bwrap"))
            .collect()
    }
}

fn name(level: pb::AccessLevel) -> &'static str {
    match level {
        pb::AccessLevel::Tools => "tools",
        pb::AccessLevel::Edit => "edit",
        pb::AccessLevel::Full => "full",
        pb::AccessLevel::Unspecified => "unspecified",
    }
}

fn shell(command: String) -> Value {
    json!({"mode": "tool", "command": command, "final": "Ran: {output}"})
}

const ALL: [pb::AccessLevel; 3] = [
    pb::AccessLevel::Tools,
    pb::AccessLevel::Edit,
    pb::AccessLevel::Full,
];

/// Each of `levels` for one CLI: the page tool answers at each; a command
/// writing outside the workspace and the write tool outside it work only at
/// Full; writing inside the workspace works at Edit and Full.
async fn levels(cli: Cli, levels: &[pb::AccessLevel]) -> Levels {
    let run = Levels::start(cli, &[]).await;
    held_to(&run, levels).await;
    run
}

async fn held_to(run: &Levels, levels: &[pb::AccessLevel]) {
    let cli = run.cli;
    let cli_path = run.env.root.path().join("bin/pedelec-cli");
    for &level in levels {
        let full = level == pb::AccessLevel::Full;
        let chat = run
            .turn(
                level,
                shell(format!(
                    "{} --thread-id {} tool-call probe '{{}}'",
                    cli_path.display(),
                    run.thread
                )),
            )
            .await;
        if cli == Cli::Codex && !full {
            // codex's sandbox refuses the command's connect() to ToolBridge
            // (no network for commands, Unix sockets included); the page's
            // tools are its native MCP tools instead.
            assert!(
                !chat.contains(PAGE_NOTE) && chat.contains("CORE_UNAVAILABLE"),
                "{cli:?} {level:?}: pedelec-cli in codex's sandbox: {chat:?}"
            );
            let chat = run
                .turn(
                    level,
                    json!({"mode": "mcp", "tool": "probe", "final": "Tool said: {output}"}),
                )
                .await;
            assert!(
                chat.contains(PAGE_NOTE),
                "{cli:?} {level:?}: the page tool did not answer natively: {chat:?}"
            );
        } else {
            assert!(
                chat.contains(PAGE_NOTE),
                "{cli:?} {level:?}: the page tool did not answer through the shell: {chat:?}"
            );
        }

        let touched = run.outside("command", level);
        run.turn(level, shell(format!("touch {}", touched.display())))
            .await;
        assert_eq!(
            touched.exists(),
            full,
            "{cli:?} {level:?}: a command wrote outside the workspace?"
        );

        let inside = run.workspace(level).join("inside.txt");
        match run.write_tool(&inside) {
            Some(script) => {
                let outside = run.outside("write", level);
                run.turn(level, run.write_tool(&outside).unwrap()).await;
                assert_eq!(
                    outside.exists(),
                    full,
                    "{cli:?} {level:?}: the write tool wrote outside the workspace?"
                );
                run.turn(level, script).await;
            }
            None => {
                let command = format!("echo written > {}", inside.display());
                run.turn(level, shell(command)).await;
            }
        }
        assert_eq!(
            inside.exists(),
            level != pb::AccessLevel::Tools,
            "{cli:?} {level:?}: a write inside the workspace"
        );
    }
}

/// The default path: one `codex app-server` per thread (so per level).
#[tokio::test]
async fn codex_is_held_to_each_level() {
    let run = levels(Cli::Codex, &ALL).await;
    assert!(
        !run.app_servers().is_empty(),
        "the turns did not run in a codex app-server"
    );
}

/// The `codex exec` fallback below Full (Full through exec is what the
/// other codex tests of `agents_real` run).
#[tokio::test]
async fn codex_exec_is_held_to_tools_and_edit() {
    let run = Levels::start(Cli::Codex, &[(pedelec_common::env::CODEX_APP_SERVER, "0")]).await;
    held_to(&run, &[pb::AccessLevel::Tools, pb::AccessLevel::Edit]).await;
    assert_eq!(
        run.app_servers(),
        Vec::<String>::new(),
        "exec was asked for"
    );
}

#[tokio::test]
async fn claude_is_held_to_each_level() {
    levels(Cli::Claude, &ALL).await;
}

#[tokio::test]
async fn opencode_is_held_to_each_level() {
    levels(Cli::OpenCode, &ALL).await;
}
