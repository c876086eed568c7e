//! AssetService over real processes: `pedelecd up`, tickets over gRPC, bodies
//! over real HTTP/1.1 to the loopback transfer server (a small hand-written
//! client, so every byte on the wire is the test's own).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pedelec_common::clients::AssetClient;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OTHER: &str = "https://evil.example";
const MIB: usize = 1024 * 1024;

struct Fixture {
    env: TestEnv,
    _launcher: Launcher,
    assets: AssetClient,
}

struct Thread {
    id: String,
    workspace: PathBuf,
}

impl Thread {
    /// The thread's own assets folder: threads sharing a workspace never
    /// see each other's files.
    fn assets_root(&self) -> PathBuf {
        self.workspace
            .join(".pedelec-runtime/assets")
            .join(&self.id)
    }
}

impl Fixture {
    async fn start(env: TestEnv) -> Fixture {
        let launcher = env.up().await;
        let assets = env.asset().await;
        Fixture {
            env,
            _launcher: launcher,
            assets,
        }
    }

    async fn new() -> Fixture {
        Fixture::start(TestEnv::with_codex_stub()).await
    }

    async fn thread(&self) -> Thread {
        let created = self
            .env
            .session()
            .await
            .create_session(create_session_request(Some("codex")))
            .await
            .unwrap()
            .into_inner();
        Thread {
            id: created.session_id,
            workspace: PathBuf::from(created.snapshot.unwrap().workspace_path),
        }
    }

    async fn upload_ticket(
        &self,
        t: &Thread,
        target: Option<&str>,
        name: &str,
        size: u64,
    ) -> Result<pb::Ticket, tonic::Status> {
        self.assets
            .clone()
            .create_upload_ticket(pb::CreateUploadTicketRequest {
                session_id: t.id.clone(),
                origin: ORIGIN.into(),
                target_path: target.map(Into::into),
                name: name.into(),
                size_bytes: size,
                content_type: "application/octet-stream".into(),
            })
            .await
            .map(|r| r.into_inner())
    }

    async fn download_ticket(&self, t: &Thread, path: &str) -> Result<pb::Ticket, tonic::Status> {
        self.assets
            .clone()
            .create_download_ticket(pb::CreateDownloadTicketRequest {
                session_id: t.id.clone(),
                origin: ORIGIN.into(),
                path: path.into(),
            })
            .await
            .map(|r| r.into_inner())
    }

    async fn list(&self, t: &Thread) -> Vec<pb::Asset> {
        self.assets
            .clone()
            .list(pb::ListAssetsRequest {
                session_id: t.id.clone(),
                origin: ORIGIN.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .assets
    }

    /// Ticket + PUT; returns the HTTP answer.
    async fn put(&self, t: &Thread, path: &str, data: &[u8]) -> HttpResponse {
        let ticket = self
            .upload_ticket(t, Some(path), "ignored", data.len() as u64)
            .await
            .unwrap();
        put(&ticket, data, &[("origin", ORIGIN)]).await
    }

    /// Ticket + GET; returns the HTTP answer.
    async fn get(&self, t: &Thread, path: &str) -> HttpResponse {
        let ticket = self.download_ticket(t, path).await.unwrap();
        get(&ticket, &[("origin", ORIGIN)]).await
    }
}

/// Deterministic, non-repeating-looking bytes, so a shifted or dropped block shows.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------
// A minimal HTTP/1.1 client: one request per connection (`Connection: close`).

#[derive(Debug)]
struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_string()
    }
}

/// `http://127.0.0.1:PORT/path` → (`127.0.0.1:PORT`, `/path`).
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("URL with a path");
    (host.to_string(), format!("/{path}"))
}

fn request_head(method: &str, url: &str, headers: &[(&str, &str)], len: Option<usize>) -> Vec<u8> {
    let (host, path) = split_url(url);
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(len) = len {
        head.push_str(&format!("Content-Length: {len}\r\n"));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

async fn connect(url: &str) -> TcpStream {
    let (host, _) = split_url(url);
    let s = TcpStream::connect(&host)
        .await
        .expect("connect transfer server");
    s.set_nodelay(true).unwrap();
    s
}

async fn read_response(mut s: impl tokio::io::AsyncRead + Unpin) -> HttpResponse {
    let mut raw = Vec::new();
    let mut buf = vec![0; 256 * 1024];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => panic!("no complete response within the ceiling"),
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            // A server that answers before reading the whole body may reset the
            // connection after its answer; what arrived is the answer.
            Ok(Err(_)) => break,
        }
    }
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> HttpResponse {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let body = raw[end + 4..].to_vec();
    let resp = HttpResponse {
        status,
        headers,
        body,
    };
    if let Some(len) = resp.header("content-length") {
        assert_eq!(
            resp.body.len(),
            len.parse::<usize>().unwrap(),
            "body length"
        );
    }
    resp
}

async fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> HttpResponse {
    let mut s = connect(url).await;
    s.write_all(&request_head(method, url, headers, body.map(<[u8]>::len)))
        .await
        .unwrap();
    if let Some(body) = body {
        // The server may refuse before reading the body and close; its answer is what counts.
        let _ = s.write_all(body).await;
    }
    read_response(s).await
}

async fn put(ticket: &pb::Ticket, data: &[u8], extra: &[(&str, &str)]) -> HttpResponse {
    let auth = format!("Bearer {}", ticket.token);
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/octet-stream"),
    ];
    headers.extend_from_slice(extra);
    send("PUT", &ticket.url, &headers, Some(data)).await
}

/// Opens a PUT on the ticket announcing `len` body bytes and sends only its
/// head; the body is the caller's to write.
async fn put_head_only(ticket: &pb::Ticket, len: usize) -> TcpStream {
    let auth = format!("Bearer {}", ticket.token);
    let mut s = connect(&ticket.url).await;
    s.write_all(&request_head(
        "PUT",
        &ticket.url,
        &[("authorization", &auth)],
        Some(len),
    ))
    .await
    .unwrap();
    s
}

async fn get(ticket: &pb::Ticket, extra: &[(&str, &str)]) -> HttpResponse {
    let auth = format!("Bearer {}", ticket.token);
    let mut headers = vec![("authorization", auth.as_str())];
    headers.extend_from_slice(extra);
    send("GET", &ticket.url, &headers, None).await
}

/// Names of Pedelec temp files anywhere under `dir`.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else if e.file_name().to_string_lossy().starts_with(".pedelec-") {
                out.push(p);
            }
        }
    }
    out
}

fn mib_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / MIB as f64 / d.as_secs_f64()
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn upload_list_download_byte_exact_and_throughput() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    assert!(
        f.list(&t).await.is_empty(),
        "no assets before the first upload"
    );

    let cases = [
        ("/one.bin", pattern(1, 1)),
        ("/docs/mid.bin", pattern(MIB, 2)),
        ("/big/deeper/big.bin", pattern(50 * MIB, 3)),
    ];
    for (path, data) in &cases {
        let ticket = f
            .upload_ticket(&t, Some(path), "x", data.len() as u64)
            .await
            .unwrap();
        assert_eq!(&ticket.path, path);
        assert!(
            ticket.url.starts_with("http://127.0.0.1:"),
            "{}",
            ticket.url
        );
        assert!(ticket.token.len() >= 32);
        let expires = ticket.expires_at.unwrap().seconds;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (now + 200..=now + 301).contains(&expires),
            "about 5 minutes"
        );

        let started = Instant::now();
        let resp = put(&ticket, data, &[("origin", ORIGIN)]).await;
        let up = started.elapsed();
        assert_eq!(
            resp.status,
            201,
            "{:?}",
            String::from_utf8_lossy(&resp.body)
        );
        assert_eq!(resp.header("access-control-allow-origin"), Some(ORIGIN));
        let json = resp.json();
        assert_eq!(json["path"], *path);
        assert_eq!(json["sizeBytes"], data.len() as u64);
        // The same names and units as `list_assets`: `modifiedAt` in epoch milliseconds.
        let modified = json["modifiedAt"].as_i64().expect("modifiedAt in ms");
        assert!((now * 1000 - 60_000..=now * 1000 + 60_000).contains(&modified));
        assert!(json.get("modifiedAtMs").is_none());
        // On disk, in the workspace, exactly.
        let on_disk = t.assets_root().join(&path[1..]);
        assert_eq!(
            std::fs::metadata(&on_disk).unwrap().len(),
            data.len() as u64
        );

        let started = Instant::now();
        let resp = f.get(&t, path).await;
        let down = started.elapsed();
        assert_eq!(resp.status, 200);
        assert_eq!(
            resp.header("content-length"),
            Some(data.len().to_string().as_str())
        );
        assert_eq!(
            resp.header("content-type"),
            Some("application/octet-stream")
        );
        assert_eq!(resp.header("access-control-allow-origin"), Some(ORIGIN));
        assert!(resp.body == *data, "{path}: downloaded bytes differ");
        if data.len() == 50 * MIB {
            eprintln!(
                "50 MiB over the loopback transfer server: upload {:.1} MiB/s ({:?}), download {:.1} MiB/s ({:?})",
                mib_per_s(data.len(), up),
                up,
                mib_per_s(data.len(), down),
                down
            );
        }
    }

    // A content type from the extension; a default target of "/" + name.
    let ticket = f.upload_ticket(&t, None, "notes.json", 2).await.unwrap();
    assert_eq!(ticket.path, "/notes.json");
    assert_eq!(put(&ticket, b"{}", &[]).await.status, 201);
    let resp = f.get(&t, "/notes.json").await;
    assert_eq!(resp.header("content-type"), Some("application/json"));
    assert_eq!(resp.body, b"{}");

    // Overwrite replaces the file whole.
    assert_eq!(f.put(&t, "/one.bin", b"xy").await.status, 201);
    assert_eq!(f.get(&t, "/one.bin").await.body, b"xy");

    // A file the agent made itself is listed too; temp names are not.
    std::fs::write(t.assets_root().join("agent.txt"), b"from the agent").unwrap();
    std::fs::write(t.assets_root().join(".pedelec-upload-zz.part"), b"junk").unwrap();
    let listed = f.list(&t).await;
    let summary: Vec<(&str, &str, u64)> = listed
        .iter()
        .map(|a| (a.path.as_str(), a.name.as_str(), a.size_bytes))
        .collect();
    assert_eq!(
        summary,
        [
            ("/agent.txt", "agent.txt", 14),
            ("/big/deeper/big.bin", "big.bin", 50 * MIB as u64),
            ("/docs/mid.bin", "mid.bin", MIB as u64),
            ("/notes.json", "notes.json", 2),
            ("/one.bin", "one.bin", 2),
        ]
    );
    assert!(listed.iter().all(|a| a.modified_at.is_some()));

    // Missing asset.
    assert_eq!(
        code(f.download_ticket(&t, "/nope.bin").await),
        "ASSET_NOT_FOUND"
    );
    assert_eq!(
        code(f.download_ticket(&t, "/docs").await),
        "ASSET_NOT_FOUND"
    );
}

#[tokio::test]
async fn concurrent_uploads_to_different_threads() {
    let f = Fixture::new().await;
    let mut threads = Vec::new();
    for _ in 0..4 {
        threads.push(f.thread().await);
    }
    let mut tickets = Vec::new();
    for (i, t) in threads.iter().enumerate() {
        let data = pattern(4 * MIB + i, 10 + i as u32);
        let ticket = f
            .upload_ticket(t, Some("/same/name.bin"), "x", data.len() as u64)
            .await
            .unwrap();
        tickets.push((ticket, data));
    }
    // All bodies in flight at once, each on its own connection and task.
    let uploads: Vec<_> = tickets
        .iter()
        .cloned()
        .map(|(ticket, data)| tokio::spawn(async move { put(&ticket, &data, &[]).await }))
        .collect();
    for upload in uploads {
        assert_eq!(upload.await.unwrap().status, 201);
    }
    for (t, (_, data)) in threads.iter().zip(&tickets) {
        let on_disk = std::fs::read(t.assets_root().join("same/name.bin")).unwrap();
        assert!(on_disk == *data, "each thread got its own bytes");
        assert_eq!(f.list(t).await.len(), 1);
        assert!(temp_files(&t.assets_root()).is_empty());
    }
}

#[tokio::test]
async fn an_interrupted_upload_leaves_nothing() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    let size = 8 * MIB;
    let data = pattern(size, 7);
    let ticket = f
        .upload_ticket(&t, Some("/part/file.bin"), "x", size as u64)
        .await
        .unwrap();
    let mut s = put_head_only(&ticket, size).await;
    s.write_all(&data[..size / 2]).await.unwrap();
    let folder = t.assets_root().join("part");
    // The body streams into a temp file beside the target...
    wait_until("the temp file", || !temp_files(&folder).is_empty()).await;
    assert!(!folder.join("file.bin").exists());
    // ...and closing the socket mid-body removes it.
    drop(s);
    wait_until("the temp file to go", || temp_files(&folder).is_empty()).await;
    assert!(!folder.join("file.bin").exists());
    assert!(f.list(&t).await.is_empty());
    // The ticket was spent by the broken attempt.
    let again = put(&ticket, &data, &[]).await;
    assert_eq!(
        (again.status, again.code().as_str()),
        (404, "ASSET_TICKET_INVALID")
    );

    // A body shorter than announced (the client says so up front) leaves nothing either.
    let ticket = f
        .upload_ticket(&t, Some("/short.bin"), "x", 10)
        .await
        .unwrap();
    let mut s = put_head_only(&ticket, 5).await;
    s.write_all(b"12345").await.unwrap();
    let resp = read_response(s).await;
    assert_eq!((resp.status, resp.code().as_str()), (400, "INVALID_INPUT"));
    assert!(!t.assets_root().join("short.bin").exists());
    assert!(temp_files(&t.assets_root()).is_empty());
}

#[tokio::test]
async fn reused_and_wrong_tokens_are_refused() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    let ticket = f.upload_ticket(&t, Some("/a.txt"), "x", 3).await.unwrap();

    // No token, a wrong token, another scheme: refused, and the ticket stays usable.
    let no_auth = send("PUT", &ticket.url, &[], Some(b"abc")).await;
    assert_eq!(
        (no_auth.status, no_auth.code().as_str()),
        (401, "ASSET_TICKET_INVALID")
    );
    assert_eq!(no_auth.header("www-authenticate"), Some("Bearer"));
    let wrong_token = pb::Ticket {
        token: "0".repeat(64),
        ..ticket.clone()
    };
    let wrong = put(&wrong_token, b"abc", &[("origin", ORIGIN)]).await;
    assert_eq!(
        (wrong.status, wrong.code().as_str()),
        (403, "ASSET_TICKET_INVALID")
    );
    // The page can read why (its own origin), but nothing is written.
    assert_eq!(wrong.header("access-control-allow-origin"), Some(ORIGIN));
    let basic = send(
        "PUT",
        &ticket.url,
        &[("authorization", &format!("Basic {}", ticket.token))],
        Some(b"abc"),
    )
    .await;
    assert_eq!(basic.status, 401);
    // The right token from another origin: refused, no CORS grant.
    let other = put(&ticket, b"abc", &[("origin", OTHER)]).await;
    assert_eq!(
        (other.status, other.code().as_str()),
        (403, "ASSET_TICKET_INVALID")
    );
    assert_eq!(other.header("access-control-allow-origin"), None);
    assert!(!t.assets_root().join("a.txt").exists());
    // A ticket id that was never issued.
    let unknown = pb::Ticket {
        url: ticket.url.replace("/tkt_", "/tkt_0"),
        ..ticket.clone()
    };
    assert_eq!(put(&unknown, b"abc", &[]).await.status, 404);
    // An upload ticket is not a download ticket.
    let as_download = pb::Ticket {
        url: ticket.url.replace("/upload/", "/download/"),
        ..ticket.clone()
    };
    assert_eq!(get(&as_download, &[]).await.status, 404);

    // Used once, then gone.
    assert_eq!(
        put(&ticket, b"abc", &[("origin", ORIGIN)]).await.status,
        201
    );
    let reused = put(&ticket, b"abc", &[("origin", ORIGIN)]).await;
    assert_eq!(
        (reused.status, reused.code().as_str()),
        (404, "ASSET_TICKET_INVALID")
    );

    let down = f.download_ticket(&t, "/a.txt").await.unwrap();
    assert_eq!(get(&down, &[]).await.body, b"abc");
    let reused = get(&down, &[]).await;
    assert_eq!(
        (reused.status, reused.code().as_str()),
        (404, "ASSET_TICKET_INVALID")
    );
    // A wrong method on a ticket URL.
    let down = f.download_ticket(&t, "/a.txt").await.unwrap();
    let auth = format!("Bearer {}", down.token);
    let post = send("POST", &down.url, &[("authorization", &auth)], Some(b"")).await;
    assert_eq!(post.status, 405);
    assert_eq!(
        get(&down, &[]).await.status,
        200,
        "a refused method does not spend it"
    );
}

/// An upload that trickles (a byte, then one now and then, never idle long
/// enough for the idle timeout) is cut off at the upload deadline: a clear
/// INVALID_INPUT, nothing written, the temp file removed, and the slot free
/// for the next upload.
#[tokio::test]
async fn a_trickling_upload_is_cut_off_at_the_deadline() {
    let mut env = TestEnv::with_codex_stub();
    env.extra_env
        .insert("PEDELEC_ASSET_UPLOAD_DEADLINE_MS".into(), "1000".into());
    let f = Fixture::start(env).await;
    let t = f.thread().await;
    let size = 1_000_000;
    let ticket = f
        .upload_ticket(&t, Some("/slow.bin"), "x", size)
        .await
        .unwrap();
    let s = connect(&ticket.url).await;
    let (reader, mut writer) = s.into_split();
    let auth = format!("Bearer {}", ticket.token);
    let head = request_head(
        "PUT",
        &ticket.url,
        &[("authorization", &auth)],
        Some(size as usize),
    );
    let trickle = tokio::spawn(async move {
        if writer.write_all(&head).await.is_err() {
            return;
        }
        // A byte at a time, far below any useful rate, until the server hangs up.
        while writer.write_all(b"x").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let resp = read_response(reader).await;
    trickle.abort();
    assert_eq!(
        (resp.status, resp.code().as_str()),
        (400, "INVALID_INPUT"),
        "{:?}",
        String::from_utf8_lossy(&resp.body)
    );
    let message = resp.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("took longer than 1 s"), "{message}");
    assert!(!t.assets_root().join("slow.bin").exists());
    assert!(temp_files(&t.assets_root()).is_empty());
    // An upload in time still goes through.
    assert_eq!(f.put(&t, "/fast.bin", b"fast").await.status, 201);
}

#[tokio::test]
async fn an_expired_ticket_is_refused() {
    let mut env = TestEnv::with_codex_stub();
    env.extra_env
        .insert("PEDELEC_ASSET_TICKET_TTL_MS".into(), "300".into());
    let f = Fixture::start(env).await;
    let t = f.thread().await;
    let up = f
        .upload_ticket(&t, Some("/late.txt"), "x", 1)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let resp = put(&up, b"x", &[("origin", ORIGIN)]).await;
    assert_eq!(
        (resp.status, resp.code().as_str()),
        (404, "ASSET_TICKET_INVALID")
    );
    assert!(!t.assets_root().join("late.txt").exists());
    // A preflight for it from another origin is refused, without CORS (its own
    // origin's preflight: see refusals_of_spent_and_expired_tickets_carry_cors).
    let pre = preflight(&up.url, OTHER, "PUT").await;
    assert_eq!(pre.status, 403);
    assert_eq!(pre.header("access-control-allow-origin"), None);
}

async fn preflight(url: &str, origin: &str, method: &str) -> HttpResponse {
    send(
        "OPTIONS",
        url,
        &[
            ("origin", origin),
            ("access-control-request-method", method),
            (
                "access-control-request-headers",
                "authorization,content-type",
            ),
            ("access-control-request-private-network", "true"),
        ],
        None,
    )
    .await
}

#[tokio::test]
async fn cors_answers_only_the_tickets_origin() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    let up = f.upload_ticket(&t, Some("/c.txt"), "x", 2).await.unwrap();

    let refused = preflight(&up.url, OTHER, "PUT").await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.header("access-control-allow-origin"), None);
    assert_eq!(refused.header("access-control-allow-methods"), None);

    let allowed = preflight(&up.url, ORIGIN, "PUT").await;
    assert_eq!(allowed.status, 204);
    assert_eq!(allowed.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(allowed.header("vary"), Some("Origin"));
    let methods = allowed.header("access-control-allow-methods").unwrap();
    assert!(
        methods.contains("PUT") && methods.contains("GET"),
        "{methods}"
    );
    let headers = allowed
        .header("access-control-allow-headers")
        .unwrap()
        .to_ascii_lowercase();
    assert!(headers.contains("authorization") && headers.contains("content-type"));
    assert_eq!(
        allowed.header("access-control-allow-private-network"),
        Some("true")
    );
    // A preflight does not spend the ticket.
    let resp = put(&up, b"hi", &[("origin", ORIGIN)]).await;
    assert_eq!(resp.status, 201);
    assert_eq!(resp.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(resp.header("vary"), Some("Origin"));

    let down = f.download_ticket(&t, "/c.txt").await.unwrap();
    assert_eq!(preflight(&down.url, OTHER, "GET").await.status, 403);
    assert_eq!(preflight(&down.url, ORIGIN, "GET").await.status, 204);
    let other = get(&down, &[("origin", OTHER)]).await;
    assert_eq!(other.status, 403);
    assert_eq!(other.header("access-control-allow-origin"), None);
    let resp = get(&down, &[("origin", ORIGIN)]).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(resp.body, b"hi");

    // A request naming another host (DNS rebinding) is not served.
    let ticket = f.download_ticket(&t, "/c.txt").await.unwrap();
    let auth = format!("Bearer {}", ticket.token);
    let (_, path) = split_url(&ticket.url);
    let mut s = connect(&ticket.url).await;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: attacker.example\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(read_response(s).await.status, 403);
}

#[tokio::test]
async fn every_bad_path_is_refused() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    let long_segment = format!("/{}", "a".repeat(256));
    let bad = [
        "",
        "relative.txt",
        "/",
        "//x",
        "/a//b",
        "/a/",
        "/.",
        "/..",
        "/../escape.txt",
        "/a/../../escape.txt",
        "/a/./b",
        "/a\\b",
        "/..\\escape",
        "/nul\0byte",
        "/.pedelec-upload-x.part",
        long_segment.as_str(),
    ];
    for path in bad {
        assert_eq!(
            code(f.upload_ticket(&t, Some(path), "ok.txt", 1).await),
            "ASSET_PATH_INVALID",
            "upload target {path:?}"
        );
        assert_eq!(
            code(f.download_ticket(&t, path).await),
            "ASSET_PATH_INVALID",
            "download {path:?}"
        );
    }
    for name in ["", ".", "..", "a/b", "a\\b", "x\0"] {
        assert_eq!(
            code(f.upload_ticket(&t, None, name, 1).await),
            "ASSET_PATH_INVALID",
            "name {name:?}"
        );
    }
    // Symlinks anywhere under the assets root, and a file used as a folder.
    let outside = f.env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), b"secret").unwrap();
    assert_eq!(f.put(&t, "/real/file.txt", b"ok").await.status, 201);
    let root = t.assets_root();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("real/leaf.txt")).unwrap();
    for path in [
        "/link/secret.txt",
        "/link/new.txt",
        "/real/leaf.txt",
        "/real/file.txt/x",
    ] {
        assert_eq!(
            code(f.upload_ticket(&t, Some(path), "x", 1).await),
            "ASSET_PATH_INVALID",
            "upload through {path}"
        );
        assert_eq!(
            code(f.download_ticket(&t, path).await),
            "ASSET_PATH_INVALID",
            "download through {path}"
        );
    }
    // Not listed, not followed.
    let listed: Vec<String> = f.list(&t).await.into_iter().map(|a| a.path).collect();
    assert_eq!(listed, ["/real/file.txt"]);
    // A symlink planted after the ticket was issued is caught at upload time.
    let ticket = f
        .upload_ticket(&t, Some("/later/x.txt"), "x", 1)
        .await
        .unwrap();
    std::os::unix::fs::symlink(&outside, root.join("later")).unwrap();
    let resp = put(&ticket, b"x", &[]).await;
    assert_eq!(
        (resp.status, resp.code().as_str()),
        (400, "ASSET_PATH_INVALID")
    );
    assert!(!outside.join("x.txt").exists());
    // Same rules on the gRPC side.
    let header = upload_header(&t, "/../x", 1);
    assert_eq!(
        code(f.assets.clone().upload(grpc_upload(header, &[b"x"])).await),
        "ASSET_PATH_INVALID"
    );
    let read = f
        .assets
        .clone()
        .read(read_request(&t, "/link/secret.txt"))
        .await;
    assert_eq!(code(read), "ASSET_PATH_INVALID");
}

/// The first message of a gRPC upload of `size` bytes to `path` in `t`.
fn upload_header(t: &Thread, path: &str, size: u64) -> pb::UploadHeader {
    pb::UploadHeader {
        session_id: t.id.clone(),
        origin: ORIGIN.into(),
        path: path.into(),
        size_bytes: size,
    }
}

/// A gRPC read of `path` in `t`.
fn read_request(t: &Thread, path: &str) -> pb::ReadAssetRequest {
    pb::ReadAssetRequest {
        session_id: t.id.clone(),
        origin: ORIGIN.into(),
        path: path.into(),
    }
}

fn grpc_upload(
    header: pb::UploadHeader,
    chunks: &[&[u8]],
) -> impl tokio_stream::Stream<Item = pb::UploadChunk> + Send + 'static {
    let mut msgs = vec![pb::UploadChunk {
        chunk: Some(pb::upload_chunk::Chunk::Header(header)),
    }];
    msgs.extend(chunks.iter().map(|c| pb::UploadChunk {
        chunk: Some(pb::upload_chunk::Chunk::Data(c.to_vec())),
    }));
    tokio_stream::iter(msgs)
}

#[tokio::test]
async fn the_size_limit_is_enforced() {
    let mut env = TestEnv::with_codex_stub();
    env.extra_env
        .insert("PEDELEC_ASSET_MAX_BYTES".into(), "1000".into());
    let f = Fixture::start(env).await;
    let t = f.thread().await;
    // On the announced size.
    assert_eq!(
        code(f.upload_ticket(&t, Some("/big.bin"), "x", 1001).await),
        "ASSET_TOO_LARGE"
    );
    assert_eq!(f.put(&t, "/max.bin", &pattern(1000, 1)).await.status, 201);

    // While streaming: a chunked body (no Content-Length) longer than the limit.
    let ticket = f
        .upload_ticket(&t, Some("/chunked.bin"), "x", 1000)
        .await
        .unwrap();
    let auth = format!("Bearer {}", ticket.token);
    let (host, path) = split_url(&ticket.url);
    let mut s = connect(&ticket.url).await;
    let body = pattern(1200, 2);
    let mut req = format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    req.extend_from_slice(b"\r\n0\r\n\r\n");
    let _ = s.write_all(&req).await;
    let resp = read_response(s).await;
    assert_eq!(
        (resp.status, resp.code().as_str()),
        (413, "ASSET_TOO_LARGE")
    );
    assert!(!t.assets_root().join("chunked.bin").exists());
    assert!(temp_files(&t.assets_root()).is_empty());

    // A Content-Length past the limit on a ticket for less.
    let ticket = f
        .upload_ticket(&t, Some("/cl.bin"), "x", 1000)
        .await
        .unwrap();
    let resp = put(&ticket, &pattern(1001, 3), &[]).await;
    assert_eq!(
        (resp.status, resp.code().as_str()),
        (413, "ASSET_TOO_LARGE")
    );

    // gRPC: announced and streamed.
    let header = |size| upload_header(&t, "/g.bin", size);
    let big = pattern(1001, 4);
    assert_eq!(
        code(
            f.assets
                .clone()
                .upload(grpc_upload(header(1001), &[&big]))
                .await
        ),
        "ASSET_TOO_LARGE"
    );
    assert_eq!(
        code(
            f.assets
                .clone()
                .upload(grpc_upload(header(10), &[&big]))
                .await
        ),
        "ASSET_TOO_LARGE"
    );
    assert!(!t.assets_root().join("g.bin").exists());
    assert!(temp_files(&t.assets_root()).is_empty());
    let listed: Vec<String> = f.list(&t).await.into_iter().map(|a| a.path).collect();
    assert_eq!(listed, ["/max.bin"]);
}

#[tokio::test]
async fn an_ended_or_foreign_thread_is_refused() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    assert_eq!(f.put(&t, "/kept.txt", b"kept").await.status, 201);
    let early_up = f
        .upload_ticket(&t, Some("/after.txt"), "x", 1)
        .await
        .unwrap();
    let early_down = f.download_ticket(&t, "/kept.txt").await.unwrap();

    // Another (approved) origin, an unknown thread, no thread id.
    f.env
        .grant_site(OTHER, pb::AccessLevel::Full, &["codex"], &[])
        .await;
    let mut assets = f.assets.clone();
    let list = |id: &str, origin: &str| pb::ListAssetsRequest {
        session_id: id.into(),
        origin: origin.into(),
    };
    assert_eq!(
        code(assets.list(list(&t.id, OTHER)).await),
        "THREAD_ACCESS_DENIED"
    );
    assert_eq!(
        code(assets.list(list("thr_nope", ORIGIN)).await),
        "THREAD_NOT_FOUND"
    );
    assert_eq!(code(assets.list(list("", ORIGIN)).await), "INVALID_INPUT");
    let mut foreign = pb::CreateDownloadTicketRequest {
        session_id: t.id.clone(),
        origin: OTHER.into(),
        path: "/kept.txt".into(),
    };
    assert_eq!(
        code(assets.create_download_ticket(foreign.clone()).await),
        "THREAD_ACCESS_DENIED"
    );
    foreign.origin = ORIGIN.into();
    foreign.session_id = "thr_nope".into();
    assert_eq!(
        code(assets.create_download_ticket(foreign).await),
        "THREAD_NOT_FOUND"
    );

    f.env
        .session()
        .await
        .end(pedelec_proto::v1::EndRequest::from(thread_request(&t.id)))
        .await
        .unwrap();

    assert_eq!(
        code(assets.list(list(&t.id, ORIGIN)).await),
        "SESSION_ENDED"
    );
    assert_eq!(
        code(f.upload_ticket(&t, Some("/x.txt"), "x", 1).await),
        "SESSION_ENDED"
    );
    assert_eq!(
        code(f.download_ticket(&t, "/kept.txt").await),
        "SESSION_ENDED"
    );
    let read = assets.read(read_request(&t, "/kept.txt")).await;
    assert_eq!(code(read), "SESSION_ENDED");
    let header = upload_header(&t, "/x.txt", 1);
    assert_eq!(
        code(assets.upload(grpc_upload(header, &[b"x"])).await),
        "SESSION_ENDED"
    );
    // Tickets issued before the end are no good after it.
    let resp = put(&early_up, b"x", &[("origin", ORIGIN)]).await;
    assert_eq!((resp.status, resp.code().as_str()), (409, "SESSION_ENDED"));
    let resp = get(&early_down, &[("origin", ORIGIN)]).await;
    assert_eq!((resp.status, resp.code().as_str()), (409, "SESSION_ENDED"));
    // The workspace keeps its files.
    assert_eq!(
        std::fs::read(t.assets_root().join("kept.txt")).unwrap(),
        b"kept"
    );
    assert!(!t.assets_root().join("after.txt").exists());
}

#[tokio::test]
async fn grpc_upload_and_read_round_trip() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    let data = pattern(MIB + 12_345, 9);
    let chunks: Vec<&[u8]> = data.chunks(100_000).collect();
    let header = upload_header(&t, "/grpc/data.bin", data.len() as u64);
    let asset = f
        .assets
        .clone()
        .upload(grpc_upload(header.clone(), &chunks))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (asset.name.as_str(), asset.path.as_str(), asset.size_bytes),
        ("data.bin", "/grpc/data.bin", data.len() as u64)
    );
    assert!(asset.modified_at.is_some());

    let mut stream = f
        .assets
        .clone()
        .read(read_request(&t, "/grpc/data.bin"))
        .await
        .unwrap()
        .into_inner();
    let mut read = Vec::new();
    let mut sizes = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        sizes.push(chunk.data.len());
        read.extend_from_slice(&chunk.data);
    }
    assert!(read == data, "byte-exact round trip");
    assert!(sizes.iter().all(|s| *s <= 64 * 1024));
    assert_eq!(sizes[0], 64 * 1024);

    // The HTTP side sees the same file.
    assert!(f.get(&t, "/grpc/data.bin").await.body == data);

    // A short or long stream lands nothing; no header first is refused.
    let mut short = header.clone();
    short.path = "/grpc/short.bin".into();
    assert_eq!(
        code(f.assets.clone().upload(grpc_upload(short, &[b"abc"])).await),
        "INVALID_INPUT"
    );
    let mut long = header.clone();
    long.path = "/grpc/long.bin".into();
    long.size_bytes = 2;
    assert_eq!(
        code(f.assets.clone().upload(grpc_upload(long, &[b"abc"])).await),
        "INVALID_INPUT"
    );
    let no_header = tokio_stream::iter(vec![pb::UploadChunk {
        chunk: Some(pb::upload_chunk::Chunk::Data(b"x".to_vec())),
    }]);
    assert_eq!(
        code(f.assets.clone().upload(no_header).await),
        "INVALID_INPUT"
    );
    let listed: Vec<String> = f.list(&t).await.into_iter().map(|a| a.path).collect();
    assert_eq!(listed, ["/grpc/data.bin"]);
    assert!(temp_files(&t.assets_root()).is_empty());

    // Reading a missing asset.
    let missing = f
        .assets
        .clone()
        .read(read_request(&t, "/grpc/none.bin"))
        .await;
    assert_eq!(code(missing), "ASSET_NOT_FOUND");
}

/// The refusal of a spent or expired ticket (and its preflight) carries the
/// ticket's origin in CORS for one more TTL, so the page reads
/// ASSET_TICKET_INVALID instead of "Failed to fetch"; other origins get nothing.
#[tokio::test]
async fn refusals_of_spent_and_expired_tickets_carry_cors() {
    // Long enough for the checks of one TTL to finish within it on a loaded
    // machine.
    const TTL: Duration = Duration::from_millis(2000);
    let mut env = TestEnv::with_codex_stub();
    env.extra_env.insert(
        "PEDELEC_ASSET_TICKET_TTL_MS".into(),
        TTL.as_millis().to_string(),
    );
    let f = Fixture::start(env).await;
    let t = f.thread().await;

    // Spent: the reuse and its preflight answer the ticket's origin.
    let up = f.upload_ticket(&t, Some("/s.txt"), "x", 1).await.unwrap();
    assert_eq!(put(&up, b"s", &[("origin", ORIGIN)]).await.status, 201);
    let pre = preflight(&up.url, ORIGIN, "PUT").await;
    assert_eq!(pre.status, 204);
    assert_eq!(pre.header("access-control-allow-origin"), Some(ORIGIN));
    let reused = put(&up, b"s", &[("origin", ORIGIN)]).await;
    assert_eq!(
        (reused.status, reused.code().as_str()),
        (404, "ASSET_TICKET_INVALID")
    );
    assert_eq!(reused.header("access-control-allow-origin"), Some(ORIGIN));
    let down = f.download_ticket(&t, "/s.txt").await.unwrap();
    assert_eq!(get(&down, &[("origin", ORIGIN)]).await.status, 200);
    let reused = get(&down, &[("origin", ORIGIN)]).await;
    assert_eq!(
        (reused.status, reused.code().as_str()),
        (404, "ASSET_TICKET_INVALID")
    );
    assert_eq!(reused.header("access-control-allow-origin"), Some(ORIGIN));
    // Another origin still learns nothing.
    let other = put(&up, b"s", &[("origin", OTHER)]).await;
    assert_eq!(other.status, 404);
    assert_eq!(other.header("access-control-allow-origin"), None);
    let pre = preflight(&up.url, OTHER, "PUT").await;
    assert_eq!(pre.status, 403);
    assert_eq!(pre.header("access-control-allow-origin"), None);
    // A ticket that never existed: no CORS either.
    let never = up.url.replace("/tkt_", "/tkt_0");
    let pre = preflight(&never, ORIGIN, "PUT").await;
    assert_eq!(pre.status, 404);
    assert_eq!(pre.header("access-control-allow-origin"), None);

    // Expired (unused): the same. The service issued the ticket before
    // `issued`: it has expired at `issued + TTL` and is forgotten by
    // `issued + 2 TTL` (the service and the test read the same monotonic
    // clock); the checks in between have about one TTL.
    let late = f
        .upload_ticket(&t, Some("/late.txt"), "x", 1)
        .await
        .unwrap();
    let issued = Instant::now();
    tokio::time::sleep_until((issued + TTL).into()).await;
    let pre = preflight(&late.url, ORIGIN, "PUT").await;
    assert_eq!(pre.status, 204);
    assert_eq!(pre.header("access-control-allow-origin"), Some(ORIGIN));
    let resp = put(&late, b"x", &[("origin", ORIGIN)]).await;
    assert_eq!(
        (resp.status, resp.code().as_str()),
        (404, "ASSET_TICKET_INVALID")
    );
    assert_eq!(resp.header("access-control-allow-origin"), Some(ORIGIN));
    assert!(!t.assets_root().join("late.txt").exists());

    // After one more TTL the id is forgotten: no CORS any more.
    tokio::time::sleep_until((issued + 2 * TTL).into()).await;
    let resp = put(&late, b"x", &[("origin", ORIGIN)]).await;
    assert_eq!(resp.status, 404);
    assert_eq!(resp.header("access-control-allow-origin"), None);
}

/// A page cannot pile up tickets: at most 64 open ones per thread.
#[tokio::test]
async fn open_tickets_are_capped_per_thread() {
    let f = Fixture::new().await;
    let t = f.thread().await;
    let other_thread = f.thread().await;
    assert_eq!(f.put(&t, "/n.txt", b"n").await.status, 201);
    let mut first = None;
    for _ in 0..64 {
        let ticket = f.upload_ticket(&t, Some("/n.txt"), "x", 1).await.unwrap();
        first.get_or_insert(ticket);
    }
    let refused = f.upload_ticket(&t, Some("/n.txt"), "x", 1).await;
    let status = refused.unwrap_err();
    assert_eq!(code_of_status(&status).as_deref(), Some("INVALID_INPUT"));
    assert!(
        status.message().contains("too many open tickets"),
        "{}",
        status.message()
    );
    assert_eq!(code(f.download_ticket(&t, "/n.txt").await), "INVALID_INPUT");
    // Another thread is not affected.
    f.upload_ticket(&other_thread, Some("/n.txt"), "x", 1)
        .await
        .unwrap();
    // Using a ticket frees its place.
    assert_eq!(
        put(&first.unwrap(), b"n", &[("origin", ORIGIN)])
            .await
            .status,
        201
    );
    f.download_ticket(&t, "/n.txt").await.unwrap();
}

/// An explicit workspace deleted behind Pedelec's back: WORKSPACE_OPEN_FAILED,
/// not INTERNAL or an empty list.
#[tokio::test]
async fn a_deleted_workspace_is_workspace_open_failed() {
    let f = Fixture::new().await;
    let dir = f.env.root.path().join("app-ws");
    std::fs::create_dir(&dir).unwrap();
    f.env
        .grant_site(ORIGIN, pb::AccessLevel::Full, &["codex"], &[&dir])
        .await;
    let mut request = create_session_request(Some("codex"));
    request.workspace_path = Some(dir.display().to_string());
    let created = f
        .env
        .session()
        .await
        .create_session(request)
        .await
        .unwrap()
        .into_inner();
    let t = Thread {
        id: created.session_id,
        workspace: dir.clone(),
    };
    assert_eq!(f.put(&t, "/a.txt", b"a").await.status, 201);
    let early = f.download_ticket(&t, "/a.txt").await.unwrap();

    std::fs::remove_dir_all(&dir).unwrap();
    let mut assets = f.assets.clone();
    let list = assets
        .list(pb::ListAssetsRequest {
            session_id: t.id.clone(),
            origin: ORIGIN.into(),
        })
        .await;
    assert_eq!(code(list), "WORKSPACE_OPEN_FAILED");
    assert_eq!(
        code(f.upload_ticket(&t, Some("/b.txt"), "x", 1).await),
        "WORKSPACE_OPEN_FAILED"
    );
    assert_eq!(
        code(f.download_ticket(&t, "/a.txt").await),
        "WORKSPACE_OPEN_FAILED"
    );
    let read = assets.read(read_request(&t, "/a.txt")).await;
    assert_eq!(code(read), "WORKSPACE_OPEN_FAILED");
    let resp = get(&early, &[("origin", ORIGIN)]).await;
    assert_eq!(
        (resp.status, resp.code().as_str()),
        (409, "WORKSPACE_OPEN_FAILED")
    );
    // A file where the folder was is no workspace either, and nothing is created.
    std::fs::write(&dir, b"not a folder").unwrap();
    assert_eq!(
        code(f.upload_ticket(&t, Some("/b.txt"), "x", 1).await),
        "WORKSPACE_OPEN_FAILED"
    );
    assert!(dir.is_file());
}
