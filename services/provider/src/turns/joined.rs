//! A turn's events as the gRPC stream sends them: while SessionService lags
//! the agent (more than [`LAGGING`] events wait in the turn's channel), the
//! chat deltas waiting in a row leave as one `chat_delta`.
//!
//! What it buys: each delta would otherwise be encoded, framed, decoded,
//! numbered, kept for replay and routed on its own, by two services that
//! under load share the CPU with the agents and the tool calls (figures:
//! docs/benchmarks.md, the `load` group). Nothing waits to be joined: only
//! deltas already queued join, so a reader that keeps up sees each delta as
//! the agent printed it, at once. The text is the same, in the same order;
//! only `chat_delta`s in a row join, so a `chat`, a usage report or an
//! error still separates them. Delta boundaries carry no meaning for a page
//! (docs/sdk-extension.md), so a page sees nothing but fewer, longer deltas.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pb::provider_event::Event as Out;
use pedelec_common::delta_merge::SERVICE_TEXT_MAX;
use pedelec_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::Stream;

/// Events waiting in the channel above which SessionService counts as
/// lagging: a short reply printed at once still arrives delta by delta.
pub const LAGGING: usize = 16;

/// The turn's channel, read with waiting deltas joined.
pub struct Joined {
    rx: mpsc::Receiver<pb::ProviderEvent>,
    /// An event taken while joining that did not join; it leaves next.
    held: Option<pb::ProviderEvent>,
}

impl Joined {
    pub fn new(rx: mpsc::Receiver<pb::ProviderEvent>) -> Self {
        Joined { rx, held: None }
    }
}

impl Stream for Joined {
    type Item = pb::ProviderEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let mut first = match this.held.take() {
            Some(event) => event,
            None => match ready!(this.rx.poll_recv(cx)) {
                Some(event) => event,
                None => return Poll::Ready(None),
            },
        };
        if let Some(Out::ChatDelta(text)) = first.event.as_mut()
            && this.rx.len() > LAGGING
        {
            while text.len() < SERVICE_TEXT_MAX {
                let Ok(next) = this.rx.try_recv() else { break };
                match next.event {
                    Some(Out::ChatDelta(more)) if text.len() + more.len() <= SERVICE_TEXT_MAX => {
                        text.push_str(&more)
                    }
                    _ => {
                        this.held = Some(next);
                        break;
                    }
                }
            }
        }
        Poll::Ready(Some(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    fn delta(text: &str) -> pb::ProviderEvent {
        pb::ProviderEvent {
            event: Some(Out::ChatDelta(text.into())),
        }
    }

    fn chat(text: &str) -> pb::ProviderEvent {
        pb::ProviderEvent {
            event: Some(Out::Chat(text.into())),
        }
    }

    async fn read_all(events: Vec<pb::ProviderEvent>) -> Vec<pb::ProviderEvent> {
        let (tx, rx) = mpsc::channel(events.len().max(1));
        for e in events {
            tx.send(e).await.unwrap();
        }
        drop(tx);
        Joined::new(rx).collect().await
    }

    #[tokio::test]
    async fn deltas_waiting_for_a_lagging_reader_join_and_nothing_else_does() {
        let mut events: Vec<_> = (0..=LAGGING).map(|_| delta("x")).collect();
        events.extend([chat("whole"), delta("p"), delta("q"), delta("r")]);
        let got = read_all(events).await;
        assert_eq!(
            got,
            vec![
                delta(&"x".repeat(LAGGING + 1)),
                chat("whole"),
                delta("p"),
                delta("q"),
                delta("r"),
            ]
        );
    }

    #[tokio::test]
    async fn a_joined_delta_stops_at_the_bound() {
        let half = "h".repeat(SERVICE_TEXT_MAX / 2);
        let got = read_all(vec![delta(&half); LAGGING + 4]).await;
        let mut want = vec![delta(&half.repeat(2)), delta(&half.repeat(2))];
        want.extend(vec![delta(&half); LAGGING]);
        assert_eq!(got, want);
        // One byte more and no two fit: each leaves alone, none is cut.
        let over = "o".repeat(SERVICE_TEXT_MAX / 2 + 1);
        let got = read_all(vec![delta(&over); LAGGING + 4]).await;
        assert_eq!(got, vec![delta(&over); LAGGING + 4]);
    }

    #[tokio::test]
    async fn a_delta_alone_leaves_at_once() {
        let (tx, rx) = mpsc::channel(4);
        let mut joined = Joined::new(rx);
        tx.send(delta("a")).await.unwrap();
        assert_eq!(joined.next().await, Some(delta("a")));
        tx.send(delta("b")).await.unwrap();
        assert_eq!(joined.next().await, Some(delta("b")));
        drop(tx);
        assert_eq!(joined.next().await, None);
    }
}
