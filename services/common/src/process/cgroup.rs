//! One cgroup (v2) per agent, where this process may create cgroups (cgroup
//! v2 delegation: its own cgroup in the cgroup2 hierarchy is writable, as for
//! root, or a systemd unit with `Delegate=yes`). A process cannot leave its
//! cgroup by `setsid` or a double fork, so killing the cgroup ends everything
//! an agent started, whatever it did with its process group.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The cgroup2 folder of this process, when it may create children in it
/// (checked by creating and removing one), or why not.
pub fn own_dir() -> Result<PathBuf, String> {
    dir_of("self")
}

/// The same for process `pid` (`self`, or a number): where the agents of a
/// running ProviderService get their cgroups, for `pedelecd doctor`.
pub fn dir_of(pid: &str) -> Result<PathBuf, String> {
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| format!("/proc/{pid}/cgroup: {e}"))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("the process is in no cgroup v2 hierarchy (cgroup v1 only)")?;
    let mount = cgroup2_mount().ok_or("no cgroup2 file system is mounted")?;
    let dir = mount.join(rel.trim().trim_start_matches('/'));
    let probe = dir.join(format!("pedelec-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| {
        format!(
            "{} is not writable ({e}): no cgroup v2 delegation",
            dir.display()
        )
    })?;
    let _ = std::fs::remove_dir(&probe);
    Ok(dir)
}

/// Where the cgroup2 file system is mounted (`/sys/fs/cgroup` on unified
/// systems, `/sys/fs/cgroup/unified` on hybrid ones).
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next() == Some("cgroup2"))
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

/// How every agent's cgroup is named: `<prefix><service pid>-<n>`.
pub const AGENT_PREFIX: &str = "pedelec-agent-";

/// `recorded` when it is an agent's cgroup folder directly under `parent`
/// (named [`AGENT_PREFIX`]…): an absolute path without `..`, itself no
/// symlink and through none (it is its own canonical form). Anything else a
/// turn record names is refused, so a planted record cannot make a service
/// write `cgroup.kill` elsewhere.
pub fn agent_child(parent: &Path, recorded: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let plain = recorded.is_absolute()
        && recorded
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let name = recorded.file_name()?.to_str()?;
    if !plain || name.len() <= AGENT_PREFIX.len() || !name.starts_with(AGENT_PREFIX) {
        return None;
    }
    if !std::fs::symlink_metadata(recorded).ok()?.is_dir() {
        return None;
    }
    let canonical = recorded.canonicalize().ok()?;
    let parent = parent.canonicalize().ok()?;
    (canonical == recorded && canonical.parent() == Some(parent.as_path())).then_some(canonical)
}

/// One agent's cgroup.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for the child to write itself into before exec.
    procs: std::fs::File,
}

impl Cgroup {
    /// Creates `<parent>/<name>`.
    pub fn create(parent: &Path, name: &str) -> std::io::Result<Cgroup> {
        let dir = parent.join(name);
        std::fs::create_dir(&dir)?;
        match std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
        {
            Ok(procs) => Ok(Cgroup { dir, procs }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The child moves itself into this cgroup between fork and exec, so
    /// everything it ever starts is inside. A failed move fails the spawn.
    pub fn join_at_exec(&self, cmd: &mut std::process::Command) {
        let fd = self.procs.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and makes
        // one async-signal-safe call (write) on a descriptor this Cgroup keeps
        // open until the spawn has returned; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Whether any process (zombies aside) is still in it.
    pub fn is_populated(&self) -> bool {
        populated(&self.dir)
    }

    /// SIGKILLs everything in it (`cgroup.kill`, else each pid of `cgroup.procs`).
    pub fn kill(&self) {
        kill(&self.dir);
    }

    /// Kills everything in it until it is empty (at most `within`), then
    /// removes it. Returns whether it is gone.
    pub async fn kill_and_remove(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            kill(&self.dir);
            if !populated(&self.dir) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        remove(&self.dir)
    }
}

/// Kills what is left in the cgroup at `dir` and removes it (a cgroup a
/// crashed service left behind). Returns whether it is gone.
pub fn kill_and_remove_dir(dir: &Path) -> bool {
    for _ in 0..200 {
        kill(dir);
        if !populated(dir) {
            return remove(dir);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn populated(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("cgroup.events")) {
        Ok(events) => events.lines().any(|l| l == "populated 1"),
        // Gone already, or unreadable: nothing we could do more.
        Err(_) => false,
    }
}

fn kill(dir: &Path) {
    let killed = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.kill"))
        .and_then(|mut f| f.write_all(b"1"));
    if killed.is_ok() {
        return;
    }
    // Kernels before 5.14 have no cgroup.kill.
    if let Ok(pids) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
            super::signal(pid, libc::SIGKILL);
        }
    }
}

fn remove(dir: &Path) -> bool {
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_agent_cgroup_directly_under_the_parent_is_accepted() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let parent = root.join("own");
        let elsewhere = root.join("elsewhere");
        let agent = parent.join("pedelec-agent-1-0");
        for dir in [
            &agent,
            &elsewhere.join("pedelec-agent-2-0"),
            &parent.join("other"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::create_dir_all(agent.join("pedelec-agent-3-0")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, parent.join("pedelec-agent-link")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("via")).unwrap();
        assert_eq!(agent_child(&parent, &agent), Some(agent.clone()));
        for refused in [
            elsewhere.join("pedelec-agent-2-0"),
            parent.join("other"),
            parent.join("pedelec-agent-"),
            agent.join("pedelec-agent-3-0"),
            parent.join("pedelec-agent-link"),
            root.join("via/pedelec-agent-2-0"),
            parent.join("../elsewhere/pedelec-agent-2-0"),
            parent.join("pedelec-agent-1-0/../pedelec-agent-1-0"),
            PathBuf::from("own/pedelec-agent-1-0"),
            parent.join("pedelec-agent-missing"),
        ] {
            assert_eq!(
                agent_child(&parent, &refused),
                None,
                "{}",
                refused.display()
            );
        }
    }

    /// A process that left its group and session (setsid, its parent gone)
    /// is still killed with the cgroup. The tests run as root, where cgroups
    /// can be made (docs/security.md says what happens where they cannot).
    #[tokio::test]
    async fn a_detached_grandchild_dies_with_the_cgroup() {
        let parent = own_dir().expect("the tests run where cgroup v2 can be delegated (as root)");
        let cgroup =
            Cgroup::create(&parent, &format!("pedelec-test-{}", std::process::id())).unwrap();
        let out = tempfile::tempdir().unwrap();
        let pidfile = out.path().join("pid");
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "setsid -f sh -c 'echo $$ > {}; exec sleep 60'",
                pidfile.display()
            ))
            .process_group(0);
        cgroup.join_at_exec(&mut cmd);
        let status = cmd.status().unwrap();
        assert!(status.success());
        let mut pid = None;
        for _ in 0..500 {
            if let Ok(s) = std::fs::read_to_string(&pidfile)
                && let Ok(p) = s.trim().parse::<u32>()
            {
                pid = Some(p);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = pid.expect("the detached sleeper wrote its pid");
        assert!(
            super::super::is_alive(pid),
            "the sleeper outlived its parent"
        );
        assert!(cgroup.is_populated());
        assert!(cgroup.kill_and_remove(Duration::from_secs(10)).await);
        assert!(!cgroup.dir().exists());
        for _ in 0..500 {
            if !super::super::is_alive(pid) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the detached sleeper {pid} survived its cgroup");
    }
}
