//! The settings a named provider's profile is resolved from, as ProviderService
//! last sent them (its WatchSettings stream: the current ones at once, then
//! every change). A create that names its provider, and a first turn's
//! prompt, resolve from them in this process with the rules ProviderService
//! uses (`pedelec-settings`): no round trip, the same answer and errors.
//!
//! Each value sent is acknowledged (its `generation`) once it is in place
//! here, and UpdateSettings returns only after that: a create that follows an
//! UpdateSettings sees its change. While the watch is not open (before
//! ProviderService is up, while it restarts) a change could be missed, so
//! ResolveProfile answers instead, and the settings received last only when
//! ProviderService cannot be asked.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pedelec_common::Code;
use pedelec_proto::v1 as pb;
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;

use crate::error::{SessionError, upstream};
use crate::reconnect::keep_open;
use crate::sessions::Sessions;

/// The profile part of the settings ProviderService last sent, if any, and
/// whether the watch it came on is still open.
#[derive(Default)]
pub(crate) struct LatestSettings(Mutex<Current>);

/// What a named provider's profile is resolved from.
#[derive(Clone, Debug)]
pub(crate) enum Current {
    /// Received on the open watch: no change is missed.
    Watched(Arc<pb::ProfileSettings>),
    /// The watch is not open: the settings received last, if any.
    Unwatched(Option<Arc<pb::ProfileSettings>>),
}

impl Default for Current {
    fn default() -> Self {
        Current::Unwatched(None)
    }
}

impl LatestSettings {
    pub(crate) fn current(&self) -> Current {
        self.lock().clone()
    }

    fn set(&self, settings: pb::ProfileSettings) {
        *self.lock() = Current::Watched(Arc::new(settings));
    }

    /// The watch closed: what it sent last may miss a change from now on.
    fn unwatched(&self) {
        let mut current = self.lock();
        if let Current::Watched(last) = &*current {
            *current = Current::Unwatched(Some(Arc::clone(last)));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Watches ProviderService's settings for as long as the process lives,
/// acknowledging each value once it is in place, and reconnecting after
/// ProviderService restarts.
pub async fn follow(sessions: Sessions, socket: PathBuf) {
    let open = || {
        let sessions = sessions.clone();
        async move {
            // Only the generation in place last needs acknowledging.
            let (applied, acks) = watch::channel(0);
            let acks =
                WatchStream::from_changes(acks).map(|generation| pb::SettingsAck { generation });
            let stream = sessions.inner.provider.clone().watch_settings(acks).await?;
            let handle = move |settings: pb::ProfileSettings| {
                let generation = settings.generation;
                sessions.inner.settings.set(settings);
                applied.send_replace(generation);
            };
            Ok((stream.into_inner(), handle))
        }
    };
    // From now on a change may be missed: creates ask ResolveProfile.
    let closed = || sessions.inner.settings.unwatched();
    keep_open("settings watch", &socket, open, closed).await
}

impl Sessions {
    /// The profile of the provider named `code` at `effort_level`, from the
    /// settings on the open watch; while it is not open, from ResolveProfile,
    /// or from the settings received last when ProviderService cannot be
    /// asked (and then a refusal they give stands).
    pub(crate) async fn named_profile(
        &self,
        code: &str,
        effort_level: Option<&str>,
    ) -> Result<pb::ResolvedProfile, SessionError> {
        let resolve = |settings: &pb::ProfileSettings| {
            pedelec_settings::resolve_named(settings, code, effort_level)
                .map_err(SessionError::Profile)
        };
        let last = match self.inner.settings.current() {
            Current::Watched(settings) => return resolve(&settings),
            Current::Unwatched(last) => last,
        };
        match self.resolve_profile(Some(code), effort_level).await {
            Err(SessionError::Upstream(e)) if e.code == Code::CORE_UNAVAILABLE => match last {
                Some(settings) => resolve(&settings),
                None => Err(SessionError::Upstream(e)),
            },
            answer => answer,
        }
    }

    /// ProviderService's ResolveProfile: for the default provider (absent
    /// `code`), which must also be installed, and for a named one while the
    /// settings watch is not open.
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
