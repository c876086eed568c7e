//! The `pedelec.v1` contract. Generated code lives here and nowhere else.

#![forbid(unsafe_code)]

pub mod codec;

pub mod v1 {
    tonic::include_proto!("pedelec.v1");

    /// The encoded descriptor set of every `pedelec.v1` file and its imports,
    /// registered with server reflection so grpcurl needs no `.proto` files.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("pedelec_descriptor");

    /// An End without a reason: recorded as requested.
    impl From<ThreadRequest> for EndRequest {
        fn from(t: ThreadRequest) -> EndRequest {
            EndRequest {
                session_id: t.session_id,
                origin: t.origin,
                reason: EndReason::Requested as i32,
            }
        }
    }
}

pub use prost_types;
