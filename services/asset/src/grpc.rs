//! The thin tonic adapter over [`Assets`].

use std::pin::Pin;
use std::sync::Arc;

use pedelec_proto::v1::asset_service_server::AssetService;
use pedelec_proto::v1::{
    Asset, AssetChunk, CreateDownloadTicketRequest, CreateUploadTicketRequest, ListAssetsRequest,
    ListAssetsResponse, ReadAssetRequest, Ticket, UploadChunk, upload_chunk,
};
use tokio::io::AsyncReadExt;
use tonic::{Request, Response, Status, Streaming};

use crate::assets::{Assets, CHUNK};
use crate::error::AssetError;
use crate::paths::AssetPath;

type Result<T> = std::result::Result<Response<T>, Status>;

pub struct AssetGrpc {
    assets: Arc<Assets>,
}

impl AssetGrpc {
    pub fn new(assets: Arc<Assets>) -> Self {
        AssetGrpc { assets }
    }
}

#[tonic::async_trait]
impl AssetService for AssetGrpc {
    async fn create_upload_ticket(&self, r: Request<CreateUploadTicketRequest>) -> Result<Ticket> {
        Ok(Response::new(
            self.assets.create_upload_ticket(r.into_inner()).await?,
        ))
    }

    async fn create_download_ticket(
        &self,
        r: Request<CreateDownloadTicketRequest>,
    ) -> Result<Ticket> {
        Ok(Response::new(
            self.assets.create_download_ticket(r.into_inner()).await?,
        ))
    }

    async fn list(&self, r: Request<ListAssetsRequest>) -> Result<ListAssetsResponse> {
        let r = r.into_inner();
        let assets = self.assets.list(&r.session_id, &r.origin).await?;
        Ok(Response::new(ListAssetsResponse { assets }))
    }

    async fn upload(&self, r: Request<Streaming<UploadChunk>>) -> Result<Asset> {
        let mut stream = r.into_inner();
        let header = match stream.message().await? {
            Some(UploadChunk {
                chunk: Some(upload_chunk::Chunk::Header(h)),
            }) => h,
            _ => {
                return Err(AssetError::InvalidInput(
                    "the first message must be the header".into(),
                )
                .into());
            }
        };
        let workspace = self
            .assets
            .workspace(&header.session_id, &header.origin)
            .await?;
        let path = AssetPath::parse(&header.path)?;
        // A broken stream returns early and drops the sink, which removes the temp file.
        let mut sink = self
            .assets
            .begin_upload(&workspace, &path, header.size_bytes)
            .await?;
        while let Some(chunk) = stream.message().await? {
            match chunk.chunk {
                Some(upload_chunk::Chunk::Data(data)) => sink.write(&data).await?,
                Some(upload_chunk::Chunk::Header(_)) => {
                    return Err(AssetError::InvalidInput(
                        "only the first message is a header".into(),
                    )
                    .into());
                }
                None => {}
            }
        }
        Ok(Response::new(sink.finish().await?))
    }

    type ReadStream =
        Pin<Box<dyn tokio_stream::Stream<Item = std::result::Result<AssetChunk, Status>> + Send>>;

    async fn read(&self, r: Request<ReadAssetRequest>) -> Result<Self::ReadStream> {
        let r = r.into_inner();
        let workspace = self.assets.workspace(&r.session_id, &r.origin).await?;
        let path = AssetPath::parse(&r.path)?;
        let (mut file, len) = self.assets.open_read(&workspace, &path)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut remaining = len;
            while remaining > 0 {
                let mut buf = vec![0; CHUNK.min(remaining as usize)];
                let item = match file.read_exact(&mut buf).await {
                    Ok(_) => {
                        remaining -= buf.len() as u64;
                        Ok(AssetChunk { data: buf })
                    }
                    Err(e) => {
                        remaining = 0;
                        tracing::warn!(%path, error = %e, "an asset read broke off");
                        Err(AssetError::io(format!("could not read {path}"), e).to_status())
                    }
                };
                // The client went away: stop reading.
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
