//! The story every store must tell, told once over a [`Store`] and run on
//! each real emulator by `gcs.rs` and `azure.rs`: both conformance suites
//! with their races, a wrapper that drops the conditions failing them, the
//! startup verification, an elector's takeover after its leader is killed,
//! and three keyed members sharing a thousand keys through a leave and a
//! kill.

#![allow(clippy::disallowed_methods)] // Tests measure real time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hoplock::backend::{BackendError, ObjectBackend, StoredObject, Version};
use hoplock::entropy::{Entropy, OsEntropy};
use hoplock::store::Store;
use hoplock::testing::conformance;
use hoplock::{Elector, Generation};

/// A key no other test uses.
pub fn unique_key(prefix: &str) -> String {
    format!("it/{prefix}-{:016x}.json", OsEntropy.next_u64())
}

/// Both conformance suites, races included, the corrupt record planted
/// without a condition.
pub async fn conformance_suites_pass(store: Store) {
    let plant = store.clone();
    conformance::run_all(&store, move |bytes| async move {
        plant.put_raw(bytes).await.map(|_| ()).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
    let objects = store.with_key(unique_key("objects"));
    conformance::run_objects(&objects).await.unwrap_or_else(|failure| panic!("{failure}"));
}

/// Both suites' checks on a store whose emulator ignores the condition of
/// a delete: every check passes but the one step that deletes at a
/// replaced version, which must fail exactly there (after its writes at a
/// replaced version were refused).
pub async fn conformance_suites_pass_but_the_conditional_delete(store: Store) {
    let check = |result: Result<(), conformance::Failure>| result.unwrap_or_else(|failure| panic!("{failure}"));
    check(conformance::create_race_has_one_winner(&store).await);
    check(conformance::update_race_has_one_winner(&store).await);
    let gap = conformance::stale_version_is_rejected(&store).await.expect_err("the emulator now honours deletes");
    assert_eq!(gap.detail, "a delete against a replaced version must be LeaseHeld, got Ok(())", "{gap}");
    check(conformance::every_write_changes_the_version(&store).await);
    check(conformance::delete_rules(&store).await);
    let plant = store.clone();
    check(
        conformance::corrupt_record_is_reported(&store, move |bytes| async move {
            plant.put_raw(bytes).await.map(|_| ()).map_err(|e| e.to_string())
        })
        .await,
    );
    let objects = store.with_key(unique_key("objects"));
    check(conformance::object_bodies_come_back_whole(&objects).await);
    check(conformance::object_race_leaves_one_whole_body(&objects).await);
}

/// The store with its conditions dropped: every write is stored as sent,
/// as a provider that ignores preconditions does.
struct DropsConditions(Store);

impl ObjectBackend for DropsConditions {
    async fn read_object(&self) -> Result<StoredObject, BackendError> {
        self.0.read_object().await
    }

    async fn write_object(&self, _expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        self.0.put_raw(bytes).await
    }

    async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
        self.0.delete_object(expected).await
    }
}

/// The suites can fail on this store: with the conditions dropped, racing
/// creates all win.
pub async fn suites_fail_when_conditions_are_dropped(store: Store) {
    let broken = DropsConditions(store.with_key(unique_key("dropped")));
    let failure = conformance::run_objects(&broken).await.expect_err("a store without conditions must fail");
    assert_eq!(failure.check, "create_race_has_one_winner", "{failure}");
    let failure =
        conformance::object_race_leaves_one_whole_body(&DropsConditions(store.with_key(unique_key("dropped"))))
            .await
            .expect_err("racing writes without conditions must not have one winner");
    assert!(failure.detail.starts_with("8 of 8"), "{failure}");
}

/// The checks `hoplock run` makes before it campaigns pass, and again on
/// the probe they left.
pub async fn verification_passes(store: Store) {
    let first = store.verify().await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(first.probe_key, format!("{}{}", store.key(), hoplock::store::PROBE_SUFFIX));
    assert_eq!(first.checks.len(), 4, "{first:?}");
    assert_eq!(store.verify().await.unwrap().checks.len(), 4);
}

/// A store that stops answering when its process is killed.
#[derive(Clone)]
struct Killable {
    store: Store,
    dead: Arc<AtomicBool>,
}

impl Killable {
    async fn call<T>(&self, op: impl std::future::Future<Output = Result<T, BackendError>>) -> Result<T, BackendError> {
        if self.dead.load(Ordering::Relaxed) {
            return std::future::pending().await;
        }
        op.await
    }
}

impl ObjectBackend for Killable {
    async fn read_object(&self) -> Result<StoredObject, BackendError> {
        self.call(self.store.read_object()).await
    }

    async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        self.call(self.store.write_object(expected, bytes)).await
    }

    async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
        self.call(self.store.delete_object(expected)).await
    }
}

const TTL: Duration = Duration::from_secs(3);

/// Three electors; the leader is killed (it sends nothing more and never
/// releases). Another takes over within the TTL and a few round trips, at
/// a higher generation, and never while the killed one still believed it
/// led.
pub async fn takeover_after_kill(store: Store) {
    let store = store.with_key(unique_key("takeover"));
    let killables: Vec<Killable> =
        (0..3).map(|_| Killable { store: store.clone(), dead: Arc::new(AtomicBool::new(false)) }).collect();
    let electors: Vec<_> = killables
        .iter()
        .enumerate()
        .map(|(i, killable)| Elector::builder(killable.clone()).owner(format!("node-{i}")).ttl(TTL).build().unwrap())
        .collect();
    let streams: Vec<_> = electors.iter().map(|elector| elector.run()).collect();
    let leader = wait_for_leader(&electors, &[]).await;
    let first = electors[leader].current_generation().unwrap();
    killables[leader].dead.store(true, Ordering::Relaxed);
    let killed_at = tokio::time::Instant::now();
    let next = wait_for_leader(&electors, &[leader]).await;
    let taken = tokio::time::Instant::now() - killed_at;
    let second = electors[next].current_generation().unwrap();
    assert_ne!(next, leader);
    assert!(second > first, "the new leader's generation {second} is not above the killed one's {first}");
    assert!(!electors[leader].is_leader(), "the killed leader still believes it leads");
    assert!(taken <= TTL * 3, "the takeover took {taken:?}");
    eprintln!("takeover after a kill: generation {} -> {} in {taken:?}", first.get(), second.get());
    drop(streams);
    assert!(second > Generation(1));
}

/// Waits for exactly one leader among `electors` other than `skip`, checking
/// that never two lead at once.
async fn wait_for_leader(electors: &[Elector<Killable>], skip: &[usize]) -> usize {
    let started = tokio::time::Instant::now();
    loop {
        let leaders: Vec<usize> = (0..electors.len()).filter(|&i| electors[i].is_leader()).collect();
        assert!(leaders.len() <= 1, "{leaders:?} all lead");
        if let [leader] = leaders[..]
            && !skip.contains(&leader)
        {
            return leader;
        }
        assert!(started.elapsed() < TTL * 4, "nobody took the lease");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Three keyed members share a thousand keys through a leave and a kill.
pub async fn keyed_members_share_a_thousand_keys(store: Store) {
    crate::keyed::join_leave_and_kill(store.with_key(unique_key("members")), 1_000, TTL).await;
}

/// The tests every store runs the same way, on the store `$open` gives
/// (`None` when its emulator is not there and the tests skip).
macro_rules! the_shared_story {
    ($open:expr) => {
        #[tokio::test]
        async fn the_suites_fail_when_the_conditions_are_dropped() {
            let Some(store) = $open else { return };
            crate::stores::suites_fail_when_conditions_are_dropped(store).await;
        }

        #[tokio::test]
        async fn verification_passes() {
            let Some(store) = $open else { return };
            crate::stores::verification_passes(store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn another_elector_takes_over_after_the_leader_is_killed() {
            let Some(store) = $open else { return };
            crate::stores::takeover_after_kill(store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn keyed_members_share_a_thousand_keys_through_a_leave_and_a_kill() {
            let Some(store) = $open else { return };
            crate::stores::keyed_members_share_a_thousand_keys(store).await;
        }
    };
}
