//! A thread's replay buffer: its most recent events, held encoded in a few
//! large segments, bounded by bytes (and by a generous event count).
//!
//! Why this shape: decoded events cost ~760 bytes of heap each (several
//! strings per event), so a burst of 10,000 chat deltas in 50 sessions held
//! ~370 MiB; one allocation per encoded event still left the heap fragmented
//! after the sessions ended. Encoded events packed into 64 KiB segments cost
//! their protobuf size plus 4 bytes, and whole segments go back to the
//! allocator when they are evicted. Events are decoded again only for a route
//! that asks for them. The thread id, the same in every event, is not stored.
//!
//! Memory comes back (docs/decisions.md "Replay buffer"): once a thread is idle
//! (no operation) and every attached route has taken its events, the buffer
//! keeps only its newest [`IDLE_TAIL_EVENTS`] (at most [`IDLE_TAIL_BYTES`]), compacted
//! (`Thread::give_back_when_idle`); and all buffers of the process together
//! hold at most [`TOTAL_BYTES`] of events every attached route has already
//! taken: past that, a thread that emits drops its oldest taken segments
//! first. What it buys under 50 threads × 10,000 deltas through one host:
//! docs/benchmarks.md, the `load` group (before, SessionService stayed
//! ~68 MiB above idle after the load: every thread's last turn, ~1.3 MiB
//! each). A re-attach behind what is held gets the replay-gap snapshot, as
//! before.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use pedelec_proto::v1 as pb;
use prost::Message;

/// Bounds of a thread's replay buffer.
#[derive(Clone, Copy, Debug)]
pub struct ReplayLimits {
    pub max_events: usize,
    pub max_bytes: usize,
}

impl Default for ReplayLimits {
    fn default() -> Self {
        // Bytes are the real bound; the count is generous so a burst of small
        // chat deltas (~60 bytes each) from a fast agent fits while a route
        // catches up, instead of turning into a replay gap.
        ReplayLimits {
            max_events: 1 << 15,
            max_bytes: 8 << 20,
        }
    }
}

/// A segment is closed once it holds this many bytes.
const SEGMENT_BYTES: usize = 64 << 10;

/// What an idle thread whose routes have taken everything keeps for a
/// re-attach: its newest events (a turn's last delta, chat, finish and status),
/// and what an ended thread keeps for routes catching up with its end.
pub const IDLE_TAIL_EVENTS: usize = 64;

/// The bytes that tail may hold (its newest event is kept whatever its size):
/// 64 joined deltas of 4 KiB each would keep 256 KiB per idle thread.
pub const IDLE_TAIL_BYTES: usize = 8 << 10;

/// Bytes of events, across every thread's buffer, above which events every
/// attached route has already taken are dropped (oldest segments first, by
/// the thread that emits). Events a route has yet to take are never dropped
/// for this budget: those stay bounded by each thread's [`ReplayLimits`].
pub const TOTAL_BYTES: usize = 16 << 20;

/// Bytes held by every replay buffer of the process.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Whether the buffers together hold more than [`TOTAL_BYTES`].
pub fn over_budget() -> bool {
    HELD.load(Ordering::Relaxed) > TOTAL_BYTES
}

struct Segment {
    /// The seq of the segment's first event; the others follow without gaps.
    first_seq: u64,
    /// Bytes of the buffer's events before this segment, since it was created.
    bytes_before: u64,
    data: Vec<u8>,
    /// Where each event ends in `data`.
    ends: Vec<u32>,
}

impl Segment {
    fn new(first_seq: u64, bytes_before: u64, capacity: usize) -> Segment {
        Segment {
            first_seq,
            bytes_before,
            data: Vec::with_capacity(capacity),
            ends: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 { 0 } else { self.ends[i - 1] as usize }
    }

    fn event(&self, i: usize) -> &[u8] {
        &self.data[self.start(i)..self.ends[i] as usize]
    }
}

pub struct ReplayBuffer {
    session_id: String,
    segments: VecDeque<Segment>,
    events: usize,
    bytes: usize,
    /// Bytes pushed since the buffer was created.
    total: u64,
    limits: ReplayLimits,
}

impl ReplayBuffer {
    pub fn new(session_id: &str, limits: ReplayLimits) -> Self {
        ReplayBuffer {
            session_id: session_id.to_string(),
            segments: VecDeque::new(),
            events: 0,
            bytes: 0,
            total: 0,
            limits,
        }
    }

    /// Appends event `seq` of this thread (it follows the previous one),
    /// encoded as it comes: moved in rather than copied (a delta's strings
    /// are not cloned), and without the thread id, which `after` puts back.
    pub fn push(
        &mut self,
        seq: u64,
        at: Option<prost_types::Timestamp>,
        event: pb::session_event::Event,
    ) {
        let held = pb::SessionEvent {
            session_id: String::new(),
            seq,
            at,
            first_seq: None,
            event: Some(event),
        };
        let size = held.encoded_len();
        let fits = self
            .segments
            .back()
            .is_some_and(|s| s.data.len() + size <= SEGMENT_BYTES);
        if !fits {
            // The first segment grows as needed: most threads hold few events.
            let capacity = if self.segments.is_empty() {
                0
            } else {
                SEGMENT_BYTES.max(size)
            };
            self.segments
                .push_back(Segment::new(seq, self.total, capacity));
        }
        let segment = self.segments.back_mut().expect("pushed above");
        held.encode(&mut segment.data)
            .expect("a Vec grows as needed");
        segment.ends.push(segment.data.len() as u32);
        self.events += 1;
        self.bytes += size;
        HELD.fetch_add(size, Ordering::Relaxed);
        self.total += size as u64;
        while (self.events > self.limits.max_events || self.bytes > self.limits.max_bytes)
            && self.segments.len() > 1
        {
            self.pop_segment();
        }
    }

    fn pop_segment(&mut self) {
        if let Some(s) = self.segments.pop_front() {
            self.events -= s.len();
            self.bytes -= s.data.len();
            HELD.fetch_sub(s.data.len(), Ordering::Relaxed);
        }
    }

    /// Drops the oldest segments whose events all have seq ≤ `taken` (every
    /// route has them), keeping the newest segment.
    pub fn drop_taken(&mut self, taken: u64) {
        while self.segments.len() > 1
            && self.segments[0].first_seq + self.segments[0].len() as u64 <= taken + 1
        {
            self.pop_segment();
        }
    }

    /// Whether the buffer is already what `keep_last(n, max_bytes)` leaves:
    /// no more than `n` events (and `max_bytes`, or one event) in one
    /// compacted segment.
    fn compact_within(&self, n: usize, max_bytes: usize) -> bool {
        self.events <= n
            && (self.bytes <= max_bytes || self.events <= 1)
            && self.segments.len() <= 1
            && self
                .segments
                .front()
                .is_none_or(|s| s.data.capacity() == s.data.len())
    }

    /// What an idle thread keeps: [`IDLE_TAIL_EVENTS`], at most
    /// [`IDLE_TAIL_BYTES`].
    pub fn keep_idle_tail(&mut self) {
        self.keep_last(IDLE_TAIL_EVENTS, IDLE_TAIL_BYTES);
    }

    /// Keeps only the newest `n` events that fit in `max_bytes` (the newest
    /// always), compacted (an ended thread's history is no longer worth its
    /// memory; a route further behind reconciles from a snapshot).
    pub fn keep_last(&mut self, n: usize, max_bytes: usize) {
        if self.compact_within(n, max_bytes) {
            return;
        }
        let Some(last_seq) = self.last_held_seq() else {
            return;
        };
        let oldest = self.oldest_seq().unwrap_or(0);
        let mut keep_from = last_seq;
        let mut bytes = self.raw(last_seq).map_or(0, <[u8]>::len);
        while keep_from > oldest && ((last_seq - keep_from + 1) as usize) < n {
            let Some(older) = self.raw(keep_from - 1) else {
                break;
            };
            if bytes + older.len() > max_bytes {
                break;
            }
            bytes += older.len();
            keep_from -= 1;
        }
        let kept: Vec<Vec<u8>> = (keep_from..=last_seq)
            .filter_map(|seq| self.raw(seq).map(<[u8]>::to_vec))
            .collect();
        let bytes_before = self.total - kept.iter().map(Vec::len).sum::<usize>() as u64;
        let mut segment = Segment::new(keep_from, bytes_before, kept.iter().map(Vec::len).sum());
        for e in &kept {
            segment.data.extend_from_slice(e);
            segment.ends.push(segment.data.len() as u32);
        }
        self.events = segment.len();
        HELD.fetch_sub(self.bytes, Ordering::Relaxed);
        HELD.fetch_add(segment.data.len(), Ordering::Relaxed);
        self.bytes = segment.data.len();
        self.segments.clear();
        if segment.len() > 0 {
            self.segments.push_back(segment);
        }
        self.segments.shrink_to_fit();
    }

    fn oldest_seq(&self) -> Option<u64> {
        self.segments.front().map(|s| s.first_seq)
    }

    fn last_held_seq(&self) -> Option<u64> {
        self.segments
            .back()
            .filter(|s| s.len() > 0)
            .map(|s| s.first_seq + s.len() as u64 - 1)
    }

    /// Where `seq` is held: its segment and index there.
    fn locate(&self, seq: u64) -> Option<(usize, usize)> {
        let oldest = self.oldest_seq()?;
        if seq < oldest || self.last_held_seq().is_none_or(|last| seq > last) {
            return None;
        }
        let s = self.segments.partition_point(|s| s.first_seq <= seq) - 1;
        Some((s, (seq - self.segments[s].first_seq) as usize))
    }

    fn raw(&self, seq: u64) -> Option<&[u8]> {
        let (s, i) = self.locate(seq)?;
        Some(self.segments[s].event(i))
    }

    /// Whether the events after `seq` fill more than half of the buffer (by
    /// count or bytes): a route at `seq` is then at risk of a replay gap.
    pub fn half_full_after(&self, seq: u64) -> bool {
        let Some(oldest) = self.oldest_seq() else {
            return false;
        };
        if seq + 1 < oldest {
            return true; // already lost some
        }
        let Some((s, i)) = self.locate(seq + 1) else {
            return false; // nothing after seq
        };
        let segment = &self.segments[s];
        let bytes_before = segment.bytes_before + segment.start(i) as u64;
        let bytes = self.total - bytes_before;
        let count = (self.last_held_seq().unwrap_or(seq) - seq) as usize;
        count > self.limits.max_events / 2 || bytes > (self.limits.max_bytes / 2) as u64
    }

    /// Up to `max` events with seq > `after`, or None when some of them are no
    /// longer held (`last_seq` is the newest seq handed out).
    pub fn after(&self, after: u64, last_seq: u64, max: usize) -> Option<Vec<pb::SessionEvent>> {
        if after >= last_seq {
            return Some(Vec::new());
        }
        let (mut s, mut i) = self.locate(after + 1)?;
        let mut out = Vec::new();
        while out.len() < max && s < self.segments.len() {
            let segment = &self.segments[s];
            if i >= segment.len() {
                (s, i) = (s + 1, 0);
                continue;
            }
            // Encoded here from a valid message: decoding cannot fail.
            if let Ok(mut event) = pb::SessionEvent::decode(segment.event(i)) {
                event.session_id.clone_from(&self.session_id);
                out.push(event);
            }
            i += 1;
        }
        Some(out)
    }
}

impl Drop for ReplayBuffer {
    fn drop(&mut self) {
        HELD.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::session_event::Event;

    fn hold(buf: &mut ReplayBuffer, e: pb::SessionEvent) {
        buf.push(e.seq, e.at, e.event.expect("an event"));
    }

    fn event(seq: u64) -> pb::SessionEvent {
        pb::SessionEvent {
            session_id: "t".into(),
            seq,
            at: None,
            first_seq: None,
            event: Some(Event::Chat(pb::Chat {
                operation_id: "op".into(),
                text: "x".repeat(10),
                message_id: "m".into(),
            })),
        }
    }

    /// An event's size as held: without its thread id.
    fn held_size() -> usize {
        pb::SessionEvent {
            session_id: String::new(),
            ..event(1)
        }
        .encoded_len()
    }

    fn seqs(v: Vec<pb::SessionEvent>) -> Vec<u64> {
        v.into_iter().map(|e| e.seq).collect()
    }

    #[test]
    fn events_come_back_whole_with_their_thread_id() {
        let mut buf = ReplayBuffer::new("t", ReplayLimits::default());
        for seq in 1..=3 {
            hold(&mut buf, event(seq));
        }
        assert_eq!(
            buf.after(0, 3, usize::MAX).unwrap(),
            vec![event(1), event(2), event(3)]
        );
    }

    #[test]
    fn replay_returns_events_after_seq_or_reports_a_gap() {
        // Segments of one event each, so the count bound evicts per event.
        let mut buf = ReplayBuffer::new(
            "t",
            ReplayLimits {
                max_events: 3,
                max_bytes: 1 << 20,
            },
        );
        let big = |seq| pb::SessionEvent {
            event: Some(Event::Chat(pb::Chat {
                text: "x".repeat(SEGMENT_BYTES),
                ..Default::default()
            })),
            ..event(seq)
        };
        for seq in 1..=5 {
            hold(&mut buf, big(seq));
        }
        // holds 3, 4, 5
        assert_eq!(seqs(buf.after(2, 5, usize::MAX).unwrap()), vec![3, 4, 5]);
        assert_eq!(seqs(buf.after(4, 5, usize::MAX).unwrap()), vec![5]);
        assert!(buf.after(5, 5, usize::MAX).unwrap().is_empty());
        assert!(buf.after(1, 5, usize::MAX).is_none());
        assert_eq!(seqs(buf.after(2, 5, 2).unwrap()), vec![3, 4]);
    }

    #[test]
    fn many_events_span_segments_and_stay_contiguous() {
        let mut buf = ReplayBuffer::new("t", ReplayLimits::default());
        let n = 3 * SEGMENT_BYTES / held_size();
        for seq in 1..=n as u64 {
            hold(&mut buf, event(seq));
        }
        assert!(buf.segments.len() >= 3);
        let all = seqs(buf.after(0, n as u64, usize::MAX).unwrap());
        assert_eq!(all, (1..=n as u64).collect::<Vec<_>>());
        let from_middle = seqs(buf.after(1000, n as u64, 10).unwrap());
        assert_eq!(from_middle, (1001..=1010).collect::<Vec<_>>());
    }

    #[test]
    fn half_full_tells_when_a_reader_is_at_risk() {
        let mut buf = ReplayBuffer::new(
            "t",
            ReplayLimits {
                max_events: 8,
                max_bytes: 1 << 20,
            },
        );
        for seq in 1..=6 {
            hold(&mut buf, event(seq));
        }
        assert!(!buf.half_full_after(6)); // nothing pending
        assert!(!buf.half_full_after(3)); // 3 of 8 pending
        assert!(buf.half_full_after(1)); // 5 of 8 pending
        let mut by_bytes = ReplayBuffer::new(
            "t",
            ReplayLimits {
                max_events: 100,
                max_bytes: held_size() * 4,
            },
        );
        for seq in 1..=4 {
            hold(&mut by_bytes, event(seq));
        }
        assert!(!by_bytes.half_full_after(2));
        assert!(by_bytes.half_full_after(1));
    }

    #[test]
    fn replay_is_bounded_by_bytes_in_whole_segments() {
        let per_segment = SEGMENT_BYTES / held_size();
        let mut buf = ReplayBuffer::new(
            "t",
            ReplayLimits {
                max_events: usize::MAX,
                max_bytes: 2 * SEGMENT_BYTES,
            },
        );
        let n = 5 * per_segment as u64;
        for seq in 1..=n {
            hold(&mut buf, event(seq));
        }
        assert!(buf.bytes <= 2 * SEGMENT_BYTES, "{}", buf.bytes);
        assert!(buf.after(0, n, usize::MAX).is_none(), "the oldest are gone");
        let held = buf.after(n - per_segment as u64, n, usize::MAX).unwrap();
        assert_eq!(held.len(), per_segment);
    }

    #[test]
    fn keep_last_compacts_to_the_newest_events() {
        let mut buf = ReplayBuffer::new("t", ReplayLimits::default());
        let n = 2 * SEGMENT_BYTES / held_size();
        for seq in 1..=n as u64 {
            hold(&mut buf, event(seq));
        }
        buf.keep_last(64, usize::MAX);
        assert_eq!(buf.segments.len(), 1);
        assert_eq!(buf.segments[0].data.capacity(), buf.segments[0].data.len());
        assert_eq!(buf.segments[0].len(), 64);
        let kept = seqs(buf.after(n as u64 - 64, n as u64, usize::MAX).unwrap());
        assert_eq!(kept, ((n as u64 - 63)..=n as u64).collect::<Vec<_>>());
        assert!(buf.after(n as u64 - 65, n as u64, usize::MAX).is_none());
        // Still usable afterwards.
        hold(&mut buf, event(n as u64 + 1));
        assert!(!buf.half_full_after(n as u64));
        let mut small = ReplayBuffer::new("t", ReplayLimits::default());
        hold(&mut small, event(1));
        small.keep_last(64, usize::MAX);
        assert_eq!(seqs(small.after(0, 1, 10).unwrap()), vec![1]);
    }

    #[test]
    fn keep_last_holds_no_more_bytes_than_asked_but_always_the_newest_event() {
        let mut buf = ReplayBuffer::new("t", ReplayLimits::default());
        for seq in 1..=10 {
            hold(&mut buf, event(seq));
        }
        buf.keep_last(64, 3 * held_size());
        assert_eq!(seqs(buf.after(7, 10, usize::MAX).unwrap()), vec![8, 9, 10]);
        assert!(buf.after(6, 10, usize::MAX).is_none());
        buf.keep_last(64, 1);
        assert_eq!(seqs(buf.after(9, 10, usize::MAX).unwrap()), vec![10]);
        assert_eq!(buf.bytes, held_size());
    }

    #[test]
    fn drop_taken_gives_back_only_whole_segments_every_route_took() {
        let mut buf = ReplayBuffer::new("t", ReplayLimits::default());
        let n = 4 * SEGMENT_BYTES / held_size();
        for seq in 1..=n as u64 {
            hold(&mut buf, event(seq));
        }
        let segments = buf.segments.len();
        assert!(segments >= 4);
        // Taken up to the middle of the second segment: only the first goes.
        let second = buf.segments[1].first_seq;
        buf.drop_taken(second + 2);
        assert_eq!(buf.segments.len(), segments - 1);
        assert_eq!(buf.oldest_seq(), Some(second));
        assert_eq!(seqs(buf.after(second + 2, n as u64, 3).unwrap()).len(), 3);
        // Everything taken: the newest segment stays.
        buf.drop_taken(n as u64);
        assert_eq!(buf.segments.len(), 1);
        assert_eq!(buf.last_held_seq(), Some(n as u64));
        assert!(!buf.half_full_after(n as u64));
    }

    #[test]
    fn keep_last_on_a_compact_buffer_changes_nothing() {
        let mut buf = ReplayBuffer::new("t", ReplayLimits::default());
        for seq in 1..=10 {
            hold(&mut buf, event(seq));
        }
        buf.keep_idle_tail();
        let data = buf.segments[0].data.as_ptr();
        buf.keep_idle_tail();
        assert_eq!(buf.segments[0].data.as_ptr(), data, "not rebuilt");
        assert_eq!(
            seqs(buf.after(0, 10, usize::MAX).unwrap()),
            (1..=10).collect::<Vec<_>>()
        );
    }
}
