//! One home for Pedelec's gRPC clients: every process that talks to a service
//! gets its client here, over the runtime dir's sockets, with the message size
//! limits applied, (for ToolBridge) the thread's tool token attached, and (for
//! the services with internal RPCs, ToolBridge and Provider) the service
//! secret a service was handed ([`crate::secret`]).
//!
//! Channels are made on first use and kept: a channel reconnects by itself
//! after its service restarts, so one per service and process is enough.
//! [`Clients::connect`] makes one at once instead, for one-shot commands that
//! must fail fast (and say so) when nothing serves the socket.

use std::sync::{Arc, OnceLock};

use pedelec_proto::v1::asset_service_client::AssetServiceClient;
use pedelec_proto::v1::provider_service_client::ProviderServiceClient;
use pedelec_proto::v1::session_service_client::SessionServiceClient;
use pedelec_proto::v1::supervisor_service_client::SupervisorServiceClient;
use pedelec_proto::v1::tool_bridge_service_client::ToolBridgeServiceClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::error::CommonError;
use crate::secret::ServiceSecret;
use crate::{
    MAX_GRPC_MESSAGE, RuntimeDir, SERVICE_SECRET_HEADER, ServiceName, TOOL_TOKEN_HEADER, uds,
};

pub type SessionClient = SessionServiceClient<Channel>;
/// Provider calls carry the service secret, when the hub has one.
pub type ProviderClient = ProviderServiceClient<InterceptedService<Channel, Credentials>>;
pub type AssetClient = AssetServiceClient<Channel>;
pub type SupervisorClient = SupervisorServiceClient<Channel>;
/// ToolBridge calls carry the tool token and the service secret, when the
/// hub has them.
pub type ToolBridgeClient = ToolBridgeServiceClient<InterceptedService<Channel, Credentials>>;

/// Adds `x-pedelec-tool-token` and `x-pedelec-service-secret` to every
/// request, each when the hub holds it. (No Debug: both are secrets.)
#[derive(Clone, Default)]
pub struct Credentials {
    tool_token: Option<MetadataValue<Ascii>>,
    service_secret: Option<MetadataValue<Ascii>>,
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.tool_token {
            req.metadata_mut().insert(TOOL_TOKEN_HEADER, token.clone());
        }
        if let Some(secret) = &self.service_secret {
            req.metadata_mut()
                .insert(SERVICE_SECRET_HEADER, secret.clone());
        }
        Ok(req)
    }
}

/// The five services' clients for one runtime dir. Cheap to clone; clones
/// share the channels.
#[derive(Clone)]
pub struct Clients {
    inner: Arc<Inner>,
    credentials: Credentials,
}

struct Inner {
    runtime: RuntimeDir,
    /// Indexed by [`slot`].
    channels: [OnceLock<Channel>; 5],
}

const ALL: [ServiceName; 5] = [
    ServiceName::Session,
    ServiceName::ToolBridge,
    ServiceName::Provider,
    ServiceName::Asset,
    ServiceName::Launcher,
];

fn slot(service: ServiceName) -> usize {
    ALL.iter()
        .position(|s| *s == service)
        .expect("every service has a slot")
}

impl Clients {
    /// Clients of the services under `runtime`. Nothing connects until the
    /// first call (or [`Clients::connect`]).
    pub fn new(runtime: RuntimeDir) -> Clients {
        Clients {
            inner: Arc::new(Inner {
                runtime,
                channels: Default::default(),
            }),
            credentials: Credentials::default(),
        }
    }

    /// The same clients, with ToolBridge calls presenting `token`. Fails when
    /// the token cannot travel as an HTTP/2 header value.
    pub fn with_tool_token(&self, token: &str) -> Result<Clients, CommonError> {
        let value = MetadataValue::try_from(token).map_err(|_| CommonError::InvalidToolToken)?;
        Ok(Clients {
            inner: Arc::clone(&self.inner),
            credentials: Credentials {
                tool_token: Some(value),
                ..self.credentials.clone()
            },
        })
    }

    /// The same clients, with ToolBridge and Provider calls presenting the
    /// service secret (a service's hub; `None` leaves them without one).
    pub fn with_service_secret(&self, secret: Option<&ServiceSecret>) -> Clients {
        Clients {
            inner: Arc::clone(&self.inner),
            credentials: Credentials {
                service_secret: secret.map(ServiceSecret::header_value),
                ..self.credentials.clone()
            },
        }
    }

    pub fn runtime(&self) -> &RuntimeDir {
        &self.inner.runtime
    }

    /// Connects to `service` now, failing at once (`CORE_UNAVAILABLE`) when
    /// nothing serves its socket. Later calls use this connection. Does
    /// nothing when the service's channel exists already.
    pub async fn connect(&self, service: ServiceName) -> Result<(), CommonError> {
        let cell = &self.inner.channels[slot(service)];
        if cell.get().is_none() {
            let channel = uds::connect(&self.inner.runtime.socket(service)).await?;
            // A concurrent caller may have set it first; either channel is fine.
            let _ = cell.set(channel);
        }
        Ok(())
    }

    /// The channel to `service`, made lazily on first use.
    pub fn channel(&self, service: ServiceName) -> Channel {
        self.inner.channels[slot(service)]
            .get_or_init(|| uds::connect_lazy(&self.inner.runtime.socket(service)))
            .clone()
    }

    pub fn session(&self) -> SessionClient {
        SessionServiceClient::new(self.channel(ServiceName::Session))
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }

    pub fn provider(&self) -> ProviderClient {
        ProviderServiceClient::with_interceptor(
            self.channel(ServiceName::Provider),
            self.credentials.clone(),
        )
        .max_decoding_message_size(MAX_GRPC_MESSAGE)
        .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }

    pub fn toolbridge(&self) -> ToolBridgeClient {
        ToolBridgeServiceClient::with_interceptor(
            self.channel(ServiceName::ToolBridge),
            self.credentials.clone(),
        )
        .max_decoding_message_size(MAX_GRPC_MESSAGE)
        .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }

    pub fn asset(&self) -> AssetClient {
        AssetServiceClient::new(self.channel(ServiceName::Asset))
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }

    pub fn supervisor(&self) -> SupervisorClient {
        SupervisorServiceClient::new(self.channel(ServiceName::Launcher))
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    /// The request as `clients`' interceptor sends it.
    fn sent(clients: &Clients) -> tonic::Request<()> {
        clients
            .credentials
            .clone()
            .call(tonic::Request::new(()))
            .unwrap()
    }

    #[test]
    fn the_token_is_added_only_when_given() {
        let clients = Clients::new(RuntimeDir::at("/nonexistent"));
        let req = sent(&clients);
        assert!(req.metadata().get(TOOL_TOKEN_HEADER).is_none());

        let with = clients.with_tool_token("tok-1").unwrap();
        let req = sent(&with);
        assert_eq!(req.metadata().get(TOOL_TOKEN_HEADER).unwrap(), "tok-1");
        // The original keeps no token: tokens are per thread.
        assert!(clients.credentials.tool_token.is_none());
    }

    #[test]
    fn the_service_secret_is_added_only_when_given_and_kept_with_a_token() {
        let secret = ServiceSecret::generate();
        let clients = Clients::new(RuntimeDir::at("/nonexistent"));
        let none = clients.with_service_secret(None);
        let req = sent(&none);
        assert!(req.metadata().get(SERVICE_SECRET_HEADER).is_none());

        let with = clients
            .with_service_secret(Some(&secret))
            .with_tool_token("tok-1")
            .unwrap();
        let req = sent(&with);
        let line = secret.to_line();
        assert_eq!(
            req.metadata().get(SERVICE_SECRET_HEADER).unwrap(),
            line.trim_end()
        );
        assert_eq!(req.metadata().get(TOOL_TOKEN_HEADER).unwrap(), "tok-1");
    }

    #[test]
    fn a_token_that_is_no_header_value_is_refused() {
        let clients = Clients::new(RuntimeDir::at("/nonexistent"));
        assert!(matches!(
            clients.with_tool_token("line\nbreak"),
            Err(CommonError::InvalidToolToken)
        ));
    }

    #[tokio::test]
    async fn connect_fails_at_once_without_a_server() {
        let tmp = tempfile::tempdir().unwrap();
        let clients = Clients::new(RuntimeDir::at(tmp.path()));
        let err = clients.connect(ServiceName::Session).await.unwrap_err();
        assert_eq!(err.code(), crate::Code::CORE_UNAVAILABLE);
    }

    /// A client's calls are answered by the service on its socket, and the
    /// channel is shared between clients.
    #[tokio::test]
    async fn clients_reach_their_service() {
        let tmp = tempfile::tempdir().unwrap();
        let runtime = RuntimeDir::at(tmp.path());
        let socket = runtime.socket(ServiceName::Provider);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            uds::serve(
                &socket,
                ServiceName::Provider,
                tonic::service::Routes::default(),
                async {
                    let _ = stopped.await;
                },
            )
            .await
        });
        let clients = Clients::new(runtime.clone());
        let mut up = false;
        for _ in 0..200 {
            if uds::is_serving(
                &runtime.socket(ServiceName::Provider),
                ServiceName::Provider,
            )
            .await
            {
                up = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(up, "server came up");
        clients.connect(ServiceName::Provider).await.unwrap();
        // No ProviderService is routed: the call reaches the server and is
        // answered UNIMPLEMENTED, which a call that never connected is not.
        let err = clients
            .provider()
            .list_providers(pedelec_proto::v1::ListProvidersRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented);
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
