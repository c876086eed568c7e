//! The thin tonic adapter: SupervisorService over [`Supervisor`].

use std::sync::Arc;

use pedelec_proto::v1::supervisor_service_server::SupervisorService;
use pedelec_proto::v1::{
    RestartServiceRequest, ServiceStatus, SupervisorStatus, SupervisorStatusRequest,
};
use tonic::{Request, Response, Status};

use crate::supervisor::{LauncherSnapshot, ServiceSnapshot, Supervisor};

pub struct SupervisorGrpc {
    supervisor: Arc<Supervisor>,
}

impl SupervisorGrpc {
    pub fn new(supervisor: Arc<Supervisor>) -> Self {
        SupervisorGrpc { supervisor }
    }
}

#[tonic::async_trait]
impl SupervisorService for SupervisorGrpc {
    async fn status(
        &self,
        _: Request<SupervisorStatusRequest>,
    ) -> Result<Response<SupervisorStatus>, Status> {
        Ok(Response::new(launcher_to_proto(self.supervisor.snapshot())))
    }

    async fn restart(
        &self,
        request: Request<RestartServiceRequest>,
    ) -> Result<Response<ServiceStatus>, Status> {
        let name = request.into_inner().service;
        let service = crate::supervisor::supervised(&name)?;
        let snapshot = self.supervisor.restart(service).await?;
        Ok(Response::new(service_to_proto(snapshot)))
    }
}

fn launcher_to_proto(s: LauncherSnapshot) -> SupervisorStatus {
    SupervisorStatus {
        launcher_pid: s.pid,
        started_at: Some(pedelec_common::to_timestamp(s.started_at)),
        runtime_dir: s.runtime_dir.display().to_string(),
        data_dir: s.data_dir.display().to_string(),
        services: s.services.into_iter().map(service_to_proto).collect(),
    }
}

fn service_to_proto(s: ServiceSnapshot) -> ServiceStatus {
    ServiceStatus {
        name: s.name.to_string(),
        pid: s.pid,
        socket: s.socket.display().to_string(),
        state: s.state as i32,
        restarts: s.restarts,
        uptime_ms: s.uptime.as_millis() as u64,
        last_exit: s.last_exit,
    }
}
