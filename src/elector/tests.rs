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
    let deleted_seen = RealInstant::now();
    let task = campaign(&a, &timeline, None);
    // "Missing" after a record was seen is a new version, waited out for a
    // full TTL: whoever deleted the key may have left a holder inside its
    // term.
    advance(TTL - Duration::from_millis(100)).await;
    assert!(!a.elector.is_leader());
    advance(Duration::from_millis(200)).await;
    assert_eq!(a.elector.current_generation(), Some(Generation(8)));
    let started = timeline.terms()[1].2;
    assert!(started - deleted_seen >= TTL, "took the deleted key after {:?}", started - deleted_seen);
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

/// A leader `a` and a contender `b` with a lock-delay; `a` has just crashed.
struct Takeover {
    store: MemoryBackend,
    b: Node,
    timeline: Timeline,
    task_b: JoinHandle<Option<Term<()>>>,
    crashed_at: RealInstant,
}

async fn crash_the_leader(lock_delay: Duration) -> Takeover {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let b = node_with(&store, "b", 2, |builder| builder.lock_delay(lock_delay));
    let timeline = Timeline::default();
    let task_a = campaign(&a, &timeline, None);
    advance(Duration::from_millis(10)).await;
    let task_b = campaign(&b, &timeline, None);
    advance(Duration::from_secs(1)).await;
    crash(&a, &task_a);
    Takeover { store, b, timeline, task_b, crashed_at: RealInstant::now() }
}

impl Takeover {
    /// Waits, in 10 ms steps, until `b` has written its takeover record.
    async fn until_b_took_over(&self) {
        while stored_record(&self.store).owner != "b" {
            advance(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn lock_delay_holds_back_the_work_after_an_involuntary_takeover() {
    let Takeover { timeline, crashed_at, .. } = crash_the_leader(Duration::from_secs(2)).await;
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
    let record = stored_record(&store);
    assert!(record.released);
    assert_eq!(record.generation, Generation(1));
}

#[tokio::test(start_paused = true)]
async fn run_reports_events_and_releases_when_dropped() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let mut events = a.elector.run();
    let Some(Event::Acquired { lease, context, .. }) = events.next().await else { panic!("expected Acquired") };
    assert_eq!(lease.generation, Generation(1));
    assert!(matches!(events.next().await, Some(Event::Renewed { generation: Generation(1) })));
    drop(events);
    context.cancelled().await;
    advance(Duration::from_millis(10)).await;
    assert!(stored_record(&store).released);
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

// ---------------------------------------------------------------------------
// Edges: each test below failed before the behaviour it names was fixed.
// ---------------------------------------------------------------------------

/// What [`Scripted`] does with the next write.
#[derive(Clone, Debug)]
enum WriteStep {
    /// Apply it now and answer at once.
    Pass,
    /// Apply it now, answer after this long (the store commits a write whose
    /// sender may stop waiting for the reply).
    ReplyAfter(Duration),
    /// Answer `Ambiguous` at once and apply it just before the n-th
    /// operation after this one, as a write delayed in the network would.
    LandBeforeOp(usize),
    /// Refuse it without applying it.
    Fail(BackendError),
}

/// What [`Scripted`] does with the next read.
#[derive(Clone, Debug)]
enum ReadStep {
    Pass,
    /// Read now, answer after this long.
    ReplyAfter(Duration),
    /// Fail after this long.
    FailAfter(Duration, BackendError),
}

#[derive(Debug, Default)]
struct Script {
    writes: std::collections::VecDeque<WriteStep>,
    reads: std::collections::VecDeque<ReadStep>,
    /// A write waiting to land: operations to go, expected version, record.
    late: Option<(usize, Option<Version>, LeaseRecord)>,
    /// Every record written, in order, whether it landed or not.
    written: Vec<LeaseRecord>,
}

/// A memory store whose writes and reads follow a script; unscripted
/// operations pass straight through.
#[derive(Clone, Debug, Default)]
struct Scripted {
    store: MemoryBackend,
    script: Arc<Mutex<Script>>,
}

impl Scripted {
    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }

    /// Counts one operation and lands a late write whose time has come.
    async fn tick(&self) {
        let due = {
            let mut script = self.script();
            match &mut script.late {
                Some((left, _, _)) if *left > 1 => {
                    *left -= 1;
                    None
                }
                Some(_) => script.late.take(),
                None => None,
            }
        };
        if let Some((_, expected, record)) = due {
            let _ = self.store.write(expected.as_ref(), &record).await;
        }
    }
}

impl Backend for Scripted {
    async fn read(&self) -> Result<Stored, BackendError> {
        self.tick().await;
        let step = self.script().reads.pop_front().unwrap_or(ReadStep::Pass);
        let result = self.store.read().await;
        match step {
            ReadStep::Pass => result,
            ReadStep::ReplyAfter(delay) => {
                tokio::time::sleep(delay).await;
                result
            }
            ReadStep::FailAfter(delay, err) => {
                tokio::time::sleep(delay).await;
                Err(err)
            }
        }
    }

    async fn write(&self, expected: Option<&Version>, record: &LeaseRecord) -> Result<Version, BackendError> {
        self.tick().await;
        let step = {
            let mut script = self.script();
            script.written.push(record.clone());
            script.writes.pop_front().unwrap_or(WriteStep::Pass)
        };
        match step {
            WriteStep::Pass => self.store.write(expected, record).await,
            WriteStep::ReplyAfter(delay) => {
                let result = self.store.write(expected, record).await;
                tokio::time::sleep(delay).await;
                result
            }
            WriteStep::LandBeforeOp(n) => {
                self.script().late = Some((n, expected.cloned(), record.clone()));
                Err(BackendError::Ambiguous("reply lost (scripted)".into()))
            }
            WriteStep::Fail(err) => Err(err),
        }
    }

    async fn delete(&self, expected: &Version) -> Result<(), BackendError> {
        self.tick().await;
        self.store.delete(expected).await
    }
}

fn scripted_elector(store: &Scripted, owner: &str, seed: u64) -> Elector<Scripted> {
    Elector::builder(store.clone()).owner(owner).ttl(TTL).entropy(Arc::new(SeededEntropy::new(seed))).build().unwrap()
}

fn drain(events: &mut Events) -> Vec<Event> {
    std::iter::from_fn(|| events.receiver.try_recv().ok()).collect()
}

fn stored_record(store: &MemoryBackend) -> LeaseRecord {
    LeaseRecord::decode(&store.raw().expect("a record is stored")).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_term_lost_during_its_lock_delay_never_starts() {
    // A lock-delay longer than the TTL, as Consul's default of 15 s is.
    let takeover = crash_the_leader(Duration::from_secs(5)).await;
    let mut b_events = takeover.b.elector.subscribe();
    // b takes over involuntarily and starts its lock-delay; then the store
    // stops answering it, so its lease runs out inside the delay.
    takeover.until_b_took_over().await;
    let Takeover { b, timeline, task_b, .. } = takeover;
    b.control.set(Fault::Hang);
    for _ in 0..1000 {
        advance(Duration::from_millis(10)).await;
        assert!(!b.elector.is_leader(), "b claimed to lead a term it lost during the lock-delay");
    }
    assert!(timeline.first_term_of("b").is_none(), "b's work ran: {:?}", timeline.terms());
    let announced: Vec<_> =
        drain(&mut b_events).into_iter().filter(|e| matches!(e, Event::Acquired { .. } | Event::Lost { .. })).collect();
    assert!(announced.is_empty(), "a term that never started was announced: {announced:?}");
    task_b.abort();
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_lock_delay_waits_it_out_and_releases_without_starting() {
    let takeover = crash_the_leader(Duration::from_secs(5)).await;
    let mut b_events = takeover.b.elector.subscribe();
    takeover.until_b_took_over().await;
    let Takeover { store, b, timeline, task_b, .. } = takeover;
    let took_over = RealInstant::now();
    b.elector.stop();
    advance(Duration::from_secs(1)).await;
    assert!(!stored_record(&store).released, "released inside the lock-delay");
    assert!(task_b.await.unwrap().is_none(), "lead returned a term");
    // `took_over` is up to one 10 ms step after the takeover.
    assert!(RealInstant::now() - took_over >= Duration::from_millis(4990));
    let record = stored_record(&store);
    assert!(record.released && record.owner == "b", "{record:?}");
    assert!(timeline.first_term_of("b").is_none());
    // Renewals during the delay are not announced either: no Renewed
    // before an Acquired that never came.
    let announced: Vec<_> = drain(&mut b_events)
        .into_iter()
        .filter(|e| matches!(e, Event::Acquired { .. } | Event::Lost { .. } | Event::Renewed { .. }))
        .collect();
    assert!(announced.is_empty(), "{announced:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lead_future_dropped_during_its_lock_delay_leaves_the_lease_to_run_out() {
    // A release now would let the next leader skip its own lock-delay while
    // the crashed holder's requests may still be draining.
    let takeover = crash_the_leader(Duration::from_secs(5)).await;
    takeover.until_b_took_over().await;
    advance(Duration::from_secs(1)).await;
    takeover.task_b.abort();
    advance(Duration::from_millis(100)).await;
    let record = stored_record(&takeover.store);
    assert!(!record.released && record.owner == "b", "released during the lock-delay: {record:?}");
}

#[tokio::test(start_paused = true)]
async fn run_releases_only_after_the_work_guard_is_dropped() {
    // Both ways of ending a run(): stop() and dropping the stream.
    for drop_stream in [false, true] {
        let store = MemoryBackend::new();
        let a = node(&store, "a", 1);
        let mut events = a.elector.run();
        let Some(Event::Acquired { context, guard, .. }) = events.next().await else { panic!("expected Acquired") };
        assert!(guard.is_armed());
        let finished = Arc::new(Mutex::new(None));
        let finished_at = finished.clone();
        tokio::spawn(async move {
            context.cancelled().await;
            // In-flight writes take half a second to finish.
            tokio::time::sleep(Duration::from_millis(500)).await;
            *finished_at.lock().unwrap() = Some(RealInstant::now());
            drop(guard);
        });
        advance(Duration::from_millis(10)).await;
        if drop_stream {
            drop(events);
        } else {
            a.elector.stop();
        }
        advance(Duration::from_millis(100)).await;
        assert!(!a.elector.is_leader(), "the context is cancelled at once");
        assert!(!stored_record(&store).released, "released while the work was still running");
        advance(Duration::from_millis(500)).await;
        assert!(finished.lock().unwrap().is_some());
        let record = stored_record(&store);
        assert!(record.released, "released once the work stopped");
        assert_eq!(record.generation, Generation(1));
    }
}

#[tokio::test(start_paused = true)]
async fn subscribers_get_a_detached_guard_that_holds_nothing_back() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let mut watcher = a.elector.subscribe();
    let mut events = a.elector.run();
    let Some(Event::Acquired { guard, .. }) = events.next().await else { panic!("expected Acquired") };
    let Some(Event::Acquired { guard: copy, .. }) = watcher.next().await else { panic!("expected Acquired") };
    assert!(guard.is_armed() && !copy.is_armed());
    drop(guard);
    a.elector.stop();
    advance(Duration::from_millis(10)).await;
    // The watcher still holds its copy, unread events and all.
    assert!(stored_record(&store).released);
    drop(copy);
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_takeover_write_releases_what_landed() {
    // The create commits at once, but its reply takes 100 ms; the elector is
    // stopped while it waits.
    let store = Scripted::default();
    store.script().writes.push_back(WriteStep::ReplyAfter(Duration::from_millis(100)));
    let a = scripted_elector(&store, "a", 1);
    let leader = a.clone();
    let task = tokio::spawn(async move { leader.lead(|_, _| async {}).await });
    advance(Duration::from_millis(50)).await;
    a.stop();
    assert!(matches!(task.await.unwrap(), Err(ElectorError::Stopped)));
    advance(Duration::from_millis(10)).await;
    let record = stored_record(&store.store);
    assert!(record.released, "the landed takeover was left for everyone to wait out: {record:?}");
    assert_eq!(record.generation, Generation(1));
}

#[tokio::test(start_paused = true)]
async fn a_stop_after_an_unresolved_takeover_settles_it_by_reading_back() {
    // The create's reply is lost, and the read that should settle it fails
    // only after the elector was told to stop. The write lands meanwhile.
    let store = Scripted::default();
    store.script().writes.push_back(WriteStep::LandBeforeOp(2));
    store.script().reads.extend([
        ReadStep::Pass,
        ReadStep::FailAfter(Duration::from_millis(200), BackendError::Transient("scripted".into())),
    ]);
    let a = scripted_elector(&store, "a", 1);
    let leader = a.clone();
    let task = tokio::spawn(async move { leader.lead(|_, _| async {}).await });
    advance(Duration::from_millis(100)).await;
    a.stop();
    assert!(matches!(task.await.unwrap(), Err(ElectorError::Stopped)));
    let record = stored_record(&store.store);
    assert!(record.released && record.owner == "a", "{record:?}");
}

#[tokio::test(start_paused = true)]
async fn concurrent_observers_never_report_a_false_step_back() {
    let store = Scripted::default();
    store.store.put_raw(crate::testing::conformance::sample_record(5, "five").encode());
    let watcher = scripted_elector(&store, "w", 1);
    // The first read sees generation 5 but answers after 100 ms; meanwhile
    // generation 6 is written and a second read sees it at once.
    store.script().reads.push_back(ReadStep::ReplyAfter(Duration::from_millis(100)));
    let first = watcher.clone();
    let first = tokio::spawn(async move { first.observe().await });
    advance(Duration::from_millis(1)).await;
    store.store.put_raw(crate::testing::conformance::sample_record(6, "six").encode());
    let second = watcher.observe().await.unwrap().unwrap();
    assert_eq!(second.generation, Generation(6));
    let first = first.await.unwrap().expect("an old answer is not a step back");
    assert_eq!(first.unwrap().generation, Generation(5));
    // A read sent after 6 was seen that finds 5 is a real step back.
    store.store.put_raw(crate::testing::conformance::sample_record(5, "reset").encode());
    assert!(matches!(watcher.observe().await, Err(ElectorError::GenerationWentBack { .. })));
}

#[tokio::test(start_paused = true)]
async fn every_release_attempt_writes_fresh_bytes_and_a_late_landing_counts() {
    let store = Scripted::default();
    let a = scripted_elector(&store, "a", 1);
    let leader = a.clone();
    let task = tokio::spawn(async move { leader.lead(|_, _| async {}).await });
    // The create passes. The first release attempt's reply is lost and it
    // lands late: after the second attempt was refused and read back, just
    // before the last look.
    store.script().writes.extend([
        WriteStep::Pass,
        WriteStep::LandBeforeOp(4),
        WriteStep::Fail(BackendError::Transient("scripted".into())),
    ]);
    let term = task.await.unwrap().unwrap();
    assert_eq!(term.end, TermEnd::Released, "the late-landing release was reported lost");
    let written = store.script().written.clone();
    let releases: Vec<_> = written.iter().filter(|record| record.released).collect();
    assert_eq!(releases.len(), 2, "{written:?}");
    assert_ne!(releases[0].nonce, releases[1].nonce, "a retry resent identical bytes");
    assert!(stored_record(&store.store).released);
}

#[tokio::test(start_paused = true)]
async fn unconfirmed_and_abandoned_releases_say_so_in_their_loss_event() {
    let store = MemoryBackend::new();
    let a = node(&store, "a", 1);
    let mut events = a.elector.subscribe();
    let control = a.control.clone();
    let term = a
        .elector
        .lead(|_, _| async move {
            control.set(Fault::Fail(BackendError::Transient("down".into())));
        })
        .await
        .unwrap();
    assert!(matches!(term.end, TermEnd::ReleaseUnconfirmed(_)), "{:?}", term.end);
    let lost: Vec<_> = drain(&mut events).into_iter().filter(|e| matches!(e, Event::Lost { .. })).collect();
    assert!(
        matches!(lost.as_slice(), [Event::Lost { reason: Some(LossReason::ReleaseUnconfirmed(_)), .. }]),
        "{lost:?}"
    );

    a.control.set(Fault::None);
    let timeline = Timeline::default();
    let task = campaign(&a, &timeline, None);
    while !a.elector.is_leader() {
        advance(Duration::from_millis(10)).await;
    }
    task.abort();
    advance(Duration::from_millis(10)).await;
    let lost: Vec<_> = drain(&mut events).into_iter().filter(|e| matches!(e, Event::Lost { .. })).collect();
    assert!(matches!(lost.as_slice(), [Event::Lost { reason: Some(LossReason::Abandoned), .. }]), "{lost:?}");
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_generation_is_reported_and_never_overwritten() {
    for released in [false, true] {
        let store = MemoryBackend::new();
        let mut last = crate::testing::conformance::sample_record(u64::MAX, "last");
        last.released = released;
        let bytes = last.encode();
        store.put_raw(bytes.clone());
        let a = node(&store, "a", 1);
        let mut events = a.elector.subscribe();
        let timeline = Timeline::default();
        let task = campaign(&a, &timeline, None);
        advance(Duration::from_secs(120)).await;
        assert!(timeline.terms().is_empty() && !a.elector.is_leader());
        assert_eq!(store.raw().unwrap(), bytes, "the record was overwritten");
        let reports = drain(&mut events)
            .into_iter()
            .filter(|e| matches!(e, Event::Error { error: BackendError::Corrupt { reason, .. } } if reason.to_string().contains("no successor")))
            .count();
        assert!(reports >= 10, "{reports} reports");
        task.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_record_with_an_absurd_ttl_is_reported_as_corrupt() {
    let store = MemoryBackend::new();
    let mut absurd = crate::testing::conformance::sample_record(3, "absurd");
    absurd.ttl_ms = Some(u64::MAX);
    store.put_raw(absurd.encode());
    let a = node(&store, "a", 1);
    let mut events = a.elector.subscribe();
    let timeline = Timeline::default();
    let task = campaign(&a, &timeline, None);
    advance(TTL * 10).await;
    assert!(timeline.terms().is_empty());
    let reports = drain(&mut events)
        .into_iter()
        .filter(|e| matches!(e, Event::Error { error: BackendError::Corrupt { .. } }))
        .count();
    assert!(reports >= 10, "the contender waited silently: {reports} reports");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_go_record_without_a_ttl_is_waited_out_for_the_assumed_ttl() {
    let store = MemoryBackend::new();
    let go = br#"{"generation":12,"expires_at":"2000-01-01T00:00:00Z","owner":"go-host"}"#;
    store.put_raw(&go[..]);
    let a = node(&store, "a", 1); // TTL 3 s; the assumed TTL is 60 s
    let timeline = Timeline::default();
    let start = RealInstant::now();
    let task = campaign(&a, &timeline, None);
    advance(Duration::from_secs(59)).await;
    assert!(timeline.terms().is_empty(), "took a Go holder's lease after its own TTL");
    advance(Duration::from_secs(2)).await;
    let (generation, started, _) = timeline.first_term_of("a").expect("took over after the assumed TTL");
    assert_eq!(generation, Generation(13));
    assert!(started - start >= Duration::from_secs(60));
    task.abort();

    let configured = node_with(&store, "b", 2, |builder| builder.assumed_ttl(Duration::from_secs(5)));
    assert_eq!(configured.elector.inner.timing().assumed_ttl, Duration::from_secs(5));
}

#[test]
fn absurd_durations_are_configuration_errors_not_panics() {
    type Setter = fn(ElectorBuilder<MemoryBackend>, Duration) -> ElectorBuilder<MemoryBackend>;
    let setters: [(&str, Setter); 8] = [
        ("ttl", ElectorBuilder::ttl),
        ("renew interval", ElectorBuilder::renew_interval),
        ("poll interval", ElectorBuilder::poll_interval),
        ("request timeout", ElectorBuilder::request_timeout),
        ("stop margin", ElectorBuilder::stop_margin),
        ("release timeout", ElectorBuilder::release_timeout),
        ("lock-delay", ElectorBuilder::lock_delay),
        ("assumed TTL", ElectorBuilder::assumed_ttl),
    ];
    for (name, set) in setters {
        for absurd in [Duration::MAX, crate::lease::MAX_TTL + Duration::from_nanos(1)] {
            let built = set(Elector::builder(MemoryBackend::new()).owner("a"), absurd).build();
            let Err(ElectorError::Config(message)) = built else { panic!("{name} {absurd:?} was accepted") };
            assert!(message.to_lowercase().contains(&name.to_lowercase()) || name == "poll interval", "{message}");
        }
    }
}

#[test]
fn the_stop_margin_must_cover_the_timer_resolution() {
    let build = |margin: Duration, clock: Option<Arc<dyn Clock>>| {
        let mut builder = Elector::builder(MemoryBackend::new()).owner("a").stop_margin(margin).drift_bound(0.0);
        if let Some(clock) = clock {
            builder = builder.clock(clock);
        }
        builder.build().map(|_| ())
    };
    let Err(ElectorError::Config(message)) = build(Duration::ZERO, None) else { panic!("a zero margin was accepted") };
    assert!(message.contains("timer resolution"), "{message}");
    assert!(build(Duration::from_millis(1), None).is_ok());

    /// A clock that fires timers on 10 ms ticks, as a simulator does.
    #[derive(Debug)]
    struct Coarse(SystemClock);
    impl Clock for Coarse {
        fn wall(&self) -> SystemTime {
            self.0.wall()
        }
        fn now(&self) -> Instant {
            self.0.now()
        }
        fn sleep_until(&self, deadline: Instant) -> crate::clock::Sleep {
            self.0.sleep_until(deadline)
        }
        fn timer_resolution(&self) -> Duration {
            Duration::from_millis(10)
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let _entered = runtime.enter();
    let coarse: Arc<dyn Clock> = Arc::new(Coarse(SystemClock::new()));
    assert!(build(Duration::from_millis(5), Some(coarse.clone())).is_err());
    assert!(build(Duration::from_millis(10), Some(coarse)).is_ok());
}

/// After a pause the work's timers can fire before the elector's task runs:
/// the context must then already count as cancelled if the term's end has
/// passed, even though nobody has cancelled it yet.
#[tokio::test(start_paused = true)]
async fn a_context_counts_as_cancelled_once_its_term_has_ended_without_the_elector() {
    let clock: Arc<dyn Clock> = Arc::new(DriftingClock::new(SystemTime::UNIX_EPOCH, 0));
    let until = clock.now() + Duration::from_secs(1);
    let (sender, validity) = watch::channel(Validity { cancelled: false, until });
    let context = LeaderContext { generation: Generation(3), validity, clock: clock.clone() };
    assert!(!context.is_cancelled());
    // Time passes with nobody touching the sender, as in a process pause.
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(!context.is_cancelled());
    // A zero timeout polls the future once: an error means it was pending.
    assert!(tokio::time::timeout(Duration::ZERO, context.cancelled()).await.is_err());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(context.is_cancelled());
    assert!(tokio::time::timeout(Duration::ZERO, context.cancelled()).await.is_ok());

    // A renewal moves the end; cancelling ends it at once.
    sender.send_modify(|validity| validity.until = clock.now() + Duration::from_secs(5));
    assert!(!context.is_cancelled());
    sender.send_modify(|validity| validity.cancelled = true);
    assert!(context.is_cancelled());
    assert!(tokio::time::timeout(Duration::ZERO, context.cancelled()).await.is_ok());
    assert!(format!("{context:?}").contains("cancelled: true"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_is_retried_a_pause_after_it_was_sent_not_after_its_read_back() {
    // TTL 3 s: renewals every 1 s, retries every 0.2 s (±25 %). The first
    // renewal's reply is lost and reading it back takes 0.4 s, longer than
    // the pause: the retry goes out as soon as the read-back is in, not a
    // further pause later, because a term running short cannot afford the
    // read-back's time twice.
    let store = Scripted::default();
    store.script().writes.extend([WriteStep::Pass, WriteStep::Fail(BackendError::Ambiguous("lost".into()))]);
    let a = scripted_elector(&store, "a", 1);
    let leader = a.clone();
    let task = tokio::spawn(async move { leader.lead(|_, _| std::future::pending::<()>()).await });
    advance(Duration::from_millis(10)).await;
    assert!(a.is_leader());
    store.script().reads.push_back(ReadStep::ReplyAfter(Duration::from_millis(400)));
    // The renewal goes out at 1 s; its read-back answers at 1.4 s.
    advance(Duration::from_millis(1000)).await;
    assert_eq!(store.script().written.len(), 2, "the first renewal was sent");
    advance(Duration::from_millis(420)).await;
    assert_eq!(store.script().written.len(), 3, "the retry waited another pause after the read-back");
    assert!(a.is_leader());
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_term_ended_while_its_host_slept_stops_within_one_suspend_check_of_waking() {
    // The leader's host sleeps for a minute right after a renewal. tokio's
    // timers stand still meanwhile, so every timer the term guard armed
    // (the term's end, the next renewal) fires late by that minute; the
    // clock counts it, and the guard reads the clock every suspend check.
    let store = MemoryBackend::new();
    let slept = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock::with_fake_suspends(slept.clone()));
    let a =
        node_with(&store, "a", 1, |builder| builder.clock(clock.clone()).renew_interval(Duration::from_millis(900)));
    let (cancelled_at, cancelled) = tokio::sync::oneshot::channel();
    let leader = a.elector.clone();
    let task = tokio::spawn(async move {
        leader
            .lead(|ctx, _| async move {
                ctx.cancelled().await;
                let _ = cancelled_at.send(RealInstant::now());
            })
            .await
    });
    // Renewals at 0.9 s and 1.8 s; the host sleeps at 1.85 s.
    advance(Duration::from_millis(1850)).await;
    assert!(a.elector.is_leader());
    slept.fetch_add(60_000_000_000, std::sync::atomic::Ordering::SeqCst);
    let woke = RealInstant::now();
    let stopped = cancelled.await.unwrap().saturating_duration_since(woke);
    assert!(
        stopped <= crate::clock::DEFAULT_SUSPEND_CHECK + Duration::from_millis(1),
        "stopped {stopped:?} after waking"
    );
    let term = task.await.unwrap().unwrap();
    assert_eq!(term.end, TermEnd::Lost(LossReason::Expired));
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_lands_after_many_unresolved_ones_is_still_recognised_as_ours() {
    // Renewals are retried every ~50 ms. The first renewal's reply is lost
    // and it lands only after ten more attempts went unanswered; a holder
    // that forgot it would take its own record for someone else's and
    // report the term superseded.
    let store = Scripted::default();
    let a = Elector::builder(store.clone())
        .owner("a")
        .ttl(TTL)
        .poll_interval(Duration::from_millis(50))
        .entropy(Arc::new(SeededEntropy::new(1)))
        .build()
        .unwrap();
    let mut events = a.subscribe();
    store.script().writes.push_back(WriteStep::Pass);
    store.script().writes.push_back(WriteStep::LandBeforeOp(21));
    for _ in 0..12 {
        store.script().writes.push_back(WriteStep::Fail(BackendError::Ambiguous("reply lost (scripted)".into())));
    }
    let leader = a.clone();
    let task = tokio::spawn(async move { leader.lead(|_, _| std::future::pending::<()>()).await });
    advance(Duration::from_millis(2500)).await;
    let unresolved = store.script().written.len();
    assert!(unresolved >= 12, "only {unresolved} writes: the late landing came too early to show anything");
    assert!(a.is_leader(), "{:?}", drain(&mut events));
    let lost: Vec<_> = drain(&mut events).into_iter().filter(|e| matches!(e, Event::Lost { .. })).collect();
    assert!(lost.is_empty(), "{lost:?}");
    task.abort();
}
