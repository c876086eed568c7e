//! A lagging route's chat deltas travel merged: consecutive deltas of one
//! message that a route takes from the replay buffer at once go out as one
//! event (`first_seq`..=`seq`, the texts one after the other), for an
//! attachment that asked (`AttachRequest.merge_deltas`, the native host's
//! `mergeDeltas`).
//!
//! What it buys: a route reads from the replay buffer only when its small
//! queue has room ([`super::MERGED_QUEUE`]), so while its reader lags the
//! deltas wait encoded in the buffer and leave as a few events. A
//! `tool_request`, `status` or `operation_finished` then waits behind those
//! few events in SessionService's queue, the HTTP/2 stream and the host,
//! instead of behind a thousand single deltas each decoded, encoded and
//! framed on its own (figures: docs/benchmarks.md, the `load` group). Order
//! and seqs are kept: a merge never crosses another event of the thread, a
//! snapshot or a seq gap, and a client sees every seq, as one event or
//! inside a merged one.

use pb::session_event::Event;
use pedelec_proto::v1 as pb;

use pedelec_common::delta_merge::SERVICE_TEXT_MAX;

/// `events` (consecutive, in seq order) with each run of chat deltas of one
/// operation and message folded into one event.
pub fn merge(events: Vec<pb::SessionEvent>) -> Vec<pb::SessionEvent> {
    let mut out: Vec<pb::SessionEvent> = Vec::with_capacity(events.len().min(16));
    for event in events {
        if let Some(last) = out.last_mut()
            && pedelec_common::delta_merge::joins(last, &event, SERVICE_TEXT_MAX)
        {
            let (Some(Event::ChatDelta(into)), Some(Event::ChatDelta(d))) =
                (last.event.as_mut(), event.event.as_ref())
            else {
                unreachable!("joins checked both are chat deltas");
            };
            into.text.push_str(&d.text);
            last.first_seq = Some(last.first_seq.unwrap_or(last.seq));
            last.seq = event.seq;
            last.at = event.at;
            continue;
        }
        out.push(event);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(seq: u64, text: &str, message: &str) -> pb::SessionEvent {
        pb::SessionEvent {
            session_id: "t".into(),
            seq,
            at: None,
            first_seq: None,
            event: Some(Event::ChatDelta(pb::ChatDelta {
                operation_id: "op".into(),
                text: text.into(),
                message_id: message.into(),
            })),
        }
    }

    fn status(seq: u64) -> pb::SessionEvent {
        pb::SessionEvent {
            event: Some(Event::Status(pb::StatusChanged::default())),
            ..delta(seq, "", "m")
        }
    }

    fn text(e: &pb::SessionEvent) -> &str {
        match &e.event {
            Some(Event::ChatDelta(d)) => &d.text,
            _ => "",
        }
    }

    #[test]
    fn consecutive_deltas_of_one_message_become_one_event_naming_its_first_seq() {
        let out = merge(vec![
            delta(3, "a", "m"),
            delta(4, "b", "m"),
            delta(5, "c", "m"),
            status(6),
            delta(7, "d", "m"),
            delta(8, "e", "n"),
            delta(10, "f", "n"),
        ]);
        let shape: Vec<_> = out.iter().map(|e| (e.first_seq, e.seq, text(e))).collect();
        assert_eq!(
            shape,
            vec![
                (Some(3), 5, "abc"),
                (None, 6, ""),
                (None, 7, "d"),
                (None, 8, "e"),
                (None, 10, "f"),
            ]
        );
    }

    #[test]
    fn a_lone_delta_and_the_text_bound() {
        assert_eq!(merge(vec![delta(1, "x", "m")])[0].first_seq, None);
        let half = "x".repeat(SERVICE_TEXT_MAX / 2);
        let out = merge(vec![
            delta(1, &half, "m"),
            delta(2, &half, "m"),
            delta(3, "y", "m"),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].first_seq, out[0].seq), (Some(1), 2));
        assert_eq!((out[1].first_seq, out[1].seq), (None, 3));
    }
}
