//! Who started the host, read from argv (docs/native-messaging.md §1).
//! Chromium browsers pass the calling extension's origin,
//! `chrome-extension://<id>/` (then, on some systems, `--parent-window=…`).
//! Firefox passes the path of the host manifest it read and the add-on id.
//! The host serves only the extensions it was installed for, and lets only
//! their own pages (popup, settings) send the extension-only requests.

use pedelec_common::extension::{
    PEDELEC_FIREFOX_ADDON_ID, is_firefox_extension_origin, is_uuid, is_valid_id,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A Chromium-family browser, for the extension with this id.
    Chromium { id: String },
    /// Firefox, for the add-on with this id.
    Firefox { addon_id: String },
    /// Neither shape: what argv[1] said (empty when nothing).
    Unknown(String),
}

impl Caller {
    /// From the arguments after the program's name.
    pub fn from_args(args: &[String]) -> Caller {
        let first = args.first().map(String::as_str).unwrap_or("");
        if let Some(id) = first
            .strip_prefix("chrome-extension://")
            .and_then(|rest| rest.strip_suffix('/'))
            .filter(|id| is_valid_id(id))
        {
            return Caller::Chromium { id: id.to_string() };
        }
        // Firefox: an absolute manifest path, then the add-on id.
        if first.starts_with('/')
            && first.ends_with(".json")
            && let Some(addon_id) = args.get(1).filter(|id| is_addon_id(id))
        {
            return Caller::Firefox {
                addon_id: addon_id.clone(),
            };
        }
        Caller::Unknown(first.to_string())
    }

    /// Whether this host was installed for the caller: a Chromium extension
    /// id among `allowed` (Pedelec's and the install's extra ids), or
    /// Pedelec's Firefox add-on (or an add-on id among `allowed`).
    pub fn is_allowed(&self, allowed: &[String]) -> bool {
        match self {
            Caller::Chromium { id } => allowed.iter().any(|a| a == id),
            Caller::Firefox { addon_id } => {
                addon_id == PEDELEC_FIREFOX_ADDON_ID || allowed.iter().any(|a| a == addon_id)
            }
            Caller::Unknown(_) => false,
        }
    }

    /// Whether `origin` is one of the caller's own pages. Chromium names the
    /// extension's origin on the command line; Firefox gives each install
    /// its own `moz-extension://<uuid>` origin, which no web page can have,
    /// and starts the host only for the add-on the manifest allows.
    pub fn owns_page(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/');
        match self {
            Caller::Chromium { id } => origin == pedelec_common::extension::origin(id),
            Caller::Firefox { .. } => is_firefox_extension_origin(origin),
            Caller::Unknown(_) => false,
        }
    }

    /// The caller as logs and refusals name it.
    pub fn describe(&self) -> String {
        match self {
            Caller::Chromium { id } => format!("chrome-extension://{id}/"),
            Caller::Firefox { addon_id } => format!("Firefox add-on {addon_id}"),
            Caller::Unknown(arg) => arg.clone(),
        }
    }

    /// The origin of the caller's own pages, as an extension-only refusal
    /// names it.
    pub fn own_origin(&self) -> String {
        match self {
            Caller::Chromium { id } => pedelec_common::extension::origin(id),
            Caller::Firefox { .. } => "moz-extension://<the add-on's uuid>".to_string(),
            Caller::Unknown(_) => String::new(),
        }
    }
}

/// A Firefox add-on id: `name@domain` or a `{GUID}`, as AMO accepts them.
fn is_addon_id(id: &str) -> bool {
    let email = id.split_once('@').is_some_and(|(name, domain)| {
        !name.is_empty()
            && !domain.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._@+".contains(&b))
    });
    let guid = id
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(is_uuid);
    email || guid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn chromium_origins_are_checked_exactly() {
        let allowed = vec!["ekeclpceddngodnkncegoclkkeknaacb".to_string()];
        let ok = Caller::from_args(&args(&[
            "chrome-extension://ekeclpceddngodnkncegoclkkeknaacb/",
            "--parent-window=0",
        ]));
        assert!(ok.is_allowed(&allowed));
        assert!(ok.owns_page("chrome-extension://ekeclpceddngodnkncegoclkkeknaacb"));
        assert!(!ok.owns_page("moz-extension://0b1c2d3e-0000-4000-8000-000000000000"));
        for bad in [
            "chrome-extension://ekeclpceddngodnkncegoclkkeknaacb",
            "chrome-extension://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/",
            "https://ekeclpceddngodnkncegoclkkeknaacb/",
            "chrome-extension://EKECLPCEDDNGODNKNCEGOCLKKEKNAACB/",
            "",
        ] {
            assert!(
                !Caller::from_args(&args(&[bad])).is_allowed(&allowed),
                "{bad}"
            );
        }
        assert!(!Caller::from_args(&[]).is_allowed(&allowed));
    }

    #[test]
    fn firefox_is_admitted_for_pedelecs_add_on_only() {
        let manifest = "/home/a/.mozilla/native-messaging-hosts/dev.pedelec.host.json";
        let ours = Caller::from_args(&args(&[manifest, PEDELEC_FIREFOX_ADDON_ID]));
        assert_eq!(
            ours,
            Caller::Firefox {
                addon_id: PEDELEC_FIREFOX_ADDON_ID.into()
            }
        );
        assert!(ours.is_allowed(&[]));
        assert!(ours.owns_page("moz-extension://0b1c2d3e-aaaa-4bbb-8ccc-0123456789ab/"));
        assert!(!ours.owns_page("moz-extension://evil.example"));
        assert!(!ours.owns_page("https://0b1c2d3e-aaaa-4bbb-8ccc-0123456789ab"));
        for other in [
            "other@example.org",
            "{0b1c2d3e-aaaa-4bbb-8ccc-0123456789ab}",
        ] {
            let caller = Caller::from_args(&args(&[manifest, other]));
            assert!(matches!(caller, Caller::Firefox { .. }), "{other}");
            assert!(!caller.is_allowed(&[]), "{other}");
            assert!(caller.is_allowed(&[other.to_string()]), "{other}");
        }
        // A relative path, or no add-on id: not Firefox's shape.
        for bad in [
            &["dev.pedelec.host.json", PEDELEC_FIREFOX_ADDON_ID][..],
            &[manifest][..],
            &[manifest, "not an id"][..],
        ] {
            assert!(
                matches!(Caller::from_args(&args(bad)), Caller::Unknown(_)),
                "{bad:?}"
            );
        }
    }
}
