//! What ProviderService lets reach an agent and what it lets reach a page,
//! over the real processes with stub agent CLIs (docs/security.md,
//! "Filesystem view", "What a page is not shown", "argv"):
//! - a confined agent, at full access and below, reaches none of the user's
//!   desktop session (its D-Bus bus, systemd's user manager, Wayland, X11,
//!   gpg-agent; the ssh agent at full access only), gets none of the
//!   variables that name them, runs in a session of its own, and still calls
//!   a page tool through `toolbridge.sock`;
//! - a failing agent's stderr and a `--version`'s output stay in the log: a
//!   page hears fixed words, and no absolute path;
//! - a prompt on a CLI's command line is capped, and one that starts with `-`
//!   is one argument.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_common::json::to_struct;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::json;

const SESSION: &str = "5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c";

/// A successful cursor turn's output.
fn cursor_ok() -> String {
    format!(
        r#"echo '{{"type":"system","subtype":"init","cwd":"/w","session_id":"{SESSION}","model":"m"}}'
echo '{{"type":"result","subtype":"success","duration_ms":5,"is_error":false,"result":"PROBED","session_id":"{SESSION}"}}'"#
    )
}

/// A stub CLI `name` that answers `--version` and otherwise reads its
/// prompt and runs `body`.
fn stub(env: &TestEnv, name: &str, body: &str) {
    env.stub(
        name,
        &format!(
            "[ \"$1\" = \"--version\" ] && echo \"{name} 0.0.0-stub\" && exit 0\n/bin/cat > /dev/null\n{body}"
        ),
    );
}

/// A listening socket of the test's that nothing answers: a process that
/// connects is queued in its backlog, counted afterwards.
struct Trap {
    path: PathBuf,
    listener: UnixListener,
}

impl Trap {
    fn new(path: PathBuf) -> Trap {
        Trap::try_new(path.clone()).unwrap_or_else(|e| panic!("listen on {}: {e}", path.display()))
    }

    fn try_new(path: PathBuf) -> std::io::Result<Trap> {
        std::fs::create_dir_all(path.parent().unwrap())?;
        let listener = UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        Ok(Trap { path, listener })
    }

    /// The connections made so far (each is taken out of the backlog).
    fn connections(&self) -> usize {
        let mut n = 0;
        while self.listener.accept().is_ok() {
            n += 1;
        }
        n
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The user's desktop session as a login makes it, with every socket a
/// [`Trap`]: a runtime folder (`XDG_RUNTIME_DIR`, mode 0700, outside /tmp as
/// `/run/user/<uid>` is) with the D-Bus bus, systemd's private socket,
/// Wayland, gpg-agent and the ssh agent (gnome-keyring's place); an X11
/// socket in `/tmp/.X11-unix`; gpg-agent's socket in `~/.gnupg`.
struct Desktop {
    _runtime: tempfile::TempDir,
    xdg: PathBuf,
    display: u32,
    traps: Vec<(&'static str, Trap)>,
}

impl Desktop {
    fn new(env: &TestEnv) -> Desktop {
        let runtime = tempfile::Builder::new()
            .prefix("pdx")
            .tempdir_in("/var/tmp")
            .unwrap();
        let xdg = runtime.path().to_path_buf();
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
        let x11 = Path::new("/tmp/.X11-unix");
        if !x11.exists() {
            std::fs::create_dir_all(x11).unwrap();
            std::fs::set_permissions(x11, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
        // A display number no other X server (or test) holds: binding
        // fails on a socket file that exists.
        let (display, x_trap) = (100..1000)
            .find_map(|n| Some((n, Trap::try_new(x11.join(format!("X{n}"))).ok()?)))
            .expect("a free X display number");
        let gnupg = env.home().join(".gnupg");
        std::fs::create_dir_all(&gnupg).unwrap();
        std::fs::set_permissions(&gnupg, std::fs::Permissions::from_mode(0o700)).unwrap();
        let traps = vec![
            ("bus", Trap::new(xdg.join("bus"))),
            ("systemd", Trap::new(xdg.join("systemd/private"))),
            ("wayland", Trap::new(xdg.join("wayland-0"))),
            ("gpg", Trap::new(xdg.join("gnupg/S.gpg-agent"))),
            ("ssh", Trap::new(xdg.join("keyring/ssh"))),
            ("x11", x_trap),
            ("home-gpg", Trap::new(gnupg.join("S.gpg-agent"))),
        ];
        Desktop {
            _runtime: runtime,
            xdg,
            display,
            traps,
        }
    }

    /// The session's variables, set on the services as a desktop login sets
    /// them (and named in PEDELEC_AGENT_ENV, which must not pass them).
    fn vars(&self, env: &TestEnv) -> Vec<(String, String)> {
        let at = |rel: &str| self.xdg.join(rel).display().to_string();
        vec![
            ("XDG_RUNTIME_DIR".into(), self.xdg.display().to_string()),
            (
                "DBUS_SESSION_BUS_ADDRESS".into(),
                format!("unix:path={}", at("bus")),
            ),
            ("DISPLAY".into(), format!(":{}", self.display)),
            ("WAYLAND_DISPLAY".into(), "wayland-0".into()),
            ("XAUTHORITY".into(), at("Xauthority")),
            ("SSH_AUTH_SOCK".into(), at("keyring/ssh")),
            (
                "XDG_CONFIG_HOME".into(),
                env.home().join(".config").display().to_string(),
            ),
            (
                "PEDELEC_AGENT_ENV".into(),
                "DISPLAY,DBUS_SESSION_BUS_ADDRESS".into(),
            ),
        ]
    }
}

/// The stub's probe: connects to each socket of the session, runs
/// `systemd-run --user true`, lists the runtime folder, prints its
/// environment, calls the page tool, then says it is ready and waits for the
/// test's `go`. Everything goes to `~/.cursor/probe` (the CLI's state folder,
/// writable at every level).
fn probe_script(desktop: &Desktop, env: &TestEnv) -> String {
    let mut connects = String::new();
    for (name, trap) in &desktop.traps {
        connects.push_str(&format!("try {} > \"$out/{name}\"\n", trap.path.display()));
    }
    let script = r#"out="$HOME/.cursor/probe"
/bin/mkdir -p "$out"
try() { /usr/bin/perl -MIO::Socket::UNIX -e 'if (IO::Socket::UNIX->new(Peer => $ARGV[0])) { print "connected\n" } else { print "refused: $!\n" }' "$1"; }
CONNECTS
/usr/bin/env > "$out/env"
/usr/bin/timeout 20 /usr/bin/systemd-run --user true > "$out/systemd-run" 2>&1; echo "exit $?" >> "$out/systemd-run"
/bin/ls -A XDG > "$out/xdg" 2>&1
pedelec-cli tool-call get_counter '{}' > "$out/tool" 2>&1; echo "exit $?" >> "$out/tool"
echo ready > "$out/ready.tmp" && /bin/mv "$out/ready.tmp" "$out/ready"
while [ ! -e GO ]; do /bin/sleep 0.01; done
OK"#;
    script
        .replace("CONNECTS", connects.trim_end())
        .replace("XDG", &desktop.xdg.display().to_string())
        .replace("GO", &go_file(env).display().to_string())
        .replace("OK", &cursor_ok())
}

fn probe_dir(env: &TestEnv) -> PathBuf {
    env.home().join(".cursor/probe")
}

/// Made by the test once it has looked at the running agent; outside the
/// probe folder, in the home the agent sees at every level.
fn go_file(env: &TestEnv) -> PathBuf {
    env.home().join(".cursor/go")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Session (field 6 of `/proc/<pid>/stat`), process group (5) and
/// controlling terminal (7) of `pid`; `None` once it has gone, as a child
/// forked by the probe's wait loop may have by the time it is read.
fn session_group_tty(pid: u32) -> Option<(u64, u64, u64)> {
    Some((
        stat_field(pid, 6)?,
        stat_field(pid, 5)?,
        stat_field(pid, 7)?,
    ))
}

async fn the_agent_reaches_nothing_of_the_users_session(level: pb::AccessLevel) {
    let mut env = TestEnv::new();
    let desktop = Desktop::new(&env);
    for (k, v) in desktop.vars(&env) {
        env.extra_env.insert(k, v);
    }
    stub(&env, "cursor-agent", &probe_script(&desktop, &env));
    let _launcher = env.up().await;
    env.update_settings(pb::Settings::default()).await;
    env.grant_site(ORIGIN, level, &["cursor"], &[]).await;
    let mut sessions = env.session().await;
    let manifest = json!({"tools": [{"name": "get_counter", "description": "Read the counter.",
                                      "argsSchema": {"type": "object", "properties": {}}}]});
    let id = sessions
        .create_session(pb::CreateSessionRequest {
            skills: Some(to_struct(manifest.as_object().unwrap())),
            ..create_session_request(Some("cursor"))
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let mut events = attach_past_snapshot(&mut sessions, &id, "route-1").await;
    sessions
        .send_text(send_text_request(&id, "look around"))
        .await
        .unwrap();

    // The page tool call comes first; answered as a page would.
    let seen = events
        .until(|e| matches!(e.event, Some(Event::ToolRequest(_))) || is_finished(e))
        .await;
    let Some(Event::ToolRequest(request)) = &seen.last().unwrap().event else {
        panic!("no tool request: {:?}", kinds(&seen));
    };
    let result = pedelec_common::json::to_value(&json!({"counter": 7}));
    sessions
        .submit_tool_result(submit_tool_result_request(
            &id,
            &request.tool_request_id,
            pb::submit_tool_result_request::Outcome::Result(result),
        ))
        .await
        .unwrap();

    // While it waits: its session is its own, led by the leader of its
    // process group (its bwrap), not the services'.
    let probe = probe_dir(&env);
    wait_until("the agent's probe", || probe.join("ready").exists()).await;
    let provider = env.service_status(ServiceName::Provider).await.pid;
    let (service_session, _, _) = session_group_tty(provider).expect("the provider runs");
    let agent_sessions: Vec<(u32, u64, u64, u64)> = processes_using(&env.runtime_dir())
        .into_iter()
        .filter(|p| command_line(*p).contains("cursor-agent"))
        .filter_map(|pid| {
            let (session, group, tty) = session_group_tty(pid)?;
            Some((pid, session, group, tty))
        })
        .collect();
    assert!(!agent_sessions.is_empty(), "the agent runs");
    std::fs::write(go_file(&env), "").unwrap();
    let seen = events.until(is_finished).await;
    assert_eq!(
        kind(seen.last().unwrap()),
        "operation_finished:completed",
        "{:?}",
        kinds(&seen)
    );

    let full = level == pb::AccessLevel::Full;
    for (name, trap) in &desktop.traps {
        let said = read(&probe.join(name));
        let reached = trap.connections();
        if *name == "ssh" && full {
            // git over ssh at full access: the ssh agent is there.
            assert_eq!(said.trim(), "connected", "{level:?}: {name}");
            assert_eq!(reached, 1, "{level:?}: {name}");
        } else {
            assert!(said.starts_with("refused"), "{level:?}: {name}: {said}");
            assert_eq!(reached, 0, "{level:?}: the agent reached {name}");
        }
    }
    let systemd_run = read(&probe.join("systemd-run"));
    assert!(
        !systemd_run.ends_with("exit 0\n"),
        "{level:?}: systemd-run --user ran: {systemd_run}"
    );
    let listed = read(&probe.join("xdg"));
    assert!(
        !listed.contains("bus") && !listed.contains("systemd") && !listed.contains("wayland"),
        "{level:?}: the runtime folder shows {listed}"
    );

    let printed = read(&probe.join("env"));
    let names: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for absent in [
        "DBUS_SESSION_BUS_ADDRESS",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "XAUTHORITY",
        "XDG_RUNTIME_DIR",
    ] {
        assert!(
            !names.contains(&absent),
            "{level:?}: {absent} reached the agent"
        );
    }
    assert!(names.contains(&"XDG_CONFIG_HOME"), "{printed}");
    assert_eq!(
        names.contains(&"SSH_AUTH_SOCK"),
        full,
        "{level:?}: {printed}"
    );

    let tool = read(&probe.join("tool"));
    assert!(
        tool.contains("\"counter\":7") && tool.ends_with("exit 0\n"),
        "{level:?}: the page tool through toolbridge.sock: {tool}"
    );

    for (pid, session, group, tty) in agent_sessions {
        assert_ne!(
            session, service_session,
            "{pid} is in the services' session"
        );
        assert_eq!(session, group, "{pid}: its group leads its session");
        assert_eq!(tty, 0, "{pid} has no controlling terminal");
    }
}

/// At full access (any command as the user, still in Pedelec's view).
#[tokio::test]
async fn at_full_access_the_agent_reaches_nothing_of_the_users_session_but_the_ssh_agent() {
    the_agent_reaches_nothing_of_the_users_session(pb::AccessLevel::Full).await;
}

#[tokio::test]
async fn at_tools_access_the_agent_reaches_nothing_of_the_users_session() {
    the_agent_reaches_nothing_of_the_users_session(pb::AccessLevel::Tools).await;
}

/// Everything of a page-bound reply or event, as the native host wrote it.
fn all_text(frames: &[serde_json::Value]) -> String {
    frames.iter().map(|f| f.to_string()).collect()
}

/// A failing agent's stderr (a secret-looking line, an absolute path) stays
/// in the log: the page's error event, through the native host, says how it
/// ended in fixed words, and so does SessionService's event.
#[tokio::test]
async fn a_failing_agents_stderr_stays_in_the_log() {
    let env = TestEnv::new();
    let secret = "sk-live-3f9a1c0de5b7";
    let path = "/var/lib/secret-place/credentials.json";
    stub(
        &env,
        "cursor-agent",
        &format!("echo 'token {secret} read from {path}' >&2\nexit 3"),
    );
    let _launcher = env.up().await;
    env.update_settings(pb::Settings::default()).await;

    let mut host = Host::spawn(&env, EXTENSION);
    let created = host
        .ok(
            "create_session",
            json!({"provider": "cursor", "autoEndOnDisconnect": false}),
        )
        .await;
    let id = created["sessionId"].as_str().unwrap().to_string();
    host.ok("attach", json!({"sessionId": id})).await;
    let mut sessions = env.session().await;
    let mut grpc_events = attach_past_snapshot(&mut sessions, &id, "route-2").await;
    host.ok("send_text", json!({"sessionId": id, "text": "fail"}))
        .await;
    let frames = host.events_until(&id, finished).await;
    let error = frames
        .iter()
        .map(|f| &f["event"])
        .find(|e| e["type"] == "error")
        .unwrap_or_else(|| panic!("no error event: {frames:?}"));
    assert_eq!(error["code"], "PROVIDER_FAILED");
    assert_eq!(
        error["message"],
        "cursor-agent exited with code 3; see the Pedelec log"
    );
    let text = all_text(&frames);
    for leak in [secret, path, "secret-place"] {
        assert!(!text.contains(leak), "the page got {leak}: {text}");
    }

    let seen = grpc_events.until(is_finished).await;
    let message = seen
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Error(e)) => Some(e.message.clone()),
            _ => None,
        })
        .expect("an error event");
    assert_eq!(
        message,
        "cursor-agent exited with code 3; see the Pedelec log"
    );

    let log = env.runtime_dir().join("logs/provider.log");
    wait_until("the stderr line in the provider's log", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains(secret))
    })
    .await;
}

/// ListProviders reaches pages: why a provider is unavailable, in words
/// that name no folder of the machine and nothing the CLI printed.
#[tokio::test]
async fn list_providers_names_no_path_and_nothing_a_cli_printed() {
    let mut env = TestEnv::new();
    // pedelec-agent neither beside the programs nor on PATH.
    let bin = env.install_stub_agent("exit 0");
    std::fs::remove_file(bin.join("pedelec-agent")).unwrap();
    let secret = "sk-live-77aa01";
    env.stub(
        "claude",
        &format!("echo '/opt/private/node: cannot read {secret}' >&2\nexit 1"),
    );
    let _launcher = env.up().await;
    let mut host = Host::spawn(&env, EXTENSION);
    let reply = host.ok("list_providers", json!({})).await;
    let text = reply.to_string();
    let root = env.root.path().display().to_string();
    for leak in [root.as_str(), "/opt/private", secret] {
        assert!(!text.contains(leak), "the page got {leak}: {text}");
    }
    let reason = |code: &str| {
        reply["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["code"] == code)
            .unwrap()["error"]
            .clone()
    };
    assert_eq!(
        reason("claude"),
        "`claude --version` exited with code 1; see the Pedelec log"
    );
    assert_eq!(
        reason("ollama"),
        "pedelec-agent not found beside Pedelec's programs nor on PATH"
    );
}

/// antigravity takes its prompt on its command line: over 100 KiB it is
/// refused with LIMIT_EXCEEDED before agy runs, and a prompt that starts
/// with `-` reaches agy as one `-p=` argument.
#[tokio::test]
async fn an_argv_prompt_is_capped_and_cannot_read_as_an_option() {
    let env = TestEnv::new();
    let calls = env.root.path().join("agy.calls");
    env.stub(
        "agy",
        &format!(
            r#"[ "$1" = "--version" ] && echo "agy 0.0.0-stub" && exit 0
printf '%.40s\n' "$1" >> {calls}
echo '{{"event":"result","conversation_id":"c1","result":{{"status":"SUCCESS","response":"AGY_DONE"}}}}'"#,
            calls = calls.display()
        ),
    );
    let _launcher = env.up().await;
    env.update_settings(settings_with_default_models(&[(
        "antigravity",
        "gemini-3-flash",
    )]))
    .await;
    let mut sessions = env.session().await;
    let id = sessions
        .create_session(create_session_request(Some("antigravity")))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let mut events = attach_past_snapshot(&mut sessions, &id, "route-1").await;

    sessions
        .send_text(send_text_request(&id, &"x".repeat(100 * 1024 + 1)))
        .await
        .unwrap();
    let seen = events.until(is_finished).await;
    assert_eq!(
        kinds(&seen)[2..],
        ["error:LIMIT_EXCEEDED", "operation_finished:failed"],
        "{:?}",
        kinds(&seen)
    );
    assert!(!calls.exists(), "agy ran");

    sessions
        .send_text(send_text_request(&id, "--dangerously-skip-permissions now"))
        .await
        .unwrap();
    let seen = events.until(is_finished).await;
    assert_eq!(kind(seen.last().unwrap()), "operation_finished:completed");
    assert_eq!(
        read(&calls).lines().collect::<Vec<_>>(),
        ["-p=--dangerously-skip-permissions now"]
    );
}
