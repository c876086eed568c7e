//! Standard input and output of a process that speaks a protocol over them:
//! the native host (Chrome's framing) and `pedelec-cli mcp` (MCP's JSON-RPC
//! lines, spawned by the agent CLIs).
//!
//! `tokio::io::stdin()`/`stdout()` do every read and write on tokio's
//! blocking thread pool, so each message in and each flush out costs a
//! hand-off between threads (a futex wake and a context switch) on top of the
//! syscall. Chrome and codex give their children pipes, Node's child
//! processes (claude's) give Unix socket pairs, and both can be registered
//! with the runtime's reactor: reads and writes then run on the task that
//! asked for them (docs/decisions.md, "The native host's stdio"). Anything
//! else (a file, a terminal) keeps tokio's portable path.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

/// Standard input, read through the reactor when it is a pipe or a socket.
pub fn stdin() -> Box<dyn AsyncRead + Send + Unpin> {
    through_reactor::<dyn AsyncRead + Send + Unpin>(
        "stdin",
        std::io::stdin().as_fd(),
        |fd| Ok(Box::new(pipe::Receiver::from_owned_fd(fd)?)),
        |stream| Box::new(stream),
        || Box::new(tokio::io::stdin()),
    )
}

/// Standard output, written through the reactor when it is a pipe or a socket.
pub fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    through_reactor::<dyn AsyncWrite + Send + Unpin>(
        "stdout",
        std::io::stdout().as_fd(),
        |fd| Ok(Box::new(pipe::Sender::from_owned_fd(fd)?)),
        |stream| Box::new(stream),
        || Box::new(tokio::io::stdout()),
    )
}

/// `fd` as the reactor serves a pipe or a socket, else tokio's portable form.
fn through_reactor<T: ?Sized>(
    which: &str,
    fd: BorrowedFd<'_>,
    pipe: impl FnOnce(OwnedFd) -> io::Result<Box<T>>,
    socket: impl FnOnce(UnixStream) -> Box<T>,
    portable: impl FnOnce() -> Box<T>,
) -> Box<T> {
    let served = Reactor::of(fd).and_then(|end| match end {
        Reactor::Pipe(fd) => pipe(fd),
        Reactor::Socket(stream) => Ok(socket(stream)),
    });
    served.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "{which} stays on the blocking pool");
        portable()
    })
}

/// A copy of a standard descriptor the reactor can serve. Its description
/// becomes non-blocking, which is safe because Chrome and the agent CLIs
/// make these pipes and sockets for this one child.
enum Reactor {
    Pipe(OwnedFd),
    Socket(UnixStream),
}

impl Reactor {
    fn of(fd: BorrowedFd<'_>) -> io::Result<Reactor> {
        let file = std::fs::File::from(fd.try_clone_to_owned()?);
        let kind = file.metadata()?.file_type();
        if kind.is_fifo() {
            // `from_owned_fd` checks the direction and sets O_NONBLOCK.
            Ok(Reactor::Pipe(file.into()))
        } else if kind.is_socket() {
            let stream = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
            stream.set_nonblocking(true)?;
            Ok(Reactor::Socket(UnixStream::from_std(stream)?))
        } else {
            Err(io::Error::other("neither a pipe nor a socket"))
        }
    }
}
