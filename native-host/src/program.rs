//! The pedelec-native-host program. Chrome runs `pedelec-native-host
//! chrome-extension://<id>/ [--parent-window=…]`, Firefox `pedelec-native-host
//! <manifest path> <add-on id>`, with stdin/stdout as the message pipe. Its own binary and the shared release executable
//! (`pedelec-multicall`) both start here.

use std::process::ExitCode;

use pedelec_common::Program;

// #[inline]: compiled where it is called; in pedelec-multicall that is 1.4 MB
// less text (docs/decisions.md, "One executable for the long-running processes").
#[inline]
pub fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    let args = args
        .into_iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    pedelec_common::runtime::block_on(Program::NativeHost.file_name(), crate::main(args));
    // Leave without waiting on a blocking stdin reader thread (when stdin is
    // neither a pipe nor a socket), which may still sit in read(2) when
    // stdout closed first.
    std::process::exit(0);
}
