//! The Go-compatible weight: the first 8 bytes, big-endian, of
//! SHA-256(key ‖ 0x00 ‖ id).
//!
//! A lookup hashes the same key against every member, so the key's share of
//! the work is done once: [`KeyStream`] absorbs the key and the separator,
//! compressing any full 64-byte blocks of a long key, and each member only
//! adds its id and the padding. When the rest of the key, the separator, the
//! id and the 9 bytes of padding fit in one block, [`OneBlock`] assembles that
//! block from a per-lookup key prefix and a per-member [`IdTail`] built once
//! by the member set.
//!
//! On x86-64 CPUs with the SHA extensions, [`OneBlock`] (and [`owner`], the
//! owner scan for a short key) builds each block in registers, straight from
//! the key and a per-member window of the id, and runs the compression
//! itself, four members interleaved: one compression is a chain of 32
//! dependent `sha256rnds2` steps, so a single chain leaves the SHA unit
//! mostly idle, while four independent chains keep it busy (in a
//! micro-benchmark on the benchmark machine, four at a time cost less than
//! half as much per member as one at a time). Elsewhere it calls the raw
//! compression function of the `sha2` crate.

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

/// Writes at most 16 bytes, zero-extended, to `out` with one 16-byte store.
#[inline]
fn store16(out: &mut [u8; 16], bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_set_epi64x, _mm_storeu_si128};
        let word = match bytes.first_chunk::<16>() {
            // SAFETY: the chunk is 16 bytes; the load is unaligned.
            Some(whole) => unsafe { _mm_loadu_si128(whole.as_ptr().cast::<__m128i>()) },
            None => {
                let value = le_bytes(bytes);
                // SAFETY: SSE2 is part of the x86-64 baseline.
                unsafe { _mm_set_epi64x((value >> 64) as i64, value as i64) }
            }
        };
        // SAFETY: `out` is 16 bytes; the store is unaligned.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast::<__m128i>(), word) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        *out = le_bytes(bytes).to_le_bytes();
    }
}

/// The little-endian value of at most 16 bytes, from fixed-size reads only.
#[inline]
fn le_bytes(bytes: &[u8]) -> u128 {
    if let Some(whole) = bytes.first_chunk::<16>() {
        return u128::from_le_bytes(*whole);
    }
    let mut value = 0u128;
    let mut shift = 0;
    let mut rest = bytes;
    if let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        value |= u128::from(u64::from_le_bytes(*chunk));
        shift += 64;
        rest = tail;
    }
    if let Some((chunk, tail)) = rest.split_first_chunk::<4>() {
        value |= u128::from(u32::from_le_bytes(*chunk)) << shift;
        shift += 32;
        rest = tail;
    }
    if let Some((chunk, tail)) = rest.split_first_chunk::<2>() {
        value |= u128::from(u16::from_le_bytes(*chunk)) << shift;
        shift += 16;
        rest = tail;
    }
    if let Some(&byte) = rest.first() {
        value |= u128::from(byte) << shift;
    }
    value
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
        if key.len() < BLOCK_LEN - 1 {
            // The common short key: the key and the separator leave the
            // first block open, so no compression is due. The block is
            // assembled from 16-byte words built with fixed-size loads and
            // stored whole: a variable-length copy would store it in pieces
            // that the later 16-byte loads could not be forwarded from.
            let mut block = [0u8; BLOCK_LEN];
            let (words, _) = block.as_chunks_mut::<16>();
            for (out, chunk) in words.iter_mut().zip(key.chunks(16)) {
                store16(out, chunk);
            }
            let pos = key.len() + 1;
            return Self { stream: Sha256Stream { state: INITIAL_STATE, block, pos, len: pos as u64 } };
        }
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
        let prefix = if self.stream.len == self.stream.pos as u64 {
            // Nothing was compressed, so the block is still zero after
            // `pos`: a whole-block copy needs no variable-length move.
            self.stream.block
        } else {
            let mut prefix = [0u8; BLOCK_LEN];
            prefix[..self.stream.pos].copy_from_slice(&self.stream.block[..self.stream.pos]);
            prefix
        };
        Some(OneBlock {
            prefix,
            state: self.stream.state,
            pos: self.stream.pos,
            len: self.stream.len,
            sha_ni: sha_ni_available(),
        })
    }
}

/// Where the id starts in an [`IdTail`]'s bytes.
const TAIL_AT: usize = BLOCK_LEN;

/// A member id followed by the `0x80` padding byte and zeros, built once per
/// member. A block-sized run of zeros comes first, so for a key part of
/// `pos` bytes the 64 bytes from `TAIL_AT - pos` are the block's member part
/// already in place: zeros where the key goes, then the id and its padding.
/// The SHA-NI path loads that window straight into registers; the portable
/// path copies the tail after the key prefix with one fixed-size move.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdTail {
    bytes: [u8; 2 * BLOCK_LEN],
    /// The id's length, or `None` when the id is too long for one block.
    id_len: Option<u8>,
}

impl IdTail {
    pub(crate) fn new(id: &[u8]) -> Self {
        let mut bytes = [0u8; 2 * BLOCK_LEN];
        let id_len = if id.len() <= TAIL_ID_MAX {
            bytes[TAIL_AT..TAIL_AT + id.len()].copy_from_slice(id);
            bytes[TAIL_AT + id.len()] = 0x80;
            u8::try_from(id.len()).ok()
        } else {
            None
        };
        Self { bytes, id_len }
    }

    /// The id, the `0x80` byte and zeros, as many bytes as precede the
    /// length field in a block.
    #[inline]
    fn tail(&self) -> &[u8; LENGTH_AT] {
        self.bytes[TAIL_AT..].first_chunk().unwrap_or(&[0; LENGTH_AT])
    }

    /// The member part of a block whose key part takes `pos` bytes.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn window(&self, pos: usize) -> &[u8; BLOCK_LEN] {
        self.bytes[TAIL_AT - pos..].first_chunk().unwrap_or(&[0; BLOCK_LEN])
    }
}

/// The per-lookup state for the single-block path.
///
/// With the SHA extensions, blocks are built in registers (see the module
/// documentation). Otherwise a batch of blocks is built in memory before any
/// is compressed: building a block takes several overlapping stores, and had
/// the compression read it right away, its loads would wait for those
/// stores to drain instead of being forwarded, which costs about a third of
/// a compression per member.
pub(crate) struct OneBlock {
    /// The key remainder and the separator, zeros after.
    prefix: [u8; BLOCK_LEN],
    state: [u32; 8],
    /// Where the id starts: the key remainder plus the separator.
    pos: usize,
    /// Bytes of key and separator, for the length field.
    len: u64,
    /// Whether the CPU has the SHA extensions, detected per lookup (the
    /// standard library caches the answer).
    sha_ni: bool,
}

impl OneBlock {
    /// Whether a member with this tail fits in one block with this key.
    #[inline]
    fn fits(&self, tail: &IdTail) -> bool {
        fits(self.pos, tail)
    }

    /// The bit length of the message for an id of `id_len` bytes.
    #[inline]
    fn bit_len(&self, id_len: u8) -> u64 {
        self.len.wrapping_add(u64::from(id_len)).wrapping_mul(8)
    }

    /// The same lookup state without the SHA-NI path; for tests.
    #[cfg(test)]
    pub(crate) fn portable(self) -> Self {
        Self { sha_ni: false, ..self }
    }

    /// Writes the weights of the members with `tails` (at most [`BATCH`])
    /// into `out`; members whose ids do not fit are weighed by `general`,
    /// given their position in `tails`.
    pub(crate) fn fill(&mut self, tails: &[IdTail], out: &mut [u64], general: impl FnMut(usize) -> u64) {
        let count = tails.len().min(out.len()).min(BATCH);
        #[cfg(target_arch = "x86_64")]
        if self.sha_ni {
            // SAFETY: `sha_ni` is only set after `sha_ni_available()`
            // returned true.
            unsafe { ni::fill(self, &tails[..count], &mut out[..count], general) };
            return;
        }
        self.fill_portable(&tails[..count], &mut out[..count], general);
    }

    /// [`OneBlock::fill`] by the `sha2` crate's compression function.
    fn fill_portable(&self, tails: &[IdTail], out: &mut [u64], mut general: impl FnMut(usize) -> u64) {
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
                flat[start..start + LENGTH_AT].copy_from_slice(tail.tail());
                flat[at + LENGTH_AT..at + BLOCK_LEN].copy_from_slice(&self.bit_len(id_len).to_be_bytes());
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

/// The position of the heaviest member among `tails` (ties to the lower
/// position) by the SHA-NI path for a short key, or `None` when that path
/// does not apply (no SHA extensions, or a key longer than
/// [`TAIL_ID_MAX`]). `general` weighs a member whose id does not fit in one
/// block, given its position.
///
/// This is the Go-compatible owner scan without the general per-batch
/// machinery: the key goes straight into registers, and every block is
/// built there.
#[inline]
pub(crate) fn owner(key: &[u8], tails: &[IdTail], general: impl FnMut(usize) -> u64) -> Option<Option<usize>> {
    #[cfg(target_arch = "x86_64")]
    if key.len() <= TAIL_ID_MAX && sha_ni_available() {
        // SAFETY: the features were just detected.
        return Some(unsafe { ni::owner(key, tails, general) });
    }
    let _ = (key, tails, general);
    None
}

/// Whether [`OneBlock`] may use its SHA-NI path on this CPU.
#[inline]
fn sha_ni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sha")
            && std::arch::is_x86_feature_detected!("sse4.1")
            && std::arch::is_x86_feature_detected!("ssse3")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod ni;

/// The Go `ha` package's weight of `id` for `key`.
#[cfg(test)]
pub(crate) fn weight(key: &[u8], id: &[u8]) -> u64 {
    KeyStream::new(key).weight(id)
}

#[cfg(test)]
mod tests;
