//! When to restart a crashed service: exponential backoff, and giving up only
//! after the backoff has sat at its cap for a while. Pure bookkeeping over
//! durations, so it is tested without processes.
//!
//! A service that fails for a moment (a port, a lock or a disk that comes back)
//! is retried quickly and often: 20 ms, 40 ms, … up to 5 s between starts. Only
//! crashes that happen while the delay is already at the cap count toward
//! giving up, so a service is marked FAILED after about half a minute of
//! sustained crashing (8 quick restarts in ~5 s, then 5 more at 5 s each),
//! never after a brief hiccup.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The first restart's delay: small, so a killed service is back well within a second.
    pub initial_delay: Duration,
    pub max_delay: Duration,
    /// Healthy running this long forgives earlier crashes: the delay and the
    /// count start over.
    pub reset_after: Duration,
    /// This many crashes in a row with the delay at `max_delay` mark the
    /// service FAILED.
    pub crashes_at_cap: u32,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(5),
            reset_after: Duration::from_secs(10),
            crashes_at_cap: 5,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    RestartAfter(Duration),
    /// Kept crashing at the capped delay: leave it down until someone asks for a restart.
    GiveUp,
}

#[derive(Debug)]
pub struct CrashTracker {
    policy: RestartPolicy,
    next_delay: Duration,
    /// Crashes since the last reset (a long enough healthy run or a Restart).
    in_a_row: u32,
    /// Of those, the ones that happened with the delay at the cap.
    at_cap: u32,
}

impl CrashTracker {
    pub fn new(policy: RestartPolicy) -> Self {
        CrashTracker {
            policy,
            next_delay: policy.initial_delay,
            in_a_row: 0,
            at_cap: 0,
        }
    }

    /// Records an unexpected exit. `healthy_for` is how long the process had
    /// been serving (None if it never became healthy).
    pub fn on_crash(&mut self, healthy_for: Option<Duration>) -> Decision {
        if healthy_for.is_some_and(|d| d >= self.policy.reset_after) {
            self.reset();
        }
        self.in_a_row += 1;
        let delay = self.next_delay;
        if delay >= self.policy.max_delay {
            self.at_cap += 1;
            if self.at_cap >= self.policy.crashes_at_cap {
                return Decision::GiveUp;
            }
        }
        self.next_delay = (delay * 2).min(self.policy.max_delay);
        Decision::RestartAfter(delay)
    }

    /// A deliberate restart (Restart RPC) or a long healthy run starts from a clean slate.
    pub fn reset(&mut self) {
        self.next_delay = self.policy.initial_delay;
        self.in_a_row = 0;
        self.at_cap = 0;
    }

    /// Crashes since the last reset, for the status.
    pub fn crashes_in_a_row(&self) -> u32 {
        self.in_a_row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn policy() -> RestartPolicy {
        RestartPolicy::default()
    }

    /// Crashes (never healthy) until the tracker gives up; the delays it chose.
    fn delays_until_give_up(t: &mut CrashTracker) -> Vec<Duration> {
        let mut delays = Vec::new();
        loop {
            match t.on_crash(None) {
                Decision::RestartAfter(d) => delays.push(d),
                Decision::GiveUp => return delays,
            }
            assert!(delays.len() < 100, "never gave up");
        }
    }

    #[test]
    fn delays_double_from_small_start_up_to_the_cap() {
        let mut t = CrashTracker::new(RestartPolicy {
            crashes_at_cap: 100,
            ..policy()
        });
        let delays: Vec<_> = (0..12)
            .map(|_| match t.on_crash(None) {
                Decision::RestartAfter(d) => d,
                Decision::GiveUp => panic!("gave up too early"),
            })
            .collect();
        assert_eq!(delays[0], ms(20));
        assert!(delays[0] <= ms(50), "first restart must be quick");
        assert_eq!(delays[1], ms(40));
        assert_eq!(delays[2], ms(80));
        assert!(delays.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*delays.last().unwrap(), secs(5));
        assert!(delays.iter().all(|d| *d <= secs(5)));
        assert_eq!(t.crashes_in_a_row(), 12);
    }

    #[test]
    fn a_brief_failure_is_not_given_up_on() {
        // Failing for 0.6 s (or a few seconds) is far from the cap: still restarted.
        let mut t = CrashTracker::new(policy());
        let mut waited = Duration::ZERO;
        while waited < secs(3) {
            match t.on_crash(None) {
                Decision::RestartAfter(d) => waited += d,
                Decision::GiveUp => panic!("gave up after {waited:?} of crashing"),
            }
        }
        assert!(t.crashes_in_a_row() >= 8);
    }

    #[test]
    fn only_sustained_crashing_at_the_cap_gives_up() {
        let mut t = CrashTracker::new(policy());
        let delays = delays_until_give_up(&mut t);
        // 20 ms … 2.56 s (8 quick restarts), then 4 at the 5 s cap; the 5th crash at the cap gives up.
        assert_eq!(delays.len(), 12);
        assert_eq!(delays.iter().filter(|d| **d == secs(5)).count(), 4);
        let total: Duration = delays.iter().sum();
        assert!(total >= secs(25), "gave up after only {total:?}");
        assert!(total <= secs(40), "took {total:?}");
        assert_eq!(t.crashes_in_a_row(), 13);
    }

    #[test]
    fn healthy_run_of_ten_seconds_resets_the_backoff_and_the_count() {
        let mut t = CrashTracker::new(policy());
        t.on_crash(None);
        t.on_crash(Some(ms(50)));
        assert_eq!(t.on_crash(Some(secs(9))), Decision::RestartAfter(ms(80)));
        assert_eq!(t.on_crash(Some(secs(10))), Decision::RestartAfter(ms(20)));
        assert_eq!(t.crashes_in_a_row(), 1);
        // Crashing at the cap, but each time after a long healthy run: never given up.
        for _ in 0..50 {
            for _ in 0..9 {
                t.on_crash(None);
            }
            assert!(matches!(
                t.on_crash(Some(secs(10))),
                Decision::RestartAfter(d) if d == ms(20)
            ));
        }
    }

    #[test]
    fn short_healthy_runs_do_not_forgive_crashes_at_the_cap() {
        let mut t = CrashTracker::new(policy());
        for _ in 0..8 {
            t.on_crash(None);
        }
        let mut decisions = Vec::new();
        for _ in 0..5 {
            decisions.push(t.on_crash(Some(secs(9))));
        }
        assert_eq!(decisions[..4], [Decision::RestartAfter(secs(5)); 4]);
        assert_eq!(decisions[4], Decision::GiveUp);
    }

    #[test]
    fn reset_clears_crashes_and_delay() {
        let mut t = CrashTracker::new(policy());
        delays_until_give_up(&mut t);
        t.reset();
        assert_eq!(t.crashes_in_a_row(), 0);
        assert_eq!(t.on_crash(None), Decision::RestartAfter(ms(20)));
        assert_eq!(delays_until_give_up(&mut t).len(), 11);
    }
}
