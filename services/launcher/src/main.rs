#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pedelec_launcher::program::main(std::env::args_os().collect(), None)
}
