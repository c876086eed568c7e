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
//!   inside it), with a fresh /proc that shows only the agent's own processes;
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
/// folder), proxies and TLS roots, the ssh agent (for git), claude's
/// documented switches, and pedelec-agent's own options.
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

/// Variables an agent gets by prefix: locale categories, the XDG folders,
/// and each CLI's own configuration (codex: `OPENAI_*`, `CODEX_HOME`;
/// claude: `ANTHROPIC_*`, `CLAUDE_*`, and Bedrock's/Vertex's `AWS_*`,
/// `GOOGLE_*`; opencode: `OPENCODE_*`; pedelec-agent's Ollama: `OLLAMA_*`;
/// cursor: `CURSOR_*`; antigravity: `GEMINI_*`, `GOOGLE_*`).
pub const PASSED_PREFIXES: &[&str] = &[
    "LC_",
    "XDG_",
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

/// Whether the service's variable `name` reaches agents. Nothing named
/// `PEDELEC_*` passes unless listed: those are the service's own (the turn
/// sets the agent's). `extra` are the names of [`env::AGENT_ENV`].
pub fn passes(name: &str, extra: &[String]) -> bool {
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
                let view = View::new(who.0, who.1, workspace, program, &env);
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
        cmd.env_clear()
            .envs(self.passed.iter().map(|(k, v)| (k, v)))
            .envs(turn_env.iter().map(|(k, v)| (k, v)))
            .current_dir(workspace)
            .process_group(0);
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
        }
    }
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
        Provider::Ollama => vec![Some(workspace.join(".pedelec-runtime/agent"))],
    };
    dirs.into_iter().flatten().collect()
}

/// bwrap's options for an agent's view (then `program` and its arguments
/// follow): a fresh /proc of a new pid namespace, Pedelec's folders replaced
/// by empty ones — the runtime dir then gets `toolbridge.sock` back, and a
/// workspace or home inside the data dir is bound back in — and, per level:
/// at Full the whole filesystem as it is; below, the filesystem read-only
/// (devices still usable), a private /tmp (and `$TMPDIR`), the CLI's state
/// folders writable, the workspace writable at Edit and read-only at Tools.
pub fn bwrap_args(hidden: &Hidden, view: &View) -> Vec<OsString> {
    let full = view.access.is_full();
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |parts: &[&OsStr]| args.extend(parts.iter().map(|p| p.to_os_string()));
    if full {
        let namespace = &confine::NAMESPACE_ARGS[..confine::NAMESPACE_ARGS.len() - 1];
        push(&namespace.iter().map(OsStr::new).collect::<Vec<_>>());
    } else {
        push(&[
            "--die-with-parent".as_ref(),
            "--unshare-pid".as_ref(),
            "--ro-bind".as_ref(),
            "/".as_ref(),
            "/".as_ref(),
            "--dev-bind".as_ref(),
            "/dev".as_ref(),
            "/dev".as_ref(),
            "--proc".as_ref(),
            "/proc".as_ref(),
        ]);
    }
    // What new empty folders cover, outer first: mounting over a folder
    // later would hide what was bound inside it before.
    let mut covers: Vec<&Path> = vec![&hidden.data_dir, &hidden.runtime_dir];
    if !full {
        covers.push(Path::new(TMP));
        covers.extend(view.tmpdir.as_deref());
    }
    covers.sort_by_key(|d| d.components().count());
    covers.dedup();
    for dir in &covers {
        push(&["--tmpfs".as_ref(), dir.as_os_str()]);
        if *dir == hidden.runtime_dir {
            let socket = dir.join(ServiceName::ToolBridge.socket_file());
            push(&[
                "--bind-try".as_ref(),
                socket.as_os_str(),
                socket.as_os_str(),
            ]);
        }
    }
    let covered = |p: &Path| covers.iter().any(|d| p.starts_with(d) && p != *d);
    if full {
        // As before levels: the workspace and the home, writable, where
        // Pedelec's folders would hide them.
        for keep in [Some(view.workspace.as_path()), view.home.as_deref()]
            .into_iter()
            .flatten()
            .filter(|k| covered(k))
        {
            push(&["--bind".as_ref(), keep.as_os_str(), keep.as_os_str()]);
        }
        args.push("--".into());
        return args;
    }
    for keep in view.home.iter().chain(&view.keep).filter(|k| covered(k)) {
        push(&["--ro-bind-try".as_ref(), keep.as_os_str(), keep.as_os_str()]);
    }
    for state in &view.state {
        push(&["--bind-try".as_ref(), state.as_os_str(), state.as_os_str()]);
    }
    let workspace = view.workspace.as_path();
    if view.access.writes_workspace() {
        push(&[
            "--bind".as_ref(),
            workspace.as_os_str(),
            workspace.as_os_str(),
        ]);
    } else {
        push(&[
            "--ro-bind".as_ref(),
            workspace.as_os_str(),
            workspace.as_os_str(),
        ]);
    }
    // The CLI's state inside the workspace (pedelec-agent's) stays writable.
    for state in view.state.iter().filter(|s| s.starts_with(workspace)) {
        push(&["--bind-try".as_ref(), state.as_os_str(), state.as_os_str()]);
    }
    args.push("--".into());
    args
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
        let cgroup = self.cgroup().take();
        let cgroup_gone = match cgroup {
            Some(cg) => {
                let gone = cg.kill_and_remove(within).await;
                if !gone {
                    tracing::warn!(cgroup = %cg.dir().display(), "an agent's cgroup outlived SIGKILL");
                }
                gone
            }
            None => true,
        };
        group_gone && cgroup_gone
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
                 --bind-try /run/user/1/pedelec/toolbridge.sock /run/user/1/pedelec/toolbridge.sock \
                 --tmpfs /home/u/.local/share/pedelec --bind {ws} {ws} --"
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
                 --tmpfs /run/user/1/pedelec \
                 --bind-try /run/user/1/pedelec/toolbridge.sock /run/user/1/pedelec/toolbridge.sock \
                 --tmpfs /home/u/.local/share/pedelec \
                 --ro-bind-try /tmp/stubs /tmp/stubs \
                 --bind-try /home/u/.codex /home/u/.codex \
                 --bind {ws} {ws} --"
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
        assert!(
            j.ends_with(
                "--ro-bind /w /w --bind-try /w/.pedelec-runtime/agent /w/.pedelec-runtime/agent --"
            ),
            "{j}"
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
