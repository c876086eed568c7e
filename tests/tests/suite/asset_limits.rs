//! AssetService's answers to a page and its disk quotas, and pedelec-agent's
//! file tools, over real processes: `pedelecd up`, tickets and bodies over
//! gRPC and over real HTTP/1.1 to the loopback transfer server, and the real
//! `pedelec-agent` against the mock Ollama server driving its tool calls.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use pedelec_common::clients::AssetClient;
use pedelec_proto::v1 as pb;
use pedelec_tests::mock_ollama::*;
use pedelec_tests::*;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const OTHER_ORIGIN: &str = "https://other.example";

struct Fixture {
    env: TestEnv,
    _launcher: Launcher,
    assets: AssetClient,
}

struct Thread {
    id: String,
    origin: String,
    workspace: PathBuf,
}

impl Thread {
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

    async fn thread_of(&self, origin: &str, workspace: Option<&Path>) -> Thread {
        let mut request = create_session_request(Some("codex"));
        request.origin = origin.into();
        request.workspace_path = workspace.map(|w| w.display().to_string());
        let created = self
            .env
            .session()
            .await
            .create_session(request)
            .await
            .unwrap()
            .into_inner();
        Thread {
            id: created.session_id,
            origin: origin.into(),
            workspace: PathBuf::from(created.snapshot.unwrap().workspace_path),
        }
    }

    async fn thread(&self) -> Thread {
        self.thread_of(ORIGIN, None).await
    }

    async fn upload_ticket(
        &self,
        t: &Thread,
        path: &str,
        size: u64,
    ) -> Result<pb::Ticket, tonic::Status> {
        self.assets
            .clone()
            .create_upload_ticket(pb::CreateUploadTicketRequest {
                session_id: t.id.clone(),
                origin: t.origin.clone(),
                target_path: Some(path.into()),
                name: String::new(),
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
                origin: t.origin.clone(),
                path: path.into(),
            })
            .await
            .map(|r| r.into_inner())
    }

    /// A gRPC `Upload` of `data` to `path`, in one data chunk.
    async fn grpc_upload(
        &self,
        t: &Thread,
        path: &str,
        data: &[u8],
    ) -> Result<pb::Asset, tonic::Status> {
        let header = pb::UploadHeader {
            session_id: t.id.clone(),
            origin: t.origin.clone(),
            path: path.into(),
            size_bytes: data.len() as u64,
        };
        let messages = vec![
            pb::UploadChunk {
                chunk: Some(pb::upload_chunk::Chunk::Header(header)),
            },
            pb::UploadChunk {
                chunk: Some(pb::upload_chunk::Chunk::Data(data.to_vec())),
            },
        ];
        self.assets
            .clone()
            .upload(tokio_stream::iter(messages))
            .await
            .map(|r| r.into_inner())
    }

    async fn read(&self, t: &Thread, path: &str) -> Result<Vec<u8>, tonic::Status> {
        let mut stream = self
            .assets
            .clone()
            .read(pb::ReadAssetRequest {
                session_id: t.id.clone(),
                origin: t.origin.clone(),
                path: path.into(),
            })
            .await?
            .into_inner();
        let mut out = Vec::new();
        while let Some(chunk) = stream.message().await? {
            out.extend(chunk.data);
        }
        Ok(out)
    }

    async fn list(&self, t: &Thread) -> Result<Vec<pb::Asset>, tonic::Status> {
        self.assets
            .clone()
            .list(pb::ListAssetsRequest {
                session_id: t.id.clone(),
                origin: t.origin.clone(),
            })
            .await
            .map(|r| r.into_inner().assets)
    }
}

// ---------------------------------------------------------------------------
// One HTTP/1.1 request per connection (`Connection: close`), every byte the
// test's own.

#[derive(Debug)]
struct HttpAnswer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpAnswer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `(code, message)` of an error body.
    fn error(&self) -> (String, String) {
        let json: Json = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body))
        });
        (
            json["code"].as_str().unwrap_or_default().to_string(),
            json["message"].as_str().unwrap_or_default().to_string(),
        )
    }
}

async fn http(method: &str, ticket: &pb::Ticket, body: Option<&[u8]>) -> HttpAnswer {
    let rest = ticket.url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("URL with a path");
    let mut head = format!(
        "{method} /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nOrigin: {ORIGIN}\r\nAuthorization: Bearer {}\r\n",
        ticket.token
    );
    if let Some(body) = body {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    if let Some(body) = body {
        // The server may answer before reading the body; its answer counts.
        let _ = s.write_all(body).await;
    }
    let mut raw = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = vec![0; 64 * 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.expect("an answer within the ceiling");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&raw)));
    let head = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    HttpAnswer {
        status,
        headers: lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect(),
        body: raw[end + 4..].to_vec(),
    }
}

/// Pedelec temp files anywhere under `dir`.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e
                .file_name()
                .to_string_lossy()
                .starts_with(".pedelec-upload-")
            {
                out.push(e.path());
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// What a page is told.

/// A message a page receives names no local path: not the test's temp root
/// (under which are the workspaces, the data dir, the home and the folder
/// outside), nor any other absolute path; it names `page_path`, the path the
/// page gave, when there is one.
fn assert_page_safe(what: &str, env: &TestEnv, code: &str, message: &str, page_path: Option<&str>) {
    let root = env.root.path().display().to_string();
    assert!(
        !message.contains(&root) && !message.contains("/tmp") && !message.contains("/proc"),
        "{what}: {code} {message:?} names a local path"
    );
    if let Some(path) = page_path {
        assert!(
            message.contains(path),
            "{what}: {code} {message:?} does not name {path}"
        );
    }
}

/// The code and message of a refused gRPC call, checked to be page-safe.
fn refused<T: std::fmt::Debug>(
    what: &str,
    env: &TestEnv,
    result: Result<T, tonic::Status>,
    page_path: Option<&str>,
) -> String {
    let status = result.expect_err(what);
    let code =
        code_of_status(&status).unwrap_or_else(|| panic!("{what}: no Pedelec code: {status:?}"));
    assert_page_safe(what, env, &code, status.message(), page_path);
    code
}

/// The status and code of a refused transfer, checked to be page-safe.
fn refused_http(
    what: &str,
    env: &TestEnv,
    answer: &HttpAnswer,
    page_path: Option<&str>,
) -> (u16, String) {
    let (code, message) = answer.error();
    assert_page_safe(what, env, &code, &message, page_path);
    (answer.status, code)
}

/// Makes `dir` refuse new entries: mode 0500 for a user; root passes every
/// mode check, so then the immutable attribute (`chattr +i`). Undone on
/// drop, so the temp dir can go.
struct Locked(PathBuf);

impl Locked {
    fn new(dir: &Path) -> Locked {
        use std::os::unix::fs::PermissionsExt;
        let locked = Locked(dir.to_path_buf());
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        if std::fs::write(dir.join("probe"), b"x").is_ok() {
            std::fs::remove_file(dir.join("probe")).unwrap();
            let ok = std::process::Command::new("chattr")
                .arg("+i")
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "`chattr +i {}` failed: as root this test needs chattr (e2fsprogs) and a file system with the immutable attribute",
                dir.display()
            );
        }
        assert!(
            std::fs::write(dir.join("probe"), b"x").is_err(),
            "the locked folder still takes new files"
        );
        locked
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o700));
    }
}

#[tokio::test]
async fn page_bound_errors_name_no_local_path() {
    let f = Fixture::start(TestEnv::with_codex_stub()).await;
    let env = &f.env;
    let t = f.thread().await;
    f.grpc_upload(&t, "/real/file.txt", b"real").await.unwrap();
    let root = t.assets_root();
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), b"secret").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("real/leaf.txt")).unwrap();
    std::fs::create_dir(root.join("locked")).unwrap();

    // Missing, a folder, a symlink out (as the file and on the way), a file
    // used as a folder: over gRPC.
    for (path, expected) in [
        ("/missing.txt", "ASSET_NOT_FOUND"),
        ("/real", "ASSET_NOT_FOUND"),
        ("/real/leaf.txt", "ASSET_PATH_INVALID"),
        ("/link/secret.txt", "ASSET_PATH_INVALID"),
        ("/real/file.txt/x", "ASSET_PATH_INVALID"),
    ] {
        let what = format!("download ticket for {path}");
        assert_eq!(
            refused(&what, env, f.download_ticket(&t, path).await, Some(path)),
            expected,
            "{what}"
        );
        let what = format!("Read of {path}");
        assert_eq!(
            refused(&what, env, f.read(&t, path).await, Some(path)),
            expected,
            "{what}"
        );
    }
    for path in ["/link/new.txt", "/real/leaf.txt", "/real/file.txt/x"] {
        let what = format!("upload ticket for {path}");
        assert_eq!(
            refused(&what, env, f.upload_ticket(&t, path, 1).await, Some(path)),
            "ASSET_PATH_INVALID",
            "{what}"
        );
        let what = format!("Upload to {path}");
        assert_eq!(
            refused(&what, env, f.grpc_upload(&t, path, b"x").await, Some(path)),
            "ASSET_PATH_INVALID",
            "{what}"
        );
    }

    // Denied: a folder that takes no new file.
    let ticket = f.upload_ticket(&t, "/locked/x.txt", 1).await.unwrap();
    let locked = Locked::new(&root.join("locked"));
    let what = "Upload into a locked folder";
    assert_eq!(
        refused(
            what,
            env,
            f.grpc_upload(&t, "/locked/x.txt", b"x").await,
            Some("/locked/x.txt")
        ),
        "INTERNAL"
    );
    let answer = http("PUT", &ticket, Some(b"x")).await;
    assert_eq!(
        refused_http(
            "PUT into a locked folder",
            env,
            &answer,
            Some("/locked/x.txt")
        ),
        (500, "INTERNAL".to_string())
    );
    drop(locked);

    // Over HTTP: a symlink planted on the way after the ticket, the file
    // swapped for a symlink after the ticket, the file removed.
    let ticket = f.upload_ticket(&t, "/later/x.txt", 1).await.unwrap();
    std::os::unix::fs::symlink(&outside, root.join("later")).unwrap();
    let answer = http("PUT", &ticket, Some(b"x")).await;
    assert_eq!(
        refused_http(
            "PUT through a planted symlink",
            env,
            &answer,
            Some("/later/x.txt")
        ),
        (400, "ASSET_PATH_INVALID".to_string())
    );
    assert!(!outside.join("x.txt").exists());
    f.grpc_upload(&t, "/swapped.txt", b"mine").await.unwrap();
    let ticket = f.download_ticket(&t, "/swapped.txt").await.unwrap();
    std::fs::remove_file(root.join("swapped.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("swapped.txt")).unwrap();
    let answer = http("GET", &ticket, None).await;
    assert_eq!(
        refused_http(
            "GET of a file swapped for a symlink",
            env,
            &answer,
            Some("/swapped.txt")
        ),
        (400, "ASSET_PATH_INVALID".to_string())
    );
    let ticket = f.download_ticket(&t, "/real/file.txt").await.unwrap();
    std::fs::remove_file(root.join("real/file.txt")).unwrap();
    let answer = http("GET", &ticket, None).await;
    assert_eq!(
        refused_http(
            "GET of a removed file",
            env,
            &answer,
            Some("/real/file.txt")
        ),
        (404, "ASSET_NOT_FOUND".to_string())
    );

    // The thread's assets folder itself on a symlink: the page gave no path
    // there, and is told no path.
    let t2 = f.thread().await;
    f.list(&t2).await.unwrap();
    std::fs::create_dir_all(outside.join("rt")).unwrap();
    std::os::unix::fs::symlink(outside.join("rt"), t2.workspace.join(".pedelec-runtime")).unwrap();
    assert_eq!(
        refused(
            "List through a symlinked .pedelec-runtime",
            env,
            f.list(&t2).await,
            None
        ),
        "ASSET_PATH_INVALID"
    );
    assert_eq!(
        refused(
            "upload ticket through a symlinked .pedelec-runtime",
            env,
            f.upload_ticket(&t2, "/a.txt", 1).await,
            None
        ),
        "ASSET_PATH_INVALID"
    );
    assert!(
        std::fs::read_dir(outside.join("rt"))
            .unwrap()
            .next()
            .is_none(),
        "nothing made outside"
    );

    // An explicit workspace deleted behind Pedelec's back.
    let dir = env.root.path().join("app-ws");
    std::fs::create_dir(&dir).unwrap();
    env.grant_site(ORIGIN, pb::AccessLevel::Full, &["codex"], &[&dir])
        .await;
    let t3 = f.thread_of(ORIGIN, Some(&dir)).await;
    f.grpc_upload(&t3, "/a.txt", b"a").await.unwrap();
    let ticket = f.download_ticket(&t3, "/a.txt").await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        refused("List in a deleted workspace", env, f.list(&t3).await, None),
        "WORKSPACE_OPEN_FAILED"
    );
    assert_eq!(
        refused(
            "Read in a deleted workspace",
            env,
            f.read(&t3, "/a.txt").await,
            None
        ),
        "WORKSPACE_OPEN_FAILED"
    );
    let answer = http("GET", &ticket, None).await;
    assert_eq!(
        refused_http("GET in a deleted workspace", env, &answer, None),
        (409, "WORKSPACE_OPEN_FAILED".to_string())
    );
}

/// `%XX` sequences of an RFC 8187 value decoded, as a browser does.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[tokio::test]
async fn a_download_is_an_attachment_that_is_never_sniffed() {
    let f = Fixture::start(TestEnv::with_codex_stub()).await;
    let t = f.thread().await;
    let name = "Q3 \"draft\" ünï;100%.html";
    let path = format!("/docs/{name}");
    let body = b"<script>alert(document.cookie)</script>";
    f.grpc_upload(&t, &path, body).await.unwrap();
    let ticket = f.download_ticket(&t, &path).await.unwrap();
    let answer = http("GET", &ticket, None).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, body);
    assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    let disposition = answer
        .header("content-disposition")
        .expect("Content-Disposition");
    let (kind, params) = disposition.split_once(';').expect("parameters");
    assert_eq!(kind, "attachment", "{disposition}");
    // RFC 6266: an ASCII fallback `filename`, without a quote or backslash
    // that would end or escape it, then the exact name as `filename*`.
    let (fallback, rest) = params
        .trim_start()
        .strip_prefix("filename=\"")
        .and_then(|p| p.split_once('"'))
        .expect("a quoted filename first");
    assert!(
        fallback.is_ascii() && !fallback.contains('\\') && fallback.ends_with(".html"),
        "{disposition}"
    );
    let exact = rest
        .strip_prefix("; filename*=UTF-8''")
        .expect("filename*=UTF-8'' next");
    assert!(
        exact
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~%".contains(&b)),
        "only attr-chars and %XX: {disposition}"
    );
    assert_eq!(String::from_utf8(percent_decode(exact)).unwrap(), name);

    // A refusal, too, is never sniffed.
    let again = http("GET", &ticket, None).await;
    assert_eq!(again.status, 404);
    assert_eq!(again.header("x-content-type-options"), Some("nosniff"));
}

#[tokio::test]
async fn uploads_stop_at_the_thread_and_the_origin_quota() {
    let mut env = TestEnv::with_codex_stub();
    env.extra_env
        .insert("PEDELEC_ASSET_THREAD_QUOTA_BYTES".into(), "1000".into());
    env.extra_env
        .insert("PEDELEC_ASSET_ORIGIN_QUOTA_BYTES".into(), "2500".into());
    let f = Fixture::start(env).await;
    let env = &f.env;
    let a = f.thread().await;

    // One thread: 600 over gRPC, then 500 more is refused before a byte
    // moves; 400 more over HTTP fills it exactly.
    f.grpc_upload(&a, "/a.bin", &[1; 600]).await.unwrap();
    let over = f.upload_ticket(&a, "/b.bin", 500).await;
    assert_eq!(
        refused("ticket past the thread's quota", env, over, None),
        "LIMIT_EXCEEDED"
    );
    let ticket = f.upload_ticket(&a, "/b.bin", 400).await.unwrap();
    assert_eq!(http("PUT", &ticket, Some(&[2; 400])).await.status, 201);
    // Replacing a file counts only the difference.
    let ticket = f.upload_ticket(&a, "/a.bin", 600).await.unwrap();
    assert_eq!(http("PUT", &ticket, Some(&[3; 600])).await.status, 201);
    let over = f.grpc_upload(&a, "/c.bin", b"x").await;
    let status = over.as_ref().expect_err("Upload past the thread's quota");
    assert!(status.message().contains("1000"), "{status:?}");
    assert_eq!(
        refused("Upload past the thread's quota", env, over, None),
        "LIMIT_EXCEEDED"
    );
    assert!(!a.assets_root().join("c.bin").exists());

    // Two tickets that each fit, but not both: the second body is refused
    // with 507 when it arrives, the first stays whole, nothing half written.
    let b = f.thread().await;
    let x = f.upload_ticket(&b, "/x.bin", 600).await.unwrap();
    let y = f.upload_ticket(&b, "/y.bin", 600).await.unwrap();
    assert_eq!(http("PUT", &x, Some(&[4; 600])).await.status, 201);
    let answer = http("PUT", &y, Some(&[5; 600])).await;
    assert_eq!(
        refused_http("PUT past the thread's quota", env, &answer, None),
        (507, "LIMIT_EXCEEDED".to_string())
    );
    assert!(!b.assets_root().join("y.bin").exists());
    assert_eq!(
        std::fs::read(b.assets_root().join("x.bin")).unwrap(),
        [4; 600]
    );

    // The origin: 1000 + 600 so far. A third thread already holds 500 bytes
    // the agent wrote (counted from the disk), so 500 more would pass 2500.
    let c = f.thread().await;
    f.list(&c).await.unwrap();
    std::fs::create_dir_all(c.assets_root()).unwrap();
    std::fs::write(c.assets_root().join("agent.txt"), [6; 500]).unwrap();
    let over = f.upload_ticket(&c, "/c.bin", 500).await;
    let status = over.as_ref().expect_err("ticket past the origin's quota");
    assert!(status.message().contains("2500"), "{status:?}");
    assert_eq!(
        refused("ticket past the origin's quota", env, over, None),
        "LIMIT_EXCEEDED"
    );
    f.grpc_upload(&c, "/c.bin", &[7; 400]).await.unwrap();
    let full = f.grpc_upload(&c, "/d.bin", b"x").await;
    assert_eq!(
        refused("Upload with the origin's quota spent", env, full, None),
        "LIMIT_EXCEEDED"
    );

    // Another origin is not affected.
    env.grant_site(OTHER_ORIGIN, pb::AccessLevel::Full, &["codex"], &[])
        .await;
    let d = f.thread_of(OTHER_ORIGIN, None).await;
    f.grpc_upload(&d, "/d.bin", &[8; 900]).await.unwrap();

    for t in [&a, &b, &c, &d] {
        assert_eq!(temp_files(&t.assets_root()), Vec::<PathBuf>::new());
    }
}

// ---------------------------------------------------------------------------
// pedelec-agent's file tools.

const THREAD: &str = "thr_0123456789abcdef0123456789abcdef";

/// Answers with the tool calls in `calls`, one per round, then with text.
fn scripted(calls: Vec<(&'static str, Json)>) -> impl Fn(&Recorded) -> Reply {
    move |req| {
        let answered = req
            .messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        match calls.get(answered) {
            Some((name, args)) => tool_call_reply(name, args.clone()),
            None => text_reply(&["done"], 1, 1),
        }
    }
}

/// Runs pedelec-agent once on `root/ws` for [`THREAD`]; returns its exit code
/// and stderr.
async fn run_agent(root: &Path, mock: &MockOllama) -> (Option<i32>, String) {
    let mut child = tokio::process::Command::new(bin("pedelec-agent"))
        .env_clear()
        .env("HOME", root)
        .env("PATH", "/usr/bin:/bin")
        .env("PEDELEC_RUNTIME_DIR", root.join("rt"))
        .env("PEDELEC_OLLAMA_ENDPOINT", &mock.url)
        .env("PEDELEC_THREAD_ID", THREAD)
        .args(["--model", "llama3.2", "--workspace"])
        .arg(root.join("ws"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn pedelec-agent");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"look around").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("pedelec-agent hung")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_agents_file_tools_stay_beneath_the_workspace_and_out_of_pedelecs_folder() {
    let mock = MockOllama::start(scripted(vec![
        (
            "read_file",
            json!({"path": ".PEDELEC-RUNTIME/agent/notes.json"}),
        ),
        ("list_files", json!({"path": ".Pedelec-Runtime/assets"})),
        (
            "read_file",
            json!({"path": ".Pedelec-Runtime/assets/thr_other/x.txt"}),
        ),
        ("read_file", json!({"path": "pipe"})),
        ("read_file", json!({"path": "out/secret.txt"})),
        ("list_files", json!({"path": "."})),
        (
            "write_asset",
            json!({"name": "report.md", "content": "# mine"}),
        ),
    ]))
    .await;
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir_all(root.path().join("rt")).unwrap();
    for (path, text) in [
        (".PEDELEC-RUNTIME/agent/notes.json", "upper plover"),
        (".Pedelec-Runtime/assets/thr_other/x.txt", "other plover"),
    ] {
        std::fs::create_dir_all(ws.join(path).parent().unwrap()).unwrap();
        std::fs::write(ws.join(path), text).unwrap();
    }
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "outside plover").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(ws.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());

    let (code, stderr) = run_agent(root.path(), &mock).await;
    assert_eq!(code, Some(0), "{stderr}");
    let last = mock.chats().pop().unwrap();
    let answers: Vec<Json> = last
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(answers.len(), 7);
    for refused in &answers[..3] {
        assert_eq!(refused["error"]["code"], "ASSET_PATH_INVALID", "{refused}");
    }
    assert_eq!(
        answers[3]["error"]["code"], "INVALID_INPUT",
        "a FIFO is no file: {}",
        answers[3]
    );
    assert_eq!(
        answers[4]["error"]["code"], "ASSET_PATH_INVALID",
        "{}",
        answers[4]
    );
    let entries = &answers[5]["result"]["entries"];
    assert!(
        entries
            .as_array()
            .unwrap()
            .contains(&json!({"name": "out", "type": "symlink"})),
        "{entries}"
    );
    assert_eq!(answers[6]["ok"], true, "{}", answers[6]);
    assert_eq!(
        std::fs::read_to_string(
            ws.join(".pedelec-runtime/assets")
                .join(THREAD)
                .join("report.md")
        )
        .unwrap(),
        "# mine"
    );
    let text = last.body.to_string();
    assert!(
        !text.contains("plover"),
        "a private or outside file leaked: {text}"
    );
    for e in std::fs::read_dir(&outside).unwrap() {
        assert_eq!(
            e.unwrap().file_name(),
            "secret.txt",
            "nothing written outside"
        );
    }
}
