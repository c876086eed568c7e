//! The tonic adapter: unwraps requests, calls `Providers`, maps errors.

use std::pin::Pin;
use std::sync::Arc;

use pedelec_proto::v1::provider_service_server::ProviderService;
use pedelec_proto::v1::{
    CancelTurnRequest, CancelTurnResponse, GetSettingsRequest, ListProvidersRequest,
    ListProvidersResponse, ProviderEvent, PublicSettings, ResolveProfileRequest, ResolvedProfile,
    RunTurnRequest, Settings, UpdateSettingsRequest,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::error::ProviderError;
use crate::service::Providers;

pub type ProviderEventStream = Pin<Box<dyn Stream<Item = Result<ProviderEvent, Status>> + Send>>;

#[derive(Clone)]
pub struct ProviderGrpc {
    providers: Arc<Providers>,
}

impl ProviderGrpc {
    pub fn new(providers: Arc<Providers>) -> Self {
        ProviderGrpc { providers }
    }
}

#[tonic::async_trait]
impl ProviderService for ProviderGrpc {
    async fn list_providers(
        &self,
        _request: Request<ListProvidersRequest>,
    ) -> Result<Response<ListProvidersResponse>, Status> {
        let providers = self.providers.list_providers().await?;
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
        let settings = request
            .into_inner()
            .settings
            .ok_or_else(|| ProviderError::invalid("settings: required"))?;
        Ok(Response::new(
            self.providers.update_settings(settings).await?,
        ))
    }

    async fn resolve_profile(
        &self,
        request: Request<ResolveProfileRequest>,
    ) -> Result<Response<ResolvedProfile>, Status> {
        let r = request.into_inner();
        let resolved = self
            .providers
            .resolve_profile(r.provider.as_deref(), r.effort_level.as_deref())
            .await?;
        Ok(Response::new(resolved))
    }

    type RunTurnStream = ProviderEventStream;

    async fn run_turn(
        &self,
        _request: Request<RunTurnRequest>,
    ) -> Result<Response<Self::RunTurnStream>, Status> {
        Err(ProviderError::Unimplemented("RunTurn").into())
    }

    async fn cancel_turn(
        &self,
        _request: Request<CancelTurnRequest>,
    ) -> Result<Response<CancelTurnResponse>, Status> {
        Err(ProviderError::Unimplemented("CancelTurn").into())
    }
}
