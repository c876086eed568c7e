//! The settings Pedelec keeps in `settings.json`, as pure rules over their
//! value (`pedelec_proto::v1::Settings`): no file, no I/O. ProviderService
//! owns the file (it alone reads and writes it) and applies these rules;
//! SessionService applies the resolution rules to the key-free part
//! ProviderService sends it (WatchSettings), so a create that names its
//! provider asks no other service and gets the answer ProviderService would
//! give. The file's JSON form is `pedelec_common::wire::SettingsDoc`, the
//! same shape `pedelec-cli settings get` prints.

#![forbid(unsafe_code)]

/// The six providers' facts and the effort level names.
pub mod catalog;
/// The crate's one error enum and its Pedelec codes.
mod error;
/// The key-free parts: public (a web page) and profile (SessionService).
mod parts;
/// A provider's effort profile and `native_tools`, from the profile part.
mod resolve;
/// UpdateSettings: a whole patch, or the parts an `update_mask` names.
mod update;
/// What a stored settings value must be.
mod validate;

/// Settings values for tests, this crate's and ProviderService's. Always
/// compiled: behind a feature only tests enable, every `cargo test` of the
/// workspace would build this crate and its dependents a second time.
#[doc(hidden)]
pub mod testutil;

pub use catalog::{Provider, ProviderSpec};
pub use error::SettingsError;
pub use parts::{profile_part, public_part};
pub use resolve::{find_provider, native_tools, profile_of, requested_level, resolve_named};
pub use update::apply_update;
pub use validate::validate;
