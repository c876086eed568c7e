//! The browser extensions Pedelec serves: the native host admits only their
//! calls, and the asset transfer server accepts their pages' fetches (the
//! extension moves a page's bytes itself, so a public site needs no Local
//! Network Access prompt; docs/sdk-extension.md).

/// Pedelec's own extension: the id its manifest `key` gives (docs/native-messaging.md §1).
pub const PEDELEC_EXTENSION_ID: &str = "ekeclpceddngodnkncegoclkkeknaacb";

/// Pedelec's Firefox add-on: the id its Firefox manifest gives
/// (`browser_specific_settings.gecko.id`), the one the native host admits when
/// Firefox starts it (docs/native-messaging.md §1).
pub const PEDELEC_FIREFOX_ADDON_ID: &str = "pedelec@pedelec.dev";

/// Pedelec's extension id plus those in `$PEDELEC_ALLOWED_EXTENSIONS`.
pub fn allowed_ids() -> Vec<String> {
    let extra = std::env::var(crate::env::ALLOWED_EXTENSIONS).unwrap_or_default();
    std::iter::once(PEDELEC_EXTENSION_ID)
        .chain(extra.split(',').map(str::trim).filter(|s| !s.is_empty()))
        .map(str::to_string)
        .collect()
}

/// The web origin of an extension's pages, as browsers send it in `Origin`.
pub fn origin(id: &str) -> String {
    format!("chrome-extension://{id}")
}

/// Whether `origin` is a Firefox extension page's: `moz-extension://<uuid>`.
/// Firefox gives each install of an add-on its own uuid, so the origin
/// cannot be known ahead; no web page can have this scheme, and Firefox
/// starts the native host only for the add-on its manifest allows.
pub fn is_firefox_extension_origin(origin: &str) -> bool {
    origin
        .trim_end_matches('/')
        .strip_prefix("moz-extension://")
        .is_some_and(is_uuid)
}

/// `8-4-4-4-12` hex digits.
pub fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `id` has an extension id's shape: 32 letters a–p.
pub fn is_valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| (b'a'..=b'p').contains(&b))
}
