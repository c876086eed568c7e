//! pedelec-cli: parses the command line and hands over to the library.

#![forbid(unsafe_code)]

use clap::{Args, Parser, Subcommand};
use pedelec_cli::admin::{AdminCommand, Secrets, SettingChange, SiteGrant};
use pedelec_cli::arena::{ArenaFirst, CLI_ARENA_BYTES};
use pedelec_cli::tools::{ToolCommand, ToolContext};

/// Small allocations come from an arena with a free list per size, not from
/// musl's allocator (module `arena`).
#[global_allocator]
static ALLOCATOR: ArenaFirst<CLI_ARENA_BYTES> = ArenaFirst::new();

/// Shown under `tool-spec --help` and `tool-call --help`.
const TOOL_AFTER_HELP: &str = "\
Prints one JSON line: {\"ok\":true,\"result\":...} or
{\"ok\":false,\"error\":{\"code\",\"message\",\"details\"}}. Exit 0 ok, 1 tool error,
2 usage or connection error. Needs PEDELEC_THREAD_ID (or --thread-id),
PEDELEC_TOOL_TOKEN and PEDELEC_RUNTIME_DIR. See pedelec-cli --help.";

/// Shown under `mcp --help`.
const MCP_AFTER_HELP: &str = "\
Speaks the Model Context Protocol (JSON-RPC lines) on stdin/stdout until stdin
closes: tools/list is the thread's manifest, tools/call calls the page. A failed
call is a result with isError true and text CODE: message. Needs
PEDELEC_THREAD_ID (or --thread-id), PEDELEC_TOOL_TOKEN and PEDELEC_RUNTIME_DIR;
without a thread id or token it exits 2 before serving.";

const AFTER_HELP: &str = "\
AGENT COMMANDS (tool-spec, tool-call, mcp)
  Used by an AI agent inside a Pedelec turn to call the web page's tools;
  mcp serves them to the agent CLI as native MCP tools (see mcp --help).
  Fetch a tool's argument schema with tool-spec before the first call.

  Environment (set by Pedelec for the agent process):
    PEDELEC_THREAD_ID    the thread (default for --thread-id)
    PEDELEC_TOOL_TOKEN   the thread's secret tool token (sent as gRPC metadata)
    PEDELEC_RUNTIME_DIR  folder holding toolbridge.sock

  Output: exactly one JSON document on stdout, one line:
    {\"ok\":true,\"result\":<json>}
    {\"ok\":false,\"error\":{\"code\":\"TOOL_ARGS_INVALID\",\"message\":\"...\",\"details\":<json|null>}}
  tool-spec's result is {\"name\",\"description\",\"argsSchema\",\"timeoutMs\"}.

  Exit codes:
    0  ok
    1  the tool failed or was refused (e.g. TOOL_NOT_FOUND, TOOL_ARGS_INVALID,
       TOOL_ACCESS_DENIED, TOOL_TIMEOUT, TOOL_HANDLER_ERROR); read error.code
    2  usage error (bad flags, invalid JSON, no thread id: INVALID_INPUT) or
       Pedelec not answering (CORE_UNAVAILABLE); JSON is still printed

  Examples:
    pedelec-cli --thread-id thr_123 tool-spec search_rows
    pedelec-cli --thread-id thr_123 tool-call search_rows '{\"query\":\"overdue\",\"limit\":5}'
    echo '{\"query\":\"overdue\"}' | pedelec-cli tool-call search_rows -

HUMAN COMMANDS (sessions, providers, settings, sites)
  Local scripting against the running services. Errors print CODE: message
  on stderr; exit 1 for service errors, 2 for usage or connection errors.";

/// Shown under `sites --help`.
const SITES_AFTER_HELP: &str = "\
What each web origin may do with Pedelec: the grants SessionService keeps
(the extension's approval prompt and settings page change the same ones).
Access levels: tools (answer and use the page's tools; no file writes, no
commands), edit (edit files in its workspace; the default in the prompt),
full (run any command as you).

Examples:
  pedelec-cli sites list
  pedelec-cli sites show https://app.example
  pedelec-cli sites grant https://app.example --access edit --provider codex --folder ~/project
  pedelec-cli sites revoke https://app.example";

/// Pedelec's command-line client: page tools for agents, and local admin.
#[derive(Debug, Parser)]
#[command(name = pedelec_common::Program::Cli.file_name(), version, after_help = AFTER_HELP)]
struct Cli {
    /// The thread whose tools are used.
    #[arg(long, global = true, value_name = "ID", env = pedelec_common::env::THREAD_ID)]
    thread_id: Option<String>,
    /// tool-call only: the call's timeout in milliseconds, overriding the tool's own.
    #[arg(long, global = true, value_name = "N")]
    timeout_ms: Option<u32>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a tool's spec (name, description, argsSchema, timeoutMs) as JSON.
    #[command(after_help = TOOL_AFTER_HELP)]
    ToolSpec {
        /// The tool name, as listed in the prompt's tool index.
        tool: String,
    },
    /// Call a tool with JSON arguments and print its result as JSON.
    #[command(after_help = TOOL_AFTER_HELP)]
    ToolCall {
        /// The tool name, as listed in the prompt's tool index.
        tool: String,
        /// The arguments: a JSON object matching argsSchema, or - to read it from stdin.
        json: String,
    },
    /// Serve the thread's page tools as an MCP server on stdin/stdout (for agent CLIs).
    #[command(after_help = MCP_AFTER_HELP)]
    Mcp,
    /// List threads or show one (human command).
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// List the providers with availability and the default (human command).
    Providers {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read or change the settings (human command).
    #[command(subcommand)]
    Settings(SettingsCommand),
    /// List, show, grant, block or revoke web sites' grants (human command).
    #[command(subcommand, after_help = SITES_AFTER_HELP)]
    Sites(SitesCommand),
}

#[derive(Debug, Subcommand)]
enum SitesCommand {
    /// Table of sites: origin, access (or blocked), providers, folders, last used, expiry.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One site's grant.
    Show {
        /// The site's origin, e.g. https://app.example.
        origin: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create or replace a site's grant (unblocks a blocked site).
    Grant(GrantArgs),
    /// Block a site: no grant, no approval prompt; ends its sessions.
    Block {
        /// The site's origin.
        origin: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Forget a site's grant or block: cancels its turns and ends all of its sessions.
    Revoke {
        /// The site's origin.
        origin: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// End all of a site's sessions, keeping its grant.
    End {
        /// The site's origin.
        origin: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct GrantArgs {
    /// The site's origin, e.g. https://app.example.
    origin: String,
    /// What its agents may do.
    #[arg(long, value_parser = ["tools", "edit", "full"])]
    access: String,
    /// A provider code the site may use (repeat for more).
    #[arg(long = "provider", value_name = "P", required = true)]
    providers: Vec<String>,
    /// A folder the site may name as its workspace (repeat for more).
    #[arg(long = "folder", value_name = "DIR")]
    folders: Vec<std::path::PathBuf>,
    /// A folder the site may name once (its next session uses the grant up).
    #[arg(long = "folder-once", value_name = "DIR")]
    folders_once: Vec<std::path::PathBuf>,
    /// The site may name any model, not only the models of your profiles.
    #[arg(long)]
    any_model: bool,
    /// A top-level origin that may embed the site in a frame (repeat for more).
    #[arg(long = "embedder", value_name = "ORIGIN")]
    embedders: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// Table of threads: id, origin, status, provider, routes, last seq.
    List {
        /// Only threads owned by this origin.
        #[arg(long)]
        origin: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A thread's snapshot as JSON.
    Show {
        /// The thread id.
        id: String,
        /// The origin that owns the thread, e.g. https://app.example.
        #[arg(long)]
        origin: String,
    },
    /// A thread's conversation as a transcript: the user's texts (you:), the
    /// agent's messages (agent:), tool calls with their results, each
    /// operation's outcome. Any thread, whichever origin owns it.
    History {
        /// The thread id.
        id: String,
        /// Print the entries as JSON (oldest first) instead.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SettingsCommand {
    /// Print the full settings as JSON (camelCase); keys are masked
    /// (`{"set": true, "masked": "••••1234"}`) unless --show-secrets.
    Get {
        /// Print the Ollama and Tavily keys in clear.
        #[arg(long)]
        show_secrets: bool,
    },
    /// Change one setting and print the new settings.
    #[command(subcommand)]
    Set(SetCommand),
}

#[derive(Debug, Subcommand)]
enum SetCommand {
    /// The provider used when a thread names none ("" clears it).
    DefaultProvider { provider: String },
    /// Base URL of the Ollama server, e.g. http://127.0.0.1:11434.
    OllamaEndpoint { url: String },
    /// API key for the Ollama endpoint (- reads it from stdin).
    OllamaApiKey { key: String },
    /// Tavily key for pedelec-agent's web search (- reads it from stdin).
    TavilyApiKey { key: String },
    /// Providers whose agents get the page's tools only as shell commands, not
    /// as native MCP tools (none given: MCP wherever the CLI supports it).
    ShellToolsOnly { providers: Vec<String> },
    /// A provider's profile for one effort level.
    Profile(ProfileArgs),
}

#[derive(Debug, Args)]
struct ProfileArgs {
    /// Provider code: codex, claude, opencode, cursor, antigravity, ollama.
    provider: String,
    /// Effort level: default, low, medium, high.
    level: String,
    /// The model passed to the CLI ("" for the CLI's own default).
    #[arg(long)]
    model: String,
    /// The CLI's effort flag value (none when omitted).
    #[arg(long)]
    effort: Option<String>,
}

enum Plan {
    Tool(ToolContext, ToolCommand),
    Mcp(ToolContext),
    Admin(AdminCommand),
}

fn plan(cli: Cli) -> Plan {
    let ctx = || ToolContext::from_env(cli.thread_id.clone(), cli.timeout_ms);
    let tool = |command| Plan::Tool(ctx(), command);
    match cli.command {
        Command::ToolSpec { tool: name } => tool(ToolCommand::Spec { tool: name }),
        Command::ToolCall { tool: name, json } => tool(ToolCommand::Call {
            tool: name,
            args: json,
        }),
        Command::Mcp => Plan::Mcp(ctx()),
        Command::Sessions(SessionsCommand::List { origin, json }) => {
            Plan::Admin(AdminCommand::SessionsList { origin, json })
        }
        Command::Sessions(SessionsCommand::Show { id, origin }) => {
            Plan::Admin(AdminCommand::SessionsShow {
                session_id: id,
                origin,
            })
        }
        Command::Sessions(SessionsCommand::History { id, json }) => {
            Plan::Admin(AdminCommand::SessionsHistory {
                session_id: id,
                json,
            })
        }
        Command::Providers { json } => Plan::Admin(AdminCommand::Providers { json }),
        Command::Settings(SettingsCommand::Get { show_secrets }) => {
            Plan::Admin(AdminCommand::SettingsGet {
                secrets: if show_secrets {
                    Secrets::Shown
                } else {
                    Secrets::Masked
                },
            })
        }
        Command::Settings(SettingsCommand::Set(set)) => {
            let change = match set {
                SetCommand::DefaultProvider { provider } => {
                    SettingChange::DefaultProvider(provider)
                }
                SetCommand::OllamaEndpoint { url } => SettingChange::OllamaEndpoint(url),
                SetCommand::OllamaApiKey { key } => SettingChange::OllamaApiKey(key),
                SetCommand::TavilyApiKey { key } => SettingChange::TavilyApiKey(key),
                SetCommand::ShellToolsOnly { providers } => {
                    SettingChange::ShellToolsOnly(providers)
                }
                SetCommand::Profile(p) => SettingChange::Profile {
                    provider: p.provider,
                    level: p.level,
                    model: p.model,
                    effort: p.effort,
                },
            };
            Plan::Admin(AdminCommand::SettingsSet(change))
        }
        Command::Sites(sites) => Plan::Admin(match sites {
            SitesCommand::List { json } => AdminCommand::SitesList { json },
            SitesCommand::Show { origin, json } => AdminCommand::SitesShow { origin, json },
            SitesCommand::Grant(g) => AdminCommand::SitesGrant {
                grant: SiteGrant {
                    origin: g.origin,
                    access: g.access,
                    providers: g.providers,
                    folders: g
                        .folders
                        .into_iter()
                        .map(|f| (f, false))
                        .chain(g.folders_once.into_iter().map(|f| (f, true)))
                        .collect(),
                    any_model: g.any_model,
                    embedders: g.embedders,
                },
                json: g.json,
            },
            SitesCommand::Block { origin, json } => AdminCommand::SitesBlock { origin, json },
            SitesCommand::Revoke { origin, json } => AdminCommand::SitesRevoke { origin, json },
            SitesCommand::End { origin, json } => AdminCommand::SitesEnd { origin, json },
        }),
    }
}

/// The agent's command line, read without building clap's command tree: an
/// agent pays pedelec-cli's start-up on every tool call, and
/// clap's tree of every subcommand and help text is most of the CLI's own
/// work there. Only the plain forms are taken — `[--thread-id ID]
/// [--timeout-ms N] tool-call TOOL JSON` and `tool-spec TOOL`, the flags
/// before or after the command, `--flag=value` too; anything else (help, a
/// typo, an unknown or repeated flag, a bad number) returns None and goes to
/// clap, which owns every message. A test checks both read the same.
fn agent_fast_path(args: &[String]) -> Option<(Option<String>, Option<u32>, ToolCommand)> {
    let mut thread_id = None;
    let mut timeout_ms = None;
    let mut words = Vec::new();
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let slot = match flag {
            "--thread-id" if thread_id.is_none() => &mut thread_id,
            "--timeout-ms" if timeout_ms.is_none() => &mut timeout_ms,
            "-" => {
                words.push(arg.as_str());
                continue;
            }
            f if f.starts_with('-') => return None,
            _ => {
                words.push(arg.as_str());
                continue;
            }
        };
        let value = match inline {
            Some(v) => v,
            None => it.next().filter(|v| !v.starts_with('-'))?.clone(),
        };
        *slot = Some(value);
    }
    let timeout_ms = match timeout_ms {
        Some(n) => Some(n.parse::<u32>().ok()?),
        None => None,
    };
    let command = match words.as_slice() {
        ["tool-call", tool, json] => ToolCommand::Call {
            tool: tool.to_string(),
            args: json.to_string(),
        },
        ["tool-spec", tool] => ToolCommand::Spec {
            tool: tool.to_string(),
        },
        _ => return None,
    };
    let thread_id = thread_id.or_else(|| std::env::var(pedelec_common::env::THREAD_ID).ok());
    Some((thread_id, timeout_ms, command))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some((thread_id, timeout_ms, command)) = agent_fast_path(&args) {
        let ctx = ToolContext::from_env(thread_id, timeout_ms);
        std::process::exit(pedelec_cli::tools::run(&ctx, command));
    }
    let code = match Cli::try_parse_from(&args) {
        Ok(cli) => match plan(cli) {
            Plan::Tool(ctx, command) => pedelec_cli::tools::run(&ctx, command),
            Plan::Mcp(ctx) => pedelec_cli::mcp::run(&ctx),
            Plan::Admin(command) => pedelec_cli::admin::run(command),
        },
        // --help and --version are not errors.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            0
        }
        Err(e) => pedelec_cli::usage_error(&e.render().to_string(), pedelec_cli::agent_mode(&args)),
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("pedelec-cli").chain(s.split_whitespace()))
    }

    #[test]
    fn cli_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn tool_call_with_global_flags_before_and_after() {
        let cli = parse("--thread-id thr_1 --timeout-ms 500 tool-call echo {}").unwrap();
        assert_eq!(cli.thread_id.as_deref(), Some("thr_1"));
        assert_eq!(cli.timeout_ms, Some(500));
        assert!(
            matches!(cli.command, Command::ToolCall { ref tool, ref json } if tool == "echo" && json == "{}")
        );
        let cli = parse("tool-spec echo --thread-id thr_2").unwrap();
        assert_eq!(cli.thread_id.as_deref(), Some("thr_2"));
        assert!(matches!(cli.command, Command::ToolSpec { ref tool } if tool == "echo"));
    }

    /// The fast path reads what clap reads, and leaves to clap what it does
    /// not take.
    #[test]
    fn agent_fast_path_agrees_with_clap() {
        let argv = |s: &str| -> Vec<String> {
            std::iter::once("pedelec-cli")
                .chain(s.split_whitespace())
                .map(String::from)
                .collect()
        };
        let taken = [
            "--thread-id thr_1 tool-call echo {}",
            "tool-call echo {} --thread-id thr_1",
            "--thread-id=thr_1 --timeout-ms=500 tool-call echo -",
            "--timeout-ms 500 tool-spec echo --thread-id thr_2",
            "tool-spec echo --thread-id thr_2 --timeout-ms 7",
        ];
        for s in taken {
            let args = argv(s);
            let (thread_id, timeout_ms, command) =
                agent_fast_path(&args).unwrap_or_else(|| panic!("{s} is a plain agent command"));
            let cli = Cli::try_parse_from(&args).unwrap();
            assert_eq!(
                (&thread_id, timeout_ms),
                (&cli.thread_id, cli.timeout_ms),
                "{s}"
            );
            let Plan::Tool(_, clap_command) = plan(cli) else {
                panic!("{s} is a tool command")
            };
            assert_eq!(command, clap_command, "{s}");
        }
        let left_to_clap = [
            "--help",
            "tool-call --help",
            "tool-call echo",
            "tool-call echo {} extra",
            "tool-spec",
            "--timeout-ms soon tool-spec x",
            "--timeout-ms -1 tool-spec x",
            "--thread-id a --thread-id b tool-spec x",
            "--thread-id tool-spec x",
            "--bogus tool-spec x",
            "tool-call echo -1",
            "mcp",
            "sessions list",
            "frobnicate",
            "",
        ];
        for s in left_to_clap {
            assert!(agent_fast_path(&argv(s)).is_none(), "{s} goes to clap");
        }
    }

    #[test]
    fn dash_is_a_json_argument() {
        let cli = parse("tool-call echo -").unwrap();
        assert!(matches!(cli.command, Command::ToolCall { ref json, .. } if json == "-"));
    }

    #[test]
    fn usage_errors() {
        assert!(parse("tool-call echo").is_err());
        assert!(parse("tool-spec").is_err());
        assert!(parse("--timeout-ms soon tool-spec x").is_err());
        assert!(parse("frobnicate").is_err());
        assert!(
            parse("sessions show thr_1").is_err(),
            "--origin is required"
        );
        assert!(
            parse("settings set profile codex high").is_err(),
            "--model is required"
        );
        assert!(
            parse("sites grant https://a.example --provider codex").is_err(),
            "--access is required"
        );
        assert!(
            parse("sites grant https://a.example --access edit").is_err(),
            "a provider is required"
        );
        assert!(
            parse("sites grant https://a.example --access admin --provider codex").is_err(),
            "only the three levels"
        );
    }

    #[test]
    fn help_is_not_an_error() {
        let e = parse("--help").unwrap_err();
        assert!(!e.use_stderr());
        let text = e.render().to_string();
        for needle in [
            pedelec_common::env::TOOL_TOKEN,
            "\"ok\":true",
            "Exit codes",
            "tool-call",
        ] {
            assert!(text.contains(needle), "help lacks {needle}");
        }
    }

    #[test]
    fn human_commands_map_to_admin_commands() {
        let admin = |s: &str| match plan(parse(s).unwrap()) {
            Plan::Admin(c) => c,
            Plan::Tool(..) | Plan::Mcp(..) => panic!("{s} is not a tool command"),
        };
        assert_eq!(
            admin("sessions list --origin https://a.example --json"),
            AdminCommand::SessionsList {
                origin: Some("https://a.example".into()),
                json: true
            }
        );
        assert_eq!(
            admin("sessions show thr_1 --origin https://a.example"),
            AdminCommand::SessionsShow {
                session_id: "thr_1".into(),
                origin: "https://a.example".into()
            }
        );
        assert_eq!(
            admin("sessions history thr_1 --json"),
            AdminCommand::SessionsHistory {
                session_id: "thr_1".into(),
                json: true
            }
        );
        assert_eq!(admin("providers"), AdminCommand::Providers { json: false });
        assert_eq!(
            admin("settings get"),
            AdminCommand::SettingsGet {
                secrets: Secrets::Masked
            }
        );
        assert_eq!(
            admin("settings get --show-secrets"),
            AdminCommand::SettingsGet {
                secrets: Secrets::Shown
            }
        );
        assert_eq!(
            admin("settings set default-provider claude"),
            AdminCommand::SettingsSet(SettingChange::DefaultProvider("claude".into()))
        );
        assert_eq!(
            admin(
                "sites grant https://a.example --access tools --provider codex --provider claude \
                 --folder /w --folder-once /x --any-model --embedder https://b.example --json"
            ),
            AdminCommand::SitesGrant {
                grant: SiteGrant {
                    origin: "https://a.example".into(),
                    access: "tools".into(),
                    providers: vec!["codex".into(), "claude".into()],
                    folders: vec![("/w".into(), false), ("/x".into(), true)],
                    any_model: true,
                    embedders: vec!["https://b.example".into()],
                },
                json: true,
            }
        );
        assert_eq!(
            admin("sites revoke https://a.example"),
            AdminCommand::SitesRevoke {
                origin: "https://a.example".into(),
                json: false
            }
        );
        assert_eq!(
            admin("sites list --json"),
            AdminCommand::SitesList { json: true }
        );
        assert_eq!(
            admin("settings set profile codex high --model gpt-5 --effort high"),
            AdminCommand::SettingsSet(SettingChange::Profile {
                provider: "codex".into(),
                level: "high".into(),
                model: "gpt-5".into(),
                effort: Some("high".into()),
            })
        );
    }
}
