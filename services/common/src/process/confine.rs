//! Whether agents can be confined with bubblewrap (`bwrap`, Debian package
//! `bubblewrap`) on this machine, and the switch that turns it off.
//! ProviderService asks once and keeps the verdict; `pedelecd doctor` asks
//! the same question (docs/security.md, "Narrowing what an agent can reach").

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bwrap options every confined agent gets that need kernel support (a
/// mount and a pid namespace, a fresh /proc): the probe runs `true` with
/// exactly these, so its verdict is the agents'.
pub const NAMESPACE_ARGS: [&str; 8] = [
    "--die-with-parent",
    "--unshare-pid",
    "--dev-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--",
];

/// How long the probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What an agent runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// bwrap works here: agents start inside it.
    Confined { bwrap: PathBuf },
    /// `PEDELEC_CONFINE=0`: agents run as the user's other processes do.
    SwitchedOff,
    /// bwrap is missing or cannot make namespaces here (the reason).
    Unavailable(String),
}

impl Verdict {
    /// One line for logs and `pedelecd doctor`.
    pub fn describe(&self) -> String {
        match self {
            Verdict::Confined { bwrap } => format!(
                "agents run confined by {} (they see no Pedelec data dir and only toolbridge.sock in the runtime dir)",
                bwrap.display()
            ),
            Verdict::SwitchedOff => format!(
                "agent confinement is switched off ({}=0): agents can read the journal and settings and reach every socket",
                crate::env::CONFINE
            ),
            Verdict::Unavailable(why) => format!(
                "agents run unconfined: {why}; they can read the journal and settings and reach every socket"
            ),
        }
    }
}

/// Whether the environment variable switches confinement off (`0`, `false`, `off`, `no`).
pub fn switched_off(value: Option<&OsStr>) -> bool {
    value
        .and_then(OsStr::to_str)
        .is_some_and(|v| matches!(v.trim(), "0" | "false" | "off" | "no"))
}

/// The verdict for agents started with `path` as their PATH (bwrap is looked
/// up there, then in /usr/bin), honouring [`crate::env::CONFINE`] of this
/// process. Runs `bwrap … true` once: call it once and keep the answer.
pub fn probe(path: Option<&OsStr>) -> Verdict {
    if switched_off(std::env::var_os(crate::env::CONFINE).as_deref()) {
        return Verdict::SwitchedOff;
    }
    let Some(bwrap) = locate(path) else {
        return Verdict::Unavailable(
            "bwrap is not installed (Debian/Ubuntu: apt install bubblewrap)".into(),
        );
    };
    match try_run(&bwrap) {
        Ok(()) => Verdict::Confined { bwrap },
        Err(why) => Verdict::Unavailable(format!("{} does not work here: {why}", bwrap.display())),
    }
}

fn locate(path: Option<&OsStr>) -> Option<PathBuf> {
    let on_path = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("bwrap"));
    on_path
        .chain(std::iter::once(PathBuf::from("/usr/bin/bwrap")))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn try_run(bwrap: &Path) -> Result<(), String> {
    let mut child = Command::new(bwrap)
        .args(NAMESPACE_ARGS)
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start it: {e}"))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                // bwrap exits without waiting for the init it started in the
                // new pid namespace: reading stderr, which that init and
                // `true` hold too, to its end returns once they are gone, so
                // the probe leaves nothing running behind it.
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                if status.success() {
                    return Ok(());
                }
                let how = super::describe_exit(status);
                return Err(match err.trim() {
                    "" => how,
                    e => format!(
                        "{how}: {e} (unprivileged user namespaces may be off: sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces)"
                    ),
                });
            }
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("it did not finish within {PROBE_TIMEOUT:?}"));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_explicit_values_switch_it_off() {
        for v in ["0", "false", "off", "no", " 0 "] {
            assert!(switched_off(Some(OsStr::new(v))), "{v}");
        }
        for v in ["1", "", "yes", "auto"] {
            assert!(!switched_off(Some(OsStr::new(v))), "{v}");
        }
        assert!(!switched_off(None));
    }

    #[test]
    fn a_bwrap_that_cannot_make_namespaces_is_unavailable_with_its_reason() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("bwrap");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(locate(Some(dir.path().as_os_str())), Some(fake.clone()));
        let v = probe(Some(dir.path().as_os_str()));
        match v {
            Verdict::Unavailable(why) => {
                assert!(
                    why.contains("No permissions to creating new namespace"),
                    "{why}"
                );
                assert!(why.contains(&fake.display().to_string()), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
