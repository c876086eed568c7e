//! What the one writer of stdout sends while its reader lags: consecutive
//! chat deltas of one message travel as one `chat_delta` frame.
//!
//! Each message Chrome carries costs the same whatever its size (a read, a
//! JSON parse, a hop through the extension's port and the page's
//! `postMessage`), so a page that reads N deltas a second as N frames reads
//! them as far fewer once they are merged. Nothing merges while the reader
//! keeps up: the writer merges only what is already waiting in its queue
//! when it looks (a backlog), so an idle stream's delta goes out alone and
//! at once. Under a backlog every other frame waits behind far fewer frames,
//! so a `tool_request` queued behind thousands of deltas of other threads
//! reaches the page sooner (figures: docs/benchmarks.md, `load` group).
//!
//! The merged frame (docs/native-messaging.md §4): the text of the deltas
//! one after the other, `seq` and `at` of the last delta, and `firstSeq`, the
//! seq of the first. A merge takes only deltas of one thread with
//! consecutive seqs (so no event of that thread falls between them) and of
//! one operation and message, and never crosses another frame that is not a
//! thread event (a reply, an attach's snapshot, `detached`): deltas of a
//! stream that began at a snapshot never merge with those before it.
//! An event SessionService already merged for the attachment (its
//! `first_seq`, asked for by `mergeDeltas`) joins a run as the deltas it
//! stands for.

use pedelec_common::delta_merge;
use pedelec_proto::v1 as pb;

use crate::protocol as p;

/// A merged frame's text stops growing here: well under a frame's limit
/// (`frame::MAX_OUTBOUND`), so a merged delta is never split into chunks.
pub const MERGED_TEXT_MAX: usize = 64 * 1024;

/// One message for the writer.
pub enum Outgoing {
    /// A frame as it goes out (a reply, `detached`, a gap event).
    Frame(String),
    /// An event of an attached thread's stream; `merge` when its attachment
    /// asked for merged deltas (`mergeDeltas`).
    Event {
        event: Box<pb::SessionEvent>,
        merge: bool,
    },
}

impl From<String> for Outgoing {
    fn from(frame: String) -> Self {
        Outgoing::Frame(frame)
    }
}

/// A chat delta being merged: the first event (text growing), the seq of
/// its first delta.
struct Run {
    event: pb::SessionEvent,
    first_seq: u64,
}

/// What `batch` (in queue order) becomes on the wire: every item's frame in
/// the same order, with each chat delta that can join the run of its
/// thread's previous delta folded into that run's frame.
pub fn frames(batch: Vec<Outgoing>) -> Vec<String> {
    enum Slot {
        Done(String),
        Run(Box<Run>),
    }
    let mut slots: Vec<Slot> = Vec::with_capacity(batch.len());
    // Per thread, the slot of its open run (only a run that may still grow).
    let mut open: Vec<(String, usize)> = Vec::new();
    for item in batch {
        let event = match item {
            Outgoing::Frame(f) => {
                open.clear();
                slots.push(Slot::Done(f));
                continue;
            }
            Outgoing::Event { event, merge } => (*event, merge),
        };
        let (event, merge) = event;
        if !merge {
            if let Some(i) = open.iter().position(|(s, _)| *s == event.session_id) {
                open.swap_remove(i);
            }
            slots.extend(p::event_frame(&event).map(Slot::Done));
            continue;
        }
        let at = open.iter().position(|(s, _)| *s == event.session_id);
        let joined = at.and_then(|i| match &mut slots[open[i].1] {
            Slot::Run(run) if delta_merge::joins(&run.event, &event, MERGED_TEXT_MAX) => Some(run),
            _ => None,
        });
        if let Some(run) = joined {
            let (
                Some(pb::session_event::Event::ChatDelta(into)),
                Some(pb::session_event::Event::ChatDelta(d)),
            ) = (run.event.event.as_mut(), event.event.as_ref())
            else {
                unreachable!("joins checked both are chat deltas");
            };
            into.text.push_str(&d.text);
            run.event.seq = event.seq;
            run.event.at = event.at;
            continue;
        }
        if let Some(i) = at {
            open.swap_remove(i);
        }
        if matches!(event.event, Some(pb::session_event::Event::ChatDelta(_))) {
            open.push((event.session_id.clone(), slots.len()));
            // SessionService may have merged it already (`first_seq`).
            let first_seq = event.first_seq.unwrap_or(event.seq);
            slots.push(Slot::Run(Box::new(Run { event, first_seq })));
        } else if let Some(f) = p::event_frame(&event) {
            slots.push(Slot::Done(f));
        }
    }
    slots
        .into_iter()
        .filter_map(|s| match s {
            Slot::Done(f) => Some(f),
            Slot::Run(run) => {
                let first = (run.first_seq != run.event.seq).then_some(run.first_seq);
                p::event_frame_merged(&run.event, first)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn delta(session: &str, seq: u64, text: &str) -> Outgoing {
        Outgoing::Event {
            merge: true,
            event: Box::new(pb::SessionEvent {
                session_id: session.into(),
                seq,
                at: None,
                first_seq: None,
                event: Some(pb::session_event::Event::ChatDelta(pb::ChatDelta {
                    operation_id: "op".into(),
                    text: text.into(),
                    message_id: "m".into(),
                })),
            }),
        }
    }

    fn status(session: &str, seq: u64) -> Outgoing {
        Outgoing::Event {
            merge: true,
            event: Box::new(pb::SessionEvent {
                session_id: session.into(),
                seq,
                at: None,
                first_seq: None,
                event: Some(pb::session_event::Event::Ended(pb::Ended::default())),
            }),
        }
    }

    fn parsed(batch: Vec<Outgoing>) -> Vec<Value> {
        frames(batch)
            .iter()
            .map(|f| serde_json::from_str(f).unwrap())
            .collect()
    }

    #[test]
    fn a_lone_delta_goes_out_as_it_is() {
        let out = parsed(vec![delta("a", 7, "x")]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["seq"], 7);
        assert_eq!(out[0]["event"]["text"], "x");
        assert!(out[0].get("firstSeq").is_none());
    }

    #[test]
    fn consecutive_deltas_of_a_thread_merge_across_other_threads() {
        let out = parsed(vec![
            delta("a", 1, "he"),
            delta("b", 5, "X"),
            delta("a", 2, "ll"),
            delta("a", 3, "o"),
            delta("b", 6, "Y"),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["sessionId"], "a");
        assert_eq!(out[0]["event"]["text"], "hello");
        assert_eq!(
            (out[0]["firstSeq"].clone(), out[0]["seq"].clone()),
            (1.into(), 3.into())
        );
        assert_eq!(out[1]["event"]["text"], "XY");
        assert_eq!(
            (out[1]["firstSeq"].clone(), out[1]["seq"].clone()),
            (5.into(), 6.into())
        );
    }

    #[test]
    fn another_event_of_the_thread_a_seq_gap_or_a_reply_ends_a_run() {
        let out = parsed(vec![
            delta("a", 1, "a"),
            status("a", 2),
            delta("a", 3, "b"),
            delta("a", 5, "c"),
            Outgoing::Frame(r#"{"type":"reply"}"#.into()),
            delta("a", 6, "d"),
        ]);
        let kinds: Vec<_> = out
            .iter()
            .map(|f| format!("{}{}", f["seq"], f["event"]["text"].as_str().unwrap_or("")))
            .collect();
        assert_eq!(kinds, ["1a", "2", "3b", "5c", "null", "6d"]);
        assert!(out.iter().all(|f| f.get("firstSeq").is_none()));
    }

    #[test]
    fn deltas_of_an_attachment_that_did_not_ask_never_merge() {
        let plain = |seq| match delta("a", seq, "x") {
            Outgoing::Event { event, .. } => Outgoing::Event {
                event,
                merge: false,
            },
            other => other,
        };
        let out = parsed(vec![plain(1), plain(2), plain(3)]);
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|f| f.get("firstSeq").is_none()));
    }

    #[test]
    fn a_run_stops_growing_at_its_text_bound() {
        let big = "x".repeat(MERGED_TEXT_MAX / 2 + 1);
        let out = parsed(vec![
            delta("a", 1, &big),
            delta("a", 2, &big),
            delta("a", 3, "y"),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1]["firstSeq"], 2);
        assert_eq!(out[1]["seq"], 3);
    }

    #[test]
    fn an_event_the_service_merged_keeps_its_first_seq_and_joins_a_run() {
        let merged = |seq, first, text: &str| match delta("a", seq, text) {
            Outgoing::Event { mut event, merge } => {
                event.first_seq = Some(first);
                Outgoing::Event { event, merge }
            }
            other => other,
        };
        // Alone: it goes out naming its first seq.
        let out = parsed(vec![merged(9, 4, "abc")]);
        assert_eq!(
            (out[0]["firstSeq"].clone(), out[0]["seq"].clone()),
            (4.into(), 9.into())
        );
        // After a delta of the run it continues: one frame from the run's start.
        let out = parsed(vec![
            delta("a", 3, "x"),
            merged(9, 4, "abc"),
            delta("a", 10, "y"),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["event"]["text"], "xabcy");
        assert_eq!(
            (out[0]["firstSeq"].clone(), out[0]["seq"].clone()),
            (3.into(), 10.into())
        );
        // Not the next seq of the run: a frame of its own.
        let out = parsed(vec![delta("a", 2, "x"), merged(9, 4, "abc")]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1]["firstSeq"], 4);
    }
}
