//! Logging for a process whose stdout belongs to Chrome: to
//! `<runtime dir>/logs/native-host.log` and to stderr, never stdout.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pedelec_common::RuntimeDir;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// A log above this size is moved to `native-host.log.1` at start.
const ROTATE_AT: u64 = 8 << 20;

#[derive(Clone)]
struct Tee {
    file: Option<Arc<Mutex<File>>>,
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        if let Some(file) = &self.file
            && let Ok(mut f) = file.lock()
        {
            let _ = f.write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Tee {
    type Writer = Tee;
    fn make_writer(&'a self) -> Tee {
        self.clone()
    }
}

/// The log file in the runtime dir. A runtime dir that does not exist yet is
/// made (0700, as `pedelecd` makes it); one that exists is only checked, as
/// every client checks it ([`pedelec_common::paths::check_private_dir`]), and
/// never changed: when it is not this user's own and private the host writes
/// no log there (stderr only) and every request that needs the services is
/// refused, before anything is sent, with the reason.
fn open_log(runtime: &RuntimeDir) -> Option<(PathBuf, File)> {
    match pedelec_common::paths::check_private_dir(runtime.path()) {
        Ok(()) => {}
        Err(pedelec_common::CommonError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            runtime.ensure().ok()?;
        }
        Err(_) => return None,
    }
    let dir = runtime.path().join("logs");
    pedelec_common::paths::ensure_private_dir(&dir).ok()?;
    let path = dir.join("native-host.log");
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > ROTATE_AT) {
        let _ = std::fs::rename(&path, dir.join("native-host.log.1"));
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .ok()?;
    Some((path, file))
}

/// Installs the subscriber (filter `PEDELEC_LOG`, else `RUST_LOG`, else info);
/// returns the log file when one could be opened (never without a runtime dir).
pub fn init(runtime: Option<&RuntimeDir>) -> Option<PathBuf> {
    let opened = runtime.and_then(open_log);
    let (path, file) = match opened {
        Some((p, f)) => (Some(p), Some(Arc::new(Mutex::new(f)))),
        None => (None, None),
    };
    let filter = std::env::var(pedelec_common::env::LOG)
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(Tee { file })
        .with_ansi(false)
        .with_target(false)
        .try_init();
    path
}
