//! Chrome runs `pedelec-native-host chrome-extension://<id>/ [--parent-window=…]`
//! with stdin/stdout as the message pipe.

#![forbid(unsafe_code)]

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let extension_origin = std::env::args().nth(1);
    pedelec_native_host::main(extension_origin).await;
    // Leave without waiting on the blocking stdin reader thread, which may
    // still sit in read(2) when stdout closed first.
    std::process::exit(0);
}
