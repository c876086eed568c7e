//! One thread in memory: its record, its replay buffer and the notifier that
//! wakes attached routes. All mutation happens under the thread's mutex, so
//! seq order is the order of state changes.

use std::collections::HashMap;
use std::sync::Arc;

use pb::session_event::Event;
use pedelec_common::{CodedError, json, ms_to_timestamp, now_timestamp};
use pedelec_proto::v1 as pb;
use tokio::sync::Notify;

use crate::error::SessionError;
use crate::history::History;
use crate::record::{
    ErrorRecord, Journal, OpKind, OperationRecord, Outcome, RECENT_OPERATIONS, SEQ_RESERVATION,
    Status, ThreadRecord, ToolRequestRecord, UsageRecord,
};
use crate::replay::{ReplayBuffer, ReplayLimits};

/// Why a route gets a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotView {
    /// The start of a stream whose route misses nothing.
    Current,
    /// Events the route needed are no longer held: it reconciles from this.
    AfterGap,
}

pub struct Thread {
    pub record: ThreadRecord,
    pub replay: ReplayBuffer,
    /// Wakes routes that have taken every event and wait for the next.
    pub wake: Arc<Notify>,
    /// Set by a route (under the thread's mutex) once it waits on `wake`, so
    /// `emit` wakes routes once per wait and not on every event: a watch
    /// channel here locked eight notify shards per event, a quarter of `emit`.
    routes_waiting: bool,
    /// Routes attached right now: route key -> the newest seq it has taken.
    pub routes: HashMap<u64, u64>,
    next_route: u64,
    /// Woken whenever a route takes events, for a producer waiting on a slow route.
    pub progress: Arc<Notify>,
    /// Bumped on every attach, so a pending auto-end knows a route came back.
    pub route_generation: u64,
    /// Signalled to stop the running operation's task (cancel or end).
    pub stop_operation: Arc<Notify>,
    /// Held across a registration with ToolBridge, from reading the token to
    /// storing the bridge's answer (`Sessions::reregister_tools`): two at once
    /// (the first turn's, and the Watch's re-registration of every thread
    /// just after start-up) would both send no token, the bridge would mint
    /// two, and the agent could get the one the bridge no longer holds (every
    /// tool call refused, TOOL_ACCESS_DENIED). The second now sends the first's.
    pub registering: Arc<tokio::sync::Mutex<()>>,
    /// The running operation's place under the caps on running turns
    /// (`crate::limits`): taken when it starts, given back when it finishes.
    pub turn_slot: Option<crate::limits::TurnSlot>,
    /// The assistant message being streamed now, if any, and how many
    /// messages the running operation has had (for their ids).
    open_message: Option<String>,
    messages: u32,
    /// The conversation's durable history (`crate::history`): every emitted
    /// event that belongs in it is written there before it is published.
    pub history: History,
}

impl Thread {
    pub fn new(record: ThreadRecord, limits: ReplayLimits) -> Self {
        Thread {
            replay: ReplayBuffer::new(&record.session_id, limits),
            record,
            wake: Arc::new(Notify::new()),
            routes_waiting: false,
            routes: HashMap::new(),
            next_route: 0,
            progress: Arc::new(Notify::new()),
            route_generation: 0,
            stop_operation: Arc::new(Notify::new()),
            registering: Arc::default(),
            turn_slot: None,
            open_message: None,
            messages: 0,
            history: History::default(),
        }
    }

    pub fn id(&self) -> &str {
        &self.record.session_id
    }

    /// Registers a route that has seen everything up to now; returns its key.
    pub fn add_route(&mut self) -> u64 {
        let key = self.next_route;
        self.next_route += 1;
        self.routes.insert(key, self.record.last_seq);
        self.route_generation += 1;
        key
    }

    /// Records that a route has taken every event up to `seq`.
    pub fn route_took(&mut self, key: u64, seq: u64) {
        self.routes.insert(key, seq);
        self.progress.notify_waiters();
        self.give_back_when_idle();
    }

    /// Gives the replay buffer back down to a small tail once no operation
    /// runs and every attached route has taken every event
    /// (`replay::IDLE_TAIL_EVENTS`); a later re-attach behind the tail gets
    /// the replay-gap snapshot. Cheap when there is nothing to give back.
    pub fn give_back_when_idle(&mut self) {
        let last = self.record.last_seq;
        if self.record.active_operation.is_none() && self.routes.values().all(|&t| t >= last) {
            self.replay.keep_idle_tail();
        }
    }

    pub fn remove_route(&mut self, key: u64) {
        self.routes.remove(&key);
        self.progress.notify_waiters();
    }

    /// Whether the slowest attached route has fallen so far behind that more
    /// events could push what it has not taken out of the replay buffer.
    pub fn a_route_lags(&self) -> bool {
        self.routes
            .values()
            .min()
            .is_some_and(|taken| self.replay.half_full_after(*taken))
    }

    /// Appends an event with the next seq and wakes the routes. The caller
    /// saves the record after a state change.
    pub fn emit(&mut self, event: Event) {
        self.record.last_seq += 1;
        let seq = self.record.last_seq;
        let at = now_timestamp();
        // Written before any route can see the event.
        let usage = self.record.usage;
        self.history
            .record(seq, &at, &event, || usage.map(usage_to_pb));
        self.replay.push(seq, Some(at), event);
        if crate::replay::over_budget() {
            let taken = self.routes.values().min().copied().unwrap_or(seq);
            self.replay.drop_taken(taken);
        }
        if std::mem::take(&mut self.routes_waiting) {
            self.wake.notify_waiters();
        }
    }

    /// A route that has taken every event will wait on `wake` (already
    /// enabled, so the next `emit` cannot be missed).
    pub fn route_waits(&mut self) {
        self.routes_waiting = true;
    }

    /// Emits an event that changes no state (chat text), without a journal
    /// write per event: seqs are reserved in blocks, and only crossing a block
    /// saves the record, so a restart never reuses a seq a client has seen.
    pub fn emit_streamed(&mut self, event: Event, journal: &Journal) {
        self.emit(event);
        self.cover_seqs(journal);
    }

    /// Emits a piece of the assistant's text. Deltas up to the message's
    /// completed text share one message id; the next delta starts a new one.
    pub fn emit_chat_delta(&mut self, operation_id: &str, text: String, journal: &Journal) {
        let message_id = self.message_id(operation_id, false);
        self.emit_streamed(
            Event::ChatDelta(pb::ChatDelta {
                operation_id: operation_id.to_string(),
                text,
                message_id,
            }),
            journal,
        );
    }

    /// Emits a completed assistant message: the one its deltas streamed, or a
    /// new one when there were none.
    pub fn emit_chat(&mut self, operation_id: &str, text: String, journal: &Journal) {
        let message_id = self.message_id(operation_id, true);
        self.emit_streamed(
            Event::Chat(pb::Chat {
                operation_id: operation_id.to_string(),
                text,
                message_id,
            }),
            journal,
        );
    }

    fn message_id(&mut self, operation_id: &str, completes: bool) -> String {
        let id = match self.open_message.take() {
            Some(id) => id,
            None => {
                self.messages += 1;
                format!(
                    "msg_{}_{}",
                    operation_id.trim_start_matches("op_"),
                    self.messages
                )
            }
        };
        if !completes {
            self.open_message = Some(id.clone());
        }
        id
    }

    /// Emits a thread error (a provider warning, or an operation's failure),
    /// naming the operation it belongs to.
    pub fn emit_error(&mut self, mut error: pb::PedelecError, operation_id: &str) {
        error.operation_id = operation_id.to_string();
        self.emit(Event::Error(error));
    }

    /// Clears the pending tool request `id` as resolved once the page's answer
    /// is known to have reached the agent; the thread runs on. False when it
    /// was not pending.
    pub fn clear_answered(&mut self, id: &str) -> bool {
        if self
            .record
            .pending_tool_request
            .as_ref()
            .is_none_or(|p| p.tool_request_id != id)
        {
            return false;
        }
        self.record.pending_tool_request = None;
        self.emit(Event::ToolRequestCleared(pb::ToolRequestCleared {
            tool_request_id: id.to_string(),
            reason: pb::ToolSettleReason::Resolved as i32,
        }));
        if self.record.status == Status::WaitingToolResult {
            self.set_status(Status::Running);
        }
        true
    }

    /// The agent printed something after the page answered its tool call: the
    /// answer reached it, so the request is settled before that output shows.
    pub fn settle_answered_before_output(&mut self) {
        if let Some(id) = self
            .record
            .pending_tool_request
            .as_ref()
            .filter(|p| p.answered)
            .map(|p| p.tool_request_id.clone())
        {
            self.clear_answered(&id);
        }
    }

    /// Makes sure every seq handed out is covered by the journal, writing it
    /// only when the reserved block is used up. For changes a restart would
    /// undo anyway (a pending tool request dies with its operation), this is
    /// all the journal needs.
    pub fn cover_seqs(&mut self, journal: &Journal) {
        if self.record.last_seq > self.record.seq_reserved {
            self.record.seq_reserved = self.record.last_seq + SEQ_RESERVATION;
            let _ = self.write(journal);
        }
    }

    pub fn set_status(&mut self, status: Status) {
        if self.record.status != status {
            self.record.ended_at_ms = (status == Status::Ended).then(pedelec_common::now_ms);
            self.record.status = status;
            self.emit(Event::Status(pb::StatusChanged {
                status: status_to_pb(status) as i32,
            }));
        }
    }

    /// Saves the record; every seq handed out so far is then covered by
    /// `last_seq`, so no reservation is outstanding.
    /// A request whose change must be durable acts on the error (a failed
    /// write is never reported as success); background changes only
    /// log it, and the next successful write carries them.
    pub fn save(&mut self, journal: &Journal) -> Result<(), SessionError> {
        self.record.seq_reserved = self.record.last_seq;
        self.write(journal)
    }

    fn write(&self, journal: &Journal) -> Result<(), SessionError> {
        journal.save(&self.record).map_err(|e| {
            tracing::error!(session = self.id(), error = %e, "journal write failed");
            SessionError::Journal(e.to_string())
        })
    }

    /// Starts an operation: the caller has checked that none is running.
    pub fn start_operation(&mut self, operation_id: String, kind: OpKind) {
        self.record.active_operation = Some(OperationRecord {
            operation_id: operation_id.clone(),
            kind,
            outcome: None,
            error: None,
        });
        self.stop_operation = Arc::new(Notify::new());
        self.open_message = None;
        self.messages = 0;
        self.emit(Event::OperationStarted(pb::OperationStarted {
            operation_id,
            kind: kind_to_pb(kind) as i32,
        }));
        self.set_status(Status::Running);
    }

    /// Finishes `operation_id` if it is still the active one (exactly one
    /// operation_finished per operation, whoever gets here first), then moves the
    /// thread to `next` unless it has ended. Returns false when it was already finished.
    pub fn finish_operation(
        &mut self,
        operation_id: &str,
        outcome: Outcome,
        error: Option<(CodedError, pb::ErrorSource)>,
        next: Status,
    ) -> bool {
        let Some(active) = self.record.active_operation.as_ref() else {
            return false;
        };
        if active.operation_id != operation_id {
            return false;
        }
        let mut op = self.record.active_operation.take().expect("checked above");
        self.turn_slot = None;
        op.outcome = Some(outcome);
        op.error = error
            .as_ref()
            .map(|(e, source)| ErrorRecord::new(e, *source));
        // A failure is also an error event (the page's onError); a cancelled
        // operation is not: the page asked for it, or ended the thread, and
        // operation_finished carries the reason.
        if let Some((e, source)) = error.as_ref().filter(|_| outcome == Outcome::Failed) {
            self.emit_error(e.to_proto(*source as i32), operation_id);
        }
        // A pending tool request dies with its operation (the bridge is told
        // separately), unless the page's answer was already on its way.
        if let Some(pending) = self.record.pending_tool_request.take() {
            let reason = if pending.answered {
                pb::ToolSettleReason::Resolved
            } else {
                pb::ToolSettleReason::Dropped
            };
            self.emit(Event::ToolRequestCleared(pb::ToolRequestCleared {
                tool_request_id: pending.tool_request_id,
                reason: reason as i32,
            }));
        }
        self.emit(Event::OperationFinished(pb::OperationFinished {
            operation_id: op.operation_id.clone(),
            kind: kind_to_pb(op.kind) as i32,
            outcome: outcome_to_pb(outcome) as i32,
            error: error.as_ref().map(|(e, source)| e.to_proto(*source as i32)),
        }));
        let recent = &mut self.record.recent_operations;
        recent.push(op);
        if recent.len() > RECENT_OPERATIONS {
            recent.remove(0);
        }
        if self.record.status != Status::Ended {
            self.set_status(next);
        }
        self.stop_operation.notify_one();
        self.give_back_when_idle();
        true
    }

    pub fn snapshot(&self) -> pb::Snapshot {
        let r = &self.record;
        pb::Snapshot {
            session_id: r.session_id.clone(),
            status: status_to_pb(r.status) as i32,
            active_operation: r.active_operation.as_ref().map(operation_to_pb),
            last_operation: r.recent_operations.last().map(operation_to_pb),
            recent_operations: r.recent_operations.iter().map(operation_to_pb).collect(),
            workspace_explicit: r.workspace.is_explicit(),
            pending_tool_request: r.pending_tool_request.as_ref().map(tool_request_to_pb),
            usage: r.usage.map(usage_to_pb),
            provider: r.provider.clone(),
            effort_level: r.effort_level.clone(),
            model: r.model.clone(),
            auto_end_on_disconnect: r.auto_end_on_disconnect,
            created_at: Some(ms_to_timestamp(r.created_at_ms)),
            last_seq: r.last_seq,
            replay_gap: false,
            workspace_path: r.workspace_path.display().to_string(),
        }
    }

    /// The thread's snapshot as the event a route receives.
    pub fn snapshot_event(&self, view: SnapshotView) -> pb::SessionEvent {
        let mut snapshot = self.snapshot();
        snapshot.replay_gap = view == SnapshotView::AfterGap;
        pb::SessionEvent {
            session_id: self.record.session_id.clone(),
            seq: self.record.last_seq,
            at: Some(now_timestamp()),
            first_seq: None,
            event: Some(Event::Snapshot(snapshot)),
        }
    }

    pub fn summary(&self) -> pb::SessionSummary {
        let r = &self.record;
        pb::SessionSummary {
            session_id: r.session_id.clone(),
            origin: r.origin.clone(),
            status: status_to_pb(r.status) as i32,
            provider: r.provider.clone(),
            effort_level: r.effort_level.clone(),
            created_at: Some(ms_to_timestamp(r.created_at_ms)),
            workspace_path: r.workspace_path.display().to_string(),
            last_seq: r.last_seq,
            attached_routes: self.routes.len() as u32,
        }
    }
}

pub fn status_to_pb(status: Status) -> pb::SessionStatus {
    match status {
        Status::Idle => pb::SessionStatus::Idle,
        Status::Running => pb::SessionStatus::Running,
        Status::WaitingToolResult => pb::SessionStatus::WaitingToolResult,
        Status::Ended => pb::SessionStatus::Ended,
        Status::Error => pb::SessionStatus::Error,
    }
}

pub fn kind_to_pb(kind: OpKind) -> pb::OperationKind {
    match kind {
        OpKind::SendText => pb::OperationKind::SendText,
        OpKind::Prepare => pb::OperationKind::Prepare,
    }
}

pub fn outcome_to_pb(outcome: Outcome) -> pb::OperationOutcome {
    match outcome {
        Outcome::Completed => pb::OperationOutcome::Completed,
        Outcome::Failed => pb::OperationOutcome::Failed,
        Outcome::Cancelled => pb::OperationOutcome::Cancelled,
    }
}

fn operation_to_pb(op: &OperationRecord) -> pb::Operation {
    pb::Operation {
        operation_id: op.operation_id.clone(),
        kind: kind_to_pb(op.kind) as i32,
        outcome: op
            .outcome
            .map(|o| outcome_to_pb(o) as i32)
            .unwrap_or_default(),
        error: op
            .error
            .as_ref()
            .map(|e| CodedError::from(e).to_proto(e.source as i32)),
    }
}

pub fn tool_request_to_pb(t: &ToolRequestRecord) -> pb::ToolRequest {
    pb::ToolRequest {
        tool_request_id: t.tool_request_id.clone(),
        tool: t.tool.clone(),
        args: Some(json::to_value(&t.args)),
        operation_id: t.operation_id.clone(),
        timeout_ms: t.timeout_ms,
        deadline_at: Some(ms_to_timestamp(t.deadline_at_ms)),
    }
}

pub fn usage_to_pb(u: UsageRecord) -> pb::Usage {
    pb::Usage {
        total_tokens: u.total,
        input_tokens: u.input,
        output_tokens: u.output,
        cumulative: false,
    }
}
