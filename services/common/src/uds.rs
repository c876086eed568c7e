//! gRPC over Unix-domain sockets: serving with the peer-uid check, health and
//! reflection, and connecting. Both ends of every connection write through
//! the coalescer (`coalesce.rs`, which says how to turn it off).

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tonic::service::Routes;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic_health::ServingStatus;
use tonic_health::pb::health_check_response::ServingStatus as WireStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::ServiceName;
use crate::coalesce::CoalescedWrites;
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

/// The connected peer's uid (SO_PEERCRED) when it is not this user's;
/// an error when the peer cannot be identified. Both ends of every
/// connection check it: the server on accept, the client before it sends.
fn other_user(stream: &UnixStream) -> std::io::Result<Option<u32>> {
    let uid = stream.peer_cred()?.uid();
    Ok((uid != crate::process::uid()).then_some(uid))
}

/// Whether the connected peer runs as this user (SO_PEERCRED).
pub fn peer_is_same_user(stream: &UnixStream) -> bool {
    match other_user(stream) {
        Ok(None) => true,
        Ok(Some(uid)) => {
            tracing::warn!(peer_uid = uid, "refused a connection from another user");
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
                    && conns
                        .send(Ok(CoalescedWrites::accepted(stream)))
                        .await
                        .is_err()
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

/// What a Pedelec client lets a service send ahead on one stream before the
/// client has read it (hyper's default: 2 MiB).
const STREAM_WINDOW: u32 = 256 * 1024;

/// The same for all streams of a connection together (hyper's default:
/// 5 MiB). The sender queues that much in h2, whose frame queue keeps the
/// size of its largest backlog for as long as the connection lives: fifty
/// pages streaming through one native host left SessionService's send queue
/// at 0.64 MiB after the load (docs/decisions.md, "HTTP/2 windows").
const CONNECTION_WINDOW: u32 = 1024 * 1024;

fn endpoint() -> Endpoint {
    // The authority is never looked at; it only has to be a valid URI.
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
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
            let stream = connect_trusted(&path).await?;
            Ok::<_, std::io::Error>(TokioIo::new(CoalescedWrites::connected(stream)))
        }
    })
}

/// Every client connection of every Pedelec program starts here: before a
/// byte is sent, the socket's folder must be this user's own and closed to
/// other users' writes ([`crate::paths::check_private_dir`]), and the process
/// serving it must run as this user (SO_PEERCRED). Otherwise the connection
/// is dropped unused and the error (kind PermissionDenied) carries a
/// [`CommonError::Untrusted`] saying why: someone else may have made the
/// folder, or put a socket there, to receive what Pedelec's clients send
/// (settings keys, prompts, tool results).
async fn connect_trusted(socket: &Path) -> std::io::Result<UnixStream> {
    let folder = match socket.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match crate::paths::check_private_dir(folder) {
        Ok(()) => {}
        // Missing or unreadable: connecting would fail the same way.
        Err(CommonError::Io { source, .. }) => return Err(source),
        Err(why) => return Err(untrusted(socket, why.to_string())),
    }
    let stream = UnixStream::connect(socket).await?;
    match other_user(&stream) {
        Ok(None) => Ok(stream),
        Ok(Some(uid)) => Err(untrusted(
            socket,
            format!(
                "it is served by a process of uid {uid}, not of this user (uid {}), so it is not \
                 this user's Pedelec; find out who made it, stop that process and remove the socket",
                crate::process::uid()
            ),
        )),
        Err(e) => Err(untrusted(
            socket,
            format!("the process serving it cannot be identified ({e})"),
        )),
    }
}

fn untrusted(socket: &Path, why: String) -> std::io::Error {
    tracing::warn!(socket = %socket.display(), %why, "refused to connect");
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        CommonError::Untrusted {
            socket: socket.into(),
            why,
        },
    )
}

/// The [`CommonError::Untrusted`] somewhere in `e`'s causes (a failed
/// connect, a call's status), if a client refused the socket.
pub fn untrusted_cause(e: &(dyn std::error::Error + 'static)) -> Option<CommonError> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<CommonError>());
        if let Some(CommonError::Untrusted { socket, why }) = inner.or_else(|| e.downcast_ref()) {
            return Some(CommonError::Untrusted {
                socket: socket.clone(),
                why: why.clone(),
            });
        }
        cur = e.source();
    }
    None
}

/// Connects now; fails at once when nobody serves on `path`, and with
/// [`CommonError::Untrusted`] when the socket is refused (see
/// [`connect_trusted`]).
///
/// Message size limits are per generated client, not per channel: get
/// clients from [`crate::clients::Clients`], which sets them.
pub async fn connect(path: &Path) -> Result<Channel, CommonError> {
    endpoint()
        .connect_with_connector(connector(path.to_path_buf()))
        .await
        .map_err(|e| {
            untrusted_cause(&e).unwrap_or_else(|| CommonError::Connect {
                path: path.into(),
                reason: source_chain(&e),
            })
        })
}

/// A channel that connects on first use and reconnects after the peer restarts,
/// for services that talk to each other under the launcher. Get clients from
/// [`crate::clients::Clients`], which sets the message size limits. Each
/// connection is checked as [`connect`]'s is.
pub fn connect_lazy(path: &Path) -> Channel {
    endpoint().connect_with_connector_lazy(connector(path.to_path_buf()))
}

/// Whether the service on `path` answers its health check with SERVING.
pub async fn is_serving(path: &Path, service: ServiceName) -> bool {
    matches!(health(path, service).await, Ok(true))
}

/// Whether the service on `path` answers its health check with SERVING;
/// [`CommonError::Untrusted`] when the socket was refused before anything
/// was sent (so starting the services would not help).
pub async fn health(path: &Path, service: ServiceName) -> Result<bool, CommonError> {
    let channel = match connect(path).await {
        Ok(channel) => channel,
        Err(e @ CommonError::Untrusted { .. }) => return Err(e),
        Err(_) => return Ok(false),
    };
    let mut client = HealthClient::new(channel);
    let request = HealthCheckRequest {
        service: service.grpc_name().to_string(),
    };
    Ok(matches!(
        client.check(request).await,
        Ok(resp) if resp.get_ref().status == WireStatus::Serving as i32
    ))
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

    /// A socket whose folder another user may write to is refused before
    /// any connection is made (the listener never sees one), with a reason
    /// naming the folder and its mode; in a private folder the same socket
    /// is connected to.
    #[tokio::test]
    async fn a_socket_in_a_folder_others_may_write_is_refused_before_connecting() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rt");
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        for mode in [0o770, 0o777, 0o1777] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = connect(&path).await.unwrap_err();
            assert!(matches!(err, CommonError::Untrusted { .. }), "{err:?}");
            assert_eq!(err.code(), crate::Code::CORE_UNAVAILABLE);
            let said = err.to_string();
            assert!(
                said.contains(&path.display().to_string())
                    && said.contains(&format!("mode {mode:04o}")),
                "{said}"
            );
            assert!(matches!(
                health(&path, ServiceName::Session).await,
                Err(CommonError::Untrusted { .. })
            ));
            assert!(!is_serving(&path, ServiceName::Session).await);
            // The lazy channel's calls fail the same way, with the reason.
            let status = HealthClient::new(connect_lazy(&path))
                .check(HealthCheckRequest::default())
                .await
                .unwrap_err();
            assert!(
                status.message().contains("refusing to talk to"),
                "{status:?}"
            );
            assert!(untrusted_cause(&status).is_some(), "{status:?}");
            assert_eq!(
                listener.accept().unwrap_err().kind(),
                std::io::ErrorKind::WouldBlock,
                "mode {mode:o}: a connection was made"
            );
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let _stream = connect_trusted(&path).await.unwrap();
        assert!(listener.accept().is_ok(), "connected in a private folder");
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
