//! pedelec-agent: parses the flags and runs one turn (see the library).
#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    let args = pedelec_agent::Args::parse();
    std::process::exit(pedelec_agent::main_with(args));
}
