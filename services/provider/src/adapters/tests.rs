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
fn provider_ids_round_trip() {
    for p in crate::catalog::PROVIDERS.map(|s| s.provider) {
        assert_eq!(Provider::from_id(p.id()), Some(p));
        assert_eq!(
            p.command(&turn("x", Some("m"), None, None)).program,
            p.program()
        );
    }
    assert_eq!(Provider::from_id("gemini"), None);
    assert!(Provider::Ollama.requires_model());
    assert!(!Provider::Codex.requires_model());
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
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/provider-transcripts");
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
