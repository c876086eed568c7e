//! A page's Attach stream, read without tonic's `Streaming`.
//!
//! What it buys: memory back after a burst. `Streaming` copies each HTTP/2
//! chunk into one buffer per stream, which grows to the largest burst the
//! stream saw (32–64 KiB when SessionService sent 16 KiB chunks) and
//! stays that size for the stream's life. An attached page lives as long as
//! its tab, so fifty tabs that each once streamed a burst kept about 2 MiB in
//! the host (docs/benchmarks.md, "Memory"). Here a message is decoded from
//! the chunk it arrived in, only a message split across two chunks is copied,
//! and a stream between bursts holds no buffer at all.
//!
//! The wire (gRPC over HTTP/2): a POST to the method's path; each message is a
//! compression flag byte (always 0: Pedelec does not compress), a 4-byte
//! big-endian length and the protobuf; the call's status comes in the
//! trailers, or in the headers when the call failed before any message.

use std::future::poll_fn;
use std::pin::Pin;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hyper::body::Body as _;
use hyper::header::{CONTENT_TYPE, TE};
use hyper::{Method, Request, StatusCode, Version};
use pedelec_common::MAX_GRPC_MESSAGE;
use pedelec_proto::v1 as pb;
use prost::Message;
use tonic::client::GrpcService;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// The compression flag and the length before each message.
const PREFIX: usize = 5;

/// One Attach call's events.
pub struct EventStream {
    body: tonic::body::Body,
    messages: Messages,
    /// Set once the status arrived (or the stream broke): later calls end.
    finished: bool,
}

impl EventStream {
    /// Starts the Attach call on SessionService's channel.
    pub async fn open(mut channel: Channel, request: pb::AttachRequest) -> Result<Self, Status> {
        let mut frame = BytesMut::with_capacity(PREFIX + request.encoded_len());
        frame.put_u8(0);
        frame.put_u32(request.encoded_len() as u32);
        request
            .encode(&mut frame)
            .map_err(|e| Status::internal(format!("encoding the Attach request: {e}")))?;
        let path = format!("/{}/Attach", pb::session_service_server::SERVICE_NAME);
        let http_request = Request::builder()
            .method(Method::POST)
            .version(Version::HTTP_2)
            .uri(path)
            .header(CONTENT_TYPE, "application/grpc")
            .header(TE, "trailers")
            .body(tonic::body::Body::new(http_body_util::Full::new(
                frame.freeze(),
            )))
            .map_err(|e| Status::internal(format!("building the Attach request: {e}")))?;
        poll_fn(|cx| GrpcService::poll_ready(&mut channel, cx))
            .await
            .map_err(|e| Status::from_error(e.into()))?;
        let response = GrpcService::call(&mut channel, http_request)
            .await
            .map_err(|e| Status::from_error(e.into()))?;
        // A call refused at once answers with its status in the headers.
        let failed_at_once = Status::from_header_map(response.headers());
        if let Some(status) = failed_at_once.as_ref().filter(|s| s.code() != Code::Ok) {
            return Err(status.clone());
        }
        if response.status() != StatusCode::OK {
            return Err(Status::unknown(format!(
                "SessionService answered Attach with HTTP status {}",
                response.status()
            )));
        }
        Ok(EventStream {
            body: response.into_body(),
            messages: Messages::default(),
            finished: failed_at_once.is_some(),
        })
    }

    /// The next event; None when SessionService ended the stream.
    pub async fn message(&mut self) -> Result<Option<pb::SessionEvent>, Status> {
        loop {
            match self.messages.next() {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) => {}
                Err(status) => return self.fail(status),
            }
            if self.finished {
                return Ok(None);
            }
            let frame = poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            let frame = match frame {
                Some(Ok(frame)) => frame,
                Some(Err(status)) => return self.fail(status),
                None => return self.fail(missing_status()),
            };
            match frame.into_data() {
                Ok(chunk) => self.messages.push(chunk),
                Err(frame) => {
                    let status = frame
                        .trailers_ref()
                        .and_then(Status::from_header_map)
                        .unwrap_or_else(missing_status);
                    if !self.messages.is_empty() {
                        return self
                            .fail(Status::internal("the Attach stream ended inside a message"));
                    }
                    if status.code() != Code::Ok {
                        return self.fail(status);
                    }
                    self.finished = true;
                    return Ok(None);
                }
            }
        }
    }

    fn fail(&mut self, status: Status) -> Result<Option<pb::SessionEvent>, Status> {
        self.finished = true;
        self.messages = Messages::default();
        Err(status)
    }
}

/// The gRPC messages in a stream's chunks, decoded where they lie.
#[derive(Default)]
struct Messages {
    /// Received bytes not decoded yet: the rest of the last chunk, or a
    /// message's start with what followed it. Empty (holding no allocation)
    /// whenever a chunk ended on a message's end.
    pending: Bytes,
}

impl Messages {
    fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    fn push(&mut self, chunk: Bytes) {
        if self.pending.is_empty() {
            self.pending = chunk;
        } else {
            let mut joined = BytesMut::with_capacity(self.pending.len() + chunk.len());
            joined.put_slice(&self.pending);
            joined.put_slice(&chunk);
            self.pending = joined.freeze();
        }
    }

    /// The first whole message of `pending`, if it holds one.
    fn next(&mut self) -> Result<Option<pb::SessionEvent>, Status> {
        let Some(prefix) = self.pending.get(..PREFIX) else {
            return Ok(None);
        };
        if prefix[0] != 0 {
            return Err(Status::internal(
                "SessionService sent a compressed message; none was asked for",
            ));
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > MAX_GRPC_MESSAGE {
            return Err(Status::out_of_range(format!(
                "an Attach event of {len} bytes is over the {MAX_GRPC_MESSAGE}-byte limit"
            )));
        }
        if self.pending.len() < PREFIX + len {
            return Ok(None);
        }
        let event = pb::SessionEvent::decode(&self.pending[PREFIX..PREFIX + len])
            .map_err(|e| Status::internal(format!("decoding an Attach event: {e}")))?;
        self.pending.advance(PREFIX + len);
        if self.pending.is_empty() {
            // An empty slice still keeps its chunk alive.
            self.pending = Bytes::new();
        }
        Ok(Some(event))
    }
}

fn missing_status() -> Status {
    Status::unknown("the Attach stream ended without a status")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn delta(seq: u64, text: &str) -> pb::SessionEvent {
        pb::SessionEvent {
            seq,
            event: Some(pb::session_event::Event::ChatDelta(pb::ChatDelta {
                text: text.into(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn wire(events: &[pb::SessionEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in events {
            out.push(0);
            out.extend_from_slice(&(e.encoded_len() as u32).to_be_bytes());
            e.encode(&mut out).unwrap();
        }
        out
    }

    proptest! {
        /// However the stream is cut into chunks, the same events come out in
        /// order, and once the last is read nothing is held.
        #[test]
        fn any_chunking_gives_the_same_events(
            texts in prop::collection::vec(".{0,40}", 1..30),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let events: Vec<_> = texts.iter().enumerate().map(|(i, t)| delta(i as u64 + 1, t)).collect();
            let bytes = wire(&events);
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            cuts.push(0);
            cuts.push(bytes.len());
            cuts.sort_unstable();
            let mut messages = Messages::default();
            let mut got = Vec::new();
            for pair in cuts.windows(2) {
                messages.push(Bytes::copy_from_slice(&bytes[pair[0]..pair[1]]));
                while let Some(e) = messages.next().unwrap() {
                    got.push(e);
                }
            }
            prop_assert_eq!(got, events);
            prop_assert!(messages.is_empty());
        }
    }

    #[test]
    fn a_compressed_or_oversized_message_is_an_error() {
        let mut messages = Messages::default();
        messages.push(Bytes::from_static(&[1, 0, 0, 0, 0]));
        assert_eq!(messages.next().unwrap_err().code(), Code::Internal);
        let mut messages = Messages::default();
        let len = (MAX_GRPC_MESSAGE as u32 + 1).to_be_bytes();
        messages.push(Bytes::copy_from_slice(&[0, len[0], len[1], len[2], len[3]]));
        assert_eq!(messages.next().unwrap_err().code(), Code::OutOfRange);
    }
}
