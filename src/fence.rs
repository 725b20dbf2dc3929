//! A fencing-token check for downstream systems.
//!
//! A lease alone cannot stop a leader that was paused (a long GC, a frozen
//! VM) and wakes up after its lease has passed to someone else: it does not
//! know it was paused. The resource it writes to must check. [`Fence`] keeps
//! the highest generation it has accepted and refuses lower ones.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::lease::Generation;

/// Rejected because a newer term has already written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {presented}: generation {highest} has already been accepted")]
pub struct StaleToken {
    /// The generation presented.
    pub presented: Generation,
    /// The highest generation accepted so far.
    pub highest: Generation,
}

/// Accepts tokens at least as high as the highest seen and rejects lower
/// ones.
///
/// The check and the guarded write must be one atomic step in your own
/// store: a conditional update (`UPDATE ... WHERE generation <= $token`), a
/// transaction, or a single-threaded owner. Checking a `Fence` and then
/// writing elsewhere leaves a window in which a newer leader can write in
/// between. Use this type where the guarded state lives in the same process
/// (behind the same lock), or as the model for the check in your store.
///
/// ```
/// use hoplock::{Generation, fence::Fence};
///
/// let fence = Fence::new();
/// assert!(fence.check(Generation(2)).is_ok());
/// assert!(fence.check(Generation(2)).is_ok()); // the same term may write again
/// assert!(fence.check(Generation(1)).is_err()); // an older term may not
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    highest: AtomicU64,
}

impl Fence {
    /// A fence that has accepted nothing yet.
    pub fn new() -> Fence {
        Fence::default()
    }

    /// Accepts `token` if it is at least the highest accepted so far, and
    /// raises the bar to it.
    pub fn check(&self, token: Generation) -> Result<(), StaleToken> {
        let mut current = self.highest.load(Ordering::Acquire);
        loop {
            if token.get() < current {
                return Err(StaleToken { presented: token, highest: Generation(current) });
            }
            match self.highest.compare_exchange_weak(current, token.get(), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    /// The highest generation accepted so far.
    pub fn highest(&self) -> Generation {
        Generation(self.highest.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_equal_and_higher_rejects_lower() {
        let fence = Fence::new();
        fence.check(Generation(5)).unwrap();
        assert_eq!(fence.check(Generation(4)), Err(StaleToken { presented: Generation(4), highest: Generation(5) }));
        fence.check(Generation(7)).unwrap();
        assert_eq!(fence.highest(), Generation(7));
    }

    #[test]
    fn concurrent_checks_never_let_the_bar_go_down() {
        // Eight threads present pseudo-random tokens at once. Whatever the
        // interleaving: every refusal names a bar above the token refused,
        // each thread sees the bar only rise, and the final bar is the
        // highest token presented.
        let fence = std::sync::Arc::new(Fence::new());
        let threads: Vec<_> = (0..8u64)
            .map(|thread| {
                let fence = fence.clone();
                std::thread::spawn(move || {
                    let mut state = thread.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    let (mut highest_presented, mut last_bar) = (0, 0);
                    for _ in 0..20_000 {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let token = state % 100_000;
                        highest_presented = highest_presented.max(token);
                        match fence.check(Generation(token)) {
                            Ok(()) => assert!(token >= last_bar, "accepted {token} below a bar of {last_bar}"),
                            Err(stale) => {
                                assert_eq!(stale.presented, Generation(token));
                                assert!(stale.highest.get() > token, "refused {token} at a bar of {}", stale.highest);
                            }
                        }
                        let bar = fence.highest().get();
                        assert!(bar >= last_bar && bar >= token.min(bar), "the bar went down to {bar}");
                        last_bar = bar;
                    }
                    highest_presented
                })
            })
            .collect();
        let highest = threads.into_iter().map(|thread| thread.join().unwrap()).max().unwrap();
        assert_eq!(fence.highest(), Generation(highest));
    }
}
