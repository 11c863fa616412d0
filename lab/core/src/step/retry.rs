//! The one retry policy of the lab: exponential backoff, bounded by a deadline or a number of attempts.
//! The engine retries a step's transient errors with it, and the actions that retry inside a step (a
//! request that may meet a proxy not ready yet, a re-look while waiting for a join) pace themselves with it.

use std::time::Duration;

use tokio::time::Instant;

/// Pauses between attempts: `first`, doubled after each up to `max`; spent when the next pause would
/// pass the deadline, or when the attempts are used up.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    attempts: Option<u32>,
    deadline: Option<Instant>,
    tried: u32,
}

impl Backoff {
    /// Doubling from `first` up to `max`, with no bound yet.
    pub fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            next: first,
            max,
            attempts: None,
            deadline: None,
            tried: 0,
        }
    }

    /// The same pause every time.
    pub fn constant(every: Duration) -> Self {
        Self::new(every, every)
    }

    /// No attempt starts after `deadline`.
    #[must_use]
    pub fn until(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// At most `n` attempts, the first included.
    #[must_use]
    pub fn attempts(mut self, n: u32) -> Self {
        self.attempts = Some(n);
        self
    }

    /// Attempts made so far (each call of [`Backoff::pause`] or [`Backoff::pause_within`] counts one).
    pub fn tried(&self) -> u32 {
        self.tried
    }

    /// After an attempt that may be retried: the pause before the next one, or `None` when the policy is
    /// spent (the attempts are used up, or the pause would end at or after the deadline).
    pub fn pause(&mut self) -> Option<Duration> {
        self.tried += 1;
        if self.attempts.is_some_and(|n| self.tried >= n) {
            return None;
        }
        let pause = self.next;
        if self.deadline.is_some_and(|d| Instant::now() + pause >= d) {
            return None;
        }
        self.next = (self.next * 2).min(self.max);
        Some(pause)
    }

    /// Like [`Backoff::pause`], but the last pause is cut to the time left before the deadline instead of
    /// being refused: for a wait that looks again at intervals and may use its whole time.
    pub fn pause_within(&mut self) -> Option<Duration> {
        self.tried += 1;
        if self.attempts.is_some_and(|n| self.tried >= n) {
            return None;
        }
        let pause = match self.deadline {
            Some(d) => self.next.min(d.saturating_duration_since(Instant::now())),
            None => self.next,
        };
        self.next = (self.next * 2).min(self.max);
        (!pause.is_zero()).then_some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_longest() {
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(5));
        let pauses: Vec<_> = (0..4).map(|_| b.pause().unwrap().as_secs()).collect();
        assert_eq!(pauses, [2, 4, 5, 5]);
        assert_eq!(b.tried(), 4);
    }

    #[test]
    fn attempts_count_the_first() {
        let mut b = Backoff::constant(Duration::from_millis(1)).attempts(3);
        assert!(b.pause().is_some());
        assert!(b.pause().is_some());
        assert_eq!(b.pause(), None, "the third attempt was the last");
    }

    #[test]
    fn a_pause_past_the_deadline_ends_the_policy_or_is_cut_to_it() {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(30)).until(deadline);
        assert_eq!(b.pause(), Some(Duration::from_secs(2)));
        assert_eq!(b.pause(), None, "4 s would pass the deadline");
        let soon = Instant::now() + Duration::from_secs(1);
        let cut = Backoff::constant(Duration::from_secs(5))
            .until(soon)
            .pause_within()
            .unwrap();
        assert!(cut <= Duration::from_secs(1) && !cut.is_zero(), "{cut:?}");
        let past = Instant::now();
        assert_eq!(
            Backoff::constant(Duration::from_secs(5))
                .until(past)
                .pause_within(),
            None
        );
    }
}
