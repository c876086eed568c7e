//! Pedelec's benchmark harness (docs/benchmarks.md): measures the real release
//! binaries on temp dirs against their targets, next to the floors they are
//! bounded by, all in one run. `tests/bench/run.sh [--quick]` builds and runs
//! it.
//!
//! The same executable doubles as the helper processes (stub agent, frame echo,
//! socket echo), chosen by argv, so the harness needs nothing but itself.

mod agent;
mod autostart;
mod deltas;
mod env;
mod floors;
mod helpers;
mod history;
mod host;
mod journal;
mod lifecycle;
mod load;
mod main_phase;
mod measure;
mod memory;
mod page_pace;
mod provider;
mod report;
mod run;
mod sessions;
mod tool_calls;
mod turn;
mod up;

use std::path::PathBuf;

pub struct Config {
    pub quick: bool,
    /// Folder with the release binaries.
    pub release: PathBuf,
    /// `--agent PROGRAM`: the pedelec-agent the agent rows run; default
    /// the one in `release`. The suite's quick run passes the debug build's
    /// (it builds only the release programs its tests use).
    pub agent: Option<PathBuf>,
    /// The trivial static program for the spawn floor.
    pub noop: PathBuf,
    /// `--noop-bare PROGRAM`: a no-op with no C library, for the floor under
    /// any program's start (`floor.spawn_bare`; the row is left out without it).
    pub noop_bare: Option<PathBuf>,
    pub out: PathBuf,
    /// `--profile DIR`: record perf profiles of the hot loops there.
    pub profile: Option<PathBuf>,
    /// `--full-load`: the load group at its full size (50 threads × 10,000
    /// deltas × 20 tool calls) instead of its short one.
    pub full_load: bool,
    /// `--only PREFIX`: run only the phases whose id starts with it (e.g. `agent`).
    pub only: Option<String>,
    /// `--pause-at-idle FILE`: when the main group's processes sit idle (its
    /// idle memory rows), create FILE and go on once it is removed, so a
    /// profiler can mark that point (tools/hot-functions.py lays out the
    /// code run up to it first).
    pub pause_at_idle: Option<PathBuf>,
}

impl Config {
    /// Sample count: the full figure, or the quick one.
    pub fn n(&self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }
}

const USAGE: &str = "usage: pedelec-bench [--quick] [--release DIR] [--agent PROGRAM] [--noop PROGRAM] [--noop-bare PROGRAM] [--out FILE] [--profile DIR] [--only PREFIX] [--full-load] [--pause-at-idle FILE]";

fn main() {
    let argv0 = std::env::args().next().unwrap_or_default();
    if argv0.rsplit('/').next() == Some("pedelec-agent") {
        std::process::exit(helpers::agent_main());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("frame-echo") => std::process::exit(helpers::frame_echo_main()),
        Some("uds-echo") => std::process::exit(helpers::uds_echo_main(
            args.get(1).map(String::as_str).unwrap_or(""),
        )),
        _ => {}
    }
    let release = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_default();
    let mut cfg = Config {
        quick: false,
        noop: release.join("pedelec-bench-noop"),
        noop_bare: None,
        out: PathBuf::from("target/bench/results.json"),
        profile: None,
        only: None,
        full_load: false,
        pause_at_idle: None,
        release,
        agent: None,
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => cfg.quick = true,
            "--full-load" => cfg.full_load = true,
            "--release" => cfg.release = it.next().map(PathBuf::from).unwrap_or_default(),
            "--agent" => cfg.agent = it.next().map(PathBuf::from),
            "--noop" => cfg.noop = it.next().map(PathBuf::from).unwrap_or_default(),
            "--noop-bare" => cfg.noop_bare = it.next().map(PathBuf::from),
            "--out" => cfg.out = it.next().map(PathBuf::from).unwrap_or_default(),
            "--profile" => cfg.profile = it.next().map(PathBuf::from),
            "--only" => cfg.only = it.next(),
            "--pause-at-idle" => cfg.pause_at_idle = it.next().map(PathBuf::from),
            _ => {
                eprintln!("{USAGE}");
                std::process::exit(2);
            }
        }
    }
    // The agent rows start programs in another working directory, so a
    // relative --release or --noop would name nothing there.
    for path in [&mut cfg.release, &mut cfg.noop]
        .into_iter()
        .chain(cfg.noop_bare.as_mut())
        .chain(cfg.agent.as_mut())
    {
        if let Ok(absolute) = std::path::absolute(&*path) {
            *path = absolute;
        }
    }
    // Whatever ends the run, nothing it started stays behind.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        env::cleanup();
        default_hook(info);
    }));
    // One thread, like the processes it measures (pedelec_common::runtime):
    // on a multi-thread runtime the harness's own cross-thread wake-ups added
    // about 100 µs to every gRPC round trip it timed, floors included.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(async {
        tokio::select! {
            code = run::run(&cfg) => code,
            _ = terminated() => {
                eprintln!("interrupted");
                130
            }
        }
    });
    env::cleanup();
    std::process::exit(code);
}

async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
