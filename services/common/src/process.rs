//! Child processes: signalling process groups, tying a child's life to its
//! parent's, detaching with `setsid`, spawning past ETXTBSY, and describing
//! how a process ended. Its libc calls are most of Pedelec's `unsafe` code
//! (the rest is `memory`), so every other module and crate can forbid it.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

pub use libc::{SIGKILL, SIGTERM};

pub mod cgroup;
pub mod confine;
pub mod fork_server;

/// This process's real user id.
pub fn uid() -> u32 {
    // SAFETY: getuid cannot fail and has no preconditions.
    unsafe { libc::getuid() }
}

/// The login name of this process's real user, from the user database
/// (`getpwuid_r`, so NSS sources count), else `$USER`; None when neither
/// knows.
pub fn user_name() -> Option<String> {
    // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids);
    // getpwuid_r fills it only on success.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `entry`, `buf` (with its true length) and `found` are valid
    // for writes for the whole call and outlive it.
    let rc =
        unsafe { libc::getpwuid_r(uid(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() && !entry.pw_name.is_null() {
        // SAFETY: on success pw_name points at a NUL-terminated string in
        // `buf`, which is still alive here.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
        let name = name.to_string_lossy().into_owned();
        if !name.is_empty() {
            return Some(name);
        }
    }
    std::env::var("USER").ok().filter(|v| !v.is_empty())
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Makes this process non-dumpable (Linux's `PR_SET_DUMPABLE` 0): other
/// processes of the same user can no longer read its `/proc/<pid>/environ`,
/// `mem`, `fd/…` or attach with ptrace, and it leaves no core dump. The
/// launcher calls it first thing, the four services in `SecretArgs::read`
/// (args.rs), before they hold the service secret. A child it execs is
/// dumpable again (execve resets the attribute), so the agents and the
/// reading of their `/proc` entries are unaffected. The process's own `/proc/self` stays readable to itself.
/// Elsewhere than Linux nothing happens.
pub fn make_non_dumpable() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_DUMPABLE takes plain integers and touches
        // no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The process tracing `pid` (its `TracerPid`), if any; None also when
/// `pid` is gone or this is not Linux.
pub fn tracer(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|tracer| *tracer != 0)
}

/// Sends `sig` to the process group `pgid` (a child started with
/// `process_group(0)` leads a group whose id is its pid). `sig = 0` only
/// checks that the group still has a member. False when the group is gone.
/// While any member lives the group id cannot be reused, so signalling the
/// group of an unreaped child never hits a stranger.
pub fn signal_group(pgid: impl TryInto<libc::pid_t>, sig: libc::c_int) -> bool {
    let Ok(pgid) = pgid.try_into() else {
        return false;
    };
    if pgid <= 1 {
        // -1 would signal every process we may signal; 0 our own group.
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Sends `sig` to the single process `pid`; false when it is gone.
pub fn signal(pid: impl TryInto<libc::pid_t>, sig: libc::c_int) -> bool {
    let Ok(pid) = pid.try_into() else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Sends `sig` to every member of group `pgid` except its leader (the
/// process whose pid is `pgid`): a confined agent's group is led by bwrap,
/// which would die of the SIGTERM meant for the agent instead of passing it
/// on. Reads `/proc`; a member forked meanwhile is missed (SIGKILL of the
/// whole group follows the grace period). Returns how many were signalled.
pub fn signal_group_but_leader(pgid: impl TryInto<libc::pid_t>, sig: libc::c_int) -> usize {
    let Ok(pgid) = pgid.try_into() else {
        return 0;
    };
    if pgid <= 1 {
        return 0;
    }
    group_members(pgid)
        .filter(|pid| *pid != pgid)
        .filter(|pid| signal(*pid, sig))
        .count()
}

/// The pids of the live (not zombie) processes of group `pgid`.
fn group_members(pgid: libc::pid_t) -> impl Iterator<Item = libc::pid_t> {
    let dir = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    dir.filter_map(move |entry| {
        let pid = entry.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
        let stat = stat_after_name(&entry.path().join("stat"))?;
        // state, ppid, pgrp, …
        let mut fields = stat.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|f| f.parse::<libc::pid_t>().ok());
        (pgrp == Some(pgid) && state != Some("Z") && state != Some("X")).then_some(pid)
    })
}

/// Whether any process of group `pgid` is still running (zombies, which hold
/// nothing but their pid, do not count). Reads `/proc`: for the rare moments
/// a caller must know a group has really ended, not for hot paths.
pub fn group_alive(pgid: impl TryInto<libc::pid_t>) -> bool {
    let Ok(pgid) = pgid.try_into() else {
        return false;
    };
    if pgid <= 1 || !signal_group(pgid, 0) {
        return false;
    }
    if std::fs::metadata("/proc/self").is_err() {
        // No /proc to look in: the group counts as running.
        return true;
    }
    group_members(pgid).next().is_some()
}

/// Waits until no process of group `pgid` runs (see [`group_alive`]),
/// checking every 5 ms, at most `within`. Returns whether it is gone.
pub async fn wait_group_gone(pgid: impl TryInto<libc::pid_t>, within: Duration) -> bool {
    let Ok(pgid) = pgid.try_into() else {
        return true;
    };
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `pid` is alive; a zombie (exited, not yet reaped by its parent) is not.
pub fn is_alive(pid: u32) -> bool {
    if !signal(pid, 0) {
        // EPERM: it exists but belongs to someone else.
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    }
    match stat_after_name(Path::new(&format!("/proc/{pid}/stat"))) {
        Some(stat) => !stat.trim_start().starts_with('Z'),
        None => true,
    }
}

/// A `/proc/<pid>/stat` file's fields after the parenthesised command name
/// (which may hold spaces and parentheses), starting with the state.
fn stat_after_name(path: &Path) -> Option<String> {
    // One open, one read and one close: `fs::read_to_string` also asks for
    // the size and the position first (which /proc cannot give), and a
    // group scan reads every process's file.
    let mut file = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; 2048];
    let mut len = 0;
    // The kernel hands out the whole line in one read when it fits; it ends
    // with a newline.
    while len < buf.len() && !buf[..len].ends_with(b"\n") {
        match std::io::Read::read(&mut file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    // The name may hold any bytes; what follows it is ASCII.
    let after = buf[..len].iter().rposition(|b| *b == b')')? + 1;
    std::str::from_utf8(&buf[after..len])
        .ok()
        .map(str::to_string)
}

/// The child gets `sig` when the thread that spawned it exits (Linux's
/// PR_SET_PDEATHSIG; elsewhere nothing happens). Spawn from a thread that
/// lives as long as the process: a tokio worker, or a current-thread runtime's
/// main thread. If the parent died between fork and exec the spawn fails
/// with ESRCH, since no one would send the signal then.
pub fn die_with_parent(cmd: &mut std::process::Command, sig: libc::c_int) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the forked child before exec and makes
        // only async-signal-safe calls (prctl, getppid), allocating nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (cmd, sig);
}

/// The child starts a new session (`setsid`): it has no controlling terminal
/// and is in no group of ours, so it outlives our terminal and a signal to
/// our group.
pub fn detach(cmd: &mut std::process::Command) {
    // SAFETY: the closure runs in the forked child before exec; setsid is
    // async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Spawns, retrying briefly on ETXTBSY: exec fails that way while another
/// thread's fork still holds a just-written script open (tests, upgrades).
#[cfg(feature = "services")]
pub async fn spawn(cmd: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let mut attempts = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 10 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

/// How a process ended, short: `exit 1`, `signal 9`.
pub fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "unknown".to_string(),
    }
}

/// How a process ended, as a phrase for messages: `exited with code 1`,
/// `was killed by signal 9`. Takes the parts so that an exit reported over
/// gRPC (`TurnExited{code, signal}`) reads the same as a local one.
pub fn how_it_ended(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => "ended for an unknown reason".to_string(),
    }
}

/// [`how_it_ended`] for a local exit status.
pub fn ended(status: ExitStatus) -> String {
    how_it_ended(status.code(), status.signal())
}

/// An exit status that reads as `exit 1`, for a process whose real status
/// could not be learnt.
pub fn failed_status() -> ExitStatus {
    ExitStatus::from_raw(1 << 8)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Traces `pid` (PTRACE_SEIZE: it keeps running) until it exits.
    pub(crate) fn seize(pid: u32) {
        // SAFETY: ptrace with PTRACE_SEIZE takes no pointers we own (addr and
        // data are null).
        let rc = unsafe {
            libc::ptrace(
                libc::PTRACE_SEIZE,
                pid as libc::pid_t,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        assert_eq!(rc, 0, "ptrace: {}", std::io::Error::last_os_error());
    }

    /// The fields after a name holding ") Z (" and a byte that is not UTF-8
    /// start at the state, not inside the name.
    #[test]
    fn stat_fields_start_after_the_last_parenthesis() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let name = std::ffi::CString::new(b"x) Z (\xff".to_vec()).unwrap();
            // SAFETY: a NUL-terminated name for this thread, under 16 bytes.
            unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let path = format!("/proc/self/task/{tid}/stat");
        let raw = std::fs::read(&path).unwrap();
        assert!(
            raw.windows(5).any(|w| w == b") Z ("),
            "the name is in the file"
        );
        let fields = stat_after_name(Path::new(&path)).unwrap();
        let state = fields.split_whitespace().next().unwrap();
        assert!(["R", "S"].contains(&state), "{fields}");
        done_tx.send(()).unwrap();
        thread.join().unwrap();
    }

    #[test]
    fn an_untraced_process_has_no_tracer() {
        assert_eq!(tracer(std::process::id()), None);
        assert_eq!(tracer(u32::MAX), None);
    }

    /// A group whose leader has exited still counts while a member it
    /// started runs; it is gone once that member is killed (and reaped).
    #[tokio::test]
    async fn a_group_is_alive_until_its_last_member_is_gone() {
        let mut leader = tokio::process::Command::new("sh")
            .args(["-c", "sleep 30 >/dev/null & echo started"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = leader.id().unwrap() as libc::pid_t;
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(leader.stdout.as_mut().unwrap(), &mut out)
            .await
            .unwrap();
        leader.wait().await.unwrap();
        assert!(group_alive(pgid), "the sleeping member keeps the group");
        assert!(!wait_group_gone(pgid, Duration::from_millis(50)).await);
        assert!(signal_group(pgid, libc::SIGKILL));
        assert!(wait_group_gone(pgid, Duration::from_secs(10)).await);
        assert!(!group_alive(pgid));
    }

    /// The leader (bwrap, for a confined agent) is spared; the member gets it.
    #[tokio::test]
    async fn a_signal_can_spare_the_group_leader() {
        let mut leader = tokio::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo started; wait $!; exit 7"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = leader.id().unwrap() as libc::pid_t;
        let mut line = [0u8; 8];
        let n = tokio::io::AsyncReadExt::read(leader.stdout.as_mut().unwrap(), &mut line)
            .await
            .unwrap();
        assert_eq!(&line[..n], b"started\n");
        assert_eq!(signal_group_but_leader(pgid, SIGTERM), 1);
        let status = leader.wait().await.unwrap();
        assert_eq!(
            status.code(),
            Some(7),
            "the leader was signalled: {status:?}"
        );
        assert!(wait_group_gone(pgid, Duration::from_secs(10)).await);
    }

    #[test]
    fn exits_are_described_like_status_shows_them() {
        assert_eq!(describe_exit(ExitStatus::from_raw(9)), "signal 9");
        assert_eq!(describe_exit(ExitStatus::from_raw(1 << 8)), "exit 1");
        assert_eq!(describe_exit(ExitStatus::from_raw(0)), "exit 0");
        assert_eq!(describe_exit(failed_status()), "exit 1");
        assert_eq!(ended(ExitStatus::from_raw(9)), "was killed by signal 9");
        assert_eq!(ended(ExitStatus::from_raw(3 << 8)), "exited with code 3");
    }

    #[test]
    fn nonsense_groups_are_never_signalled() {
        // 0 and 1 would be our own group and init's: refused, not sent.
        assert!(!signal_group(0, 0));
        assert!(!signal_group(1, 0));
        assert!(!signal_group(-1, 0));
        assert!(!signal_group(u32::MAX, 0));
    }

    #[cfg(feature = "services")] // uses `spawn`
    #[tokio::test]
    async fn a_group_is_signalled_and_seen_gone() {
        let mut cmd = tokio::process::Command::new("sleep");
        cmd.arg("30").process_group(0).kill_on_drop(true);
        let mut child = spawn(&mut cmd).await.unwrap();
        let pid = child.id().unwrap();
        assert!(is_alive(pid));
        assert!(signal_group(pid, 0), "the group has its leader");
        assert!(signal_group(pid, SIGKILL));
        let status = child.wait().await.unwrap();
        assert_eq!(describe_exit(status), "signal 9");
        assert!(!signal_group(pid, 0), "the group is empty once reaped");
        assert!(!is_alive(pid));
    }

    #[cfg(feature = "services")] // uses `spawn`
    #[tokio::test]
    async fn a_detached_child_leads_its_own_session() {
        let mut cmd = tokio::process::Command::new("sh");
        // Field 6 of /proc/self/stat is the session id; a session leader's equals its pid.
        cmd.args([
            "-c",
            "read -r s < /proc/self/stat; set -- ${s##*) }; [ \"$4\" = \"$$\" ]",
        ]);
        detach(cmd.as_std_mut());
        die_with_parent(cmd.as_std_mut(), SIGTERM);
        let status = spawn(&mut cmd).await.unwrap().wait().await.unwrap();
        assert!(status.success(), "session id is not the child's pid");
    }
}
