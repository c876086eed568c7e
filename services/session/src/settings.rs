//! The settings a named provider's profile is resolved from, as ProviderService
//! last sent them (its WatchSettings stream: the current ones at once, then
//! every change). A create that names its provider, and a first turn's
//! prompt, resolve from them in this process with the rules ProviderService
//! uses (`pedelec-settings`): no round trip, the same answer and errors.
//!
//! Until the first have arrived (ProviderService not up yet) ResolveProfile
//! answers instead, so nothing is resolved from no settings. While
//! ProviderService restarts the last ones received answer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pedelec_common::Code;
use pedelec_proto::v1 as pb;
use pedelec_settings::SettingsError;

use crate::error::{SessionError, upstream};
use crate::sessions::Sessions;

/// The profile part of the settings ProviderService last sent, if any.
#[derive(Default)]
pub(crate) struct LatestSettings(Mutex<Option<Arc<pb::ProfileSettings>>>);

impl LatestSettings {
    pub(crate) fn get(&self) -> Option<Arc<pb::ProfileSettings>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, settings: pb::ProfileSettings) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(settings));
    }
}

/// Watches ProviderService's settings for as long as the process lives,
/// reconnecting after ProviderService restarts (the settings received last
/// answer meanwhile).
pub async fn follow(sessions: Sessions) {
    let mut delay = Duration::from_millis(20);
    loop {
        let watch = sessions
            .inner
            .provider
            .clone()
            .watch_settings(pb::GetSettingsRequest {})
            .await;
        match watch {
            Ok(stream) => {
                delay = Duration::from_millis(20);
                let mut stream = stream.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(settings)) => sessions.inner.settings.set(settings),
                        Ok(None) => break,
                        Err(status) => {
                            tracing::warn!(error = %status.message(), "settings watch interrupted");
                            break;
                        }
                    }
                }
            }
            Err(status) => {
                tracing::debug!(error = %status.message(), "settings watch not available yet");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

impl Sessions {
    /// The profile of the provider named `code` at `effort_level`, from the
    /// settings last received, or from ResolveProfile before any have.
    ///
    /// A refusal that depends on the settings (`MODEL_REQUIRED`) is checked
    /// with ResolveProfile before it is returned: the settings an
    /// UpdateSettings just stored reach this process one message later, and a
    /// create sent at once must not be refused by the ones before. (A success
    /// in that instant uses the ones before, as a create a moment earlier
    /// would have.) When ProviderService cannot be asked, the refusal stands.
    pub(crate) async fn named_profile(
        &self,
        code: &str,
        effort_level: Option<&str>,
    ) -> Result<pb::ResolvedProfile, SessionError> {
        let Some(settings) = self.inner.settings.get() else {
            return self.resolve_profile(Some(code), effort_level).await;
        };
        match pedelec_settings::resolve_named(&settings, code, effort_level) {
            Ok(profile) => Ok(profile),
            Err(refused @ SettingsError::ModelRequired { .. }) => {
                match self.resolve_profile(Some(code), effort_level).await {
                    Err(SessionError::Upstream(e)) if e.code == Code::CORE_UNAVAILABLE => {
                        Err(SessionError::Profile(refused))
                    }
                    answer => answer,
                }
            }
            Err(refused) => Err(SessionError::Profile(refused)),
        }
    }

    /// ProviderService's ResolveProfile: for the default provider (absent
    /// `code`), which must also be installed, and for a named one before any
    /// settings arrived.
    pub(crate) async fn resolve_profile(
        &self,
        code: Option<&str>,
        effort_level: Option<&str>,
    ) -> Result<pb::ResolvedProfile, SessionError> {
        let request = pb::ResolveProfileRequest {
            provider: code.map(str::to_string),
            effort_level: effort_level.map(str::to_string),
        };
        match self.inner.provider.clone().resolve_profile(request).await {
            Ok(resp) => Ok(resp.into_inner()),
            Err(status) => Err(upstream(status)),
        }
    }
}
