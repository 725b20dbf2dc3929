//! The work a node runs for a key or a term: it records when it starts and
//! stops acting, and writes to the fenced downstream with writes in flight.

use super::*;

/// What a keyed member's work tells the node's recorder.
pub(super) enum Note {
    /// An event, stamped with the simulated time it happened.
    Event(Duration, Event),
    /// A fenced key's work sends its first write at `from` and one more
    /// each time its timer of `every` (in true time) fires.
    WritesStarted { key: u32, round: u64, incarnation: String, from: Duration, every: Duration },
    /// The work sends nothing from `at` on.
    WritesStopped { key: u32, round: u64, incarnation: String, at: Duration },
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
    /// Whether the work is writing to the fenced downstream.
    writing: bool,
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
        Acting { events, key, round, incarnation, wound_down: false, writing: false }
    }

    /// Starts writing the key at its round: one write now and one each
    /// `every` (true time) until [`Acting::stop_writing`] or the drop.
    pub(super) fn start_writing(&mut self, every: Duration) {
        let from = turmoil::sim_elapsed().unwrap_or_default();
        let (key, round, incarnation) = (self.key, self.round, self.incarnation.clone());
        self.writing = self.events.send(Note::WritesStarted { key, round, incarnation, from, every }).is_ok();
    }

    /// Sends no more writes. Outside the simulation's time (a crash drops
    /// the work with its host) it says nothing: the downstream reads the
    /// crash from the history.
    pub(super) fn stop_writing(&mut self) {
        if !std::mem::take(&mut self.writing) {
            return;
        }
        if let Some(at) = turmoil::sim_elapsed() {
            let (key, round, incarnation) = (self.key, self.round, self.incarnation.clone());
            let _ = self.events.send(Note::WritesStopped { key, round, incarnation, at });
        }
    }
}

impl Drop for Acting {
    fn drop(&mut self) {
        // Aborted work stops writing here.
        self.stop_writing();
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
    /// How long the work's timer between two writes takes, in true time.
    pub(super) write_every: Duration,
}

impl KeyWork {
    pub(super) fn new(keyed: &KeyedSpec, clock: Arc<SimClock>) -> KeyWork {
        let write_every = clock.true_duration(Duration::from_millis(keyed.fenced_every_ms.max(1)));
        KeyWork {
            clock,
            work_stop: Duration::from_millis(keyed.work_stop_ms),
            ignores_cancellation: keyed.work_ignores_cancellation,
            fenced_keys: keyed.fenced_keys,
            write_every,
        }
    }

    /// Acts for the key until `right` is cancelled, then winds down.
    ///
    /// A fenced key's work writes every `write_every` while it acts. It
    /// does not wake for each write: it tells the downstream when it starts
    /// and stops writing, and the downstream works the writes out after the
    /// run as this work's timer would have sent them (see
    /// [`crate::downstream`]).
    pub(super) fn run(
        self,
        mut acting: Acting,
        right: impl KeyRight,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let work = self;
        async move {
            use hoplock::clock::Clock;
            let fenced = acting.key < work.fenced_keys;
            if work.ignores_cancellation {
                // Careless work: it never looks at its right to act, and
                // only its member's abort at the end of the term stops it
                // (and its writes, as the drop says).
                let _ = &right;
                if fenced {
                    acting.start_writing(work.write_every);
                }
                let never: std::convert::Infallible = std::future::pending().await;
                match never {}
            }
            // Writes as a careful user's work does: only while the right to
            // act for the key holds.
            if fenced && !right.is_cancelled() {
                acting.start_writing(work.write_every);
            }
            right.cancelled().await;
            acting.stop_writing();
            // Real work takes a while to wind down; the member waits for it
            // before the key may move.
            work.clock.sleep_until(work.clock.now() + work.work_stop).await;
            acting.wound_down = true;
            drop(acting);
        }
    }
}

/// Starts the node's recorder: it writes what the key work reports into
/// the history, and tells the downstream when fenced keys start and stop
/// writing.
pub(super) fn spawn_recorder(
    context: &NodeContext,
    keyed: &KeyedSpec,
    delays_seed: u64,
) -> tokio::sync::mpsc::UnboundedSender<Note> {
    // Key work runs on tokio tasks that must be Send, and the history is
    // not: the work sends what it saw, stamped with the simulated time,
    // and this local task records it.
    let (events, mut received) = tokio::sync::mpsc::unbounded_channel::<Note>();
    let (history, node, downstream) = (context.history.clone(), context.spec.name.clone(), context.downstream.clone());
    let latency_max = Duration::from_millis(keyed.fenced_latency_ms);
    tokio::task::spawn_local(async move {
        while let Some(note) = received.recv().await {
            match note {
                Note::Event(at, event) => history.record(at, &node, event),
                Note::WritesStarted { key, round, incarnation, from, every } => {
                    let node = node.clone();
                    let writer =
                        KeyWriter { node, incarnation, key, round, from, every, latency_max, delays_seed, until: None };
                    downstream.start_key_writes(writer);
                }
                Note::WritesStopped { key, round, incarnation, at } => {
                    downstream.stop_key_writes(&node, &incarnation, key, round, at);
                }
            }
        }
    });
    events
}
