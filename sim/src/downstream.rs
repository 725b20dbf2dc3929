//! The fenced downstream resource the leaders write to.
//!
//! It stands for whatever the elected writer guards, and it guards itself
//! the way the library tells users to: with [`hoplock::fence::Fence`], the
//! token check and the write done as one step (nothing awaits in between,
//! and the simulation runs on one thread). Because the production check is
//! the one in use, a bug in it shows up here as a token going down, which
//! the monotone-fencing checker reads in the order the resource stored the
//! writes.
//!
//! A keyed world's work writes its sampled keys every second, and each
//! write is on the wire for a delay drawn from the seed. Neither is timed
//! one by one: a key's work tells the downstream when it starts writing
//! ([`Downstream::start_key_writes`]) and when it stops
//! ([`Downstream::stop_key_writes`]), and once the run is over the
//! downstream works out every write sent in between and takes them all in
//! the order they land ([`Downstream::land_keys`]), checking each against
//! its key's fence then. Nothing in the run reads the downstream's state,
//! so checking a write after the run is the same as checking it when it
//! lands; what changes is that no host wakes for a write or a landing.
//!
//! The writes are the ones the work's own timer would have sent: one when
//! it starts, then one each time a timer armed for the interval fires, as
//! long as that is before the work stopped writing (a timer that fires at
//! the very instant the work saw its right cancelled, or was aborted,
//! sends nothing: the careful work looks at its right before it writes).
//! Each write's delay on the wire is drawn, in true time, from the
//! writer's seed, its key, round and place in its run of writes. A write in flight is
//! still its sender's (it waits in the sender's buffers and retries), so
//! both the sending timer and the landing are shaped by the sender's
//! outages as any timer of its is (see [`crate::clocks`] and
//! [`outages`]): a pause holds them to its end, a suspend makes them late
//! by the time the host slept, and a crash, a restart or the end of the
//! run loses a write still on its way and stops the sending. This is the
//! stale write fencing exists for: a holder stopped with a write in hand
//! delivers it after the next holder took over.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use hoplock::Generation;
use hoplock::entropy::splitmix64;
use hoplock::fence::Fence;

use crate::history::{Entry, Event, History};

pub mod outages;

use outages::Outages;

/// A resource that accepts writes carrying a generation at least as high as
/// the highest it has seen.
#[derive(Clone, Debug, Default)]
pub struct Downstream {
    fence: Rc<Fence>,
    /// How many writes it has stored: each write's place in its order.
    writes: Rc<Cell<u64>>,
    /// In keyed worlds, one fence per key, checking the key's round.
    keys: Rc<RefCell<BTreeMap<u32, Fence>>>,
    /// Keyed works' stretches of writing, in the order they started.
    key_writers: Rc<RefCell<Vec<KeyWriter>>>,
}

/// One key's work writing at one round: from when, how often and until
/// when, as its node told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyWriter {
    /// The writing node and its keyed member's incarnation.
    pub node: String,
    pub incarnation: String,
    pub key: u32,
    pub round: u64,
    /// When the first write was sent, in simulated time since the start.
    pub from: Duration,
    /// How long the work's timer between two writes takes, in true time.
    pub every: Duration,
    /// The longest a write is on the wire; each write's delay is drawn
    /// from `delays_seed` up to this.
    pub latency_max: Duration,
    pub delays_seed: u64,
    /// When the work stopped writing, if it said so (it cannot when its
    /// process is crashed).
    pub until: Option<Duration>,
}

/// A keyed write, once its landing is known.
struct KeyWrite<'a> {
    lands_us: u64,
    sent_us: u64,
    writer: &'a KeyWriter,
}

impl Downstream {
    /// Writes on behalf of `node` with fencing token `generation`, records
    /// the outcome, and returns whether it was accepted.
    pub fn write(&self, history: &History, node: &str, generation: u64) -> bool {
        let highest_before = self.fence.highest().get();
        let accepted = self.fence.check(Generation(generation)).is_ok();
        let sequence = self.writes.get() + 1;
        self.writes.set(sequence);
        history.record_now(node, Event::Downstream { generation, accepted, highest_before, sequence });
        accepted
    }

    /// A key's work starts writing: its first write goes at `writer.from`.
    pub fn start_key_writes(&self, writer: KeyWriter) {
        self.key_writers.borrow_mut().push(writer);
    }

    /// The work of key `k{key}` at `round` by `node`'s `incarnation` sends
    /// nothing from `at` on.
    pub fn stop_key_writes(&self, node: &str, incarnation: &str, key: u32, round: u64, at: Duration) {
        let mut writers = self.key_writers.borrow_mut();
        let open = writers.iter_mut().rev().find(|writer| {
            writer.until.is_none()
                && writer.key == key
                && writer.round == round
                && writer.node == node
                && writer.incarnation == incarnation
        });
        if let Some(writer) = open {
            writer.until = Some(at);
        }
    }

    /// Lands every keyed write of the run whose history is `entries` and
    /// whose hosts were all stopped at `ended`: in the order they land (and,
    /// between writes that land at once, in the order they were sent), each
    /// with the entry its landing records. Writes lost on their way are not
    /// recorded.
    pub fn land_keys(&self, entries: &[Entry], ended: Duration) -> Vec<Entry> {
        let outages = Outages::read(entries, micros(ended));
        let writers = std::mem::take(&mut *self.key_writers.borrow_mut());
        let mut landing: Vec<KeyWrite<'_>> = Vec::new();
        for writer in &writers {
            sent_writes(writer, &outages, &mut landing);
        }
        // A stable sort: of two writes that land at once, the one sent
        // first (by the writer that started first) comes first.
        landing.sort_by_key(|write| (write.lands_us, write.sent_us));
        let mut keys = self.keys.borrow_mut();
        let mut landed = Vec::with_capacity(landing.len());
        for KeyWrite { lands_us, sent_us, writer } in landing {
            let fence = keys.entry(writer.key).or_default();
            let highest_before = fence.highest().get();
            let accepted = fence.check(Generation(writer.round)).is_ok();
            let sequence = self.writes.get() + 1;
            self.writes.set(sequence);
            let (key, round, incarnation) = (writer.key, writer.round, writer.incarnation.clone());
            let event = Event::KeyDownstream { key, round, incarnation, sent_us, accepted, highest_before, sequence };
            landed.push(Entry { at_us: lands_us, node: writer.node.clone(), event });
        }
        landed
    }
}

/// Adds the writes `writer` sent, and where each lands, to `landing`.
fn sent_writes<'a>(writer: &'a KeyWriter, outages: &Outages, landing: &mut Vec<KeyWrite<'a>>) {
    let node = writer.node.as_str();
    let from = micros(writer.from);
    // A work whose process was crashed could not say when it stopped: it
    // stopped with its process.
    let until = writer.until.map_or_else(|| outages.stopped(node, from), micros);
    // Rounded up, as the simulated clock rounds its timers' true deadlines.
    let every = u64::try_from(writer.every.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX).max(1);
    let latency_max = micros(writer.latency_max);
    let mut sent = from;
    let mut count = 0_u64;
    while sent < until {
        // Each write's delay from its own draw, so that the delays do not
        // depend on the order the writers are looked at in.
        let mut state = writer.delays_seed;
        for part in [u64::from(writer.key), writer.round, count] {
            state = splitmix64(&mut state) ^ part;
        }
        let delay = splitmix64(&mut state) % (latency_max / 1_000 + 1) * 1_000;
        if let Some(lands_us) = outages.landing(node, sent, sent.saturating_add(delay)) {
            landing.push(KeyWrite { lands_us, sent_us: sent, writer });
        }
        // The work's next timer, armed as this write went, fires on the
        // millisecond as tokio's timers do.
        sent = outages.fired(node, sent, sent.saturating_add(every)).div_ceil(1_000).saturating_mul(1_000);
        count += 1;
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    fn writer(node: &str, round: u64, from_ms: u64, until_ms: Option<u64>) -> KeyWriter {
        KeyWriter {
            node: node.to_string(),
            incarnation: format!("{node}-1"),
            key: 0,
            round,
            from: Duration::from_millis(from_ms),
            every: Duration::from_secs(1),
            // No delay on the wire, so that the test knows every landing.
            latency_max: Duration::ZERO,
            delays_seed: 7,
            until: until_ms.map(Duration::from_millis),
        }
    }

    /// (landed at in ms, node, round, accepted) of every write landed.
    fn landed(downstream: &Downstream, history: &[Entry]) -> Vec<(u64, String, u64, bool)> {
        let entries = downstream.land_keys(history, Duration::from_secs(10));
        let mut sequences = Vec::new();
        let landed = entries
            .into_iter()
            .map(|entry| match entry.event {
                Event::KeyDownstream { round, accepted, sequence, .. } => {
                    sequences.push(sequence);
                    (entry.at_us / MS, entry.node, round, accepted)
                }
                other => panic!("not a downstream write: {other:?}"),
            })
            .collect();
        assert!(sequences.is_sorted(), "stored in the order they landed: {sequences:?}");
        landed
    }

    fn writes(list: &[(u64, &str, u64, bool)]) -> Vec<(u64, String, u64, bool)> {
        list.iter().map(|&(at, node, round, ok)| (at, node.to_string(), round, ok)).collect()
    }

    #[test]
    fn a_writer_sends_on_each_timer_until_it_stops_and_an_older_round_landing_late_is_refused() {
        let downstream = Downstream::default();
        downstream.start_key_writes(writer("a", 1, 1_000, None));
        downstream.start_key_writes(writer("b", 2, 2_500, None));
        downstream.stop_key_writes("a", "a-1", 0, 1, Duration::from_millis(4_500));
        downstream.stop_key_writes("b", "b-1", 0, 2, Duration::from_millis(4_600));
        let want = [
            (1_000, "a", 1, true),
            (2_000, "a", 1, true),
            (2_500, "b", 2, true),
            (3_000, "a", 1, false),
            (3_500, "b", 2, true),
            (4_000, "a", 1, false),
            (4_500, "b", 2, true),
        ];
        assert_eq!(landed(&downstream, &[]), writes(&want));
    }

    #[test]
    fn a_pause_holds_the_next_write_and_a_crash_ends_a_writer_that_could_not_say_so() {
        let downstream = Downstream::default();
        downstream.start_key_writes(writer("a", 1, 1_000, None));
        let history = [
            Entry { at_us: 1_500 * MS, node: "a".into(), event: Event::Paused { until_us: 4_200 * MS } },
            Entry { at_us: 5_700 * MS, node: "a".into(), event: Event::Crashed },
        ];
        assert_eq!(
            landed(&downstream, &history),
            writes(&[(1_000, "a", 1, true), (4_200, "a", 1, true), (5_200, "a", 1, true)])
        );
    }

    #[test]
    fn a_writer_stopped_before_its_first_write_sends_nothing_and_delays_stay_within_the_bound() {
        let downstream = Downstream::default();
        downstream.start_key_writes(writer("a", 1, 1_000, Some(1_000)));
        let far = KeyWriter { latency_max: Duration::from_millis(800), ..writer("b", 1, 0, Some(9_000)) };
        downstream.start_key_writes(far);
        let landed = landed(&downstream, &[]);
        assert!(landed.iter().all(|(_, node, _, _)| node == "b"), "{landed:?}");
        assert_eq!(landed.len(), 9);
        let mut sent: Vec<u64> = (0..9).map(|i| i * 1_000).collect();
        let mut lands: Vec<u64> = landed.iter().map(|&(at, ..)| at).collect();
        lands.sort_unstable();
        sent.sort_unstable();
        assert!(lands.iter().zip(&sent).all(|(lands, sent)| (*sent..=sent + 800).contains(lands)), "{lands:?}");
    }
}
