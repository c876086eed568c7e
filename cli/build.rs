//! pedelec-cli is started once per tool call, so its start-up is on every
//! call's path (docs/benchmarks.md). Linked as a position-dependent executable, its
//! absolute addresses are fixed at link time: the dynamic loader has ~3,000
//! fewer relocations to apply at every start and the relocated read-only data
//! (≈ 60 pages) is not copied into each process. The loss is ASLR for the
//! CLI's own code, which crosses no privilege boundary: it runs as the agent
//! that starts it, with the agent's input (docs/decisions.md, "Release build").
//! Its hot functions go first (`tools/hot_functions_first.rs`): fewer page
//! faults at each start.
include!("../tools/hot_functions_first.rs");

fn main() {
    link_hot_functions_first("hot-functions.txt");
    // The target's OS, not the build machine's (cfg! in a build script is the latter).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
