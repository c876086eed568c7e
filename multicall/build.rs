//! Linker settings of the one executable of the long-running programs.
//! - Its hot functions go first (`tools/hot_functions_first.rs`).
//! - Statically linked (as `build-release.sh` builds it), it is a static-pie
//!   that relocates itself at every start; packed relative relocations
//!   (`DT_RELR`, glibc 2.36 and later) describe its ~19,000 pointers in a few
//!   KiB instead of 450 KiB that each process reads and keeps mapped
//!   (docs/decisions.md, "Release build").
include!("../tools/hot_functions_first.rs");

fn main() {
    link_hot_functions_first("hot-functions.txt");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let static_gnu = var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("CARGO_CFG_TARGET_FEATURE")
            .split(',')
            .any(|f| f == "crt-static");
    if static_gnu {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
