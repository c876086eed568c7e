//! What every Pedelec process shares: where things live on disk, serving and
//! connecting over Unix sockets with the peer-uid check, the Pedelec error codes
//! and their gRPC form, JSON <-> `google.protobuf.Value`, ids and tracing.

// All of Pedelec's unsafe code is the libc calls in `process` and `memory`,
// `renameat2` in `recycle` (no safe wrapper in std), and the *at() calls in
// `beneath`.
#![deny(unsafe_code)]

pub mod agent_args;
#[cfg(feature = "clap")]
pub mod args;
#[allow(unsafe_code)]
pub mod beneath;
pub mod clients;
mod coalesce;
pub mod codes;
pub mod delta_merge;
pub mod error;
pub mod extension;
pub mod ids;
pub mod install;
pub mod json;
#[allow(unsafe_code)]
pub mod memory;
pub mod page_safe;
pub mod paths;
#[allow(unsafe_code)]
pub mod process;
pub mod programs;
pub mod recycle;
pub mod runtime;
pub mod secret;
pub mod server;
pub mod stdio;
pub mod telemetry;
pub mod uds;
pub mod wire;

pub use clients::Clients;
pub use codes::{Code, CodedError, code_of_status, is_storage_full, status_with_code};
pub use error::CommonError;
pub use paths::{DataDir, RuntimeDir};
pub use programs::Program;

/// The largest gRPC message a Pedelec server or client accepts or sends
/// (64 MiB, as the native host accepts). tonic's default decode limit is
/// 4 MiB and is set per generated server and client, not per channel:
/// [`server::ServiceServer`] sets it for every service's server, and
/// [`clients::Clients`] for every client.
pub const MAX_GRPC_MESSAGE: usize = 64 << 20;

/// The gRPC metadata key carrying a thread's tool token on ToolBridge calls.
pub const TOOL_TOKEN_HEADER: &str = "x-pedelec-tool-token";

/// The gRPC metadata key carrying the service secret on internal RPCs
/// ([`secret`]).
pub const SERVICE_SECRET_HEADER: &str = "x-pedelec-service-secret";

/// The largest tool result (or tool error) a page may answer with, counted as
/// the bytes of its serialized JSON ([`json::tool_result_len`],
/// [`json::tool_error_len`]): it ends up in the agent's stdout as JSON, so
/// JSON is the size that matters.
pub const MAX_TOOL_RESULT_BYTES: usize = 2 << 20;

/// The most entries one GetHistory page may ask for (session.proto): what
/// SessionService allows and the page size pedelec-cli reads with.
pub const MAX_HISTORY_PAGE: u32 = 1_000;

/// The origin pedelec-cli's own requests carry: a local caller, which
/// SessionService lets read any thread's history (GetHistory).
pub const CLI_ORIGIN: &str = "cli";

/// Exit codes of `pedelecd`, stable for scripts, the native host (which tells
/// "already running" from a failed start by them) and the tests.
pub mod pedelecd_exit {
    pub const OK: u8 = 0;
    /// Failure: start/stop failed, I/O, an RPC error.
    pub const FAILURE: u8 = 1;
    /// Usage error (clap), or bad input such as an invalid `--extension-id`.
    pub const USAGE: u8 = 2;
    /// `status`, `restart`: pedelecd is not running.
    pub const NOT_RUNNING: u8 = 3;
    /// `start`, `up`: another pedelecd already runs on this runtime dir.
    pub const ALREADY_RUNNING: u8 = 4;
}

/// The environment variables Pedelec's processes read or set.
pub mod env {
    /// The runtime dir (sockets, logs); see [`crate::RuntimeDir`].
    pub const RUNTIME_DIR: &str = "PEDELEC_RUNTIME_DIR";
    /// The data dir (settings, journal, workspaces); see [`crate::DataDir`].
    pub const HOME: &str = "PEDELEC_HOME";
    /// Where `pedelecd` and the service binaries are, when not beside the caller.
    pub const BIN_DIR: &str = "PEDELEC_BIN_DIR";
    /// Log filter (`RUST_LOG` syntax).
    pub const LOG: &str = "PEDELEC_LOG";
    /// Set for the agent process: its thread.
    pub const THREAD_ID: &str = "PEDELEC_THREAD_ID";
    /// Set for the agent process: its thread's secret tool token.
    pub const TOOL_TOKEN: &str = "PEDELEC_TOOL_TOKEN";
    /// The `pedelec-cli` named in the agent's prompt, when not beside the bridge.
    pub const CLI: &str = "PEDELEC_CLI";
    /// pedelec-agent: the Ollama server (set by ProviderService from the
    /// settings; never argv, so keys do not show in a process listing).
    pub const OLLAMA_ENDPOINT: &str = "PEDELEC_OLLAMA_ENDPOINT";
    /// pedelec-agent: the hosted Ollama's API key.
    pub const OLLAMA_API_KEY: &str = "PEDELEC_OLLAMA_API_KEY";
    /// pedelec-agent: the Tavily API key; web search is offered only with it.
    pub const TAVILY_API_KEY: &str = "PEDELEC_TAVILY_API_KEY";
    /// pedelec-agent: Tavily's URL (tests point it at a mock).
    pub const TAVILY_ENDPOINT: &str = "PEDELEC_TAVILY_ENDPOINT";
    /// pedelec-agent: a PEM file of extra CA certificates trusted for https
    /// endpoints (a private CA or a corporate proxy), on top of the Mozilla roots.
    pub const AGENT_CA_FILE: &str = "PEDELEC_AGENT_CA_FILE";
    /// pedelec-agent: rounds of tool calls one turn may take.
    pub const AGENT_MAX_TOOL_ROUNDS: &str = "PEDELEC_AGENT_MAX_TOOL_ROUNDS";
    /// More extension ids the native host and the asset transfer server
    /// accept (comma-separated), e.g. a Web Store build or a developer's own key.
    pub const ALLOWED_EXTENSIONS: &str = "PEDELEC_ALLOWED_EXTENSIONS";
    /// SessionService: the auto-end grace period.
    pub const AUTO_END_GRACE_MS: &str = "PEDELEC_AUTO_END_GRACE_MS";
    /// SessionService: how long ended threads stay in memory.
    pub const EVICT_ENDED_MS: &str = "PEDELEC_EVICT_ENDED_MS";
    /// SessionService: how long an ended thread is kept at all (its record
    /// and managed workspace are removed after).
    pub const ENDED_RETENTION_MS: &str = "PEDELEC_ENDED_RETENTION_MS";
    /// SessionService: turns one web origin may have running at once.
    pub const MAX_RUNNING_TURNS_PER_ORIGIN: &str = "PEDELEC_MAX_RUNNING_TURNS_PER_ORIGIN";
    /// SessionService: turns all callers together may have running at once.
    pub const MAX_RUNNING_TURNS: &str = "PEDELEC_MAX_RUNNING_TURNS";
    /// SessionService: sessions one web origin may create per rate window.
    pub const CREATE_RATE_LIMIT: &str = "PEDELEC_CREATE_RATE_LIMIT";
    /// SessionService: turns (SendText, Prepare) one web origin may start
    /// per rate window.
    pub const TURN_RATE_LIMIT: &str = "PEDELEC_TURN_RATE_LIMIT";
    /// SessionService: the window of those two rates.
    pub const RATE_WINDOW_MS: &str = "PEDELEC_RATE_WINDOW_MS";
    /// AssetService: the largest upload.
    pub const ASSET_MAX_BYTES: &str = "PEDELEC_ASSET_MAX_BYTES";
    /// AssetService: how long a transfer ticket lives.
    pub const ASSET_TICKET_TTL_MS: &str = "PEDELEC_ASSET_TICKET_TTL_MS";
    /// AssetService: how long one HTTP upload's body may take in all.
    pub const ASSET_UPLOAD_DEADLINE_MS: &str = "PEDELEC_ASSET_UPLOAD_DEADLINE_MS";
    /// AssetService: the most one thread's assets folder may hold.
    pub const ASSET_THREAD_QUOTA_BYTES: &str = "PEDELEC_ASSET_THREAD_QUOTA_BYTES";
    /// AssetService: the most all of one origin's assets folders may hold.
    pub const ASSET_ORIGIN_QUOTA_BYTES: &str = "PEDELEC_ASSET_ORIGIN_QUOTA_BYTES";
    /// ProviderService: `0` runs codex turns through `codex exec --json`
    /// even when the installed codex has a usable app-server.
    pub const CODEX_APP_SERVER: &str = "PEDELEC_CODEX_APP_SERVER";
    /// ProviderService: how long an idle thread's codex app-server lives.
    pub const CODEX_IDLE_MS: &str = "PEDELEC_CODEX_IDLE_MS";
    /// ProviderService: `0` runs opencode turns through `opencode run
    /// --format json` even when the installed opencode has a usable server.
    pub const OPENCODE_SERVE: &str = "PEDELEC_OPENCODE_SERVE";
    /// ProviderService: how long an idle thread's `opencode serve` lives.
    pub const OPENCODE_IDLE_MS: &str = "PEDELEC_OPENCODE_IDLE_MS";
    /// ProviderService: `0` starts agents unconfined even where bubblewrap
    /// works (docs/security.md, "Narrowing what an agent can reach").
    pub const CONFINE: &str = "PEDELEC_CONFINE";
    /// ProviderService: more variable names (comma-separated) passed from its
    /// environment to the agents, beyond the built-in allow-list.
    pub const AGENT_ENV: &str = "PEDELEC_AGENT_ENV";
    /// `0` turns off the write coalescer of every connection the process
    /// accepts or opens (see `coalesce.rs` in pedelec-common).
    pub const COALESCE_WRITES: &str = "PEDELEC_COALESCE_WRITES";
    /// `0` writes SessionService's journal records with a plain
    /// replace-by-rename instead of recycling files ([`crate::recycle`]).
    pub const RECYCLE_RECORDS: &str = "PEDELEC_RECYCLE_RECORDS";
    /// `0`: pedelecd execs its services even when they are its own
    /// executable, instead of forking them ([`crate::process::fork_server`]).
    pub const FORK_SERVICES: &str = "PEDELEC_FORK_SERVICES";
}

/// The four supervised services and the launcher, with their socket names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceName {
    Session,
    ToolBridge,
    Provider,
    Asset,
    Launcher,
}

impl ServiceName {
    /// The services `pedelecd` supervises, in start order.
    pub const SUPERVISED: [ServiceName; 4] = [
        ServiceName::Provider,
        ServiceName::ToolBridge,
        ServiceName::Asset,
        ServiceName::Session,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServiceName::Session => "session",
            ServiceName::ToolBridge => "toolbridge",
            ServiceName::Provider => "provider",
            ServiceName::Asset => "asset",
            ServiceName::Launcher => "launcher",
        }
    }

    pub fn socket_file(self) -> &'static str {
        match self {
            ServiceName::Session => "session.sock",
            ServiceName::ToolBridge => "toolbridge.sock",
            ServiceName::Provider => "provider.sock",
            ServiceName::Asset => "asset.sock",
            ServiceName::Launcher => "launcher.sock",
        }
    }

    /// The service's program.
    pub const fn program(self) -> Program {
        match self {
            ServiceName::Session => Program::Session,
            ServiceName::ToolBridge => Program::ToolBridge,
            ServiceName::Provider => Program::Provider,
            ServiceName::Asset => Program::Asset,
            ServiceName::Launcher => Program::Launcher,
        }
    }

    /// The service's binary, found beside `pedelecd`.
    pub const fn binary(self) -> &'static str {
        self.program().file_name()
    }

    /// The fully qualified gRPC service name, as health checks name it.
    pub fn grpc_name(self) -> &'static str {
        match self {
            ServiceName::Session => "pedelec.v1.SessionService",
            ServiceName::ToolBridge => "pedelec.v1.ToolBridgeService",
            ServiceName::Provider => "pedelec.v1.ProviderService",
            ServiceName::Asset => "pedelec.v1.AssetService",
            ServiceName::Launcher => "pedelec.v1.SupervisorService",
        }
    }

    pub fn parse(name: &str) -> Option<ServiceName> {
        [
            ServiceName::Session,
            ServiceName::ToolBridge,
            ServiceName::Provider,
            ServiceName::Asset,
            ServiceName::Launcher,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// Resolves when the process receives SIGTERM or SIGINT.
#[cfg(feature = "services")]
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Current wall-clock time as a protobuf timestamp.
pub fn now_timestamp() -> prost_types::Timestamp {
    to_timestamp(std::time::SystemTime::now())
}

pub fn to_timestamp(t: std::time::SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Milliseconds since the Unix epoch: the one timestamp form on the wire
/// (docs/native-messaging.md); times before 1970 count as 0.
pub fn timestamp_ms(t: &prost_types::Timestamp) -> u64 {
    let ms = t.seconds.saturating_mul(1000) + i64::from(t.nanos / 1_000_000);
    ms.max(0) as u64
}

/// Current wall-clock time in milliseconds since the Unix epoch (0 before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn ms_to_timestamp(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}
