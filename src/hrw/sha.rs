//! The Go-compatible weight: the first 8 bytes, big-endian, of
//! SHA-256(key ‖ 0x00 ‖ id).
//!
//! A lookup hashes the same key against every member, so the key's share of
//! the work is done once: [`KeyStream`] absorbs the key and the separator,
//! compressing any full 64-byte blocks of a long key, and each member only
//! adds its id and the padding. When the rest of the key, the separator, the
//! id and the 9 bytes of padding fit in one block, [`OneBlock`] assembles that
//! block from a per-lookup key prefix and a per-member [`IdTail`] built once
//! by the member set, and calls the raw compression function directly.

use sha2::block_api::compress256;

use super::select::BATCH;

/// SHA-256's initial hash value (FIPS 180-4, section 5.3.3).
const INITIAL_STATE: [u32; 8] =
    [0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19];

/// The bytes of one SHA-256 block.
const BLOCK_LEN: usize = 64;

/// Where the 64-bit message length starts in the final block.
const LENGTH_AT: usize = BLOCK_LEN - 8;

/// The longest id an [`IdTail`] holds: the key prefix takes at least the
/// separator byte, and the `0x80` padding byte must still fit before the
/// length field.
pub(crate) const TAIL_ID_MAX: usize = LENGTH_AT - 2;

/// An incremental SHA-256 over the raw compression function, kept small and
/// `Copy` so a lookup can fork it per member without allocating.
#[derive(Clone, Copy)]
pub(crate) struct Sha256Stream {
    state: [u32; 8],
    block: [u8; BLOCK_LEN],
    /// Bytes of `block` in use; always below `BLOCK_LEN` between calls.
    pos: usize,
    /// Total bytes absorbed so far, for the length field.
    len: u64,
}

impl Sha256Stream {
    pub(crate) const fn new() -> Self {
        Self { state: INITIAL_STATE, block: [0; BLOCK_LEN], pos: 0, len: 0 }
    }

    pub(crate) fn update(&mut self, mut data: &[u8]) {
        // SHA-256 defines the length modulo 2^64 bits; wrapping keeps that
        // rule without a panic path for absurd inputs.
        self.len = self.len.wrapping_add(data.len() as u64);
        while !data.is_empty() {
            let take = (BLOCK_LEN - self.pos).min(data.len());
            let (head, rest) = data.split_at(take);
            self.block[self.pos..self.pos + take].copy_from_slice(head);
            self.pos += take;
            data = rest;
            if self.pos == BLOCK_LEN {
                compress256(&mut self.state, std::slice::from_ref(&self.block));
                self.pos = 0;
            }
        }
    }

    /// Pads, compresses and returns the first 8 bytes of the digest as a
    /// big-endian integer.
    pub(crate) fn finish_weight(mut self) -> u64 {
        let bit_len = self.len.wrapping_mul(8);
        self.block[self.pos] = 0x80;
        self.block[self.pos + 1..].fill(0);
        if self.pos >= LENGTH_AT {
            compress256(&mut self.state, std::slice::from_ref(&self.block));
            self.block.fill(0);
        }
        self.block[LENGTH_AT..].copy_from_slice(&bit_len.to_be_bytes());
        compress256(&mut self.state, std::slice::from_ref(&self.block));
        state_weight(&self.state)
    }
}

/// The first 8 digest bytes are the first two state words, each big-endian.
#[inline]
fn state_weight(state: &[u32; 8]) -> u64 {
    (u64::from(state[0]) << 32) | u64::from(state[1])
}

/// A key absorbed together with the 0x00 separator, ready to be forked per
/// member.
#[derive(Clone, Copy)]
pub(crate) struct KeyStream {
    stream: Sha256Stream,
}

impl KeyStream {
    pub(crate) fn new(key: &[u8]) -> Self {
        let mut stream = Sha256Stream::new();
        stream.update(key);
        stream.update(&[0]);
        Self { stream }
    }

    /// The weight of `id` for this key, by the general path that handles any
    /// lengths.
    pub(crate) fn weight(&self, id: &[u8]) -> u64 {
        let mut stream = self.stream;
        stream.update(id);
        stream.finish_weight()
    }

    /// The single-block fast path for this key, if the key's remainder
    /// leaves room for at least an empty id.
    pub(crate) fn one_block(&self) -> Option<OneBlock> {
        if self.stream.pos > TAIL_ID_MAX + 1 {
            return None;
        }
        let mut prefix = [0u8; BLOCK_LEN];
        prefix[..self.stream.pos].copy_from_slice(&self.stream.block[..self.stream.pos]);
        Some(OneBlock { prefix, state: self.stream.state, pos: self.stream.pos, len: self.stream.len })
    }
}

/// A member id followed by the `0x80` padding byte and zeros, built once per
/// member so a lookup copies it after the key prefix with one fixed-size
/// move.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdTail {
    bytes: [u8; LENGTH_AT],
    /// The id's length, or `None` when the id is too long for one block.
    id_len: Option<u8>,
}

impl IdTail {
    pub(crate) fn new(id: &[u8]) -> Self {
        let mut bytes = [0u8; LENGTH_AT];
        let id_len = if id.len() <= TAIL_ID_MAX {
            bytes[..id.len()].copy_from_slice(id);
            bytes[id.len()] = 0x80;
            u8::try_from(id.len()).ok()
        } else {
            None
        };
        Self { bytes, id_len }
    }
}

/// The per-lookup scratch for the single-block path.
///
/// A batch of blocks is built before any is compressed. Building a block
/// takes several overlapping stores; had the compression read it right
/// away, its loads would wait for those stores to drain instead of being
/// forwarded, which costs about a third of a compression per member.
pub(crate) struct OneBlock {
    /// The key remainder and the separator, zeros after.
    prefix: [u8; BLOCK_LEN],
    state: [u32; 8],
    /// Where the id starts: the key remainder plus the separator.
    pos: usize,
    /// Bytes of key and separator, for the length field.
    len: u64,
}

impl OneBlock {
    /// Whether a member with this tail fits in one block with this key.
    #[inline]
    fn fits(&self, tail: &IdTail) -> bool {
        fits(self.pos, tail)
    }

    /// Writes the weights of the members with `tails` (at most [`BATCH`])
    /// into `out`; members whose ids do not fit are weighed by `general`,
    /// given their position in `tails`.
    pub(crate) fn fill(&mut self, tails: &[IdTail], out: &mut [u64], mut general: impl FnMut(usize) -> u64) {
        let count = tails.len().min(out.len()).min(BATCH);
        let pos = self.pos;
        // One block per member of the batch, plus one that absorbs the last
        // fixed-size tail copy's overhang. It lives here rather than in
        // `self` so that moving the lookup state around copies little.
        let mut blocks = [[0u8; BLOCK_LEN]; BATCH + 1];
        let flat = blocks.as_flattened_mut();
        for (k, tail) in tails[..count].iter().enumerate() {
            let at = k * BLOCK_LEN;
            // The prefix copy also overwrites the previous tail's overhang.
            flat[at..at + BLOCK_LEN].copy_from_slice(&self.prefix);
            if let Some(id_len) = tail.id_len.filter(|_| fits(pos, tail)) {
                let start = at + pos;
                flat[start..start + LENGTH_AT].copy_from_slice(&tail.bytes);
                let bit_len = self.len.wrapping_add(u64::from(id_len)).wrapping_mul(8);
                flat[at + LENGTH_AT..at + BLOCK_LEN].copy_from_slice(&bit_len.to_be_bytes());
            }
        }
        for (k, tail) in tails[..count].iter().enumerate() {
            out[k] = if self.fits(tail) {
                let mut state = self.state;
                compress256(&mut state, &blocks[k..k + 1]);
                state_weight(&state)
            } else {
                general(k)
            };
        }
    }
}

/// Whether an id fits in one block after a key prefix of `pos` bytes.
#[inline]
fn fits(pos: usize, tail: &IdTail) -> bool {
    tail.id_len.is_some_and(|id_len| pos + usize::from(id_len) <= TAIL_ID_MAX + 1)
}

/// The Go `ha` package's weight of `id` for `key`.
#[cfg(test)]
pub(crate) fn weight(key: &[u8], id: &[u8]) -> u64 {
    KeyStream::new(key).weight(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};

    fn reference(key: &[u8], id: &[u8]) -> u64 {
        let digest = Sha256::new().chain_update(key).chain_update([0u8]).chain_update(id).finalize();
        u64::from_be_bytes(digest[..8].try_into().unwrap())
    }

    #[test]
    fn go_vector() {
        assert_eq!(weight(b"acme", b"r1"), 0x6dbc_f892_fc24_da1b);
    }

    #[test]
    fn every_length_around_the_block_boundaries_matches_sha2() {
        // Lengths up to three blocks cover the one-block path, the two-block
        // padding case and keys that leave a midstate.
        for key_len in 0..=192usize {
            let key: Vec<u8> = (0..key_len).map(|i| (i * 7 + 1) as u8).collect();
            let stream = KeyStream::new(&key);
            for id_len in [0usize, 1, 2, 8, 53, 54, 55, 56, 63, 64, 65, 130] {
                let id: Vec<u8> = (0..id_len).map(|i| (i * 13 + 5) as u8).collect();
                let expected = reference(&key, &id);
                assert_eq!(stream.weight(&id), expected, "key {key_len} id {id_len}");
                if let Some(mut block) = stream.one_block() {
                    let mut out = [0u64; 1];
                    block.fill(&[IdTail::new(&id)], &mut out, |_| stream.weight(&id));
                    assert_eq!(out[0], expected, "one block: key {key_len} id {id_len}");
                }
            }
        }
    }

    #[test]
    fn one_block_batches_mix_short_and_long_ids() {
        let key = b"0123456789abcdef";
        let stream = KeyStream::new(key);
        let mut block = stream.one_block().expect("a 16-byte key fits");
        let ids: Vec<Vec<u8>> = (0..BATCH)
            .map(|i| if i % 3 == 0 { vec![b'x'; 40 + i] } else { format!("replica-{i:04}").into_bytes() })
            .collect();
        let tails: Vec<IdTail> = ids.iter().map(|id| IdTail::new(id)).collect();
        assert!(tails.iter().any(|t| block.fits(t)) && tails.iter().any(|t| !block.fits(t)));
        let mut out = [0u64; BATCH];
        block.fill(&tails, &mut out, |k| stream.weight(&ids[k]));
        for (id, weight) in ids.iter().zip(out) {
            assert_eq!(weight, reference(key, id));
        }
    }

    proptest! {
        #[test]
        fn streaming_matches_sha2(key in proptest::collection::vec(any::<u8>(), 0..200),
                                  id in proptest::collection::vec(any::<u8>(), 0..100)) {
            let expected = reference(&key, &id);
            let stream = KeyStream::new(&key);
            prop_assert_eq!(stream.weight(&id), expected);
            if let Some(mut block) = stream.one_block() {
                let mut out = [0u64; 1];
                block.fill(&[IdTail::new(&id)], &mut out, |_| stream.weight(&id));
                prop_assert_eq!(out[0], expected);
            }
        }
    }
}
