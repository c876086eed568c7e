// Shared by multicall/build.rs and cli/build.rs (each `include!`s it).
//
// Links a binary's hot functions first, in the order its list names them:
// the functions the programs ran in a profiled workload, those run by all of
// them first, then those of each smaller group of programs. A process then
// maps few 64 KiB windows of the executable that are mostly code it runs,
// instead of most of the file (docs/decisions.md, "Hot functions first";
// `tools/hot-functions.py` writes the lists).

/// Passes `list` (a file beside the crate's Cargo.toml) to the linker as its
/// symbol ordering, for release builds linked by rust-lld.
fn link_hot_functions_first(list: &str) {
    println!("cargo:rerun-if-changed={list}");
    let target = std::env::var("TARGET").unwrap_or_default();
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    // rust-lld links this target by default (Rust 1.90 and later); GNU ld and
    // the other targets' linkers have no such option. Names the list has and
    // the build does not (code changed since it was written) are skipped.
    if release && target == "x86_64-unknown-linux-gnu" {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        let path = std::path::Path::new(&dir).join(list);
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            path.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
