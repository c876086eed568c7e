//! The one sanitizer for what a web page is told: local paths leave an
//! error's text (docs/security.md, "What a page is not shown"). The services
//! word their page-bound errors without paths in the first place;
//! ProviderService runs an agent's own error text through this, and the
//! native host runs every error it sends a web page (replies and events)
//! through it last, so a path a service let slip still stops at the boundary.
//!
//! What counts as a local path: an absolute path whose first component is an
//! entry of this machine's root folder (`/home/…`, `/tmp/…`, `/run/…`). A
//! path-shaped text that names nothing on the machine tells a page nothing of
//! it and stays: a JSON pointer such as `/tools/3/argsSchema` in a manifest
//! refusal, or a path the page made up. The one local path a page may see
//! again is one it gave (`keep`).

use std::collections::HashSet;
use std::sync::OnceLock;

/// What replaces an absolute path.
pub const PATH_MARK: &str = "<path>";

/// `text` with each local path (see the module) replaced by [`PATH_MARK`],
/// except one equal to a `keep` path. An absolute path is a `/` that starts the text or follows a space, a quote
/// or one of `([{=,:` and is followed by something other than `/` or a space
/// (so `https://…`, `a/b` and `and / or` stay), up to the next space, quote
/// or `)]}>,;`; a final `.` or `:` is kept as punctuation.
pub fn without_paths(text: &str, keep: &[&str]) -> String {
    const BEFORE: &[char] = &['"', '\'', '`', '(', '[', '{', '=', ',', ':'];
    const AFTER: &[char] = &['"', '\'', '`', ')', ']', '}', '>', ',', ';'];
    let mut out = String::with_capacity(text.len());
    let mut prev: Option<char> = None;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let starts_path = c == '/'
            && prev.is_none_or(|p| p.is_whitespace() || BEFORE.contains(&p))
            && rest[1..]
                .chars()
                .next()
                .is_some_and(|n| n != '/' && !n.is_whitespace());
        if starts_path {
            let end = rest
                .find(|ch: char| ch.is_whitespace() || AFTER.contains(&ch))
                .unwrap_or(rest.len());
            let path = &rest[..end];
            let kept = path.trim_end_matches(['.', ':']);
            if keep.contains(&kept) || !names_the_machine(kept) {
                out.push_str(kept);
            } else {
                out.push_str(PATH_MARK);
            }
            out.push_str(&path[kept.len()..]);
            prev = path.chars().next_back();
            rest = &rest[end..];
            continue;
        }
        out.push(c);
        prev = Some(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// [`without_paths`] over every string in a JSON value (keys stay).
pub fn scrub_json(value: &mut serde_json::Value, keep: &[&str]) {
    match value {
        serde_json::Value::String(s) => *s = without_paths(s, keep),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| scrub_json(v, keep)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| scrub_json(v, keep)),
        _ => {}
    }
}

/// Whether an absolute path starts in a folder this machine's root holds.
/// When the root cannot be read every absolute path counts.
fn names_the_machine(path: &str) -> bool {
    static ROOT: OnceLock<Option<HashSet<String>>> = OnceLock::new();
    let root = ROOT.get_or_init(|| {
        let entries = std::fs::read_dir("/").ok()?;
        Some(
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect(),
        )
    });
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    root.as_ref().is_none_or(|names| names.contains(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_leave_the_text() {
        let cases = [
            (
                "failed to read /home/alice/.codex/auth.json: denied",
                "failed to read <path>: denied",
            ),
            (
                "\"/root/x\" (/tmp/a/b) at=/usr/ws.",
                "\"<path>\" (<path>) at=<path>.",
            ),
            ("/etc/passwd", "<path>"),
            ("error:/var/lib/x", "error:<path>"),
            (
                "see https://example.com/a/b and a/b, and / or 1/2",
                "see https://example.com/a/b and a/b, and / or 1/2",
            ),
            ("model overloaded", "model overloaded"),
        ];
        for (text, safe) in cases {
            assert_eq!(without_paths(text, &[]), safe, "{text}");
        }
    }

    #[test]
    fn the_path_the_page_gave_stays() {
        let text = "workspace \"/home/a/proj\" cannot be used (/home/a/.pedelec/data).";
        assert_eq!(
            without_paths(text, &["/home/a/proj"]),
            "workspace \"/home/a/proj\" cannot be used (<path>)."
        );
        // Only the whole path: a folder inside it is another path.
        assert_eq!(
            without_paths("at /home/a/proj/x", &["/home/a/proj"]),
            "at <path>"
        );
    }

    #[test]
    fn a_path_that_names_nothing_here_stays() {
        // A manifest refusal's JSON pointer: no such root folder.
        let text = "the tools manifest is invalid at /tools/77/argsSchema: not an object";
        assert_eq!(without_paths(text, &[]), text);
        assert_eq!(without_paths("in /tmp/x", &[]), "in <path>");
    }

    #[test]
    fn json_strings_lose_paths() {
        let mut v = serde_json::json!({"m": "in /tmp/b", "list": ["/etc", 3], "/k": "x"});
        scrub_json(&mut v, &[]);
        assert_eq!(
            v,
            serde_json::json!({"m": "in <path>", "list": ["<path>", 3], "/k": "x"})
        );
    }
}
