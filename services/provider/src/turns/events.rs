//! A turn's side of its event stream: the [`Sink`] every path sends through
//! (aware of CancelTurn and of a reader that went away) and the events every
//! path ends with, an error carrying a Pedelec code and `exited`, built in
//! one place.

use std::process::ExitStatus;

use pb::provider_event::Event as Out;
use pedelec_common::page_safe::without_paths;
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

/// A failure (or, as a warning, a notice) from the provider's side. It
/// reaches the page, which learns no local path (docs/security.md, "What a
/// page is not shown"): every absolute path in the message and in the
/// details' strings becomes `<path>`, whoever wrote it (the CLI's own error
/// text, say). The details' `stderrTail` stays whole: it is for local callers
/// and the native host leaves it out of page messages (`pedelec_common::wire`).
pub(super) fn provider_error(
    code: Code,
    message: String,
    details: Option<&Json>,
) -> pb::PedelecError {
    let safe = without_paths(&message, &[]);
    if safe != message {
        tracing::info!(
            code = code.as_str(),
            "a provider error named local paths: {message}"
        );
    }
    let details = details.map(|d| {
        let mut d = d.clone();
        scrub_details(&mut d);
        d
    });
    pb::PedelecError {
        code: code.as_str().to_string(),
        message: safe,
        details: details.as_ref().map(json::to_value),
        source: pb::ErrorSource::Provider as i32,
        ..Default::default()
    }
}

pub(super) use crate::error::SEE_THE_LOG;

/// The details key that holds the end of the agent's stderr (local callers only).
pub(super) const STDERR_TAIL_KEY: &str = "stderrTail";

fn scrub_details(value: &mut Json) {
    match value {
        Json::String(s) => *s = without_paths(s, &[]),
        Json::Array(items) => items.iter_mut().for_each(scrub_details),
        Json::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key != STDERR_TAIL_KEY {
                    scrub_details(v);
                }
            }
        }
        _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_lose_paths_but_the_stderr_tail_stays_for_local_callers() {
        let details = serde_json::json!({
            "error": {"message": "no such file /home/alice/x", "codes": ["/usr/b", 3]},
            STDERR_TAIL_KEY: "/home/alice/.npm/x\n",
        });
        let e = provider_error(
            Code::PROVIDER_FAILED,
            "in /home/alice".into(),
            Some(&details),
        );
        assert_eq!(e.message, "in <path>");
        let back = json::from_value(e.details.as_ref().unwrap());
        assert_eq!(
            back,
            serde_json::json!({
                "error": {"message": "no such file <path>", "codes": ["<path>", 3]},
                STDERR_TAIL_KEY: "/home/alice/.npm/x\n",
            })
        );
    }
}
