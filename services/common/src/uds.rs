//! gRPC over Unix-domain sockets: serving with the peer-uid check, health and
//! reflection, and connecting.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tonic::service::Routes;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic_health::ServingStatus;
use tonic_health::pb::health_check_response::ServingStatus as WireStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::ServiceName;
use crate::error::CommonError;

/// A gRPC service made on its first call. Reflection decodes the descriptor
/// sets and indexes every symbol when it is built, a good part of a
/// service's start-up CPU and heap, for a service that only grpcurl users
/// ever call (docs/decisions.md, "Reflection is built on first use").
#[derive(Clone)]
struct BuiltOnFirstCall<S> {
    service: std::sync::Arc<std::sync::LazyLock<S, Box<dyn FnOnce() -> S + Send>>>,
}

impl<S> BuiltOnFirstCall<S> {
    fn new(build: impl FnOnce() -> S + Send + 'static) -> Self {
        BuiltOnFirstCall {
            service: std::sync::Arc::new(std::sync::LazyLock::new(Box::new(build))),
        }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for BuiltOnFirstCall<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<tonic::codegen::http::Request<B>> for BuiltOnFirstCall<S>
where
    S: tower::Service<tonic::codegen::http::Request<B>> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    // tonic's generated servers are always ready; readiness is the built
    // one's, checked by its own call below.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        let mut service = (**self.service).clone();
        service.call(request)
    }
}

/// Binds `path`, replacing a stale socket left by a dead process but refusing
/// to steal one that still answers. The socket is made 0600.
pub fn bind(path: &Path) -> Result<UnixListener, CommonError> {
    if std::fs::symlink_metadata(path).is_ok() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(CommonError::AlreadyServing { path: path.into() });
        }
        std::fs::remove_file(path).map_err(|e| CommonError::io(path, e))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| CommonError::io(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| CommonError::io(path, e))?;
    Ok(listener)
}

/// Whether the connected peer runs as this user (SO_PEERCRED).
pub fn peer_is_same_user(stream: &UnixStream) -> bool {
    let me = crate::process::uid();
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == me => true,
        Ok(cred) => {
            tracing::warn!(
                peer_uid = cred.uid(),
                "refused a connection from another user"
            );
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "refused a connection whose peer could not be identified");
            false
        }
    }
}

/// Serves `routes` plus gRPC health and reflection (v1 and v1alpha) on the
/// service's socket until `shutdown` resolves, then removes the socket. Every
/// service process gets the memory trimmer here too.
pub async fn serve(
    path: &Path,
    service: ServiceName,
    routes: Routes,
    shutdown: impl Future<Output = ()>,
) -> Result<(), CommonError> {
    let listener = bind(path)?;
    crate::memory::spawn_trimmer();
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(service.grpc_name(), ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;

    // Name the served services: otherwise reflection would list every service
    // of the descriptor set on every socket.
    let reflection = move || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pedelec_proto::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(service.grpc_name())
            .with_service_name("grpc.health.v1.Health")
            .with_service_name("grpc.reflection.v1.ServerReflection")
            .with_service_name("grpc.reflection.v1alpha.ServerReflection")
    };
    let reflection_v1 =
        BuiltOnFirstCall::new(move || reflection().build_v1().expect("valid descriptor set"));
    let reflection_v1alpha =
        BuiltOnFirstCall::new(move || reflection().build_v1alpha().expect("valid descriptor set"));

    let routes = routes
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);

    // Accept here rather than in tonic: tonic retries a failed accept at once,
    // a busy loop while the process is out of file descriptors.
    let (conn_tx, conn_rx) = tokio::sync::mpsc::channel::<std::io::Result<CoalescedWrites>>(16);
    let acceptor = tokio::spawn(accept_loop(listener, conn_tx));
    let incoming = tokio_stream::wrappers::ReceiverStream::new(conn_rx);

    // Attach/Watch/RunTurn streams never end on their own, so a graceful
    // shutdown would wait for them forever: after the signal, open calls get
    // SHUTDOWN_GRACE to finish, then the server is dropped regardless.
    let (fired_tx, fired_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = fired_tx.send(());
    };
    tracing::info!(socket = %path.display(), service = service.as_str(), "serving");
    let server = Server::builder()
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown);
    let grace_over = async move {
        match fired_rx.await {
            Ok(()) => tokio::time::sleep(SHUTDOWN_GRACE).await,
            Err(_) => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        result = server => result,
        () = grace_over => {
            tracing::info!(service = service.as_str(), "open calls did not end within the shutdown grace; closing them");
            Ok(())
        }
    };
    acceptor.abort();
    let _ = std::fs::remove_file(path);
    result.map_err(|e| CommonError::io(path, std::io::Error::other(e)))
}

/// How long open calls get to finish after the shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(250);

/// How long accepting pauses after a failed accept (EMFILE and the like).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections, keeps those of this user, and hands them to the
/// server; on an accept error it logs and pauses instead of spinning.
async fn accept_loop(
    listener: UnixListener,
    conns: tokio::sync::mpsc::Sender<std::io::Result<CoalescedWrites>>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = conns.closed() => return,
        };
        match accepted {
            Ok((stream, _)) => {
                if peer_is_same_user(&stream)
                    && conns.send(Ok(CoalescedWrites::new(stream))).await.is_err()
                {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed; retrying shortly");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

fn endpoint() -> Endpoint {
    // The authority is never looked at; it only has to be a valid URI.
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
}

fn connector(
    path: PathBuf,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<CoalescedWrites>,
    Error = std::io::Error,
    Future = impl Future<Output = std::io::Result<TokioIo<CoalescedWrites>>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move {
            let stream = UnixStream::connect(path).await?;
            Ok::<_, std::io::Error>(TokioIo::new(CoalescedWrites::client(stream)))
        }
    })
}

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
struct CoalescedWrites {
    inner: UnixStream,
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
    fn new(inner: UnixStream) -> Self {
        CoalescedWrites {
            inner,
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

impl tonic::transport::server::Connected for CoalescedWrites {
    type ConnectInfo = <UnixStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
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
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
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

/// Connects now; fails at once when nobody serves on `path`.
///
/// Message size limits are per generated client, not per channel: get
/// clients from [`crate::clients::Clients`], which sets them.
pub async fn connect(path: &Path) -> Result<Channel, CommonError> {
    endpoint()
        .connect_with_connector(connector(path.to_path_buf()))
        .await
        .map_err(|e| CommonError::Connect {
            path: path.into(),
            reason: source_chain(&e),
        })
}

/// A channel that connects on first use and reconnects after the peer restarts,
/// for services that talk to each other under the launcher. Get clients from
/// [`crate::clients::Clients`], which sets the message size limits.
pub fn connect_lazy(path: &Path) -> Channel {
    endpoint().connect_with_connector_lazy(connector(path.to_path_buf()))
}

/// Whether the service on `path` answers its health check with SERVING.
pub async fn is_serving(path: &Path, service: ServiceName) -> bool {
    let Ok(channel) = connect(path).await else {
        return false;
    };
    let mut client = HealthClient::new(channel);
    let request = HealthCheckRequest {
        service: service.grpc_name().to_string(),
    };
    matches!(
        client.check(request).await,
        Ok(resp) if resp.get_ref().status == WireStatus::Serving as i32
    )
}

/// An error and its causes, joined: tonic's transport errors say little on their own.
pub fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let channel = connect(&path).await.unwrap();
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

    #[tokio::test]
    async fn stale_socket_is_replaced_live_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.sock");
        let live = bind(&path).unwrap();
        assert!(matches!(
            bind(&path),
            Err(CommonError::AlreadyServing { .. })
        ));
        drop(live); // the file stays behind, as after a crash
        assert!(path.exists());
        let _again = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    /// A call that never ends (health Watch, like Attach or RunTurn) must not
    /// hold the shutdown: serve returns after the grace and removes the socket.
    #[tokio::test]
    async fn shutdown_does_not_wait_for_endless_streams() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.sock");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn({
            let path = path.clone();
            async move {
                serve(&path, ServiceName::Provider, Routes::default(), async {
                    let _ = stopped.await;
                })
                .await
            }
        });
        let mut channel = None;
        for _ in 0..200 {
            if let Ok(c) = connect(&path).await {
                channel = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut client = HealthClient::new(channel.expect("server came up"));
        let mut watch = client
            .watch(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(watch.message().await.unwrap().is_some());

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("serve returned despite the open stream")
            .unwrap()
            .unwrap();
        assert!(!path.exists(), "socket removed");
    }
}
