//! Whether a provider's CLI can run: found (beside the executable for
//! `pedelec-agent`, else on PATH) and `<program> --version` exits 0 within a timeout.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::process::Command;

use pedelec_common::process;

use crate::catalog::ProviderSpec;
use crate::error::SEE_THE_LOG;
use crate::launch::read_tail;

/// How long `--version` may take before it counts as unavailable.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a cached verdict serves ResolveProfile. CreateSession resolves the
/// default provider on every call and must stay in the millisecond range, while
/// a real CLI's `--version` takes tens to hundreds of milliseconds.
pub const CACHE_TTL: Duration = Duration::from_secs(30);

/// Bytes of a failing `--version`'s output kept for the error message.
const OUTPUT_TAIL: usize = 400;

/// Where programs are looked up, and with what limits. Passed in explicitly so
/// tests can point PATH at stand-in scripts without touching the process env.
#[derive(Clone, Debug)]
pub struct ProgramEnv {
    /// The PATH searched, and given to `--version`; `None` finds nothing on PATH.
    pub path: Option<OsString>,
    /// The running executable's folder, searched first for `pedelec-agent`.
    pub exe_dir: Option<PathBuf>,
    pub timeout: Duration,
}

impl ProgramEnv {
    /// The service's own PATH and executable folder.
    pub fn from_process() -> Self {
        ProgramEnv {
            path: std::env::var_os("PATH"),
            exe_dir: std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(Path::to_path_buf)),
            timeout: VERSION_TIMEOUT,
        }
    }

    /// The program's full path, or why it was not found.
    pub fn locate(&self, spec: &ProviderSpec) -> Result<PathBuf, String> {
        if spec.beside_exe
            && let Some(dir) = &self.exe_dir
        {
            let candidate = dir.join(spec.program);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
        if let Some(found) = self
            .path
            .as_deref()
            .and_then(|path| search_path(path, spec.program))
        {
            return Ok(found);
        }
        // Words a page may see (ListProviders, a turn's PROVIDER_NOT_FOUND):
        // no folder of this machine.
        match (&self.exe_dir, spec.beside_exe) {
            (Some(_), true) => Err(format!(
                "{} not found beside Pedelec's programs nor on PATH",
                spec.program
            )),
            _ => Err(format!("{} not found on PATH", spec.program)),
        }
    }
}

fn search_path(path: &OsStr, program: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        // An empty or relative entry would make the answer depend on the cwd.
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Identifies the file a verdict was made on, so replacing the CLI (an
/// upgrade, a new install) invalidates the cache at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl FileStamp {
    pub(crate) fn of(path: &Path) -> Option<FileStamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        })
    }
}

struct Verdict {
    program: PathBuf,
    stamp: FileStamp,
    at: Instant,
    outcome: Result<(), String>,
}

/// Runs the availability checks and remembers recent verdicts.
pub struct Availability {
    env: ProgramEnv,
    ttl: Duration,
    cache: Mutex<HashMap<&'static str, Verdict>>,
}

impl Availability {
    pub fn new(env: ProgramEnv) -> Self {
        Availability {
            env,
            ttl: CACHE_TTL,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn env(&self) -> &ProgramEnv {
        &self.env
    }

    /// Checks now (what ListProviders shows) and refreshes the cache.
    /// `Ok` carries the program's path; `Err` says why it is unavailable.
    pub async fn check(&self, spec: &ProviderSpec) -> Result<PathBuf, String> {
        let program = self.env.locate(spec)?;
        let stamp = FileStamp::of(&program);
        let outcome = run_version(&program, spec.program, &self.env)
            .await
            .map(drop);
        if let Some(stamp) = stamp {
            self.cache.lock().expect("cache lock").insert(
                spec.code,
                Verdict {
                    program: program.clone(),
                    stamp,
                    at: Instant::now(),
                    outcome: outcome.clone(),
                },
            );
        }
        outcome.map(|()| program)
    }

    /// Like `check`, but reuses a verdict younger than the TTL on the same file.
    /// The lookup itself is always fresh (a few stat calls), so a CLI removed
    /// from PATH is noticed at once.
    pub async fn check_cached(&self, spec: &ProviderSpec) -> Result<PathBuf, String> {
        let program = self.env.locate(spec)?;
        if let Some(stamp) = FileStamp::of(&program) {
            let cache = self.cache.lock().expect("cache lock");
            if let Some(v) = cache.get(spec.code)
                && v.program == program
                && v.stamp == stamp
                && v.at.elapsed() < self.ttl
            {
                return v.outcome.clone().map(|()| program);
            }
        }
        self.check(spec).await
    }
}

/// Runs `<program> --version` in its own process group; the group is killed
/// if it outlives the timeout, so a wedged CLI leaves nothing behind. `Ok`
/// carries the end of what it printed on stdout (the version).
pub(crate) async fn run_version(
    program: &Path,
    name: &str,
    env: &ProgramEnv,
) -> Result<String, String> {
    let mut cmd = Command::new(program);
    // The agent's allow-list, as for a turn (crate::launch), without the
    // turn's variables: a CLI's `--version` needs nothing of the service's.
    cmd.env_clear()
        .envs(crate::launch::passed_env(std::env::vars_os()))
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    match &env.path {
        Some(path) => cmd.env("PATH", path),
        None => cmd.env_remove("PATH"),
    };
    let mut child = process::spawn(&mut cmd).await.map_err(|e| {
        tracing::info!(program = %program.display(), "`{name} --version` could not start: {e}");
        format!("`{name} --version` could not start; {SEE_THE_LOG}")
    })?;
    let pid = child.id();
    let stdout = tokio::spawn(read_tail(child.stdout.take(), OUTPUT_TAIL));
    let stderr = tokio::spawn(read_tail(child.stderr.take(), OUTPUT_TAIL));

    let waited = tokio::time::timeout(env.timeout, child.wait()).await;
    let status = match waited {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => {
            kill_group(pid);
            stdout.abort();
            stderr.abort();
            return Err(format!(
                "`{name} --version` could not be waited for: {}",
                e.kind()
            ));
        }
        Err(_) => {
            kill_group(pid);
            let _ = child.wait().await;
            stdout.abort();
            stderr.abort();
            return Err(format!(
                "`{name} --version` timed out after {:.1} s",
                env.timeout.as_secs_f64()
            ));
        }
    };
    if status.success() {
        stderr.abort();
        // A leftover grandchild may hold the pipe open; do not wait long for it.
        let out = tokio::time::timeout(Duration::from_millis(500), stdout).await;
        return Ok(out.ok().and_then(Result::ok).unwrap_or_default());
    }
    // A leftover grandchild may hold the pipes open; do not wait long for them.
    let grace = Duration::from_millis(500);
    let err_tail = tokio::time::timeout(grace, stderr).await;
    let out_tail = tokio::time::timeout(grace, stdout).await;
    let err_tail = err_tail.ok().and_then(Result::ok).unwrap_or_default();
    let out_tail = out_tail.ok().and_then(Result::ok).unwrap_or_default();
    // Some CLIs print their complaint on stdout.
    let tail = if err_tail.trim().is_empty() {
        out_tail
    } else {
        err_tail
    };
    let tail = tail.trim();
    let what = format!("`{name} --version` {}", process::ended(status));
    // Its output (a missing runtime's path, a login prompt) stays in the log:
    // the verdict reaches pages (ListProviders, CreateSession's default).
    if tail.is_empty() {
        tracing::info!(program = %program.display(), "{what}");
    } else {
        tracing::info!(program = %program.display(), "{what}: {tail}");
    }
    Err(format!("{what}; {SEE_THE_LOG}"))
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid {
        // Our unreaped child's pid: the group id cannot have been reused.
        process::signal_group(pid, process::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::testutil::Bin;

    fn spec(code: &str) -> &'static ProviderSpec {
        catalog::find(code).unwrap()
    }

    #[tokio::test]
    async fn found_and_version_exits_zero_is_available() {
        let bin = Bin::new();
        let path = bin.script("codex", "echo codex-cli 1.0");
        let availability = Availability::new(bin.env());
        assert_eq!(availability.check(spec("codex")).await, Ok(path));
    }

    #[tokio::test]
    async fn missing_program_says_not_on_path() {
        let bin = Bin::new();
        let availability = Availability::new(bin.env());
        assert_eq!(
            availability.check(spec("codex")).await,
            Err("codex not found on PATH".to_string())
        );
        assert_eq!(
            availability.check(spec("antigravity")).await,
            Err("agy not found on PATH".to_string())
        );
    }

    #[tokio::test]
    async fn non_executable_file_is_not_found() {
        let bin = Bin::new();
        std::fs::write(bin.dir.path().join("claude"), "#!/bin/sh\nexit 0\n").unwrap();
        let availability = Availability::new(bin.env());
        assert_eq!(
            availability.check(spec("claude")).await,
            Err("claude not found on PATH".to_string())
        );
    }

    #[tokio::test]
    async fn failing_version_reports_its_exit_not_its_stderr() {
        let bin = Bin::new();
        bin.script("codex", "echo noise; echo 'node: not found' >&2; exit 1");
        let availability = Availability::new(bin.env());
        // What it printed stays in the log: the verdict reaches pages.
        assert_eq!(
            availability.check(spec("codex")).await,
            Err("`codex --version` exited with code 1; see the Pedelec log".to_string())
        );
    }

    #[tokio::test]
    async fn failing_version_reports_its_exit_not_its_stdout() {
        let bin = Bin::new();
        bin.script("opencode", "echo 'please log in'; exit 3");
        let availability = Availability::new(bin.env());
        assert_eq!(
            availability.check(spec("opencode")).await,
            Err("`opencode --version` exited with code 3; see the Pedelec log".to_string())
        );
    }

    #[tokio::test]
    async fn hanging_version_times_out_and_its_group_is_killed() {
        let bin = Bin::new();
        let pid_file = bin.dir.path().join("grandchild.pid");
        bin.script(
            "cursor-agent",
            &format!("/bin/sleep 30 &\necho $! > {}\nwait", pid_file.display()),
        );
        let mut env = bin.env();
        env.timeout = Duration::from_millis(300);
        let availability = Availability::new(env);
        let started = Instant::now();
        let outcome = availability.check(spec("cursor")).await;
        assert_eq!(
            outcome,
            Err("`cursor-agent --version` timed out after 0.3 s".to_string())
        );
        assert!(started.elapsed() < Duration::from_secs(3));

        // The backgrounded grandchild went with the group (gone, or a zombie
        // waiting for a reaper).
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let mut dead = false;
        for _ in 0..100 {
            dead = match std::fs::read_to_string(&stat) {
                Err(_) => true,
                Ok(s) => s
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z'),
            };
            if dead {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(dead, "grandchild {} still running", pid.trim());
    }

    #[tokio::test]
    async fn pedelec_agent_is_looked_up_beside_the_executable_first() {
        let exe = Bin::new();
        let beside = exe.script("pedelec-agent", "exit 0");
        let path = Bin::new();
        let on_path = path.script("pedelec-agent", "exit 1");

        let mut env = path.env();
        env.exe_dir = Some(exe.dir.path().to_path_buf());
        assert_eq!(env.locate(spec("ollama")), Ok(beside.clone()));
        assert_eq!(
            Availability::new(env).check(spec("ollama")).await,
            Ok(beside)
        );

        // Not beside the executable: PATH is the fallback.
        let empty = Bin::new();
        let mut env = path.env();
        env.exe_dir = Some(empty.dir.path().to_path_buf());
        assert_eq!(env.locate(spec("ollama")), Ok(on_path));

        // Other providers never look beside the executable.
        exe.script("codex", "exit 0");
        let mut env = empty.env();
        env.exe_dir = Some(exe.dir.path().to_path_buf());
        assert_eq!(
            env.locate(spec("codex")),
            Err("codex not found on PATH".to_string())
        );

        // Found nowhere: the message names both places, not the folder.
        env.exe_dir = Some(empty.dir.path().to_path_buf());
        let err = env.locate(spec("ollama")).unwrap_err();
        assert_eq!(
            err,
            "pedelec-agent not found beside Pedelec's programs nor on PATH"
        );
    }

    #[test]
    fn relative_and_empty_path_entries_are_ignored() {
        // Only absolute entries count, whatever the cwd holds.
        assert!(search_path(OsStr::new(".:bin::"), "sh").is_none());
        assert!(search_path(OsStr::new("/bin:/usr/bin"), "sh").is_some());
    }

    #[tokio::test]
    async fn cached_verdict_is_reused_until_the_program_changes() {
        let bin = Bin::new();
        let count = bin.dir.path().join("count");
        let body = format!("echo x >> {}", count.display());
        bin.script("claude", &body);
        let availability = Availability::new(bin.env());
        let runs = || {
            std::fs::read_to_string(&count)
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };

        availability.check_cached(spec("claude")).await.unwrap();
        availability.check_cached(spec("claude")).await.unwrap();
        assert_eq!(runs(), 1);

        // A fresh check always runs.
        availability.check(spec("claude")).await.unwrap();
        assert_eq!(runs(), 2);

        // Replacing the program (here: a failing one) invalidates the verdict.
        bin.script("claude", &format!("{body}; exit 1"));
        let err = availability.check_cached(spec("claude")).await.unwrap_err();
        assert!(
            err.starts_with("`claude --version` exited with code 1"),
            "{err}"
        );
        assert_eq!(runs(), 3);

        // Removing it is noticed without a run.
        std::fs::remove_file(bin.dir.path().join("claude")).unwrap();
        assert_eq!(
            availability.check_cached(spec("claude")).await,
            Err("claude not found on PATH".to_string())
        );
    }
}
