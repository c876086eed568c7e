#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pedelec_toolbridge::program::main(std::env::args_os().collect())
}
