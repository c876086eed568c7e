//! Temp dirs, the bin dir the processes run from, and process bookkeeping so
//! that everything started here is killed on exit, however the run ends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pb::supervisor_service_client::SupervisorServiceClient;
use pedelec_common::{Program, ServiceName, env};
use pedelec_proto::v1 as pb;

pub const ORIGIN: &str = "https://bench.example";
/// Built into the host (docs/native-messaging.md section 1).
pub const EXTENSION: &str = "chrome-extension://ekeclpceddngodnkncegoclkkeknaacb/";
/// Ceiling for anything that should be quick: no loop here waits forever.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Process-group leaders and runtime dirs of this run, for the final sweep.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
static RUNTIME_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static ROOTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

pub fn register_group(pid: u32) {
    GROUPS.lock().unwrap().push(pid as i32);
}

pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// SIGKILLs every process this run started: the groups it spawned, and every
/// process whose environment names one of its runtime dirs (that catches the
/// detached `pedelecd` the native host auto-starts, stub agents, CLIs).
pub fn cleanup() {
    let dirs: Vec<PathBuf> = RUNTIME_DIRS.lock().unwrap().clone();
    for dir in &dirs {
        for pid in processes_using(dir) {
            signal(pid as i32, libc::SIGKILL);
        }
    }
    for pgid in GROUPS.lock().unwrap().drain(..) {
        signal(-pgid, libc::SIGKILL);
    }
    for root in ROOTS.lock().unwrap().drain(..) {
        let _ = std::fs::remove_dir_all(root);
    }
}

pub fn processes_using(runtime_dir: &Path) -> Vec<u32> {
    let needle = format!("PEDELEC_RUNTIME_DIR={}", runtime_dir.display());
    let me = std::process::id();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(env) = std::fs::read(entry.path().join("environ"))
            && env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

/// One isolated installation: HOME, PEDELEC_HOME, PEDELEC_RUNTIME_DIR and a
/// bin dir of hard links to the release binaries plus the stub agent.
pub struct BenchEnv {
    pub root: PathBuf,
    pub bin: PathBuf,
    /// PEDELEC_RUNTIME_DIR, on a tmpfs where there is one (`runtime_dir`).
    rt: PathBuf,
}

/// A runtime dir on a memory file system, as an installed Pedelec's
/// (`$XDG_RUNTIME_DIR/pedelec`, a tmpfs on a systemd machine); under /tmp where
/// `/dev/shm` is not writable. Under /tmp on this VM's journal-less ext4, the
/// sockets, pid files and logs of the `up` phase's hundred starts left over a
/// thousand recently deleted inodes, and every new record file of the phases
/// after it scanned past them. The data dir stays on disk, as installed.
fn runtime_dir() -> Result<PathBuf, String> {
    let make = |parent: &str| {
        tempfile::Builder::new()
            .prefix("pdlr")
            .tempdir_in(parent)
            .map(tempfile::TempDir::keep)
    };
    make("/dev/shm")
        .or_else(|_| make("/tmp"))
        .map_err(|e| format!("runtime dir: {e}"))
}

impl BenchEnv {
    pub fn new(release: &Path) -> Result<BenchEnv, String> {
        // Short root: socket paths must stay under 100 bytes.
        let root = tempfile::Builder::new()
            .prefix("pdlb")
            .tempdir_in("/tmp")
            .map_err(|e| format!("temp dir: {e}"))?
            .keep();
        ROOTS.lock().unwrap().push(root.clone());
        for dir in ["data", "home", "bin"] {
            std::fs::create_dir_all(root.join(dir)).map_err(|e| e.to_string())?;
        }
        let rt = runtime_dir()?;
        ROOTS.lock().unwrap().push(rt.clone());
        RUNTIME_DIRS.lock().unwrap().push(rt.clone());
        let bin = root.join("bin");
        // The services find each other and `pedelec-agent` beside their own
        // executable; links keep the stub agent there without touching target/.
        for program in Program::ALL.into_iter().filter(|p| *p != Program::Agent) {
            let name = program.file_name();
            link(&release.join(name), &bin.join(name))?;
        }
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        link(&me, &bin.join(Program::Agent.file_name()))?;
        Ok(BenchEnv { root, bin, rt })
    }

    pub fn rt(&self) -> PathBuf {
        self.rt.clone()
    }

    pub fn socket(&self, s: ServiceName) -> PathBuf {
        self.rt().join(s.socket_file())
    }

    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.env_clear()
            .env("HOME", self.root.join("home"))
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("PEDELEC_RUNTIME_DIR", self.rt())
            .env("PEDELEC_HOME", self.root.join("data"))
            .env("PEDELEC_BIN_DIR", &self.bin)
            .stdin(Stdio::null());
        // The switches that turn a performance device off pass through, so
        // one build can be measured with and without it.
        for switch in [
            env::COALESCE_WRITES,
            env::RECYCLE_RECORDS,
            env::FORK_SERVICES,
        ] {
            if let Some(value) = std::env::var_os(switch) {
                cmd.env(switch, value);
            }
        }
        cmd
    }

    /// Spawns in its own process group, registered for the sweep.
    pub fn spawn_grouped(&self, mut cmd: Command) -> Result<Child, String> {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        let child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
        register_group(child.id());
        Ok(child)
    }

    /// `pedelecd up` with stderr to `name`.
    pub fn spawn_up(&self, log: &str) -> Result<Child, String> {
        let mut cmd = self.command("pedelecd");
        let err = std::fs::File::create(self.root.join(log)).map_err(|e| e.to_string())?;
        cmd.arg("up").stdout(Stdio::null()).stderr(err);
        // The benchmarks create and run far more than one page may: the
        // caps and rates of docs/security.md ("Running turns and request
        // rates") are lifted so they measure the machinery, not the limits.
        for knob in [
            env::MAX_RUNNING_TURNS_PER_ORIGIN,
            env::MAX_RUNNING_TURNS,
            env::CREATE_RATE_LIMIT,
            env::TURN_RATE_LIMIT,
        ] {
            cmd.env(knob, "100000");
        }
        self.spawn_grouped(cmd)
    }

    pub async fn status(&self) -> Result<pb::SupervisorStatus, String> {
        let channel = pedelec_common::uds::connect(&self.socket(ServiceName::Launcher))
            .await
            .map_err(|e| e.to_string())?;
        SupervisorServiceClient::new(channel)
            .status(pb::SupervisorStatusRequest {})
            .await
            .map(|r| r.into_inner())
            .map_err(|e| e.to_string())
    }

    /// Grants `origin` what the user approves before a page asks anything:
    /// full access, every provider, any model (SessionService's GrantSite;
    /// an origin without a grant is refused SITE_NOT_APPROVED). Not part of
    /// any measured span.
    pub async fn grant(&self, origin: &str) -> Result<(), String> {
        let provider = pedelec_common::uds::connect(&self.socket(ServiceName::Provider))
            .await
            .map_err(|e| e.to_string())?;
        let providers = pb::provider_service_client::ProviderServiceClient::new(provider)
            .list_providers(pb::ListProvidersRequest::default())
            .await
            .map_err(|e| e.to_string())?
            .into_inner()
            .providers
            .into_iter()
            .map(|p| p.code)
            .collect();
        let session = pedelec_common::uds::connect(&self.socket(ServiceName::Session))
            .await
            .map_err(|e| e.to_string())?;
        pb::session_service_client::SessionServiceClient::new(session)
            .grant_site(pb::GrantSiteRequest {
                site: Some(pb::Site {
                    origin: origin.into(),
                    access: pb::AccessLevel::Full as i32,
                    providers,
                    any_model: true,
                    ..Default::default()
                }),
            })
            .await
            .map_err(|e| format!("GrantSite {origin}: {e}"))?;
        Ok(())
    }

    /// Polls the launcher every `every` until all four services serve.
    pub async fn wait_serving(&self, every: Duration) -> Result<pb::SupervisorStatus, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(s) = self.status().await
                && s.services.len() == 4
                && s.services
                    .iter()
                    .all(|s| s.state == pb::ServiceState::Serving as i32)
            {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err("services not all serving within the ceiling".into());
            }
            tokio::time::sleep(every).await;
        }
    }
}

fn link(from: &Path, to: &Path) -> Result<(), String> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    }
    Ok(())
}

/// SIGTERM, wait for exit (bounded), else SIGKILL the group.
pub fn stop(child: &mut Child) -> Duration {
    let t = Instant::now();
    signal(child.id() as i32, libc::SIGTERM);
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return t.elapsed();
        }
        if Instant::now() > deadline {
            signal(-(child.id() as i32), libc::SIGKILL);
            let _ = child.wait();
            return t.elapsed();
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// (VmRSS, Pss) in KiB; Pss is None when smaps_rollup is unreadable.
pub fn memory_kib(pid: u32) -> (u64, Option<u64>) {
    let field = |text: &str, name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    let rss = pedelec_tests::rss_kib(pid);
    let pss = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| field(&t, "Pss:"));
    (rss, pss)
}

/// CLOCK_MONOTONIC in ns: the same clock in every process, so the stub agent
/// can stamp a delta and the harness can subtract on arrival.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
