//! What a turn's agent may do ([`Access`], the request's `AccessLevel`) and
//! what every provider's adapter shares about it (docs/security.md, "Access
//! levels"). Each adapter turns the level into its CLI's own controls
//! (`crate::adapters::*::command`, the codex app-server's thread and
//! approvals, opencode serve's permission answers); `crate::launch` turns it
//! into the confined view where bubblewrap works.

use pedelec_proto::v1 as pb;

use crate::adapters::Provider;
use crate::error::ProviderError;

/// A turn's access level. `Tools` is the default of a [`crate::adapters::TurnSpec`]
/// built in tests: the least an agent gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// Reads its workspace and calls the page's tools; no writes, no commands.
    #[default]
    Tools,
    /// Writes inside its workspace; commands, where the CLI can confine
    /// them, confined to the workspace without network.
    Edit,
    /// Any command as the user (what Pedelec did before levels existed).
    Full,
}

impl Access {
    /// The request's level; UNSPECIFIED (and unknown numbers) are refused:
    /// a caller that forgot the level must not get any.
    pub fn from_request(level: i32) -> Result<Access, ProviderError> {
        match pb::AccessLevel::try_from(level) {
            Ok(pb::AccessLevel::Tools) => Ok(Access::Tools),
            Ok(pb::AccessLevel::Edit) => Ok(Access::Edit),
            Ok(pb::AccessLevel::Full) => Ok(Access::Full),
            Ok(pb::AccessLevel::Unspecified) | Err(_) => Err(ProviderError::invalid(format!(
                "access: {level} is not an access level (tools, edit or full)"
            ))),
        }
    }

    /// The level's name in logs, messages and server fingerprints.
    pub fn name(self) -> &'static str {
        match self {
            Access::Tools => "tools",
            Access::Edit => "edit",
            Access::Full => "full",
        }
    }

    pub fn is_full(self) -> bool {
        self == Access::Full
    }

    /// Whether the agent may write into its workspace.
    pub fn writes_workspace(self) -> bool {
        self != Access::Tools
    }
}

/// Whether `provider` can be held to `access`. antigravity (`agy`)
/// documents no permission or sandbox control, so it runs only at
/// [`Access::Full`]; a turn below is refused with PROVIDER_NOT_GRANTED
/// before anything starts. Every other provider honours every level.
pub fn honours(provider: Provider, access: Access) -> bool {
    provider != Provider::Antigravity || access.is_full()
}

/// The program name by which the agent runs `pedelec-cli` on the shell path
/// (the prompt's `pedelec-cli tool-call …`): the one command CLIs that
/// filter commands let through below [`Access::Full`].
pub const TOOL_COMMAND: &str = pedelec_common::Program::Cli.file_name();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_level_and_unspecified_is_refused() {
        assert_eq!(
            Access::from_request(pb::AccessLevel::Tools as i32).unwrap(),
            Access::Tools
        );
        assert_eq!(
            Access::from_request(pb::AccessLevel::Edit as i32).unwrap(),
            Access::Edit
        );
        assert_eq!(
            Access::from_request(pb::AccessLevel::Full as i32).unwrap(),
            Access::Full
        );
        for bad in [pb::AccessLevel::Unspecified as i32, 7, -1] {
            // A request without a level gets none.
            let e = Access::from_request(bad).unwrap_err();
            assert_eq!(e.code(), pedelec_common::Code::INVALID_INPUT, "{bad}");
        }
    }

    #[test]
    fn only_antigravity_needs_full_access() {
        for p in pedelec_settings::catalog::PROVIDERS
            .iter()
            .map(|s| s.provider)
        {
            assert!(honours(p, Access::Full), "{p:?}");
            let below = [Access::Tools, Access::Edit].map(|a| honours(p, a));
            assert_eq!(below, [p != Provider::Antigravity; 2], "{p:?}");
        }
    }
}
