//! A page that reads no faster than a real one. The load group's harness
//! reads the native host's frames as fast as Rust can; a page in Chromium
//! pays per message and per byte on the way from the extension's worker
//! through the content script and `window.postMessage` to the SDK. Chromium
//! does not hold the host back while the page is busy (the worker takes
//! everything the host writes and posts it on; docs/benchmarks.md "Into a
//! real page": with the page's main thread stalled 1 s, the host and worker
//! hops still finished within 0.45–1.1 s of their first message), so the
//! backlog forms in front of the page. [`PagePace`] models that queue: each
//! frame is read by the page when the page is free and it has arrived, and
//! takes the page's measured cost; the load figures use that time instead of
//! the arrival at the harness.
//!
//! The cost comes from `node tests/e2e/bench-stream.mjs 100000 3 1000`
//! (release build, 2026-12-04 19:57, Debian's Chromium on the 2-vCPU VM):
//! a backlog of one 100,000-delta burst (0.69 MB of text) queued in front of
//! the stalled page drained into `onChatDelta` in 10 ms as 19 messages,
//! 9–11 ms as 68–83 and 15–24 ms as 131–162: about 0.1 ms per message and
//! 8 ms per 0.69 MB (about 12 ns per byte) for content script, postMessage
//! and the SDK together. The worker's own cost is not in it (it kept up
//! with the host in every run), so this is a lower bound of the page's cost.

/// The page's cost per message (content script → postMessage → SDK → handler).
pub(crate) const PER_MESSAGE_NS: u64 = 100_000;
/// The page's cost per byte of a frame's JSON.
pub(crate) const PER_BYTE_NS: u64 = 12;

/// When the modelled page is free again (CLOCK_MONOTONIC ns).
#[derive(Debug, Default)]
pub(crate) struct PagePace {
    free_at_ns: u64,
}

impl PagePace {
    /// A frame of `bytes` that reached the harness at `arrived_ns`: the time
    /// the page has read it (it starts when the page is free and the frame is
    /// there).
    pub(crate) fn read(&mut self, arrived_ns: u64, bytes: usize) -> u64 {
        let start = self.free_at_ns.max(arrived_ns);
        self.free_at_ns = start + PER_MESSAGE_NS + PER_BYTE_NS * bytes as u64;
        self.free_at_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_that_keeps_up_reads_each_frame_its_cost_after_it_arrives() {
        let mut p = PagePace::default();
        let one = PER_MESSAGE_NS + PER_BYTE_NS * 100;
        assert_eq!(p.read(1_000_000_000, 100), 1_000_000_000 + one);
        // Far apart: no backlog, each frame costs only itself.
        assert_eq!(p.read(2_000_000_000, 100), 2_000_000_000 + one);
    }

    #[test]
    fn frames_arriving_faster_than_the_page_reads_queue_behind_each_other() {
        let mut p = PagePace::default();
        let one = PER_MESSAGE_NS + PER_BYTE_NS * 1000;
        // 1,000 frames arriving at the same instant: the last is read 1,000 costs later.
        let mut last = 0;
        for _ in 0..1000 {
            last = p.read(5_000, 1000);
        }
        assert_eq!(last, 5_000 + 1000 * one);
        // A frame that arrives while the backlog drains waits for it.
        assert_eq!(p.read(6_000, 0), last + PER_MESSAGE_NS);
    }
}
