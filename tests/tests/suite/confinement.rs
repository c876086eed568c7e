//! How ProviderService starts agents (docs/security.md, item 9 and
//! "Narrowing what an agent can reach"), over the real processes with a stub
//! agent (`cursor-agent` on PATH) in real turns: the environment it gets, the
//! filesystem view bubblewrap gives it (the tests run as root, where bwrap
//! works; `tests/run.sh` installs it), and the end of everything it started,
//! also what left its process group (pid namespace when confined, a cgroup
//! in both modes).

use std::path::{Path, PathBuf};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_common::json::to_struct;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::json;

/// A successful cursor turn's output, printed after the probe.
const CURSOR_OK: &str = r#"echo '{"type":"system","subtype":"init","cwd":"/w","session_id":"5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c","model":"m"}'
echo '{"type":"result","subtype":"success","duration_ms":5,"is_error":false,"result":"PROBED","session_id":"5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c"}'"#;

/// Services up with a stub `cursor-agent` running `body` after reading its
/// prompt; `vars` are set on the services.
async fn start(body: &str, vars: &[(&str, &str)]) -> (TestEnv, Launcher, Sessions) {
    let mut env = TestEnv::new();
    for (k, v) in vars {
        env.extra_env.insert(k.to_string(), v.to_string());
    }
    env.stub(
        "cursor-agent",
        &format!(
            "[ \"$1\" = \"--version\" ] && echo \"cursor-agent 0.0.0-stub\" && exit 0\n/bin/cat > /dev/null\n{body}"
        ),
    );
    let launcher = env.up().await;
    env.update_settings(pb::Settings::default()).await;
    let sessions = env.session().await;
    (env, launcher, sessions)
}

/// A cursor thread with one page tool, attached past its snapshot.
async fn thread(sessions: &mut Sessions) -> (String, Events) {
    let manifest = json!({"tools": [{"name": "get_counter", "description": "Read the counter.",
                                      "argsSchema": {"type": "object", "properties": {}}}]});
    let created = sessions
        .create_session(pb::CreateSessionRequest {
            skills: Some(to_struct(manifest.as_object().unwrap())),
            ..create_session_request(Some("cursor"))
        })
        .await
        .unwrap()
        .into_inner();
    let id = created.session_id;
    let events = attach_past_snapshot(sessions, &id, "route-1").await;
    (id, events)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Reads the turn's events to its end, answering each page tool call with
/// `{"counter": 7}`; returns the events.
async fn run_answering_tools(
    sessions: &mut Sessions,
    id: &str,
    events: &mut Events,
) -> Vec<pb::SessionEvent> {
    let mut seen = Vec::new();
    loop {
        let e = events.next().await;
        if let Some(Event::ToolRequest(r)) = &e.event {
            assert_eq!(r.tool, "get_counter");
            let result = pedelec_common::json::to_value(&json!({"counter": 7}));
            sessions
                .submit_tool_result(submit_tool_result_request(
                    id,
                    &r.tool_request_id,
                    pb::submit_tool_result_request::Outcome::Result(result),
                ))
                .await
                .unwrap();
        }
        let done = is_finished(&e);
        seen.push(e);
        if done {
            return seen;
        }
    }
}

/// The agent gets the user's variables and its CLI's, the turn's three, and
/// nothing of the service's own: neither a made-up internal variable nor
/// RUST_LOG, PEDELEC_HOME or PEDELEC_LOG.
#[tokio::test]
async fn an_agent_gets_a_deliberate_environment() {
    let out = tempfile::tempdir().unwrap();
    let body = format!(
        "/usr/bin/env > {0}.tmp && /bin/mv {0}.tmp {0}\n{CURSOR_OK}",
        out.path().join("env").display()
    );
    let (env, _launcher, mut sessions) = start(
        &body,
        &[
            ("PEDELEC_INTERNAL_X", "service-only"),
            ("RUST_LOG", "trace"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
            ("CODEX_HOME", "/nonexistent/codex"),
            ("LC_ALL", "C"),
            ("MY_TOOL_HOME", "/opt/tool"),
            ("NOT_MINE", "x"),
            ("PEDELEC_AGENT_ENV", "MY_TOOL_HOME"),
        ],
    )
    .await;
    let (id, mut events) = thread(&mut sessions).await;
    sessions
        .send_text(send_text_request(&id, "print your environment"))
        .await
        .unwrap();
    let seen = run_answering_tools(&mut sessions, &id, &mut events).await;
    assert_eq!(kind(seen.last().unwrap()), "operation_finished:completed");

    let printed = read(&out.path().join("env"));
    let names: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for absent in [
        "PEDELEC_INTERNAL_X",
        "RUST_LOG",
        "NOT_MINE",
        "PEDELEC_HOME",
        "PEDELEC_LOG",
        "PEDELEC_BIN_DIR",
        "PEDELEC_AGENT_ENV",
    ] {
        assert!(
            !names.contains(&absent),
            "{absent} reached the agent:\n{printed}"
        );
    }
    let value = |name: &str| {
        printed
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing from the agent's environment:\n{printed}"))
    };
    assert_eq!(value("HOME"), env.home().display().to_string());
    assert_eq!(value("ANTHROPIC_BASE_URL"), "http://127.0.0.1:9");
    assert_eq!(value("CODEX_HOME"), "/nonexistent/codex");
    assert_eq!(value("LC_ALL"), "C");
    assert_eq!(value("MY_TOOL_HOME"), "/opt/tool");
    assert_eq!(value("PEDELEC_THREAD_ID"), id);
    assert_eq!(
        value("PEDELEC_RUNTIME_DIR"),
        env.runtime_dir().display().to_string()
    );
    assert_eq!(value("PEDELEC_TOOL_TOKEN").len(), 64, "a 256-bit token");
    assert!(
        value("PATH").starts_with(&bin_dir().display().to_string()),
        "pedelec-cli's folder first: {}",
        value("PATH")
    );
}

/// What a confined agent sees, written by the stub into `out`: the runtime
/// dir, the data dir, the settings and journal files, another thread's
/// workspace file, its own workspace, /proc, and a page tool called with
/// the real pedelec-cli.
fn probe_script(env: &TestEnv, out: &Path, other_workspace_file: &Path) -> String {
    let data = env.data_dir();
    let o = |name: &str| out.join(name).display().to_string();
    format!(
        r#"cd "$PWD"
/bin/ls -A "$PEDELEC_RUNTIME_DIR" > {runtime}
/bin/ls -A {data} > {data_list} 2>&1
/bin/cat {settings} > {settings_out} 2>&1; echo "exit $?" >> {settings_out}
/bin/cat {data}/sessions/*.json > {journal_out} 2>&1; echo "exit $?" >> {journal_out}
/bin/cat {other} > {other_out} 2>&1; echo "exit $?" >> {other_out}
echo mine > own-file && /bin/cat own-file > {own_out}
/bin/ls /proc | /bin/grep -c '^[0-9]' > {procs}
pedelec-cli tool-call get_counter '{{}}' > {tool} 2>&1; echo "exit $?" >> {tool}
{CURSOR_OK}"#,
        runtime = o("runtime"),
        data = data.display(),
        data_list = o("data"),
        settings = data.join("settings.json").display(),
        settings_out = o("settings"),
        journal_out = o("journal"),
        other = other_workspace_file.display(),
        other_out = o("other"),
        own_out = o("own"),
        procs = o("procs"),
        tool = o("tool"),
    )
}

#[tokio::test]
async fn a_confined_agent_sees_only_its_tools_socket_and_its_own_workspace() {
    let out = tempfile::tempdir().unwrap();
    let (env, _launcher, mut sessions) = start(CURSOR_OK, &[]).await;
    // The probe names the first thread's workspace file, made here.
    let (first, _first_events) = thread(&mut sessions).await;
    let first_file = env
        .data_dir()
        .join("workspaces")
        .join(&first)
        .join("notes.txt");
    std::fs::create_dir_all(first_file.parent().unwrap()).unwrap();
    std::fs::write(&first_file, "first thread's secret").unwrap();
    env.stub(
        "cursor-agent",
        &format!(
            "[ \"$1\" = \"--version\" ] && echo \"cursor-agent 0.0.0-stub\" && exit 0\n/bin/cat > /dev/null\n{}",
            probe_script(&env, out.path(), &first_file)
        ),
    );
    assert!(
        env.data_dir().join("settings.json").exists(),
        "the settings file exists on the host"
    );

    let (id, mut events) = thread(&mut sessions).await;
    sessions
        .send_text(send_text_request(&id, "look around"))
        .await
        .unwrap();
    let seen = run_answering_tools(&mut sessions, &id, &mut events).await;
    assert_eq!(
        kind(seen.last().unwrap()),
        "operation_finished:completed",
        "{:?}",
        kinds(&seen)
    );

    assert_eq!(
        read(&out.path().join("runtime")).trim(),
        ServiceName::ToolBridge.socket_file(),
        "the runtime dir holds only the ToolBridge socket"
    );
    // Only the path down to the agent's own workspace, bound back in.
    assert_eq!(read(&out.path().join("data")).trim(), "workspaces");
    for (what, file) in [
        ("the settings", "settings"),
        ("the journal", "journal"),
        ("another thread's workspace", "other"),
    ] {
        let said = read(&out.path().join(file));
        assert!(
            said.contains("No such file or directory") && !said.ends_with("exit 0\n"),
            "the agent could read {what}: {said}"
        );
    }
    assert!(!read(&out.path().join("other")).contains("secret"));
    assert_eq!(read(&out.path().join("own")).trim(), "mine");
    let own_file = env.data_dir().join("workspaces").join(&id).join("own-file");
    assert_eq!(
        read(&own_file).trim(),
        "mine",
        "the agent wrote into its real workspace"
    );
    let procs: usize = read(&out.path().join("procs")).trim().parse().unwrap();
    assert!(
        procs < 10,
        "the agent sees only its own processes in /proc, not {procs}"
    );
    let tool = read(&out.path().join("tool"));
    assert!(
        tool.contains("\"counter\":7") && tool.ends_with("exit 0\n"),
        "the page tool call through toolbridge.sock: {tool}"
    );
}

/// The stub starts two sleepers that leave its process group — one with
/// `setsid`, one by a double fork and `setpgid` (perl's `setpgrp`) — each
/// writing the pid it sees once it has left, then hangs (`hang`) or
/// finishes its turn.
fn escaping_sleepers(out: &Path, hang: bool) -> String {
    let end = if hang {
        "echo '{\"type\":\"system\",\"subtype\":\"init\",\"cwd\":\"/w\",\"session_id\":\"5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c\",\"model\":\"m\"}'\n/bin/sleep 120 &\nwait".to_string()
    } else {
        CURSOR_OK.to_string()
    };
    format!(
        r#"/usr/bin/setsid -f /bin/sh -c 'echo $$ > {a}.tmp; /bin/mv {a}.tmp {a}; exec /bin/sleep 300' </dev/null >/dev/null 2>&1
( /usr/bin/perl -e 'setpgrp(0, 0); open(my $f, ">", "$ARGV[0].tmp") or die; print $f "$$\n"; close $f; rename("$ARGV[0].tmp", $ARGV[0]); exec "/bin/sleep", "300"' {b} </dev/null >/dev/null 2>&1 & )
while [ ! -e {a} ] || [ ! -e {b} ]; do /bin/sleep 0.01; done
{end}"#,
        a = out.join("setsid").display(),
        b = out.join("double").display(),
    )
}

/// The escaped sleepers' pids as this test sees them.
async fn sleepers(env: &TestEnv, out: &Path) -> [u32; 2] {
    let mut pids = [0; 2];
    for (i, name) in ["setsid", "double"].iter().enumerate() {
        let file = out.join(name);
        wait_until(&format!("{name} sleeper's pid"), || file.exists()).await;
        let inside: u32 = read(&file).trim().parse().unwrap();
        pids[i] = host_pid(&env.runtime_dir(), inside);
    }
    pids
}

/// Their session is not the agent's: they really left its process group.
fn assert_escaped(pids: [u32; 2], agent_group: u32) {
    for pid in pids {
        assert!(alive(pid), "sleeper {pid} runs");
        assert_ne!(pgid_of(pid), agent_group, "sleeper {pid} left the group");
    }
}

/// No cgroup of this ProviderService is left.
async fn no_agent_cgroups_left(env: &TestEnv) {
    let provider = env.service_status(ServiceName::Provider).await.pid;
    let prefix = format!("pedelec-agent-{provider}-");
    let parent = PathBuf::from("/sys/fs/cgroup/unified");
    wait_until("the agents' cgroups to be removed", || {
        std::fs::read_dir(&parent)
            .map(|d| {
                !d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            })
            .unwrap_or(true)
    })
    .await;
}

async fn descendants_end_with_a_cancelled_turn(vars: &[(&str, &str)], confined: bool) {
    let out = tempfile::tempdir().unwrap();
    let (env, _launcher, mut sessions) = start(&escaping_sleepers(out.path(), true), vars).await;
    let (id, mut events) = thread(&mut sessions).await;
    sessions
        .send_text(send_text_request(&id, "start sleepers and hang"))
        .await
        .unwrap();
    let pids = sleepers(&env, out.path()).await;
    let agent_group = pgid_of(
        processes_using(&env.runtime_dir())
            .into_iter()
            .find(|p| command_line(*p).contains("cursor-agent"))
            .expect("the stub agent runs"),
    );
    assert_escaped(pids, agent_group);
    for pid in pids {
        let cgroup = read(Path::new(&format!("/proc/{pid}/cgroup")));
        assert!(
            cgroup.contains("/pedelec-agent-"),
            "sleeper {pid} is in the agent's cgroup: {cgroup}"
        );
        let pid_ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/pid")).unwrap();
        assert_eq!(
            pid_ns(&pid.to_string()) != pid_ns("self"),
            confined,
            "sleeper {pid} in a pid namespace of its own: {confined}"
        );
    }

    sessions.cancel(thread_request(&id)).await.unwrap();
    let seen = events.until(is_finished).await;
    assert_eq!(kind(seen.last().unwrap()), "operation_finished:cancelled");
    for pid in pids {
        wait_until(&format!("sleeper {pid} to be gone"), || !alive(pid)).await;
    }
    no_agent_cgroups_left(&env).await;
}

async fn descendants_end_with_a_finished_turn(vars: &[(&str, &str)]) {
    let out = tempfile::tempdir().unwrap();
    let (env, _launcher, mut sessions) = start(&escaping_sleepers(out.path(), false), vars).await;
    let (id, mut events) = thread(&mut sessions).await;
    sessions
        .send_text(send_text_request(&id, "start sleepers and finish"))
        .await
        .unwrap();
    let seen = events.until(is_finished).await;
    assert_eq!(kind(seen.last().unwrap()), "operation_finished:completed");
    // The pids were written before the turn ended; the processes may be
    // gone already, so they are found by the marker each writes.
    for name in ["setsid", "double"] {
        assert!(out.path().join(name).exists(), "{name} sleeper started");
    }
    wait_until("nothing of the turn to run", || {
        processes_using(&env.runtime_dir())
            .iter()
            .all(|p| !command_line(*p).starts_with("/bin/sleep"))
    })
    .await;
    no_agent_cgroups_left(&env).await;
}

/// Confined: the agent's pid namespace ends with it, and its cgroup too.
#[tokio::test]
async fn confined_descendants_that_left_the_group_end_with_a_cancelled_turn() {
    descendants_end_with_a_cancelled_turn(&[], true).await;
}

/// Unconfined: only the cgroup catches what left the group.
#[tokio::test]
async fn unconfined_descendants_that_left_the_group_end_with_a_cancelled_turn() {
    descendants_end_with_a_cancelled_turn(&[("PEDELEC_CONFINE", "0")], false).await;
}

#[tokio::test]
async fn confined_descendants_that_left_the_group_end_with_a_finished_turn() {
    descendants_end_with_a_finished_turn(&[]).await;
}

#[tokio::test]
async fn unconfined_descendants_that_left_the_group_end_with_a_finished_turn() {
    descendants_end_with_a_finished_turn(&[("PEDELEC_CONFINE", "0")]).await;
}

/// Where bwrap cannot make its namespaces (a stand-in that fails as it
/// does without unprivileged user namespaces, first on the services' PATH),
/// agents run as before — they see the whole runtime dir — and `pedelecd
/// doctor` says so, as it does when PEDELEC_CONFINE=0 switches it off.
#[tokio::test]
async fn where_bwrap_does_not_work_agents_run_as_before_and_doctor_says_so() {
    let out = tempfile::tempdir().unwrap();
    let body = format!(
        "/bin/ls -A \"$PEDELEC_RUNTIME_DIR\" > {}\n{CURSOR_OK}",
        out.path().join("runtime").display()
    );
    let (env, _launcher, mut sessions) = start(&body, &[]).await;
    env.stub(
        "bwrap",
        "echo 'bwrap: No permissions to create new namespace' >&2; exit 1",
    );
    // ProviderService probes at its first turn, with this stand-in found first.
    let (id, mut events) = thread(&mut sessions).await;
    sessions
        .send_text(send_text_request(&id, "list the runtime dir"))
        .await
        .unwrap();
    let seen = run_answering_tools(&mut sessions, &id, &mut events).await;
    assert_eq!(kind(seen.last().unwrap()), "operation_finished:completed");
    let listed = read(&out.path().join("runtime"));
    for socket in ["session.sock", "provider.sock", "toolbridge.sock"] {
        assert!(
            listed.lines().any(|l| l == socket),
            "an unconfined agent sees {socket}: {listed}"
        );
    }

    let report = String::from_utf8_lossy(&env.pedelecd(&["doctor"]).stdout).into_owned();
    assert!(
        report.contains("warn  agent-confinement: agents run unconfined:")
            && report.contains("No permissions to create new namespace"),
        "{report}"
    );
    assert!(report.contains("apt install bubblewrap"), "{report}");
    let mut off = env.command(bin("pedelecd"));
    off.arg("doctor").env("PEDELEC_CONFINE", "0");
    let report = String::from_utf8_lossy(&off.output().unwrap().stdout).into_owned();
    assert!(
        report.contains(
            "warn  agent-confinement: agent confinement is switched off (PEDELEC_CONFINE=0)"
        ),
        "{report}"
    );
}
