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
pub(super) unsafe fn fill(block: &OneBlock, tails: &[IdTail], out: &mut [u64], mut general: impl FnMut(usize) -> u64) {
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
