//! The README's shell examples, run verbatim (extracted from README.md, so
//! they cannot drift) as a new user would: no XDG_RUNTIME_DIR, no
//! PEDELEC_RUNTIME_DIR or PEDELEC_HOME, a fresh HOME, `target/release/` holding
//! the binaries, grpcurl on PATH. HOME is in the test's folder, so the runtime
//! dir's fallback (`~/.local/state/pedelec/run`) lands there and never meets a
//! real instance.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pedelec_tests::*;

/// The fenced blocks of `markdown` tagged `sh`, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "unclosed code block in the README");
    blocks
}

/// A new user's shell in `dir`.
struct UserShell {
    dir: PathBuf,
}

impl UserShell {
    fn new(dir: &Path) -> UserShell {
        for sub in ["home", "tmp", "bin", "target"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(bin_dir(), dir.join("target/release")).unwrap();
        std::os::unix::fs::symlink(grpcurl(), dir.join("bin/grpcurl")).unwrap();
        UserShell {
            dir: dir.to_path_buf(),
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.dir)
            .env_clear()
            .env("HOME", self.dir.join("home"))
            .env("TMPDIR", self.dir.join("tmp"))
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin",
                    self.dir.join("bin").display()
                ),
            );
        cmd
    }

    /// Runs `script` with bash, stopping at the first failing command.
    fn run(&self, script: &str) -> Output {
        let out = self
            .command("bash")
            .args(["-euo", "pipefail", "-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README block failed:\n{script}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// Stops the instance the test started, however the test ends.
struct Stop<'a>(&'a UserShell);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .command("target/release/pedelecd")
            .arg("stop")
            .output();
    }
}

#[tokio::test]
async fn every_readme_shell_example_runs_verbatim_without_xdg_runtime_dir() {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let blocks = sh_blocks(&readme);
    // The set-up block is this suite itself (tests/run.sh) and a release
    // build that serves in the foreground (start.sh); every other block runs.
    // A new block lands in `runnable` and so is run too.
    let (setup, runnable): (Vec<_>, Vec<_>) =
        blocks.iter().partition(|b| b.contains("./tests/run.sh"));
    assert_eq!(setup.len(), 1, "{blocks:#?}");
    assert_eq!(
        runnable.len(),
        2,
        "the settings and grpcurl examples: {blocks:#?}"
    );

    let root = tempfile::tempdir().unwrap();
    let shell = UserShell::new(root.path());
    // What start.sh does, detached: the examples need the services up.
    shell.run("target/release/pedelecd start");
    let _stop = Stop(&shell);
    // The fallback the README names, under this test's HOME (never TMPDIR).
    let paths = shell.run("target/release/pedelecd paths runtime-dir");
    assert_eq!(
        String::from_utf8_lossy(&paths.stdout).trim(),
        root.path()
            .join("home/.local/state/pedelec/run")
            .display()
            .to_string()
    );

    for block in &runnable {
        shell.run(block);
    }

    // The settings example's profile survived the grpcurl example's
    // UpdateSettings, which changed only the default provider.
    let out = shell.run("target/release/pedelec-cli settings get");
    let settings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(settings["defaultProvider"], "claude", "{settings}");
    assert_eq!(
        settings["profiles"]["codex"]["levels"]["high"]["model"], "gpt-5.5",
        "{settings}"
    );
    // The grpcurl example created, read and listed a real thread.
    let created: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.path().join("created.json")).unwrap()).unwrap();
    assert!(
        created["sessionId"].as_str().unwrap().starts_with("thr_"),
        "{created}"
    );
}

#[test]
fn sh_blocks_are_found_in_order_and_others_skipped() {
    let md = "x\n```sh\na\nb\n```\n```text\nno\n```\n```sh\nc\n```\n";
    assert_eq!(sh_blocks(md), ["a\nb\n", "c\n"]);
}
