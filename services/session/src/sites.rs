//! Site grants: what the user granted each web origin, kept in
//! `<data dir>/sites.json` (docs/security.md, "Site grants"). A plain type:
//! the rules of an origin and a grant, the file, and the check every request
//! of a web origin passes. Ending a site's sessions is `Sessions`' work
//! (`sessions/sites.rs`).

/// The one list of folders no grant may name.
pub mod folders;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pedelec_common::now_ms;
use pedelec_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use crate::error::SessionError;
pub use folders::NeverGrantable;

/// The longest a loopback grant lasts: a localhost address is shared by every
/// program and user of the machine.
pub const LOOPBACK_GRANT_LIMIT: Duration = Duration::from_secs(24 * 60 * 60);

/// How often a site's `last_used_at` reaches the file at most: a request
/// costs no write.
pub const LAST_USED_WRITE_EVERY: Duration = Duration::from_secs(60);

/// Whether `origin` is a web page's (http or https): every request of one
/// needs a live grant. Anything else comes from a local caller (`cli`, the
/// extension's own pages), which only reaches the socket as this user.
pub fn is_web_origin(origin: &str) -> bool {
    let lower = origin.get(..8).unwrap_or(origin).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// A web origin's parts, checked: scheme, host and optional port, nothing else.
struct Origin<'a> {
    secure: bool,
    host: &'a str,
}

fn parse_origin(origin: &str) -> Result<Origin<'_>, SessionError> {
    let invalid = |why: &str| SessionError::InvalidInput(format!("origin {origin:?} {why}"));
    let (secure, rest) = if let Some(rest) = origin.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = origin.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(invalid("is not an http:// or https:// origin"));
    };
    if rest.is_empty()
        || rest
            .bytes()
            .any(|b| matches!(b, b'/' | b'?' | b'#' | b'@' | b'\\') || !b.is_ascii_graphic())
        || rest.bytes().any(|b| b.is_ascii_uppercase())
    {
        return Err(invalid(
            "is not an origin (scheme://host[:port], lower case, no path)",
        ));
    }
    let host = match rest.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| invalid("has an unclosed ["))?;
            if !(after.is_empty() || after.strip_prefix(':').is_some_and(valid_port)) {
                return Err(invalid("has a bad port"));
            }
            &rest[..addr.len() + 2]
        }
        None => match rest.split_once(':') {
            Some((host, port)) if valid_port(port) => host,
            Some(_) => return Err(invalid("has a bad port")),
            None => rest,
        },
    };
    if host.is_empty() {
        return Err(invalid("has no host"));
    }
    Ok(Origin { secure, host })
}

fn valid_port(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// Whether a web origin names this machine (localhost, 127.0.0.0/8, [::1]).
pub fn is_loopback(origin: &str) -> bool {
    let Ok(o) = parse_origin(origin) else {
        return false;
    };
    o.host == "localhost"
        || o.host.ends_with(".localhost")
        || o.host == "[::1]"
        || o.host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `sites.json` spells a level as the native protocol does
/// (`wire::access_level`): `"tools"`, `"edit"`, `"full"`, or null.
mod level_word {
    use pedelec_common::wire;
    use pedelec_proto::v1 as pb;
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        level: &Option<pb::AccessLevel>,
        out: S,
    ) -> Result<S::Ok, S::Error> {
        level
            .and_then(|l| wire::access_level(l as i32))
            .serialize(out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        input: D,
    ) -> Result<Option<pb::AccessLevel>, D::Error> {
        Option::<String>::deserialize(input)?
            .map(|word| {
                wire::parse_access_level(&word)
                    .ok_or_else(|| D::Error::custom(format!("unknown access level {word:?}")))
            })
            .transpose()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolderRecord {
    pub path: PathBuf,
    #[serde(default)]
    pub once: bool,
}

/// One site in `sites.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteRecord {
    pub origin: String,
    /// None on a blocked site; never Unspecified.
    #[serde(default, with = "level_word")]
    pub access: Option<pb::AccessLevel>,
    #[serde(default)]
    pub providers: Vec<String>,
    #[serde(default)]
    pub folders: Vec<FolderRecord>,
    #[serde(default)]
    pub any_model: bool,
    pub granted_at_ms: u64,
    #[serde(default)]
    pub last_used_at_ms: Option<u64>,
    #[serde(default)]
    pub expires_at_ms: Option<u64>,
    #[serde(default)]
    pub blocked: bool,
    #[serde(default)]
    pub embedders: Vec<String>,
}

impl SiteRecord {
    fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= now_ms)
    }

    /// Granted, not blocked, not expired.
    fn live(&self, now_ms: u64) -> bool {
        !self.blocked && self.access.is_some() && !self.expired(now_ms)
    }

    pub fn to_pb(&self) -> pb::Site {
        let ts = pedelec_common::ms_to_timestamp;
        pb::Site {
            origin: self.origin.clone(),
            access: self.access.unwrap_or(pb::AccessLevel::Unspecified) as i32,
            providers: self.providers.clone(),
            folders: self
                .folders
                .iter()
                .map(|f| pb::FolderGrant {
                    path: f.path.display().to_string(),
                    once: f.once,
                })
                .collect(),
            any_model: self.any_model,
            granted_at: Some(ts(self.granted_at_ms)),
            last_used_at: self.last_used_at_ms.map(ts),
            expires_at: self.expires_at_ms.map(ts),
            blocked: self.blocked,
            embedders: self.embedders.clone(),
        }
    }
}

/// A live grant as a request sees it.
#[derive(Clone, Debug)]
pub struct Grant {
    pub providers: Vec<String>,
    pub folders: Vec<FolderRecord>,
    pub any_model: bool,
}

/// The file's shape.
#[derive(Default, Serialize, Deserialize)]
struct SitesFile {
    sites: Vec<SiteRecord>,
}

#[derive(Default)]
struct State {
    sites: BTreeMap<String, SiteRecord>,
    /// Per origin, the `last_used_at_ms` the file holds (or is being written with).
    written_use: HashMap<String, u64>,
}

/// The grants in memory and their file.
pub struct Sites {
    path: PathBuf,
    state: Mutex<State>,
    /// Held while the file is written: writes never overtake each other.
    writing: Mutex<()>,
    never: NeverGrantable,
}

/// The error a failed write of `path` answers: the file is named in the log
/// only (a page hears of it when a create uses up a once folder).
fn store_error(path: &Path, e: std::io::Error) -> SessionError {
    tracing::error!(file = %path.display(), error = %e, "could not write the site grants");
    SessionError::SiteStore(e)
}

impl Sites {
    /// Loads `path`; a file that cannot be read is logged and set aside
    /// (`sites.json.unreadable`), and the service starts with no grant: a
    /// missing grant is asked for again, a wrong one would be a hole.
    pub fn load(path: PathBuf, never: NeverGrantable) -> Sites {
        let sites = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<SitesFile>(&bytes) {
                Ok(file) => file.sites,
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "unreadable site grants: starting without any");
                    let _ = std::fs::rename(&path, path.with_extension("json.unreadable"));
                    Vec::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "cannot read site grants: starting without any");
                Vec::new()
            }
        };
        let mut state = State::default();
        for site in sites {
            if let Some(used) = site.last_used_at_ms {
                state.written_use.insert(site.origin.clone(), used);
            }
            state.sites.insert(site.origin.clone(), site);
        }
        Sites {
            path,
            state: Mutex::new(state),
            writing: Mutex::new(()),
            never,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the sites through `change` on a copy, writes the copy, and
    /// only then puts it in place: a failed write changes nothing.
    fn change<R>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, SiteRecord>, u64) -> Result<R, SessionError>,
    ) -> Result<R, SessionError> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_ms();
        let mut sites = self.lock().sites.clone();
        sites.retain(|_, s| !s.expired(now));
        let out = change(&mut sites, now)?;
        self.write(&sites)?;
        let mut state = self.lock();
        // A use noted while the file was written is kept.
        for (origin, site) in sites.iter_mut() {
            if let Some(old) = state.sites.get(origin) {
                site.last_used_at_ms = site.last_used_at_ms.max(old.last_used_at_ms);
            }
        }
        state.written_use = sites
            .values()
            .filter_map(|s| Some((s.origin.clone(), s.last_used_at_ms?)))
            .collect();
        state.sites = sites;
        Ok(out)
    }

    fn write(&self, sites: &BTreeMap<String, SiteRecord>) -> Result<(), SessionError> {
        let file = SitesFile {
            sites: sites.values().cloned().collect(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file)
            .map_err(|e| SessionError::Internal(format!("site grants: {e}")))?;
        bytes.push(b'\n');
        pedelec_common::paths::write_atomic(&self.path, &bytes, 0o600)
            .map_err(|e| store_error(&self.path, e))
    }

    /// Every granted or blocked site, sorted by origin; expired grants are
    /// dropped (and forgotten in the file with the next write).
    pub fn list(&self) -> Vec<pb::Site> {
        let now = now_ms();
        let mut state = self.lock();
        state.sites.retain(|_, s| !s.expired(now));
        state.sites.values().map(SiteRecord::to_pb).collect()
    }

    /// GrantSite: checks and stores `site`, replacing any grant or block.
    pub fn grant(&self, site: pb::Site) -> Result<pb::Site, SessionError> {
        let parsed = parse_origin(&site.origin)?;
        let loopback = is_loopback(&site.origin);
        if !parsed.secure && !loopback {
            return Err(SessionError::OriginNotSecure(site.origin.clone()));
        }
        if site.blocked {
            return Err(SessionError::InvalidInput(
                "a grant cannot be blocked; BlockSite blocks a site".into(),
            ));
        }
        let access = pb::AccessLevel::try_from(site.access)
            .ok()
            .filter(|l| *l != pb::AccessLevel::Unspecified)
            .ok_or_else(|| {
                SessionError::InvalidInput(
                    "a grant needs an access level (tools, edit or full)".into(),
                )
            })?;
        let mut providers: Vec<String> = Vec::new();
        for code in &site.providers {
            if pedelec_settings::catalog::find(code).is_none() {
                return Err(SessionError::InvalidInput(format!(
                    "unknown provider {code:?} (one of {})",
                    pedelec_settings::catalog::codes_list()
                )));
            }
            if !providers.contains(code) {
                providers.push(code.clone());
            }
        }
        let mut folders: Vec<FolderRecord> = Vec::new();
        for f in &site.folders {
            let path = self.grantable_folder(&f.path)?;
            match folders.iter_mut().find(|g| g.path == path) {
                // Always wins over once.
                Some(g) => g.once &= f.once,
                None => folders.push(FolderRecord { path, once: f.once }),
            }
        }
        let mut embedders = Vec::new();
        for e in &site.embedders {
            parse_origin(e)?;
            if !embedders.contains(e) {
                embedders.push(e.clone());
            }
        }
        let requested_expiry = site.expires_at.as_ref().map(pedelec_common::timestamp_ms);
        self.change(|sites, now| {
            let mut expires_at_ms = requested_expiry;
            if loopback {
                let limit = now + LOOPBACK_GRANT_LIMIT.as_millis() as u64;
                expires_at_ms = Some(expires_at_ms.map_or(limit, |at| at.min(limit)));
            }
            if expires_at_ms.is_some_and(|at| at <= now) {
                return Err(SessionError::InvalidInput(
                    "expires_at is in the past".into(),
                ));
            }
            let record = SiteRecord {
                origin: site.origin.clone(),
                access: Some(access),
                providers,
                folders,
                any_model: site.any_model,
                granted_at_ms: now,
                last_used_at_ms: sites.get(&site.origin).and_then(|s| s.last_used_at_ms),
                expires_at_ms,
                blocked: false,
                embedders,
            };
            let out = record.to_pb();
            sites.insert(site.origin.clone(), record);
            Ok(out)
        })
    }

    /// The canonical form of a folder a grant names, or why it cannot be granted.
    pub fn grantable_folder(&self, path: &str) -> Result<PathBuf, SessionError> {
        let requested = Path::new(path);
        if !requested.is_absolute() {
            return Err(SessionError::InvalidInput(format!(
                "folder {path:?} is not absolute"
            )));
        }
        // The io error's words name no path; only the one given is added.
        let canonical = requested
            .canonicalize()
            .map_err(|e| SessionError::Workspace(format!("folder {path:?}: {e}")))?;
        if !canonical.is_dir() {
            return Err(SessionError::Workspace(format!(
                "folder {path:?} is not a folder"
            )));
        }
        if let Some(why) = self.never.refusal(&canonical) {
            return Err(SessionError::FolderNotGrantable(path.to_string(), why));
        }
        Ok(canonical)
    }

    /// BlockSite: the site has no grant and gets no prompt.
    pub fn block(&self, origin: &str) -> Result<pb::Site, SessionError> {
        parse_origin(origin)?;
        self.change(|sites, now| {
            let record = SiteRecord {
                origin: origin.to_string(),
                access: None,
                providers: Vec::new(),
                folders: Vec::new(),
                any_model: false,
                granted_at_ms: now,
                last_used_at_ms: sites.get(origin).and_then(|s| s.last_used_at_ms),
                expires_at_ms: None,
                blocked: true,
                embedders: Vec::new(),
            };
            let out = record.to_pb();
            sites.insert(origin.to_string(), record);
            Ok(out)
        })
    }

    /// RevokeSite: forgets the site's grant or block (idempotent).
    pub fn revoke(&self, origin: &str) -> Result<(), SessionError> {
        if !self.lock().sites.contains_key(origin) {
            return Ok(());
        }
        self.change(|sites, _| {
            sites.remove(origin);
            Ok(())
        })
    }

    /// The grant a request of `origin` acts under: None for a local caller,
    /// the live grant of a web origin (its use noted), else SITE_NOT_APPROVED.
    pub fn check(self: &Arc<Self>, origin: &str) -> Result<Option<Grant>, SessionError> {
        self.use_grant(origin, |site| Grant {
            providers: site.providers.clone(),
            folders: site.folders.clone(),
            any_model: site.any_model,
        })
    }

    /// [`Sites::check`] for the requests that need only the yes: every
    /// thread-scoped one, so nothing of the grant is copied on their path.
    pub fn require(self: &Arc<Self>, origin: &str) -> Result<(), SessionError> {
        self.use_grant(origin, |_| ()).map(drop)
    }

    /// Looks up `origin`'s live grant, notes its use (written at most every
    /// [`LAST_USED_WRITE_EVERY`], off the caller's path) and reads `read` of it.
    fn use_grant<R>(
        self: &Arc<Self>,
        origin: &str,
        read: impl FnOnce(&SiteRecord) -> R,
    ) -> Result<Option<R>, SessionError> {
        if !is_web_origin(origin) {
            return Ok(None);
        }
        let now = now_ms();
        let (value, write) = {
            let mut state = self.lock();
            let Some(site) = state.sites.get_mut(origin).filter(|s| s.live(now)) else {
                return Err(SessionError::SiteNotApproved(origin.to_string()));
            };
            site.last_used_at_ms = Some(now);
            let value = read(site);
            let written = state.written_use.get(origin).copied().unwrap_or(0);
            let due = now.saturating_sub(written) >= LAST_USED_WRITE_EVERY.as_millis() as u64;
            if due {
                state.written_use.insert(origin.to_string(), now);
            }
            (value, due)
        };
        if write {
            self.write_use_later();
        }
        Ok(Some(value))
    }

    /// Writes the file off the request's path (a use is not worth a wait).
    fn write_use_later(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let sites = self.clone();
        runtime.spawn_blocking(move || {
            let _writing = sites.writing.lock().unwrap_or_else(|p| p.into_inner());
            let now = now_ms();
            let current = {
                let mut state = sites.lock();
                state.sites.retain(|_, s| !s.expired(now));
                state.sites.clone()
            };
            if let Err(e) = sites.write(&current) {
                tracing::warn!(error = %e, "could not note a site's last use");
            }
        });
    }

    /// The level a turn of `origin` runs at: FULL for a local caller.
    pub fn level(self: &Arc<Self>, origin: &str) -> Result<pb::AccessLevel, SessionError> {
        Ok(self
            .use_grant(origin, |site| {
                site.access.expect("a live grant has a level")
            })?
            .unwrap_or(pb::AccessLevel::Full))
    }

    /// Uses up a `once` folder grant of `origin` (CreateSession made its thread).
    pub fn use_once(&self, origin: &str, path: &Path) -> Result<(), SessionError> {
        self.change(|sites, _| {
            if let Some(site) = sites.get_mut(origin) {
                site.folders.retain(|f| !(f.once && f.path == path));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(dir: &Path) -> Arc<Sites> {
        let never = NeverGrantable::new(
            &pedelec_common::DataDir::at(dir.join("data")),
            &pedelec_common::RuntimeDir::at(dir.join("rt")),
            None,
        );
        Arc::new(Sites::load(dir.join("sites.json"), never))
    }

    fn site(origin: &str) -> pb::Site {
        pb::Site {
            origin: origin.into(),
            access: pb::AccessLevel::Edit as i32,
            providers: vec!["codex".into()],
            ..Default::default()
        }
    }

    #[test]
    fn origins() {
        assert!(is_web_origin("https://a.example"));
        assert!(is_web_origin("HTTP://a.example"));
        assert!(!is_web_origin("cli"));
        assert!(!is_web_origin("chrome-extension://abc"));
        for ok in [
            "https://a.example",
            "https://a.example:8443",
            "http://[::1]:3000",
        ] {
            assert!(parse_origin(ok).is_ok(), "{ok}");
        }
        for bad in [
            "https://",
            "https://a.example/",
            "https://a.example/x",
            "https://A.example",
            "https://a.example:0",
            "https://a.example:x",
            "https://u@a.example",
            "ftp://a.example",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
        for lo in [
            "http://localhost",
            "http://localhost:5173",
            "http://127.0.0.1:8080",
            "http://127.1.2.3",
            "http://[::1]:3000",
            "https://localhost",
        ] {
            assert!(is_loopback(lo), "{lo}");
        }
        assert!(!is_loopback("http://localhost.example.com"));
        assert!(!is_loopback("http://10.0.0.1"));
    }

    #[test]
    fn grants_persist_with_private_mode_and_block_and_revoke() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let s = sites(dir.path());
        assert_eq!(
            s.check("https://a.example").unwrap_err().code(),
            pedelec_common::Code::SITE_NOT_APPROVED
        );
        assert!(s.check("cli").unwrap().is_none());
        s.grant(site("https://a.example")).unwrap();
        let mode = std::fs::metadata(dir.path().join("sites.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Levels are stored as the native protocol spells them.
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("sites.json")).unwrap()).unwrap();
        assert!(file.to_string().contains(r#""access":"edit""#), "{file}");
        let again = sites(dir.path());
        assert_eq!(
            again.level("https://a.example").unwrap(),
            pb::AccessLevel::Edit
        );
        again.block("https://a.example").unwrap();
        assert!(again.check("https://a.example").is_err());
        assert!(sites(dir.path()).list()[0].blocked);
        again.revoke("https://a.example").unwrap();
        assert!(sites(dir.path()).list().is_empty());
    }

    #[test]
    fn grant_rules() {
        let dir = tempfile::tempdir().unwrap();
        let s = sites(dir.path());
        let code = |r: Result<pb::Site, SessionError>| r.unwrap_err().code();
        use pedelec_common::Code;
        assert_eq!(
            code(s.grant(site("http://a.example"))),
            Code::ORIGIN_NOT_SECURE
        );
        let mut unknown = site("https://a.example");
        unknown.providers = vec!["nope".into()];
        assert_eq!(code(s.grant(unknown)), Code::INVALID_INPUT);
        let mut unspecified = site("https://a.example");
        unspecified.access = 0;
        assert_eq!(code(s.grant(unspecified)), Code::INVALID_INPUT);
        let mut data = site("https://a.example");
        std::fs::create_dir_all(dir.path().join("data/workspaces")).unwrap();
        data.folders = vec![pb::FolderGrant {
            path: dir.path().join("data/workspaces").display().to_string(),
            once: false,
        }];
        assert_eq!(code(s.grant(data)), Code::FOLDER_NOT_GRANTABLE);
        // Loopback: at most a day, whatever was asked.
        let granted = s.grant(site("http://localhost:3000")).unwrap();
        let expires = pedelec_common::timestamp_ms(&granted.expires_at.unwrap());
        let day = LOOPBACK_GRANT_LIMIT.as_millis() as u64;
        assert!(expires <= now_ms() + day && expires + 60_000 > now_ms() + day);
        // An expired grant is no grant, and is not listed.
        let mut past = site("https://b.example");
        past.expires_at = Some(pedelec_common::ms_to_timestamp(now_ms() + 50));
        s.grant(past).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert!(s.check("https://b.example").is_err());
        assert!(s.list().iter().all(|x| x.origin != "https://b.example"));
    }
}
