//! The tonic adapter: unwraps requests, calls `Providers`, maps errors.

use std::pin::Pin;
use std::sync::Arc;

use pedelec_common::secret::InternalGate;
use pedelec_proto::v1::provider_service_server::ProviderService;
use pedelec_proto::v1::{
    CancelTurnRequest, CancelTurnResponse, GetSettingsRequest, ListProvidersRequest,
    ListProvidersResponse, ProfileSettings, ProviderEvent, PublicSettings, ResolveProfileRequest,
    ResolvedProfile, RunTurnRequest, Settings, SettingsAck, UpdateSettingsRequest,
};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::error::ProviderError;
use crate::service::Providers;
use crate::turns::joined::Joined;

pub type ProviderEventStream = Pin<Box<dyn Stream<Item = Result<ProviderEvent, Status>> + Send>>;
pub type ProfileSettingsStream =
    Pin<Box<dyn Stream<Item = Result<ProfileSettings, Status>> + Send>>;

#[derive(Clone)]
pub struct ProviderGrpc {
    providers: Arc<Providers>,
    /// ResolveProfile, WatchSettings, RunTurn and CancelTurn are
    /// SessionService's alone (docs/security.md).
    internal: InternalGate,
}

impl ProviderGrpc {
    pub fn new(providers: Arc<Providers>, internal: InternalGate) -> Self {
        ProviderGrpc {
            providers,
            internal,
        }
    }
}

#[tonic::async_trait]
impl ProviderService for ProviderGrpc {
    async fn list_providers(
        &self,
        request: Request<ListProvidersRequest>,
    ) -> Result<Response<ListProvidersResponse>, Status> {
        let include_models = request.get_ref().include_models;
        let providers = self.providers.list_providers(include_models).await?;
        Ok(Response::new(ListProvidersResponse { providers }))
    }

    async fn get_settings(
        &self,
        _request: Request<GetSettingsRequest>,
    ) -> Result<Response<PublicSettings>, Status> {
        Ok(Response::new(self.providers.public_settings()))
    }

    async fn get_full_settings(
        &self,
        _request: Request<GetSettingsRequest>,
    ) -> Result<Response<Settings>, Status> {
        Ok(Response::new(self.providers.full_settings()))
    }

    async fn update_settings(
        &self,
        request: Request<UpdateSettingsRequest>,
    ) -> Result<Response<Settings>, Status> {
        let req = request.into_inner();
        let mask = req.update_mask.map(|m| m.paths);
        // With a mask, absent settings clear what it names; without, a full
        // replace needs the whole settings.
        let settings = match (req.settings, &mask) {
            (Some(s), _) => s,
            (None, Some(paths)) if !paths.is_empty() => Settings::default(),
            (None, _) => return Err(ProviderError::invalid("settings: required").into()),
        };
        Ok(Response::new(
            self.providers
                .update_settings(settings, mask.as_deref())
                .await?,
        ))
    }

    async fn resolve_profile(
        &self,
        request: Request<ResolveProfileRequest>,
    ) -> Result<Response<ResolvedProfile>, Status> {
        self.internal.check(&request, "ResolveProfile")?;
        let r = request.into_inner();
        let resolved = self
            .providers
            .resolve_profile(r.provider.as_deref(), r.effort_level.as_deref())
            .await?;
        Ok(Response::new(resolved))
    }

    type WatchSettingsStream = ProfileSettingsStream;

    async fn watch_settings(
        &self,
        request: Request<Streaming<SettingsAck>>,
    ) -> Result<Response<Self::WatchSettingsStream>, Status> {
        self.internal.check(&request, "WatchSettings")?;
        // Acks that fail end like acks that stop: nothing waits for them.
        let acks = request
            .into_inner()
            .map_while(Result::ok)
            .map(|ack| ack.generation);
        let changes = self.providers.watch_settings(acks);
        Ok(Response::new(Box::pin(
            ReceiverStream::new(changes).map(Ok),
        )))
    }

    type RunTurnStream = ProviderEventStream;

    async fn run_turn(
        &self,
        request: Request<RunTurnRequest>,
    ) -> Result<Response<Self::RunTurnStream>, Status> {
        self.internal.check(&request, "RunTurn")?;
        // Dropping this stream (client gone) drops the receiver, which stops the process.
        let events = self.providers.run_turn(request.into_inner())?;
        Ok(Response::new(Box::pin(Joined::new(events).map(Ok))))
    }

    async fn cancel_turn(
        &self,
        request: Request<CancelTurnRequest>,
    ) -> Result<Response<CancelTurnResponse>, Status> {
        self.internal.check(&request, "CancelTurn")?;
        let session_id = request.into_inner().session_id;
        if session_id.is_empty() {
            return Err(ProviderError::invalid("session_id: required").into());
        }
        let was_running = self.providers.turns().cancel(&session_id).await;
        Ok(Response::new(CancelTurnResponse { was_running }))
    }
}
