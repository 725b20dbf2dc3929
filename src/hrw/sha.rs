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
mod ni {
    //! The single-block compression with the x86 SHA extensions, several
    //! members interleaved, each block assembled in registers.

    use std::arch::x86_64::*;

    use super::{BLOCK_LEN, INITIAL_STATE, IdTail, OneBlock, TAIL_ID_MAX, fits, le_bytes};

    /// SHA-256's round constants (FIPS 180-4, section 4.2.2).
    #[rustfmt::skip]
    const ROUND_CONSTANTS: [u32; 64] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ];

    /// How many compressions run interleaved: one compression is a chain
    /// of 32 dependent `sha256rnds2` steps, so four independent chains keep
    /// the SHA unit busy where one leaves it mostly idle. (In a
    /// micro-benchmark, five or more gained nothing, and they need more
    /// than the 16 registers the SHA instructions can address.)
    const WAYS: usize = 4;

    /// One block as four message vectors, words byte-swapped to the
    /// big-endian order SHA-256 reads.
    type Message = [__m128i; 4];

    /// The per-lookup part of every block.
    struct Key {
        /// The chaining state in the order the SHA instructions use.
        abef: __m128i,
        cdgh: __m128i,
        /// The key part of the block (the key remainder and the separator,
        /// zeros after) as four vectors, not yet byte-swapped.
        prefix: [__m128i; 4],
        /// Where the id starts in the block.
        pos: usize,
        /// Bytes hashed before the id, for the length field.
        len: u64,
    }

    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn load(bytes: &[u8; 16]) -> __m128i {
        // SAFETY: `bytes` is 16 bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
    }

    /// The chaining state `[a, b, …, h]` in the SHA instructions' order.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn state(words: &[u32; 8]) -> (__m128i, __m128i) {
        let word = |i: usize| words[i] as i32;
        let dcba = _mm_set_epi32(word(3), word(2), word(1), word(0));
        let hgfe = _mm_set_epi32(word(7), word(6), word(5), word(4));
        let cdab = _mm_shuffle_epi32::<0xB1>(dcba);
        let efgh = _mm_shuffle_epi32::<0x1B>(hgfe);
        (_mm_alignr_epi8::<8>(cdab, efgh), _mm_blend_epi16::<0xF0>(efgh, cdab))
    }

    impl Key {
        #[inline]
        #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
        fn from_block(block: &OneBlock) -> Key {
            let (abef, cdgh) = state(&block.state);
            let (prefix, _) = block.prefix.as_chunks::<16>();
            let prefix = [load(&prefix[0]), load(&prefix[1]), load(&prefix[2]), load(&prefix[3])];
            Key { abef, cdgh, prefix, pos: block.pos, len: block.len }
        }

        /// For a key of at most [`TAIL_ID_MAX`] bytes, which with the
        /// separator stays within the first block: its vectors come straight
        /// from the key, with no copy in memory.
        #[inline]
        #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
        fn from_short(key: &[u8]) -> Key {
            debug_assert!(key.len() <= TAIL_ID_MAX);
            let (abef, cdgh) = state(&INITIAL_STATE);
            let mut prefix = [_mm_setzero_si128(); 4];
            for (word, chunk) in prefix.iter_mut().zip(key.chunks(16)) {
                *word = match chunk.first_chunk::<16>() {
                    Some(whole) => load(whole),
                    None => {
                        let value = le_bytes(chunk);
                        _mm_set_epi64x((value >> 64) as i64, value as i64)
                    }
                };
            }
            let pos = key.len() + 1;
            Key { abef, cdgh, prefix, pos, len: pos as u64 }
        }

        /// The block of the member with `tail`, which fits, in registers.
        #[inline]
        #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
        fn message(&self, tail: &IdTail, id_len: u8) -> Message {
            let (window, _) = tail.window(self.pos).as_chunks::<16>();
            let word = |i: usize| _mm_or_si128(self.prefix[i], load(&window[i]));
            // Bytes 56..64 (the upper half of the last vector) are zero in
            // both the prefix and the window; the length goes there,
            // big-endian.
            let bit_len = self.len.wrapping_add(u64::from(id_len)).wrapping_mul(8);
            let last = _mm_insert_epi64::<1>(word(3), bit_len.swap_bytes() as i64);
            let swap = _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203);
            [word(0), word(1), word(2), last].map(|w| _mm_shuffle_epi8(w, swap))
        }
    }

    /// Four rounds of `M` interleaved compressions.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn rounds4<const M: usize>(r: usize, abef: &mut [__m128i; M], cdgh: &mut [__m128i; M], w: [__m128i; M]) {
        let (constants, _) = ROUND_CONSTANTS.as_chunks::<4>();
        // SAFETY: `constants[r]` is 16 bytes; the load is unaligned.
        let k = unsafe { _mm_loadu_si128(constants[r].as_ptr().cast()) };
        for m in 0..M {
            let t = _mm_add_epi32(w[m], k);
            cdgh[m] = _mm_sha256rnds2_epu32(cdgh[m], abef[m], t);
            abef[m] = _mm_sha256rnds2_epu32(abef[m], cdgh[m], _mm_shuffle_epi32::<0x0E>(t));
        }
    }

    /// The weights (first 8 digest bytes, big-endian) of `M` members, each
    /// given by its tail and id length: their blocks are built in registers
    /// and their compressions interleaved round by round. (Taking the
    /// members rather than built blocks keeps the arguments small should
    /// this not be inlined.)
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn weigh<const M: usize>(key: &Key, members: [(&IdTail, u8); M]) -> [u64; M] {
        let mut w = [[_mm_setzero_si128(); 4]; M];
        for (block, (tail, id_len)) in w.iter_mut().zip(members) {
            *block = key.message(tail, id_len);
        }
        let mut abef = [key.abef; M];
        let mut cdgh = [key.cdgh; M];
        for r in 0..4 {
            let mut words = [key.abef; M];
            for (word, block) in words.iter_mut().zip(&w) {
                *word = block[r];
            }
            rounds4(r, &mut abef, &mut cdgh, words);
        }
        for r in 4..16 {
            let i = r % 4;
            let mut words = [key.abef; M];
            for m in 0..M {
                // Four message words from W[t-16], W[t-15], W[t-7], W[t-2].
                let t = _mm_sha256msg1_epu32(w[m][i], w[m][(i + 1) % 4]);
                let t = _mm_add_epi32(t, _mm_alignr_epi8::<4>(w[m][(i + 3) % 4], w[m][(i + 2) % 4]));
                w[m][i] = _mm_sha256msg2_epu32(t, w[m][(i + 3) % 4]);
                words[m] = w[m][i];
            }
            rounds4(r, &mut abef, &mut cdgh, words);
        }
        let mut weights = [0u64; M];
        for m in 0..M {
            // ABEF holds A and B in its upper half: the first two digest
            // words, A more significant.
            weights[m] = _mm_extract_epi64::<1>(_mm_add_epi32(abef[m], key.abef)) as u64;
        }
        weights
    }

    /// Members whose blocks are due but not yet compressed: each one's
    /// tail, id length and position.
    struct Pending<'t> {
        members: [(&'t IdTail, u8, usize); WAYS],
        count: usize,
    }

    impl<'t> Pending<'t> {
        fn new(first: &'t IdTail) -> Pending<'t> {
            Pending { members: [(first, 0, 0); WAYS], count: 0 }
        }

        /// Adds a member; once `WAYS` are pending, weighs them and hands
        /// each weight and position to `done`.
        #[inline]
        #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
        fn push(&mut self, key: &Key, member: (&'t IdTail, u8, usize), done: &mut impl FnMut(u64, usize)) {
            self.members[self.count] = member;
            self.count += 1;
            if self.count == WAYS {
                self.flush_first::<WAYS>(key, done);
            }
        }

        /// Weighs whatever is pending.
        #[inline]
        #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
        fn finish(&mut self, key: &Key, done: &mut impl FnMut(u64, usize)) {
            match self.count {
                1 => self.flush_first::<1>(key, done),
                2 => self.flush_first::<2>(key, done),
                3 => self.flush_first::<3>(key, done),
                _ => {}
            }
        }

        #[inline]
        #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
        fn flush_first<const M: usize>(&mut self, key: &Key, done: &mut impl FnMut(u64, usize)) {
            let mut members = [(self.members[0].0, 0u8); M];
            for (slot, &(tail, id_len, _)) in members.iter_mut().zip(&self.members) {
                *slot = (tail, id_len);
            }
            for (weight, &(_, _, at)) in weigh(key, members).iter().zip(&self.members) {
                done(*weight, at);
            }
            self.count = 0;
        }
    }

    /// [`OneBlock::fill`] with the SHA extensions.
    ///
    /// # Safety
    /// The CPU must support SHA, SSE2, SSSE3 and SSE4.1.
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn fill(
        block: &OneBlock,
        tails: &[IdTail],
        out: &mut [u64],
        mut general: impl FnMut(usize) -> u64,
    ) {
        debug_assert!(block.pos <= BLOCK_LEN);
        let Some(first) = tails.first() else {
            return;
        };
        let key = Key::from_block(block);
        let mut pending = Pending::new(first);
        let mut done = |weight: u64, at: usize| out[at] = weight;
        for (k, tail) in tails.iter().enumerate() {
            match tail.id_len.filter(|_| fits(key.pos, tail)) {
                Some(id_len) => pending.push(&key, (tail, id_len, k), &mut done),
                None => done(general(k), k),
            }
        }
        pending.finish(&key, &mut done);
    }

    /// The position of the heaviest member (ties to the lower position) for
    /// a key of at most [`TAIL_ID_MAX`] bytes; `general` weighs members
    /// whose ids do not fit in one block.
    ///
    /// # Safety
    /// The CPU must support SHA, SSE2, SSSE3 and SSE4.1.
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn owner(key: &[u8], tails: &[IdTail], mut general: impl FnMut(usize) -> u64) -> Option<usize> {
        let first = tails.first()?;
        let key = Key::from_short(key);
        let mut pending = Pending::new(first);
        let mut best: Option<(u64, usize)> = None;
        // Positions arrive out of order (a long id is weighed before the
        // pending blocks before it), so ties compare positions.
        let mut done = |weight: u64, at: usize| {
            if best.is_none_or(|(w, i)| weight > w || (weight == w && at < i)) {
                best = Some((weight, at));
            }
        };
        for (at, tail) in tails.iter().enumerate() {
            match tail.id_len.filter(|_| fits(key.pos, tail)) {
                Some(id_len) => pending.push(&key, (tail, id_len, at), &mut done),
                None => done(general(at), at),
            }
        }
        pending.finish(&key, &mut done);
        best.map(|(_, at)| at)
    }
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

    /// The single-block paths this CPU runs: the SHA-NI one where
    /// available (the default), and always the portable one.
    fn one_blocks(stream: &KeyStream) -> Vec<OneBlock> {
        let (Some(default), Some(other)) = (stream.one_block(), stream.one_block()) else {
            return Vec::new();
        };
        vec![default, other.portable()]
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
                for mut block in one_blocks(&stream) {
                    let mut out = [0u64; 1];
                    block.fill(&[IdTail::new(&id)], &mut out, |_| stream.weight(&id));
                    assert_eq!(out[0], expected, "one block (SHA-NI {}): key {key_len} id {id_len}", block.sha_ni);
                }
            }
        }
    }

    #[test]
    fn one_block_batches_mix_short_and_long_ids() {
        let key = b"0123456789abcdef";
        let stream = KeyStream::new(key);
        let ids: Vec<Vec<u8>> = (0..BATCH)
            .map(|i| if i % 3 == 0 { vec![b'x'; 40 + i] } else { format!("replica-{i:04}").into_bytes() })
            .collect();
        let tails: Vec<IdTail> = ids.iter().map(|id| IdTail::new(id)).collect();
        for mut block in one_blocks(&stream) {
            assert!(tails.iter().any(|t| block.fits(t)) && tails.iter().any(|t| !block.fits(t)));
            let mut out = [0u64; BATCH];
            block.fill(&tails, &mut out, |k| stream.weight(&ids[k]));
            for (id, weight) in ids.iter().zip(out) {
                assert_eq!(weight, reference(key, id), "SHA-NI {}", block.sha_ni);
            }
        }
    }

    #[test]
    fn every_batch_size_and_pattern_of_long_ids_matches_sha2() {
        // The SHA-NI path compresses fitting members four at a time and
        // weighs the others in between: every batch size and every pattern
        // of the first eight members being too long must keep the order.
        let ids: Vec<Vec<u8>> = (0..BATCH).map(|i| format!("member-{i:02}").into_bytes()).collect();
        let long: Vec<Vec<u8>> = (0..BATCH).map(|i| vec![b'L'; 50 + i]).collect();
        for key in [&b""[..], b"k", b"0123456789abcdef", &[b'z'; 40][..]] {
            let stream = KeyStream::new(key);
            for size in 1..=BATCH {
                for pattern in 0..1u32 << size.min(8) {
                    let chosen: Vec<&Vec<u8>> =
                        (0..size).map(|i| if i < 8 && pattern & (1 << i) != 0 { &long[i] } else { &ids[i] }).collect();
                    let tails: Vec<IdTail> = chosen.iter().map(|id| IdTail::new(id)).collect();
                    for mut block in one_blocks(&stream) {
                        let mut out = vec![0u64; size];
                        block.fill(&tails, &mut out, |k| stream.weight(chosen[k]));
                        for (id, weight) in chosen.iter().zip(&out) {
                            assert_eq!(*weight, reference(key, id), "size {size} pattern {pattern:#x}");
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn streaming_matches_sha2(key in proptest::collection::vec(any::<u8>(), 0..200),
                                  id in proptest::collection::vec(any::<u8>(), 0..100)) {
            let expected = reference(&key, &id);
            let stream = KeyStream::new(&key);
            prop_assert_eq!(stream.weight(&id), expected);
            for mut block in one_blocks(&stream) {
                let mut out = [0u64; 1];
                block.fill(&[IdTail::new(&id)], &mut out, |_| stream.weight(&id));
                prop_assert_eq!(out[0], expected);
            }
        }

        #[test]
        fn batches_match_sha2(key in proptest::collection::vec(any::<u8>(), 0..70),
                              ids in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 1..=BATCH)) {
            let stream = KeyStream::new(&key);
            let tails: Vec<IdTail> = ids.iter().map(|id| IdTail::new(id)).collect();
            for mut block in one_blocks(&stream) {
                let mut out = vec![0u64; ids.len()];
                block.fill(&tails, &mut out, |k| stream.weight(&ids[k]));
                for (id, weight) in ids.iter().zip(&out) {
                    prop_assert_eq!(*weight, reference(&key, id));
                }
            }
        }
    }
}
