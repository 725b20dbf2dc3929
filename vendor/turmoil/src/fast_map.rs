//! hoplock patch (see `PATCHES.md`): the hash turmoil's maps use.
//!
//! Every map here is keyed by something turmoil hands out itself
//! (addresses, ports, socket pairs, host names from the simulation's own
//! code), so none needs a hash that resists keys chosen to collide; the
//! standard library's SipHash was a few per cent of a simulated run, spent
//! on lookups made every step. The maps stay `IndexMap`s, so their order is
//! the order of insertion whatever the hash, and a run is the same with
//! either.

use std::hash::{BuildHasherDefault, Hasher};

/// `indexmap::IndexMap` with [`WordHasher`].
pub(crate) type IndexMap<K, V> = indexmap::IndexMap<K, V, BuildHasherDefault<WordHasher>>;

/// A multiply-and-fold hash over machine words: quick for the short keys
/// above. The table picks a bucket from the low bits and keeps the top
/// seven as a tag; the fold in [`Hasher::finish`] mixes both.
#[derive(Clone, Copy)]
pub(crate) struct WordHasher {
    state: u64,
}

impl Default for WordHasher {
    /// Starts from a non-zero state, so leading zero words still move it.
    fn default() -> Self {
        WordHasher { state: 0x243f_6a88_85a3_08d3 }
    }
}

impl WordHasher {
    /// An odd constant with no structure (the fractional part of the golden
    /// ratio), so each step is a bijection of the state.
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

    fn add(&mut self, word: u64) {
        self.state = (self.state ^ word).wrapping_mul(Self::MULTIPLIER);
        self.state ^= self.state >> 32;
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length keeps "ab" and "ab\0" apart.
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_u16(&mut self, value: u16) {
        self.add(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        // One more round, so the last word reaches every bit.
        let mut state = self.state.wrapping_mul(Self::MULTIPLIER);
        state ^= state >> 29;
        state
    }
}
