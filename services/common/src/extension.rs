//! The browser extensions Pedelec serves: the native host admits only their
//! calls, and the asset transfer server accepts their pages' fetches (the
//! extension moves a page's bytes itself, so a public site needs no Local
//! Network Access prompt; docs/sdk-extension.md).

/// Pedelec's own extension: the id its manifest `key` gives (docs/native-messaging.md §1).
pub const PEDELEC_EXTENSION_ID: &str = "ekeclpceddngodnkncegoclkkeknaacb";

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

/// Whether `id` has an extension id's shape: 32 letters a–p.
pub fn is_valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| (b'a'..=b'p').contains(&b))
}
