//! Absolute local paths out of an error's text before a web page is told it
//! (docs/security.md, "What a page is not shown"). The services word their
//! page-bound errors without paths in the first place; ProviderService runs
//! an agent's own error text (which it does not write) through this. `keep`
//! names paths a page may see again: the ones it gave.

/// What replaces an absolute path.
pub const PATH_MARK: &str = "<path>";

/// `text` with each absolute path replaced by [`PATH_MARK`], except one equal
/// to a `keep` path: a `/` that starts the text or follows a space, a quote
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
            if keep.contains(&kept) {
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
                "\"/root/x\" (/tmp/a/b) at=/w/ws.",
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
}
