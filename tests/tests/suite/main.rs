//! The cross-process tests, one module per area, linked as one test binary
//! (one link instead of one per file). Tests of one module are selected by
//! its path, e.g. `cargo test -p pedelec-tests --test suite -- tools::`.
//!
//! The modules share one process: a test must not change process-wide state
//! (environment variables, the current directory, signal dispositions); each
//! gives the programs it starts their own environment and temp dirs instead.

#![forbid(unsafe_code)]

mod agent;
mod agents_real;
mod asset_limits;
mod assets;
mod backbone;
mod backlog;
mod client_checks;
mod confinement;
mod exhaustion;
mod forked;
mod grpc_clients;
mod grpcurl;
mod history;
mod host_fuzz;
mod host_memory;
mod hostile;
mod install;
mod launcher_cli;
mod layout;
mod load;
mod mcp;
mod native_host;
mod protocol;
mod provider_models;
mod pruning;
mod readme;
mod resilience;
mod secret;
mod settings_host;
mod shutdown;
mod sites;
mod sites_cli;
mod tools;
mod turns;
mod view_hardening;
