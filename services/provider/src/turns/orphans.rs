//! At service start: ending the agents a crashed predecessor left running,
//! found through their turn records ([`super::record`]).

use std::path::Path;

use pedelec_common::process::{self, SIGKILL, signal_group};

use super::record::TURN_RECORDS;

/// At service start: SIGKILLs every process group a previous (crashed)
/// instance recorded in `<runtime_dir>/turns/` that still exists, and removes
/// the records. A group whose leader still lives is only killed when the
/// leader's environment names this runtime dir (a reused pid is left alone).
/// Returns the groups signalled.
pub fn reap_orphans(runtime_dir: &Path) -> Vec<i32> {
    let dir = runtime_dir.join(TURN_RECORDS);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let marker = runtime_marker(runtime_dir);
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let pgid = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|p| *p > 1);
        if let Some(pgid) = pgid {
            let ours = match std::fs::read(format!("/proc/{pgid}/environ")) {
                Ok(env) => env.split(|b| *b == 0).any(|v| v == marker.as_slice()),
                // The leader is gone (its id cannot be reused while the group
                // lives) or unreadable: the group is the recorded one.
                Err(_) => true,
            };
            if ours && signal_group(pgid, SIGKILL) {
                tracing::warn!(pgid, "killed an agent process group left by a previous run");
                killed.push(pgid);
            }
            // The record names the agent's cgroup, if it had one: what left
            // the group is there.
            let cgroup = std::fs::read_to_string(&path).unwrap_or_default();
            let cgroup = Path::new(cgroup.trim());
            if cgroup.is_absolute() && cgroup.starts_with("/sys/fs/cgroup") {
                process::cgroup::kill_and_remove_dir(cgroup);
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

fn runtime_marker(runtime_dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut marker = b"PEDELEC_RUNTIME_DIR=".to_vec();
    marker.extend_from_slice(runtime_dir.as_os_str().as_bytes());
    marker
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphans_recorded_by_a_dead_service_are_killed_at_start() {
        use std::os::unix::process::CommandExt;
        let runtime = tempfile::tempdir().unwrap();
        let records = runtime.path().join(TURN_RECORDS);
        std::fs::create_dir_all(&records).unwrap();
        // Ours: a group whose leader names this runtime dir.
        let mut ours = std::process::Command::new("/bin/sleep");
        ours.arg("60")
            .env("PEDELEC_RUNTIME_DIR", runtime.path())
            .process_group(0);
        let mut ours = ours.spawn().unwrap();
        // A stranger that happens to have a recorded id: left alone.
        let mut stranger = std::process::Command::new("/bin/sleep");
        stranger
            .arg("60")
            .env("PEDELEC_RUNTIME_DIR", "/elsewhere")
            .process_group(0);
        let mut stranger = stranger.spawn().unwrap();
        std::fs::write(records.join(ours.id().to_string()), b"").unwrap();
        std::fs::write(records.join(stranger.id().to_string()), b"").unwrap();
        std::fs::write(records.join("junk"), b"").unwrap();

        let killed = reap_orphans(runtime.path());
        assert_eq!(killed, [ours.id() as i32]);
        let status = ours.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        assert!(stranger.try_wait().unwrap().is_none(), "stranger killed");
        stranger.kill().unwrap();
        let _ = stranger.wait();
        assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0);
    }
}
