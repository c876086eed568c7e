//! Every client checks whom it talks to before it sends anything
//! (docs/security.md, "Other users"): the native host (hello and requests),
//! `pedelec-cli` (admin commands and tool calls), `pedelecd status` and
//! `doctor`, and `pedelec-agent` refuse a runtime dir that is not the user's
//! own or that another user may write to, and a socket served by a process of
//! another uid, with CORE_UNAVAILABLE (or their own form of it) naming the
//! socket and the reason. Sockets stand ready at every service's name, and
//! the tests check that no client connected to them (a folder refused) or
//! sent a byte (a server refused). Runs as root, to make a folder and a
//! server of another user (`nobody`, through `setpriv`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, ChildStdout, Output, Stdio};

use pedelec_common::ServiceName;
use pedelec_tests::*;
use serde_json::{Value, json};

const NOBODY: u32 = 65534;

/// Every socket a client may look for.
const SOCKETS: [ServiceName; 5] = [
    ServiceName::Session,
    ServiceName::ToolBridge,
    ServiceName::Provider,
    ServiceName::Asset,
    ServiceName::Launcher,
];

fn must_be_root(why: &str) {
    if !pedelec_common::process::is_root() {
        panic!("this test must run as root (CI and the dev machines do) to {why}");
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asks every client for something that needs the services under `env`;
/// each must refuse with a message holding `reason` and the runtime dir (a
/// web page: the reason only).
/// `checked(client)` runs after each client is done, to see what reached
/// the sockets.
async fn every_client_refuses(env: &TestEnv, reason: &str, mut checked: impl FnMut(&str)) {
    let rt = env.runtime_dir().display().to_string();
    let says = |what: &str, said: &str| {
        assert!(
            said.contains(reason) && said.contains(&rt),
            "{what} did not name the runtime dir {rt} and {reason:?}: {said}"
        );
    };

    // The native host: hello answers (the services are only not running);
    // every request that needs them is refused with the reason, and
    // pedelecd is not started for it.
    let mut host = Host::spawn(env, EXTENSION);
    let hello = host
        .ok("hello", json!({"protocolVersion": 2, "client": "test"}))
        .await;
    assert_eq!(hello["coreRunning"], false, "{hello}");
    for (kind, payload) in [
        ("list_providers", json!({})),
        ("create_session", json!({"provider": "codex"})),
        ("get_session", json!({"sessionId": "thr_x"})),
    ] {
        let reply = host.call(kind, payload).await;
        assert_eq!(
            reply["error"]["code"], "CORE_UNAVAILABLE",
            "{kind}: {reply}"
        );
        // A web page is told why, but not where: the runtime dir names the
        // user (docs/security.md, "What a page is not shown").
        let told = reply["error"]["message"].as_str().unwrap_or("");
        assert!(
            told.contains(reason) && !told.contains(&rt) && told.contains("<path>"),
            "the native host's {kind}: {told}"
        );
    }
    let (code, _) = host.close_and_wait().await;
    assert_eq!(code, Some(0));
    checked("the native host");

    // pedelec-cli: admin commands (exit 2, the reason on stderr) and a tool
    // call as an agent makes it (exit 2, CORE_UNAVAILABLE).
    for args in [&["sessions", "list"][..], &["providers"][..]] {
        let out = env
            .command(bin("pedelec-cli"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "pedelec-cli {args:?}: {out:?}");
        says(&format!("pedelec-cli {args:?}"), &text(&out));
        checked("pedelec-cli");
    }
    let out = env
        .command(bin("pedelec-cli"))
        .env("PEDELEC_THREAD_ID", "thr_x")
        .env("PEDELEC_TOOL_TOKEN", "a-token")
        .args(["tool-call", "get_page", "{}"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "tool-call: {out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["code"], "CORE_UNAVAILABLE", "{doc}");
    says(
        "pedelec-cli tool-call",
        doc["error"]["message"].as_str().unwrap(),
    );
    checked("pedelec-cli tool-call");

    // pedelecd status and doctor.
    let out = env.pedelecd(&["status"]);
    assert_eq!(out.status.code(), Some(1), "status: {out:?}");
    says("pedelecd status", &text(&out));
    checked("pedelecd status");
    let out = env.pedelecd(&["doctor"]);
    assert_eq!(out.status.code(), Some(1), "doctor: {out:?}");
    says("pedelecd doctor", &text(&out));
    checked("pedelecd doctor");

    // pedelec-agent reaches the page's tools before it asks the model.
    let ws = env.root.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut agent = env
        .command(bin("pedelec-agent"))
        .env("PEDELEC_THREAD_ID", "thr_x")
        .env("PEDELEC_TOOL_TOKEN", "a-token")
        .args(["--model", "m", "--workspace"])
        .arg(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    agent.stdin.take().unwrap().write_all(b"hi").unwrap();
    let out = agent.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "pedelec-agent: {out:?}");
    let error = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["type"] == "error")
        .unwrap_or_else(|| panic!("no error line: {out:?}"));
    says("pedelec-agent", &error.to_string());
    checked("pedelec-agent");
}

/// A runtime dir another user owns, or that its group or every user may
/// write to: no client connects to the sockets in it (they would answer),
/// each says why, and the folder is left as it was, with nothing started.
#[tokio::test]
async fn a_runtime_dir_of_another_user_or_writable_by_others_is_refused_by_every_client() {
    must_be_root("chown a folder to another uid");
    let cases: [(&str, u32, Option<u32>, &str); 4] = [
        (
            "another owner",
            0o700,
            Some(NOBODY),
            "is owned by uid 65534",
        ),
        (
            "group-writable",
            0o770,
            None,
            "writable by its group (mode 0770)",
        ),
        (
            "world-writable",
            0o777,
            None,
            "writable by every user (mode 0777)",
        ),
        (
            "world-writable, sticky",
            0o1777,
            None,
            "writable by every user (mode 1777)",
        ),
    ];
    for (what, mode, owner, reason) in cases {
        let env = TestEnv::with_codex_stub();
        let rt = env.runtime_dir();
        // Sockets that would be connected to: this test's own, so only the
        // folder check can refuse them.
        let listeners: Vec<(ServiceName, UnixListener)> = SOCKETS
            .iter()
            .map(|s| {
                let l = UnixListener::bind(env.socket(*s)).unwrap();
                l.set_nonblocking(true).unwrap();
                (*s, l)
            })
            .collect();
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&rt, Some(uid), Some(uid)).unwrap();
        }
        every_client_refuses(&env, reason, |client| {
            for (service, listener) in &listeners {
                assert_eq!(
                    listener.accept().map(|_| ()).unwrap_err().kind(),
                    std::io::ErrorKind::WouldBlock,
                    "{what}: {client} connected to {}",
                    service.socket_file()
                );
            }
        })
        .await;
        let meta = std::fs::metadata(&rt).unwrap();
        assert_eq!(meta.mode() & 0o7777, mode, "{what}: the folder was changed");
        assert_eq!(
            meta.uid(),
            owner.unwrap_or(0),
            "{what}: the owner was changed"
        );
        let names: Vec<_> = std::fs::read_dir(&rt)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names.len(),
            SOCKETS.len(),
            "{what}: a file was made: {names:?}"
        );
        let started: Vec<String> = processes_using(&rt)
            .into_iter()
            .map(|pid| format!("{pid} {}", command_line(pid)))
            .collect();
        assert!(
            started.is_empty(),
            "{what}: a process was started: {started:?}"
        );
        std::os::unix::fs::chown(&rt, Some(0), Some(0)).unwrap();
    }
}

/// A server of another user: `nobody` listens on every socket name (in a
/// folder of its own, then moved into the runtime dir, which stays root's
/// and private) and reports each connection and the bytes it received.
struct Stranger {
    child: Child,
    report: BufReader<ChildStdout>,
    _dir: tempfile::TempDir,
}

/// Listens on the sockets named in argv; for each connection prints
/// `conn <name> <bytes received>` once it closed (or went quiet for 5 s). A
/// connection that sends `END` is the test's own: what reached the other
/// sockets before it is accepted and reported, then `done`.
const STRANGER: &str = r#"
import os, select, socket, sys
folder, names = sys.argv[1], sys.argv[2:]
listeners = {}
for name in names:
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(folder, name))
    s.listen(64)
    listeners[s] = name
print("ready", flush=True)

def take(conn, name):
    conn.settimeout(5)
    got = b""
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            got += data
            if got == b"END":
                conn.close()
                return True
    except OSError:
        pass
    conn.close()
    print("conn %s %d" % (name, len(got)), flush=True)
    return False

while True:
    ready, _, _ = select.select(list(listeners), [], [])
    for s in ready:
        conn, _ = s.accept()
        if take(conn, listeners[s]):
            for other, name in listeners.items():
                other.setblocking(False)
                while True:
                    try:
                        late, _ = other.accept()
                    except BlockingIOError:
                        break
                    late.setblocking(True)
                    take(late, name)
                other.setblocking(True)
            print("done", flush=True)
"#;

impl Stranger {
    fn serve(env: &TestEnv) -> Stranger {
        let dir = tempfile::Builder::new()
            .prefix("pdln")
            .tempdir_in("/tmp")
            .unwrap();
        std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        let names: Vec<&str> = SOCKETS.iter().map(|s| s.socket_file()).collect();
        let mut child = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(["/usr/bin/python3", "-c", STRANGER])
            .arg(dir.path())
            .args(&names)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv python3");
        let mut report = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        report.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "the stranger did not start");
        // Moved into the runtime dir (root may): a socket is reached by
        // its inode, so its server stays nobody's.
        for name in &names {
            std::fs::rename(dir.path().join(name), env.runtime_dir().join(name)).unwrap();
        }
        Stranger {
            child,
            report,
            _dir: dir,
        }
    }

    /// The connections since the last call: (socket, bytes received).
    fn connections(&mut self, env: &TestEnv) -> Vec<(String, usize)> {
        let mut end = UnixStream::connect(env.socket(ServiceName::Launcher)).unwrap();
        end.write_all(b"END").unwrap();
        drop(end);
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            assert!(
                self.report.read_line(&mut line).unwrap() > 0,
                "the stranger exited"
            );
            match line.trim_end().split(' ').collect::<Vec<_>>()[..] {
                ["done"] => return seen,
                ["conn", name, bytes] => seen.push((name.to_string(), bytes.parse().unwrap())),
                _ => panic!("the stranger said {line:?}"),
            }
        }
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A socket served by a process of another uid in the user's own private
/// runtime dir (as if another user had put it there): every client connects,
/// sees the peer's uid, and hangs up without sending a byte, saying who
/// serves it.
#[tokio::test]
async fn a_socket_served_by_another_uid_gets_not_a_byte_from_any_client() {
    must_be_root("run a server as another uid");
    let env = TestEnv::with_codex_stub();
    let rt = env.runtime_dir();
    std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut stranger = Stranger::serve(&env);
    for s in SOCKETS {
        let meta = std::fs::metadata(env.socket(s)).unwrap();
        assert_eq!(meta.uid(), NOBODY, "{}", s.socket_file());
    }
    every_client_refuses(
        &env,
        "is served by a process of uid 65534, not of this user (uid 0)",
        |client| {
            let seen = stranger.connections(&env);
            assert!(!seen.is_empty(), "{client} never connected");
            for (socket, bytes) in seen {
                assert_eq!(bytes, 0, "{client} sent {bytes} bytes to {socket}");
            }
        },
    )
    .await;
    assert!(
        processes_using(&rt).is_empty(),
        "a process was started for the stranger's sockets"
    );
    assert!(Path::new(&env.socket(ServiceName::Session)).exists());
}
