//! The host's ends of Chrome's pipes.
//!
//! `tokio::io::stdin()`/`stdout()` do every read and write on tokio's
//! blocking thread pool, so each frame in and each flush out costs a hand-off
//! between threads (a futex wake and a context switch) on top of the syscall.
//! Chrome gives the host pipes, and a pipe can be registered with the
//! runtime's reactor like a socket: reads and writes then run on the task that
//! asked for them (docs/decisions.md, "The native host's stdio"). Anything that is
//! not a pipe (a file, a terminal, a socket from a test harness) keeps tokio's
//! portable path.

use std::io;
use std::os::fd::AsFd;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

/// Standard input, read through the reactor when it is a pipe.
pub fn stdin() -> Box<dyn AsyncRead + Send + Unpin> {
    // `from_owned_fd` checks that the descriptor is a FIFO opened for
    // reading and sets O_NONBLOCK on it (the description is ours alone).
    match std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(e) => {
            not_a_pipe("stdin", &e);
            Box::new(tokio::io::stdin())
        }
    }
}

/// Standard output, written through the reactor when it is a pipe.
pub fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    match std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(e) => {
            not_a_pipe("stdout", &e);
            Box::new(tokio::io::stdout())
        }
    }
}

fn not_a_pipe(which: &str, why: &io::Error) {
    tracing::debug!(error = %why, "{which} is not a pipe; using the blocking-pool path");
}
