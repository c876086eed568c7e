//! Transfer tickets: a random id in the URL plus a bearer token. Only the
//! token's SHA-256 is kept, so a memory dump or a log line never holds a usable
//! token. A ticket is single use and short lived, and bound to its thread, path,
//! origin, kind and (for uploads) announced size.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use crate::error::{AssetError, TicketRefusal};
use crate::paths::AssetPath;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Upload,
    Download,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Upload => "upload",
            Kind::Download => "download",
        }
    }
}

/// What a ticket allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub kind: Kind,
    pub session_id: String,
    pub origin: String,
    pub path: AssetPath,
    /// The announced size (uploads; 0 for downloads).
    pub size: u64,
    /// The announced content type (uploads; may be empty).
    pub content_type: String,
}

/// A freshly issued ticket: the only time the token exists in clear.
#[derive(Debug)]
pub struct Issued {
    pub id: String,
    pub token: String,
    pub expires_at: SystemTime,
}

struct Entry {
    token_hash: [u8; 32],
    grant: Grant,
    expires: Instant,
}

pub struct Tickets {
    ttl: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equality that takes the same time wherever the first difference is.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Tickets {
    pub fn new(ttl: Duration) -> Tickets {
        Tickets {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock cannot leave the map half-updated.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn issue(&self, grant: Grant) -> Issued {
        let now = Instant::now();
        let id = pedelec_common::ids::new_id("tkt");
        let token = pedelec_common::ids::new_secret();
        let entry = Entry {
            token_hash: hash(&token),
            grant,
            expires: now + self.ttl,
        };
        let mut entries = self.lock();
        // Unused tickets would otherwise pile up; sweeping on issue bounds the map
        // by the tickets of one TTL window.
        entries.retain(|_, e| e.expires > now);
        entries.insert(id.clone(), entry);
        Issued {
            id,
            token,
            expires_at: SystemTime::now() + self.ttl,
        }
    }

    /// The origin a live ticket of `kind` is bound to, for answering a CORS
    /// preflight; the ticket is not spent.
    pub fn origin_of(&self, id: &str, kind: Kind) -> Option<String> {
        let entries = self.lock();
        let e = entries.get(id)?;
        (e.grant.kind == kind && e.expires > Instant::now()).then(|| e.grant.origin.clone())
    }

    /// Spends the ticket if `token` and `origin` (the request's `Origin` header,
    /// absent for non-browser clients) match; a refused attempt leaves it unspent.
    pub fn redeem(
        &self,
        id: &str,
        kind: Kind,
        token: Option<&str>,
        origin: Option<&str>,
    ) -> Result<Grant, AssetError> {
        self.redeem_at(id, kind, token, origin, Instant::now())
    }

    fn redeem_at(
        &self,
        id: &str,
        kind: Kind,
        token: Option<&str>,
        origin: Option<&str>,
        now: Instant,
    ) -> Result<Grant, AssetError> {
        let Some(token) = token else {
            return Err(AssetError::ticket(
                TicketRefusal::NoCredentials,
                "missing `Authorization: Bearer <token>`",
            ));
        };
        let unknown = || {
            AssetError::ticket(
                TicketRefusal::Unknown,
                format!(
                    "no live {} ticket {id} (unknown, used or expired)",
                    kind.as_str()
                ),
            )
        };
        let mut entries = self.lock();
        let Some(entry) = entries.get(id) else {
            return Err(unknown());
        };
        if entry.expires <= now {
            entries.remove(id);
            return Err(unknown());
        }
        if entry.grant.kind != kind {
            return Err(unknown());
        }
        if !same(&entry.token_hash, &hash(token)) {
            return Err(AssetError::ticket(
                TicketRefusal::Forbidden,
                "the token does not match the ticket",
            ));
        }
        if let Some(origin) = origin
            && origin != entry.grant.origin
        {
            return Err(AssetError::ticket(
                TicketRefusal::Forbidden,
                format!("the ticket is not valid for origin {origin}"),
            ));
        }
        Ok(entries.remove(id).expect("entry present").grant)
    }

    #[cfg(test)]
    fn stored_hash(&self, id: &str) -> Option<[u8; 32]> {
        self.lock().get(id).map(|e| e.token_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(kind: Kind) -> Grant {
        Grant {
            kind,
            session_id: "thr_1".into(),
            origin: "https://app.example".into(),
            path: AssetPath::parse("/a.txt").unwrap(),
            size: 3,
            content_type: "text/plain".into(),
        }
    }

    fn refusal(r: Result<Grant, AssetError>) -> TicketRefusal {
        match r {
            Err(AssetError::TicketInvalid { refusal, .. }) => refusal,
            other => panic!("expected a ticket refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_token_is_random_long_and_stored_only_hashed() {
        let t = Tickets::new(Duration::from_secs(60));
        let a = t.issue(grant(Kind::Upload));
        let b = t.issue(grant(Kind::Upload));
        assert_ne!(a.token, b.token);
        assert_ne!(a.id, b.id);
        assert!(a.token.len() >= 32, "at least 128 bits of hex");
        let stored = t.stored_hash(&a.id).unwrap();
        let expected: [u8; 32] = Sha256::digest(a.token.as_bytes()).into();
        assert_eq!(stored, expected);
        assert!(
            !stored
                .windows(4)
                .any(|w| a.token.as_bytes().windows(4).any(|x| x == w))
        );
    }

    #[test]
    fn a_ticket_is_single_use_and_a_refusal_does_not_spend_it() {
        let t = Tickets::new(Duration::from_secs(60));
        let i = t.issue(grant(Kind::Upload));
        let origin = Some("https://app.example");
        assert_eq!(
            refusal(t.redeem(&i.id, Kind::Upload, None, origin)),
            TicketRefusal::NoCredentials
        );
        assert_eq!(
            refusal(t.redeem(&i.id, Kind::Upload, Some("wrong"), origin)),
            TicketRefusal::Forbidden
        );
        assert_eq!(
            refusal(t.redeem(
                &i.id,
                Kind::Upload,
                Some(&i.token),
                Some("https://evil.example")
            )),
            TicketRefusal::Forbidden
        );
        assert_eq!(
            refusal(t.redeem(&i.id, Kind::Download, Some(&i.token), origin)),
            TicketRefusal::Unknown
        );
        assert_eq!(t.origin_of(&i.id, Kind::Upload).as_deref(), origin);
        assert_eq!(t.origin_of(&i.id, Kind::Download), None);
        let g = t
            .redeem(&i.id, Kind::Upload, Some(&i.token), origin)
            .unwrap();
        assert_eq!(g, grant(Kind::Upload));
        assert_eq!(
            refusal(t.redeem(&i.id, Kind::Upload, Some(&i.token), origin)),
            TicketRefusal::Unknown
        );
        assert_eq!(t.origin_of(&i.id, Kind::Upload), None);
        // No Origin header (a local, non-browser client) is accepted.
        let j = t.issue(grant(Kind::Download));
        assert!(
            t.redeem(&j.id, Kind::Download, Some(&j.token), None)
                .is_ok()
        );
    }

    #[test]
    fn a_ticket_expires() {
        let t = Tickets::new(Duration::from_millis(50));
        let i = t.issue(grant(Kind::Download));
        let later = Instant::now() + Duration::from_millis(51);
        assert_eq!(
            refusal(t.redeem_at(&i.id, Kind::Download, Some(&i.token), None, later)),
            TicketRefusal::Unknown
        );
        // Expiry removed it for good.
        assert!(t.stored_hash(&i.id).is_none());
        let j = t.issue(grant(Kind::Download));
        assert!(j.expires_at > SystemTime::now());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(t.origin_of(&j.id, Kind::Download), None);
        // Issuing sweeps the expired one.
        let _k = t.issue(grant(Kind::Download));
        assert!(t.stored_hash(&j.id).is_none());
    }
}
