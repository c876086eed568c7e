//! When to restart a crashed service: exponential backoff plus a crash window.
//! Pure bookkeeping over `Instant`s so it is tested without processes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The first restart's delay: small, so a killed service is back well within a second.
    pub initial_delay: Duration,
    pub max_delay: Duration,
    /// Healthy running this long forgives earlier crashes for the backoff.
    pub reset_after: Duration,
    /// This many crashes within `crash_window` mark the service FAILED.
    pub crash_limit: usize,
    pub crash_window: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(5),
            reset_after: Duration::from_secs(10),
            crash_limit: 5,
            crash_window: Duration::from_secs(60),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    RestartAfter(Duration),
    /// Too many crashes: leave it down until someone asks for a restart.
    GiveUp,
}

#[derive(Debug)]
pub struct CrashTracker {
    policy: RestartPolicy,
    crashes: VecDeque<Instant>,
    next_delay: Duration,
}

impl CrashTracker {
    pub fn new(policy: RestartPolicy) -> Self {
        CrashTracker {
            policy,
            crashes: VecDeque::new(),
            next_delay: policy.initial_delay,
        }
    }

    /// Records an unexpected exit at `now`. `healthy_for` is how long the
    /// process had been serving (None if it never became healthy).
    pub fn on_crash(&mut self, now: Instant, healthy_for: Option<Duration>) -> Decision {
        if healthy_for.is_some_and(|d| d >= self.policy.reset_after) {
            self.next_delay = self.policy.initial_delay;
        }
        while let Some(&first) = self.crashes.front() {
            if now.duration_since(first) >= self.policy.crash_window {
                self.crashes.pop_front();
            } else {
                break;
            }
        }
        self.crashes.push_back(now);
        if self.crashes.len() >= self.policy.crash_limit {
            return Decision::GiveUp;
        }
        let delay = self.next_delay;
        self.next_delay = (delay * 2).min(self.policy.max_delay);
        Decision::RestartAfter(delay)
    }

    /// A deliberate restart (Restart RPC) starts from a clean slate.
    pub fn reset(&mut self) {
        self.crashes.clear();
        self.next_delay = self.policy.initial_delay;
    }

    pub fn recent_crashes(&self) -> usize {
        self.crashes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy() -> RestartPolicy {
        RestartPolicy::default()
    }

    #[test]
    fn delays_double_from_small_start_up_to_the_cap() {
        let mut t = CrashTracker::new(RestartPolicy {
            crash_limit: 100,
            ..policy()
        });
        let t0 = Instant::now();
        let delays: Vec<_> = (0..12)
            .map(|i| match t.on_crash(t0 + ms(i), None) {
                Decision::RestartAfter(d) => d,
                Decision::GiveUp => panic!("gave up too early"),
            })
            .collect();
        assert_eq!(delays[0], ms(20));
        assert!(delays[0] <= ms(50), "first restart must be quick");
        assert_eq!(delays[1], ms(40));
        assert_eq!(delays[2], ms(80));
        assert!(delays.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*delays.last().unwrap(), Duration::from_secs(5));
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(5)));
    }

    #[test]
    fn five_crashes_within_a_minute_give_up() {
        let mut t = CrashTracker::new(policy());
        let t0 = Instant::now();
        for i in 0..4 {
            assert!(matches!(
                t.on_crash(t0 + Duration::from_secs(i * 10), None),
                Decision::RestartAfter(_)
            ));
        }
        assert_eq!(
            t.on_crash(t0 + Duration::from_secs(45), None),
            Decision::GiveUp
        );
    }

    #[test]
    fn crashes_older_than_the_window_are_forgotten() {
        let mut t = CrashTracker::new(policy());
        let t0 = Instant::now();
        for i in 0..4 {
            t.on_crash(t0 + Duration::from_secs(i), None);
        }
        // The first four fall out of the 60 s window, so the fifth is not fatal.
        let later = t0 + Duration::from_secs(70);
        assert!(matches!(t.on_crash(later, None), Decision::RestartAfter(_)));
        assert_eq!(t.recent_crashes(), 1);
    }

    #[test]
    fn healthy_run_of_ten_seconds_resets_the_backoff() {
        let mut t = CrashTracker::new(policy());
        let t0 = Instant::now();
        t.on_crash(t0, None);
        t.on_crash(t0 + ms(100), Some(ms(50)));
        assert_eq!(
            t.on_crash(t0 + ms(300), Some(Duration::from_secs(9))),
            Decision::RestartAfter(ms(80))
        );
        assert_eq!(
            t.on_crash(t0 + Duration::from_secs(20), Some(Duration::from_secs(10))),
            Decision::RestartAfter(ms(20))
        );
    }

    #[test]
    fn a_healthy_reset_does_not_forgive_the_crash_window() {
        let mut t = CrashTracker::new(policy());
        let t0 = Instant::now();
        for i in 0..4 {
            t.on_crash(
                t0 + Duration::from_secs(i * 11),
                Some(Duration::from_secs(10)),
            );
        }
        assert_eq!(
            t.on_crash(t0 + Duration::from_secs(55), Some(Duration::from_secs(10))),
            Decision::GiveUp
        );
    }

    #[test]
    fn reset_clears_crashes_and_delay() {
        let mut t = CrashTracker::new(policy());
        let t0 = Instant::now();
        for i in 0..5 {
            t.on_crash(t0 + ms(i), None);
        }
        t.reset();
        assert_eq!(t.recent_crashes(), 0);
        assert_eq!(
            t.on_crash(t0 + ms(10), None),
            Decision::RestartAfter(ms(20))
        );
    }
}
