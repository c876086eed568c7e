//! Property tests over the frame reader, the chunking writer and the request
//! parser: arbitrary input never panics, and valid frames round-trip however
//! the reads are split. `PROPTEST_CASES` raises the case count for long runs.

#![forbid(unsafe_code)]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use pedelec_native_host::frame::{FrameReader, Inbound, encode_with_limit};
use pedelec_native_host::protocol::parse;
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};

/// Yields its bytes in the given read sizes (cycling), as a pipe might.
struct Split {
    data: Vec<u8>,
    pos: usize,
    steps: Vec<usize>,
    turn: usize,
}

impl AsyncRead for Split {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let step = self.steps[self.turn % self.steps.len()].max(1);
        self.turn += 1;
        let end = (self.pos + step)
            .min(self.data.len())
            .min(self.pos + buf.remaining());
        let pos = self.pos;
        let chunk = self.data[pos..end].to_vec();
        buf.put_slice(&chunk);
        self.pos = end;
        Poll::Ready(Ok(()))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Reads every frame; also feeds each body to the parser (which must not panic).
fn read_all(data: Vec<u8>, steps: Vec<usize>) -> (Vec<Inbound>, bool) {
    runtime().block_on(async move {
        let mut reader = FrameReader::new(Split {
            data,
            pos: 0,
            steps,
            turn: 0,
        });
        let mut got = Vec::new();
        loop {
            match reader.next().await {
                Ok(Some(inbound)) => {
                    if let Inbound::Frame(body) = &inbound {
                        let _ = parse(body);
                    }
                    got.push(inbound);
                }
                Ok(None) => return (got, true),
                Err(_) => return (got, false),
            }
        }
    })
}

fn framed(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        out.extend((b.len() as u32).to_le_bytes());
        out.extend(b);
    }
    out
}

const TYPES: &[&str] = &[
    "ping",
    "list_providers",
    "get_settings",
    "create_session",
    "attach",
    "detach",
    "send_text",
    "prepare",
    "cancel",
    "end",
    "reactivate",
    "get_session",
    "submit_tool_result",
    "create_upload_ticket",
    "create_download_ticket",
    "list_assets",
];

/// A valid request of the given type with arbitrary strings in it.
fn valid_request(kind: &str, id: Value, origin: &str, s: &str, n: u64) -> Value {
    let payload = match kind {
        "ping" | "list_providers" | "get_settings" => json!({}),
        "create_session" => {
            json!({"provider": s, "effortLevel": s, "autoEndOnDisconnect": n.is_multiple_of(2),
                                   "skills": {"guidance": s, "tools": []}, "workspace": {"path": s}})
        }
        "attach" => json!({"sessionId": s, "afterSeq": n, "routeId": s}),
        "send_text" => json!({"sessionId": s, "text": s}),
        "submit_tool_result" => {
            json!({"sessionId": s, "toolRequestId": s, "result": {"v": s, "n": n}})
        }
        "create_upload_ticket" => {
            json!({"sessionId": s, "name": s, "sizeBytes": n, "contentType": s})
        }
        "create_download_ticket" => json!({"sessionId": s, "path": s}),
        _ => json!({"sessionId": s}),
    };
    json!({"id": id, "type": kind, "origin": origin, "payload": payload})
}

fn decode(mut bytes: &[u8], limit: usize) -> Vec<String> {
    let mut messages = Vec::new();
    let mut parts: Vec<String> = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert!(len <= limit, "frame of {len} > {limit}");
        let body = std::str::from_utf8(&bytes[4..4 + len]).unwrap();
        bytes = &bytes[4 + len..];
        let v: Value = serde_json::from_str(body).unwrap();
        if v.get("type") == Some(&json!("chunk")) {
            assert_eq!(v["index"].as_u64().unwrap() as usize, parts.len());
            parts.push(v["data"].as_str().unwrap().to_string());
            if parts.len() == v["count"].as_u64().unwrap() as usize {
                messages.push(parts.concat());
                parts.clear();
            }
        } else {
            messages.push(body.to_string());
        }
    }
    assert!(parts.is_empty(), "unfinished chunked message");
    messages
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096),
                                   steps in proptest::collection::vec(1usize..64, 1..8)) {
        let _ = read_all(data, steps);
    }

    #[test]
    fn small_headers_with_arbitrary_bodies_never_panic(
        bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..512), 0..8),
        steps in proptest::collection::vec(1usize..64, 1..8)) {
        // Well-formed lengths around arbitrary bodies reach the parser far
        // more often than fully random bytes do.
        let (got, clean) = read_all(framed(&bodies), steps);
        prop_assert!(clean);
        prop_assert_eq!(got.len(), bodies.len());
    }

    #[test]
    fn valid_frames_round_trip_across_split_reads(
        bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..2048), 0..10),
        steps in proptest::collection::vec(1usize..300, 1..10)) {
        let (got, clean) = read_all(framed(&bodies), steps);
        prop_assert!(clean);
        let want: Vec<Inbound> = bodies.into_iter().map(Inbound::Frame).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn arbitrary_text_never_panics_the_parser(s in ".{0,300}") {
        let _ = parse(s.as_bytes());
    }

    #[test]
    fn valid_requests_parse_to_their_type(kind in proptest::sample::select(TYPES),
                                          s in ".{0,40}", n in 0u64..(1u64 << 53),
                                          numeric_id in any::<bool>()) {
        let id = if numeric_id { json!(n) } else { json!(s) };
        let origin = format!("https://{s}x");
        let req = valid_request(kind, id.clone(), &origin, &s, n);
        let env = parse(req.to_string().as_bytes()).map_err(|r| TestCaseError::fail(format!("{kind}: {}", r.error)))?;
        prop_assert_eq!(env.request.type_name(), kind);
        prop_assert_eq!(env.id, id);
    }

    #[test]
    fn mutated_valid_requests_never_panic(kind in proptest::sample::select(TYPES),
                                          s in ".{0,20}", cut in any::<prop::sample::Index>(),
                                          byte in any::<u8>()) {
        let mut bytes = valid_request(kind, json!(1), "o", &s, 3).to_string().into_bytes();
        let i = cut.index(bytes.len());
        bytes[i] = byte;
        let _ = parse(&bytes);
        bytes.truncate(i);
        let _ = parse(&bytes);
    }

    #[test]
    fn chunked_messages_reassemble_exactly(text in "(?s).{0,3000}", limit in 200usize..1200) {
        let message = json!({"type": "event", "text": text}).to_string();
        let mut out = Vec::new();
        encode_with_limit(&message, 1, limit, &mut out);
        encode_with_limit("{}", 2, limit, &mut out);
        prop_assert_eq!(decode(&out, limit), vec![message, "{}".to_string()]);
    }
}
