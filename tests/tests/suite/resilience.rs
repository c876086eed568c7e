//! Faults over the real processes: kill -9 of
//! each process in the middle of a turn that waits for a tool result, a
//! misbehaving agent (never exits, floods stdout, prints binary garbage or an
//! endless line, exits mid-line), and a full disk under the data dir.
//! `docs/reliability.md` lists each case with what was observed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::json;

/// The stub `pedelec-agent` of these tests. The user's text picks the behaviour;
/// each run writes its pid to `<root>/<thread id>.pid` first.
fn misbehaving_agent(root: &Path) -> String {
    let cli = bin_dir().join("pedelec-cli").display().to_string();
    let root = root.display();
    format!(
        r#"[ "$1" = "--version" ] && echo "pedelec-agent 0.0.0-stub" && exit 0
echo $$ > {root}/$PEDELEC_THREAD_ID.pid
prompt=$(/bin/cat)
echo '{{"type":"session","id":"stub-session"}}'
case "$prompt" in
  *"@@never"*)
    # Ignores SIGTERM, and so do its children (an ignored signal is inherited).
    trap '' TERM
    while :; do /bin/sleep 1; done
    ;;
  *"@@flood"*)
    exec /usr/bin/yes '{{"type":"chat_delta","text":"x"}}'
    ;;
  *"@@longline"*)
    /usr/bin/head -c 30000000 /dev/zero | /usr/bin/tr '\0' x
    echo
    echo '{{"type":"chat","text":"after the long line"}}'
    ;;
  *"@@garbage"*)
    /usr/bin/head -c 300000 /dev/urandom
    echo
    printf '{{"type":"chat_delta","text":"bad \377\376 bytes"}}\n'
    echo '{{"type":"chat","text":"after the garbage"}}'
    ;;
  *"@@midline"*)
    printf '{{"type":"chat","text":"cut in the mid'
    exit 0
    ;;
  *"@@tool"*)
    {cli} --thread-id "$PEDELEC_THREAD_ID" tool-call get_page '{{"q":"x"}}' > /dev/null
    echo '{{"type":"chat","text":"after the tool"}}'
    ;;
  *)
    echo '{{"type":"chat","text":"hello"}}'
    ;;
esac"#
    )
}

/// Services up with the misbehaving agent as the Ollama provider.
async fn start(env: &mut TestEnv) -> Launcher {
    let script = misbehaving_agent(env.root.path());
    env.install_stub_agent(&script);
    let launcher = env.up().await;
    env.update_settings(settings_with_default_models(&[("ollama", "llama3.2")]))
        .await;
    launcher
}

fn thread_with_tools() -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        skills: Some(pedelec_common::json::to_struct(
            skills().as_object().unwrap(),
        )),
        ..create_session_request(Some("ollama"))
    }
}

async fn new_thread(sessions: &mut Sessions) -> String {
    sessions
        .create_session(thread_with_tools())
        .await
        .unwrap()
        .into_inner()
        .session_id
}

/// The running agent's pid as the test sees it: the stub writes the pid it
/// sees, in its own pid namespace when confined (docs/security.md).
async fn agent_pid(env: &TestEnv, id: &str) -> i32 {
    let inside = read_pid(&env.root.path().join(format!("{id}.pid"))).await;
    host_pid(&env.runtime_dir(), inside) as i32
}

fn finished_event(events: &[pb::SessionEvent]) -> pb::OperationFinished {
    match &events.last().unwrap().event {
        Some(Event::OperationFinished(f)) => f.clone(),
        other => panic!("expected operation_finished, got {other:?}"),
    }
}

/// Sends `text` and reads the operation to its end on `events`.
async fn turn(
    sessions: &mut Sessions,
    events: &mut Events,
    id: &str,
    text: &str,
) -> Vec<pb::SessionEvent> {
    sessions
        .send_text(send_text_request(id, text))
        .await
        .unwrap();
    events.until(is_finished).await
}

fn assert_consecutive_seqs(events: &[pb::SessionEvent]) {
    for w in events.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq + 1,
            "{:?} then {:?}",
            kind(&w[0]),
            kind(&w[1])
        );
    }
}

/// A route attaching with `after_seq` gets the snapshot, then exactly the
/// events `seen` holds after that seq: each once, in order.
async fn reattach_gets_each_event_once(
    sessions: &mut Sessions,
    id: &str,
    after_seq: u64,
    seen: &[pb::SessionEvent],
) {
    let want: Vec<(u64, String)> = seen
        .iter()
        .filter(|e| e.seq > after_seq)
        .map(|e| (e.seq, kind(e)))
        .collect();
    let mut again = attach(sessions, id, "again", Some(after_seq)).await;
    match again.next().await.event {
        Some(Event::Snapshot(s)) => assert!(!s.replay_gap, "{s:?}"),
        other => panic!("expected a snapshot, got {other:?}"),
    }
    let mut got = Vec::new();
    while got.len() < want.len() {
        let e = again.next().await;
        got.push((e.seq, kind(&e)));
    }
    assert_eq!(got, want);
}

/// What a killed process leaves of the waiting operation.
#[derive(Debug)]
enum Victim {
    Service(ServiceName),
    Launcher,
    Agent,
}

/// kill -9 of each process while a turn waits for the page's answer to a tool
/// call. Expected: the launcher brings back what it supervises; the
/// interrupted operation ends `failed` (CORE_RESTARTED when SessionService or
/// the launcher went, the provider's error when the agent or ProviderService
/// did), or goes on where the killed process had no part in it (AssetService;
/// ToolBridge, whose loss the agent's tool call reports); the next turn
/// works; a route re-attaching with its last seq gets every event once, and
/// no seq a client saw is used again.
#[tokio::test]
async fn kill_9_of_each_process_mid_turn_with_a_pending_tool_call() {
    let mut env = TestEnv::new();
    let mut launcher = start(&mut env).await;
    let victims = [
        Victim::Agent,
        Victim::Service(ServiceName::Asset),
        Victim::Service(ServiceName::ToolBridge),
        Victim::Service(ServiceName::Provider),
        Victim::Service(ServiceName::Session),
        Victim::Launcher,
    ];
    for victim in victims {
        let mut sessions = env.session().await;
        let id = new_thread(&mut sessions).await;
        let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;
        let op = sessions
            .send_text(send_text_request(&id, "@@tool"))
            .await
            .unwrap()
            .into_inner()
            .operation_id;
        let mut seen = events
            .until(|e| matches!(e.event, Some(Event::ToolRequest(_))))
            .await;
        let request_seq = seen.last().unwrap().seq;
        let request_id = match &seen.last().unwrap().event {
            Some(Event::ToolRequest(r)) => r.tool_request_id.clone(),
            _ => unreachable!(),
        };

        match &victim {
            Victim::Agent => signal(agent_pid(&env, &id).await, libc::SIGKILL),
            Victim::Service(service) => {
                let old = env.service_status(*service).await;
                signal(old.pid as i32, libc::SIGKILL);
                env.wait_service_back(*service, old.pid).await;
            }
            Victim::Launcher => {
                signal(launcher.pid() as i32, libc::SIGKILL);
                let _ = launcher.stop();
                wait_until_nothing_runs(&env.runtime_dir()).await;
                launcher = env.up().await;
            }
        }
        let mut sessions = env.session().await;
        let outcome = match &victim {
            Victim::Service(ServiceName::Asset) => {
                // Not part of a turn: the page answers and the turn goes on.
                sessions
                    .submit_tool_result(submit_tool_result_request(
                        &id,
                        &request_id,
                        tool_result(&json!({"title": "t"})),
                    ))
                    .await
                    .unwrap();
                seen.extend(events.until(is_finished).await);
                finished_event(&seen)
            }
            Victim::Service(ServiceName::Session) | Victim::Launcher => {
                // The route broke with the service; its events were in memory.
                let snap = wait_for_status(
                    &mut sessions,
                    &id,
                    pb::SessionStatus::Error,
                    "the interrupted operation never ended",
                )
                .await;
                assert!(
                    snap.last_seq > request_seq,
                    "a seq would be reused: {snap:?}"
                );
                assert!(snap.pending_tool_request.is_none(), "{snap:?}");
                let last = snap.last_operation.unwrap();
                assert_eq!(last.operation_id, op);
                pb::OperationFinished {
                    operation_id: last.operation_id,
                    kind: last.kind,
                    outcome: last.outcome,
                    error: last.error,
                }
            }
            _ => {
                seen.extend(events.until(is_finished).await);
                finished_event(&seen)
            }
        };
        let error = outcome
            .error
            .as_ref()
            .map(|e| e.code.as_str())
            .unwrap_or("");
        eprintln!(
            "kill -9 of {victim:?} mid-turn: outcome {:?}, error {error:?}",
            pb::OperationOutcome::try_from(outcome.outcome).unwrap()
        );
        assert_eq!(outcome.operation_id, op);
        let want = match &victim {
            Victim::Service(ServiceName::Asset) | Victim::Service(ServiceName::ToolBridge) => {
                (pb::OperationOutcome::Completed, "")
            }
            Victim::Service(ServiceName::Session | ServiceName::Provider) | Victim::Launcher => {
                (pb::OperationOutcome::Failed, "CORE_RESTARTED")
            }
            _ => (pb::OperationOutcome::Failed, "PROVIDER_FAILED"),
        };
        assert_eq!(
            (outcome.outcome, error),
            (want.0 as i32, want.1),
            "{victim:?}: {outcome:?}"
        );

        // Every event once, in order, on the surviving route and on a new one.
        let mut fresh = match &victim {
            Victim::Service(ServiceName::Session) | Victim::Launcher => {
                attach_past_snapshot(&mut sessions, &id, "r2").await
            }
            _ => {
                assert_consecutive_seqs(&seen);
                let cleared = seen
                    .iter()
                    .filter(|e| matches!(e.event, Some(Event::ToolRequestCleared(_))))
                    .count();
                assert_eq!(cleared, 1, "{victim:?}: {:?}", kinds(&seen));
                reattach_gets_each_event_once(&mut sessions, &id, request_seq, &seen).await;
                events
            }
        };
        // The next turn works.
        let next = turn(&mut sessions, &mut fresh, &id, "hello").await;
        assert_eq!(
            finished_event(&next).outcome,
            pb::OperationOutcome::Completed as i32,
            "{victim:?}: {:?}",
            kinds(&next)
        );
        assert_eq!(chat_text(&next), "hello");
        assert_consecutive_seqs(&next);
    }
}

/// Agents that misbehave: nothing crashes, no session hangs, the next turn works.
/// - never exits and ignores SIGTERM: Cancel ends it (SIGKILL after the grace
///   period) and the operation ends `cancelled`;
/// - floods stdout without end: deltas arrive in order without seq gaps while
///   a second route takes nothing, memory stays bounded, Cancel ends it;
/// - a 30 MB line with no newline: dropped (over the 1 MiB line bound), the
///   turn goes on to its next line, memory stays bounded;
/// - binary garbage and invalid UTF-8: skipped, the turn goes on;
/// - exits in the middle of a line: the turn ends.
#[tokio::test]
async fn a_misbehaving_agent_crashes_nothing_and_hangs_no_session() {
    let mut env = TestEnv::new();
    let _launcher = start(&mut env).await;
    let mut sessions = env.session().await;
    let id = new_thread(&mut sessions).await;
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;
    let pids = |services: &[ServiceName]| {
        let env = &env;
        let services = services.to_vec();
        async move {
            let mut out = Vec::new();
            for s in services {
                out.push((s, env.service_status(s).await.pid));
            }
            out
        }
    };
    let watched = pids(&[ServiceName::Session, ServiceName::Provider]).await;
    let idle: Vec<u64> = watched.iter().map(|(_, p)| rss_kib(*p)).collect();
    let mut peak = idle.clone();
    let sample = |peak: &mut Vec<u64>| {
        for (p, (_, pid)) in peak.iter_mut().zip(&watched) {
            *p = (*p).max(rss_kib(*pid));
        }
    };

    // Never exits, ignores SIGTERM.
    sessions
        .send_text(send_text_request(&id, "@@never"))
        .await
        .unwrap();
    events.until(|e| kind(e) == "status:running").await;
    let pid = agent_pid(&env, &id).await;
    sessions.cancel(thread_request(&id)).await.unwrap();
    let seen = events.until(is_finished).await;
    assert_eq!(
        finished_event(&seen).outcome,
        pb::OperationOutcome::Cancelled as i32
    );
    wait_until("the agent that ignored SIGTERM to be gone", || {
        !alive(pid as u32)
    })
    .await;

    // Floods stdout while a second route takes nothing.
    let _stuck = attach(&mut sessions, &id, "stuck", None).await;
    let flood = sessions
        .send_text(send_text_request(&id, "@@flood"))
        .await
        .unwrap()
        .into_inner()
        .operation_id;
    let mut deltas = 0;
    let mut gaps = 0;
    let mut last = 0;
    let started = Instant::now();
    while deltas < 300_000 {
        let e = events.next().await;
        // A route that falls behind is told so by a snapshot with replay_gap
        // (decisions.md, "Flow control"); a seq is never skipped silently.
        if let Some(Event::Snapshot(s)) = &e.event {
            assert!(s.replay_gap, "a snapshot without a gap mid-stream: {s:?}");
            gaps += 1;
            last = e.seq;
            continue;
        }
        if last != 0 {
            assert_eq!(
                e.seq,
                last + 1,
                "a seq skipped without a replay gap: {:?}",
                kind(&e)
            );
        }
        last = e.seq;
        if let Some(Event::ChatDelta(d)) = &e.event {
            // Each of the agent's deltas is one "x"; those that waited for
            // SessionService arrive joined.
            let before = deltas;
            deltas += d.text.len();
            if before / 10_000 != deltas / 10_000 {
                sample(&mut peak);
            }
        } else {
            assert!(!is_finished(&e), "the flood ended by itself: {:?}", e.event);
        }
    }
    eprintln!(
        "flood: {deltas} deltas in {:?}, {gaps} replay gaps on the reading route",
        started.elapsed()
    );
    sessions.cancel(thread_request(&id)).await.unwrap();
    // This route is often a whole replay buffer behind here: the few events
    // Cancel adds can push its place out of the buffer, and then it learns of
    // the cancel from a replay-gap snapshot instead of OperationFinished.
    assert_eq!(
        events.until_settled(&flood).await,
        pb::OperationOutcome::Cancelled
    );

    // A 30 MB line, then a good one.
    sessions
        .send_text(send_text_request(&id, "@@longline"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let e = events.next().await;
        let done = is_finished(&e);
        seen.push(e);
        sample(&mut peak);
        if done {
            break;
        }
    }
    eprintln!("long line: {:?}", kinds(&seen));
    assert_eq!(chat_text(&seen), "after the long line");
    assert_eq!(
        finished_event(&seen).outcome,
        pb::OperationOutcome::Completed as i32
    );

    // Binary garbage and invalid UTF-8.
    let seen = turn(&mut sessions, &mut events, &id, "@@garbage").await;
    eprintln!("garbage: {:?} deltas {:?}", kinds(&seen), delta_text(&seen));
    assert_eq!(chat_text(&seen), "after the garbage");
    assert_eq!(
        finished_event(&seen).outcome,
        pb::OperationOutcome::Completed as i32
    );

    // Exits in the middle of a line.
    let seen = turn(&mut sessions, &mut events, &id, "@@midline").await;
    let finished = finished_event(&seen);
    eprintln!("mid-line: {:?} {:?}", kinds(&seen), finished.error);

    // Nothing crashed, memory stayed bounded, and the next turn works.
    let seen = turn(&mut sessions, &mut events, &id, "hello").await;
    assert_eq!(chat_text(&seen), "hello");
    for (i, (service, pid)) in watched.iter().enumerate() {
        let now = env.service_status(*service).await;
        assert_eq!(
            (now.pid, now.restarts),
            (*pid, 0),
            "{} restarted",
            service.as_str()
        );
        eprintln!(
            "misbehaving agent: {:<10} idle {:6.1} MiB  peak {:6.1} MiB",
            service.as_str(),
            idle[i] as f64 / 1024.0,
            peak[i] as f64 / 1024.0
        );
        // The line bound is 1 MiB and the replay buffer 8 MiB: a 30 MB line or
        // an endless flood must not show up whole in memory.
        assert!(
            peak[i] < idle[i] + 64 * 1024,
            "{} grew from {} to {} KiB",
            service.as_str(),
            idle[i],
            peak[i]
        );
    }
}

/// PUT of `data` to an upload ticket's URL, as the page does; the HTTP status
/// and the body.
async fn http_put(ticket: &pb::Ticket, data: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = ticket.url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "PUT /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nOrigin: {ORIGIN}\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\n\r\n",
        ticket.token,
        data.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server may answer and close before taking the whole body.
    let _ = stream.write_all(data).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or("")
        .to_string();
    (status, body)
}

/// A small tmpfs mounted over the data dir for one test; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a {size} tmpfs as the data dir to fill it, and mount failed \
             (it needs root or CAP_SYS_ADMIN, as CI and the dev machines have): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system of `dir` with `<dir>/filler` until it is full; a
/// second call tops the same file up.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut f = std::fs::File::options()
        .append(true)
        .create(true)
        .open(&filler)
        .unwrap();
    let block = vec![0u8; 64 * 1024];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
    }
    // Whatever a partial block left.
    while f.write(&block[..512]).is_ok_and(|n| n > 0) {}
    filler
}

/// The data dir on a full disk: journal writes report JOURNAL_WRITE_FAILED and
/// keep nothing half done, asset uploads fail with their code and leave the
/// stored asset and no temp file; once space is freed everything works again.
#[tokio::test]
async fn a_full_data_disk_is_reported_and_the_last_good_state_kept() {
    let mut env = TestEnv::new();
    // Recycled record files (pedelec_common::recycle) keep the pages their
    // earlier versions held, so on a full disk a write that fits in them
    // rightly succeeds, and which writes fit depends on which spare the
    // writer holds at that moment. Every write here makes a new file instead,
    // so each one below needs space the full disk does not have.
    env.extra_env
        .insert(pedelec_common::env::RECYCLE_RECORDS.into(), "0".into());
    let _tmpfs = Tmpfs::mount(&env.data_dir(), "8m");
    let _launcher = start(&mut env).await;
    let mut sessions = env.session().await;
    let id = new_thread(&mut sessions).await;
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;
    assert_eq!(
        chat_text(&turn(&mut sessions, &mut events, &id, "hello").await),
        "hello"
    );
    let mut assets = env.asset().await;
    let upload = |data: Vec<u8>| {
        tokio_stream::iter(vec![
            pb::UploadChunk {
                chunk: Some(pb::upload_chunk::Chunk::Header(pb::UploadHeader {
                    session_id: id.clone(),
                    origin: ORIGIN.into(),
                    path: "/kept.bin".into(),
                    size_bytes: data.len() as u64,
                })),
            },
            pb::UploadChunk {
                chunk: Some(pb::upload_chunk::Chunk::Data(data)),
            },
        ])
    };
    assets.upload(upload(vec![1; 1000])).await.unwrap();
    let before = snapshot(&mut sessions, &id).await;
    let threads = |s: &mut Sessions| {
        let mut s = s.clone();
        async move {
            s.list(pb::ListRequest { origin: None })
                .await
                .unwrap()
                .into_inner()
                .sessions
                .len()
        }
    };
    let count = threads(&mut sessions).await;

    let filler = fill(&env.data_dir());
    assert_eq!(
        code(sessions.create_session(thread_with_tools()).await),
        "JOURNAL_WRITE_FAILED"
    );
    assert_eq!(
        threads(&mut sessions).await,
        count,
        "a refused create kept its thread"
    );
    // The refused record's file was removed; fill what it freed.
    fill(&env.data_dir());
    assert_eq!(
        code(sessions.send_text(send_text_request(&id, "hello")).await),
        "JOURNAL_WRITE_FAILED"
    );
    // The refused operation ended at once (decisions.md, JOURNAL_WRITE_FAILED).
    let refused_events = events.until(is_finished).await;
    assert_eq!(
        finished_event(&refused_events).error.unwrap().code,
        "JOURNAL_WRITE_FAILED"
    );
    let snap = snapshot(&mut sessions, &id).await;
    assert_eq!(snap.status, pb::SessionStatus::Idle as i32);
    assert!(snap.active_operation.is_none(), "{snap:?}");
    let refused = snap.last_operation.unwrap();
    assert_ne!(
        Some(&refused.operation_id),
        before.last_operation.as_ref().map(|o| &o.operation_id)
    );
    assert_eq!(refused.error.unwrap().code, "JOURNAL_WRITE_FAILED");

    let failed = code(assets.upload(upload(vec![2; 2 * 1024 * 1024])).await);
    eprintln!("upload on a full disk: {failed}");
    assert_eq!(failed, "STORAGE_FULL");
    let mut read = assets
        .read(pb::ReadAssetRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
            path: "/kept.bin".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut kept = Vec::new();
    while let Some(chunk) = read.message().await.unwrap() {
        kept.extend(chunk.data);
    }
    assert_eq!(kept, vec![1; 1000], "the stored asset changed");
    // The same through the transfer server, as a page uploads.
    let ticket = assets
        .create_upload_ticket(pb::CreateUploadTicketRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
            target_path: Some("/kept.bin".into()),
            name: "kept.bin".into(),
            size_bytes: 2 * 1024 * 1024,
            content_type: "application/octet-stream".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let (status, body) = http_put(&ticket, &vec![4; 2 * 1024 * 1024]).await;
    eprintln!("transfer-server upload on a full disk: {status} {body}");
    assert_eq!(status, 507, "{body}");
    assert!(body.contains("STORAGE_FULL"), "{body}");

    // Settings: refused, and the stored ones kept.
    let mut provider = env.provider().await;
    let stored = provider
        .get_full_settings(pb::GetSettingsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut changed = stored.clone();
    changed.tavily_api_key = "x".repeat(4096);
    let refused = code(
        provider
            .update_settings(pb::UpdateSettingsRequest {
                settings: Some(changed),
                update_mask: None,
            })
            .await,
    );
    assert_eq!(refused, "STORAGE_FULL");
    assert_eq!(
        provider
            .get_full_settings(pb::GetSettingsRequest {})
            .await
            .unwrap()
            .into_inner(),
        stored
    );

    // End still ends (in memory) and says the journal missed it; Reactivate
    // is refused and the thread stays ended.
    assert_eq!(
        code(
            sessions
                .end(pb::EndRequest::from(thread_request(&id)))
                .await
        ),
        "JOURNAL_WRITE_FAILED"
    );
    assert_eq!(
        snapshot(&mut sessions, &id).await.status,
        pb::SessionStatus::Ended as i32
    );
    assert_eq!(
        code(sessions.reactivate(thread_request(&id)).await),
        "JOURNAL_WRITE_FAILED"
    );
    assert_eq!(
        snapshot(&mut sessions, &id).await.status,
        pb::SessionStatus::Ended as i32
    );

    // Space again: everything works.
    std::fs::remove_file(&filler).unwrap();
    sessions.reactivate(thread_request(&id)).await.unwrap();
    let again = new_thread(&mut sessions).await;
    assert!(
        env.data_dir()
            .join(format!("sessions/{again}.json"))
            .exists()
    );
    assert_eq!(
        chat_text(&turn(&mut sessions, &mut events, &id, "hello").await),
        "hello"
    );
    assets
        .upload(upload(vec![3; 2 * 1024 * 1024]))
        .await
        .unwrap();
    // Leftover temp files of the refused upload: none.
    let workspace = PathBuf::from(snapshot(&mut sessions, &id).await.workspace_path);
    let assets_dir = workspace.join(".pedelec-runtime/assets").join(&id);
    let names: Vec<String> = std::fs::read_dir(&assets_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["kept.bin"], "{}", assets_dir.display());
}

/// kill -9 of the native host while a turn waits for the page's answer to a
/// tool call. The host is no part of the turn: the turn keeps waiting, and
/// the next host (as
/// the extension starts it) re-attaches with the last seq it had seen, gets
/// every later event exactly once, answers the tool call, and the turn
/// completes; the next turn works.
#[tokio::test]
async fn kill_9_of_the_native_host_mid_turn_with_a_pending_tool_call() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut first = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut first).await;
    first
        .ok("send_text", json!({"sessionId": id, "text": "@@tool"}))
        .await;
    let seen = first
        .events_until(&id, |e| e["type"] == "tool_request")
        .await;
    let last_seq = seen.last().unwrap()["seq"].as_u64().unwrap();
    let request_id = seen.last().unwrap()["event"]["toolRequestId"].clone();

    let pid = first.child.id().unwrap();
    signal(pid as i32, libc::SIGKILL);
    let _ = first.child.wait().await;

    let mut second = Host::spawn(&env, EXTENSION);
    let attached = second
        .ok("attach", json!({"sessionId": id, "afterSeq": last_seq}))
        .await;
    let snapshot = &attached["snapshot"];
    assert_eq!(snapshot["status"], "waiting_tool_result", "{snapshot}");
    assert_eq!(snapshot["replayGap"], false, "{snapshot}");
    assert_eq!(snapshot["pendingToolRequest"]["toolRequestId"], request_id);
    second
        .ok(
            "submit_tool_result",
            json!({"sessionId": id, "toolRequestId": request_id, "result": {"title": "after the kill"}}),
        )
        .await;
    let rest = second.events_until(&id, finished).await;
    let seqs: Vec<u64> = rest.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs[0], last_seq + 1, "{seqs:?}");
    assert_consecutive(&rest);
    let last = &rest.last().unwrap()["event"];
    assert_eq!(last["outcome"], "completed", "{last}");
    let chat: String = rest
        .iter()
        .filter(|e| e["event"]["type"] == "chat")
        .map(|e| e["event"]["text"].as_str().unwrap().to_string())
        .collect();
    assert!(chat.contains("after the kill"), "{chat}");
    let cleared: Vec<_> = rest
        .iter()
        .filter(|e| e["event"]["type"] == "tool_request_cleared")
        .collect();
    assert_eq!(cleared.len(), 1, "{rest:?}");
    assert_eq!(cleared[0]["event"]["reason"], "resolved");

    // The next turn works.
    second
        .ok("send_text", json!({"sessionId": id, "text": "hi"}))
        .await;
    let next = second.events_until(&id, finished).await;
    assert_eq!(next.last().unwrap()["event"]["outcome"], "completed");
}
