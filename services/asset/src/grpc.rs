//! The thin tonic adapter over [`Assets`].

use std::pin::Pin;
use std::sync::Arc;

use pedelec_proto::v1::asset_service_server::AssetService;
use pedelec_proto::v1::{
    Asset, AssetChunk, CreateDownloadTicketRequest, CreateUploadTicketRequest, ListAssetsRequest,
    ListAssetsResponse, ReadAssetRequest, Ticket, UploadChunk,
};
use tonic::{Request, Response, Status, Streaming};

use crate::Assets;

type Result<T> = std::result::Result<Response<T>, Status>;

pub struct AssetGrpc {
    assets: Arc<Assets>,
}

impl AssetGrpc {
    pub fn new(assets: Arc<Assets>) -> Self {
        AssetGrpc { assets }
    }

    fn not_yet<T>(&self, what: &'static str) -> Result<T> {
        Err(self.assets.not_yet(what).into())
    }
}

#[tonic::async_trait]
impl AssetService for AssetGrpc {
    async fn create_upload_ticket(&self, _: Request<CreateUploadTicketRequest>) -> Result<Ticket> {
        self.not_yet("CreateUploadTicket")
    }

    async fn create_download_ticket(
        &self,
        _: Request<CreateDownloadTicketRequest>,
    ) -> Result<Ticket> {
        self.not_yet("CreateDownloadTicket")
    }

    async fn list(&self, _: Request<ListAssetsRequest>) -> Result<ListAssetsResponse> {
        self.not_yet("List")
    }

    async fn upload(&self, _: Request<Streaming<UploadChunk>>) -> Result<Asset> {
        self.not_yet("Upload")
    }

    type ReadStream =
        Pin<Box<dyn tokio_stream::Stream<Item = std::result::Result<AssetChunk, Status>> + Send>>;

    async fn read(&self, _: Request<ReadAssetRequest>) -> Result<Self::ReadStream> {
        self.not_yet("Read")
    }
}
