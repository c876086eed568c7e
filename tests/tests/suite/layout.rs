//! The shape docs/architecture.md describes, checked: services meet only
//! through their gRPC contract, so no service crate links another service
//! crate, not even for its tests (a test that needs two services runs their
//! binaries, in this suite); the rules two services share live in library
//! crates.

use std::path::Path;

/// The crates of the long-running processes and of pedelec-agent.
const SERVICE_CRATES: [&str; 6] = [
    "services/session",
    "services/toolbridge",
    "services/provider",
    "services/asset",
    "services/launcher",
    "services/agent",
];

/// What a service crate may link of ours: libraries, no process.
const LIBRARIES: [&str; 4] = [
    "pedelec-common",
    "pedelec-proto",
    "pedelec-settings",
    "pedelec-manifest",
];

/// The `pedelec-*` names in a Cargo.toml's `[dependencies]` and
/// `[dev-dependencies]` tables.
fn our_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = matches!(line, "[dependencies]" | "[dev-dependencies]");
            continue;
        }
        if in_deps && line.starts_with("pedelec-") {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            found.push(name);
        }
    }
    found
}

#[test]
fn no_service_crate_links_another_service_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in SERVICE_CRATES {
        let text = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        let deps = our_dependencies(&text);
        assert!(
            deps.iter().any(|d| d == "pedelec-common"),
            "{krate}: the parser found no dependencies, so it no longer reads this file: {deps:?}"
        );
        for dep in deps {
            assert!(
                LIBRARIES.contains(&dep.as_str()),
                "{krate} depends on {dep}: services meet only through their gRPC contract \
                 (docs/architecture.md); move the shared rule into a library crate, or a \
                 test that needs both services into this suite"
            );
        }
    }
}

#[test]
fn the_dependency_reader_sees_a_service_crate() {
    let deps = our_dependencies(
        "[package]\nname = \"x\"\n\n[dependencies]\npedelec-common.workspace = true\n\
         pedelec-provider = { path = \"../provider\" }\ntokio.workspace = true\n\n\
         [dev-dependencies]\npedelec-session.workspace = true\n\n\
         [build-dependencies]\npedelec-agent.workspace = true\n",
    );
    assert_eq!(
        deps,
        ["pedelec-common", "pedelec-provider", "pedelec-session"]
    );
}
