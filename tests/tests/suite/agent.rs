//! pedelec-agent, the real binary, against the mock Ollama server
//! (tests/src/mock_ollama.rs): alone on a temp workspace, and as the `ollama`
//! provider behind the real services and native host.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pb::session_event::Event;
use pedelec_proto::v1 as pb;
use pedelec_tests::mock_ollama::*;
use pedelec_tests::*;
use serde_json::{Value as Json, json};
use tokio::io::AsyncWriteExt;

/// One finished run of the agent.
struct Run {
    lines: Vec<Json>,
    code: Option<i32>,
    stderr: String,
}

impl Run {
    fn types(&self) -> Vec<&str> {
        self.lines
            .iter()
            .map(|l| l["type"].as_str().unwrap())
            .collect()
    }
    fn texts(&self, kind: &str) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|l| l["type"] == kind)
            .map(|l| l["text"].as_str().unwrap())
            .collect()
    }
    fn session(&self) -> String {
        assert_eq!(self.lines[0]["type"], "session", "session line first");
        self.lines[0]["id"].as_str().unwrap().to_string()
    }
    fn error(&self) -> &Json {
        let errors: Vec<_> = self.lines.iter().filter(|l| l["type"] == "error").collect();
        assert_eq!(errors.len(), 1, "one error line: {:?}", self.lines);
        assert_eq!(self.code, Some(1));
        errors[0]
    }
}

/// The thread id the standalone runs get, as ProviderService sets one for
/// every turn.
const THREAD: &str = "thr_0123456789abcdef0123456789abcdef";

/// A temp root with a workspace folder `ws` and an empty runtime dir.
struct Agent {
    root: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Agent {
    fn new(mock: &MockOllama) -> Agent {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("ws")).unwrap();
        std::fs::create_dir_all(root.path().join("rt")).unwrap();
        Agent {
            root,
            env: vec![
                ("PEDELEC_OLLAMA_ENDPOINT".into(), mock.url.clone()),
                ("PEDELEC_THREAD_ID".into(), THREAD.into()),
            ],
        }
    }

    /// Run by hand: no `PEDELEC_THREAD_ID`.
    fn without_thread(&mut self) {
        self.env.retain(|(k, _)| k != "PEDELEC_THREAD_ID");
    }

    /// The thread's own assets folder in the workspace.
    fn assets(&self) -> PathBuf {
        self.ws().join(".pedelec-runtime/assets").join(THREAD)
    }

    fn ws(&self) -> PathBuf {
        self.root.path().join("ws")
    }

    fn set(&mut self, key: &str, value: &str) {
        self.env.push((key.into(), value.into()));
    }

    async fn run(&self, extra: &[&str], prompt: &str) -> Run {
        let mut cmd = tokio::process::Command::new(bin("pedelec-agent"));
        cmd.env_clear()
            .env("HOME", self.root.path())
            .env("PATH", "/usr/bin:/bin")
            .env("PEDELEC_RUNTIME_DIR", self.root.path().join("rt"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(["--model", "llama3.2", "--workspace"])
            .arg(self.ws())
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn pedelec-agent");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(prompt.as_bytes()).await.unwrap();
        drop(stdin);
        let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
            .await
            .expect("agent hung")
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        Run {
            lines: stdout
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect(),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The `role: tool` answers among a request's messages.
fn tool_answers(req: &Recorded) -> Vec<Json> {
    req.messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_text_answer_streams_as_deltas_then_the_chat_and_usage() {
    let mock = MockOllama::start(|_| text_reply(&["Hel", "lo ", "✓"], 12, 3)).await;
    let agent = Agent::new(&mock);
    let run = agent.run(&[], "hi").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.types(),
        [
            "session",
            "chat_delta",
            "chat_delta",
            "chat_delta",
            "chat",
            "usage"
        ]
    );
    assert_eq!(run.texts("chat_delta"), ["Hel", "lo ", "✓"]);
    assert_eq!(run.texts("chat"), ["Hello ✓"]);
    assert_eq!(
        run.lines[5],
        json!({"type": "usage", "input": 12, "output": 3})
    );

    let chats = mock.chats();
    assert_eq!(chats.len(), 1);
    let req = &chats[0];
    assert_eq!(req.body["model"], "llama3.2");
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.messages()[0]["role"], "system");
    assert_eq!(
        (req.last_role().as_str(), req.last_content().as_str()),
        ("user", "hi")
    );
    // No Tavily key: no web search. No Ollama key: no Authorization header.
    assert_eq!(req.tool_names(), ["list_files", "read_file", "write_asset"]);
    assert!(!req.headers.contains_key("authorization"));

    // The conversation is in the workspace, under the session id.
    let saved = agent
        .ws()
        .join(format!(".pedelec-runtime/agent/{}.json", run.session()));
    let saved: Json = serde_json::from_slice(&std::fs::read(saved).unwrap()).unwrap();
    assert_eq!(saved["messages"][1]["content"], "Hello ✓");
}

#[tokio::test]
async fn the_ollama_key_goes_as_a_bearer_token() {
    let mock = MockOllama::start(|_| text_reply(&["ok"], 1, 1)).await;
    let mut agent = Agent::new(&mock);
    agent.set("PEDELEC_OLLAMA_API_KEY", "ol-secret");
    let run = agent.run(&[], "hi").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(mock.chats()[0].headers["authorization"], "Bearer ol-secret");
}

/// Answers with the tool calls in `calls`, one per round, then with text.
fn scripted_calls(calls: Vec<(&'static str, Json)>) -> impl Fn(&Recorded) -> Reply {
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

#[tokio::test]
async fn files_are_read_inside_the_workspace_and_escapes_are_refused() {
    let mock = MockOllama::start(scripted_calls(vec![
        ("list_files", json!({})),
        ("read_file", json!({"path": "notes/today.txt"})),
        ("read_file", json!({"path": "../secret.txt"})),
        ("read_file", json!({"path": "/etc/hostname"})),
        ("read_file", json!({"path": "link/secret.txt"})),
    ]))
    .await;
    let agent = Agent::new(&mock);
    std::fs::create_dir_all(agent.ws().join("notes")).unwrap();
    std::fs::write(agent.ws().join("notes/today.txt"), "the word is plover").unwrap();
    std::fs::write(agent.root.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(agent.root.path(), agent.ws().join("link")).unwrap();

    let run = agent.run(&[], "read my notes").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.texts("chat"), ["done"]);
    let chats = mock.chats();
    assert_eq!(chats.len(), 6);
    let answers = tool_answers(chats.last().unwrap());
    let names: Vec<_> = answers[0]["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [".pedelec-runtime", "link", "notes"]);
    assert_eq!(answers[1]["result"]["content"], "the word is plover");
    for refused in &answers[2..] {
        assert_eq!(refused["ok"], false, "{refused}");
        assert_eq!(refused["error"]["code"], "ASSET_PATH_INVALID", "{refused}");
    }
    let text = chats.last().unwrap().body.to_string();
    assert!(!text.contains("outside"), "the secret leaked: {text}");
}

#[tokio::test]
async fn write_asset_lands_in_the_threads_assets_folder() {
    let own = format!(".pedelec-runtime/assets/{THREAD}");
    let mock = MockOllama::start(scripted_calls(vec![
        (
            "write_asset",
            json!({"name": "out/report.md", "content": "# Report\n"}),
        ),
        (
            "write_asset",
            json!({"name": "../../escape.md", "content": "x"}),
        ),
        ("read_file", json!({"path": format!("{own}/out/report.md")})),
    ]))
    .await;
    let agent = Agent::new(&mock);
    let run = agent.run(&[], "write a report").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let written = agent.assets().join("out/report.md");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "# Report\n");
    let answers = tool_answers(mock.chats().last().unwrap());
    assert_eq!(answers[0]["result"]["path"], format!("{own}/out/report.md"));
    assert_eq!(answers[1]["error"]["code"], "ASSET_PATH_INVALID");
    assert!(!agent.root.path().join("escape.md").exists());
    assert!(!agent.ws().join(".pedelec-runtime/escape.md").exists());
    // It reads back what it wrote.
    assert_eq!(answers[2]["result"]["content"], "# Report\n");
    // The model is told where its thread's files are.
    let first = &mock.chats()[0];
    let system = first.messages()[0]["content"].as_str().unwrap().to_string();
    assert!(system.contains(&format!("are in {own}/.")), "{system}");
    let write = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "write_asset")
        .unwrap();
    let description = write["function"]["description"].as_str().unwrap();
    assert!(description.contains(&format!("({own}/)")), "{description}");
}

#[tokio::test]
async fn another_threads_assets_are_out_of_reach() {
    let other = ".pedelec-runtime/assets/thr_ffffffffffffffffffffffffffffffff";
    let mock = MockOllama::start(scripted_calls(vec![
        ("read_file", json!({"path": format!("{other}/private.txt")})),
        ("list_files", json!({"path": other})),
        ("list_files", json!({"path": ".pedelec-runtime/assets"})),
        (
            "write_asset",
            json!({"name": "../thr_ffffffffffffffffffffffffffffffff/private.txt", "content": "overwritten"}),
        ),
    ]))
    .await;
    let agent = Agent::new(&mock);
    std::fs::create_dir_all(agent.ws().join(other)).unwrap();
    std::fs::write(
        agent.ws().join(other).join("private.txt"),
        "the other thread's plover",
    )
    .unwrap();

    let run = agent.run(&[], "read the other thread's file").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let last = mock.chats().pop().unwrap();
    let answers = tool_answers(&last);
    assert_eq!(answers.len(), 4);
    for refused in &answers {
        assert_eq!(refused["ok"], false, "{refused}");
        assert_eq!(refused["error"]["code"], "ASSET_PATH_INVALID", "{refused}");
    }
    let text = last.body.to_string();
    assert!(
        !text.contains("plover"),
        "the other thread's file leaked: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(agent.ws().join(other).join("private.txt")).unwrap(),
        "the other thread's plover"
    );
}

#[tokio::test]
async fn read_only_and_a_run_without_a_thread_write_nothing() {
    let mock = MockOllama::start(scripted_calls(vec![(
        "write_asset",
        json!({"name": "a.txt", "content": "x"}),
    )]))
    .await;
    let mut agent = Agent::new(&mock);

    // The site's level "tools": no write tool offered or served.
    let run = agent.run(&["--read-only"], "write").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let chats = mock.chats();
    assert_eq!(chats[0].tool_names(), ["list_files", "read_file"]);
    let system = chats[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!system.contains("write_asset"), "{system}");
    assert_eq!(
        tool_answers(&chats[1])[0]["error"]["code"],
        "TOOL_NOT_FOUND"
    );
    assert!(!agent.ws().join(".pedelec-runtime/assets").exists());

    // By hand, without PEDELEC_THREAD_ID: no assets folder, said clearly.
    agent.without_thread();
    let run = agent.run(&[], "write").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("PEDELEC_THREAD_ID is not set"),
        "{}",
        run.stderr
    );
    let chats = mock.chats();
    assert_eq!(chats[2].tool_names(), ["list_files", "read_file"]);
    let refused = &tool_answers(&chats[3])[0];
    assert_eq!(refused["error"]["code"], "TOOL_NOT_FOUND");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("no Pedelec thread"), "{message}");
    assert!(!agent.ws().join(".pedelec-runtime/assets").exists());
}

#[tokio::test]
async fn a_thread_id_that_is_no_folder_name_is_refused() {
    let mock = MockOllama::start(|_| text_reply(&["ok"], 1, 1)).await;
    let mut agent = Agent::new(&mock);
    agent.without_thread();
    agent.set("PEDELEC_THREAD_ID", "../thr_x");
    let run = agent.run(&[], "hi").await;
    let error = run.error();
    assert_eq!(error["code"], "PROVIDER_FAILED");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("PEDELEC_THREAD_ID"),
        "{error}"
    );
    assert!(mock.chats().is_empty());
}

#[tokio::test]
async fn a_resumed_session_sends_the_saved_conversation() {
    let mock = MockOllama::start(|req| {
        if req.last_content().contains("What is my name") {
            text_reply(&["You are ", "Ada."], 30, 3)
        } else {
            text_reply(&["Nice to meet you, Ada."], 10, 6)
        }
    })
    .await;
    let agent = Agent::new(&mock);
    let first = agent.run(&[], "My name is Ada").await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let id = first.session();
    // A new process, as the next turn of a (reactivated) thread starts one.
    let second = agent.run(&["--session-id", &id], "What is my name?").await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(second.session(), id);
    assert_eq!(second.texts("chat"), ["You are Ada."]);
    let history: Vec<(String, String)> = mock.chats()[1]
        .messages()
        .iter()
        .skip(1)
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = [
        ("user", "My name is Ada"),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
    ];
    assert_eq!(
        history,
        expected.map(|(r, c)| (r.to_string(), c.to_string()))
    );
}

#[tokio::test]
async fn tool_rounds_are_bounded() {
    let mock = MockOllama::start(|_| tool_call_reply("list_files", json!({}))).await;
    let mut agent = Agent::new(&mock);
    agent.set("PEDELEC_AGENT_MAX_TOOL_ROUNDS", "2");
    let run = agent.run(&[], "loop forever").await;
    let error = run.error();
    assert_eq!(error["code"], "PROVIDER_FAILED");
    assert_eq!(error["details"]["maxToolRounds"], 2);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("2 rounds of tool calls"), "{message}");
    // Two rounds ran; the third request's tool calls were refused.
    assert_eq!(mock.chats().len(), 3);
    assert_eq!(tool_answers(&mock.chats()[2]).len(), 2);
}

#[tokio::test]
async fn web_search_is_offered_only_with_a_tavily_key() {
    let mock = MockOllama::start(scripted_calls(vec![(
        "web_search",
        json!({"query": "pedelec bikes"}),
    )]))
    .await;
    let mut agent = Agent::new(&mock);
    agent.set("PEDELEC_TAVILY_ENDPOINT", &mock.url);

    let without = agent.run(&[], "search").await;
    assert_eq!(without.code, Some(0), "{}", without.stderr);
    assert!(
        !mock.chats()[0]
            .tool_names()
            .contains(&"web_search".to_string())
    );
    let refused = tool_answers(&mock.chats()[1]);
    assert_eq!(refused[0]["error"]["code"], "TOOL_NOT_FOUND");
    assert!(mock.requests().iter().all(|r| r.path != "/search"));

    agent.set("PEDELEC_TAVILY_API_KEY", TAVILY_KEY);
    let with = agent.run(&[], "search").await;
    assert_eq!(with.code, Some(0), "{}", with.stderr);
    let chats = mock.chats();
    assert!(chats[2].tool_names().contains(&"web_search".to_string()));
    let search: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/search")
        .collect();
    assert_eq!(search.len(), 1);
    assert_eq!(
        search[0].body,
        json!({"query": "pedelec bikes", "search_depth": "basic", "max_results": 5})
    );
    let answer = &tool_answers(&chats[3])[0];
    assert_eq!(
        answer["result"]["results"][0]["content"],
        "About pedelec bikes."
    );
}

#[tokio::test]
async fn http_failures_carry_their_codes() {
    let mock = MockOllama::start(|req| match req.last_content().as_str() {
        "401" => Reply::Status(401, "unauthorized".into()),
        "404" => Reply::Status(
            404,
            "model \"llama3.2\" not found, try pulling it first".into(),
        ),
        "429" => Reply::Status(429, "too many requests".into()),
        "500" => Reply::Status(500, "llama runner process has terminated".into()),
        "invalid" => Reply::Raw("<html>not ollama</html>\n".into()),
        "cut" => Reply::Stream(vec![json!({"message": {"content": "par"}, "done": false})]),
        _ => Reply::Stream(vec![json!({"error": "out of memory"})]),
    })
    .await;
    let agent = Agent::new(&mock);
    for (prompt, code) in [
        ("401", "PROVIDER_AUTH_FAILED"),
        ("404", "PROVIDER_MODEL_NOT_FOUND"),
        ("429", "PROVIDER_RATE_LIMITED"),
        ("500", "PROVIDER_FAILED"),
        ("invalid", "PROVIDER_INVALID_RESPONSE"),
        ("cut", "PROVIDER_INVALID_RESPONSE"),
        ("mid-stream error", "PROVIDER_FAILED"),
    ] {
        let run = agent.run(&[], prompt).await;
        assert_eq!(run.error()["code"], code, "{prompt}: {:?}", run.lines);
    }
    let mut unreachable = Agent::new(&mock);
    unreachable.set("PEDELEC_OLLAMA_ENDPOINT", "http://127.0.0.1:1");
    let run = unreachable.run(&[], "hi").await;
    assert_eq!(run.error()["code"], "PROVIDER_UNREACHABLE");
    assert_eq!(run.types()[0], "session");
}

#[tokio::test]
async fn version_answers_without_the_network() {
    let out = std::process::Command::new(bin("pedelec-agent"))
        .arg("--version")
        .env_clear()
        .env("PEDELEC_OLLAMA_ENDPOINT", "http://127.0.0.1:1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("pedelec-agent "));
}

// ---- behind the real services ----

/// Services up with the real pedelec-agent and Ollama pointed at `mock`.
async fn services_with(env: &TestEnv, mock: &MockOllama, key: &str) -> Launcher {
    let launcher = env.up().await;
    let mut settings = settings_with_default_models(&[("ollama", "llama3.2")]);
    settings.ollama_endpoint = mock.url.clone();
    settings.ollama_api_key = key.into();
    env.update_settings(settings).await;
    launcher
}

async fn operation(events: &mut Events) -> Vec<pb::SessionEvent> {
    events.until(is_finished).await
}

#[tokio::test]
async fn an_ollama_turn_through_session_service_and_its_error_codes() {
    let mock = MockOllama::start(|req| match req.last_content().as_str() {
        "401" => Reply::Status(401, "unauthorized".into()),
        "404" => Reply::Status(404, "model not found".into()),
        "429" => Reply::Status(429, "slow down".into()),
        "500" => Reply::Status(500, "boom".into()),
        "invalid" => Reply::Raw("nonsense\n".into()),
        _ => text_reply(&["Hi ", "there"], 20, 2),
    })
    .await;
    let env = TestEnv::new();
    let _launcher = services_with(&env, &mock, "ol-key").await;
    let mut sessions = env.session().await;
    let created = sessions
        .create_session(create_session_request(Some("ollama")))
        .await
        .unwrap()
        .into_inner();
    let id = created.session_id;
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;

    sessions
        .send_text(send_text_request(&id, "hello"))
        .await
        .unwrap();
    let first = operation(&mut events).await;
    assert_eq!(
        kinds(&first),
        [
            "operation_started",
            "status:running",
            "chat_delta",
            "chat_delta",
            "chat",
            "usage",
            "operation_finished:completed"
        ]
    );
    assert_eq!(delta_text(&first), "Hi there");
    assert_eq!(chat_text(&first), "Hi there");
    let usage = first_usage(&first).unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (20, 2));
    assert_eq!(mock.chats()[0].headers["authorization"], "Bearer ol-key");

    for (text, code) in [
        ("401", "PROVIDER_AUTH_FAILED"),
        ("404", "PROVIDER_MODEL_NOT_FOUND"),
        ("429", "PROVIDER_RATE_LIMITED"),
        ("500", "PROVIDER_FAILED"),
        ("invalid", "PROVIDER_INVALID_RESPONSE"),
    ] {
        // The previous operation's trailing status event comes first.
        sessions
            .send_text(send_text_request(&id, text))
            .await
            .unwrap();
        let seen = operation(&mut events).await;
        let error = seen
            .iter()
            .find_map(|e| match &e.event {
                Some(Event::Error(err)) => Some(err.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{text}: no error in {:?}", kinds(&seen)));
        assert_eq!(error.code, code, "{text}: {}", error.message);
        assert_eq!(
            kinds(&seen).last().unwrap(),
            "operation_finished:failed",
            "{text}"
        );
    }
    // Each turn resumed the same conversation: the last request holds them all.
    let last = mock.chats().pop().unwrap();
    let users: Vec<_> = last
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(users, ["hello", "401", "404", "429", "500", "invalid"]);

    let mut settings = settings_with_default_models(&[("ollama", "llama3.2")]);
    settings.ollama_endpoint = "http://127.0.0.1:1".into();
    env.update_settings(settings).await;
    sessions
        .send_text(send_text_request(&id, "again"))
        .await
        .unwrap();
    let seen = operation(&mut events).await;
    assert!(
        kinds(&seen).contains(&"error:PROVIDER_UNREACHABLE".to_string()),
        "{:?}",
        kinds(&seen)
    );
}

#[tokio::test]
async fn a_page_tool_round_trip_through_toolbridge_and_the_native_host() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let mock = MockOllama::start(move |req| {
        counter.fetch_add(1, Ordering::SeqCst);
        if req.last_role() == "tool" {
            let answer = req.last_content();
            text_reply(&["The page said: ", &answer], 40, 8)
        } else {
            tool_call_reply("get_page", json!({"q": "title"}))
        }
    })
    .await;
    let env = TestEnv::new();
    let _launcher = services_with(&env, &mock, "").await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    host.ok(
        "send_text",
        json!({"sessionId": id, "text": "What is the page's title?"}),
    )
    .await;
    let seen = host
        .events_until(&id, |e| e["type"] == "tool_request")
        .await;
    let request = seen.last().unwrap()["event"].clone();
    assert_eq!(request["tool"], "get_page");
    assert_eq!(request["args"], json!({"q": "title"}));
    let result = json!({"title": "Pedelec ✓"});
    host.ok(
        "submit_tool_result",
        json!({"sessionId": id, "toolRequestId": request["toolRequestId"], "result": result}),
    )
    .await;
    let rest = host.events_until(&id, finished).await;
    assert_eq!(rest.last().unwrap()["event"]["outcome"], "completed");
    let chat: String = rest
        .iter()
        .filter(|e| e["event"]["type"] == "chat")
        .map(|e| e["event"]["text"].as_str().unwrap())
        .collect();
    assert!(
        chat.contains(r#"{"ok":true,"result":{"title":"Pedelec ✓"}}"#),
        "{chat}"
    );

    let chats = mock.chats();
    assert_eq!(chats.len(), 2);
    let first = &chats[0];
    // The page's tools with their schemas, next to the built-in ones.
    let get_page = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "get_page")
        .expect("get_page offered");
    assert_eq!(
        get_page["function"]["parameters"],
        skills()["tools"][0]["argsSchema"]
    );
    // ToolBridge's shell-oriented block is replaced by the agent's system
    // message, which carries the page's guidance.
    assert_eq!(first.last_content(), "What is the page's title?");
    let system = first.messages()[0]["content"].as_str().unwrap().to_string();
    assert!(
        system.contains("Use get_page for page context."),
        "{system}"
    );
    assert!(!first.body.to_string().contains("pedelec-cli"));
}

#[tokio::test]
async fn what_the_agent_writes_the_page_lists_through_asset_service() {
    let mock = MockOllama::start(|req| {
        if req.last_role() == "tool" {
            text_reply(&["Saved."], 10, 2)
        } else {
            tool_call_reply(
                "write_asset",
                json!({"name": "out/summary.md", "content": "# Summary\n"}),
            )
        }
    })
    .await;
    let env = TestEnv::new();
    let _launcher = services_with(&env, &mock, "").await;
    let mut sessions = env.session().await;
    let created = sessions
        .create_session(create_session_request(Some("ollama")))
        .await
        .unwrap()
        .into_inner();
    let id = created.session_id;
    let workspace = PathBuf::from(created.snapshot.unwrap().workspace_path);
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;
    sessions
        .send_text(send_text_request(&id, "Summarise"))
        .await
        .unwrap();
    let seen = operation(&mut events).await;
    assert_eq!(
        kinds(&seen).last().unwrap(),
        "operation_finished:completed",
        "{:?}",
        kinds(&seen)
    );
    let answer = &tool_answers(mock.chats().last().unwrap())[0];
    assert_eq!(answer["ok"], true, "{answer}");

    let listed: Vec<_> = env
        .asset()
        .await
        .list(pb::ListAssetsRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .assets
        .into_iter()
        .map(|a| (a.path, a.size_bytes))
        .collect();
    assert_eq!(listed, [("/out/summary.md".to_string(), 10)]);
    let on_disk = workspace
        .join(".pedelec-runtime/assets")
        .join(&id)
        .join("out/summary.md");
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), "# Summary\n");
    // The system message named this thread's folder.
    let system = mock.chats()[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains(&format!(".pedelec-runtime/assets/{id}/")),
        "{system}"
    );
}

#[tokio::test]
async fn a_reactivated_thread_keeps_its_conversation() {
    let mock = MockOllama::start(|req| {
        if req.last_content() == "What is my name?" {
            text_reply(&["Ada."], 30, 2)
        } else {
            text_reply(&["Hello Ada."], 10, 3)
        }
    })
    .await;
    let env = TestEnv::new();
    let _launcher = services_with(&env, &mock, "").await;
    let mut sessions = env.session().await;
    let id = sessions
        .create_session(create_session_request(Some("ollama")))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;
    sessions
        .send_text(send_text_request(&id, "My name is Ada"))
        .await
        .unwrap();
    operation(&mut events).await;

    sessions
        .end(pb::EndRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
            reason: pb::EndReason::Requested as i32,
        })
        .await
        .unwrap();
    sessions.reactivate(thread_request(&id)).await.unwrap();
    sessions
        .send_text(send_text_request(&id, "What is my name?"))
        .await
        .unwrap();
    let seen = events
        .until(|e| kind(e) == "operation_finished:completed")
        .await;
    assert!(
        kinds(&seen).contains(&"ended".to_string()),
        "{:?}",
        kinds(&seen)
    );
    assert_eq!(chat_text(&seen), "Ada.");

    // The second turn's request carried the first turn, read back from the workspace.
    let chats = mock.chats();
    assert_eq!(chats.len(), 2);
    let history: Vec<_> = chats[1]
        .messages()
        .iter()
        .skip(1)
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        history,
        ["My name is Ada", "Hello Ada.", "What is my name?"]
    );
}
