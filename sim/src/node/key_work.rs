//! The work a node runs for a key or a term: it records when it starts and
//! stops acting, and writes to the fenced downstream with writes in flight.

use super::*;

/// What a keyed member's work tells the node's recorder.
pub(super) enum Note {
    /// An event, stamped with the simulated time it happened.
    Event(Duration, Event),
    /// A fenced write sent downstream at `sent`.
    Write { key: u32, round: u64, incarnation: String, sent: Duration },
}

/// Keeps the fenced downstream's delays apart from the member's own draws.
pub(super) const FENCED_DELAYS: u64 = 0xfe0c_ed0d_e1a7_5eed;

/// One key being acted on: recorded when made and when dropped, however
/// the work ends (seeing the cancellation, or aborted by its member).
pub(super) struct Acting {
    pub(super) events: tokio::sync::mpsc::UnboundedSender<Note>,
    pub(super) key: u32,
    pub(super) round: u64,
    pub(super) incarnation: String,
    /// Whether the work saw its right to act cancelled and wound down; a
    /// drop before then is an abort.
    pub(super) wound_down: bool,
}

impl Acting {
    pub(super) fn start(
        events: tokio::sync::mpsc::UnboundedSender<Note>,
        key: u32,
        round: u64,
        incarnation: String,
    ) -> Acting {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        let _ = events.send(Note::Event(now, Event::KeyStarted { key, round, incarnation: incarnation.clone() }));
        Acting { events, key, round, incarnation, wound_down: false }
    }

    /// Sends one fenced write for the key, at its round.
    pub(super) fn write(&self) {
        let sent = turmoil::sim_elapsed().unwrap_or_default();
        let (key, round, incarnation) = (self.key, self.round, self.incarnation.clone());
        let _ = self.events.send(Note::Write { key, round, incarnation, sent });
    }
}

impl Drop for Acting {
    fn drop(&mut self) {
        // A crash drops the work with its host; the crash itself closes the
        // interval then, so a drop outside the simulation's time records
        // nothing.
        if let Some(now) = turmoil::sim_elapsed() {
            let incarnation = std::mem::take(&mut self.incarnation);
            let event = Event::KeyStopped { key: self.key, round: self.round, incarnation, aborted: !self.wound_down };
            let _ = self.events.send(Note::Event(now, event));
        }
    }
}

/// The leader-only work: write downstream every `write_every_ms` with the
/// term's generation until the context is cancelled.
pub(super) struct Workload {
    pub(super) spec: WorkloadSpec,
    pub(super) clock: Arc<SimClock>,
    pub(super) history: History,
    pub(super) downstream: Downstream,
    pub(super) node: String,
}

impl Workload {
    pub(super) async fn run(self, ctx: LeaderContext, lease: Lease) {
        use hoplock::clock::Clock;
        let generation = lease.generation.get();
        self.history.record_now(&self.node, Event::Acquired { generation });
        let every = Duration::from_millis(self.spec.write_every_ms.max(1));
        let start = self.clock.now();
        let release_at = self.spec.release_after_ms.map(|ms| start + Duration::from_millis(ms));
        let mut next_write = start;
        let mut stop_writing_at = None;
        loop {
            let release = async {
                match release_at {
                    Some(at) if stop_writing_at.is_none() => self.clock.sleep_until(at).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = ctx.cancelled(), if stop_writing_at.is_none() => {
                    self.history.record_now(&self.node, Event::Stepped { generation, reason: StepReason::Cancelled });
                    if self.spec.ignore_cancellation_ms == 0 {
                        return;
                    }
                    // A callback that ignores cancellation: it keeps writing
                    // for a while, unfenced but for the downstream's check.
                    stop_writing_at = Some(self.clock.now() + Duration::from_millis(self.spec.ignore_cancellation_ms));
                }
                () = release => {
                    self.history.record_now(&self.node, Event::Stepped { generation, reason: StepReason::Released });
                    return;
                }
                () = self.clock.sleep_until(next_write) => {
                    if stop_writing_at.is_some_and(|stop| self.clock.now() >= stop) {
                        return;
                    }
                    // The write is on its way now; it lands after its
                    // latency whatever happens to the context meanwhile.
                    let latency = Duration::from_millis(self.spec.write_latency_ms);
                    if !latency.is_zero() {
                        self.clock.sleep_until(self.clock.now() + latency).await;
                    }
                    self.downstream.write(&self.history, &self.node, generation);
                    next_write = next_write + every;
                }
            }
        }
    }
}

/// Key `k{n}`'s number `n` (`u32::MAX` for a name the world never uses).
pub(super) fn key_number(key: &str) -> u32 {
    key.strip_prefix('k').and_then(|i| i.parse().ok()).unwrap_or(u32::MAX)
}

/// The right to act for one key, as either protocol hands it out.
pub(super) trait KeyRight: Send + 'static {
    fn is_cancelled(&self) -> bool;
    fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send;
}

impl KeyRight for KeyContext {
    fn is_cancelled(&self) -> bool {
        KeyContext::is_cancelled(self)
    }

    fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send {
        KeyContext::cancelled(self)
    }
}

impl KeyRight for LeaderContext {
    fn is_cancelled(&self) -> bool {
        LeaderContext::is_cancelled(self)
    }

    fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send {
        LeaderContext::cancelled(self)
    }
}

/// What a key's work does in a keyed world, under either protocol.
#[derive(Clone)]
pub(super) struct KeyWork {
    pub(super) clock: Arc<SimClock>,
    pub(super) work_stop: Duration,
    pub(super) ignores_cancellation: bool,
    pub(super) fenced_keys: u32,
    pub(super) write_every: Duration,
}

impl KeyWork {
    pub(super) fn new(keyed: &KeyedSpec, clock: Arc<SimClock>) -> KeyWork {
        KeyWork {
            clock,
            work_stop: Duration::from_millis(keyed.work_stop_ms),
            ignores_cancellation: keyed.work_ignores_cancellation,
            fenced_keys: keyed.fenced_keys,
            write_every: Duration::from_millis(keyed.fenced_every_ms),
        }
    }

    /// Acts for the key until `right` is cancelled, then winds down.
    pub(super) fn run(
        self,
        acting: Acting,
        right: impl KeyRight,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let work = self;
        async move {
            use hoplock::clock::Clock;
            if work.ignores_cancellation {
                // Careless work: it never looks at its right to act, and
                // only its member's abort at the end of the term stops it.
                let _ = &right;
                loop {
                    if acting.key < work.fenced_keys {
                        acting.write();
                    }
                    work.clock.sleep_until(work.clock.now() + work.write_every).await;
                }
            }
            if acting.key < work.fenced_keys {
                // Writes as a careful user's work does: only while the
                // right to act for the key holds. One wait for the
                // cancellation serves every write, rather than a new one
                // (with its own timer at the term's end) per write.
                let cancelled = right.cancelled();
                tokio::pin!(cancelled);
                while !right.is_cancelled() {
                    acting.write();
                    tokio::select! {
                        biased;
                        () = &mut cancelled => break,
                        () = work.clock.sleep_until(work.clock.now() + work.write_every) => {}
                    }
                }
            } else {
                right.cancelled().await;
            }
            // Real work takes a while to wind down; the member waits for it
            // before the key may move.
            work.clock.sleep_until(work.clock.now() + work.work_stop).await;
            let mut acting = acting;
            acting.wound_down = true;
            drop(acting);
        }
    }
}

/// Starts the node's recorder: it writes what the key work reports into
/// the history, and delivers fenced writes downstream after a delay drawn
/// from the seed.
pub(super) fn spawn_recorder(
    context: &NodeContext,
    keyed: &KeyedSpec,
    wire: Arc<SimClock>,
    delays_seed: u64,
) -> tokio::sync::mpsc::UnboundedSender<Note> {
    // Key work runs on tokio tasks that must be Send, and the history is
    // not: the work sends what it saw, stamped with the simulated time,
    // and this local task records it.
    let (events, mut received) = tokio::sync::mpsc::unbounded_channel::<Note>();
    let (history, node, downstream) = (context.history.clone(), context.spec.name.clone(), context.downstream.clone());
    let latency_ms = keyed.fenced_latency_ms;
    let wire_queue = Rc::new(WireQueue::default());
    spawn_wire(wire_queue.clone(), wire.clone(), history.clone(), node.clone(), downstream);
    tokio::task::spawn_local(async move {
        use hoplock::clock::Clock;
        // Drawn here, in the order the notes arrive, so every run of a
        // seed draws the same delays.
        let mut delays = delays_seed;
        while let Some(note) = received.recv().await {
            match note {
                Note::Event(at, event) => history.record(at, &node, event),
                Note::Write { key, round, incarnation, sent } => {
                    let delay = Duration::from_millis(splitmix64(&mut delays) % (latency_ms + 1));
                    let sent_us = u64::try_from(sent.as_micros()).unwrap_or(u64::MAX);
                    wire_queue.push(wire.now() + delay, InFlight { key, round, incarnation, sent_us });
                }
            }
        }
    });
    events
}

/// A fenced write on its way downstream.
struct InFlight {
    key: u32,
    round: u64,
    incarnation: String,
    sent_us: u64,
}

/// The node's fenced writes in flight, by when they land (on the node's
/// clock) and then in the order they were sent.
#[derive(Default)]
struct WireQueue {
    writes: std::cell::RefCell<std::collections::BTreeMap<(hoplock::clock::Instant, u64), InFlight>>,
    sent: Cell<u64>,
    /// Wakes the wire when a write lands sooner than the one it waits for.
    arrived: tokio::sync::Notify,
}

impl WireQueue {
    fn push(&self, lands: hoplock::clock::Instant, write: InFlight) {
        let order = self.sent.get();
        self.sent.set(order + 1);
        let sooner = self.writes.borrow().first_key_value().is_none_or(|((first, _), _)| lands < *first);
        self.writes.borrow_mut().insert((lands, order), write);
        if sooner {
            self.arrived.notify_one();
        }
    }
}

/// The wire itself: one task, with one timer at the next landing, rather
/// than a task and a timer per write. Timed on the node's clock, whose
/// timers the runner knows of; a pause of the node holds the writes back
/// too, which only makes them later.
fn spawn_wire(queue: Rc<WireQueue>, wire: Arc<SimClock>, history: History, node: String, downstream: Downstream) {
    tokio::task::spawn_local(async move {
        use hoplock::clock::Clock;
        loop {
            let next = queue.writes.borrow().first_key_value().map(|((lands, _), _)| *lands);
            let Some(lands) = next else {
                queue.arrived.notified().await;
                continue;
            };
            tokio::select! {
                biased;
                () = queue.arrived.notified() => continue,
                () = wire.sleep_until(lands) => {}
            }
            let now = wire.now();
            loop {
                let write = {
                    let mut writes = queue.writes.borrow_mut();
                    match writes.first_entry() {
                        Some(entry) if entry.key().0 <= now => entry.remove(),
                        _ => break,
                    }
                };
                downstream.write_key(&history, &node, write.key, write.round, write.incarnation, write.sent_us);
            }
        }
    });
}
