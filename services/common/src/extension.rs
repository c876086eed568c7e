//! The browser extensions Pedelec serves: the native host admits only their
//! calls, and the asset transfer server accepts their pages' fetches (the
//! extension moves a page's bytes itself, so a public site needs no Local
//! Network Access prompt; docs/sdk-extension.md).

/// Pedelec's own extension: the id its manifest `key` gives (docs/native-messaging.md §1).
pub const PEDELEC_EXTENSION_ID: &str = "ekeclpceddngodnkncegoclkkeknaacb";

/// Where more ids come from (comma-separated), e.g. a Web Store build or a
/// developer's own key.
pub const ALLOWED_EXTENSIONS_ENV: &str = "PEDELEC_ALLOWED_EXTENSIONS";

/// Pedelec's extension id plus those in `$PEDELEC_ALLOWED_EXTENSIONS`.
pub fn allowed_ids() -> Vec<String> {
    let extra = std::env::var(ALLOWED_EXTENSIONS_ENV).unwrap_or_default();
    std::iter::once(PEDELEC_EXTENSION_ID)
        .chain(extra.split(',').map(str::trim).filter(|s| !s.is_empty()))
        .map(str::to_string)
        .collect()
}

/// The web origin of an extension's pages, as browsers send it in `Origin`.
pub fn origin(id: &str) -> String {
    format!("chrome-extension://{id}")
}
