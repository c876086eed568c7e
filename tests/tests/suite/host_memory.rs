//! What a page's requests may hold in the native host's memory: at most
//! `MAX_IN_FLIGHT_BYTES` (64 MiB) of request frames in flight; a frame
//! beyond it waits, its body unread, until requests finish
//! (docs/native-messaging.md, "Services, auto-start, shutdown" and "Figures").

use pedelec_common::ServiceName;
use pedelec_tests::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// Large frames in a row: 12 × 16 MiB, three times the budget.
const FRAMES: usize = 12;
const TEXT_BYTES: usize = 16 << 20;
/// The host's peak resident memory (VmHWM) may not pass this: four times
/// the budget (a request's text is held as it was parsed, as a copy kept for
/// a retry after an auto-start and as its encoded gRPC message, and the next
/// frame is read and parsed meanwhile) plus 32 MiB for the host's own.
/// Without the budget the host held every frame at once: 12 × 16 MiB as
/// they arrived, with their copies well above the limit.
const PEAK_LIMIT_KIB: u64 = (4 * 64 + 32) << 10;

/// A field of `/proc/<pid>/status` in KiB (VmHWM: the peak resident memory).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} for pid {pid}"))
}

/// SIGCONT on drop, so a failing test leaves no stopped process behind.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        signal(self.0 as i32, libc::SIGCONT);
    }
}

/// SessionService is stopped (SIGSTOP) while 24 frames of 16 MiB arrive, so
/// every request the host reads stays in flight: the host stops reading
/// once 64 MiB of them are held (it logs that it waits), SessionService is
/// let go, and every frame is then read and answered, with the host's peak
/// memory under the bound.
#[tokio::test]
async fn many_large_frames_keep_the_hosts_memory_bounded_and_all_are_answered() {
    let env = TestEnv::with_codex_stub();
    let _launcher = env.up().await;
    let mut host = Host::spawn(&env, EXTENSION);
    // SessionService is known up in the host: later calls go straight to it.
    assert_eq!(
        host.err("get_session", json!({"sessionId": "thr_x"})).await,
        "THREAD_NOT_FOUND"
    );
    let host_pid = host.child.id().unwrap();
    let before = status_kib(host_pid, "VmHWM:");
    let session = env.service_status(ServiceName::Session).await.pid;
    signal(session as i32, libc::SIGSTOP);
    let resume = Continue(session);

    let mut stdin = host.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        // One body, its id patched per frame (serializing 16 MiB each time
        // would cost more than the host's work).
        let request = json!({"id": "big00", "type": "send_text", "origin": ORIGIN,
            "payload": {"sessionId": "thr_x", "text": "a".repeat(TEXT_BYTES)}});
        let mut bytes = frame(request.to_string().as_bytes());
        let at = 4 + request.to_string().find("big00").unwrap() + 3;
        for i in 0..FRAMES {
            bytes[at..at + 2].copy_from_slice(format!("{i:02}").as_bytes());
            stdin.write_all(&bytes).await.unwrap();
        }
        stdin.flush().await.unwrap();
        stdin
    });
    // The host says it waits for room (the budget at work), or it took
    // every frame while none could be answered (no budget).
    let log = env.root.path().join("host.stderr");
    let deadline = Deadline::patience();
    while !writer.is_finished()
        && !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("requests in flight hold the byte budget")
    {
        deadline
            .tick("the host to wait for room, or to take every frame")
            .await;
    }
    drop(resume);

    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..FRAMES {
        let reply = host.reply_to(&json!(format!("big{i:02}"))).await.value;
        assert_eq!(reply["ok"], false, "{reply:.300}");
        let code = reply["error"]["code"].as_str().unwrap().to_string();
        // Unknown thread; or, when the launcher replaced the stopped service
        // first, the calls that were in flight on it.
        assert!(
            code == "THREAD_NOT_FOUND" || code == "CORE_UNAVAILABLE",
            "{reply:.300}"
        );
        *codes.entry(code).or_default() += 1;
    }
    host.stdin = Some(writer.await.unwrap());
    let peak = status_kib(host_pid, "VmHWM:");
    eprintln!(
        "host VmHWM: {} MiB before, {} MiB after {FRAMES} frames of {} MiB; replies {codes:?}",
        before >> 10,
        peak >> 10,
        TEXT_BYTES >> 20
    );
    assert!(
        peak < PEAK_LIMIT_KIB,
        "the host's peak memory was {} MiB (limit {} MiB)",
        peak >> 10,
        PEAK_LIMIT_KIB >> 10
    );
    // And it still serves.
    assert_eq!(host.ok("ping", json!({})).await["pong"], true);
}
