//! Helpers shared by the adapters' tests.

use std::path::PathBuf;

use super::{Decoder, Event, Provider};

/// Where the captured transcripts live: `tests/fixtures/provider-transcripts/` at the
/// repository's root (its README says how they were captured).
pub fn transcripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/provider-transcripts")
}

/// A captured transcript: the stdout of a real agent CLI run against the mock model.
pub fn fixture(name: &str) -> Vec<u8> {
    read(transcripts_dir().join(name))
}

/// A hand-written transcript from `src/adapters/testdata/`.
pub fn testdata(name: &str) -> Vec<u8> {
    read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/adapters/testdata")
            .join(name),
    )
}

fn read(path: PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn decode(provider: Provider, chunks: &[&[u8]]) -> Vec<Event> {
    let mut decoder = Decoder::new(provider);
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(decoder.push(chunk));
    }
    events.extend(decoder.finish());
    assert_eq!(decoder.dropped_lines(), 0);
    events
}

/// Asserts that `bytes` decode to exactly `expected`, whole, split in two at every offset, and
/// fed one byte at a time.
pub fn assert_stream(provider: Provider, bytes: &[u8], expected: &[Event]) {
    assert_eq!(decode(provider, &[bytes]), expected, "whole input");
    for at in 0..=bytes.len() {
        let (a, b) = bytes.split_at(at);
        assert_eq!(decode(provider, &[a, b]), expected, "split at byte {at}");
    }
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode(provider, &singles), expected, "1-byte chunks");
}

pub fn chat(s: &str) -> Event {
    Event::Chat(s.to_owned())
}

pub fn delta(s: &str) -> Event {
    Event::ChatDelta(s.to_owned())
}

pub fn session(s: &str) -> Event {
    Event::SessionId(s.to_owned())
}

pub fn usage(input: u64, output: u64, cumulative: bool) -> Event {
    Event::Usage {
        input,
        output,
        total: input + output,
        cumulative,
    }
}

pub fn error(message: &str, details: Option<serde_json::Value>) -> Event {
    Event::Error {
        message: message.to_owned(),
        details,
        code: None,
    }
}

/// The arguments as strings, for comparing command lines.
pub fn args(cmd: &super::CommandLine) -> Vec<String> {
    cmd.args
        .iter()
        .map(|a| a.to_str().expect("test args are UTF-8").to_owned())
        .collect()
}

pub fn turn(
    prompt: &str,
    model: Option<&str>,
    effort: Option<&str>,
    resume_id: Option<&str>,
) -> super::TurnSpec {
    super::TurnSpec {
        workspace: PathBuf::from("/ws/a b"),
        prompt: prompt.to_owned(),
        model: model.map(str::to_owned),
        effort: effort.map(str::to_owned),
        resume_id: resume_id.map(str::to_owned),
        mcp: None,
        access: super::Access::Full,
        tool_cli: None,
    }
}
