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
    if std::env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    match target.as_str() {
        // rust-lld links this target by default (Rust 1.90 and later).
        "x86_64-unknown-linux-gnu" => {}
        // The C compiler links musl with GNU ld, which has no such option:
        // point it at Rust's own lld (the `gcc-ld` folder of the toolchain,
        // where rustc finds it for the target above).
        "x86_64-unknown-linux-musl" => {
            let Some(gcc_ld) = rust_gcc_ld_dir() else {
                return;
            };
            println!("cargo:rustc-link-arg-bins=-fuse-ld=lld");
            println!("cargo:rustc-link-arg-bins=-B{}", gcc_ld.display());
        }
        // The other targets' linkers have no such option.
        _ => return,
    }
    // Names the list has and the build does not (code changed since it was
    // written) are skipped.
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let path = std::path::Path::new(&dir).join(list);
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        path.display()
    );
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// `<sysroot>/lib/rustlib/<host>/bin/gcc-ld`, holding the `ld.lld` that runs
/// the toolchain's rust-lld, if it is there.
fn rust_gcc_ld_dir() -> Option<std::path::PathBuf> {
    let rustc = std::env::var("RUSTC").ok()?;
    let host = std::env::var("HOST").ok()?;
    let out = std::process::Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8(out.stdout).ok()?;
    let dir = std::path::Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin/gcc-ld");
    dir.join("ld.lld").exists().then_some(dir)
}
