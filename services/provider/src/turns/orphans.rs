//! At service start: ending the agents a crashed predecessor left running,
//! found through their turn records ([`super::record`]).

use std::path::Path;

use pedelec_common::process::{self, SIGKILL, signal_group};

use super::record::{RecordKey, TURN_RECORDS, read_record};

/// At service start: SIGKILLs every process group a previous (crashed)
/// instance recorded in `<runtime_dir>/turns/` that still exists, kills and
/// removes the agent cgroup a record names, and removes the records.
///
/// What a record may make it do is bounded, as anyone who can write the
/// folder could plant one: a record that does not verify with `key` is
/// removed and nothing else; a group is only killed when every live member's
/// environment is readable and names this runtime dir (a reused or foreign
/// pgid is left alone); a cgroup only when it is an agent's directly under
/// this process's own ([`process::cgroup::agent_child`]).
/// Returns the groups signalled.
pub fn reap_orphans(runtime_dir: &Path, key: &RecordKey) -> Vec<i32> {
    let cgroup_parent = process::cgroup::own_dir().ok();
    reap_orphans_under(runtime_dir, key, cgroup_parent.as_deref())
}

fn reap_orphans_under(
    runtime_dir: &Path,
    key: &RecordKey,
    cgroup_parent: Option<&Path>,
) -> Vec<i32> {
    use std::os::unix::ffi::OsStrExt;
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
        let content = read_record(&path).unwrap_or_default();
        let cgroup = pgid.and_then(|pgid| key.open(pgid, &content).map(|c| (pgid, c)));
        let Some((pgid, cgroup)) = cgroup else {
            tracing::warn!(path = %path.display(), "ignored a turn record this service did not write");
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if group_is_ours(pgid, &marker) && signal_group(pgid, SIGKILL) {
            tracing::warn!(pgid, "killed an agent process group left by a previous run");
            killed.push(pgid);
        }
        // The record names the agent's cgroup, if it had one: what left
        // the group is there.
        if !cgroup.is_empty() {
            let named = Path::new(std::ffi::OsStr::from_bytes(cgroup));
            match cgroup_parent.and_then(|p| process::cgroup::agent_child(p, named)) {
                Some(cgroup) => {
                    process::cgroup::kill_and_remove_dir(&cgroup);
                }
                None => tracing::warn!(
                    cgroup = %named.display(),
                    "a turn record names no agent cgroup of this service; left alone"
                ),
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

/// Whether process group `pgid` has live members and each one's environment
/// is readable and carries `marker` (zombies aside: they run nothing).
fn group_is_ours(pgid: i32, marker: &[u8]) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    let mut members = 0;
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, ppid, pgrp.
        let mut fields = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace();
        let (state, pgrp) = (fields.next(), fields.nth(1));
        if pgrp.and_then(|p| p.parse::<i32>().ok()) != Some(pgid) || state == Some("Z") {
            continue;
        }
        let carries = std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker));
        if !carries {
            return false;
        }
        members += 1;
    }
    members > 0
}

fn runtime_marker(runtime_dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut marker = pedelec_common::env::RUNTIME_DIR.as_bytes().to_vec();
    marker.push(b'=');
    marker.extend_from_slice(runtime_dir.as_os_str().as_bytes());
    marker
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::path::PathBuf;

    use super::*;

    struct Setup {
        runtime: tempfile::TempDir,
        records: PathBuf,
        key: RecordKey,
    }

    fn setup() -> Setup {
        let runtime = tempfile::tempdir().unwrap();
        let records = runtime.path().join(TURN_RECORDS);
        std::fs::create_dir_all(&records).unwrap();
        let key = RecordKey::new(Some(&pedelec_common::secret::ServiceSecret::generate()));
        Setup {
            runtime,
            records,
            key,
        }
    }

    /// A `sleep` in a group of its own, with `env` added.
    fn sleeper(env: &[(&str, &std::ffi::OsStr)]) -> std::process::Child {
        let mut cmd = std::process::Command::new("/bin/sleep");
        cmd.arg("60").process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    fn survives(mut child: std::process::Child) {
        assert!(child.try_wait().unwrap().is_none(), "killed");
        child.kill().unwrap();
        let _ = child.wait();
    }

    fn marked(s: &Setup) -> std::process::Child {
        sleeper(&[(
            pedelec_common::env::RUNTIME_DIR,
            s.runtime.path().as_os_str(),
        )])
    }

    #[test]
    fn orphans_recorded_by_a_dead_service_are_killed_at_start() {
        let s = setup();
        // Ours: a group whose leader names this runtime dir.
        let mut ours = marked(&s);
        // A stranger that happens to have a recorded id: left alone.
        let stranger = sleeper(&[(
            pedelec_common::env::RUNTIME_DIR,
            std::ffi::OsStr::new("/elsewhere"),
        )]);
        for child in [&ours, &stranger] {
            let pgid = child.id() as i32;
            std::fs::write(s.records.join(pgid.to_string()), s.key.seal(pgid, b"")).unwrap();
        }
        std::fs::write(s.records.join("junk"), b"").unwrap();

        let killed = reap_orphans_under(s.runtime.path(), &s.key, None);
        assert_eq!(killed, [ours.id() as i32]);
        let status = ours.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        survives(stranger);
        assert_eq!(std::fs::read_dir(&s.records).unwrap().count(), 0);
    }

    /// A record not sealed with the service's key (planted by a confined
    /// agent or any local process) kills nothing, even a group that carries
    /// the marker, and is removed.
    #[test]
    fn a_forged_record_is_ignored_and_removed() {
        let s = setup();
        let victim = marked(&s);
        let pgid = victim.id() as i32;
        let other_key = RecordKey::new(None);
        // Unsealed (the old form), sealed with another key, sealed for another pgid.
        for forged in [
            b"".to_vec(),
            other_key.seal(pgid, b""),
            s.key.seal(pgid + 1, b""),
        ] {
            std::fs::write(s.records.join(pgid.to_string()), &forged).unwrap();
            assert_eq!(
                reap_orphans_under(s.runtime.path(), &s.key, None),
                Vec::<i32>::new()
            );
            assert_eq!(std::fs::read_dir(&s.records).unwrap().count(), 0);
        }
        survives(victim);
    }

    /// A sealed record naming a group without the marker, or one whose
    /// environment cannot be read (another user's, here init's when the
    /// tests run unprivileged; or a group with no live process), kills nothing.
    #[test]
    fn a_group_without_the_marker_is_not_killed() {
        let s = setup();
        let unmarked = sleeper(&[]);
        let pgid = unmarked.id() as i32;
        std::fs::write(s.records.join(pgid.to_string()), s.key.seal(pgid, b"")).unwrap();
        assert_eq!(
            reap_orphans_under(s.runtime.path(), &s.key, None),
            Vec::<i32>::new()
        );
        survives(unmarked);
        // A marked leader with an unmarked member in its group: not all ours.
        let mut leader = marked(&s);
        let pgid = leader.id() as i32;
        let mut member = std::process::Command::new("/bin/sleep");
        member
            .arg("60")
            .env_remove(pedelec_common::env::RUNTIME_DIR)
            .process_group(pgid);
        let member = member.spawn().unwrap();
        std::fs::write(s.records.join(pgid.to_string()), s.key.seal(pgid, b"")).unwrap();
        assert_eq!(
            reap_orphans_under(s.runtime.path(), &s.key, None),
            Vec::<i32>::new()
        );
        survives(member);
        leader.kill().unwrap();
        let _ = leader.wait();
        assert_eq!(std::fs::read_dir(&s.records).unwrap().count(), 0);
    }

    /// A sealed record naming a cgroup that is not an agent's directly
    /// under the service's own: its processes live on, it stays. One that is
    /// is killed and removed.
    #[test]
    fn a_cgroup_outside_the_services_own_is_refused() {
        use pedelec_common::process::cgroup::{Cgroup, kill_and_remove_dir, own_dir};
        use std::os::unix::ffi::OsStrExt;
        let s = setup();
        let own = own_dir().expect("the tests run where cgroup v2 can be delegated (as root)");
        let me = std::process::id();
        let in_cgroup = |cg: &Cgroup| {
            let mut cmd = std::process::Command::new("/bin/sleep");
            cmd.arg("60");
            cg.join_at_exec(&mut cmd);
            cmd.spawn().unwrap()
        };
        let holder = Cgroup::create(&own, &format!("pedelec-test-{me}")).unwrap();
        let nested = Cgroup::create(holder.dir(), &format!("pedelec-agent-{me}-0")).unwrap();
        let outside = in_cgroup(&nested);
        // No such group: only the cgroup is at stake.
        let pgid = i32::MAX - 7;
        let record = |named: &Path| {
            let sealed = s.key.seal(pgid, named.as_os_str().as_bytes());
            std::fs::write(s.records.join(pgid.to_string()), sealed).unwrap();
            reap_orphans_under(s.runtime.path(), &s.key, Some(&own));
        };
        for named in [
            nested.dir().to_path_buf(),
            holder.dir().to_path_buf(),
            own.join(format!(
                "pedelec-agent-{me}-9/../pedelec-test-{me}/pedelec-agent-{me}-0"
            )),
        ] {
            record(&named);
            assert!(nested.dir().exists(), "{}", named.display());
        }
        assert_eq!(std::fs::read_dir(&s.records).unwrap().count(), 0);
        survives(outside);

        let agent = Cgroup::create(&own, &format!("pedelec-agent-{me}-1")).unwrap();
        let mut inside = in_cgroup(&agent);
        record(agent.dir());
        assert_eq!(inside.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(!agent.dir().exists());
        assert!(kill_and_remove_dir(nested.dir()) && kill_and_remove_dir(holder.dir()));
    }

    /// A group whose leader is gone (its environment unreadable) is judged by
    /// its members: killed when they carry the marker, not when they do not.
    #[test]
    fn a_leaderless_group_is_killed_only_when_its_members_carry_the_marker() {
        use std::io::Read;
        let s = setup();
        // A group whose leader exited, leaving a `sleep`: returns the pgid and
        // the sleep's pid.
        let leaderless = |marked: bool| {
            let mut sh = std::process::Command::new("/bin/sh");
            sh.arg("-c")
                .arg("/bin/sleep 60 >/dev/null & echo $!")
                .stdout(std::process::Stdio::piped())
                .process_group(0);
            if marked {
                sh.env(pedelec_common::env::RUNTIME_DIR, s.runtime.path());
            }
            let mut sh = sh.spawn().unwrap();
            let mut out = String::new();
            sh.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            sh.wait().unwrap();
            let pgid = sh.id() as i32;
            std::fs::write(s.records.join(pgid.to_string()), s.key.seal(pgid, b"")).unwrap();
            (pgid, out.trim().parse::<i32>().unwrap())
        };
        let (_, stranger) = leaderless(false);
        assert_eq!(
            reap_orphans_under(s.runtime.path(), &s.key, None),
            Vec::<i32>::new()
        );
        assert!(
            process::is_alive(stranger as u32),
            "the stranger was killed"
        );
        process::signal(stranger, libc::SIGKILL);
        let (pgid, _) = leaderless(true);
        assert_eq!(reap_orphans_under(s.runtime.path(), &s.key, None), [pgid]);
    }
}
