//! Attach: a route's event stream (snapshot, replay, live events), and what
//! its end starts (auto-end, eviction).

use pedelec_proto::v1 as pb;
use tokio::sync::mpsc;

use super::{EventStream, Sessions, SharedThread, lock};
use crate::error::SessionError;
use crate::record::Status;
use crate::thread::SnapshotView;

mod merge;

/// How many events a route takes from the replay buffer at a time.
const ROUTE_BATCH: usize = 256;

/// A route's queue of events on their way to its stream.
const ROUTE_QUEUE: usize = 1024;

/// The queue of a route whose deltas may travel merged (`merge`): short, so
/// what its reader has not taken waits in the replay buffer and leaves
/// merged, and a control event queues behind a few events at most.
const MERGED_QUEUE: usize = 4;

/// How many events a merging route takes at a time (they leave as few).
const MERGED_BATCH: usize = 1024;

impl Sessions {
    pub fn attach(&self, req: pb::AttachRequest) -> Result<EventStream, SessionError> {
        let merging = req.merge_deltas;
        let (tx, rx) = mpsc::channel(if merging { MERGED_QUEUE } else { ROUTE_QUEUE });
        // The route is taken on the copy in memory: a route keeps a thread
        // from eviction only if it is on the copy eviction looks at.
        let (thread, (key, initial, mut cursor, wake)) =
            self.live_thread(&req.session_id, &req.origin, |t| {
                let key = t.add_route();
                if !t.record.ever_attached {
                    t.record.ever_attached = true;
                    // Only auto-end reads it after a restart (`recover`): for other
                    // threads the flag rides along with the next write, and the
                    // first attach costs no journal write (it was a third of `attach`).
                    if t.record.auto_end_on_disconnect {
                        // Logged when it fails.
                        let _ = t.save(&self.inner.journal);
                    }
                }
                let last = t.record.last_seq;
                let initial = match req.after_seq {
                    None => vec![t.snapshot_event(SnapshotView::Current)],
                    Some(after) => match t.replay.after(after, last, usize::MAX) {
                        Some(events) => std::iter::once(t.snapshot_event(SnapshotView::Current))
                            .chain(events)
                            .collect(),
                        None => vec![t.snapshot_event(SnapshotView::AfterGap)],
                    },
                };
                (key, initial, last, t.wake.clone())
            })?;
        tracing::debug!(session = %req.session_id, route = %req.route_id, "route attached");
        // The first message waits in the channel before the stream is handed
        // to tonic, so the response's headers and the snapshot go out in one
        // write (one wake-up of the client, not two). A fresh channel has room.
        let mut initial = initial.into_iter();
        if let Some(first) = initial.next() {
            let _ = tx.try_send(Box::new(first));
        }
        let initial: Vec<_> = if merging {
            merge::merge(initial.collect())
        } else {
            initial.collect()
        };
        let batch_max = if merging { MERGED_BATCH } else { ROUTE_BATCH };
        let route = RouteGuard {
            sessions: self.clone(),
            thread: thread.clone(),
            key,
        };
        tokio::spawn(async move {
            let _route = route;
            for event in initial {
                if tx.send(Box::new(event)).await.is_err() {
                    return;
                }
            }
            // Small batches: a route far behind holds a few hundred cloned
            // events at a time, not everything it has yet to send.
            loop {
                let next_event = wake.notified();
                tokio::pin!(next_event);
                // A merging route takes events only once its queue has room:
                // until then they wait in the buffer, and leave merged.
                let room = if merging {
                    tokio::select! {
                        _ = tx.closed() => return,
                        room = tx.reserve() => match room {
                            Ok(permit) => Some(permit),
                            Err(_) => return,
                        },
                    }
                } else {
                    None
                };
                let (batch, more) = {
                    let mut t = lock(&thread);
                    let last = t.record.last_seq;
                    let batch = match t.replay.after(cursor, last, batch_max) {
                        Some(events) => {
                            cursor = events.last().map_or(last, |e| e.seq);
                            events
                        }
                        None => {
                            cursor = last;
                            vec![t.snapshot_event(SnapshotView::AfterGap)]
                        }
                    };
                    let more = cursor < last;
                    if !more {
                        // Enabled under the lock `emit` holds: the next event wakes it.
                        next_event.as_mut().enable();
                        t.route_waits();
                    }
                    t.route_took(key, cursor);
                    (batch, more)
                };
                let mut batch = if merging { merge::merge(batch) } else { batch }.into_iter();
                if let Some(permit) = room
                    && let Some(event) = batch.next()
                {
                    permit.send(Box::new(event));
                }
                for event in batch {
                    if tx.send(Box::new(event)).await.is_err() {
                        return;
                    }
                }
                if !more {
                    tokio::select! {
                        _ = tx.closed() => return,
                        _ = &mut next_event => {}
                    }
                }
            }
        });
        Ok(rx)
    }

    fn route_gone(&self, thread: &SharedThread, key: u64) {
        let (auto_end, evict) = {
            let mut t = lock(thread);
            t.remove_route(key);
            let ended = t.record.status == Status::Ended;
            let last = t.routes.is_empty();
            (
                last && t.record.auto_end_on_disconnect && !ended,
                last && ended,
            )
        };
        if auto_end {
            self.schedule_auto_end(thread);
        }
        if evict {
            self.schedule_eviction(thread);
        }
    }
}

/// Counts a route while its stream task lives; dropping it may start auto-end.
struct RouteGuard {
    sessions: Sessions,
    thread: SharedThread,
    key: u64,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.sessions.route_gone(&self.thread, self.key);
    }
}
