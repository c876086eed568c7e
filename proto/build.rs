//! Generates the tonic/prost code and the descriptor set (for server reflection)
//! from `pedelec/v1/*.proto`, with a vendored protoc so no system install is needed.
use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "pedelec/v1/common.proto",
    "pedelec/v1/session.proto",
    "pedelec/v1/toolbridge.proto",
    "pedelec/v1/provider.proto",
    "pedelec/v1/asset.proto",
    "pedelec/v1/supervisor.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let well_known = protoc_bin_vendored::include_path()?;
    let well_known = well_known.display().to_string();
    let includes = [".", well_known.as_str()];
    // SAFETY: build scripts are single-threaded; prost-build reads PROTOC from the environment.
    unsafe { std::env::set_var("PROTOC", protoc) };

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("pedelec_descriptor.bin"))
        // Smaller stream buffers than tonic's defaults (src/codec.rs says why).
        .codec_path("crate::codec::PedelecCodec")
        .compile_protos(PROTOS, &includes)?;
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
