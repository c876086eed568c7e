//! Chrome's native-messaging framing: a 4-byte little-endian length, then that
//! many bytes of UTF-8 JSON. Browser -> host frames may be up to 64 MiB; Chrome
//! refuses host -> browser frames above 1 MiB, so a larger message goes out as
//! ordered `chunk` frames, each carrying a slice of the serialized message as a
//! JSON string (see docs/native-messaging.md for the reassembly).

use std::io;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use crate::coalesce::{self, Outgoing};

/// Largest browser -> host frame (Chrome's own limit for that direction).
pub const MAX_INBOUND: u64 = 64 << 20;
/// Largest host -> browser frame Chrome accepts.
pub const MAX_OUTBOUND: usize = 1 << 20;
/// Room kept in a chunk frame for everything but the data string.
const CHUNK_ENVELOPE: usize = 160;

/// What the reader found in the next frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// A frame's body; not yet checked for UTF-8 or JSON.
    Frame(Vec<u8>),
    /// A length of 0 or above `MAX_INBOUND`. An oversized body is skipped
    /// (read and discarded) before the next frame is read, so the stream stays
    /// in step; it is never buffered.
    BadLength(u64),
}

/// A frame's length, read before its body, so the caller can wait for room
/// (the in-flight byte budget, `host.rs`) before the body is read.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    /// A body of this many bytes follows: read it with [`FrameReader::body`].
    Length(u64),
    /// As [`Inbound::BadLength`]; nothing is to be read.
    BadLength(u64),
}

pub struct FrameReader<R> {
    inner: R,
    /// Bytes of an oversized frame still to discard.
    skip: u64,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        FrameReader { inner, skip: 0 }
    }

    /// The next frame; `Ok(None)` at a clean end of input. Input that ends in
    /// the middle of a frame is `UnexpectedEof`.
    pub async fn next(&mut self) -> io::Result<Option<Inbound>> {
        Ok(match self.header().await? {
            None => None,
            Some(Header::BadLength(len)) => Some(Inbound::BadLength(len)),
            Some(Header::Length(len)) => Some(Inbound::Frame(self.body(len).await?)),
        })
    }

    /// The next frame's length; `Ok(None)` at a clean end of input. After
    /// [`Header::Length`] the body must be read with [`FrameReader::body`]
    /// before the next header.
    pub async fn header(&mut self) -> io::Result<Option<Header>> {
        if self.skip > 0 {
            let want = std::mem::take(&mut self.skip);
            let skipped =
                tokio::io::copy(&mut (&mut self.inner).take(want), &mut tokio::io::sink()).await?;
            if skipped < want {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        let mut header = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            let n = self.inner.read(&mut header[got..]).await?;
            if n == 0 {
                return if got == 0 {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
            got += n;
        }
        let len = u32::from_le_bytes(header) as u64;
        if len == 0 || len > MAX_INBOUND {
            if len > MAX_INBOUND {
                self.skip = len;
            }
            return Ok(Some(Header::BadLength(len)));
        }
        Ok(Some(Header::Length(len)))
    }

    /// The body of a frame whose [`Header::Length`] was `len`. Input that
    /// ends before it is `UnexpectedEof`.
    pub async fn body(&mut self, len: u64) -> io::Result<Vec<u8>> {
        // Grow with the data that actually arrives rather than trusting the
        // header for a 64 MiB allocation up front.
        let mut body = Vec::with_capacity(len.min(1 << 16) as usize);
        (&mut self.inner).take(len).read_to_end(&mut body).await?;
        if (body.len() as u64) < len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(body)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    r#type: &'static str,
    chunk_id: u64,
    index: usize,
    count: usize,
    data: &'a str,
}

/// Bytes serde_json needs for `c` inside a string literal.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Splits `message` at char boundaries into slices whose escaped form fits
/// in `budget` bytes.
fn split(message: &str, budget: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut used = 0;
    for (i, c) in message.char_indices() {
        let n = escaped_len(c);
        if used + n > budget {
            parts.push(&message[start..i]);
            start = i;
            used = 0;
        }
        used += n;
    }
    parts.push(&message[start..]);
    parts
}

/// Appends the frames carrying `message` (serialized JSON) to `out`: one frame
/// when it fits in `MAX_OUTBOUND`, else `chunk` frames with id `chunk_id`.
pub fn encode(message: &str, chunk_id: u64, out: &mut Vec<u8>) {
    encode_with_limit(message, chunk_id, MAX_OUTBOUND, out)
}

pub fn encode_with_limit(message: &str, chunk_id: u64, limit: usize, out: &mut Vec<u8>) {
    if message.len() <= limit {
        out.extend_from_slice(&(message.len() as u32).to_le_bytes());
        out.extend_from_slice(message.as_bytes());
        return;
    }
    let parts = split(message, limit - CHUNK_ENVELOPE);
    let count = parts.len();
    for (index, data) in parts.into_iter().enumerate() {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        let chunk = Chunk {
            r#type: "chunk",
            chunk_id,
            index,
            count,
            data,
        };
        serde_json::to_writer(&mut *out, &chunk).expect("writing to a Vec cannot fail");
        let len = (out.len() - at - 4) as u32;
        debug_assert!(len as usize <= limit);
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
}

/// The single writer of stdout: frames every queued message, in queue order,
/// and flushes whenever the queue runs dry (bursts leave in few writes).
/// What waits in the queue when the writer looks goes out as one batch, in
/// which consecutive chat deltas of a thread merge (`coalesce`).
pub async fn write_loop<W: AsyncWrite + Unpin>(
    mut queue: mpsc::Receiver<Outgoing>,
    out: W,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 18, out);
    let mut buf = Vec::with_capacity(1 << 16);
    let mut next_chunk_id = 1u64;
    let mut batch = Vec::new();
    while let Some(message) = queue.recv().await {
        batch.push(message);
        loop {
            while batch.len() < WRITE_BATCH
                && let Ok(more) = queue.try_recv()
            {
                batch.push(more);
            }
            if batch.is_empty() {
                break;
            }
            for message in coalesce::frames(std::mem::take(&mut batch)) {
                if message.len() > MAX_OUTBOUND {
                    next_chunk_id += 1;
                }
                encode(&message, next_chunk_id - 1, &mut buf);
                out.write_all(&buf).await?;
                buf.clear();
            }
        }
        out.flush().await?;
    }
    out.flush().await
}

/// Messages the writer takes from its queue at most per batch.
const WRITE_BATCH: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// Hands out its bytes a few at a time, as a pipe may.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let end = (self.pos + self.step)
                .min(self.data.len())
                .min(self.pos + buf.remaining());
            let (pos, data) = (self.pos, &self.data);
            buf.put_slice(&data[pos..end]);
            self.pos = end;
            Poll::Ready(Ok(()))
        }
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    async fn read_all(data: Vec<u8>, step: usize) -> (Vec<Inbound>, io::Result<()>) {
        let mut reader = FrameReader::new(Trickle { data, pos: 0, step });
        let mut got = Vec::new();
        loop {
            match reader.next().await {
                Ok(Some(f)) => got.push(f),
                Ok(None) => return (got, Ok(())),
                Err(e) => return (got, Err(e)),
            }
        }
    }

    #[tokio::test]
    async fn frames_survive_reads_split_anywhere() {
        let mut data = frame(br#"{"id":1}"#);
        data.extend(frame("{\"t\":\"é✓\"}".as_bytes()));
        data.extend(frame(&vec![b'x'; 70_000]));
        for step in [1, 2, 3, 5, 4096, usize::MAX / 2] {
            let (got, end) = read_all(data.clone(), step).await;
            end.unwrap();
            assert_eq!(got.len(), 3, "step {step}");
            assert_eq!(got[0], Inbound::Frame(br#"{"id":1}"#.to_vec()));
            assert_eq!(got[1], Inbound::Frame("{\"t\":\"é✓\"}".as_bytes().to_vec()));
            assert_eq!(got[2], Inbound::Frame(vec![b'x'; 70_000]));
        }
    }

    /// The length comes first, so the caller can wait for room before the
    /// body is read; the body then follows exactly.
    #[tokio::test]
    async fn a_header_is_read_without_its_body() {
        let mut data = frame(br#"{"id":1}"#);
        data.extend(frame(b"{}"));
        let mut reader = FrameReader::new(Trickle {
            data,
            pos: 0,
            step: 3,
        });
        assert_eq!(reader.header().await.unwrap(), Some(Header::Length(8)));
        assert_eq!(reader.body(8).await.unwrap(), br#"{"id":1}"#);
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Inbound::Frame(b"{}".to_vec()))
        );
        assert_eq!(reader.header().await.unwrap(), None);
    }

    #[tokio::test]
    async fn zero_and_oversized_lengths_are_reported_and_skipped() {
        let mut data = 0u32.to_le_bytes().to_vec();
        let big = MAX_INBOUND + 1;
        data.extend((big as u32).to_le_bytes());
        data.extend(vec![b'z'; big as usize]);
        data.extend(frame(b"{}"));
        let (got, end) = read_all(data, 1 << 20).await;
        end.unwrap();
        assert_eq!(
            got,
            [
                Inbound::BadLength(0),
                Inbound::BadLength(big),
                Inbound::Frame(b"{}".to_vec())
            ]
        );
    }

    #[tokio::test]
    async fn truncated_input_is_unexpected_eof() {
        for data in [vec![5, 0], {
            let mut f = frame(b"{\"a\":1}");
            f.pop();
            f
        }] {
            let (got, end) = read_all(data, 1).await;
            assert!(got.is_empty());
            assert_eq!(end.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    /// Reassembles frames as the extension does.
    fn decode(mut bytes: &[u8], limit: usize) -> Vec<String> {
        let mut messages = Vec::new();
        let mut parts: Vec<String> = Vec::new();
        while !bytes.is_empty() {
            let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
            assert!(len <= limit, "frame of {len} bytes");
            let body = std::str::from_utf8(&bytes[4..4 + len]).unwrap();
            bytes = &bytes[4 + len..];
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            if v["type"] == "chunk" {
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
        messages
    }

    #[test]
    fn large_messages_are_chunked_and_reassemble_exactly() {
        // Quotes, backslashes, control characters and multi-byte characters
        // all grow or straddle boundaries differently once escaped.
        let text: String = (0..1_000_000)
            .map(|i| ['a', '"', '\\', '\u{1}', '\n', 'é', '✓', '𝄞'][i % 8])
            .collect();
        let message = serde_json::json!({"type": "event", "text": text}).to_string();
        assert!(message.len() > 3 * MAX_OUTBOUND / 2);
        let mut out = Vec::new();
        encode(&message, 7, &mut out);
        let decoded = decode(&out, MAX_OUTBOUND);
        assert_eq!(decoded, [message]);
    }

    #[test]
    fn small_limit_gives_many_chunks_in_order() {
        let message = serde_json::json!({"x": "ab\"cd".repeat(100)}).to_string();
        let mut out = Vec::new();
        encode_with_limit(&message, 1, 200, &mut out);
        encode_with_limit("{\"small\":true}", 2, 200, &mut out);
        assert_eq!(decode(&out, 200), [message, "{\"small\":true}".to_string()]);
    }

    #[tokio::test]
    async fn write_loop_keeps_queue_order() {
        let (tx, rx) = mpsc::channel(4);
        let (client, server) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(write_loop(rx, server));
        let big = serde_json::json!({"big": "y".repeat(MAX_OUTBOUND + 10)}).to_string();
        let reader = tokio::spawn(async move {
            let mut bytes = Vec::new();
            let mut client = client;
            client.read_to_end(&mut bytes).await.unwrap();
            bytes
        });
        let mut sent = Vec::new();
        for i in 0..50 {
            let m = if i == 25 {
                big.clone()
            } else {
                format!("{{\"n\":{i}}}")
            };
            sent.push(m.clone());
            tx.send(m.into()).await.unwrap();
        }
        drop(tx);
        writer.await.unwrap().unwrap();
        let bytes = reader.await.unwrap();
        assert_eq!(decode(&bytes, MAX_OUTBOUND), sent);
    }
}
