//! Turn records: each running agent's process group written down as
//! `<runtime dir>/turns/<pgid>` (holding its cgroup folder, if it has one),
//! so a service restarted after a crash can end what its predecessor left
//! running ([`super::orphans`]). A record goes when its processes have.
//!
//! Each record is sealed: its first line is an HMAC-SHA256, keyed with the
//! service secret ([`RecordKey`]), over its pgid and cgroup folder. A record
//! anyone else wrote (a confined agent that can reach the folder, any local
//! process) does not verify and is ignored.

use std::fmt;
use std::path::{Path, PathBuf};

use pedelec_common::secret::ServiceSecret;
use sha2::{Digest, Sha256};

use crate::launch::AgentProcs;

/// The folder under the runtime dir where each running turn's process group
/// is recorded, so a restarted service can end what a crashed one left.
pub const TURN_RECORDS: &str = "turns";

/// What keeps a record apart from the MAC: a domain label, so the key's MACs
/// mean nothing anywhere else.
const LABEL: &[u8] = b"pedelec turn record\0";

/// The largest record read: a MAC line and a cgroup path.
const RECORD_MAX: u64 = 4096;

/// The key that seals turn records: the service secret, which a restarted
/// ProviderService is handed again; a service started without one uses a
/// key of its own, so it trusts only records it wrote itself.
#[derive(Clone)]
pub struct RecordKey(Vec<u8>);

impl RecordKey {
    pub fn new(secret: Option<&ServiceSecret>) -> RecordKey {
        match secret {
            Some(s) => RecordKey(s.to_line().trim_end().as_bytes().to_vec()),
            None => RecordKey(pedelec_common::ids::new_secret().into_bytes()),
        }
    }

    fn mac(&self, pgid: i32, cgroup: &[u8]) -> String {
        let mut msg = LABEL.to_vec();
        msg.extend_from_slice(pgid.to_string().as_bytes());
        msg.push(0);
        msg.extend_from_slice(cgroup);
        hmac_sha256(&self.0, &msg)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// A record's content: the MAC line, then the cgroup folder.
    pub(super) fn seal(&self, pgid: i32, cgroup: &[u8]) -> Vec<u8> {
        let mut out = self.mac(pgid, cgroup).into_bytes();
        out.push(b'\n');
        out.extend_from_slice(cgroup);
        out
    }

    /// The cgroup folder a record for `pgid` names (empty: none), when the
    /// record verifies.
    pub(super) fn open<'a>(&self, pgid: i32, content: &'a [u8]) -> Option<&'a [u8]> {
        let split = content.iter().position(|b| *b == b'\n')?;
        let (mac, cgroup) = (&content[..split], &content[split + 1..]);
        pedelec_common::ids::same_secret(self.mac(pgid, cgroup).as_bytes(), mac).then_some(cgroup)
    }
}

/// Never printed: it is the service secret.
impl fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RecordKey(…)")
    }
}

/// HMAC-SHA256 (RFC 2104) over sha2.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| k.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Reads the record at `path`: a regular file (no symlink, no FIFO to hang
/// on), at most [`RECORD_MAX`] bytes.
pub(super) fn read_record(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut content = Vec::new();
    file.take(RECORD_MAX).read_to_end(&mut content).ok()?;
    Some(content)
}

/// Where turn records live: `<runtime dir>/turns/<pgid>`.
#[derive(Clone, Debug)]
pub(super) struct Records {
    /// Also given to the agent as `PEDELEC_RUNTIME_DIR`.
    pub(super) runtime_dir: PathBuf,
    pub(super) dir: PathBuf,
    key: RecordKey,
}

impl Records {
    pub(super) fn new(runtime_dir: &Path, key: RecordKey) -> Self {
        Records {
            runtime_dir: runtime_dir.to_path_buf(),
            dir: runtime_dir.join(TURN_RECORDS),
            key,
        }
    }

    /// Writes `<dir>/<pgid>` holding the agent's cgroup folder, if it has
    /// one, sealed; a failure only costs the crash clean-up, so it is logged.
    pub(super) fn write(&self, procs: &AgentProcs) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let path = self.dir.join(procs.pgid().to_string());
        let cgroup = procs.cgroup_dir().unwrap_or_default();
        let content = self.key.seal(procs.pgid(), cgroup.as_os_str().as_bytes());
        let written =
            std::fs::create_dir_all(&self.dir).and_then(|()| std::fs::write(&path, content));
        match written {
            Ok(()) => Some(path),
            Err(e) => {
                tracing::warn!(path = %path.display(), "could not record the turn's process group: {e}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231, test case 2.
    #[test]
    fn hmac_sha256_matches_the_rfc() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // A key longer than a block is hashed first (RFC 4231, case 6).
        let mac = hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(mac[..4], [0x60, 0xe4, 0x31, 0x59]);
    }

    #[test]
    fn only_a_record_sealed_with_the_key_opens() {
        let secret = ServiceSecret::generate();
        let key = RecordKey::new(Some(&secret));
        let sealed = key.seal(42, b"/sys/fs/cgroup/x/pedelec-agent-1-0");
        assert_eq!(
            RecordKey::new(Some(&secret)).open(42, &sealed),
            Some(&b"/sys/fs/cgroup/x/pedelec-agent-1-0"[..])
        );
        // Another key, another pgid, another cgroup, no MAC: refused.
        assert_eq!(RecordKey::new(None).open(42, &sealed), None);
        assert_eq!(key.open(43, &sealed), None);
        let mut changed = sealed.clone();
        *changed.last_mut().unwrap() = b'1';
        assert_eq!(key.open(42, &changed), None);
        assert_eq!(key.open(42, b"/sys/fs/cgroup/x"), None);
        assert_eq!(key.open(42, b""), None);
        assert!(!format!("{key:?}").contains(&secret.to_line()[..8]));
    }
}
