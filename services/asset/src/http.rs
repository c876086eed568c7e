//! The loopback transfer server (hyper 1, HTTP/1.1): page bodies never cross
//! gRPC or native messaging; the SDK `fetch`es them here with a ticket.
//!
//! `PUT /assets/upload/<ticket>` and `GET /assets/download/<ticket>`, each with
//! `Authorization: Bearer <token>`; CORS answers only the ticket's origin
//! and the extension's pages (which transfer bytes for a page).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpListener;

use crate::assets::{Assets, content_type_of};
use crate::error::{AssetError, TicketRefusal};
use crate::tickets::Kind;

type HttpBody = BoxBody<Bytes, std::io::Error>;

/// A client that sends no byte of the body for this long loses its upload
/// (the temp file is removed), so a stalled page cannot pin disk space.
const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Slow-header clients are cut off after this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Download frame size: bigger than gRPC's 64 KiB chunks because every read of a
/// tokio file is a hop to the blocking pool; fewer hops, more throughput.
const DOWNLOAD_FRAME: usize = 256 * 1024;
/// How long a browser may cache a preflight answer; far below the ticket TTL.
const PREFLIGHT_MAX_AGE: &str = "60";

/// Binds the transfer server's socket on loopback only, on an ephemeral port.
pub async fn bind() -> std::io::Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", 0)).await
}

/// Connections served at once. Transfers are short and tickets are capped
/// (64 per thread, 4,096 in all), so more is only someone holding sockets
/// open; further connections wait in the listen backlog until one ends.
pub const MAX_CONNECTIONS: usize = 256;

/// Accepts connections until the task is aborted.
pub async fn serve(listener: TcpListener, assets: Arc<Assets>) {
    serve_at_most(listener, assets, MAX_CONNECTIONS).await
}

async fn serve_at_most(listener: TcpListener, assets: Arc<Assets>, connections: usize) {
    let slots = Arc::new(tokio::sync::Semaphore::new(connections));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let hosts: Arc<[String]> = Arc::from(vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
    ]);
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "transfer server accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let assets = assets.clone();
        let hosts = hosts.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let assets = assets.clone();
                let hosts = hosts.clone();
                async move {
                    let mut resp = handle(&assets, &hosts, req).await;
                    // No answer of this server is ever sniffed into something
                    // a browser would render or run.
                    resp.headers_mut().insert(
                        header::X_CONTENT_TYPE_OPTIONS,
                        HeaderValue::from_static("nosniff"),
                    );
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "transfer connection ended with an error");
            }
        });
    }
}

/// What the request asks for, from its path.
fn route(path: &str) -> Option<(Kind, &str)> {
    let rest = path.strip_prefix("/assets/")?;
    let (kind, id) = if let Some(id) = rest.strip_prefix("upload/") {
        (Kind::Upload, id)
    } else {
        (Kind::Download, rest.strip_prefix("download/")?)
    };
    (!id.is_empty() && !id.contains('/')).then_some((kind, id))
}

fn method_of(kind: Kind) -> Method {
    match kind {
        Kind::Upload => Method::PUT,
        Kind::Download => Method::GET,
    }
}

async fn handle(assets: &Assets, hosts: &[String], req: Request<Incoming>) -> Response<HttpBody> {
    // A page on a rebound DNS name would send its own Host; it still lacks a
    // token, but there is no reason to talk to it at all.
    let host_ok = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| hosts.iter().any(|ok| ok == h));
    if !host_ok {
        let e = AssetError::InvalidInput("unexpected Host header".into());
        return error_response(&e, StatusCode::FORBIDDEN, None);
    }
    let Some((kind, id)) = route(req.uri().path()) else {
        let e = AssetError::ticket(TicketRefusal::Unknown, "no such transfer URL");
        return error_response(&e, e.http_status(), None);
    };
    let id = id.to_string();
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);

    if req.method() == Method::OPTIONS {
        return preflight(assets, kind, &id, origin.as_deref(), req.headers());
    }
    // The CORS headers go on every answer, errors included, but only for the
    // origin the ticket was issued to; looked up before the ticket is spent, and
    // a spent or expired ticket's origin is remembered for one more TTL, so the
    // page can read why a reused or late ticket is refused.
    let cors = origin
        .as_deref()
        .filter(|o| {
            assets
                .tickets()
                .cors_origin(&id, kind)
                .is_some_and(|t| assets.tickets().origin_may_use(&t, o))
        })
        .map(str::to_string);
    if req.method() != method_of(kind) {
        let e = AssetError::InvalidInput(format!("use {} for this URL", method_of(kind)));
        let mut resp = error_response(&e, StatusCode::METHOD_NOT_ALLOWED, cors.as_deref());
        resp.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static(match kind {
                Kind::Upload => "PUT, OPTIONS",
                Kind::Download => "GET, OPTIONS",
            }),
        );
        return resp;
    }
    let result = match kind {
        Kind::Upload => upload(assets, &id, origin.as_deref(), req).await,
        Kind::Download => download(assets, &id, origin.as_deref(), req.headers()).await,
    };
    let mut resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            if !matches!(e, AssetError::TicketInvalid { .. }) {
                tracing::info!(error = %e, ticket = %id, "transfer refused");
            }
            error_response(&e, e.http_status(), cors.as_deref())
        }
    };
    if let Some(origin) = cors {
        set_cors(resp.headers_mut(), &origin);
    }
    resp
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn preflight(
    assets: &Assets,
    kind: Kind,
    id: &str,
    origin: Option<&str>,
    headers: &HeaderMap,
) -> Response<HttpBody> {
    // A spent or expired ticket (for one more TTL) still gets its preflight
    // answered for its own origin: a browser whose preflight fails reports only
    // "Failed to fetch", never the ASSET_TICKET_INVALID of the request itself.
    // The preflight grants nothing; the request still needs a live ticket.
    let Some(ticket_origin) = assets.tickets().cors_origin(id, kind) else {
        let e = AssetError::ticket(TicketRefusal::Unknown, "no such ticket for this URL");
        return error_response(&e, e.http_status(), None);
    };
    let Some(origin) = origin.filter(|o| assets.tickets().origin_may_use(&ticket_origin, o)) else {
        let e = AssetError::ticket(
            TicketRefusal::Forbidden,
            "the ticket is not valid for this origin",
        );
        return error_response(&e, e.http_status(), None);
    };
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let h = resp.headers_mut();
    set_cors(h, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("PUT, GET"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(PREFLIGHT_MAX_AGE),
    );
    // Chrome's Private Network Access asks before a public page may reach
    // loopback; the ticket's own origin is allowed to.
    if headers
        .get("access-control-request-private-network")
        .is_some_and(|v| v == "true")
    {
        h.insert(
            "access-control-allow-private-network",
            HeaderValue::from_static("true"),
        );
    }
    resp
}

fn set_cors(h: &mut HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
}

async fn upload(
    assets: &Assets,
    id: &str,
    origin: Option<&str>,
    req: Request<Incoming>,
) -> Result<Response<HttpBody>, AssetError> {
    let grant = assets
        .tickets()
        .redeem(id, Kind::Upload, bearer(req.headers()), origin)?;
    // The ticket is spent from here on: whatever happens next, it cannot be retried.
    let workspace = assets.workspace(&grant.session_id, &grant.origin).await?;
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len != grant.size
    {
        let limit = assets.limits().max_asset_bytes;
        return Err(if len > limit {
            AssetError::TooLarge { size: len, limit }
        } else {
            AssetError::SizeMismatch {
                expected: grant.size,
                got: len,
            }
        });
    }
    let mut sink = assets
        .begin_upload(&workspace, &grant.path, grant.size)
        .await?;
    let mut body = req.into_body();
    // A total deadline besides the idle timeout: a body that trickles would
    // otherwise hold its slot forever. Dropping `sink` removes the temp file.
    let deadline_after = assets.limits().upload_deadline;
    let deadline = tokio::time::Instant::now() + deadline_after;
    loop {
        let idle = tokio::time::Instant::now() + BODY_IDLE_TIMEOUT;
        let frame = match tokio::time::timeout_at(idle.min(deadline), body.frame()).await {
            Err(_) if idle < deadline => {
                return Err(AssetError::InvalidInput(format!(
                    "the upload stalled after {} bytes",
                    sink.written()
                )));
            }
            Err(_) => {
                return Err(AssetError::InvalidInput(format!(
                    "the upload took longer than {} s (the most one upload may take) and was \
                     dropped after {} of {} bytes",
                    deadline_after.as_secs_f64(),
                    sink.written(),
                    grant.size
                )));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(AssetError::io(
                    format!("upload of {} broke", grant.path),
                    std::io::Error::other(e),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Some(data) = frame.data_ref() {
            sink.write(data).await?;
        }
    }
    let asset = sink.finish().await?;
    tracing::info!(path = %asset.path, bytes = asset.size_bytes, thread = %grant.session_id, "asset uploaded");
    // The same field names and units as the native host's `list_assets`
    // (`modifiedAt`: Unix epoch milliseconds).
    let modified_at = asset
        .modified_at
        .map(|t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000);
    let json = serde_json::json!({
        "name": asset.name,
        "path": asset.path,
        "sizeBytes": asset.size_bytes,
        "modifiedAt": modified_at,
    });
    Ok(json_response(StatusCode::CREATED, &json))
}

async fn download(
    assets: &Assets,
    id: &str,
    origin: Option<&str>,
    headers: &HeaderMap,
) -> Result<Response<HttpBody>, AssetError> {
    let grant = assets
        .tickets()
        .redeem(id, Kind::Download, bearer(headers), origin)?;
    let workspace = assets.workspace(&grant.session_id, &grant.origin).await?;
    let (file, len) = assets.open_read(&workspace, &grant.path)?;
    let body = FileBody {
        file,
        remaining: len,
        buf: vec![0; DOWNLOAD_FRAME],
    };
    let mut resp = Response::new(body.boxed());
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type_of(&grant.path)),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Saved, never shown inline: an uploaded page or SVG must not run as the
    // transfer server's origin.
    h.insert(
        header::CONTENT_DISPOSITION,
        content_disposition(grant.path.name()),
    );
    Ok(resp)
}

/// `attachment` with the asset's name (RFC 6266): `filename*` the exact name
/// in UTF-8, percent-encoded but for RFC 8187's attr-chars, and `filename` an
/// ASCII stand-in for older clients, with `_` for anything else and for the
/// characters that would end, escape or encode it (`"`, `\`, `%`).
fn content_disposition(name: &str) -> HeaderValue {
    use std::fmt::Write;
    let fallback: String = name
        .chars()
        .map(|c| match c {
            '"' | '\\' | '%' | ';' => '_',
            c if c == ' ' || c.is_ascii_graphic() => c,
            _ => '_',
        })
        .collect();
    let mut exact = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            exact.push(b as char);
        } else {
            let _ = write!(exact, "%{b:02X}");
        }
    }
    HeaderValue::from_str(&format!(
        "attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}"
    ))
    .unwrap_or(HeaderValue::from_static("attachment"))
}

/// Streams a file in frames of up to [`DOWNLOAD_FRAME`] bytes, exactly `remaining` bytes (the length
/// announced in Content-Length); a file that shrank meanwhile fails the body.
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: Vec<u8>,
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = this.buf.len().min(this.remaining as usize);
        let mut read = ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) if read.filled().is_empty() => Poll::Ready(Some(Err(
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file shrank"),
            ))),
            Poll::Ready(Ok(())) => {
                let chunk = Bytes::copy_from_slice(read.filled());
                this.remaining -= chunk.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.remaining)
    }
}

fn empty() -> HttpBody {
    Full::new(Bytes::new())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn json_response(status: StatusCode, json: &serde_json::Value) -> Response<HttpBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(json.to_string()))
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `{code, message}` with `status`; CORS headers only for the ticket's origin.
fn error_response(e: &AssetError, status: StatusCode, cors: Option<&str>) -> Response<HttpBody> {
    let coded = e.coded();
    let json = serde_json::json!({ "code": coded.wire_code(), "message": coded.message });
    let mut resp = json_response(status, &json);
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if let Some(origin) = cors {
        set_cors(resp.headers_mut(), origin);
    } else {
        resp.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_for_a_free_slot() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = bind().await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Nothing serves there: this test never reaches SessionService.
        let clients = pedelec_common::Clients::new(pedelec_common::RuntimeDir::at("/nonexistent"));
        let assets = Arc::new(Assets::new(
            clients.session(),
            crate::assets::Limits::default(),
            format!("http://{addr}"),
        ));
        tokio::spawn(serve_at_most(listener, assets, 2));
        // Two connections that say nothing hold both slots.
        let idle1 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _idle2 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET /nowhere HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        third.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let waited =
            tokio::time::timeout(Duration::from_millis(300), third.read_to_end(&mut answer)).await;
        assert!(waited.is_err(), "served past the cap: {answer:?}");
        // A slot frees up: the waiting connection is served.
        drop(idle1);
        tokio::time::timeout(Duration::from_secs(10), third.read_to_end(&mut answer))
            .await
            .expect("served once a slot was free")
            .unwrap();
        assert!(
            String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 404"),
            "{answer:?}"
        );
    }

    #[test]
    fn routes() {
        assert_eq!(route("/assets/upload/tkt_1"), Some((Kind::Upload, "tkt_1")));
        assert_eq!(
            route("/assets/download/tkt_2"),
            Some((Kind::Download, "tkt_2"))
        );
        for bad in [
            "/",
            "/assets/",
            "/assets/upload/",
            "/assets/upload/a/b",
            "/x/upload/a",
        ] {
            assert_eq!(route(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_download_name_is_safe_in_both_forms() {
        let value = content_disposition("a \"b\"\\c%20ü;.html");
        assert_eq!(
            value.to_str().unwrap(),
            "attachment; filename=\"a _b__c_20__.html\"; filename*=UTF-8''a%20%22b%22%5Cc%2520%C3%BC%3B.html"
        );
        assert_eq!(
            content_disposition("plain.txt").to_str().unwrap(),
            "attachment; filename=\"plain.txt\"; filename*=UTF-8''plain.txt"
        );
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), None);
    }
}
