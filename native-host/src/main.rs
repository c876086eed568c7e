#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pedelec_native_host::program::main(std::env::args_os().collect())
}
