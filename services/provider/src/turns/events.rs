//! A turn's side of its event stream: the [`Sink`] every path sends through
//! (aware of CancelTurn and of a reader that went away) and the events every
//! path ends with, an error carrying a Pedelec code and `exited`, built in
//! one place.

use std::process::ExitStatus;

use pb::provider_event::Event as Out;
use pedelec_common::{Code, json};
use pedelec_proto::v1 as pb;
use serde_json::Value as Json;
use tokio::sync::{mpsc, watch};

/// Why event delivery stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// CancelTurn, or replaced by a newer turn of the same thread.
    Cancelled,
    /// The stream's reader went away.
    Gone,
}

/// The sending half of a turn's stream, aware of cancellation.
pub(super) struct Sink {
    tx: mpsc::Sender<pb::ProviderEvent>,
    stop: watch::Receiver<bool>,
}

impl Sink {
    /// `stop` turns true when the turn must end.
    pub(super) fn new(tx: mpsc::Sender<pb::ProviderEvent>, stop: watch::Receiver<bool>) -> Self {
        Sink { tx, stop }
    }

    pub(super) async fn send(&mut self, event: Out) -> Result<(), Stop> {
        let event = pb::ProviderEvent { event: Some(event) };
        tokio::select! {
            biased;
            _ = self.stop.wait_for(|s| *s) => Err(Stop::Cancelled),
            sent = self.tx.send(event) => sent.map_err(|_| Stop::Gone),
        }
    }

    /// Resolves when the turn must stop; never while it may go on.
    pub(super) async fn stopped(&mut self) -> Stop {
        tokio::select! {
            _ = self.stop.wait_for(|s| *s) => Stop::Cancelled,
            _ = self.tx.closed() => Stop::Gone,
        }
    }

    /// Last words after a cancel: delivered if anyone still listens.
    pub(super) async fn send_final(&self, event: Out) {
        let _ = self.tx.send(pb::ProviderEvent { event: Some(event) }).await;
    }
}

/// A turn that never started still ends in `exited`, so the consumer's flow
/// is the same for every turn.
pub(super) async fn refuse(sink: &mut Sink, code: Code, message: String) {
    if sink.send(error_event(code, message, None)).await.is_ok() {
        let _ = sink.send(Out::Exited(pb::TurnExited::default())).await;
    }
}

/// A failure (or, as a warning, a notice) from the provider's side.
pub(super) fn provider_error(
    code: Code,
    message: String,
    details: Option<&Json>,
) -> pb::PedelecError {
    pb::PedelecError {
        code: code.as_str().to_string(),
        message,
        details: details.map(json::to_value),
        source: pb::ErrorSource::Provider as i32,
        ..Default::default()
    }
}

pub(super) fn error_event(code: Code, message: String, details: Option<Json>) -> Out {
    Out::Error(provider_error(code, message, details.as_ref()))
}

/// `exited` for a turn a long-lived server ran: its process lives on, so
/// there is no exit status; `code` is Some(0) for a finished turn, None for a
/// stopped one.
pub(super) fn turn_ended(code: Option<i32>) -> Out {
    Out::Exited(pb::TurnExited { code, signal: None })
}

pub(super) fn exited(status: ExitStatus) -> Out {
    Out::Exited(pb::TurnExited {
        code: status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&status),
    })
}
