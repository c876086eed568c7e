#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pedelec_provider::program::main(std::env::args_os().collect())
}
