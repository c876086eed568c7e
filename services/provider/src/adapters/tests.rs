//! Tests of the shared pieces: line splitting, decoding, dispatch.

use super::testutil::*;
use super::*;

fn lines(results: Vec<Result<String, LineError>>) -> Vec<String> {
    results.into_iter().map(|r| r.unwrap()).collect()
}

#[test]
fn splits_lines_across_chunks_and_utf8() {
    let text = "héllo ✓\r\nsecond\n\nlast";
    let bytes = text.as_bytes();
    for at in 0..=bytes.len() {
        let mut s = LineSplitter::new();
        let mut got = lines(s.push(&bytes[..at]));
        got.extend(lines(s.push(&bytes[at..])));
        got.extend(s.finish().map(Result::unwrap));
        assert_eq!(got, ["héllo ✓", "second", "", "last"], "split at {at}");
    }
}

#[test]
fn finish_is_empty_after_a_newline() {
    let mut s = LineSplitter::new();
    assert_eq!(lines(s.push(b"a\n")), ["a"]);
    assert_eq!(s.finish(), None);
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    let mut s = LineSplitter::new();
    assert_eq!(lines(s.push(b"a\xffb\n")), ["a\u{fffd}b"]);
}

#[test]
fn line_of_exactly_max_is_kept() {
    let mut s = LineSplitter::new();
    let mut line = vec![b'x'; MAX_LINE];
    line.push(b'\n');
    let got = s.push(&line);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].as_ref().unwrap().len(), MAX_LINE);
}

#[test]
fn over_long_line_is_one_error_and_is_skipped() {
    let mut s = LineSplitter::new();
    let mut out = s.push(b"ok\n");
    // Sent in pieces, as a pipe would; the buffer never holds more than MAX_LINE.
    let piece = vec![b'y'; 64 * 1024];
    for _ in 0..40 {
        out.extend(s.push(&piece));
        assert!(s.buf.len() <= MAX_LINE);
    }
    out.extend(s.push(b"tail of the long line\nnext\n"));
    assert_eq!(
        out,
        vec![
            Ok("ok".to_owned()),
            Err(LineError::TooLong),
            Ok("next".to_owned())
        ]
    );
    assert_eq!(s.finish(), None);
}

#[test]
fn over_long_line_in_one_chunk() {
    let mut s = LineSplitter::new();
    let mut bytes = vec![b'z'; MAX_LINE + 1];
    bytes.extend_from_slice(b"\nafter");
    assert_eq!(
        s.push(&bytes),
        vec![Err(LineError::TooLong)],
        "the newline ends the skipped line"
    );
    assert_eq!(s.finish(), Some(Ok("after".to_owned())));
}

#[test]
fn over_long_unterminated_line_at_eof() {
    let mut s = LineSplitter::new();
    assert_eq!(
        s.push(&vec![b'z'; MAX_LINE + 10]),
        vec![Err(LineError::TooLong)]
    );
    assert_eq!(s.finish(), None);
}

#[test]
fn decoder_counts_dropped_lines_and_keeps_going() {
    let mut d = Decoder::new(Provider::Ollama);
    let mut events = d.push(&vec![b'{'; MAX_LINE + 1]);
    events.extend(d.push(b"\n{\"type\":\"chat\",\"text\":\"hi\"}"));
    events.extend(d.finish());
    assert_eq!(events, [chat("hi")]);
    assert_eq!(d.dropped_lines(), 1);
}

#[test]
fn each_command_runs_its_adapters_program() {
    for p in crate::catalog::PROVIDERS.map(|s| s.provider) {
        assert_eq!(
            p.command(&turn("x", Some("m"), None, None)).program,
            program(p)
        );
    }
}

/// What a page or the settings choose reaches a CLI's argv only inside one
/// `--flag=value` argument (the model, the effort, agy's prompt), so no value
/// can read as an option or as another argument; every other CLI reads the
/// prompt from stdin. The session id (a checked word, `agent_args`) follows
/// its flag.
#[test]
fn chosen_values_reach_argv_only_inside_one_argument() {
    let prompt = "--dangerously-skip-permissions and more";
    for p in crate::catalog::PROVIDERS.map(|s| s.provider) {
        for access in [Access::Tools, Access::Edit, Access::Full] {
            let mut t = turn(prompt, Some("m-1"), Some("high"), Some("sess-1"));
            t.access = access;
            t.mcp = Some("/bin/pedelec-cli".into());
            let line = p.command(&t);
            let args = args(&line);
            let has = |a: &str| args.iter().any(|x| x == a);
            assert!(!has("m-1") && !has("high"), "{p:?}: {args:?}");
            assert!(args.iter().any(|a| a == "--model=m-1"), "{p:?}: {args:?}");
            if prompt_on_argv(p) {
                assert_eq!(line.stdin, None, "{p:?}");
                let with_prompt: Vec<_> = args.iter().filter(|a| a.contains(prompt)).collect();
                assert_eq!(with_prompt, [&format!("-p={prompt}")], "{p:?}");
            } else {
                assert_eq!(line.stdin.as_deref(), Some(prompt), "{p:?}");
                assert!(!args.iter().any(|a| a.contains(prompt)), "{p:?}: {args:?}");
            }
            let at = args.iter().position(|a| a == "sess-1");
            let before = at.and_then(|i| args.get(i - 1)).map(String::as_str);
            assert!(
                matches!(
                    before,
                    Some("resume" | "--resume" | "--session" | "--conversation" | "--session-id")
                ),
                "{p:?}: the session id follows its flag: {args:?}"
            );
        }
    }
}

#[test]
fn no_parser_panics_on_odd_input() {
    let odd = [
        "",
        " ",
        "null",
        "42",
        "\"str\"",
        "[]",
        "{}",
        "{\"type\":null}",
        "{\"type\":\"result\",\"usage\":{\"input_tokens\":-1,\"output_tokens\":1.5}}",
        "{\"type\":\"assistant\",\"message\":{\"content\":\"not an array\"}}",
        "{\"type\":\"item.completed\",\"item\":[]}",
        "{\"type\":\"step_finish\",\"part\":{\"tokens\":{\"cache\":7}}}",
        "{\"type\":\"turn.failed\",\"error\":\"flat\"}",
        "{\"event\":\"result\",\"result\":null}",
        "{\"type\":\"stream_event\",\"event\":{\"type\":\"content_block_delta\",\"delta\":null}}",
        "{\"type\":\"error\",\"error\":{\"data\":[]}}",
    ];
    for p in crate::catalog::PROVIDERS.map(|s| s.provider) {
        let mut parser = p.parser();
        for line in odd {
            let _ = parser.parse_line(line);
        }
        let _ = parser.finish();
    }
}

/// Every captured transcript except gemini's (Pedelec does not launch gemini) is covered by a
/// test in its adapter; this catches a new fixture file that nobody wired up.
#[test]
fn every_fixture_is_known() {
    let dir = super::testutil::transcripts_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "claude_err.jsonl",
            "claude_run1.jsonl",
            "claude_run2.jsonl",
            "codex_err400.jsonl",
            "codex_reasoning_and_reconnect.jsonl",
            "codex_run1.jsonl",
            "codex_run2.jsonl",
            "gemini_run1.jsonl",
            "opencode_err.jsonl",
            "opencode_run1.jsonl",
            "opencode_run2.jsonl",
        ]
    );
}

#[test]
fn decoder_can_move_to_another_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Decoder>();
    assert_send::<LineSplitter>();
}

fn mcp_turn(resume: bool) -> TurnSpec {
    TurnSpec {
        workspace: "/w".into(),
        prompt: "hi".into(),
        resume_id: resume.then(|| "sess-1".to_string()),
        mcp: Some("/opt/pedelec/pedelec-cli".into()),
        access: Access::Full,
        ..Default::default()
    }
}

fn args(line: &CommandLine) -> Vec<String> {
    line.args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn codex_registers_the_mcp_server_with_names_not_values() {
    for resume in [false, true] {
        let line = Provider::Codex.command(&mcp_turn(resume));
        let a = args(&line);
        let settings: Vec<&str> = a
            .windows(2)
            .filter(|w| w[0] == "-c" && w[1].starts_with("mcp_servers."))
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            settings,
            [
                r#"mcp_servers.pedelec.command="/opt/pedelec/pedelec-cli""#,
                r#"mcp_servers.pedelec.args=["mcp"]"#,
                r#"mcp_servers.pedelec.env_vars=["PEDELEC_THREAD_ID","PEDELEC_TOOL_TOKEN","PEDELEC_RUNTIME_DIR"]"#,
                "mcp_servers.pedelec.required=true",
                "mcp_servers.pedelec.tool_timeout_sec=600",
                r#"mcp_servers.pedelec.default_tools_approval_mode="approve""#,
            ]
        );
        // Global options: before `resume`, like the effort override.
        let last_setting = a
            .iter()
            .rposition(|x| x.starts_with("mcp_servers."))
            .unwrap();
        if let Some(at) = a.iter().position(|x| x == "resume") {
            assert!(last_setting < at, "{a:?}");
        }
        assert!(line.env.is_empty());
    }
    let plain = Provider::Codex.command(&TurnSpec {
        mcp: None,
        ..mcp_turn(false)
    });
    assert!(!args(&plain).iter().any(|a| a.contains("mcp_servers")));
}

#[test]
fn claude_gets_a_strict_mcp_config_with_placeholders() {
    let line = Provider::Claude.command(&mcp_turn(false));
    let a = args(&line);
    assert!(a.contains(&"--strict-mcp-config".to_string()));
    let config = a
        .iter()
        .find_map(|x| x.strip_prefix("--mcp-config="))
        .expect("--mcp-config=");
    let config: serde_json::Value = serde_json::from_str(config).unwrap();
    assert_eq!(
        config,
        serde_json::json!({"mcpServers": {"pedelec": {
            "command": "/opt/pedelec/pedelec-cli", "args": ["mcp"],
            "env": {"PEDELEC_THREAD_ID": "${PEDELEC_THREAD_ID}",
                    "PEDELEC_TOOL_TOKEN": "${PEDELEC_TOOL_TOKEN}",
                    "PEDELEC_RUNTIME_DIR": "${PEDELEC_RUNTIME_DIR}"}}}})
    );
    assert!(
        line.env
            .contains(&("MCP_CONNECTION_NONBLOCKING".into(), "0".into()))
    );
    assert!(
        line.env
            .contains(&("CLAUDE_CODE_MCP_ALLOWLIST_ENV".into(), "1".into()))
    );
    let plain = Provider::Claude.command(&TurnSpec {
        mcp: None,
        ..mcp_turn(false)
    });
    assert!(!args(&plain).iter().any(|a| a.contains("mcp")));
    assert!(plain.env.is_empty());
}

#[test]
fn opencode_gets_its_mcp_config_in_the_environment() {
    let line = Provider::Opencode.command(&mcp_turn(false));
    assert!(!args(&line).iter().any(|a| a.contains("mcp")));
    let [(name, config)] = &line.env[..] else {
        panic!("one variable expected: {:?}", line.env)
    };
    assert_eq!(name, "OPENCODE_CONFIG_CONTENT");
    let config: serde_json::Value = serde_json::from_str(config).unwrap();
    assert_eq!(
        config,
        serde_json::json!({"mcp": {"pedelec": {
            "type": "local", "enabled": true,
            "command": ["/opt/pedelec/pedelec-cli", "mcp"],
            "environment": {"PEDELEC_THREAD_ID": "{env:PEDELEC_THREAD_ID}",
                            "PEDELEC_TOOL_TOKEN": "{env:PEDELEC_TOOL_TOKEN}",
                            "PEDELEC_RUNTIME_DIR": "{env:PEDELEC_RUNTIME_DIR}"}}}})
    );
}

#[test]
fn cursor_antigravity_and_ollama_ignore_mcp() {
    for p in [Provider::Cursor, Provider::Antigravity, Provider::Ollama] {
        let with = p.command(&mcp_turn(false));
        let without = p.command(&TurnSpec {
            mcp: None,
            ..mcp_turn(false)
        });
        assert_eq!(with, without, "{p:?}");
    }
}
