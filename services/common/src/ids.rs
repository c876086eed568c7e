//! Identifier and secret generation.

/// A new identifier with a readable prefix, e.g. `thr_3f2a…` (128 random bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A new secret token: 256 random bits as hex.
pub fn new_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}
