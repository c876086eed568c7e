//! How each service process serves: its runtime and data dirs made (and
//! checked) before anything else, then its gRPC service with Pedelec's
//! message size limits, plus health and reflection, on its socket in the
//! runtime dir ([`crate::uds::serve`]) until its shutdown signal.
//!
//! ```text
//! let server = ServiceServer::prepare(ServiceName::Asset, &runtime, &data)?;
//! // ... the service's own start-up, which may use the dirs ...
//! server.serve(AssetServiceServer::new(grpc), shutdown).await?;
//! ```

use std::future::Future;
use std::path::PathBuf;

use pedelec_proto::v1::{
    asset_service_server, provider_service_server, session_service_server,
    tool_bridge_service_server,
};
use tonic::service::Routes;

use crate::error::CommonError;
use crate::{DataDir, MAX_GRPC_MESSAGE, RuntimeDir, ServiceName, uds};

/// A generated gRPC server of a Pedelec service: routed with the message
/// size limits every Pedelec server applies ([`MAX_GRPC_MESSAGE`]; tonic
/// sets them per generated server, not per connection).
pub trait ServiceRoutes {
    fn into_routes(self) -> Routes;
}

macro_rules! service_routes {
    ($($module:ident :: $server:ident : $service:ident),* $(,)?) => {$(
        impl<T: $module::$service> ServiceRoutes for $module::$server<T> {
            fn into_routes(self) -> Routes {
                Routes::new(
                    self.max_decoding_message_size(MAX_GRPC_MESSAGE)
                        .max_encoding_message_size(MAX_GRPC_MESSAGE),
                )
            }
        }
    )*};
}

service_routes! {
    session_service_server::SessionServiceServer: SessionService,
    tool_bridge_service_server::ToolBridgeServiceServer: ToolBridgeService,
    provider_service_server::ProviderServiceServer: ProviderService,
    asset_service_server::AssetServiceServer: AssetService,
}

/// A service whose dirs are ready, about to serve on its socket.
#[derive(Debug)]
pub struct ServiceServer {
    service: ServiceName,
    socket: PathBuf,
}

impl ServiceServer {
    /// Makes the runtime and data dirs (0700, owned by this user) or fails.
    pub fn prepare(
        service: ServiceName,
        runtime: &RuntimeDir,
        data: &DataDir,
    ) -> Result<ServiceServer, CommonError> {
        runtime.ensure()?;
        data.ensure()?;
        Ok(ServiceServer {
            service,
            socket: runtime.socket(service),
        })
    }

    /// Serves `server` (with health and reflection) on the service's socket
    /// until `shutdown` resolves; the socket is removed on the way out.
    pub async fn serve(
        self,
        server: impl ServiceRoutes,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), CommonError> {
        uds::serve(&self.socket, self.service, server.into_routes(), shutdown).await
    }
}
