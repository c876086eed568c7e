//! The write coalescer of Pedelec's Unix-socket connections: what a
//! connection's tasks write in one scheduler turn leaves in one write.
//!
//! What it buys, measured with the benchmark harness (docs/benchmarks.md)
//! on this project's machine, a VM with 2 shared vCPUs (AMD EPYC, Linux
//! 6.18), where waking a peer is most of a small message's cost: socket
//! writes per tool call 4.0 -> 3.0 in ToolBridge and 4.1 -> 2.8 in
//! SessionService; with the client connection's first flush held for its
//! first request, ToolBridge runs 3.7-4.1 times per `pedelec-cli
//! tool-call` instead of 4.8-5.0, and the CLI writes 1.3 times instead of
//! 2.4. The latency rows moved within the VM's noise: it is kept because it
//! removes system calls and wake-ups by construction (docs/decisions.md,
//! "Sockets").
//!
//! How to turn it off: `PEDELEC_COALESCE_WRITES=0` ([`crate::env::COALESCE_WRITES`])
//! in a process's environment makes every connection it accepts or opens
//! write straight through to the socket, each write and flush as hyper
//! makes it (the plain path), e.g. to measure it again on another machine.

use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

/// Whether this process coalesces its connections' writes (see the module
/// docs); read once.
static ENABLED: LazyLock<bool> =
    LazyLock::new(|| std::env::var(crate::env::COALESCE_WRITES).as_deref() != Ok("0"));

/// A connection (either end) that sends what is written within one
/// scheduler turn in one write.
///
/// Why: each write can wake the peer, and on this project's VMs a wake-up
/// is most of a message's cost. hyper's HTTP/2 client writes a unary
/// request's HEADERS as soon as the stream opens and its DATA a task later,
/// once the body got send capacity; a server writes a unary reply and an
/// event of another stream on the same connection (ToolBridge's `Resolve`
/// reply and `Settled`, SessionService's `SubmitToolResult` reply and the
/// attached page's events) as separate writes (docs/decisions.md,
/// "Sockets"). Here a flush first yields once, letting the other ready
/// tasks queue their frames, and then writes everything buffered. Writes
/// are buffered up to [`COALESCE_LIMIT`]; beyond it they go out as they come.
///
/// A client connection's first flush waits longer: its preface reaches the
/// buffer two scheduler turns before the first request's HEADERS and DATA,
/// and sent alone it woke the server once for the preface, once for the
/// request and once more for the SETTINGS acknowledgement (`pedelec-cli
/// tool-call` opens a connection for every call). It waits until a DATA
/// frame is buffered, for at most [`MAX_FIRST_FLUSH_TURNS`] turns.
pub(crate) struct CoalescedWrites {
    inner: UnixStream,
    /// False: the plain path, every call passed straight to `inner`.
    coalescing: bool,
    buf: Vec<u8>,
    /// How much of `buf` is written already (a write can be partial).
    written: usize,
    /// Whether the pending flush has yielded its turn.
    yielded: bool,
    /// Turns a client connection's first flush may still wait for its first
    /// request's DATA; 0 once anything was written, and for servers.
    first_flush_turns: u8,
}

const COALESCE_LIMIT: usize = 64 << 10;

/// The most scheduler turns a client connection's first flush waits.
const MAX_FIRST_FLUSH_TURNS: u8 = 4;

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `buf`, the start of a client connection, holds a whole DATA
/// frame: the first request's message, after the preface and SETTINGS.
fn holds_data_frame(buf: &[u8]) -> bool {
    let Some(mut rest) = buf.strip_prefix(H2_PREFACE) else {
        return false;
    };
    // Each frame: a 9-byte header (24-bit length, type, flags, stream id).
    while rest.len() >= 9 {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let Some(after) = rest.get(9 + len..) else {
            return false;
        };
        if rest[3] == 0x0 {
            return true;
        }
        rest = after;
    }
    false
}

impl CoalescedWrites {
    /// The server end of an accepted connection, coalescing unless turned off.
    pub(crate) fn accepted(inner: UnixStream) -> Self {
        if *ENABLED {
            CoalescedWrites::new(inner)
        } else {
            CoalescedWrites::plain(inner)
        }
    }

    /// The client end of a new connection, coalescing unless turned off.
    pub(crate) fn connected(inner: UnixStream) -> Self {
        if *ENABLED {
            CoalescedWrites::client(inner)
        } else {
            CoalescedWrites::plain(inner)
        }
    }

    /// Writes straight through: the path with the coalescer off.
    fn plain(inner: UnixStream) -> Self {
        CoalescedWrites {
            coalescing: false,
            ..CoalescedWrites::new(inner)
        }
    }

    fn new(inner: UnixStream) -> Self {
        CoalescedWrites {
            inner,
            coalescing: true,
            buf: Vec::new(),
            written: 0,
            yielded: false,
            first_flush_turns: 0,
        }
    }

    /// The client end of a new connection (see the type's docs).
    fn client(inner: UnixStream) -> Self {
        CoalescedWrites {
            first_flush_turns: MAX_FIRST_FLUSH_TURNS,
            ..CoalescedWrites::new(inner)
        }
    }

    /// Writes out everything buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
            #[cfg(test)]
            tests::WRITES.with(|w| w.set(w.get() + 1));
            // Once anything went out there is no first flush left to hold.
            self.first_flush_turns = 0;
        }
        self.buf.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Room for more before the buffer must be drained; drains it when full.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.buf.len() >= COALESCE_LIMIT {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(COALESCE_LIMIT - self.buf.len()))
    }
}

/// No connection info for the handlers: none reads it (the peer's uid is
/// checked once at accept, `uds::accept_loop`), and tonic's own for a Unix
/// socket asks the kernel for the peer's address and credentials again on
/// every connection: two system calls on each `pedelec-cli` call's way.
impl tonic::transport::server::Connected for CoalescedWrites {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for CoalescedWrites {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CoalescedWrites {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if !self.coalescing {
            return Pin::new(&mut self.inner).poll_write(cx, data);
        }
        let room = ready!(self.poll_room(cx))?;
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if !self.coalescing {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        let mut room = ready!(self.poll_room(cx))?;
        let mut taken = 0;
        for data in bufs {
            let n = data.len().min(room);
            self.buf.extend_from_slice(&data[..n]);
            taken += n;
            room -= n;
            if room == 0 {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        if self.coalescing {
            true
        } else {
            self.inner.is_write_vectored()
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.coalescing {
            return Pin::new(&mut self.inner).poll_flush(cx);
        }
        if self.buf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if self.first_flush_turns > 0 && !holds_data_frame(&self.buf) {
            self.first_flush_turns -= 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(self.poll_drain(cx))?;
        self.yielded = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    /// Nothing reaches the socket before the flush; the flush sends every
    /// write since the last one together, in order.
    #[tokio::test]
    async fn writes_go_out_together_at_the_flush() {
        use tokio::io::AsyncWriteExt;
        let (a, b) = UnixStream::pair().unwrap();
        let mut writer = CoalescedWrites::new(a);
        writer.write_all(b"HEADERS").await.unwrap();
        writer.write_all(b"+DATA").await.unwrap();
        let mut got = [0u8; 64];
        assert_eq!(
            b.try_read(&mut got).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "written before the flush"
        );
        writer.flush().await.unwrap();
        b.readable().await.unwrap();
        let n = b.try_read(&mut got).unwrap();
        assert_eq!(&got[..n], b"HEADERS+DATA");
    }

    /// The first flush yields its turn (so other tasks can add their frames)
    /// and sends nothing; the next sends everything written by then in one
    /// write.
    #[tokio::test]
    async fn a_flush_yields_once_and_then_sends_everything() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut writer = CoalescedWrites::new(a);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut got = [0u8; 64];
        let wrote = Pin::new(&mut writer).poll_write(&mut cx, b"HEADERS");
        assert!(matches!(wrote, Poll::Ready(Ok(7))));
        assert!(Pin::new(&mut writer).poll_flush(&mut cx).is_pending());
        assert_eq!(
            b.try_read(&mut got).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "sent before the yield"
        );
        // What another task queues during the yield joins the same write.
        let wrote = Pin::new(&mut writer).poll_write(&mut cx, b"+DATA");
        assert!(matches!(wrote, Poll::Ready(Ok(5))));
        assert!(matches!(
            Pin::new(&mut writer).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        b.readable().await.unwrap();
        let n = b.try_read(&mut got).unwrap();
        assert_eq!(&got[..n], b"HEADERS+DATA");
        // Nothing buffered: a flush has nothing to wait for.
        assert!(matches!(
            Pin::new(&mut writer).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
    }

    /// An HTTP/2 frame header and payload of `kind` on `stream`.
    fn frame(kind: u8, stream: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            0,
            0,
            0,
            0,
            stream,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_data_frame_is_found_only_whole_and_after_the_preface() {
        let settings = frame(0x4, 0, &[0, 4, 0, 0, 0xff, 0xff]);
        let headers = frame(0x1, 1, b"hpack bytes");
        let data = frame(0x0, 1, b"\0\0\0\0\x02hi");
        let start = [H2_PREFACE, &settings, &headers].concat();
        assert!(!holds_data_frame(&start));
        assert!(holds_data_frame(&[&start[..], &data].concat()));
        // Cut short: the frame is not all there yet.
        assert!(!holds_data_frame(
            &[&start[..], &data[..data.len() - 1]].concat()
        ));
        // Not the start of a client connection.
        assert!(!holds_data_frame(&[&settings[..], &data].concat()));
    }

    /// A client connection's first flush sends nothing until its first
    /// request's DATA frame is buffered, then all of it in one write.
    #[tokio::test]
    async fn a_client_connection_sends_its_preface_with_the_first_request() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut writer = CoalescedWrites::client(a);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let settings = frame(0x4, 0, &[]);
        let headers = frame(0x1, 1, b"hpack bytes");
        let data = frame(0x0, 1, b"message");
        for part in [&[H2_PREFACE, &settings].concat()[..], &headers] {
            let wrote = Pin::new(&mut writer).poll_write(&mut cx, part);
            assert!(matches!(wrote, Poll::Ready(Ok(n)) if n == part.len()));
            assert!(Pin::new(&mut writer).poll_flush(&mut cx).is_pending());
            let mut got = [0u8; 128];
            assert_eq!(
                b.try_read(&mut got).unwrap_err().kind(),
                std::io::ErrorKind::WouldBlock,
                "sent before the request's DATA"
            );
        }
        let wrote = Pin::new(&mut writer).poll_write(&mut cx, &data);
        assert!(matches!(wrote, Poll::Ready(Ok(_))));
        // Then the usual turn for other tasks, and out.
        assert!(Pin::new(&mut writer).poll_flush(&mut cx).is_pending());
        assert!(matches!(
            Pin::new(&mut writer).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        b.readable().await.unwrap();
        let mut got = [0u8; 128];
        let n = b.try_read(&mut got).unwrap();
        assert_eq!(&got[..n], [H2_PREFACE, &settings, &headers, &data].concat());
    }

    /// Without a request (a connection that is only opened, say) the first
    /// flush still goes out after a bounded number of turns.
    #[tokio::test]
    async fn a_client_connection_without_a_request_flushes_after_a_few_turns() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut writer = CoalescedWrites::client(a);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let wrote = Pin::new(&mut writer).poll_write(&mut cx, H2_PREFACE);
        assert!(matches!(wrote, Poll::Ready(Ok(_))));
        let mut turns = 0;
        while Pin::new(&mut writer).poll_flush(&mut cx).is_pending() {
            turns += 1;
            assert!(turns <= MAX_FIRST_FLUSH_TURNS + 1, "the flush kept waiting");
        }
        // The first-flush turns, then the usual one.
        assert_eq!(turns, MAX_FIRST_FLUSH_TURNS + 1);
        b.readable().await.unwrap();
        let mut got = [0u8; 64];
        assert_eq!(b.try_read(&mut got).unwrap(), H2_PREFACE.len());
    }

    std::thread_local! {
        /// Socket writes by `CoalescedWrites` on this thread: a test counts
        /// only its own (tests never share a thread at the same time).
        pub(super) static WRITES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Through the real client stack (tonic, hyper, h2 over `connect`), a
    /// new connection's preface and its first request leave in one write:
    /// one wake-up of the server.
    #[tokio::test]
    async fn a_new_channel_sends_its_preface_and_first_request_in_one_write() {
        WRITES.with(|w| w.set(0));
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("peer.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let channel = crate::uds::connect(&path).await.unwrap();
        let (peer, _) = listener.accept().await.unwrap();
        // Nobody answers: the call only has to leave.
        let call = tokio::spawn(async move {
            let request = HealthCheckRequest {
                service: "pedelec.v1.SessionService".into(),
            };
            let _ = HealthClient::new(channel).check(request).await;
        });
        let mut got = Vec::new();
        while !holds_data_frame(&got) {
            peer.readable().await.unwrap();
            let mut chunk = [0u8; 4096];
            match peer.try_read(&mut chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                read => got.extend_from_slice(&chunk[..read.unwrap()]),
            }
        }
        call.abort();
        assert_eq!(
            WRITES.with(|w| w.get()),
            1,
            "writes before the request's DATA"
        );
    }

    /// More than the buffer holds goes out as it comes, whole and in order,
    /// while the peer reads.
    #[tokio::test]
    async fn a_large_write_arrives_whole() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = UnixStream::pair().unwrap();
        let sent: Vec<u8> = (0..(COALESCE_LIMIT * 5 + 123)).map(|i| i as u8).collect();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut writer = CoalescedWrites::new(a);
        writer.write_all(&sent).await.unwrap();
        writer.shutdown().await.unwrap();
        drop(writer);
        assert_eq!(reader.await.unwrap(), sent);
    }

    /// With the coalescer off, a write reaches the socket at once, before any flush.
    #[tokio::test]
    async fn the_plain_path_writes_through() {
        use tokio::io::AsyncWriteExt;
        let (a, b) = UnixStream::pair().unwrap();
        let mut writer = CoalescedWrites::plain(a);
        writer.write_all(b"HEADERS").await.unwrap();
        b.readable().await.unwrap();
        let mut got = [0u8; 64];
        let n = b.try_read(&mut got).unwrap();
        assert_eq!(&got[..n], b"HEADERS");
    }
}
