//! HRW lookups on a prepared set allocate nothing.
//!
//! This is its own test binary because it installs a counting global
//! allocator, which would otherwise count for every test in the binary. The
//! count is per thread, so the test harness's own threads do not disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::num::NonZeroU32;

use hoplock::hrw::{self, Member, MemberSet, Options, Simd, WeightFn};

struct CountingAllocator;

thread_local! {
    // A `const` initialiser with a `Copy` type needs no lazy registration,
    // so touching it from inside the allocator cannot recurse.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter only observes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[test]
fn lookups_on_a_prepared_set_do_not_allocate() {
    let members: Vec<Member> = (0..1000).map(|i| Member::new(format!("replica-{i:04}"), "")).collect();
    let capacity = NonZeroU32::new(2).unwrap();
    let mut sets = Vec::new();
    for weight_fn in [WeightFn::Fast, WeightFn::GoSha256] {
        for simd in [Simd::Auto, Simd::Off] {
            let options = Options { weight_fn, simd };
            sets.push(MemberSet::with_options(members.clone(), options));
            sets.push(MemberSet::weighted(members.iter().cloned().map(|m| (m, capacity)), options));
        }
    }
    // Keys of every interesting length for SHA-256: one block, two blocks,
    // and longer than a block.
    let keys: Vec<String> = [0usize, 16, 40, 54, 60, 64, 100, 300]
        .iter()
        .flat_map(|len| (0..4).map(move |i| format!("{i}{}", "k".repeat(*len))))
        .collect();
    let mut buffer: Vec<&Member> = Vec::with_capacity(8);
    let mut free_buffer: Vec<&Member> = Vec::with_capacity(8);
    let mut owners = 0usize;

    let before = allocations();
    for set in &sets {
        for key in &keys {
            let owner = set.owner(key);
            owners += usize::from(owner.is_some());
            owners += usize::from(set.is_owner(key, "replica-0007"));
            set.replicas_into(key, 3, &mut buffer);
            set.replicas_into(key, 8, &mut buffer);
        }
    }
    for weight_fn in [WeightFn::Fast, WeightFn::GoSha256] {
        for key in &keys {
            owners += usize::from(weight_fn.owner(key, &members).is_some());
            owners += usize::from(weight_fn.is_owner(key, "replica-0007", &members));
            weight_fn.replicas_into(key, &members, 3, &mut free_buffer);
        }
    }
    hrw::replicas_into("k", &members, 3, &mut free_buffer);
    let during = allocations() - before;

    assert!(owners > 0);
    assert_eq!(during, 0, "lookups allocated {during} times");
    // The counter works: a `Vec` with room counts.
    let probe: Vec<u8> = Vec::with_capacity(1);
    drop(probe);
    assert!(allocations() > before);
}
