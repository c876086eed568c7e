//! `pedelecd install` and `pedelecd uninstall` (docs/install.md): the binaries
//! copied per user, the native-messaging manifest in every present browser
//! (and in each `--user-data-dir`), the host config beside the binaries, and
//! the login start through the user service manager. Install keeps a record
//! of every file and folder it created so uninstall removes exactly those.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pedelec_common::Program;
use pedelec_common::extension::{PEDELEC_EXTENSION_ID, PEDELEC_FIREFOX_ADDON_ID, is_valid_id};
use pedelec_common::install::{
    HOST_CONFIG_FILE, HostConfig, LAUNCHD_LABEL, NATIVE_HOST_NAME, SYSTEMD_UNIT, ServiceManager,
};
use pedelec_common::paths::replace_through_temp;
use serde::{Deserialize, Serialize};

use crate::Dirs;
use crate::error::LauncherError;

/// The binaries an install copies, pedelecd first; `pedelec-agent` too when
/// it was built.
pub const BINARIES: [&str; 7] = [
    Program::Launcher.file_name(),
    Program::Session.file_name(),
    Program::ToolBridge.file_name(),
    Program::Provider.file_name(),
    Program::Asset.file_name(),
    Program::NativeHost.file_name(),
    Program::Cli.file_name(),
];
const OPTIONAL_BINARIES: [&str; 1] = [Program::Agent.file_name()];

/// The record of what install wrote, in the install root.
pub const RECORD_FILE: &str = "installed.json";

const SYSTEMD_TEMPLATE: &str = include_str!("../../../deploy/pedelec.service");
const LAUNCHD_TEMPLATE: &str = include_str!("../../../deploy/dev.pedelec.pedelecd.plist");

/// The browsers whose per-user `NativeMessagingHosts/` install fills:
/// (name, folder under ~/.config on Linux, folder under
/// ~/Library/Application Support on macOS).
pub const BROWSERS: [(&str, &str, &str); 7] = [
    ("Google Chrome", "google-chrome", "Google/Chrome"),
    (
        "Google Chrome Beta",
        "google-chrome-beta",
        "Google/Chrome Beta",
    ),
    (
        "Google Chrome Dev",
        "google-chrome-unstable",
        "Google/Chrome Dev",
    ),
    ("Chromium", "chromium", "Chromium"),
    (
        "Brave",
        "BraveSoftware/Brave-Browser",
        "BraveSoftware/Brave-Browser",
    ),
    ("Microsoft Edge", "microsoft-edge", "Microsoft Edge"),
    ("Vivaldi", "vivaldi", "Vivaldi"),
];

/// Sandboxed browsers (snap, flatpak) cannot start a host binary outside their
/// sandbox: (what, folder under HOME). Linux only.
pub const SANDBOXED: [(&str, &str); 11] = [
    ("Firefox (snap)", "snap/firefox"),
    ("Firefox (flatpak)", ".var/app/org.mozilla.firefox"),
    ("Chromium (snap)", "snap/chromium"),
    ("Brave (snap)", "snap/brave"),
    ("Vivaldi (snap)", "snap/vivaldi"),
    ("Chromium (flatpak)", ".var/app/org.chromium.Chromium"),
    ("Google Chrome (flatpak)", ".var/app/com.google.Chrome"),
    ("Brave (flatpak)", ".var/app/com.brave.Browser"),
    ("Microsoft Edge (flatpak)", ".var/app/com.microsoft.Edge"),
    ("Vivaldi (flatpak)", ".var/app/com.vivaldi.Vivaldi"),
    (
        "Ungoogled Chromium (flatpak)",
        ".var/app/io.github.ungoogled_software.ungoogled_chromium",
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    Linux,
    Macos,
}

impl Platform {
    pub fn current() -> Platform {
        if cfg!(target_os = "macos") {
            Platform::Macos
        } else {
            Platform::Linux
        }
    }

    pub fn service_manager(self) -> ServiceManager {
        match self {
            Platform::Linux => ServiceManager::Systemd,
            Platform::Macos => ServiceManager::Launchd,
        }
    }
}

/// Where an install puts things for this user.
#[derive(Clone, Debug)]
pub struct Layout {
    pub platform: Platform,
    pub home: PathBuf,
    /// `~/.local/lib/pedelec`; `~/Library/Application Support/Pedelec` on macOS.
    pub root: PathBuf,
    pub bin: PathBuf,
    /// Browsers' config folders: `$XDG_CONFIG_HOME` or `~/.config`;
    /// `~/Library/Application Support` on macOS.
    pub browsers_base: PathBuf,
    /// The systemd unit or the launchd plist.
    pub login_file: PathBuf,
}

impl Layout {
    pub fn from_env() -> Layout {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        Layout::for_home(Platform::current(), home)
    }

    pub fn for_home(platform: Platform, home: PathBuf) -> Layout {
        match platform {
            Platform::Linux => {
                let config = std::env::var_os("XDG_CONFIG_HOME")
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join(".config"));
                let root = home.join(".local/lib/pedelec");
                Layout {
                    platform,
                    bin: root.join("bin"),
                    root,
                    login_file: config.join("systemd/user").join(SYSTEMD_UNIT),
                    browsers_base: config,
                    home,
                }
            }
            Platform::Macos => {
                let support = home.join("Library/Application Support");
                let root = support.join("Pedelec");
                Layout {
                    platform,
                    bin: root.join("bin"),
                    root,
                    login_file: home
                        .join("Library/LaunchAgents")
                        .join(format!("{LAUNCHD_LABEL}.plist")),
                    browsers_base: support,
                    home,
                }
            }
        }
    }

    pub fn record(&self) -> PathBuf {
        self.root.join(RECORD_FILE)
    }

    pub fn host_config(&self) -> PathBuf {
        self.bin.join(HOST_CONFIG_FILE)
    }

    pub fn native_host(&self) -> PathBuf {
        self.bin.join(Program::NativeHost.file_name())
    }

    /// Every supported browser: (name, its config folder).
    pub fn browsers(&self) -> Vec<(&'static str, PathBuf)> {
        BROWSERS
            .iter()
            .map(|(name, linux, mac)| {
                let dir = match self.platform {
                    Platform::Linux => linux,
                    Platform::Macos => mac,
                };
                (*name, self.browsers_base.join(dir))
            })
            .collect()
    }

    /// Firefox's per-user native-messaging folder, when Firefox has run for
    /// this user (its own folder exists): `~/.mozilla/native-messaging-hosts`
    /// beside `~/.mozilla/firefox`; on macOS
    /// `~/Library/Application Support/Mozilla/NativeMessagingHosts` when
    /// `~/Library/Application Support/Firefox` exists.
    pub fn firefox(&self) -> Option<PathBuf> {
        let (shows, hosts) = match self.platform {
            Platform::Linux => (
                self.home.join(".mozilla"),
                self.home.join(".mozilla/native-messaging-hosts"),
            ),
            Platform::Macos => (
                self.browsers_base.join("Firefox"),
                self.browsers_base.join("Mozilla/NativeMessagingHosts"),
            ),
        };
        shows.is_dir().then_some(hosts)
    }

    /// The sandboxed browsers found for this user.
    pub fn sandboxed(&self) -> Vec<(&'static str, PathBuf)> {
        if self.platform != Platform::Linux {
            return Vec::new();
        }
        SANDBOXED
            .iter()
            .map(|(name, dir)| (*name, self.home.join(dir)))
            .filter(|(_, dir)| dir.is_dir())
            .collect()
    }
}

/// The manifest file in a browser config folder or a Chromium user-data-dir.
pub fn manifest_path(folder: &Path) -> PathBuf {
    folder
        .join("NativeMessagingHosts")
        .join(format!("{NATIVE_HOST_NAME}.json"))
}

/// `chrome-extension://<id>/` for Pedelec's id and each extra one.
pub fn allowed_origins(extra_ids: &[String]) -> Vec<String> {
    let mut ids = vec![PEDELEC_EXTENSION_ID.to_string()];
    for id in extra_ids {
        if !ids.contains(id) {
            ids.push(id.clone());
        }
    }
    ids.iter()
        .map(|id| format!("chrome-extension://{id}/"))
        .collect()
}

/// The native-messaging host manifest.
pub fn host_manifest(native_host: &Path, extra_ids: &[String]) -> String {
    let doc = serde_json::json!({
        "name": NATIVE_HOST_NAME,
        "description": "Pedelec native messaging host",
        "path": native_host,
        "type": "stdio",
        "allowed_origins": allowed_origins(extra_ids),
    });
    let mut s = serde_json::to_string_pretty(&doc).expect("json");
    s.push('\n');
    s
}

/// The host manifest in Firefox's native-messaging folder.
pub fn firefox_manifest_path(hosts: &Path) -> PathBuf {
    hosts.join(format!("{NATIVE_HOST_NAME}.json"))
}

/// Firefox's native-messaging host manifest: Firefox names the add-ons that
/// may start the host in `allowed_extensions` (Pedelec's add-on only).
pub fn firefox_host_manifest(native_host: &Path) -> String {
    let doc = serde_json::json!({
        "name": NATIVE_HOST_NAME,
        "description": "Pedelec native messaging host",
        "path": native_host,
        "type": "stdio",
        "allowed_extensions": [PEDELEC_FIREFOX_ADDON_ID],
    });
    let mut s = serde_json::to_string_pretty(&doc).expect("json");
    s.push('\n');
    s
}

/// The unit or plist with its placeholders filled in.
pub fn login_file(platform: Platform, bin: &Path, dirs: &Dirs) -> String {
    let pedelecd = bin.join(Program::Launcher.file_name());
    let (template, quote): (&str, fn(&Path) -> String) = match platform {
        Platform::Linux => (SYSTEMD_TEMPLATE, systemd_quote),
        Platform::Macos => (LAUNCHD_TEMPLATE, xml_escape),
    };
    template
        .replace("@PEDELECD@", &quote(&pedelecd))
        .replace("@RUNTIME_DIR@", &quote(dirs.runtime.path()))
        .replace("@DATA_DIR@", &quote(dirs.data.path()))
}

/// A path as one word of a systemd command line: double-quoted, with `\`, `"`
/// escaped and `%`, `$` doubled (specifiers and variables otherwise).
fn systemd_quote(path: &Path) -> String {
    let s = path.display().to_string();
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%")
        .replace('$', "$$");
    format!("\"{escaped}\"")
}

fn xml_escape(path: &Path) -> String {
    path.display()
        .to_string()
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// What install wrote, kept in `installed.json` for uninstall and the doctor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Every file written (binaries, manifests, host config, unit, the record).
    pub files: BTreeSet<PathBuf>,
    /// Folders install created, in creation order (removed in reverse, when empty).
    pub dirs: Vec<PathBuf>,
    /// The `--user-data-dir`s registered (registered again by a later install).
    pub user_data_dirs: BTreeSet<PathBuf>,
    /// The `--extension-id`s given (kept by a later install).
    pub extension_ids: BTreeSet<String>,
    /// The login start installed, if any.
    pub service_manager: Option<ServiceManager>,
}

impl Record {
    pub fn load(layout: &Layout) -> Result<Option<Record>, LauncherError> {
        let path = layout.record();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                LauncherError::Install(format!(
                    "{} is not a valid install record ({e}); remove it and install again",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LauncherError::io(path, e)),
        }
    }

    fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("json");
        s.push('\n');
        s
    }
}

/// `pedelecd install`'s flags.
#[derive(Clone, Debug, Default)]
pub struct InstallOptions {
    pub extension_ids: Vec<String>,
    pub user_data_dirs: Vec<PathBuf>,
    pub dry_run: bool,
    pub no_login_start: bool,
    /// Where the binaries are copied from (the running pedelecd's folder).
    pub from: PathBuf,
}

/// Whether a user service manager answers: `systemctl --user show-environment`
/// (a container or CI has none), `launchctl print gui/<uid>`.
pub fn service_manager_running(manager: ServiceManager) -> bool {
    let (program, args): (&str, Vec<String>) = match manager {
        ServiceManager::Systemd => (
            "systemctl",
            vec!["--user".into(), "show-environment".into()],
        ),
        ServiceManager::Launchd => (
            "launchctl",
            vec![
                "print".into(),
                format!("gui/{}", pedelec_common::process::uid()),
            ],
        ),
    };
    Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One file install writes.
enum Content {
    Bytes(Vec<u8>),
    CopyOf(PathBuf),
    /// A hard link to an installed file planned before it: where the
    /// sources are one file under several names (the release build's
    /// `pedelec-multicall`), the installed names stay one file, so its
    /// processes keep sharing its pages.
    LinkTo(PathBuf),
}

struct Planned {
    path: PathBuf,
    content: Content,
    mode: u32,
}

/// Everything an install would do, computed before anything is written.
struct Plan {
    files: Vec<Planned>,
    manager: Option<ServiceManager>,
    record: Record,
}

fn plan(
    layout: &Layout,
    dirs: &Dirs,
    opts: &InstallOptions,
    previous: Option<&Record>,
    manager: Option<ServiceManager>,
) -> Result<Plan, LauncherError> {
    for id in &opts.extension_ids {
        if !is_valid_id(id) {
            return Err(LauncherError::InvalidInput(format!(
                "--extension-id {id:?} is not an extension id (32 letters a-p, as chrome://extensions shows it)"
            )));
        }
    }
    let mut record = previous.cloned().unwrap_or_default();
    record
        .extension_ids
        .extend(opts.extension_ids.iter().cloned());
    for dir in &opts.user_data_dirs {
        record.user_data_dirs.insert(absolute(dir)?);
    }
    // A login start once installed stays until uninstall.
    let manager = manager.or(record.service_manager);
    record.service_manager = manager;
    let extra: Vec<String> = record.extension_ids.iter().cloned().collect();

    let mut files = Vec::new();
    // Each source file (device, inode) and where its first name is installed.
    let mut installed: Vec<((u64, u64), PathBuf)> = Vec::new();
    for name in BINARIES.iter().chain(&OPTIONAL_BINARIES) {
        let from = opts.from.join(name);
        let meta = match std::fs::metadata(&from) {
            Ok(meta) if meta.is_file() => meta,
            _ if BINARIES.contains(name) => {
                return Err(LauncherError::Install(format!(
                    "{} is missing: build all binaries first (./build-release.sh)",
                    from.display()
                )));
            }
            _ => continue,
        };
        let path = layout.bin.join(name);
        let source = (meta.dev(), meta.ino());
        let content = match installed.iter().find(|(s, _)| *s == source) {
            Some((_, first)) => Content::LinkTo(first.clone()),
            None => {
                installed.push((source, path.clone()));
                Content::CopyOf(from)
            }
        };
        files.push(Planned {
            path,
            content,
            mode: 0o755,
        });
    }
    let config = HostConfig {
        allowed_extensions: extra.clone(),
        runtime_dir: dirs.runtime.path().to_path_buf(),
        bin_dir: layout.bin.clone(),
        service_manager: manager,
    };
    files.push(Planned {
        path: layout.host_config(),
        content: Content::Bytes(config.to_json().into_bytes()),
        mode: 0o644,
    });
    let manifest = host_manifest(&layout.native_host(), &extra).into_bytes();
    let mut folders: Vec<PathBuf> = layout
        .browsers()
        .into_iter()
        .map(|(_, dir)| dir)
        .filter(|dir| dir.is_dir())
        .collect();
    folders.extend(record.user_data_dirs.iter().cloned());
    for folder in folders {
        files.push(Planned {
            path: manifest_path(&folder),
            content: Content::Bytes(manifest.clone()),
            mode: 0o644,
        });
    }
    if let Some(hosts) = layout.firefox() {
        files.push(Planned {
            path: firefox_manifest_path(&hosts),
            content: Content::Bytes(firefox_host_manifest(&layout.native_host()).into_bytes()),
            mode: 0o644,
        });
    }
    if manager.is_some() {
        files.push(Planned {
            path: layout.login_file.clone(),
            content: Content::Bytes(login_file(layout.platform, &layout.bin, dirs).into_bytes()),
            mode: 0o644,
        });
    }
    Ok(Plan {
        files,
        manager,
        record,
    })
}

fn absolute(path: &Path) -> Result<PathBuf, LauncherError> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(|e| LauncherError::io(".", e))?;
    Ok(cwd.join(path))
}

/// Whether `path` already holds exactly `content` with `mode`.
fn unchanged(path: &Path, content: &Content, mode: u32) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if meta.permissions().mode() & 0o7777 != mode {
        return false;
    }
    match content {
        Content::Bytes(bytes) => {
            meta.len() == bytes.len() as u64 && std::fs::read(path).is_ok_and(|b| &b == bytes)
        }
        Content::CopyOf(from) => {
            std::fs::metadata(from).is_ok_and(|m| m.len() == meta.len())
                && same_bytes(from, path).unwrap_or(false)
        }
        Content::LinkTo(first) => {
            std::fs::metadata(first).is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()))
        }
    }
}

fn same_bytes(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let na = fa.read(&mut ba)?;
        if na == 0 {
            return Ok(fb.read(&mut bb[..1])? == 0);
        }
        fb.read_exact(&mut bb[..na])?;
        if ba[..na] != bb[..na] {
            return Ok(false);
        }
    }
}

/// Creates `dir`'s missing ancestors and itself, recording each one created.
fn create_dirs(dir: &Path, created: &mut Vec<PathBuf>) -> Result<(), LauncherError> {
    for d in missing_dirs(dir) {
        std::fs::create_dir(&d).map_err(|e| LauncherError::io(&d, e))?;
        if !created.contains(&d) {
            created.push(d);
        }
    }
    Ok(())
}

/// The folders `dir` would need created (outermost first).
fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cur = d.parent();
    }
    missing.reverse();
    missing
}

/// Writes `content` to `path` through a temp name in the same folder and a
/// rename, so a running binary is replaced, never overwritten in place.
fn write_file(path: &Path, content: &Content, mode: u32) -> Result<(), LauncherError> {
    match content {
        Content::Bytes(bytes) => pedelec_common::paths::write_atomic(path, bytes, mode)
            .map_err(|e| LauncherError::io(path, e)),
        Content::CopyOf(from) => replace_through_temp(path, |tmp| {
            std::fs::copy(from, tmp)?;
            std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(mode))?;
            std::fs::File::open(tmp)?.sync_all()
        })
        .map_err(|e| LauncherError::io(path, e)),
        Content::LinkTo(first) => replace_through_temp(path, |tmp| std::fs::hard_link(first, tmp))
            .map_err(|e| LauncherError::io(path, e)),
    }
}

/// A command install or uninstall runs, shown as it runs.
fn run(
    out: &mut impl Write,
    dry_run: bool,
    program: &str,
    args: &[&str],
) -> Result<bool, LauncherError> {
    let shown = format!("{program} {}", args.join(" "));
    if dry_run {
        let _ = writeln!(out, "would run: {shown}");
        return Ok(true);
    }
    let _ = writeln!(out, "run: {shown}");
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LauncherError::Install(format!("cannot run {shown}: {e}")))?;
    if !output.status.success() {
        let _ = writeln!(
            out,
            "  ({shown} failed: {})",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output.status.success())
}

/// `pedelecd install`.
pub fn install(
    layout: &Layout,
    dirs: &Dirs,
    opts: &InstallOptions,
    out: &mut impl Write,
) -> Result<(), LauncherError> {
    let previous = Record::load(layout)?;
    let wanted = layout.platform.service_manager();
    let manager = if opts.no_login_start {
        let _ = writeln!(
            out,
            "login start: skipped (--no-login-start); the native host starts pedelecd when the browser asks"
        );
        None
    } else if service_manager_running(wanted) {
        Some(wanted)
    } else {
        let _ = writeln!(
            out,
            "login start: no user service manager answers ({}); installing the rest; \
             the native host starts pedelecd when the browser asks",
            match wanted {
                ServiceManager::Systemd => "systemctl --user show-environment failed",
                ServiceManager::Launchd => "launchctl print gui/<uid> failed",
            }
        );
        None
    };
    let plan = plan(layout, dirs, opts, previous.as_ref(), manager)?;
    let mut record = plan.record.clone();
    let mut changed_binaries = false;
    let mut changed_login = false;
    let verb = if opts.dry_run { "would write" } else { "wrote" };
    for file in &plan.files {
        let parent = file.path.parent().unwrap_or(Path::new("/"));
        if opts.dry_run {
            for d in missing_dirs(parent) {
                if !record.dirs.contains(&d) {
                    let _ = writeln!(out, "would create {}/", d.display());
                    record.dirs.push(d);
                }
            }
        } else {
            create_dirs(parent, &mut record.dirs)?;
        }
        record.files.insert(file.path.clone());
        if unchanged(&file.path, &file.content, file.mode) {
            let _ = writeln!(out, "unchanged {}", file.path.display());
            continue;
        }
        let _ = writeln!(out, "{verb} {} ({:o})", file.path.display(), file.mode);
        if matches!(file.content, Content::CopyOf(_) | Content::LinkTo(_)) {
            changed_binaries = true;
        }
        if file.path == layout.login_file {
            changed_login = true;
        }
        if !opts.dry_run {
            write_file(&file.path, &file.content, file.mode)?;
        }
    }
    let record_path = layout.record();
    record.files.insert(record_path.clone());
    let record_bytes = record.to_json().into_bytes();
    let record_content = Content::Bytes(record_bytes);
    if unchanged(&record_path, &record_content, 0o644) {
        let _ = writeln!(out, "unchanged {}", record_path.display());
    } else {
        let _ = writeln!(out, "{verb} {} (644)", record_path.display());
        if !opts.dry_run {
            write_file(&record_path, &record_content, 0o644)?;
        }
    }
    match plan.manager {
        Some(ServiceManager::Systemd) => {
            if changed_login {
                run(out, opts.dry_run, "systemctl", &["--user", "daemon-reload"])?;
            }
            let ok = run(
                out,
                opts.dry_run,
                "systemctl",
                &["--user", "enable", "--now", SYSTEMD_UNIT],
            )?;
            // An upgrade: the running pedelecd still runs the old binaries.
            if ok && previous.is_some() && (changed_binaries || changed_login) {
                run(
                    out,
                    opts.dry_run,
                    "systemctl",
                    &["--user", "try-restart", SYSTEMD_UNIT],
                )?;
            }
            if !ok {
                let _ = writeln!(
                    out,
                    "the unit is installed but did not start: `pedelecd doctor` says why"
                );
            }
        }
        Some(ServiceManager::Launchd) => {
            let target = ServiceManager::Launchd.launchd_target();
            let domain = format!("gui/{}", pedelec_common::process::uid());
            let plist = layout.login_file.display().to_string();
            if changed_login || changed_binaries {
                // Ignore failure: it is not loaded on a first install.
                run(out, opts.dry_run, "launchctl", &["bootout", &target])?;
                run(
                    out,
                    opts.dry_run,
                    "launchctl",
                    &["bootstrap", &domain, &plist],
                )?;
            }
            run(out, opts.dry_run, "launchctl", &["kickstart", &target])?;
        }
        None => {}
    }
    let pedelecd = layout.bin.join(Program::Launcher.file_name());
    if opts.dry_run {
        let _ = writeln!(out, "dry run: nothing was written");
    } else {
        let _ = writeln!(
            out,
            "installed in {}; start: {} start (or let the browser start it); check: {} doctor; undo: {} uninstall",
            layout.bin.display(),
            pedelecd.display(),
            pedelecd.display(),
            pedelecd.display()
        );
    }
    Ok(())
}

/// `pedelecd uninstall`: stops the service, removes what the record lists
/// (the data dir only with `purge`).
pub async fn uninstall(
    layout: &Layout,
    dirs: &Dirs,
    purge: bool,
    out: &mut impl Write,
) -> Result<(), LauncherError> {
    let Some(record) = Record::load(layout)? else {
        let _ = writeln!(
            out,
            "Pedelec is not installed for this user (no {})",
            layout.record().display()
        );
        if purge {
            purge_state(dirs, out)?;
        }
        return Ok(());
    };
    match record.service_manager {
        Some(ServiceManager::Systemd) => {
            run(
                out,
                false,
                "systemctl",
                &["--user", "disable", "--now", SYSTEMD_UNIT],
            )?;
        }
        Some(ServiceManager::Launchd) => {
            let target = ServiceManager::Launchd.launchd_target();
            run(out, false, "launchctl", &["bootout", &target])?;
        }
        None => {}
    }
    // One the host started on demand runs the binaries about to go.
    if crate::client::status(&dirs.runtime).await.is_ok() {
        crate::client::stop(&dirs.runtime).await?;
    }
    for file in &record.files {
        match std::fs::remove_file(file) {
            Ok(()) => {
                let _ = writeln!(out, "removed {}", file.display());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LauncherError::io(file, e)),
        }
    }
    for dir in record.dirs.iter().rev() {
        // Only when empty: anything else in it is not ours.
        if std::fs::remove_dir(dir).is_ok() {
            let _ = writeln!(out, "removed {}/", dir.display());
        }
    }
    if record.service_manager == Some(ServiceManager::Systemd) {
        run(out, false, "systemctl", &["--user", "daemon-reload"])?;
    }
    if purge {
        purge_state(dirs, out)?;
    } else {
        let _ = writeln!(
            out,
            "kept your data in {} (`pedelecd uninstall --purge` removes it)",
            dirs.data.path().display()
        );
    }
    Ok(())
}

fn purge_state(dirs: &Dirs, out: &mut impl Write) -> Result<(), LauncherError> {
    for dir in [dirs.data.path(), dirs.runtime.path()] {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {
                let _ = writeln!(out, "removed {}/ (--purge)", dir.display());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LauncherError::io(dir, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs() -> Dirs {
        Dirs {
            runtime: pedelec_common::RuntimeDir::at("/run/user/1000/pedelec"),
            data: pedelec_common::DataDir::at("/home/a b/.local/share/pedelec"),
        }
    }

    #[test]
    fn every_program_is_installed() {
        for program in Program::ALL {
            let name = program.file_name();
            assert!(
                BINARIES.contains(&name) != OPTIONAL_BINARIES.contains(&name),
                "{name} is installed once, required or optional"
            );
        }
        assert_eq!(BINARIES[0], Program::Launcher.file_name());
    }

    #[test]
    fn firefox_is_registered_where_it_reads_host_manifests_once_it_has_run() {
        let home = std::env::temp_dir().join(format!("pedelec-ff-{}", std::process::id()));
        for (platform, shows, hosts) in [
            (
                Platform::Linux,
                ".mozilla",
                ".mozilla/native-messaging-hosts",
            ),
            (
                Platform::Macos,
                "Library/Application Support/Firefox",
                "Library/Application Support/Mozilla/NativeMessagingHosts",
            ),
        ] {
            let _ = std::fs::remove_dir_all(&home);
            let layout = Layout::for_home(platform, home.clone());
            assert_eq!(layout.firefox(), None, "{platform:?}: never ran");
            std::fs::create_dir_all(home.join(shows)).unwrap();
            assert_eq!(layout.firefox(), Some(home.join(hosts)), "{platform:?}");
        }
        let _ = std::fs::remove_dir_all(&home);
        let doc: serde_json::Value =
            serde_json::from_str(&firefox_host_manifest(Path::new("/b/pedelec-native-host")))
                .unwrap();
        assert_eq!(
            doc["allowed_extensions"],
            serde_json::json!([PEDELEC_FIREFOX_ADDON_ID])
        );
        assert!(
            doc.get("allowed_origins").is_none(),
            "Firefox's manifest has no Chrome key"
        );
    }

    #[test]
    fn the_unit_quotes_every_path() {
        let unit = login_file(Platform::Linux, Path::new("/h/50%/bin"), &dirs());
        assert!(
            unit.contains(r#"ExecStart="/h/50%%/bin/pedelecd" up --runtime-dir "/run/user/1000/pedelec" --data-dir "/home/a b/.local/share/pedelec""#),
            "{unit}"
        );
        for placeholder in ["@PEDELECD@", "@RUNTIME_DIR@", "@DATA_DIR@"] {
            assert!(!unit.contains(placeholder), "{unit}");
        }
    }

    #[test]
    fn the_plist_escapes_xml() {
        let plist = login_file(Platform::Macos, Path::new("/h/R&D/bin"), &dirs());
        assert!(
            plist.contains("<string>/h/R&amp;D/bin/pedelecd</string>"),
            "{plist}"
        );
        assert!(!plist.contains("@PEDELECD@"));
    }

    #[test]
    fn manifests_allow_pedelec_and_the_extra_ids_once() {
        let extra = vec!["a".repeat(32), PEDELEC_EXTENSION_ID.to_string()];
        let m: serde_json::Value =
            serde_json::from_str(&host_manifest(Path::new("/b/pedelec-native-host"), &extra))
                .unwrap();
        assert_eq!(m["name"], NATIVE_HOST_NAME);
        assert_eq!(m["type"], "stdio");
        assert_eq!(m["path"], "/b/pedelec-native-host");
        assert_eq!(
            m["allowed_origins"],
            serde_json::json!([
                format!("chrome-extension://{PEDELEC_EXTENSION_ID}/"),
                format!("chrome-extension://{}/", "a".repeat(32))
            ])
        );
    }

    #[test]
    fn macos_paths_follow_the_table() {
        let l = Layout::for_home(Platform::Macos, "/Users/u".into());
        assert_eq!(
            l.bin,
            Path::new("/Users/u/Library/Application Support/Pedelec/bin")
        );
        assert_eq!(
            l.login_file,
            Path::new("/Users/u/Library/LaunchAgents/dev.pedelec.pedelecd.plist")
        );
        let browsers = l.browsers();
        assert!(browsers.iter().any(
            |(_, d)| d == Path::new("/Users/u/Library/Application Support/Google/Chrome Beta")
        ));
    }
}
