//! The codec every generated client and server uses: tonic's prost codec with
//! smaller message buffers than tonic's defaults (8 KiB to start, up to 32 KiB
//! of encoded messages gathered before a stream yields a chunk): 2 and 4 KiB.
//!
//! Why: each open stream keeps its encode and decode buffers at the largest
//! size they ever grew to, for as long as the stream lives. A page's Attach
//! stream lives as long as the page, so after one burst of streamed text
//! every attached page held about 64 KiB on each side (SessionService's
//! encoder, the native host's decoder); fifty tabs, 3 MiB in each process
//! that never came back. With these settings a stream that only ever carries
//! small events stays near 2 KiB and a burst grows it to about one message
//! plus [`YIELD_THRESHOLD`]. (The native host now reads Attach streams
//! without tonic's decoder, `native-host/src/event_stream.rs`; the encoder
//! side and every other stream still use these.) docs/benchmarks.md
//! ("Memory") has the figures.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::ProstCodec;

/// What a new stream's buffers start with.
pub const BUFFER_SIZE: usize = 2 * 1024;

/// Encoded messages a stream gathers before it hands them on as one chunk.
/// A chunk larger than this only comes from a single larger message. An
/// encoder's buffer keeps about this plus its largest message: 4 KiB rather
/// than 16 left SessionService 1.6–1.8 MiB instead of 1.7–2.2 above idle
/// after the `load` group (fifty attached pages), and costs a burst nothing
/// measurable now that waiting deltas travel joined (`deltas.host` within
/// its spread in three pairs; before the joining it cost 5%).
pub const YIELD_THRESHOLD: usize = 4 * 1024;

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD)
}

/// tonic's prost codec with these settings; named in `build.rs` (`codec_path`).
#[derive(Debug)]
pub struct PedelecCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for PedelecCodec<T, U> {
    fn default() -> Self {
        PedelecCodec(PhantomData)
    }
}

impl<T, U> Codec for PedelecCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = <ProstCodec<T, U> as Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
