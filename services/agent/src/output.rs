//! The JSONL contract on stdout (services/provider/src/adapters/ollama.rs).
//! Each line is flushed at once: the deltas are a live view.

use std::io::Write;

use serde_json::{Value as Json, json};

use crate::error::AgentError;

pub struct Output {
    sink: Box<dyn Write + Send>,
}

impl Output {
    pub fn stdout() -> Self {
        Output::to(Box::new(std::io::stdout()))
    }

    pub fn to(sink: Box<dyn Write + Send>) -> Self {
        Output { sink }
    }

    fn line(&mut self, value: Json) {
        let mut text = value.to_string();
        text.push('\n');
        // A closed stdout means ProviderService is gone; nothing to tell anyone.
        let _ = self.sink.write_all(text.as_bytes());
        let _ = self.sink.flush();
    }

    pub fn session(&mut self, id: &str) {
        self.line(json!({"type": "session", "id": id}));
    }

    pub fn delta(&mut self, text: &str) {
        self.line(json!({"type": "chat_delta", "text": text}));
    }

    pub fn chat(&mut self, text: &str) {
        self.line(json!({"type": "chat", "text": text}));
    }

    pub fn usage(&mut self, input: u64, output: u64) {
        if input > 0 || output > 0 {
            self.line(json!({"type": "usage", "input": input, "output": output}));
        }
    }

    pub fn error(&mut self, e: &AgentError) {
        let mut line =
            json!({"type": "error", "message": e.to_string(), "code": e.code().as_str()});
        if let Some(details) = e.details() {
            line["details"] = details;
        }
        self.line(line);
    }
}
