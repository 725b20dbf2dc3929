//! The Go-compatible weight against a plain SHA-256 and the Go package's vectors.

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
