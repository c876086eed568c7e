//! The fork server: pedelecd's services forked from one copy of the
//! executable instead of each exec'ing it, when they are that executable
//! (the release build's `pedelec-multicall`).
//!
//! What it buys: a position-independent executable is relocated at every
//! start, and the pages of its relocated read-only data (`.data.rel.ro`,
//! about 310 KiB in the release build) become private to the process that
//! relocated them. Forked from one relocated image, pedelecd and its four
//! services share one copy: about 1 MiB less idle PSS
//! (docs/benchmarks.md, "Services forked from one image"). The executable still lands
//! at a random address at each launch; pedelecd and its services share that
//! address (docs/decisions.md, "Services forked from pedelecd").
//!
//! How: [`ForkServer::start`], called by pedelecd before it has a runtime or
//! any other thread, forks a single-threaded process that waits on a socket
//! pair. Asked for a program, it clones itself with `CLONE_PARENT`, so the
//! new process is pedelecd's child (pedelecd waits for it and reads its exit
//! status as for any child); the child takes the standard descriptors sent
//! with the request, a process group of its own, the death signal and the
//! environment variables of the request, and runs the program's `main`. A
//! fork from this one thread copies no lock held by another thread, since
//! there is none.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::Program;

/// A program's start: its arguments (the first is its name), its exit code.
pub type ProgramMain = fn(Vec<OsString>) -> ExitCode;

/// Where each program of this executable starts; None for one it does not
/// hold.
pub type Programs = fn(Program) -> Option<ProgramMain>;

/// What [`ForkServer::start`] returned to: pedelecd, or a process forked
/// from it whose program (or the fork server itself) has ended.
pub enum Started {
    Launcher(ForkServer),
    /// Return this from `main`: this process was the fork server or one of
    /// its children, and is done.
    Ended(ExitCode),
}

/// The largest request: a program name, its arguments and environment.
const MAX_REQUEST: usize = 4 * 1024;
/// How long pedelecd waits for the fork server's answer. A fork takes well
/// under a millisecond; a fork server that does not answer (stopped, or
/// swapped out) must not hold up pedelecd, which then execs instead.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// The standard descriptors a request carries: stdin, stdout, stderr.
const STDIO: usize = 3;

/// pedelecd's end of the fork server.
#[derive(Debug)]
pub struct ForkServer {
    /// None once a request failed: a late answer would be read as the next
    /// request's, so the fork server is not asked again.
    socket: Mutex<Option<OwnedFd>>,
    pid: u32,
}

impl ForkServer {
    /// Forks the fork server. Call it while this process has one thread:
    /// the fork server and every process it forks copy this process as it
    /// is now.
    pub fn start(programs: Programs) -> io::Result<Started> {
        // Children are waited for through a pidfd; without pidfd_open
        // (Linux before 5.3) there is no fork server and services are exec'd.
        drop(pidfd_open(std::process::id())?);
        let (ours, theirs) = seqpacket_pair()?;
        // SAFETY: getpid has no preconditions.
        let launcher = unsafe { libc::getpid() };
        // SAFETY: the caller guarantees this process has one thread, so the
        // child's copy holds no lock another thread held.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(ours);
                Ok(Started::Ended(serve(theirs, launcher, programs)))
            }
            pid => {
                drop(theirs);
                set_receive_timeout(&ours, ANSWER_TIMEOUT)?;
                Ok(Started::Launcher(ForkServer {
                    socket: Mutex::new(Some(ours)),
                    pid: pid as u32,
                }))
            }
        }
    }

    /// The fork server's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Starts `program` as this process's child: `args` (its name first),
    /// `env` set over the environment this process had when the fork server
    /// started, `stdio` as its descriptors 0, 1 and 2, in a process group of
    /// its own, sent SIGTERM when this process's thread that started the
    /// fork server exits. Call it inside a tokio runtime.
    pub fn spawn(
        &self,
        program: Program,
        args: &[&OsStr],
        env: &[(&str, &OsStr)],
        stdio: [BorrowedFd<'_>; STDIO],
    ) -> io::Result<ForkedChild> {
        let request = Request::encode(program, args, env)?;
        let mut socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        let Some(fd) = socket.as_ref() else {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the fork server failed an earlier request",
            ));
        };
        let answer = send_with_fds(fd, &request, &stdio).and_then(|()| receive_answer(fd));
        let pid = match answer {
            Ok(pid) => pid,
            Err(e) => {
                *socket = None;
                return Err(e);
            }
        };
        drop(socket);
        ForkedChild::new(pid)
    }
}

impl Drop for ForkServer {
    /// The fork server holds nothing that needs an orderly end; it is killed
    /// and reaped, so no zombie is left for pedelecd's parent.
    fn drop(&mut self) {
        if super::signal(self.pid, libc::SIGKILL) {
            let _ = reap(self.pid, 0);
        }
    }
}

/// A child started by the fork server: waited for through its pidfd.
pub struct ForkedChild {
    pid: u32,
    pidfd: AsyncFd<OwnedFd>,
    status: Option<ExitStatus>,
}

impl ForkedChild {
    fn new(pid: u32) -> io::Result<ForkedChild> {
        let pidfd = pidfd_open(pid).and_then(|fd| {
            // SAFETY: the AsyncFd owns the OwnedFd, which stays open and the
            // same descriptor until the AsyncFd is dropped.
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)
        });
        match pidfd {
            Ok(pidfd) => Ok(ForkedChild {
                pid,
                pidfd,
                status: None,
            }),
            Err(e) => {
                // Unwatched, it must not run on.
                super::signal(pid, libc::SIGKILL);
                let _ = reap(pid, 0);
                Err(e)
            }
        }
    }

    /// Its pid; None once it has been waited for (as tokio's `Child::id`).
    pub fn id(&self) -> Option<u32> {
        self.status.is_none().then_some(self.pid)
    }

    /// Waits for it to exit and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let mut ready = self.pidfd.readable().await?;
            match reap(self.pid, libc::WNOHANG)? {
                Some(status) => self.status = Some(status),
                None => ready.clear_ready(),
            }
        }
    }
}

impl Drop for ForkedChild {
    /// As tokio's `kill_on_drop`: a child nobody watches any more is killed.
    fn drop(&mut self) {
        if self.status.is_none() && super::signal(self.pid, libc::SIGKILL) {
            let _ = reap(self.pid, libc::WNOHANG);
        }
    }
}

/// One request: a program, its arguments, its environment. On the wire: NUL-
/// terminated fields, the program's name, the number of arguments, the
/// arguments, then `NAME=value` pairs; the descriptors ride along.
struct Request {
    program: Program,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Request {
    fn encode(program: Program, args: &[&OsStr], env: &[(&str, &OsStr)]) -> io::Result<Vec<u8>> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        let mut out = Vec::new();
        let mut field = |bytes: &[u8]| -> io::Result<()> {
            if bytes.contains(&0) {
                return Err(invalid("a NUL byte in an argument or variable"));
            }
            out.extend_from_slice(bytes);
            out.push(0);
            Ok(())
        };
        field(program.file_name().as_bytes())?;
        field(args.len().to_string().as_bytes())?;
        for arg in args {
            field(arg.as_bytes())?;
        }
        for (name, value) in env {
            if name.is_empty() || name.contains('=') {
                return Err(invalid(
                    "an environment variable's name is empty or holds '='",
                ));
            }
            field(&[name.as_bytes(), b"=", value.as_bytes()].concat())?;
        }
        if out.len() > MAX_REQUEST {
            return Err(invalid("the request is longer than the fork server reads"));
        }
        Ok(out)
    }

    fn decode(bytes: &[u8]) -> Option<Request> {
        let mut fields = bytes.strip_suffix(&[0])?.split(|b| *b == 0);
        let program = Program::parse(std::str::from_utf8(fields.next()?).ok()?)?;
        let argc: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
        let mut args = Vec::with_capacity(argc.min(64));
        for _ in 0..argc {
            args.push(OsString::from_vec(fields.next()?.to_vec()));
        }
        let mut env = Vec::new();
        for pair in fields {
            let at = pair.iter().position(|b| *b == b'=').filter(|at| *at > 0)?;
            env.push((
                OsString::from_vec(pair[..at].to_vec()),
                OsString::from_vec(pair[at + 1..].to_vec()),
            ));
        }
        Some(Request { program, args, env })
    }
}

/// The fork server's loop, until pedelecd closes its end (or dies).
fn serve(socket: OwnedFd, launcher: libc::pid_t, programs: Programs) -> ExitCode {
    // SAFETY: prctl and getppid take plain integers and touch no memory of ours.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
            || libc::getppid() != launcher
        {
            return ExitCode::FAILURE;
        }
    }
    // Its own group, as the services': a Ctrl-C on pedelecd's terminal
    // reaches pedelecd, which stops the services in order.
    // SAFETY: setpgid takes plain integers.
    unsafe { libc::setpgid(0, 0) };
    set_name("pedelec-forks");
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let (len, fds) = match receive_with_fds(&socket, &mut buf) {
            Ok(Some(got)) => got,
            Ok(None) => return ExitCode::SUCCESS,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return ExitCode::FAILURE,
        };
        let answer = match (
            Request::decode(&buf[..len]),
            <[OwnedFd; STDIO]>::try_from(fds),
        ) {
            (Some(request), Ok(stdio)) => {
                // SAFETY: a raw clone with no new stack is a fork whose child
                // has pedelecd as its parent; this process has one thread.
                // The child only returns from here, through `main`. Unlike
                // glibc's fork it leaves glibc's record of the main thread's
                // id at the fork server's; glibc asks the kernel where it
                // signals its own thread (raise and abort end such a child
                // with their signal, checked with glibc 2.36), and Rust's
                // locks and thread ids are Rust's own.
                let pid = unsafe {
                    libc::syscall(
                        libc::SYS_clone,
                        libc::CLONE_PARENT | libc::SIGCHLD,
                        0,
                        0,
                        0,
                        0,
                    )
                };
                if pid == 0 {
                    drop(socket);
                    return run(request, stdio, launcher, programs);
                }
                if pid < 0 {
                    -io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO)
                } else {
                    pid as i32
                }
            }
            _ => -libc::EINVAL,
        };
        if send_answer(&socket, answer).is_err() {
            return ExitCode::FAILURE;
        }
    }
}

/// In the forked child: what `Command` would have set up before exec, then
/// the program.
fn run(
    request: Request,
    stdio: [OwnedFd; STDIO],
    launcher: libc::pid_t,
    programs: Programs,
) -> ExitCode {
    let name = request.program.file_name();
    // SAFETY: setpgid, prctl, getppid and dup2 take plain integers; this
    // process has one thread.
    let set_up = unsafe {
        libc::setpgid(0, 0) == 0
            && libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            ) == 0
            && libc::getppid() == launcher
            && stdio
                .iter()
                .zip(0 as RawFd..)
                .all(|(fd, to)| libc::dup2(fd.as_raw_fd(), to) == to)
    };
    drop(stdio);
    if !set_up {
        eprintln!(
            "{name}: cannot set up the forked process: {}",
            io::Error::last_os_error()
        );
        return ExitCode::FAILURE;
    }
    for (key, value) in &request.env {
        // SAFETY: this process has one thread; nothing reads the environment
        // concurrently.
        unsafe { std::env::set_var(key, value) };
    }
    set_name(name);
    match programs(request.program) {
        Some(main) => main(request.args),
        None => {
            eprintln!("{name}: not a program of this executable");
            ExitCode::from(127)
        }
    }
}

/// The name `ps` and `/proc/<pid>/comm` show (at most 15 bytes).
fn set_name(name: &str) {
    let mut comm = [0u8; 16];
    let len = name.len().min(15);
    comm[..len].copy_from_slice(&name.as_bytes()[..len]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, comm.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes plain integers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Reaps `pid` (`flags`: WNOHANG or 0): Some(status) once it has exited.
fn reap(pid: u32, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    // SAFETY: `status` is valid for the write.
    match unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        _ => Ok(Some(ExitStatus::from_raw(status))),
    }
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_receive_timeout(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as _,
        tv_usec: timeout.subsec_micros() as _,
    };
    // SAFETY: `tv` is a valid timeval for the length given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Room for a control message carrying `STDIO` descriptors.
const CMSG_SPACE: usize = 64;

fn send_with_fds(socket: &OwnedFd, bytes: &[u8], fds: &[BorrowedFd<'_>; STDIO]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut control = [0u64; CMSG_SPACE / 8];
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_fd().as_raw_fd()).collect();
    let data_len = size_of_val(raw.as_slice());
    // SAFETY: msghdr is plain data; all-zero is valid before the fields are set.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE computes a length from an integer.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len as u32) } as _;
    // SAFETY: `control` is aligned and longer than msg_controllen, so the
    // first header and its data lie inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
        std::ptr::copy_nonoverlapping(raw.as_ptr(), libc::CMSG_DATA(cmsg).cast(), raw.len());
    }
    loop {
        // SAFETY: `msg` points at live buffers for the whole call.
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One request and the descriptors it carried; None at end of file.
fn receive_with_fds(socket: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; CMSG_SPACE / 8];
    // SAFETY: msghdr is plain data; all-zero is valid before the fields are set.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    // SAFETY: `msg` points at live buffers for the whole call.
    let got = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG
    // macros walk only inside it, and every descriptor in an SCM_RIGHTS
    // message is new in this process and owned by nobody else.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let n =
                    ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..n {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if got == 0 && fds.is_empty() {
        return Ok(None);
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Ok(Some((0, fds))); // decodes as invalid
    }
    Ok(Some((got as usize, fds)))
}

fn send_answer(socket: &OwnedFd, answer: i32) -> io::Result<()> {
    let bytes = answer.to_le_bytes();
    // SAFETY: `bytes` is valid for its length.
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The fork server's answer: the child's pid, or the error it met.
fn receive_answer(socket: &OwnedFd) -> io::Result<u32> {
    let mut bytes = [0u8; 4];
    let got = loop {
        // SAFETY: `bytes` is valid for writes of its length.
        let got = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                bytes.as_mut_ptr().cast(),
                bytes.len(),
                0,
            )
        };
        if got >= 0 {
            break got;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if got != 4 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the fork server has gone",
        ));
    }
    match i32::from_le_bytes(bytes) {
        pid if pid > 0 => Ok(pid as u32),
        errno => Err(io::Error::from_raw_os_error(-errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_as_written() {
        let bytes = Request::encode(
            Program::Session,
            &[OsStr::new("pedelec-session"), OsStr::new("--flag")],
            &[("PEDELEC_RUNTIME_DIR", OsStr::new("/run/x=y"))],
        )
        .unwrap();
        let request = Request::decode(&bytes).unwrap();
        assert_eq!(request.program, Program::Session);
        assert_eq!(request.args, ["pedelec-session", "--flag"]);
        assert_eq!(
            request.env,
            [(
                OsString::from("PEDELEC_RUNTIME_DIR"),
                OsString::from("/run/x=y")
            )]
        );
    }

    #[test]
    fn a_malformed_request_is_refused() {
        for bad in [
            &b""[..],
            b"pedelec-session\0",
            b"pedelec-session\x002\0one\0",
            b"nope\x000\0",
            b"pedelec-session\x000\0=value\0",
            b"pedelec-session\x000\0NOEQUALS\0",
            b"pedelec-session\x000",
        ] {
            assert!(Request::decode(bad).is_none(), "{bad:?}");
        }
        assert!(Request::encode(Program::Session, &[OsStr::new("a\0b")], &[]).is_err());
        assert!(Request::encode(Program::Session, &[], &[("A=B", OsStr::new("c"))]).is_err());
    }
}
