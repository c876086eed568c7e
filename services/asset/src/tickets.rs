//! Transfer tickets: a random id in the URL plus a bearer token. Only the
//! token's SHA-256 is kept, so a memory dump or a log line never holds a usable
//! token. A ticket is single use and short lived, and bound to its thread, path,
//! origin, kind and (for uploads) announced size.
//!
//! Live tickets are capped per thread, per origin (so one page cannot take
//! every place in the total) and in total. They are indexed by expiry
//! too, so sweeping the expired ones costs only what it removes. A spent or
//! expired ticket's origin and kind are kept one more TTL, so its refusal still
//! carries the CORS headers the page needs to read `ASSET_TICKET_INVALID`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use crate::error::{AssetError, TicketRefusal};
use crate::paths::AssetPath;

/// Most live (unspent, unexpired) tickets one thread may hold.
pub const MAX_TICKETS_PER_THREAD: usize = 64;
/// Most live tickets one origin may hold over all its threads: one origin
/// cannot take all [`MAX_TICKETS`] (`LIMIT_EXCEEDED`).
pub const MAX_TICKETS_PER_ORIGIN: usize = 256;
/// Most live tickets in all.
pub const MAX_TICKETS: usize = 4096;
/// Most spent/expired ticket ids remembered for CORS; the oldest go first.
const MAX_REMEMBERED: usize = 4 * MAX_TICKETS;

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

/// A spent or expired ticket, remembered for CORS only.
struct Spent {
    kind: Kind,
    origin: String,
}

#[derive(Default)]
struct Store {
    live: HashMap<String, Entry>,
    /// `(expires, id)` of every live ticket.
    live_by_expiry: BTreeSet<(Instant, String)>,
    /// Live tickets per thread id.
    per_thread: HashMap<String, usize>,
    /// Live tickets per origin.
    per_origin: HashMap<String, usize>,
    spent: HashMap<String, Spent>,
    /// `(forget_at, id)` of every remembered ticket.
    spent_by_expiry: BTreeSet<(Instant, String)>,
}

impl Store {
    /// Moves the expired live tickets to the remembered ones and forgets those
    /// past their second TTL; costs O(log n) per ticket it touches.
    fn sweep(&mut self, now: Instant, ttl: Duration) {
        while let Some((expires, _)) = self.live_by_expiry.first()
            && *expires <= now
        {
            let (expires, id) = self.live_by_expiry.pop_first().expect("first exists");
            self.retire(&id, expires + ttl);
        }
        while let Some((forget_at, _)) = self.spent_by_expiry.first()
            && *forget_at <= now
        {
            let (_, id) = self.spent_by_expiry.pop_first().expect("first exists");
            self.spent.remove(&id);
        }
    }

    /// Removes a live ticket (spent or expired) and remembers its origin until
    /// `forget_at`.
    fn retire(&mut self, id: &str, forget_at: Instant) -> Option<Grant> {
        let entry = self.live.remove(id)?;
        self.live_by_expiry.remove(&(entry.expires, id.to_string()));
        let thread = &entry.grant.session_id;
        if let Some(n) = self.per_thread.get_mut(thread) {
            *n -= 1;
            if *n == 0 {
                self.per_thread.remove(thread);
            }
        }
        let origin = &entry.grant.origin;
        if let Some(n) = self.per_origin.get_mut(origin) {
            *n -= 1;
            if *n == 0 {
                self.per_origin.remove(origin);
            }
        }
        if self.spent.len() >= MAX_REMEMBERED
            && let Some((_, oldest)) = self.spent_by_expiry.pop_first()
        {
            self.spent.remove(&oldest);
        }
        self.spent.insert(
            id.to_string(),
            Spent {
                kind: entry.grant.kind,
                origin: entry.grant.origin.clone(),
            },
        );
        self.spent_by_expiry.insert((forget_at, id.to_string()));
        Some(entry.grant)
    }
}

pub struct Tickets {
    ttl: Duration,
    store: Mutex<Store>,
    /// Origins that may use any ticket besides the one it was issued to: the
    /// extension's pages, which transfer a page's bytes for it.
    extension_origins: Vec<String>,
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
        Tickets::with_extension_origins(ttl, Vec::new())
    }

    pub fn with_extension_origins(ttl: Duration, extension_origins: Vec<String>) -> Tickets {
        Tickets {
            ttl,
            store: Mutex::new(Store::default()),
            extension_origins,
        }
    }

    /// Whether a request from `origin` may use a ticket issued to `ticket_origin`.
    pub fn origin_may_use(&self, ticket_origin: &str, origin: &str) -> bool {
        origin == ticket_origin
            || self.extension_origins.iter().any(|o| o == origin)
            || pedelec_common::extension::is_firefox_extension_origin(origin)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        // A panic while holding the lock cannot leave the maps half-updated.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Issues a ticket, unless its thread already holds
    /// [`MAX_TICKETS_PER_THREAD`] live ones or [`MAX_TICKETS`] are live in all
    /// (`INVALID_INPUT`, "too many open tickets"), or its origin already holds
    /// [`MAX_TICKETS_PER_ORIGIN`] (`LIMIT_EXCEEDED`).
    pub fn issue(&self, grant: Grant) -> Result<Issued, AssetError> {
        self.issue_at(grant, Instant::now())
    }

    fn issue_at(&self, grant: Grant, now: Instant) -> Result<Issued, AssetError> {
        let mut store = self.lock();
        store.sweep(now, self.ttl);
        let thread_open = store
            .per_thread
            .get(&grant.session_id)
            .copied()
            .unwrap_or(0);
        if thread_open >= MAX_TICKETS_PER_THREAD {
            return Err(AssetError::InvalidInput(format!(
                "too many open tickets: thread {} already holds {MAX_TICKETS_PER_THREAD} unused \
                 ones; use them or let them expire ({} s)",
                grant.session_id,
                self.ttl.as_secs()
            )));
        }
        let origin_open = store.per_origin.get(&grant.origin).copied().unwrap_or(0);
        if origin_open >= MAX_TICKETS_PER_ORIGIN {
            return Err(AssetError::Limit(format!(
                "too many open tickets: {} already holds {MAX_TICKETS_PER_ORIGIN} unused ones \
                 over its threads; use them or let them expire ({} s)",
                grant.origin,
                self.ttl.as_secs()
            )));
        }
        if store.live.len() >= MAX_TICKETS {
            return Err(AssetError::InvalidInput(format!(
                "too many open tickets: {MAX_TICKETS} unused ones in all; use them or let them \
                 expire ({} s)",
                self.ttl.as_secs()
            )));
        }
        let id = pedelec_common::ids::new_id("tkt");
        let token = pedelec_common::ids::new_secret();
        let expires = now + self.ttl;
        *store
            .per_thread
            .entry(grant.session_id.clone())
            .or_default() += 1;
        *store.per_origin.entry(grant.origin.clone()).or_default() += 1;
        store.live_by_expiry.insert((expires, id.clone()));
        store.live.insert(
            id.clone(),
            Entry {
                token_hash: hash(&token),
                grant,
                expires,
            },
        );
        Ok(Issued {
            id,
            token,
            expires_at: SystemTime::now() + self.ttl,
        })
    }

    /// The origin a ticket of `kind` is bound to, for the CORS headers of a
    /// preflight or an answer: live tickets, and spent or expired ones for one
    /// more TTL (so their refusal reaches the page). Spends nothing.
    pub fn cors_origin(&self, id: &str, kind: Kind) -> Option<String> {
        self.cors_origin_at(id, kind, Instant::now())
    }

    fn cors_origin_at(&self, id: &str, kind: Kind, now: Instant) -> Option<String> {
        let mut store = self.lock();
        store.sweep(now, self.ttl);
        if let Some(e) = store.live.get(id) {
            return (e.grant.kind == kind).then(|| e.grant.origin.clone());
        }
        let s = store.spent.get(id)?;
        (s.kind == kind).then(|| s.origin.clone())
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
        let mut store = self.lock();
        store.sweep(now, self.ttl);
        let Some(entry) = store.live.get(id) else {
            return Err(unknown());
        };
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
            && !self.origin_may_use(&entry.grant.origin, origin)
        {
            return Err(AssetError::ticket(
                TicketRefusal::Forbidden,
                format!("the ticket is not valid for origin {origin}"),
            ));
        }
        Ok(store.retire(id, now + self.ttl).expect("entry present"))
    }

    #[cfg(test)]
    fn stored_hash(&self, id: &str) -> Option<[u8; 32]> {
        self.lock().live.get(id).map(|e| e.token_hash)
    }

    #[cfg(test)]
    fn counts(&self) -> (usize, usize, usize) {
        let s = self.lock();
        (s.live.len(), s.live_by_expiry.len(), s.spent.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(kind: Kind) -> Grant {
        grant_for(kind, "thr_1")
    }

    fn grant_for(kind: Kind, thread: &str) -> Grant {
        Grant {
            kind,
            session_id: thread.into(),
            origin: "https://app.example".into(),
            path: AssetPath::parse("/a.txt").unwrap(),
            size: 3,
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
        let a = t.issue(grant(Kind::Upload)).unwrap();
        let b = t.issue(grant(Kind::Upload)).unwrap();
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
    fn the_extension_may_use_a_pages_ticket_other_origins_may_not() {
        let extension = "chrome-extension://ekeclpceddngodnkncegoclkkeknaacb";
        let t = Tickets::with_extension_origins(Duration::from_secs(60), vec![extension.into()]);
        let i = t.issue(grant(Kind::Upload)).unwrap();
        assert_eq!(
            refusal(t.redeem(
                &i.id,
                Kind::Upload,
                Some(&i.token),
                Some("https://evil.example")
            )),
            TicketRefusal::Forbidden
        );
        assert!(t.origin_may_use("https://app.example", extension));
        assert!(!t.origin_may_use("https://app.example", "chrome-extension://other"));
        // Pedelec's Firefox add-on: its pages' origin has a per-install uuid.
        assert!(t.origin_may_use(
            "https://app.example",
            "moz-extension://0b1c2d3e-aaaa-4bbb-8ccc-0123456789ab"
        ));
        assert!(!t.origin_may_use("https://app.example", "moz-extension://evil"));
        let grant = t
            .redeem(&i.id, Kind::Upload, Some(&i.token), Some(extension))
            .unwrap();
        assert_eq!(
            grant.origin, "https://app.example",
            "still the page's thread"
        );
    }

    #[test]
    fn a_ticket_is_single_use_and_a_refusal_does_not_spend_it() {
        let t = Tickets::new(Duration::from_secs(60));
        let i = t.issue(grant(Kind::Upload)).unwrap();
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
        assert_eq!(t.cors_origin(&i.id, Kind::Upload).as_deref(), origin);
        assert_eq!(t.cors_origin(&i.id, Kind::Download), None);
        let g = t
            .redeem(&i.id, Kind::Upload, Some(&i.token), origin)
            .unwrap();
        assert_eq!(g, grant(Kind::Upload));
        assert_eq!(
            refusal(t.redeem(&i.id, Kind::Upload, Some(&i.token), origin)),
            TicketRefusal::Unknown
        );
        // Spent, but its origin still gets CORS headers on the refusal.
        assert_eq!(t.cors_origin(&i.id, Kind::Upload).as_deref(), origin);
        assert_eq!(t.cors_origin(&i.id, Kind::Download), None);
        assert_eq!(t.cors_origin("tkt_never", Kind::Upload), None);
        // No Origin header (a local, non-browser client) is accepted.
        let j = t.issue(grant(Kind::Download)).unwrap();
        assert!(
            t.redeem(&j.id, Kind::Download, Some(&j.token), None)
                .is_ok()
        );
    }

    #[test]
    fn a_ticket_expires_and_its_origin_is_remembered_one_more_ttl() {
        let ttl = Duration::from_millis(50);
        let t = Tickets::new(ttl);
        let t0 = Instant::now();
        let i = t.issue_at(grant(Kind::Download), t0).unwrap();
        assert!(i.expires_at > SystemTime::now());
        let later = t0 + Duration::from_millis(51);
        assert_eq!(
            refusal(t.redeem_at(&i.id, Kind::Download, Some(&i.token), None, later)),
            TicketRefusal::Unknown
        );
        // Expiry removed it for good, but its origin answers CORS for one more TTL.
        assert!(t.stored_hash(&i.id).is_none());
        assert_eq!(
            t.cors_origin_at(&i.id, Kind::Download, later).as_deref(),
            Some("https://app.example")
        );
        assert_eq!(
            t.cors_origin_at(
                &i.id,
                Kind::Download,
                t0 + 2 * ttl + Duration::from_millis(1)
            ),
            None
        );
        assert_eq!(t.counts(), (0, 0, 0));
    }

    #[test]
    fn expired_tickets_are_swept_in_expiry_order() {
        let t = Tickets::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let ids: Vec<String> = (0..5)
            .map(|i| {
                t.issue_at(grant(Kind::Upload), t0 + Duration::from_secs(i))
                    .unwrap()
                    .id
            })
            .collect();
        // At t0 + 12 s the first three (issued at 0, 1, 2 s) have expired.
        let now = t0 + Duration::from_secs(12);
        t.issue_at(grant(Kind::Upload), now).unwrap();
        assert_eq!(t.counts(), (3, 3, 3));
        for id in &ids[..3] {
            assert!(t.stored_hash(id).is_none());
        }
        for id in &ids[3..] {
            assert!(t.stored_hash(id).is_some());
        }
    }

    fn grant_of(origin: &str, thread: &str) -> Grant {
        Grant {
            origin: origin.into(),
            ..grant_for(Kind::Upload, thread)
        }
    }

    /// One origin, over many threads, cannot take every place in the total:
    /// past MAX_TICKETS_PER_ORIGIN it is LIMIT_EXCEEDED, other origins still
    /// get tickets, and spending one of its tickets frees a place.
    #[test]
    fn open_tickets_are_capped_per_origin() {
        let t = Tickets::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let hog = "https://hog.example";
        let mut first = None;
        for n in 0..MAX_TICKETS_PER_ORIGIN {
            let thread = format!("thr_{}", n / MAX_TICKETS_PER_THREAD);
            let i = t.issue_at(grant_of(hog, &thread), t0).unwrap();
            first.get_or_insert(i);
        }
        // A fresh thread of the same origin: its thread cap is far away.
        let err = t.issue_at(grant_of(hog, "thr_fresh"), t0).unwrap_err();
        assert!(
            matches!(&err, AssetError::Limit(m) if m.contains(hog)),
            "{err:?}"
        );
        assert_eq!(err.coded().code, pedelec_common::Code::LIMIT_EXCEEDED);
        assert_eq!(t.counts().0, MAX_TICKETS_PER_ORIGIN, "nothing issued");
        // Another origin is not affected.
        t.issue_at(grant_of("https://other.example", "thr_o"), t0)
            .unwrap();
        // Spending one frees a place, and only one.
        let first = first.unwrap();
        t.redeem_at(&first.id, Kind::Upload, Some(&first.token), None, t0)
            .unwrap();
        t.issue_at(grant_of(hog, "thr_fresh"), t0).unwrap();
        assert!(t.issue_at(grant_of(hog, "thr_fresh"), t0).is_err());
        // So does expiry.
        t.issue_at(grant_of(hog, "thr_fresh"), t0 + Duration::from_secs(60))
            .unwrap();
    }

    #[test]
    fn open_tickets_are_capped_per_thread_and_in_total() {
        let t = Tickets::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let mut first = None;
        for _ in 0..MAX_TICKETS_PER_THREAD {
            let i = t.issue_at(grant_for(Kind::Upload, "thr_a"), t0).unwrap();
            first.get_or_insert(i);
        }
        let err = t
            .issue_at(grant_for(Kind::Download, "thr_a"), t0)
            .unwrap_err();
        assert!(matches!(&err, AssetError::InvalidInput(m) if m.contains("too many open tickets")));
        assert_eq!(err.coded().code, pedelec_common::Code::INVALID_INPUT);
        // Another thread is not affected.
        t.issue_at(grant_for(Kind::Upload, "thr_b"), t0).unwrap();
        // Spending one frees a place.
        let first = first.unwrap();
        t.redeem_at(&first.id, Kind::Upload, Some(&first.token), None, t0)
            .unwrap();
        t.issue_at(grant_for(Kind::Upload, "thr_a"), t0).unwrap();
        assert!(t.issue_at(grant_for(Kind::Upload, "thr_a"), t0).is_err());
        // So does expiry.
        t.issue_at(
            grant_for(Kind::Upload, "thr_a"),
            t0 + Duration::from_secs(60),
        )
        .unwrap();

        // The total cap, over many threads.
        let t = Tickets::new(Duration::from_secs(60));
        for n in 0..MAX_TICKETS {
            let origin = format!("https://o{}.example", n / MAX_TICKETS_PER_ORIGIN);
            t.issue_at(grant_of(&origin, &format!("thr_{}", n / 32)), t0)
                .unwrap();
        }
        let err = t
            .issue_at(grant_for(Kind::Upload, "thr_new"), t0)
            .unwrap_err();
        assert!(matches!(&err, AssetError::InvalidInput(m) if m.contains("too many open tickets")));
        assert!(
            t.issue_at(
                grant_for(Kind::Upload, "thr_new"),
                t0 + Duration::from_secs(60)
            )
            .is_ok()
        );
    }
}
