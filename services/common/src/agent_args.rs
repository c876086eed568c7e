//! The values a turn puts on an agent CLI's command line, checked before
//! anything runs (docs/security.md, "argv"): a model, an effort and the
//! provider's session id to resume are words that start with a letter or a
//! digit, so none can ever read as an option, and hold nothing a CLI could
//! split (no space, no `=`, no control character). ProviderService refuses a
//! turn that breaks one with INVALID_INPUT; the adapters then pass a model and
//! an effort as one `--flag=value` argument.

/// The longest model name.
pub const MAX_MODEL: usize = 128;

/// The longest effort value.
pub const MAX_EFFORT: usize = 32;

/// The longest provider session id.
pub const MAX_SESSION_ID: usize = 256;

/// A model: a letter or digit, then letters, digits and `. _ : / @ + - [ ]`
/// (`gpt-5.2`, `anthropic/claude-sonnet-4-5`, `llama3.1:8b-instruct-q4_K_M`,
/// claude's `sonnet[1m]`), at most [`MAX_MODEL`] bytes.
pub fn check_model(model: &str) -> Result<(), String> {
    check(model, MAX_MODEL, b".:/@+-[]").map_err(|()| {
        format!(
            "model {model:?} is not a model name: a letter or digit, then up to {} of letters, digits and . _ : / @ + - [ ]",
            MAX_MODEL - 1
        )
    })
}

/// An effort (`low`, `high`, `xhigh`): a letter or digit, then letters,
/// digits and `. _ -`, at most [`MAX_EFFORT`] bytes.
pub fn check_effort(effort: &str) -> Result<(), String> {
    check(effort, MAX_EFFORT, b".-").map_err(|()| {
        format!(
            "effort {effort:?} is not an effort value: a letter or digit, then up to {} of letters, digits and . _ -",
            MAX_EFFORT - 1
        )
    })
}

/// A provider's session id (a UUID, opencode's `ses_…`): a letter or digit,
/// then letters, digits and `. _ : -`, at most [`MAX_SESSION_ID`] bytes.
pub fn check_session_id(id: &str) -> Result<(), String> {
    check(id, MAX_SESSION_ID, b".:-").map_err(|()| {
        format!(
            "provider session id {id:?} is not one: a letter or digit, then up to {} of letters, digits and . _ : -",
            MAX_SESSION_ID - 1
        )
    })
}

/// A letter or digit, then letters, digits, `_` and `more`; at most `max` bytes.
fn check(value: &str, max: usize, more: &[u8]) -> Result<(), ()> {
    let mut bytes = value.bytes();
    let first = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
    let rest = bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || more.contains(&b));
    if first && rest && value.len() <= max {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_the_clis_use_pass() {
        for model in [
            "gpt-5.2",
            "o3",
            "anthropic/claude-sonnet-4-5",
            "openrouter/meta-llama/llama-3.1-8b-instruct:free",
            "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
            "sonnet[1m]",
            "us.anthropic.claude-3-5-sonnet-20241022-v2:0",
            "user@example",
            "a+b",
        ] {
            assert_eq!(check_model(model), Ok(()), "{model}");
        }
        assert_eq!(check_model(&"m".repeat(MAX_MODEL)), Ok(()));
    }

    #[test]
    fn a_model_that_could_read_as_an_option_or_split_is_refused() {
        for model in [
            "",
            "-x",
            "--dangerously-skip-permissions",
            "=x",
            ".hidden",
            "/abs",
            "gpt 5",
            "gpt\n5",
            "a=b",
            "a\0b",
            "a;b",
            "a$b",
            "ä",
        ] {
            let err = check_model(model).unwrap_err();
            assert!(err.starts_with("model "), "{model:?}: {err}");
        }
        assert!(check_model(&"m".repeat(MAX_MODEL + 1)).is_err());
    }

    #[test]
    fn efforts_and_session_ids() {
        for effort in ["low", "medium", "high", "xhigh", "max", "minimal"] {
            assert_eq!(check_effort(effort), Ok(()), "{effort}");
        }
        for effort in ["", "-h", "high low", "a=b", "a/b"] {
            assert!(check_effort(effort).is_err(), "{effort:?}");
        }
        assert!(check_effort(&"e".repeat(MAX_EFFORT + 1)).is_err());
        for id in [
            "5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c",
            "ses_dd2a6ed6cffe5lSGvTfH8yCzcW",
            "agy-conv-1",
            "thr.1:2",
        ] {
            assert_eq!(check_session_id(id), Ok(()), "{id}");
        }
        for id in ["", "-r", "--resume", "a b", "a/b", "a=b", "_x"] {
            assert!(check_session_id(id).is_err(), "{id:?}");
        }
        assert!(check_session_id(&"i".repeat(MAX_SESSION_ID + 1)).is_err());
    }
}
