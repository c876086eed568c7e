//! How ProviderService starts an agent process — every one-shot CLI turn and
//! the long-lived codex app-server and `opencode serve` — and ends all of it
//! (docs/security.md, item 9 and "Narrowing what an agent can reach"):
//!
//! - a deliberate environment: the service's variables pass only by the
//!   allow-list below, then the turn's own (`PEDELEC_THREAD_ID`,
//!   `PEDELEC_TOOL_TOKEN`, `PEDELEC_RUNTIME_DIR`, the provider's settings);
//! - where bubblewrap works, a mount and pid namespace in which the runtime
//!   dir holds only `toolbridge.sock` and the data dir is an empty tmpfs
//!   (the thread's workspace and the user's home bound back in when they lie
//!   inside it), with a fresh /proc that shows only the agent's own processes,
//!   and none of the user's desktop session: its runtime folder
//!   (`$XDG_RUNTIME_DIR`: D-Bus, systemd, Wayland, keyring, gpg-agent) and
//!   X11's sockets are empty, gpg-agent's sockets elsewhere refuse, and the
//!   variables that name them do not pass ([`Session`], [`NEVER_PASSED`]);
//! - a session of its own (`setsid`), without the service's controlling
//!   terminal, led like its process group by the agent (or its bwrap);
//! - where cgroup v2 allows it, a cgroup per agent, so what it started and
//!   detached (setsid, double fork) still ends with it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pedelec_common::process::cgroup::{self, Cgroup};
use pedelec_common::process::confine::{self, Verdict};
use pedelec_common::process::{self, SIGKILL, SIGTERM};
use pedelec_common::{ServiceName, env};

use crate::access::Access;
use crate::adapters::Provider;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::OnceCell;

/// Variables an agent gets from the service's environment, by exact name:
/// the user's session (who, where, which shell, locale, time zone, temp
/// folder), proxies and TLS roots, the ssh agent (for git; at full access
/// only, [`FULL_ONLY`]), the XDG base folders, claude's documented switches,
/// and pedelec-agent's own options.
pub const PASSED_NAMES: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "SSH_AUTH_SOCK",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_DIRS",
    "XDG_DATA_DIRS",
    "DISABLE_AUTOUPDATER",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
    "DISABLE_COST_WARNINGS",
    "DISABLE_BUG_COMMAND",
    "MCP_TIMEOUT",
    "MCP_TOOL_TIMEOUT",
    "MAX_THINKING_TOKENS",
    "BASH_DEFAULT_TIMEOUT_MS",
    "BASH_MAX_TIMEOUT_MS",
    env::TAVILY_ENDPOINT,
    env::AGENT_CA_FILE,
    env::AGENT_MAX_TOOL_ROUNDS,
];

/// Variables an agent gets by prefix: locale categories and each CLI's own
/// configuration (codex: `OPENAI_*`, `CODEX_HOME`; claude: `ANTHROPIC_*`,
/// `CLAUDE_*`, and Bedrock's/Vertex's `AWS_*`, `GOOGLE_*`; opencode:
/// `OPENCODE_*`; pedelec-agent's Ollama: `OLLAMA_*`; cursor: `CURSOR_*`;
/// antigravity: `GEMINI_*`, `GOOGLE_*`).
pub const PASSED_PREFIXES: &[&str] = &[
    "LC_",
    "OPENAI_",
    "CODEX_",
    "ANTHROPIC_",
    "CLAUDE_",
    "AWS_",
    "GOOGLE_",
    "GEMINI_",
    "OPENCODE_",
    "OLLAMA_",
    "CURSOR_",
];

/// Any other `*_API_KEY` passes too (opencode and the others read a
/// provider's key from `<PROVIDER>_API_KEY`), except Pedelec's own.
const PASSED_SUFFIX: &str = "_API_KEY";

/// Variables that never reach an agent, not even named in
/// [`env::AGENT_ENV`]: they lead to the user's desktop session — its D-Bus
/// bus (and through it `systemd-run --user`, which runs anything outside the
/// view), its display, its runtime folder, gpg-agent — which the view hides
/// ([`Session`]).
pub const NEVER_PASSED: &[&str] = &[
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "WAYLAND_SOCKET",
    "XAUTHORITY",
    "XDG_RUNTIME_DIR",
    "GPG_AGENT_INFO",
];

/// Variables that reach an agent only at full access: the ssh agent, whose
/// socket the view holds only then (git over ssh is a command like any
/// other; below full an agent runs none that needs it).
pub const FULL_ONLY: &[&str] = &["SSH_AUTH_SOCK"];

/// Whether the service's variable `name` reaches agents. Nothing named
/// `PEDELEC_*` passes unless listed: those are the service's own (the turn
/// sets the agent's). `extra` are the names of [`env::AGENT_ENV`].
pub fn passes(name: &str, extra: &[String]) -> bool {
    if NEVER_PASSED.contains(&name) {
        return false;
    }
    if PASSED_NAMES.contains(&name) || extra.iter().any(|e| e == name) {
        return true;
    }
    if name.starts_with("PEDELEC_") {
        return false;
    }
    PASSED_PREFIXES.iter().any(|p| name.starts_with(p)) || name.ends_with(PASSED_SUFFIX)
}

/// The service's variables that pass, from `vars` (the service's environment).
pub fn passed_env(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let vars: Vec<_> = vars.collect();
    let extra: Vec<String> = vars
        .iter()
        .find(|(k, _)| k == env::AGENT_ENV)
        .and_then(|(_, v)| v.to_str())
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    vars.into_iter()
        .filter(|(k, _)| k.to_str().is_some_and(|k| passes(k, &extra)))
        .collect()
}

/// What the agent's filesystem view hides: Pedelec's two folders.
#[derive(Clone, Debug)]
pub struct Hidden {
    pub runtime_dir: PathBuf,
    pub data_dir: PathBuf,
}

/// How the service starts agents; one per [`crate::Turns`].
pub struct Launch {
    passed: Vec<(OsString, OsString)>,
    /// `None`: never confined (the in-process tests of this crate).
    hidden: Option<Hidden>,
    verdict: OnceCell<Verdict>,
    /// Whether agents get a cgroup, when one can be made.
    cgroups: bool,
    cgroup_parent: OnceCell<Option<PathBuf>>,
    next: AtomicU64,
}

impl Launch {
    /// The allow-list applied to this process's environment; no confinement,
    /// no cgroups (the service turns them on: [`Launch::confined`]).
    pub fn from_process() -> Launch {
        Launch {
            passed: passed_env(std::env::vars_os()),
            hidden: None,
            verdict: OnceCell::new(),
            cgroups: false,
            cgroup_parent: OnceCell::new(),
            next: AtomicU64::new(1),
        }
    }

    /// Confines agents where bwrap works (hiding `hidden`) and gives each a
    /// cgroup where one can be made.
    pub fn confined(mut self, hidden: Hidden) -> Launch {
        self.hidden = Some(hidden);
        self.cgroups = true;
        self
    }

    /// Whether agents are confined, probed once (`path`: where bwrap is looked up).
    pub async fn verdict(&self, path: Option<&OsStr>) -> &Verdict {
        self.verdict
            .get_or_init(|| async {
                if self.hidden.is_none() {
                    return Verdict::Unavailable("not a service (in-process tests)".into());
                }
                let path = path.map(OsStr::to_os_string);
                let verdict = tokio::task::spawn_blocking(move || confine::probe(path.as_deref()))
                    .await
                    .unwrap_or_else(|e| Verdict::Unavailable(format!("the probe failed: {e}")));
                tracing::info!("{}", verdict.describe());
                verdict
            })
            .await
    }

    /// Whether agents are confined, once [`Launch::verdict`] has run.
    pub fn is_confined(&self) -> bool {
        matches!(self.verdict.get(), Some(Verdict::Confined { .. }))
    }

    /// What a long-lived agent server must be restarted for besides its
    /// program, workspace and variables: a confined one holds the ToolBridge
    /// socket file that existed when it started, so a restarted ToolBridge
    /// (a new socket) needs a new server.
    pub fn fingerprint(&self) -> String {
        use std::os::unix::fs::MetadataExt;
        match (&self.hidden, self.is_confined()) {
            (Some(h), true) => {
                let socket = h.runtime_dir.join(ServiceName::ToolBridge.socket_file());
                let ino = std::fs::metadata(socket).map(|m| m.ino()).unwrap_or(0);
                format!("confined:{ino}")
            }
            _ => "plain".into(),
        }
    }

    async fn cgroup_parent(&self) -> Option<&Path> {
        if !self.cgroups {
            return None;
        }
        self.cgroup_parent
            .get_or_init(|| async {
                match tokio::task::spawn_blocking(cgroup::own_dir).await {
                    Ok(Ok(dir)) => {
                        tracing::info!(parent = %dir.display(), "each agent gets its own cgroup");
                        Some(dir)
                    }
                    Ok(Err(why)) => {
                        tracing::info!("agents get no cgroup ({why}); what leaves their process group is not ended with them");
                        None
                    }
                    Err(e) => {
                        tracing::warn!("the cgroup probe failed: {e}");
                        None
                    }
                }
            })
            .await
            .as_deref()
    }

    /// A command that runs `program` as an agent in `workspace`: in bwrap when
    /// confined, with the deliberate environment (`turn_env` last), in its own
    /// process group, SIGKILLed if this service dies, in its own cgroup when
    /// one can be made. The caller adds the program's arguments, stdio and
    /// more variables, spawns, and hands the pid to [`AgentProcs::started`].
    pub async fn command(
        &self,
        program: &Path,
        workspace: &Path,
        path: Option<&OsStr>,
        turn_env: &[(String, OsString)],
        who: (Provider, Access),
    ) -> (Command, AgentProcs) {
        let confined = match self.verdict(path).await {
            Verdict::Confined { bwrap } => Some(bwrap.clone()),
            _ => None,
        };
        let mut cmd = match (&confined, &self.hidden) {
            (Some(bwrap), Some(hidden)) => {
                let env = |name: &str| -> Option<OsString> {
                    let turn = turn_env.iter().find(|(k, _)| k == name).map(|(_, v)| v);
                    let passed = self.passed.iter().find(|(k, _)| k == name).map(|(_, v)| v);
                    turn.or(passed).filter(|v| !v.is_empty()).cloned()
                };
                let mut view = View::new(who.0, who.1, workspace, program, &env);
                view.session =
                    Session::probe(&|name| std::env::var_os(name), process::uid(), &view.keep);
                if !who.1.is_full() {
                    // bwrap binds only what exists, and below Full the agent
                    // cannot make its state folders in a read-only home or
                    // workspace: they are made here, as the CLI would.
                    for state in view.state.iter().filter(|s| s.extension().is_none()) {
                        if let Err(e) = std::fs::create_dir_all(state) {
                            tracing::warn!(dir = %state.display(), "could not create the agent's state folder: {e}");
                        }
                    }
                }
                let mut cmd = Command::new(bwrap);
                cmd.args(bwrap_args(hidden, &view)).arg(program);
                cmd
            }
            _ => Command::new(program),
        };
        let full = who.1.is_full();
        cmd.env_clear()
            .envs(
                self.passed
                    .iter()
                    .filter(|(k, _)| full || !FULL_ONLY.iter().any(|n| k == n))
                    .map(|(k, v)| (k, v)),
            )
            .envs(turn_env.iter().map(|(k, v)| (k, v)))
            .current_dir(workspace);
        // A session of its own, without the service's controlling terminal
        // (a process with one could push input into it, TIOCSTI); the
        // leader's pid is still its process group's id, the group every
        // signal below goes to. (Not bwrap's --new-session: that would take
        // the agent out of the group bwrap leads, away from SIGTERM.)
        process::detach(cmd.as_std_mut());
        // The agent gets SIGKILL when this service dies (kill -9 included).
        // Agents are spawned from the runtime's one thread, the main thread
        // (`pedelec_common::runtime`), which lives as long as the process.
        // Only the leader gets
        // it (bwrap passes it on with --die-with-parent); the records in
        // `<runtime dir>/turns/` cover the rest (see `turns::reap_orphans`).
        process::die_with_parent(cmd.as_std_mut(), SIGKILL);
        let cgroup = match self.cgroup_parent().await {
            Some(parent) => {
                let name = format!(
                    "{}{}-{}",
                    pedelec_common::process::cgroup::AGENT_PREFIX,
                    std::process::id(),
                    self.next.fetch_add(1, Ordering::Relaxed)
                );
                match Cgroup::create(parent, &name) {
                    Ok(cg) => {
                        cg.join_at_exec(cmd.as_std_mut());
                        Some(cg)
                    }
                    Err(e) => {
                        tracing::warn!(parent = %parent.display(), "could not create the agent's cgroup: {e}");
                        None
                    }
                }
            }
            None => None,
        };
        let procs = AgentProcs {
            pgid: 0,
            confined: confined.is_some(),
            cgroup: std::sync::Mutex::new(cgroup),
        };
        (cmd, procs)
    }
}

/// What an agent's confined view holds besides the hiding of Pedelec's
/// folders: at [`Access::Full`] the whole filesystem writable, as the user
/// has it; below, everything read-only but the workspace (at Edit), the
/// CLI's own state folders and a private /tmp (docs/security.md, "Access
/// levels").
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub access: Access,
    pub workspace: PathBuf,
    /// The user's home, bound back where a hidden folder or the private /tmp
    /// would cover it.
    pub home: Option<PathBuf>,
    /// The CLI's own state (its login, sessions, caches): writable below Full.
    pub state: Vec<PathBuf>,
    /// Folders the agent runs from (PATH's, the program's): bound back
    /// read-only where the private /tmp would cover them.
    pub keep: Vec<PathBuf>,
    /// `$TMPDIR` when it is not /tmp: private too.
    pub tmpdir: Option<PathBuf>,
    /// What of the user's desktop session it hides, at every level.
    pub session: Session,
}

/// The private temporary folder of a view below Full.
const TMP: &str = "/tmp";

impl View {
    /// The view of `provider`'s agent at `access`; `env` reads the agent's
    /// environment (HOME, XDG_*, CODEX_HOME, PATH, TMPDIR).
    pub fn new(
        provider: Provider,
        access: Access,
        workspace: &Path,
        program: &Path,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> View {
        let home = env("HOME").map(PathBuf::from);
        let mut keep: Vec<PathBuf> = env("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        keep.extend(program.parent().map(Path::to_path_buf));
        keep.extend(install_root(program));
        keep.retain(|p| p.is_absolute());
        View {
            access,
            workspace: workspace.to_path_buf(),
            state: state_dirs(provider, workspace, home.as_deref(), env),
            home,
            keep,
            tmpdir: env("TMPDIR")
                .map(PathBuf::from)
                .filter(|t| t.is_absolute() && t != Path::new(TMP)),
            session: Session::default(),
        }
    }
}

/// X11's socket folder (Xorg's and Xwayland's `X<display>` sockets).
pub const X11_SOCKETS: &str = "/tmp/.X11-unix";

/// The user's desktop session as an agent's view hides it, at every level
/// (docs/security.md, "Filesystem view"): what is there lets a process run
/// commands outside the view (`systemd-run --user`, D-Bus activation),
/// read the keyring, drive the display, or use gpg-agent's keys. No agent CLI
/// Pedelec runs needs any of it: they keep their logins in files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Session {
    /// Folders replaced by empty ones: the session's runtime folder
    /// (`$XDG_RUNTIME_DIR`, `/run/user/<uid>`: the D-Bus bus, systemd's user
    /// manager, Wayland, pipewire, the keyring, gpg-agent), and
    /// [`X11_SOCKETS`]. Nothing is bound back into them but Pedelec's
    /// `toolbridge.sock` and, at full access, the ssh agent's socket.
    pub dirs: Vec<PathBuf>,
    /// Sockets elsewhere that a connection must not reach, replaced by
    /// `/dev/null` (connecting is refused): gpg-agent's in `$GNUPGHOME` or
    /// `~/.gnupg` (where it keeps them when there is no `/run/user`).
    pub sockets: Vec<PathBuf>,
    /// `$SSH_AUTH_SOCK`: bound back at full access only.
    pub ssh_agent: Option<PathBuf>,
    /// Folders the agent runs from (PATH's, the program's) inside a session
    /// folder — fnm keeps its Node shims in `$XDG_RUNTIME_DIR/fnm_multishells`
    /// — bound back read-only when no socket lies within them.
    pub programs: Vec<PathBuf>,
}

impl Session {
    /// The session as it is now, from the service's environment (`env`:
    /// XDG_RUNTIME_DIR, HOME, GNUPGHOME, SSH_AUTH_SOCK) and uid; `keep` are
    /// the folders the agent runs from ([`View::keep`]). A runtime folder
    /// counts only as the XDG spec describes one — the user's own, mode 0700
    /// — and not when it holds the home (a misconfigured
    /// `XDG_RUNTIME_DIR=$HOME` or `=/tmp` hides nothing).
    pub fn probe(env: &dyn Fn(&str) -> Option<OsString>, uid: u32, keep: &[PathBuf]) -> Session {
        let home = env("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
        let mut dirs: Vec<PathBuf> = Vec::new();
        let runtime = env("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .into_iter()
            .chain([PathBuf::from(format!("/run/user/{uid}"))]);
        for dir in runtime.filter(|d| d.is_absolute()) {
            let Some(dir) = private_dir(&dir, uid) else {
                continue;
            };
            let holds_home = home.as_deref().is_some_and(|h| h.starts_with(&dir));
            if !holds_home && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        if Path::new(X11_SOCKETS).is_dir() {
            dirs.push(X11_SOCKETS.into());
        }
        let gnupg = env("GNUPGHOME")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute())
            .or_else(|| home.map(|h| h.join(".gnupg")));
        let ssh_agent = env("SSH_AUTH_SOCK")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && is_socket(p));
        let programs = keep
            .iter()
            .filter(|k| {
                let real = std::fs::canonicalize(k).unwrap_or_else(|_| k.to_path_buf());
                dirs.iter()
                    .any(|d| (k.starts_with(d) || real.starts_with(d)) && *k != d)
            })
            .filter(|k| holds_no_socket(k))
            .cloned()
            .collect();
        Session {
            dirs,
            sockets: gnupg.map(|d| sockets_in(&d)).unwrap_or_default(),
            ssh_agent,
            programs,
        }
    }
}

/// Whether nothing under `dir` (links followed at the top only) is a
/// socket, looked at down to 3 levels and 4096 entries; a folder too big to
/// tell counts as holding one.
fn holds_no_socket(dir: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let mut seen = 0;
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..3 {
        let mut next = Vec::new();
        for d in &level {
            let Ok(entries) = std::fs::read_dir(d) else {
                continue;
            };
            for e in entries.flatten() {
                seen += 1;
                let Ok(t) = e.file_type() else { continue };
                if t.is_socket() || seen > 4096 {
                    return false;
                }
                if t.is_dir() {
                    next.push(e.path());
                }
            }
        }
        level = next;
    }
    level.is_empty()
}

/// `dir`, resolved, if it is a folder of `uid`'s that no one else may enter.
fn private_dir(dir: &Path, uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = std::fs::canonicalize(dir).ok()?;
    let meta = std::fs::metadata(&dir).ok()?;
    let private = meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0;
    (private && dir != Path::new("/")).then_some(dir)
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// The sockets directly in `dir`, sorted.
fn sockets_in(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The folder a CLI is installed in, found through the symlinks to it: an
/// npm-installed CLI is a link into its package tree and runs other files of
/// that tree (codex's wrapper starts the platform package's binary), so the
/// `node_modules` it lies in; else the resolved program's folder. Kept like
/// PATH's folders, where the private /tmp would cover it.
fn install_root(program: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(program).ok()?;
    let root = real
        .ancestors()
        .find(|a| a.file_name() == Some("node_modules".as_ref()))
        .or_else(|| real.parent())?;
    Some(root.to_path_buf())
}

/// Where each CLI keeps what it must write to work at all (logins, session
/// history, caches, lock files), from the agent's environment the way the
/// CLI reads it: codex `$CODEX_HOME` or `~/.codex`; claude
/// `$CLAUDE_CONFIG_DIR` or `~/.claude`, `~/.claude.json` and its cache
/// (`claude-cli-nodejs` in `$XDG_CACHE_HOME`); opencode its four XDG folders (`opencode` in
/// `$XDG_{DATA,STATE,CACHE,CONFIG}_HOME`, by default `~/.local/share`,
/// `~/.local/state`, `~/.cache`, `~/.config`); cursor `~/.cursor` and its
/// XDG config; antigravity `~/.gemini`; pedelec-agent its conversations in
/// the workspace's `.pedelec-runtime/agent`.
pub fn state_dirs(
    provider: Provider,
    workspace: &Path,
    home: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<PathBuf> {
    let in_home = |rel: &str| home.map(|h| h.join(rel));
    let var_or_home = |var: &str, rel: &str| {
        env(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| in_home(rel))
    };
    let xdg = |kind: &str, name: &str| {
        let default = match kind {
            "DATA" => ".local/share",
            "STATE" => ".local/state",
            "CACHE" => ".cache",
            _ => ".config",
        };
        var_or_home(&format!("XDG_{kind}_HOME"), default).map(|d| d.join(name))
    };
    let dirs = match provider {
        Provider::Codex => vec![var_or_home("CODEX_HOME", ".codex")],
        Provider::Claude => vec![
            var_or_home("CLAUDE_CONFIG_DIR", ".claude"),
            in_home(".claude.json"),
            xdg("CACHE", "claude-cli-nodejs"),
        ],
        Provider::Opencode => ["DATA", "STATE", "CACHE", "CONFIG"]
            .map(|kind| xdg(kind, "opencode"))
            .into(),
        Provider::Cursor => vec![in_home(".cursor"), xdg("CONFIG", "cursor")],
        Provider::Antigravity => vec![in_home(".gemini")],
        Provider::Ollama => vec![Some(pedelec_common::beneath::agent_folder(workspace))],
    };
    dirs.into_iter().flatten().collect()
}

/// bwrap's options for an agent's view (then `program` and its arguments
/// follow): a fresh /proc of a new pid namespace, Pedelec's folders and the
/// user's session folders ([`Session`]) replaced by empty ones — the runtime
/// dir then gets `toolbridge.sock` back, a workspace or home inside the
/// data dir is bound back in, and at Full the ssh agent's socket — and
/// gpg-agent's other sockets replaced by `/dev/null`; per level: at Full the
/// whole filesystem as it is; below, the filesystem read-only (devices still
/// usable), a private /tmp (and `$TMPDIR`), the CLI's state folders
/// writable, the workspace writable at Edit and read-only at Tools.
///
/// The mounts go outer first (a mount hides what was mounted below its path
/// before), so whatever is bound back, nothing inside a hidden folder comes
/// back with it but what is named here; at the same path a hiding comes last.
pub fn bwrap_args(hidden: &Hidden, view: &View) -> Vec<OsString> {
    let full = view.access.is_full();
    let mut args: Vec<OsString> = Vec::new();
    if full {
        let namespace = &confine::NAMESPACE_ARGS[..confine::NAMESPACE_ARGS.len() - 1];
        args.extend(namespace.iter().map(OsString::from));
    } else {
        args.extend(
            [
                "--die-with-parent",
                "--unshare-pid",
                "--ro-bind",
                "/",
                "/",
                "--dev-bind",
                "/dev",
                "/dev",
                "--proc",
                "/proc",
            ]
            .map(OsString::from),
        );
    }
    let mut mounts = Mounts::default();
    let pedelec = [hidden.data_dir.as_path(), hidden.runtime_dir.as_path()];
    let session: Vec<&Path> = view.session.dirs.iter().map(PathBuf::as_path).collect();
    // Fresh but not secret: what the agent needs from inside comes back.
    let private: Vec<&Path> = if full {
        Vec::new()
    } else {
        std::iter::once(Path::new(TMP))
            .chain(view.tmpdir.as_deref())
            .collect()
    };
    for dir in &private {
        mounts.tmpfs(dir, Rank::Fresh);
    }
    for dir in pedelec.iter().chain(&session) {
        mounts.tmpfs(dir, Rank::Hide);
    }
    let socket = hidden
        .runtime_dir
        .join(ServiceName::ToolBridge.socket_file());
    mounts.bind("--bind-try", &socket, Rank::Hole);
    let inside = |p: &Path, dirs: &[&Path]| dirs.iter().any(|d| p.starts_with(d) && p != *d);
    let in_session = |p: &Path| session.iter().any(|d| p.starts_with(d));
    // Bound back where Pedelec's folders or the private /tmp cover it; never
    // a folder inside a session folder (a socket in a read-only bind still
    // takes connections).
    let covered = |p: &Path| (inside(p, &pedelec) || inside(p, &private)) && !in_session(p);
    let workspace = view.workspace.as_path();
    if full {
        // As before levels: the workspace and the home, writable, where
        // hidden folders would hide them.
        if covered(workspace) || inside(workspace, &session) {
            mounts.bind("--bind", workspace, Rank::Bind);
        }
        if let Some(home) = view.home.as_deref().filter(|h| covered(h)) {
            mounts.bind("--bind", home, Rank::Bind);
        }
        // git over ssh: the ssh agent, where a session folder holds it.
        if let Some(ssh) = view.session.ssh_agent.as_deref()
            && inside(ssh, &session)
            && !pedelec.iter().any(|d| ssh.starts_with(d))
        {
            mounts.bind("--bind-try", ssh, Rank::Hole);
        }
    } else {
        for keep in view.home.iter().chain(&view.keep).filter(|k| covered(k)) {
            mounts.bind("--ro-bind-try", keep, Rank::Bind);
        }
        for state in view.state.iter().filter(|s| !in_session(s)) {
            mounts.bind("--bind-try", state, Rank::Bind);
        }
        let how = if view.access.writes_workspace() {
            "--bind"
        } else {
            "--ro-bind"
        };
        mounts.bind(how, workspace, Rank::Bind);
    }
    for program in &view.session.programs {
        mounts.bind("--ro-bind-try", program, Rank::Hole);
    }
    let ssh_kept = if full {
        view.session.ssh_agent.as_deref()
    } else {
        None
    };
    for socket in view
        .session
        .sockets
        .iter()
        .filter(|s| Some(s.as_path()) != ssh_kept)
    {
        mounts.push(
            socket,
            Rank::Hole,
            ["--ro-bind-try".into(), "/dev/null".into(), socket.into()],
        );
    }
    args.extend(mounts.in_order());
    args.push("--".into());
    args
}

/// Where a mount goes among those at the same depth: fresh folders first,
/// then what is bound back, then what is hidden (hiding wins at the same
/// path), then what is punched back through a hidden folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    Fresh,
    Bind,
    Hide,
    Hole,
}

/// bwrap mount options, each at the path it mounts on.
#[derive(Default)]
struct Mounts(Vec<(usize, Rank, Vec<OsString>)>);

impl Mounts {
    fn push(&mut self, at: &Path, rank: Rank, args: [OsString; 3]) {
        self.0.push((at.components().count(), rank, args.to_vec()));
    }

    fn tmpfs(&mut self, dir: &Path, rank: Rank) {
        let depth = dir.components().count();
        if !self
            .0
            .iter()
            .any(|(d, r, a)| *d == depth && *r == rank && a[1] == dir)
        {
            self.0
                .push((depth, rank, vec!["--tmpfs".into(), dir.into()]));
        }
    }

    fn bind(&mut self, how: &str, path: &Path, rank: Rank) {
        self.push(path, rank, [how.into(), path.into(), path.into()]);
    }

    /// Outer first; at one depth by rank, then in the order pushed.
    fn in_order(mut self) -> Vec<OsString> {
        self.0.sort_by_key(|(depth, rank, _)| (*depth, *rank));
        self.0.into_iter().flat_map(|(_, _, args)| args).collect()
    }
}

/// Everything one agent started: its process group (led by the agent, or by
/// bwrap when confined) and its cgroup, if it has one.
#[derive(Debug)]
pub struct AgentProcs {
    pgid: i32,
    confined: bool,
    /// Taken when it is removed.
    cgroup: std::sync::Mutex<Option<Cgroup>>,
}

impl AgentProcs {
    /// The spawned leader's pid, which is the group's id.
    pub fn started(&mut self, pid: i32) {
        self.pgid = pid;
    }

    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The cgroup's folder, for the crash record.
    pub fn cgroup_dir(&self) -> Option<PathBuf> {
        self.cgroup().as_ref().map(|cg| cg.dir().to_path_buf())
    }

    fn cgroup(&self) -> std::sync::MutexGuard<'_, Option<Cgroup>> {
        // An Option stays consistent even if a holder panicked.
        self.cgroup.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// SIGTERM to the agent's process group. When confined, bwrap (the
    /// group's leader) is spared: it would die of it and take the agent down
    /// with SIGKILL (--die-with-parent) before it could end cleanly; it exits
    /// by itself with the agent's status once the agent has.
    pub fn terminate(&self) {
        if self.confined {
            process::signal_group_but_leader(self.pgid, SIGTERM);
        } else {
            process::signal_group(self.pgid, SIGTERM);
        }
    }

    /// SIGKILL to the group and to everything in the cgroup.
    pub fn kill(&self) {
        process::signal_group(self.pgid, SIGKILL);
        if let Some(cg) = self.cgroup().as_ref() {
            cg.kill();
        }
    }

    /// Whether the group still has a member; only what leaves the group
    /// keeps a cgroup populated, and that is killed, not waited for.
    pub fn group_alive(&self) -> bool {
        process::group_alive(self.pgid)
    }

    /// Kills what is left (the group, the cgroup: what escaped the group
    /// with setsid or a double fork), waits until all of it is gone (at most
    /// `within`), and removes the cgroup. Returns whether all is gone.
    pub async fn end(&self, within: Duration) -> bool {
        process::signal_group(self.pgid, SIGKILL);
        let group_gone = process::wait_group_gone(self.pgid, within).await;
        let cgroup_gone = self.end_cgroup(within).await;
        group_gone && cgroup_gone
    }

    /// Kills what is left in the agent's cgroup (what escaped the group),
    /// waits until it is gone (at most `within`) and removes the cgroup;
    /// true when there is none. For a group already seen empty.
    pub async fn end_cgroup(&self, within: Duration) -> bool {
        let Some(cg) = self.cgroup().take() else {
            return true;
        };
        let gone = cg.kill_and_remove(within).await;
        if !gone {
            tracing::warn!(cgroup = %cg.dir().display(), "an agent's cgroup outlived SIGKILL");
        }
        gone
    }
}

impl Drop for AgentProcs {
    /// A dropped task (service shutdown, panic) leaves nothing running.
    fn drop(&mut self) {
        if let Some(cg) = self.cgroup().take() {
            cg.kill();
            let dir = cg.dir().to_path_buf();
            drop(cg);
            // Emptying takes the kernel a moment; no async context to wait in.
            std::thread::spawn(move || cgroup::kill_and_remove_dir(&dir));
        }
    }
}

/// The turn's own variables, in the order they are set: the runtime dir, the
/// thread's tool variables, the provider's settings, PATH, and claude's
/// root switch.
pub fn turn_env(
    runtime_dir: Option<&Path>,
    tool_env: &HashMap<String, String>,
    agent_env: &HashMap<String, String>,
    path: OsString,
    claude_as_root: bool,
) -> Vec<(String, OsString)> {
    let mut out: Vec<(String, OsString)> = Vec::new();
    if let Some(dir) = runtime_dir {
        out.push((env::RUNTIME_DIR.into(), dir.as_os_str().to_os_string()));
    }
    let mut sorted = |m: &HashMap<String, String>| {
        let mut v: Vec<_> = m.iter().collect();
        v.sort();
        out.extend(v.into_iter().map(|(k, v)| (k.clone(), OsString::from(v))));
    };
    sorted(tool_env);
    sorted(agent_env);
    out.push(("PATH".into(), path));
    if claude_as_root {
        // Claude refuses --dangerously-skip-permissions as root otherwise.
        out.push(("IS_SANDBOX".into(), "1".into()));
    }
    out
}

/// Reads a child's pipe to its end, keeping its last `keep` bytes (a
/// failure's details, a `--version`'s answer); memory stays within twice that.
pub async fn read_tail<R: AsyncRead + Unpin>(reader: Option<R>, keep: usize) -> String {
    let Some(mut reader) = reader else {
        return String::new();
    };
    let mut tail = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > 2 * keep {
            tail.drain(..tail.len() - keep);
        }
    }
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    String::from_utf8_lossy(&tail).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names [`passed_env`] keeps of `vars`, in order.
    fn passed_names(vars: &[(&str, &str)]) -> Vec<String> {
        passed_env(
            vars.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
        .into_iter()
        .map(|(k, _)| k.into_string().unwrap())
        .collect()
    }

    #[test]
    fn the_allow_list_passes_the_users_and_the_clis_variables_only() {
        let vars = [
            ("HOME", "/h"),
            ("LC_ALL", "C"),
            ("XDG_CONFIG_HOME", "/h/.config"),
            ("CODEX_HOME", "/h/.codex"),
            ("ANTHROPIC_BASE_URL", "http://x"),
            ("OPENROUTER_API_KEY", "k"),
            ("https_proxy", "http://p"),
            ("RUST_LOG", "trace"),
            ("PEDELEC_HOME", "/data"),
            ("PEDELEC_LOG", "debug"),
            ("PEDELEC_INTERNAL_X", "secret"),
            ("PEDELEC_OLLAMA_API_KEY", "service's copy"),
            ("PEDELEC_TAVILY_ENDPOINT", "http://t"),
            ("MY_TOOL_HOME", "/opt/t"),
            ("LD_PRELOAD", "/evil.so"),
        ];
        let passed = passed_names(&vars);
        assert_eq!(
            passed,
            [
                "HOME",
                "LC_ALL",
                "XDG_CONFIG_HOME",
                "CODEX_HOME",
                "ANTHROPIC_BASE_URL",
                "OPENROUTER_API_KEY",
                "https_proxy",
                "PEDELEC_TAVILY_ENDPOINT"
            ]
        );
    }

    #[test]
    fn pedelec_agent_env_names_more_variables() {
        let vars = [
            (env::AGENT_ENV, " MY_TOOL_HOME , ,PEDELEC_X"),
            ("MY_TOOL_HOME", "/opt/t"),
            ("PEDELEC_X", "1"),
            ("OTHER", "no"),
        ];
        let passed = passed_names(&vars);
        assert_eq!(passed, ["MY_TOOL_HOME", "PEDELEC_X"]);
    }

    fn view(access: Access, workspace: &str) -> View {
        View {
            access,
            workspace: workspace.into(),
            home: Some("/home/u".into()),
            state: vec!["/home/u/.codex".into()],
            keep: vec!["/usr/bin".into(), "/tmp/stubs".into()],
            tmpdir: None,
            session: Session::default(),
        }
    }

    fn hidden() -> Hidden {
        Hidden {
            runtime_dir: "/run/user/1/pedelec".into(),
            data_dir: "/home/u/.local/share/pedelec".into(),
        }
    }

    fn joined(hidden: &Hidden, view: &View) -> String {
        bwrap_args(hidden, view)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn bwrap_hides_pedelecs_folders_and_binds_back_what_the_agent_needs() {
        let hidden = hidden();
        let ws = "/home/u/.local/share/pedelec/workspaces/thr_1";
        let joined = joined(&hidden, &view(Access::Full, ws));
        assert_eq!(
            joined,
            format!(
                "--die-with-parent --unshare-pid --dev-bind / / --proc /proc \
                 --tmpfs /run/user/1/pedelec \
                 --tmpfs /home/u/.local/share/pedelec \
                 --bind-try /run/user/1/pedelec/toolbridge.sock /run/user/1/pedelec/toolbridge.sock \
                 --bind {ws} {ws} --"
            )
        );
        // A workspace elsewhere is not bound (it is there already).
        let other = bwrap_args(&hidden, &view(Access::Full, "/home/u/project"));
        assert!(!other.iter().any(|a| a == "/home/u/project"));
    }

    #[test]
    fn below_full_access_the_view_is_read_only_but_the_workspace_state_and_tmp() {
        let hidden = hidden();
        let ws = "/home/u/project";
        let edit = joined(&hidden, &view(Access::Edit, ws));
        assert_eq!(
            edit,
            format!(
                "--die-with-parent --unshare-pid --ro-bind / / --dev-bind /dev /dev --proc /proc \
                 --tmpfs /tmp \
                 --ro-bind-try /tmp/stubs /tmp/stubs \
                 --bind-try /home/u/.codex /home/u/.codex \
                 --bind {ws} {ws} \
                 --tmpfs /run/user/1/pedelec \
                 --tmpfs /home/u/.local/share/pedelec \
                 --bind-try /run/user/1/pedelec/toolbridge.sock /run/user/1/pedelec/toolbridge.sock --"
            )
        );
        let tools = joined(&hidden, &view(Access::Tools, ws));
        assert_eq!(
            tools,
            edit.replace(
                &format!("--bind {ws} {ws}"),
                &format!("--ro-bind {ws} {ws}")
            )
        );
        // A home under a covered folder comes back read-only, under the
        // state folders bound writable inside it.
        let mut in_tmp = view(Access::Edit, ws);
        in_tmp.home = Some("/tmp/t/home".into());
        in_tmp.state = vec!["/tmp/t/home/.codex".into()];
        in_tmp.tmpdir = Some("/var/tmp/u".into());
        let j = joined(&hidden, &in_tmp);
        assert!(j.contains("--tmpfs /var/tmp/u "), "{j}");
        let home = j.find("--ro-bind-try /tmp/t/home /tmp/t/home").expect(&j);
        let state = j.find("--bind-try /tmp/t/home/.codex").expect(&j);
        assert!(home < state, "{j}");
    }

    #[test]
    fn a_state_folder_inside_a_read_only_workspace_stays_writable() {
        let mut v = view(Access::Tools, "/w");
        v.state = vec!["/w/.pedelec-runtime/agent".into()];
        let j = joined(&hidden(), &v);
        let workspace = j.find("--ro-bind /w /w ").expect(&j);
        let state = j
            .find("--bind-try /w/.pedelec-runtime/agent /w/.pedelec-runtime/agent ")
            .expect(&j);
        assert!(workspace < state, "{j}");
    }

    /// A session as a desktop login has it: the runtime folder (Pedelec's
    /// runtime dir inside it, gpg-agent and the ssh agent too), X11's
    /// sockets, and gpg-agent's sockets in `~/.gnupg`.
    fn desktop() -> (Hidden, Session) {
        let hidden = Hidden {
            runtime_dir: "/run/user/1/pedelec".into(),
            data_dir: "/home/u/.local/share/pedelec".into(),
        };
        let session = Session {
            dirs: vec!["/run/user/1".into(), X11_SOCKETS.into()],
            sockets: vec![
                "/home/u/.gnupg/S.gpg-agent".into(),
                "/home/u/.gnupg/S.gpg-agent.ssh".into(),
            ],
            ssh_agent: Some("/run/user/1/keyring/ssh".into()),
            programs: vec!["/run/user/1/fnm_multishells/1_2/bin".into()],
        };
        (hidden, session)
    }

    #[test]
    fn the_users_session_is_hidden_at_every_level() {
        let (hidden, session) = desktop();
        for access in [Access::Tools, Access::Edit, Access::Full] {
            let mut v = view(access, "/home/u/project");
            v.session = session.clone();
            // A PATH folder and a state folder in the session's folder are
            // not bound back (a socket in a read-only bind takes connections)
            // unless the probe found the folder free of sockets (`programs`).
            v.keep.push("/run/user/1/bin".into());
            v.state.push("/run/user/1/cache".into());
            let j = joined(&hidden, &v);
            let pos = |needle: &str| j.find(needle).unwrap_or_else(|| panic!("{needle}: {j}"));
            let session_dir = pos("--tmpfs /run/user/1 ");
            let runtime = pos("--tmpfs /run/user/1/pedelec ");
            let tools = pos("--bind-try /run/user/1/pedelec/toolbridge.sock");
            assert!(session_dir < runtime && runtime < tools, "{access:?}: {j}");
            pos("--tmpfs /tmp/.X11-unix ");
            pos("--ro-bind-try /dev/null /home/u/.gnupg/S.gpg-agent ");
            pos("--ro-bind-try /dev/null /home/u/.gnupg/S.gpg-agent.ssh ");
            assert!(
                !j.contains("/run/user/1/bin") && !j.contains("/run/user/1/cache"),
                "{j}"
            );
            let shims = pos("--ro-bind-try /run/user/1/fnm_multishells/1_2/bin ");
            assert!(session_dir < shims, "{access:?}: {j}");
            // The ssh agent comes back at Full only.
            assert_eq!(
                j.contains("--bind-try /run/user/1/keyring/ssh /run/user/1/keyring/ssh"),
                access.is_full(),
                "{access:?}: {j}"
            );
            assert!(j.ends_with(" --"), "{j}");
        }
    }

    #[test]
    fn at_full_access_the_ssh_agent_may_be_gpg_agents_socket() {
        let (hidden, mut session) = desktop();
        session.ssh_agent = Some("/home/u/.gnupg/S.gpg-agent.ssh".into());
        let mut v = view(Access::Full, "/home/u/project");
        v.session = session.clone();
        let j = joined(&hidden, &v);
        assert!(j.contains("/dev/null /home/u/.gnupg/S.gpg-agent "), "{j}");
        assert!(!j.contains("S.gpg-agent.ssh"), "left as it is: {j}");
        v.access = Access::Edit;
        let j = joined(&hidden, &v);
        assert!(
            j.contains("/dev/null /home/u/.gnupg/S.gpg-agent.ssh"),
            "{j}"
        );
    }

    #[test]
    fn a_workspace_holding_a_hidden_folder_does_not_bring_it_back() {
        let (hidden, session) = desktop();
        for access in [Access::Tools, Access::Edit, Access::Full] {
            let mut v = view(access, "/run");
            v.session = session.clone();
            let j = joined(&hidden, &v);
            let hide = j.find("--tmpfs /run/user/1 ").expect(&j);
            if let Some(ws) = j.find(" /run /run ") {
                assert!(ws < hide, "{access:?}: {j}");
            }
            // A workspace that is the session's folder stays hidden too.
            v.workspace = "/run/user/1".into();
            let j = joined(&hidden, &v);
            let last_bind = j.rfind(" /run/user/1 /run/user/1 ");
            let hide = j.rfind("--tmpfs /run/user/1 ").expect(&j);
            assert!(last_bind.is_none_or(|b| b < hide), "{access:?}: {j}");
        }
    }

    #[test]
    fn the_session_is_found_as_the_xdg_spec_describes_it() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let uid = pedelec_common::process::uid();
        let runtime = root.path().join("rt");
        let home = root.path().join("home");
        let gnupg = home.join(".gnupg");
        std::fs::create_dir_all(&runtime).unwrap();
        std::fs::create_dir_all(&gnupg).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let agent = gnupg.join("S.gpg-agent");
        let ssh = runtime.join("ssh");
        let _listening = [
            std::os::unix::net::UnixListener::bind(&agent).unwrap(),
            std::os::unix::net::UnixListener::bind(&ssh).unwrap(),
        ];
        std::fs::write(gnupg.join("pubring.kbx"), "").unwrap();
        let vars: HashMap<&str, OsString> = [
            ("XDG_RUNTIME_DIR", runtime.clone().into()),
            ("HOME", home.clone().into()),
            ("SSH_AUTH_SOCK", ssh.clone().into()),
        ]
        .into();
        let env = |k: &str| vars.get(k).cloned();
        let found = Session::probe(&env, uid, &[]);
        let runtime = std::fs::canonicalize(&runtime).unwrap();
        assert_eq!(found.dirs.first(), Some(&runtime));
        assert_eq!(found.sockets, [agent]);
        assert_eq!(found.ssh_agent, Some(ssh));
        // PATH folders in the runtime folder: back only without a socket.
        let shims = runtime.join("fnm/bin");
        let sockets = runtime.join("sockets/bin");
        std::fs::create_dir_all(&shims).unwrap();
        std::fs::create_dir_all(&sockets).unwrap();
        std::os::unix::fs::symlink("/usr/bin/env", shims.join("node")).unwrap();
        let _bus = std::os::unix::net::UnixListener::bind(sockets.join("bus")).unwrap();
        let keep = [shims.clone(), sockets, "/usr/bin".into()];
        assert_eq!(Session::probe(&env, uid, &keep).programs, [shims]);
        // Open to others, or holding the home: not a session's folder.
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!Session::probe(&env, uid, &[]).dirs.contains(&runtime));
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let vars: HashMap<&str, OsString> = [
            ("XDG_RUNTIME_DIR", root.path().into()),
            ("HOME", home.into()),
        ]
        .into();
        let env = |k: &str| vars.get(k).cloned();
        let canonical_root = std::fs::canonicalize(root.path()).unwrap();
        assert!(
            !Session::probe(&env, uid, &[])
                .dirs
                .contains(&canonical_root)
        );
    }

    #[test]
    fn the_session_variables_never_pass() {
        let vars = [
            (env::AGENT_ENV, "DISPLAY,DBUS_SESSION_BUS_ADDRESS"),
            ("DISPLAY", ":0"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1/bus"),
            ("WAYLAND_DISPLAY", "wayland-0"),
            ("XAUTHORITY", "/run/user/1/gdm/Xauthority"),
            ("XDG_RUNTIME_DIR", "/run/user/1"),
            ("XDG_SESSION_ID", "2"),
            ("XDG_CONFIG_HOME", "/h/.config"),
            ("XDG_DATA_DIRS", "/usr/share"),
            ("GPG_AGENT_INFO", "/run/user/1/gnupg/S.gpg-agent"),
            ("SSH_AUTH_SOCK", "/run/user/1/keyring/ssh"),
        ];
        assert_eq!(
            passed_names(&vars),
            ["XDG_CONFIG_HOME", "XDG_DATA_DIRS", "SSH_AUTH_SOCK"]
        );
    }

    #[test]
    fn each_cli_keeps_its_own_state_folders() {
        let vars: HashMap<&str, &str> = [("XDG_DATA_HOME", "/x/data"), ("CODEX_HOME", "/c")].into();
        let env = |k: &str| vars.get(k).map(OsString::from);
        let home = Some(Path::new("/h"));
        let ws = Path::new("/w");
        let dirs = |p| state_dirs(p, ws, home, &env);
        assert_eq!(dirs(Provider::Codex), [PathBuf::from("/c")]);
        assert_eq!(
            dirs(Provider::Opencode),
            [
                "/x/data/opencode",
                "/h/.local/state/opencode",
                "/h/.cache/opencode",
                "/h/.config/opencode"
            ]
            .map(PathBuf::from)
        );
        let claude = dirs(Provider::Claude);
        assert!(
            claude.contains(&"/h/.claude".into()) && claude.contains(&"/h/.claude.json".into())
        );
        assert_eq!(
            dirs(Provider::Ollama),
            [PathBuf::from("/w/.pedelec-runtime/agent")]
        );
        assert_eq!(dirs(Provider::Cursor)[0], PathBuf::from("/h/.cursor"));
    }

    #[test]
    fn the_turns_variables_come_last_and_sorted() {
        let tools: HashMap<String, String> = [
            (env::TOOL_TOKEN.to_string(), "t".to_string()),
            (env::THREAD_ID.to_string(), "thr".to_string()),
        ]
        .into();
        let out = turn_env(
            Some(Path::new("/rt")),
            &tools,
            &HashMap::new(),
            "/bin".into(),
            true,
        );
        let names: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                env::RUNTIME_DIR,
                env::THREAD_ID,
                env::TOOL_TOKEN,
                "PATH",
                "IS_SANDBOX"
            ]
        );
    }
}
