//! Keyed writers sharing keys out over one membership object: the same
//! story (three members join, one leaves gracefully, one is killed) runs
//! over the in-memory store on tokio's paused clock here, and over a real S3
//! server in `s3.rs`.
//!
//! The members' own logs, kept by their work, are the evidence: every key's
//! acting intervals must never overlap, and keys must end up with their HRW
//! owners over the surviving members, at higher rounds than before.

#![allow(clippy::disallowed_methods)] // The logs are timed on tokio's clock, shared by every member.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hoplock::backend::ObjectBackend;
use hoplock::backend::memory::MemoryBackend;
use hoplock::hrw::{Leases, Member, MemberSet, Membership, Round};
use hoplock::keyed::{KeyedError, KeyedHandle, KeyedWriter, Leaver};
use hoplock_testkit::acting::ActingLog;
use tokio::task::JoinHandle;
use tokio::time::Instant;

struct Running {
    handle: KeyedHandle,
    leaver: Leaver,
    task: JoinHandle<Result<(), KeyedError>>,
}

fn start<O: ObjectBackend>(store: O, id: &str, keys: &[String], ttl: Duration, log: &ActingLog) -> Running {
    let writer = KeyedWriter::builder(store).id(id).keys(keys.iter().cloned()).ttl(ttl).create_at(1).build().unwrap();
    let (handle, leaver) = (writer.handle(), writer.leaver());
    let (log, member) = (log.clone(), id.to_owned());
    let task = tokio::spawn(async move {
        writer
            .run(move |ctx| {
                let stop = log.start(&member, &ctx);
                async move {
                    ctx.cancelled().await;
                    drop(stop);
                }
            })
            .await
    });
    Running { handle, leaver, task }
}

/// Waits until every key is held by exactly its HRW owner over `members`.
async fn settle(
    log: &ActingLog,
    keys: &[String],
    members: &[&str],
    within: Duration,
) -> BTreeMap<String, (String, Round)> {
    let set = MemberSet::new(members.iter().map(|id| Member::new(*id, "")));
    let deadline = Instant::now() + within;
    loop {
        let holders = log.holders();
        let settled = keys
            .iter()
            .all(|k| holders.get(k).is_some_and(|(m, _)| Some(m.as_str()) == set.owner(k).map(|o| o.id.as_str())));
        if settled {
            return holders;
        }
        assert!(Instant::now() < deadline, "keys did not settle on {members:?} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three members share `keys`; `b` leaves gracefully, `c` is killed. Keys
/// move to their new HRW owners at higher rounds, and no key ever has two
/// writers.
pub async fn join_leave_and_kill<O: ObjectBackend + Clone>(store: O, key_count: usize, ttl: Duration) {
    let keys: Vec<String> = (0..key_count).map(|i| format!("key-{i:05}")).collect();
    let log = ActingLog::default();
    let a = start(store.clone(), "a", &keys, ttl, &log);
    let b = start(store.clone(), "b", &keys, ttl, &log);
    let c = start(store.clone(), "c", &keys, ttl, &log);
    let first = settle(&log, &keys, &["a", "b", "c"], ttl * 10).await;
    for running in [&a, &b, &c] {
        let id = running.handle.self_id().to_owned();
        let members = running.handle.members().await.unwrap();
        assert_eq!(members.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"], "{id}'s view");
        let owned = first.iter().find(|(_, (m, _))| *m == id).map(|(k, _)| k.clone()).unwrap();
        let lease = running.handle.acquire(&owned).await.unwrap();
        assert_eq!((lease.owner.as_str(), lease.round), (id.as_str(), first[&owned].1));
    }

    b.leaver.leave();
    b.task.await.unwrap().unwrap();
    let after_leave = settle(&log, &keys, &["a", "c"], ttl * 4).await;
    assert!(b.handle.snapshot().running.is_empty());
    assert!(b.handle.members().await.is_err(), "a member that left holds no term");

    c.task.abort();
    let _ = c.task.await;
    let last = settle(&log, &keys, &["a"], ttl * 6).await;

    for key in &keys {
        let (before, after) = (&first[key], &after_leave[key]);
        if before.0 != after.0 {
            assert_eq!(before.0, "b", "{key} moved on b's leave although b did not hold it");
            assert!(after.1 > before.1, "{key}: round {} after the leave, {} before", after.1, before.1);
        } else {
            assert_eq!(before.1, after.1, "{key} stayed with {} and keeps its round", before.0);
        }
        if after.0 == "c" {
            assert!(last[key].1 > after.1, "{key}: round {} after the kill, {} before", last[key].1, after.1);
        }
    }
    assert_eq!(log.incarnations("a").len(), 1, "a never lost its entry");
    let problems = log.problems();
    assert!(problems.is_empty(), "{problems:?}");
    a.leaver.leave();
    a.task.await.unwrap().unwrap();
    let problems = log.problems();
    assert!(problems.is_empty(), "{problems:?}");
}

#[tokio::test(start_paused = true)]
async fn three_members_share_keys_and_hand_them_on() {
    join_leave_and_kill(MemoryBackend::new(), 300, Duration::from_secs(3)).await;
}

#[tokio::test(start_paused = true)]
async fn a_configuration_that_cannot_renew_in_time_is_refused() {
    let error = KeyedWriter::builder(MemoryBackend::new())
        .id("a")
        .ttl(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(3))
        .build()
        .err()
        .unwrap();
    assert!(matches!(error, KeyedError::Config(ref m) if m.contains("must be less than")), "{error}");
    let error = KeyedWriter::builder(MemoryBackend::new()).build().err().unwrap();
    assert!(matches!(error, KeyedError::Config(ref m) if m.contains("needs an id")), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_corrupt_object_is_never_acted_on_or_overwritten() {
    let store = MemoryBackend::new();
    store.put_raw(b"{\"generation\":3}".to_vec());
    let log = ActingLog::default();
    let keys = vec!["k".to_owned()];
    let a = start(store.clone(), "a", &keys, Duration::from_secs(3), &log);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(log.holders().is_empty());
    assert!(a.handle.members().await.is_err());
    assert_eq!(store.raw().unwrap(), b"{\"generation\":3}", "nothing overwrote what it could not read");
    a.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_member_not_told_a_view_to_create_at_waits_for_the_object() {
    let store = MemoryBackend::new();
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let waiting =
        KeyedWriter::builder(store.clone()).id("b").keys(keys.clone()).ttl(Duration::from_secs(3)).build().unwrap();
    let handle = waiting.handle();
    let task = tokio::spawn(async move { waiting.run(|ctx| async move { ctx.cancelled().await }).await });
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(store.raw().is_none(), "a member without create_at never creates the membership object");
    assert_eq!(handle.snapshot().view, None);
    assert!(handle.snapshot().running.is_empty(), "it acts for no key while the object is missing");
    // A process told to create it, above the views a downstream saw, does;
    // the waiting member then joins, and both act.
    let creator = KeyedWriter::builder(store.clone())
        .id("a")
        .keys(keys)
        .ttl(Duration::from_secs(3))
        .create_at(700)
        .build()
        .unwrap();
    let creator_handle = creator.handle();
    let creator_task = tokio::spawn(async move { creator.run(|ctx| async move { ctx.cancelled().await }).await });
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (a, b) = (creator_handle.snapshot(), handle.snapshot());
    assert!(a.view.is_some_and(|view| view > 700), "{a:?}");
    assert_eq!(a.running.len() + b.running.len(), 10, "{a:?} {b:?}");
    assert!(a.running.values().chain(b.running.values()).all(|round| round.get() >= 700));
    task.abort();
    creator_task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_member_of_a_different_weight_function_is_refused() {
    let store = MemoryBackend::new();
    let log = ActingLog::default();
    let keys = vec!["k".to_owned()];
    let a = start(store.clone(), "a", &keys, Duration::from_secs(3), &log);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let other = KeyedWriter::builder(store.clone())
        .id("b")
        .weight_fn(hoplock::hrw::WeightFn::GoSha256)
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let error = other.run(|_ctx| async {}).await.unwrap_err();
    assert!(matches!(error, KeyedError::Config(ref m) if m.contains("GoSha256")), "{error}");
    a.task.abort();
}

/// Records, when dropped, whether the member's entry was still in the
/// object: work must be gone before the entry is.
struct EntryWitness {
    store: MemoryBackend,
    seen: Arc<Mutex<Option<bool>>>,
}

impl Drop for EntryWitness {
    fn drop(&mut self) {
        let raw = self.store.raw().unwrap_or_default();
        let present = String::from_utf8_lossy(&raw).contains("\"id\":\"a\"");
        *self.seen.lock().unwrap() = Some(present);
    }
}

// Real time on several threads: an abort only takes effect between two
// polls, and the work here is in the middle of one most of the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_ignores_its_context_is_gone_before_the_entry_is() {
    let store = MemoryBackend::new();
    let seen = Arc::new(Mutex::new(None));
    let writer = KeyedWriter::builder(store.clone())
        .id("a")
        .keys(["k"])
        .ttl(Duration::from_secs(1))
        .create_at(1)
        .build()
        .unwrap();
    let (handle, leaver) = (writer.handle(), writer.leaver());
    let (witness_store, witness_seen) = (store.clone(), seen.clone());
    let run = tokio::spawn(async move {
        writer
            .run(move |_ctx| {
                let witness = EntryWitness { store: witness_store.clone(), seen: witness_seen.clone() };
                async move {
                    let _witness = witness;
                    // Never looks at its context, and blocks its thread
                    // between yields: only an abort ends it.
                    loop {
                        std::thread::sleep(Duration::from_millis(50));
                        tokio::task::yield_now().await;
                    }
                }
            })
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while handle.snapshot().running.is_empty() {
        assert!(Instant::now() < deadline, "the key never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    leaver.leave();
    run.await.unwrap().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(true), "the work outlived the member's entry");
}

#[test]
fn work_may_look_at_its_member_while_starting() {
    // The member runs on a thread of its own, so that a deadlock fails the
    // test instead of hanging it.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let writer = KeyedWriter::builder(MemoryBackend::new())
                .id("a")
                .keys(["k"])
                .ttl(Duration::from_secs(3))
                .create_at(1)
                .build()
                .unwrap();
            let (handle, leaver) = (writer.handle(), writer.leaver());
            let seen = Arc::new(Mutex::new(0));
            let counted = seen.clone();
            let member = tokio::spawn(async move {
                writer
                    .run(move |ctx| {
                        // A synchronous look at the member from inside `work`.
                        *counted.lock().unwrap() += handle.snapshot().running.len() + 1;
                        async move { ctx.cancelled().await }
                    })
                    .await
            });
            tokio::time::sleep(Duration::from_secs(5)).await;
            leaver.leave();
            member.await.unwrap().unwrap();
            done.send(*seen.lock().unwrap()).unwrap();
        });
    });
    let seen = finished.recv_timeout(Duration::from_secs(60)).expect("the member deadlocked starting its work");
    assert!(seen > 0, "work never started");
}
