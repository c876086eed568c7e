//! The tonic adapter: translates SessionService RPCs to `Sessions` calls.

use std::pin::Pin;
use std::task::{Context, Poll};

use pb::session_service_server::SessionService;
use pedelec_proto::v1 as pb;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::sessions::{EventStream, Sessions};

pub struct SessionGrpc(pub Sessions);

/// A route's events as tonic sends them (the route queues them boxed).
pub struct AttachStream(EventStream);

impl Stream for AttachStream {
    type Item = Result<pb::SessionEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|event| event.map(|e| Ok(*e)))
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl SessionService for SessionGrpc {
    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Reply<pb::CreateSessionResponse> {
        Ok(Response::new(self.0.create(request.into_inner()).await?))
    }

    type AttachStream = AttachStream;

    async fn attach(&self, request: Request<pb::AttachRequest>) -> Reply<Self::AttachStream> {
        let rx = self.0.attach(request.into_inner())?;
        Ok(Response::new(AttachStream(rx)))
    }

    async fn send_text(
        &self,
        request: Request<pb::SendTextRequest>,
    ) -> Reply<pb::OperationAccepted> {
        let r = request.into_inner();
        let operation_id = self.0.send_text(&r.session_id, &r.origin, r.text)?;
        Ok(Response::new(pb::OperationAccepted { operation_id }))
    }

    async fn prepare(&self, request: Request<pb::PrepareRequest>) -> Reply<pb::OperationAccepted> {
        let r = request.into_inner();
        let operation_id = self.0.prepare(&r.session_id, &r.origin)?;
        Ok(Response::new(pb::OperationAccepted { operation_id }))
    }

    async fn cancel(&self, request: Request<pb::ThreadRequest>) -> Reply<pb::CancelResponse> {
        let r = request.into_inner();
        let operation_id = self.0.cancel(&r.session_id, &r.origin).await?;
        Ok(Response::new(pb::CancelResponse { operation_id }))
    }

    async fn end(&self, request: Request<pb::EndRequest>) -> Reply<pb::Snapshot> {
        let r = request.into_inner();
        let reason = pb::EndReason::try_from(r.reason).unwrap_or(pb::EndReason::Unspecified);
        Ok(Response::new(
            self.0.end(&r.session_id, &r.origin, reason).await?,
        ))
    }

    async fn reactivate(&self, request: Request<pb::ThreadRequest>) -> Reply<pb::Snapshot> {
        let r = request.into_inner();
        Ok(Response::new(
            self.0.reactivate(&r.session_id, &r.origin).await?,
        ))
    }

    async fn submit_tool_result(
        &self,
        request: Request<pb::SubmitToolResultRequest>,
    ) -> Reply<pb::SubmitToolResultResponse> {
        self.0.submit_tool_result(request.into_inner()).await?;
        Ok(Response::new(pb::SubmitToolResultResponse {}))
    }

    async fn get(&self, request: Request<pb::ThreadRequest>) -> Reply<pb::Snapshot> {
        let r = request.into_inner();
        Ok(Response::new(self.0.get(&r.session_id, &r.origin)?))
    }

    async fn open_workspace(&self, request: Request<pb::ThreadRequest>) -> Reply<pb::Snapshot> {
        let r = request.into_inner();
        Ok(Response::new(
            self.0.open_workspace(&r.session_id, &r.origin)?,
        ))
    }

    async fn list(&self, request: Request<pb::ListRequest>) -> Reply<pb::ListResponse> {
        let origin = request.into_inner().origin;
        let sessions = self.0.list(origin.as_deref()).await?;
        Ok(Response::new(pb::ListResponse { sessions }))
    }

    async fn get_history(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Reply<pb::GetHistoryResponse> {
        Ok(Response::new(self.0.history(request.into_inner()).await?))
    }

    async fn list_sites(&self, _: Request<pb::ListSitesRequest>) -> Reply<pb::ListSitesResponse> {
        let sites = self.0.list_sites();
        Ok(Response::new(pb::ListSitesResponse { sites }))
    }

    async fn grant_site(&self, request: Request<pb::GrantSiteRequest>) -> Reply<pb::Site> {
        let site = request.into_inner().site.unwrap_or_default();
        Ok(Response::new(self.0.grant_site(site).await?))
    }

    async fn block_site(&self, request: Request<pb::SiteRequest>) -> Reply<pb::Site> {
        let origin = request.into_inner().origin;
        Ok(Response::new(self.0.block_site(origin).await?))
    }

    async fn revoke_site(
        &self,
        request: Request<pb::SiteRequest>,
    ) -> Reply<pb::EndSiteSessionsResponse> {
        let origin = request.into_inner().origin;
        let ended_session_ids = self.0.revoke_site(origin).await?;
        Ok(Response::new(pb::EndSiteSessionsResponse {
            ended_session_ids,
        }))
    }

    async fn end_site_sessions(
        &self,
        request: Request<pb::SiteRequest>,
    ) -> Reply<pb::EndSiteSessionsResponse> {
        let origin = request.into_inner().origin;
        let ended_session_ids = self.0.end_site_sessions(&origin).await;
        Ok(Response::new(pb::EndSiteSessionsResponse {
            ended_session_ids,
        }))
    }
}
