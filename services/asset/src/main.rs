#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pedelec_asset::program::main(std::env::args_os().collect())
}
