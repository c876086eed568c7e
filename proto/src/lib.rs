//! The `pedelec.v1` contract. Generated code lives here and nowhere else.

pub mod v1 {
    tonic::include_proto!("pedelec.v1");

    /// The encoded descriptor set of every `pedelec.v1` file and its imports,
    /// registered with server reflection so grpcurl needs no `.proto` files.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("pedelec_descriptor");
}

pub use prost_types;
