//! Unit tests of the elector under tokio's paused time. Each test asserts
//! on generations and on who leads when.

#![allow(clippy::disallowed_methods)] // Tests read tokio's paused time as "real time".

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::Instant as RealInstant;

use super::*;
use crate::backend::memory::MemoryBackend;
use crate::clock::DriftingClock;
use crate::entropy::SeededEntropy;
use crate::testing::faulty::{Fault, FaultControl, Faulty};

const TTL: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(200); // TTL / 15

type Store = Faulty<MemoryBackend>;

/// One elector with its own failure switch over the shared store.
struct Node {
    elector: Elector<Store>,
    control: FaultControl,
}

fn node(store: &MemoryBackend, owner: &str, seed: u64) -> Node {
    node_with(store, owner, seed, |builder| builder)
}

fn node_with(
    store: &MemoryBackend,
    owner: &str,
    seed: u64,
    configure: impl FnOnce(ElectorBuilder<Store>) -> ElectorBuilder<Store>,
) -> Node {
    let backend = Faulty::new(store.clone());
    let control = backend.control();
    let builder = Elector::builder(backend).owner(owner).ttl(TTL).entropy(Arc::new(SeededEntropy::new(seed)));
    Node { elector: configure(builder).build().unwrap(), control }
}

/// One term as the work saw it: owner, generation, start and end.
type TermRecord = (String, Generation, RealInstant, Option<RealInstant>);

/// When a node's leader-only work started and stopped, in real time.
#[derive(Clone, Debug, Default)]
struct Timeline {
    terms: Arc<Mutex<Vec<TermRecord>>>,
}

impl Timeline {
    fn terms(&self) -> Vec<TermRecord> {
        self.terms.lock().unwrap().clone()
    }

    fn first_term_of(&self, owner: &str) -> Option<(Generation, RealInstant, Option<RealInstant>)> {
        self.terms().into_iter().find(|t| t.0 == owner).map(|t| (t.1, t.2, t.3))
    }
}

/// Leads once, holding until cancelled (or for `hold` if set), and records
/// the term. Returns the task.
fn campaign(node: &Node, timeline: &Timeline, hold: Option<Duration>) -> JoinHandle<Option<Term<()>>> {
    let elector = node.elector.clone();
    let timeline = timeline.clone();
    tokio::spawn(async move {
        elector
            .lead(|ctx, lease| async move {
                let index = {
                    let mut terms = timeline.terms.lock().unwrap();
                    terms.push((lease.owner.clone(), lease.generation, RealInstant::now(), None));
                    terms.len() - 1
                };
                match hold {
                    Some(hold) => tokio::select! {
                        _ = ctx.cancelled() => {}
                        _ = tokio::time::sleep(hold) => {}
                    },
                    None => ctx.cancelled().await,
                }
                timeline.terms.lock().unwrap()[index].3 = Some(RealInstant::now());
            })
            .await
            .ok()
    })
}

/// Simulates a crash: the node's store calls hang and its task is gone, so
/// no release is ever written.
fn crash(node: &Node, task: &JoinHandle<Option<Term<()>>>) {
    node.control.set(Fault::Hang);
    task.abort();
}

async fn advance(by: Duration) {
    tokio::time::sleep(by).await;
}

#[tokio::test(start_paused = true)]
async fn a_crashed_leaders_lease_passes_after_the_ttl() {
    let store = MemoryBackend::new();
    let (a, b) = (node(&store, "a", 1), node(&store, "b", 2));
    let timeline = Timeline::default();
    let task_a = campaign(&a, &timeline, None);
    advance(Duration::from_millis(50)).await;
    let task_b = campaign(&b, &timeline, None);
    advance(Duration::from_secs(10)).await;
    assert_eq!(a.elector.current_generation(), Some(Generation(1)));
    assert!(!b.elector.is_leader());

    let last_write = RealInstant::now();
    crash(&a, &task_a);
    advance(Duration::from_secs(10)).await;

    let (generation, started, _) = timeline.first_term_of("b").expect("b took over");
    assert_eq!(generation, Generation(2));
    // b waited out the TTL on its own clock, counted from a read that came
    // after a's last write, and took over within a poll of that.
    let waited = started - (last_write - Duration::from_secs(1)); // a renews every TTL/3 = 1 s
    assert!(waited >= TTL, "took over after {waited:?}");
    assert!(started - last_write <= TTL + POLL * 2, "took over {:?} after the crash", started - last_write);
    task_b.abort();
}

#[tokio::test(start_paused = true)]
async fn a_graceful_release_hands_over_within_one_poll() {
    let store = MemoryBackend::new();
    let (a, b) = (node(&store, "a", 1), node(&store, "b", 2));
    let timeline = Timeline::default();
    let task_a = campaign(&a, &timeline, Some(Duration::from_secs(5)));
    advance(Duration::from_millis(10)).await;
    let task_b = campaign(&b, &timeline, None);
    let term = task_a.await.unwrap().expect("a led");
    assert_eq!(term.end, TermEnd::Released);
    assert_eq!(term.generation, Generation(1));
    advance(POLL * 2).await;

    let (_, _, a_end) = timeline.first_term_of("a").unwrap();
    let (generation, b_start, _) = timeline.first_term_of("b").expect("b took over");
    assert_eq!(generation, Generation(2), "release keeps the generation; the next term is higher");
    let handover = b_start - a_end.unwrap();
    assert!(handover <= POLL, "handover took {handover:?}");
    task_b.abort();
}

#[tokio::test(start_paused = true)]
async fn a_contender_ten_minutes_ahead_does_not_take_over_early() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let ahead = Arc::new(DriftingClock::new(SystemTime::now() + Duration::from_secs(600), 0));
    let b = node_with(&store, "b", 2, |builder| builder.clock(ahead.clone()));
    let timeline = Timeline::default();
    let _task_a = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    let task_b = campaign(&b, &timeline, None);
    advance(Duration::from_secs(60)).await;
    // a's expires_at is ten minutes in b's past the whole time; b must not care.
    assert_eq!(timeline.terms().len(), 1, "{:?}", timeline.terms());
    assert!(a.elector.is_leader() && !b.elector.is_leader());
    task_b.abort();
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_policy_does_take_over_early_from_the_same_start() {
    // The same set-up as above with the seed's policy: the contender trusts
    // the holder's expires_at against its own wall clock and overlaps.
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let ahead = Arc::new(DriftingClock::new(SystemTime::now() + Duration::from_secs(600), 0));
    let b = node_with(&store, "b", 2, |builder| builder.clock(ahead.clone()).policy(Policy::WallClockExpiry));
    let timeline = Timeline::default();
    let _task_a = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    let _task_b = campaign(&b, &timeline, None);
    advance(Duration::from_millis(500)).await;
    let terms = timeline.terms();
    assert_eq!(terms.len(), 2);
    // Both believe they lead right now.
    assert!(a.elector.is_leader() && b.elector.is_leader());
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_time_out_stops_before_its_lease_ends() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let b = node(&store, "b", 2);
    // Stamp each successful write as its event arrives. The memory store
    // answers at once, so that is also when the write was sent.
    let mut events = a.elector.subscribe();
    let renewals = Arc::new(Mutex::new(Vec::new()));
    let stamps = renewals.clone();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if matches!(event, Event::Renewed { .. } | Event::Acquired { .. }) {
                stamps.lock().unwrap().push(RealInstant::now());
            }
        }
    });
    let timeline = Timeline::default();
    let task_a = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    let _task_b = campaign(&b, &timeline, None);
    advance(Duration::from_millis(2500)).await;

    // Renewals from now on never answer.
    a.control.set(Fault::Hang);
    advance(Duration::from_secs(10)).await;
    let renewals = renewals.lock().unwrap().clone();
    assert!(renewals.len() >= 3, "{renewals:?}");
    let last_renewed = *renewals.last().unwrap();

    let term = task_a.await.unwrap().expect("a led");
    assert_eq!(term.end, TermEnd::Lost(LossReason::Expired));
    let (_, _, a_end) = timeline.first_term_of("a").unwrap();
    let a_end = a_end.expect("a's context was cancelled");
    // The context was cancelled TTL·(1−ρ)/(1+ρ) − margin after the last
    // successful renewal was sent, give or take tokio's 1 ms timer
    // resolution (which the margin absorbs).
    let hold_for = a.elector.inner.timing().hold_for();
    let stopped_after = a_end - last_renewed;
    assert!(stopped_after + Duration::from_millis(1) >= hold_for, "a stopped early: {stopped_after:?}");
    assert!(stopped_after <= hold_for + Duration::from_millis(1), "a stopped {stopped_after:?} after its last renewal");
    let (generation, b_start, _) = timeline.first_term_of("b").expect("b took over");
    assert_eq!(generation, Generation(2));
    assert!(b_start > a_end, "b started {:?} before a stopped", a_end - b_start);
}

#[tokio::test(start_paused = true)]
async fn a_restarted_node_gets_a_new_generation() {
    let store = MemoryBackend::new();
    let first = node(&store, "a", 1);
    let timeline = Timeline::default();
    let task = campaign(&first, &timeline, None);
    advance(Duration::from_secs(2)).await;
    crash(&first, &task);
    let crashed_at = RealInstant::now();

    // Same owner name, new process: a new incarnation.
    let second = node(&store, "a", 99);
    assert_ne!(first.elector.incarnation(), second.elector.incarnation());
    let _task = campaign(&second, &timeline, None);
    advance(Duration::from_secs(10)).await;
    let terms = timeline.terms();
    assert_eq!(terms.len(), 2);
    assert_eq!(terms[1].1, Generation(2));
    // It did not inherit the old term: it waited it out like anyone else.
    assert!(terms[1].2 - crashed_at >= TTL - Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn two_contenders_racing_from_nothing_elect_exactly_one() {
    for seed in 0..20 {
        let store = MemoryBackend::new();
        let nodes: Vec<Node> = (0..2).map(|i| node(&store, &format!("n{i}"), seed * 10 + i)).collect();
        let timeline = Timeline::default();
        let tasks: Vec<_> = nodes.iter().map(|n| campaign(n, &timeline, None)).collect();
        advance(Duration::from_secs(5)).await;
        let leaders: Vec<_> = nodes.iter().filter(|n| n.elector.is_leader()).collect();
        assert_eq!(leaders.len(), 1);
        assert_eq!(leaders[0].elector.current_generation(), Some(Generation(1)));
        assert_eq!(timeline.terms().len(), 1);
        tasks.iter().for_each(JoinHandle::abort);
    }
}

#[tokio::test(start_paused = true)]
async fn a_corrupt_record_is_reported_and_never_taken_over() {
    let store = MemoryBackend::new();
    store.put_raw(&b"{\"generation\": \"seven\"}"[..]);
    let a = node(&store, "a", 1);
    let mut events = a.elector.subscribe();
    let timeline = Timeline::default();
    let task = campaign(&a, &timeline, None);
    advance(TTL * 10).await;
    assert!(timeline.terms().is_empty());
    assert!(!a.elector.is_leader());
    let mut corrupt_reports = 0;
    while let Ok(event) = events.receiver.try_recv() {
        if matches!(event, Event::Error { error: BackendError::Corrupt { .. } }) {
            corrupt_reports += 1;
        }
    }
    assert!(corrupt_reports >= 10, "{corrupt_reports} reports");
    assert_eq!(store.raw().unwrap(), b"{\"generation\": \"seven\"}", "the record was not touched");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_key_deleted_behind_the_electors_back_does_not_lower_the_generation() {
    let store = MemoryBackend::new();
    // A released record at generation 6 from an earlier holder.
    let mut old = crate::testing::conformance::sample_record(6, "old");
    old.released = true;
    store.put_raw(old.encode());
    let a = node(&store, "a", 1);
    let timeline = Timeline::default();
    let task = campaign(&a, &timeline, None);
    advance(Duration::from_secs(1)).await;
    assert_eq!(a.elector.current_generation(), Some(Generation(7)));

    store.remove();
    let term = task.await.unwrap().expect("a led");
    assert_eq!(term.end, TermEnd::Lost(LossReason::Deleted));
    let task = campaign(&a, &timeline, None);
    advance(Duration::from_secs(1)).await;
    assert_eq!(a.elector.current_generation(), Some(Generation(8)));
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_reply_is_lost_is_resolved_by_its_nonce() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    a.control.set(Fault::LoseReply);
    let timeline = Timeline::default();
    let task = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    // The create landed but its reply was lost; reading back found the nonce.
    assert_eq!(a.elector.current_generation(), Some(Generation(1)));
    // Renewals keep landing with lost replies; each is read back, so the
    // term goes on.
    advance(Duration::from_secs(20)).await;
    assert_eq!(a.elector.current_generation(), Some(Generation(1)));
    assert_eq!(timeline.terms().len(), 1);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn lock_delay_holds_back_the_work_after_an_involuntary_takeover() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let b = node_with(&store, "b", 2, |builder| builder.lock_delay(Duration::from_secs(2)));
    let timeline = Timeline::default();
    let task_a = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    let _task_b = campaign(&b, &timeline, None);
    advance(Duration::from_secs(1)).await;
    crash(&a, &task_a);
    let crashed_at = RealInstant::now();
    advance(Duration::from_secs(10)).await;
    let (_, b_start, _) = timeline.first_term_of("b").unwrap();
    assert!(b_start - crashed_at >= TTL - Duration::from_secs(1) + Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_leading_future_releases_in_the_background() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let timeline = Timeline::default();
    let task = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    assert!(a.elector.is_leader());
    task.abort();
    advance(Duration::from_millis(10)).await;
    assert!(!a.elector.is_leader());
    let record = LeaseRecord::decode(&store.raw().unwrap()).unwrap();
    assert!(record.released);
    assert_eq!(record.generation, Generation(1));
}

#[tokio::test(start_paused = true)]
async fn run_reports_events_and_releases_when_dropped() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let mut events = a.elector.run();
    let Some(Event::Acquired { lease, context }) = events.next().await else { panic!("expected Acquired") };
    assert_eq!(lease.generation, Generation(1));
    assert!(matches!(events.next().await, Some(Event::Renewed { generation: Generation(1) })));
    drop(events);
    context.cancelled().await;
    advance(Duration::from_millis(10)).await;
    assert!(LeaseRecord::decode(&store.raw().unwrap()).unwrap().released);
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_the_term_and_releases() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let timeline = Timeline::default();
    let task = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    a.elector.stop();
    let term = task.await.unwrap().unwrap();
    assert_eq!(term.end, TermEnd::Released);
    assert!(matches!(a.elector.lead(|_, _| async {}).await, Err(ElectorError::Stopped)));
}

#[tokio::test(start_paused = true)]
async fn observe_reports_the_holder_without_campaigning() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let watcher = node(&store, "w", 2);
    assert_eq!(watcher.elector.observe().await.unwrap(), None);
    let timeline = Timeline::default();
    let _task = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    let seen = watcher.elector.observe().await.unwrap().unwrap();
    assert_eq!((seen.owner.as_str(), seen.generation, seen.released), ("a", Generation(1), false));
    assert!(!watcher.elector.is_leader());
    // The key is reset behind everyone's back to a lower generation.
    store.put_raw(crate::testing::conformance::sample_record(0, "reset").encode());
    assert!(matches!(watcher.elector.observe().await, Err(ElectorError::GenerationWentBack { .. })));
}

#[test]
fn bad_configuration_is_a_clear_error() {
    let build = |configure: fn(ElectorBuilder<MemoryBackend>) -> ElectorBuilder<MemoryBackend>| {
        configure(Elector::builder(MemoryBackend::new()).owner("a")).build().map(|_| ()).unwrap_err().to_string()
    };
    assert!(build(|b| b.owner("")).contains("owner"));
    assert!(build(|b| b.ttl(Duration::ZERO)).contains("TTL"));
    assert!(build(|b| b.drift_bound(f64::NAN)).contains("drift"));
    assert!(build(|b| b.drift_bound(0.5)).contains("drift"));
    assert!(build(|b| b.poll_interval(Duration::ZERO)).contains("poll"));
    let message = build(|b| b.ttl(Duration::from_secs(10)).renew_interval(Duration::from_secs(9)));
    assert!(message.contains("renew interval") && message.contains("TTL"), "{message}");
    assert!(Elector::builder(MemoryBackend::new()).build().unwrap_err().to_string().contains("owner"));
}

#[test]
fn the_lead_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let elector = Elector::builder(MemoryBackend::new()).owner("a").build().unwrap();
    let future = elector.lead(|_, _| async {});
    assert_send(&future);
}
