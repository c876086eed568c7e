#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pedelec_session::program::main(std::env::args_os().collect())
}
