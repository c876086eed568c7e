//! The async runtime of Pedelec's long-running processes (the launcher, the
//! four services and the native host): one thread, tokio's current-thread
//! scheduler (decision and measurements: docs/decisions.md, "Runtime threads").
//!
//! Why one thread: a tool call crosses six processes, and on a multi-thread
//! runtime each gRPC request's task may be woken on, or stolen by, the other
//! worker, so every hop pays cross-thread wake-ups on top of its syscalls. The
//! processes are mostly idle and each request is short, so a second worker
//! buys no throughput here. It also means children are always spawned from
//! the main thread, which lives as long as the process, as
//! `PR_SET_PDEATHSIG` needs (it fires when the spawning *thread* exits).
//! Blocking work still goes to `spawn_blocking`'s pool.

use std::future::Future;

/// Runs `main` to completion on a current-thread runtime with I/O and timers.
/// If the runtime cannot be built, says so on stderr as `program` and exits 1.
pub fn block_on<F: Future>(program: &str, main: F) -> F::Output {
    crate::memory::one_arena();
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(main),
        Err(e) => {
            eprintln!("{program}: cannot start the async runtime: {e}");
            std::process::exit(1)
        }
    }
}
