//! When two chat deltas may travel as one event: the one rule SessionService's
//! lagging routes and the native host's output both merge by
//! (docs/native-messaging.md §4). Consecutive seqs — `next` may itself be a
//! merged event, counted from its `first_seq` — of the same operation and
//! message, and the joined text within the merger's bound.

use pb::session_event::Event;
use pedelec_proto::v1 as pb;

/// The most text one delta joined inside the services carries
/// (ProviderService's waiting deltas, SessionService's lagging routes): a
/// queued event stays small, and so does the buffer each open stream's
/// encoder keeps at its largest message (`pedelec_proto::codec`). The host
/// joins these again into its own frames (up to 64 KiB of text), so what a
/// page receives is not cut smaller.
pub const SERVICE_TEXT_MAX: usize = 4 * 1024;

/// Whether `next` continues `run` as one chat delta of at most `max_text` bytes.
pub fn joins(run: &pb::SessionEvent, next: &pb::SessionEvent, max_text: usize) -> bool {
    match (&run.event, &next.event) {
        (Some(Event::ChatDelta(a)), Some(Event::ChatDelta(b))) => {
            next.first_seq.unwrap_or(next.seq) == run.seq + 1
                && a.operation_id == b.operation_id
                && a.message_id == b.message_id
                && a.text.len() + b.text.len() <= max_text
        }
        _ => false,
    }
}
