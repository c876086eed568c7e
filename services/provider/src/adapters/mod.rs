//! Pure, in-process half of the provider adapters.
//!
//! For each provider this module builds the command line of one turn ([`CommandLine`]) and turns
//! the CLI's stdout, a stream of JSON lines, into [`Event`]s. Cutting the stream into lines
//! ([`LineSplitter`]) and decoding each line as a JSON object ([`LineParser::parse_line`]) happen
//! here, once; each provider's module only says what its objects mean. Nothing here spawns
//! processes or does I/O, so every rule can be tested against the captured transcripts in
//! `tests/fixtures/provider-transcripts/`.
//!
//! Driving a turn, in short:
//!
//! ```text
//! let cmd = Provider::Codex.command(&turn);        // spawn cmd.program/args in cmd.cwd
//! let mut decoder = Decoder::new(Provider::Codex);   // stdin: cmd.stdin, or /dev/null if None
//! for chunk in stdout_chunks { events.extend(decoder.push(&chunk)); }
//! events.extend(decoder.finish());                   // at EOF
//! ```
//!
//! Event semantics shared by all providers:
//! - `SessionId` comes at most once per parser (the provider's own session/thread id, used as
//!   `resume_id` of the next turn).
//! - `Chat` is a whole, completed assistant message: every message ends up as exactly one `Chat`,
//!   whether or not it was streamed. `ChatDelta` is a fragment of a message still being written,
//!   a best-effort live view on top of it: the `Chat` that follows repeats the full text, so the
//!   transcript is the `Chat`s alone (docs/decisions.md "Deltas and chat").
//! - `Usage { cumulative: false }` is an increment to add to the thread's running total;
//!   `cumulative: true` is the thread's total so far and replaces it (codex reports that way).
//!   `input` counts every prompt token the model read, cached or not (cache reads and cache
//!   writes included) so the numbers compare across providers; `output` is what the provider
//!   reports as output tokens; `total = input + output`.
//! - `Error` is the turn's failure with the provider's own message; at most one per turn.
//!   Transient notices (codex "Reconnecting…") and warnings are never errors.

use std::ffi::OsString;
use std::path::PathBuf;

pub use crate::access::Access;

pub mod antigravity;
pub mod claude;
pub mod codex;
pub mod cursor;
pub mod ollama;
pub mod opencode;

/// Longest line accepted from a provider's stdout, in bytes (newline excluded).
pub const MAX_LINE: usize = 1 << 20;

/// What a provider's output means to Pedelec.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    SessionId(String),
    ChatDelta(String),
    Chat(String),
    Usage {
        input: u64,
        output: u64,
        total: u64,
        cumulative: bool,
    },
    Error {
        message: String,
        details: Option<serde_json::Value>,
        /// The Pedelec code of the failure when the provider names one
        /// (pedelec-agent does); `None` is PROVIDER_FAILED.
        code: Option<pedelec_common::Code>,
    },
}

impl Event {
    fn usage(input: u64, output: u64, cumulative: bool) -> Event {
        Event::Usage {
            input,
            output,
            total: input.saturating_add(output),
            cumulative,
        }
    }
}

/// One turn to run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnSpec {
    pub workspace: PathBuf,
    pub prompt: String,
    pub model: Option<String>,
    pub effort: Option<String>,
    /// The provider session id from an earlier turn's [`Event::SessionId`].
    pub resume_id: Option<String>,
    /// The `pedelec-cli` to register as the turn's MCP server (`pedelec-cli
    /// mcp`, named [`MCP_SERVER`]), for CLIs that support one; `None` keeps the
    /// page's tools on the shell path.
    pub mcp: Option<PathBuf>,
    /// What the agent may do this turn.
    pub access: Access,
    /// The `pedelec-cli` the prompt tells the agent to run on the shell
    /// path: the one command let through where a CLI filters commands below
    /// [`Access::Full`]. `None`: only the bare name is.
    pub tool_cli: Option<PathBuf>,
}

impl TurnSpec {
    /// The shell commands that call the page's tools: `pedelec-cli` by name
    /// and by the path the prompt gives.
    pub fn tool_commands(&self) -> Vec<String> {
        let mut out = vec![crate::access::TOOL_COMMAND.to_string()];
        if let Some(cli) = &self.tool_cli {
            out.push(cli.to_string_lossy().into_owned());
        }
        out
    }
}

/// The MCP server name the CLIs list the page's tools under (the prompt says
/// the same: `pedelec_toolbridge::prompt::MCP_SERVER`). `[a-z0-9_]` only:
/// codex splits `-c` paths on dots and renames hyphens.
pub const MCP_SERVER: &str = "pedelec";

/// The arguments that make `pedelec-cli` an MCP server.
pub const MCP_ARGS: [&str; 1] = ["mcp"];

/// What `pedelec-cli mcp` needs from the agent's environment. The values are
/// never written into the CLI's arguments or config (argv is visible to every
/// local user); each CLI is told to forward these names.
pub const MCP_ENV: [&str; 3] = [
    pedelec_common::env::THREAD_ID,
    pedelec_common::env::TOOL_TOKEN,
    pedelec_common::env::RUNTIME_DIR,
];

/// A process to start for one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandLine {
    /// Bare program name, looked up on `PATH` (the caller may substitute an absolute path).
    pub program: String,
    pub args: Vec<OsString>,
    /// Working directory. Always the workspace: claude and agy have no workspace flag and take
    /// it from the cwd.
    pub cwd: PathBuf,
    /// Bytes to write to stdin, then close it. `None` means stdin must be `/dev/null` (agy takes
    /// the prompt in argv and must not wait on an open pipe).
    pub stdin: Option<String>,
    /// Variables set for this CLI on top of the turn's environment (configuration
    /// a CLI reads only from its environment, such as opencode's config).
    pub env: Vec<(String, String)>,
}

impl CommandLine {
    fn new(program: &str, turn: &TurnSpec) -> Self {
        CommandLine {
            program: program.to_owned(),
            args: Vec::new(),
            cwd: turn.workspace.clone(),
            stdin: Some(turn.prompt.clone()),
            env: Vec::new(),
        }
    }

    fn arg(&mut self, a: impl Into<OsString>) -> &mut Self {
        self.args.push(a.into());
        self
    }
}

/// Turns one provider's stdout lines into events. What every provider's
/// output shares is decoded here, once: a line reaches
/// [`LineParser::parse_object`] only when it is a JSON object; blank lines,
/// log lines and any other JSON are skipped.
pub trait LineParser: Send {
    /// One line of output, decoded; pushes what it means onto `out`. Never
    /// panics; what it does not understand yields nothing.
    fn parse_object(&mut self, line: &serde_json::Value, out: &mut Vec<Event>);

    /// Called at end of stream: emits anything held back while waiting for a later line
    /// (for example an error that a final failure line would have confirmed).
    fn finish(&mut self) -> Vec<Event> {
        Vec::new()
    }

    /// Parses one line (without its newline). Never panics; lines that are not JSON objects or
    /// not understood yield nothing.
    fn parse_line(&mut self, line: &str) -> Vec<Event> {
        let mut out = Vec::new();
        if let Some(object) = json_object(line) {
            self.parse_object(&object, &mut out);
        }
        out
    }
}

/// The providers Pedelec can launch; their facts (codes, names, the model
/// rule) are `pedelec_settings::catalog`'s.
pub use pedelec_settings::Provider;

/// What each provider's adapter does with a turn: its command line, and the
/// parser of its output.
pub trait Adapter {
    fn command(self, turn: &TurnSpec) -> CommandLine;
    fn parser(self) -> Box<dyn LineParser>;
}

impl Adapter for Provider {
    fn command(self, turn: &TurnSpec) -> CommandLine {
        match self {
            Provider::Codex => codex::command(turn),
            Provider::Claude => claude::command(turn),
            Provider::Opencode => opencode::command(turn),
            Provider::Cursor => cursor::command(turn),
            Provider::Antigravity => antigravity::command(turn),
            Provider::Ollama => ollama::command(turn),
        }
    }

    fn parser(self) -> Box<dyn LineParser> {
        match self {
            Provider::Codex => Box::new(codex::Parser::default()),
            Provider::Claude => Box::new(claude::Parser::default()),
            Provider::Opencode => Box::new(opencode::Parser::default()),
            Provider::Cursor => Box::new(cursor::Parser::default()),
            Provider::Antigravity => Box::new(antigravity::Parser::default()),
            Provider::Ollama => Box::new(ollama::Parser::default()),
        }
    }
}

/// The longest prompt Pedelec puts on a CLI's command line (antigravity's
/// `-p=<prompt>`, [`prompt_on_argv`]), in bytes: 100 KiB, below Linux's
/// limit on one argument (MAX_ARG_STRLEN, 128 KiB) and far below the limit
/// on a whole command line and environment, so such a turn never fails to
/// start for its size. A longer prompt is refused with LIMIT_EXCEEDED before
/// anything runs; the CLIs that read the prompt from stdin have no such bound.
pub const MAX_ARGV_PROMPT: usize = 100 * 1024;

/// Whether the provider's CLI takes the prompt on its command line (agy's
/// only documented input) rather than on stdin.
pub const fn prompt_on_argv(provider: Provider) -> bool {
    matches!(provider, Provider::Antigravity)
}

/// The executable a provider's adapter runs, as looked up on `PATH`
/// (`crate::catalog` says where else).
pub const fn program(provider: Provider) -> &'static str {
    match provider {
        Provider::Codex => codex::PROGRAM,
        Provider::Claude => claude::PROGRAM,
        Provider::Opencode => opencode::PROGRAM,
        Provider::Cursor => cursor::PROGRAM,
        Provider::Antigravity => antigravity::PROGRAM,
        Provider::Ollama => ollama::PROGRAM,
    }
}

/// An over-long line was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("line longer than {MAX_LINE} bytes discarded")]
    TooLong,
}

/// Cuts a byte stream into lines, whatever the chunk boundaries.
///
/// Lines end at `\n`; a `\r` before it is dropped. Bytes that are not UTF-8 are replaced
/// (U+FFFD) rather than failing the line, since providers only emit JSON (ASCII-safe) and a
/// stray byte must not cost the rest of the turn. Memory stays bounded by [`MAX_LINE`]: a longer
/// line yields one [`LineError::TooLong`] as soon as it crosses the limit and its remaining
/// bytes are skipped up to the next newline.
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
    discarding: bool,
}

impl LineSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk; returns the lines it completed, in order.
    pub fn push(&mut self, mut chunk: &[u8]) -> Vec<Result<String, LineError>> {
        let mut out = Vec::new();
        while !chunk.is_empty() {
            let (segment, ends_line) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], true),
                None => (chunk, false),
            };
            chunk = &chunk[segment.len() + usize::from(ends_line)..];

            if self.discarding {
                // Still inside a line already reported as too long.
                self.discarding = !ends_line;
                continue;
            }
            if self.buf.len() + segment.len() > MAX_LINE {
                out.push(Err(LineError::TooLong));
                self.buf = Vec::new();
                self.discarding = !ends_line;
                continue;
            }
            self.buf.extend_from_slice(segment);
            if ends_line {
                out.push(Ok(self.take_line()));
            }
        }
        out
    }

    /// End of stream: the last line if it had no newline.
    pub fn finish(&mut self) -> Option<Result<String, LineError>> {
        self.discarding = false;
        if self.buf.is_empty() {
            None
        } else {
            Some(Ok(self.take_line()))
        }
    }

    fn take_line(&mut self) -> String {
        let mut line = std::mem::take(&mut self.buf);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        match String::from_utf8(line) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// A [`LineSplitter`] feeding a provider's [`LineParser`]: raw stdout chunks in, events out.
pub struct Decoder {
    splitter: LineSplitter,
    parser: Box<dyn LineParser>,
    dropped_lines: u64,
}

impl Decoder {
    pub fn new(provider: Provider) -> Self {
        Self::with_parser(provider.parser())
    }

    pub fn with_parser(parser: Box<dyn LineParser>) -> Self {
        Decoder {
            splitter: LineSplitter::new(),
            parser,
            dropped_lines: 0,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        let lines = self.splitter.push(chunk);
        self.parse_all(lines)
    }

    /// End of stdout: parses a final unterminated line and flushes the parser.
    pub fn finish(&mut self) -> Vec<Event> {
        let last = self.splitter.finish();
        let mut events = self.parse_all(last);
        events.extend(self.parser.finish());
        events
    }

    /// Over-long lines skipped so far. They are not turn errors: in practice they are echoes of
    /// big tool output (claude's `tool_use_result`), so the caller should only log them.
    pub fn dropped_lines(&self) -> u64 {
        self.dropped_lines
    }

    fn parse_all(
        &mut self,
        lines: impl IntoIterator<Item = Result<String, LineError>>,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        for line in lines {
            match line {
                Ok(line) => events.extend(self.parser.parse_line(&line)),
                Err(LineError::TooLong) => self.dropped_lines += 1,
            }
        }
        events
    }
}

/// Parses a line as a JSON object; anything else is not provider output we understand.
pub(crate) fn json_object(line: &str) -> Option<serde_json::Value> {
    let line = line.trim();
    if !line.starts_with('{') {
        return None;
    }
    serde_json::from_str(line)
        .ok()
        .filter(serde_json::Value::is_object)
}

/// `v[key]` as a string, if it is one.
fn str_at<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(serde_json::Value::as_str)
}

/// `v[key]` as a token count: missing, negative or non-integer counts are 0.
fn u64_at(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

/// The `text` of every `{"type":"text"}` block of a content array (claude and cursor messages),
/// skipping tool use, thinking and empty blocks.
fn text_blocks(content: Option<&serde_json::Value>) -> Vec<String> {
    let Some(blocks) = content.and_then(serde_json::Value::as_array) else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| str_at(b, "type") == Some("text"))
        .filter_map(|b| str_at(b, "text"))
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Emits the first non-empty session id only: providers repeat it on every line.
#[derive(Debug, Default)]
struct SessionOnce {
    seen: bool,
}

impl SessionOnce {
    fn offer(&mut self, id: Option<&str>, out: &mut Vec<Event>) {
        if let Some(id) = id.filter(|id| !id.is_empty())
            && !self.seen
        {
            self.seen = true;
            out.push(Event::SessionId(id.to_owned()));
        }
    }
}

#[cfg(test)]
pub(crate) mod testutil;

#[cfg(test)]
mod tests;
