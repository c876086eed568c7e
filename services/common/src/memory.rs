//! Giving freed memory back to the system. glibc's allocator keeps what a
//! burst freed (per-thread arenas, a fragmented heap top), so after a load of
//! 50 streaming sessions a service sat at 10x its idle size with nothing
//! live. A low-frequency check trims when the allocator holds more than
//! [`TRIM_ABOVE`] of free memory (docs/decisions.md "Memory after load").

use std::time::Duration;

/// Free bytes inside the allocator's arenas worth returning.
pub const TRIM_ABOVE: usize = 1 << 20;

/// How often the allocator is asked; each look costs microseconds.
const EVERY: Duration = Duration::from_secs(1);

/// When the one unconditional trim after start-up runs.
const AFTER_START: Duration = Duration::from_millis(100);

/// Spawns the trimming task on the current tokio runtime (once per process).
pub fn spawn_trimmer() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        tokio::spawn(async {
            // Once start-up is over (the server built, the first requests
            // answered), whatever it freed goes back, however little.
            tokio::time::sleep(AFTER_START).await;
            trim(0);
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                trim(TRIM_ABOVE);
            }
        });
    });
}

/// Returns free memory to the system when the allocator holds more than
/// `above` bytes of it.
fn trim(above: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: both are plain glibc calls without pointer arguments; they
        // take the allocator's own locks.
        let free = unsafe { libc::mallinfo2() }.fordblks;
        if free > above {
            unsafe { libc::malloc_trim(0) };
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = above;
}

/// Makes every thread allocate from the main arena. glibc gives a new thread
/// its own arena (a 64 MiB reservation whose touched pages stay with the
/// process). The long-running processes run one runtime thread and now and
/// then a blocking one (pattern compilation, file work): more arenas buy them
/// nothing (docs/decisions.md, "Memory after load"). Call before any thread starts.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: a plain glibc call without pointer arguments.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
