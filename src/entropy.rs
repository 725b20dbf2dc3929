//! The randomness seam.
//!
//! Nonces, incarnation ids and backoff jitter all come from an [`Entropy`]
//! source. Production uses the operating system's generator ([`OsEntropy`]);
//! tests and the simulator use [`SeededEntropy`] so that one seed replays one
//! run exactly.
//!
//! Architecture invariant: nothing outside this module draws OS randomness.

use std::fmt;
use std::sync::Mutex;

/// A source of random bytes.
pub trait Entropy: Send + Sync + fmt::Debug + 'static {
    /// Fills `buf` with random bytes.
    fn fill(&self, buf: &mut [u8]);

    /// A random `u64`.
    fn next_u64(&self) -> u64 {
        let mut bytes = [0u8; 8];
        self.fill(&mut bytes);
        u64::from_le_bytes(bytes)
    }
}

/// The operating system's random number generator.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    #[allow(clippy::disallowed_methods)] // The one place OS randomness is drawn.
    fn fill(&self, buf: &mut [u8]) {
        // The OS generator failing means the machine cannot produce nonces at
        // all; continuing with predictable bytes would reopen the ABA hazard
        // that nonces close, so this is one of the few places that panics.
        getrandom::fill(buf).expect("the operating system's random number generator failed");
    }
}

/// A deterministic generator (SplitMix64) for tests and simulation.
///
/// ```
/// use hoplock::entropy::{Entropy, SeededEntropy};
///
/// let a = SeededEntropy::new(7);
/// let b = SeededEntropy::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// ```
#[derive(Debug)]
pub struct SeededEntropy {
    state: Mutex<u64>,
}

impl SeededEntropy {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> SeededEntropy {
        SeededEntropy { state: Mutex::new(seed) }
    }
}

/// One SplitMix64 step: advances `state` and returns the next output.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Entropy for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) {
        // A poisoned lock still holds a valid state: the generator has no
        // invariant a panic elsewhere could break.
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for chunk in buf.chunks_mut(8) {
            let word = splitmix64(&mut state).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// `len` random bytes as lowercase hex.
pub(crate) fn random_hex(entropy: &dyn Entropy, len: usize) -> String {
    let mut bytes = vec![0u8; len];
    entropy.fill(&mut bytes);
    let mut out = String::with_capacity(len * 2);
    for byte in bytes {
        out.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_entropy_replays_and_differs_by_seed() {
        let (a, b, c) = (SeededEntropy::new(1), SeededEntropy::new(1), SeededEntropy::new(2));
        let (mut x, mut y, mut z) = ([0u8; 13], [0u8; 13], [0u8; 13]);
        a.fill(&mut x);
        b.fill(&mut y);
        c.fill(&mut z);
        assert_eq!(x, y);
        assert_ne!(x, z);
    }

    #[test]
    fn random_hex_has_the_requested_length() {
        let hex = random_hex(&SeededEntropy::new(3), 16);
        assert_eq!(hex.len(), 32);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
