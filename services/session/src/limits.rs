//! The bounds on the agents pages can start and how fast: running turns (at
//! most so many per web origin and so many for all callers together) and the
//! rate of creates and turn starts per web origin (token buckets). Past any
//! of them a request is `LIMIT_EXCEEDED`, saying which bound and when to try
//! again, and nothing is changed (docs/security.md, "Site grants";
//! docs/decisions.md, "Running turns and request rates").
//!
//! Local callers (`cli` and other origins that are not http(s), which reach
//! the socket only as the user) count towards the overall cap of running
//! turns only: no per-origin cap, no rate limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::SessionError;
use crate::sites::is_web_origin;

/// Turns one web origin may have running at once (an operation from its
/// start to its finish, a tool call's wait included).
pub const DEFAULT_MAX_RUNNING_TURNS_PER_ORIGIN: usize = 8;
/// Turns all callers together may have running at once.
pub const DEFAULT_MAX_RUNNING_TURNS: usize = 32;
/// Sessions one web origin may create per [`DEFAULT_RATE_WINDOW`] (and at
/// once, after a quiet window).
pub const DEFAULT_CREATES_PER_WINDOW: u32 = 30;
/// Turns (SendText and Prepare) one web origin may start per window.
pub const DEFAULT_TURN_STARTS_PER_WINDOW: u32 = 120;
/// The window the two rates are counted over.
pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(60);

/// The numbers, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitConfig {
    pub max_running_turns_per_origin: usize,
    pub max_running_turns: usize,
    pub creates_per_window: u32,
    pub turn_starts_per_window: u32,
    pub rate_window: Duration,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            max_running_turns_per_origin: DEFAULT_MAX_RUNNING_TURNS_PER_ORIGIN,
            max_running_turns: DEFAULT_MAX_RUNNING_TURNS,
            creates_per_window: DEFAULT_CREATES_PER_WINDOW,
            turn_starts_per_window: DEFAULT_TURN_STARTS_PER_WINDOW,
            rate_window: DEFAULT_RATE_WINDOW,
        }
    }
}

pub struct Limits {
    config: LimitConfig,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Running turns per web origin (no entry at zero).
    running: HashMap<String, usize>,
    /// Running turns of every caller.
    total: usize,
    creates: HashMap<String, Bucket>,
    turn_starts: HashMap<String, Bucket>,
}

/// A running turn's place under the caps, held by its thread from the
/// operation's start until it finishes (however it finishes: completed,
/// failed, cancelled, ended, or the thread dropped); given back on drop.
pub struct TurnSlot {
    limits: Arc<Limits>,
    /// The web origin it counts for; None for a local caller.
    origin: Option<String>,
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        let mut state = self.limits.state();
        state.total = state.total.saturating_sub(1);
        if let Some(origin) = &self.origin
            && let Some(n) = state.running.get_mut(origin)
        {
            *n -= 1;
            if *n == 0 {
                state.running.remove(origin);
            }
        }
    }
}

impl std::fmt::Debug for TurnSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnSlot")
            .field("origin", &self.origin)
            .finish()
    }
}

impl Limits {
    pub fn new(config: LimitConfig) -> Arc<Limits> {
        Arc::new(Limits {
            config,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for one more running turn of `origin`, or LIMIT_EXCEEDED
    /// naming the cap that is reached.
    pub fn turn_slot(self: &Arc<Self>, origin: &str) -> Result<TurnSlot, SessionError> {
        let web = is_web_origin(origin);
        let mut state = self.state();
        let max = self.config.max_running_turns;
        if state.total >= max {
            return Err(SessionError::Limit(format!(
                "Pedelec already runs {} turns, the most it runs at once for all sites together; send again when one of them has finished",
                state.total
            )));
        }
        let max = self.config.max_running_turns_per_origin;
        if web {
            let mine = state.running.get(origin).copied().unwrap_or(0);
            if mine >= max {
                return Err(SessionError::Limit(format!(
                    "{origin} already runs {mine} turns, the most one site may run at once; send again when one of them has finished"
                )));
            }
            *state.running.entry(origin.to_string()).or_default() += 1;
        }
        state.total += 1;
        Ok(TurnSlot {
            limits: self.clone(),
            origin: web.then(|| origin.to_string()),
        })
    }

    /// Takes one of `origin`'s creates, or LIMIT_EXCEEDED saying when the
    /// next one is free. Local callers are not limited.
    pub fn take_create(&self, origin: &str) -> Result<(), SessionError> {
        self.take(origin, Instant::now(), Rate::Creates)
    }

    /// Takes one of `origin`'s turn starts (SendText, Prepare).
    pub fn take_turn_start(&self, origin: &str) -> Result<(), SessionError> {
        self.take(origin, Instant::now(), Rate::TurnStarts)
    }

    fn take(&self, origin: &str, now: Instant, rate: Rate) -> Result<(), SessionError> {
        if !is_web_origin(origin) {
            return Ok(());
        }
        let LimitConfig {
            creates_per_window,
            turn_starts_per_window,
            rate_window: window,
            ..
        } = self.config;
        let mut state = self.state();
        let (buckets, capacity, what) = match rate {
            Rate::Creates => (&mut state.creates, creates_per_window, "creates sessions"),
            Rate::TurnStarts => (
                &mut state.turn_starts,
                turn_starts_per_window,
                "starts turns",
            ),
        };
        // Only granted origins get here (the grant is checked first), so
        // the map stays small; full buckets are dropped now and then.
        if buckets.len() > 64 {
            buckets.retain(|_, b| !b.is_full(capacity, window, now));
        }
        let bucket = buckets
            .entry(origin.to_string())
            .or_insert_with(|| Bucket::full(capacity, now));
        bucket.take(capacity, window, now).map_err(|retry_after| {
            let secs = retry_after.as_millis().div_ceil(1000);
            SessionError::Rate {
                message: format!(
                    "{origin} {what} faster than one site may ({capacity} per {} s); try again in {secs} s",
                    window.as_secs()
                ),
                retry_after,
            }
        })
    }
}

#[derive(Clone, Copy)]
enum Rate {
    Creates,
    TurnStarts,
}

/// A token bucket: `capacity` tokens, refilled evenly over the window.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(capacity: u32, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(capacity),
            at: now,
        }
    }

    /// How long one token takes to come back.
    fn per_token(capacity: u32, window: Duration) -> Duration {
        window / capacity.max(1)
    }

    fn refilled(&self, capacity: u32, window: Duration, now: Instant) -> f64 {
        let per = Self::per_token(capacity, window).as_secs_f64();
        let grown =
            now.saturating_duration_since(self.at).as_secs_f64() / per.max(f64::MIN_POSITIVE);
        (self.tokens + grown).min(f64::from(capacity))
    }

    fn is_full(&self, capacity: u32, window: Duration, now: Instant) -> bool {
        self.refilled(capacity, window, now) >= f64::from(capacity)
    }

    /// Takes a token, or says how long until one is there.
    fn take(&mut self, capacity: u32, window: Duration, now: Instant) -> Result<(), Duration> {
        self.tokens = self.refilled(capacity, window, now);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Self::per_token(capacity, window).mul_f64(1.0 - self.tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: &str = "https://a.example";
    const OTHER: &str = "https://b.example";

    fn limits(per_origin: usize, overall: usize) -> Arc<Limits> {
        Limits::new(LimitConfig {
            max_running_turns_per_origin: per_origin,
            max_running_turns: overall,
            creates_per_window: 3,
            turn_starts_per_window: 5,
            rate_window: Duration::from_secs(60),
        })
    }

    #[test]
    fn running_turns_are_capped_per_origin_and_overall_and_slots_come_back() {
        let l = limits(2, 3);
        let a1 = l.turn_slot(SITE).unwrap();
        let _a2 = l.turn_slot(SITE).unwrap();
        let refused = l.turn_slot(SITE).unwrap_err();
        assert_eq!(refused.code(), pedelec_common::Code::LIMIT_EXCEEDED);
        assert!(
            refused
                .to_string()
                .contains("the most one site may run at once"),
            "{refused}"
        );
        let _b = l.turn_slot(OTHER).unwrap();
        // Three run: the overall cap holds for every caller, a local one too.
        for origin in [OTHER, "cli"] {
            let refused = l.turn_slot(origin).unwrap_err();
            assert!(
                refused.to_string().contains("for all sites together"),
                "{refused}"
            );
        }
        drop(a1);
        let _cli = l.turn_slot("cli").unwrap();
        assert!(l.turn_slot(SITE).is_err(), "the local turn took the place");
    }

    #[test]
    fn local_callers_have_no_per_origin_cap_and_no_rate() {
        let l = limits(1, 10);
        let _slots: Vec<TurnSlot> = (0..5).map(|_| l.turn_slot("cli").unwrap()).collect();
        for _ in 0..100 {
            l.take_create("cli").unwrap();
            l.take_turn_start("cli").unwrap();
        }
    }

    #[test]
    fn a_bucket_refills_over_the_window_and_says_when() {
        let l = limits(1, 1);
        let t0 = Instant::now();
        for _ in 0..3 {
            l.take(SITE, t0, Rate::Creates).unwrap();
        }
        let SessionError::Rate {
            message,
            retry_after,
        } = l.take(SITE, t0, Rate::Creates).unwrap_err()
        else {
            panic!("not a rate error");
        };
        // 3 per 60 s: a token every 20 s.
        assert_eq!(retry_after, Duration::from_secs(20));
        assert!(
            message.contains("(3 per 60 s); try again in 20 s"),
            "{message}"
        );
        // Another origin, and the other rate, are untouched.
        l.take(OTHER, t0, Rate::Creates).unwrap();
        l.take(SITE, t0, Rate::TurnStarts).unwrap();
        // 15 s later: 5 s to go; 20 s later: one token.
        let Err(SessionError::Rate { retry_after, .. }) =
            l.take(SITE, t0 + Duration::from_secs(15), Rate::Creates)
        else {
            panic!("a token came back early");
        };
        assert_eq!(retry_after.as_millis().div_ceil(1000), 5);
        l.take(SITE, t0 + Duration::from_secs(20), Rate::Creates)
            .unwrap();
        assert!(
            l.take(SITE, t0 + Duration::from_secs(20), Rate::Creates)
                .is_err()
        );
        // A quiet window fills it, to its capacity and no more.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            l.take(SITE, later, Rate::Creates).unwrap();
        }
        assert!(l.take(SITE, later, Rate::Creates).is_err());
    }

    #[test]
    fn a_rate_error_carries_retry_after_ms() {
        let e = SessionError::Rate {
            message: "m".into(),
            retry_after: Duration::from_millis(1500),
        };
        let coded = e.to_coded();
        assert_eq!(coded.code, pedelec_common::Code::LIMIT_EXCEEDED);
        assert_eq!(coded.details.unwrap()["retryAfterMs"], 1500);
    }
}
