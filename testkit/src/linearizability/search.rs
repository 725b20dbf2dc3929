//! The memoised just-in-time search (see the module documentation of
//! [`super`] for the why).

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::{Call, Counterexample, HistoryError, Operation, Outcome, Reply, Time, Verdict, Version};

/// Abstract state id of the missing key.
const MISSING: u32 = 0;
/// Abstract state id shared by every version that no operation ever
/// observes (no read returns it, no conditional write expects it): such
/// versions are indistinguishable to the rest of the history.
const ANON: u32 = 1;
/// Marks "no return entry" for an indeterminate operation.
const NONE: u32 = u32::MAX;

/// A precondition on the abstract state.
#[derive(Debug, Clone, Copy)]
enum Guard {
    Any,
    Is(u32),
    IsNot(u32),
}

impl Guard {
    fn admits(self, state: u32) -> bool {
        match self {
            Guard::Any => true,
            Guard::Is(s) => state == s,
            Guard::IsNot(s) => state != s,
        }
    }
}

/// Where an operation's "linearized" bit lives.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Completed(u32),
    Indeterminate(u32),
}

/// One operation compiled against the abstract state.
#[derive(Debug, Clone, Copy)]
struct Step {
    /// Position in the caller's history.
    input: u32,
    invoke: Time,
    guard: Guard,
    /// The state it installs, or `None` if it leaves the state alone.
    effect: Option<u32>,
    slot: Slot,
    /// Completed: its call entry in the event list. Indeterminate: its node
    /// in its group's list (equal to its indeterminate index).
    entry: u32,
    /// Completed: its return entry in the event list.
    return_entry: u32,
}

/// A hasher for the memo's word slices: cheap, decent, and deterministic.
#[derive(Default)]
struct WordHasher(u64);

impl WordHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(23) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_ne_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_ne_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.mix(word);
    }

    fn write_usize(&mut self, word: usize) {
        self.mix(word as u64);
    }

    fn finish(&self) -> u64 {
        // Spread the low bits into the high ones, which the table uses too.
        let mut h = self.0;
        h ^= h >> 32;
        h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
        h ^ (h >> 29)
    }
}

/// The version whose presence `step` tests for, if it matters: an
/// indeterminate write of an unobserved version (`ANON`) does not count, since
/// whether it can fire only decides between a dead version and `ANON`, which
/// are alike.
fn observes(step: &Step) -> Option<u32> {
    match step.guard {
        Guard::Is(x) | Guard::IsNot(x) if x > ANON => {
            let lost = matches!(step.slot, Slot::Indeterminate(_));
            (!lost || step.effect != Some(ANON)).then_some(x)
        }
        _ => None,
    }
}

type Memo = HashSet<Box<[u64]>, BuildHasherDefault<WordHasher>>;

mod validate;
pub(super) use validate::{replay, validate};

/// The search over one validated history.
///
/// Completed operations live in a doubly linked list of call and return
/// entries sorted by time (calls first at equal times). Indeterminate writes
/// have no return, so they never bound the candidates. They live instead in
/// groups of writes with the same guard and the same effect, each group a
/// list sorted by invocation, and the groups are indexed by guard, so that
/// in a given state only the writes that could take effect are looked at (an
/// indeterminate `update(e -> v)` costs nothing while the key does not hold
/// `e`). Within a group only the first write is ever a candidate: two
/// writes with the same guard and effect that are both invoked are
/// interchangeable for the rest of the search, so trying the second after
/// the first failed would only repeat the same subtree. This matters for
/// lost writes of versions nobody observed, which all share one effect.
pub(super) struct Search {
    steps: Vec<Step>,
    initial: u32,
    completed: usize,
    /// `next`/`prev` of the event list; entry 0 is the head sentinel and
    /// entry `tail` the tail sentinel.
    next: Vec<u32>,
    prev: Vec<u32>,
    /// For each entry: `step << 1 | is_return`.
    entry: Vec<u32>,
    entry_time: Vec<Time>,
    tail: u32,
    /// Links of the groups of indeterminate writes. Nodes below
    /// `indeterminate` are operations; node `indeterminate + g` is the
    /// sentinel of group `g`.
    ind_next: Vec<u32>,
    ind_prev: Vec<u32>,
    ind_step: Vec<u32>,
    indeterminate: u32,
    /// The sentinels of the groups guarded by state `s` are
    /// `groups[group_start[s]..group_start[s + 1]]`; index `states` holds
    /// the unconditional writes.
    group_start: Vec<u32>,
    groups: Vec<u32>,
    states: u32,
    /// For each abstract state, how many operations not yet linearized have
    /// a guard that tests for it.
    observers: Vec<u32>,
    /// Linearized completed operations, by completed index; the unused bits
    /// of the last word are set so that "all done" means all words full.
    done: Vec<u64>,
    /// All words before this one are full, and this one is not.
    full: usize,
    /// Linearized indeterminate operations, by indeterminate index.
    taken: Vec<u64>,
    /// For each completed index `i`, the word holding the last completed
    /// operation invoked no later than `i` returned.
    reach_word: Vec<u32>,
}

/// Where the search is in the candidates of the current node.
#[derive(Debug, Clone, Copy)]
enum Cursor {
    /// At a node not yet looked at: first look for a completed read or
    /// refusal that fits the state, which dominates every other candidate.
    Fresh,
    /// At an entry of the event list.
    Events(u32),
    /// At position `pos` of the groups of indeterminate writes guarded by
    /// the current state (`any == false`) or of the unconditional ones,
    /// taking only writes invoked no later than `horizon`, the first pending
    /// response.
    Indeterminate { any: bool, pos: u32, horizon: Time },
}

impl Search {
    /// Compiles a validated history.
    pub(super) fn new(history: &[Operation], initial: Option<Version>) -> Self {
        // Versions that something observes get their own abstract id; all
        // others collapse into ANON. The BTreeMap keeps ids deterministic.
        let mut observed: BTreeMap<Version, u32> = BTreeMap::new();
        for op in history {
            let seen = match (op.call, op.reply) {
                (Call::Read, Reply::Received { outcome: Outcome::Value(v), .. }) => Some(v),
                (Call::Update { expected, .. } | Call::Delete { expected }, _) => Some(expected),
                _ => None,
            };
            if let Some(v) = seen {
                let next_id = ANON + 1 + observed.len() as u32;
                observed.entry(v).or_insert(next_id);
            }
        }
        let abs = |v: Version| observed.get(&v).copied().unwrap_or(ANON);
        let states = ANON + 1 + observed.len() as u32;

        // Indeterminate reads constrain nothing: drop them.
        let mut order: Vec<u32> = (0..history.len() as u32)
            .filter(|&i| {
                let op = &history[i as usize];
                op.call.is_write() || op.response().is_some()
            })
            .collect();
        order.sort_by_key(|&i| (history[i as usize].invoke, i));

        let mut steps = Vec::with_capacity(order.len());
        let mut completed_invokes: Vec<Time> = Vec::new();
        let mut completed_responses: Vec<Time> = Vec::new();
        let mut ind_step: Vec<u32> = Vec::new();
        // (time, is_return, step)
        let mut events: Vec<(Time, bool, u32)> = Vec::with_capacity(order.len() * 2);
        for (k, &i) in order.iter().enumerate() {
            let op = &history[i as usize];
            let applied = op.outcome() != Some(Outcome::Refused);
            let (guard, effect) = match (op.call, applied) {
                (Call::Read, _) => match op.outcome() {
                    Some(Outcome::Value(v)) => (Guard::Is(abs(v)), None),
                    _ => (Guard::Is(MISSING), None),
                },
                (Call::Create { value }, true) => (Guard::Is(MISSING), Some(abs(value))),
                (Call::Create { .. }, false) => (Guard::IsNot(MISSING), None),
                (Call::Update { expected, new }, true) => (Guard::Is(abs(expected)), Some(abs(new))),
                (Call::Update { expected, .. }, false) => (Guard::IsNot(abs(expected)), None),
                (Call::Delete { expected }, true) => (Guard::Is(abs(expected)), Some(MISSING)),
                (Call::Delete { expected }, false) => (Guard::IsNot(abs(expected)), None),
                (Call::Put { value }, _) => (Guard::Any, Some(abs(value))),
                (Call::Remove, _) => (Guard::Any, Some(MISSING)),
            };
            let (slot, entry) = match op.response() {
                Some(at) => {
                    events.push((op.invoke, false, k as u32));
                    events.push((at, true, k as u32));
                    completed_invokes.push(op.invoke);
                    completed_responses.push(at);
                    (Slot::Completed(completed_invokes.len() as u32 - 1), 0)
                }
                None => {
                    ind_step.push(k as u32);
                    let node = ind_step.len() as u32 - 1;
                    (Slot::Indeterminate(node), node)
                }
            };
            steps.push(Step { input: i, invoke: op.invoke, guard, effect, slot, entry, return_entry: NONE });
        }

        // Calls sort before returns at equal times: operations whose
        // intervals merely touch count as concurrent, the permissive choice.
        events.sort_unstable();
        let tail = events.len() as u32 + 1;
        let mut entry = vec![0u32; events.len() + 2];
        let mut entry_time = vec![Time::MAX; events.len() + 2];
        for (e, &(time, is_return, k)) in events.iter().enumerate() {
            let e = e as u32 + 1;
            entry[e as usize] = k << 1 | u32::from(is_return);
            entry_time[e as usize] = time;
            let step = &mut steps[k as usize];
            if is_return {
                step.return_entry = e;
            } else {
                step.entry = e;
            }
        }
        let next: Vec<u32> = (1..=tail).chain([tail]).collect();
        let prev: Vec<u32> = [0].into_iter().chain(0..tail).collect();

        // Group the indeterminate writes by (guard, effect), each group a
        // list circular through its sentinel, and index the groups by guard.
        let indeterminate = ind_step.len() as u32;
        let mut group_of: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        let mut group_guard: Vec<u32> = Vec::new();
        let mut node_group: Vec<u32> = Vec::with_capacity(ind_step.len());
        for &k in &ind_step {
            let step = &steps[k as usize];
            let guard = match step.guard {
                Guard::Is(s) => s,
                Guard::Any | Guard::IsNot(_) => states,
            };
            let effect = step.effect.unwrap_or(u32::MAX);
            let fresh = group_guard.len() as u32;
            let g = *group_of.entry((guard, effect)).or_insert(fresh);
            if g == fresh {
                group_guard.push(guard);
            }
            node_group.push(g);
        }
        let mut ind_next: Vec<u32> = (0..indeterminate + group_guard.len() as u32).collect();
        let mut ind_prev = ind_next.clone();
        for (node, &g) in node_group.iter().enumerate() {
            let node = node as u32;
            let sentinel = indeterminate + g;
            let last = ind_prev[sentinel as usize];
            ind_next[last as usize] = node;
            ind_prev[node as usize] = last;
            ind_next[node as usize] = sentinel;
            ind_prev[sentinel as usize] = node;
        }
        let mut by_guard: Vec<u32> = (0..group_guard.len() as u32).collect();
        by_guard.sort_by_key(|&g| (group_guard[g as usize], g));
        let groups: Vec<u32> = by_guard.iter().map(|&g| indeterminate + g).collect();
        let mut group_start = vec![0u32; states as usize + 2];
        for &guard in &group_guard {
            group_start[guard as usize + 1] += 1;
        }
        for i in 1..group_start.len() {
            group_start[i] += group_start[i - 1];
        }

        let completed = completed_invokes.len();
        let mut done = vec![0u64; completed.div_ceil(64)];
        if let Some(last) = done.last_mut()
            && !completed.is_multiple_of(64)
        {
            *last = !0u64 << (completed % 64);
        }
        let reach_word = completed_responses
            .iter()
            .map(|&r| {
                let last = completed_invokes.partition_point(|&inv| inv <= r).saturating_sub(1);
                (last / 64) as u32
            })
            .collect();

        let mut observers = vec![0u32; states as usize];
        for step in &steps {
            if let Some(x) = observes(step) {
                observers[x as usize] += 1;
            }
        }

        Search {
            observers,
            steps,
            initial: initial.map_or(MISSING, abs),
            completed,
            next,
            prev,
            entry,
            entry_time,
            tail,
            ind_next,
            ind_prev,
            ind_step,
            indeterminate,
            group_start,
            groups,
            states,
            done,
            full: 0,
            taken: vec![0u64; (indeterminate as usize).div_ceil(64)],
            reach_word,
        }
    }

    /// Adds `step` to the linearized set.
    fn set(&mut self, step: Step) {
        if let Some(x) = observes(&step) {
            self.observers[x as usize] -= 1;
        }
        match step.slot {
            Slot::Completed(c) => {
                let w = c as usize / 64;
                self.done[w] |= 1 << (c % 64);
                if w == self.full {
                    while self.done.get(self.full) == Some(&!0) {
                        self.full += 1;
                    }
                }
            }
            Slot::Indeterminate(c) => self.taken[c as usize / 64] |= 1 << (c % 64),
        }
    }

    /// Removes `step` from the linearized set.
    fn clear(&mut self, step: Step) {
        if let Some(x) = observes(&step) {
            self.observers[x as usize] += 1;
        }
        match step.slot {
            Slot::Completed(c) => {
                let w = c as usize / 64;
                self.done[w] &= !(1 << (c % 64));
                self.full = self.full.min(w);
            }
            Slot::Indeterminate(c) => self.taken[c as usize / 64] &= !(1 << (c % 64)),
        }
    }

    /// Writes the memo key of the current linearized set with `state` into
    /// `key`. Completed operations are encoded as a window: every word before
    /// the first unlinearized one is full, and no linearized operation lies
    /// beyond the last one invoked before that operation's response, so only
    /// the words in between vary. Indeterminate operations are kept whole.
    ///
    /// A version that no remaining operation tests for is as good as any
    /// other unobserved version from here on ("dead"), so the state is keyed
    /// as `ANON` when it holds one.
    fn key(&self, state: u32, key: &mut Vec<u64>) {
        key.clear();
        let state = self.canonical(state);
        key.push(u64::from(state) | (self.full as u64) << 32);
        if let Some(&word) = self.done.get(self.full) {
            let lo = self.full * 64 + word.trailing_ones() as usize;
            let end = self.reach_word.get(lo).map_or(self.full, |&w| w as usize);
            if let Some(window) = self.done.get(self.full..=end.max(self.full)) {
                key.extend_from_slice(window);
            }
        }
        key.extend_from_slice(&self.taken);
    }

    /// `s`, or `ANON` if it is a version nothing remaining tests for.
    fn canonical(&self, s: u32) -> u32 {
        if s > ANON && self.observers[s as usize] == 0 { ANON } else { s }
    }

    fn lift(&mut self, step: Step) {
        if step.return_entry == NONE {
            let (p, n) = (self.ind_prev[step.entry as usize], self.ind_next[step.entry as usize]);
            self.ind_next[p as usize] = n;
            self.ind_prev[n as usize] = p;
        } else {
            self.unlink(step.entry);
            self.unlink(step.return_entry);
        }
    }

    fn unlift(&mut self, step: Step) {
        if step.return_entry == NONE {
            let node = step.entry;
            let (p, n) = (self.ind_prev[node as usize], self.ind_next[node as usize]);
            self.ind_next[p as usize] = node;
            self.ind_prev[n as usize] = node;
        } else {
            self.relink(step.return_entry);
            self.relink(step.entry);
        }
    }

    fn unlink(&mut self, e: u32) {
        let (p, n) = (self.prev[e as usize], self.next[e as usize]);
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
    }

    fn relink(&mut self, e: u32) {
        let (p, n) = (self.prev[e as usize], self.next[e as usize]);
        self.next[p as usize] = e;
        self.prev[n as usize] = e;
    }

    /// The completed operations that may come next (input indices), and the
    /// completed operation that returns first among the unlinearized ones.
    fn frontier(&self) -> (Vec<usize>, Option<usize>) {
        let mut candidates = Vec::new();
        let mut e = self.next[0];
        while e != self.tail {
            let step = self.steps[(self.entry[e as usize] >> 1) as usize];
            if self.entry[e as usize] & 1 == 1 {
                return (candidates, Some(step.input as usize));
            }
            candidates.push(step.input as usize);
            e = self.next[e as usize];
        }
        (candidates, None)
    }

    /// The first candidate at `cursor` in `state`, as (step, cursor of the
    /// candidate after it), or `None` when the node has no more candidates.
    fn candidate(&self, mut cursor: Cursor, state: u32) -> Option<(u32, Cursor)> {
        loop {
            match cursor {
                Cursor::Fresh => {
                    let mut e = self.next[0];
                    while e != self.tail && self.entry[e as usize] & 1 == 0 {
                        let k = self.entry[e as usize] >> 1;
                        let step = &self.steps[k as usize];
                        if step.effect.is_none() && step.guard.admits(state) {
                            // Never resumed: a dominant step's failure is
                            // its node's failure.
                            return Some((k, Cursor::Fresh));
                        }
                        e = self.next[e as usize];
                    }
                    cursor = Cursor::Events(self.next[0]);
                }
                Cursor::Events(e) => {
                    let code = self.entry[e as usize];
                    if e != self.tail && code & 1 == 0 {
                        return Some((code >> 1, Cursor::Events(self.next[e as usize])));
                    }
                    cursor = Cursor::Indeterminate {
                        any: false,
                        pos: self.group_start[state as usize],
                        horizon: self.entry_time[e as usize],
                    };
                }
                Cursor::Indeterminate { any, pos, horizon } => {
                    let guard = if any { self.states } else { state };
                    let end = self.group_start[guard as usize + 1];
                    if pos < end {
                        let head = self.ind_next[self.groups[pos as usize] as usize];
                        let next = Cursor::Indeterminate { any, pos: pos + 1, horizon };
                        if head < self.indeterminate {
                            let k = self.ind_step[head as usize];
                            let step = &self.steps[k as usize];
                            if step.invoke <= horizon && step.guard.admits(state) && self.enables(step, state, horizon)
                            {
                                return Some((k, next));
                            }
                        }
                        cursor = next;
                    } else if any {
                        return None;
                    } else {
                        cursor =
                            Cursor::Indeterminate { any: true, pos: self.group_start[self.states as usize], horizon };
                    }
                }
            }
        }
    }

    /// Whether taking the indeterminate write `lost` in `state` would enable
    /// another candidate: one whose guard its effect satisfies and `state`
    /// does not. Only such placements need trying. In any linearization, a
    /// lost write followed by an operation it does not enable can be moved
    /// after that operation (if the operation has no effect and does not
    /// need the write) or dropped (if the operation overwrites it), until
    /// every lost write is followed by an operation it enables or is gone.
    fn enables(&self, lost: &Step, state: u32, horizon: Time) -> bool {
        let Some(value) = lost.effect else {
            return false;
        };
        if value == state {
            return false;
        }
        let mut e = self.next[0];
        while e != self.tail && self.entry[e as usize] & 1 == 0 {
            let guard = self.steps[(self.entry[e as usize] >> 1) as usize].guard;
            if guard.admits(value) && !guard.admits(state) {
                return true;
            }
            e = self.next[e as usize];
        }
        let start = self.group_start[value as usize] as usize;
        let end = self.group_start[value as usize + 1] as usize;
        self.groups[start..end].iter().any(|&sentinel| {
            let head = self.ind_next[sentinel as usize];
            head < self.indeterminate && self.steps[self.ind_step[head as usize] as usize].invoke <= horizon
        })
    }

    /// Runs the search for at most `max_steps` steps.
    pub(super) fn run(mut self, history: &[Operation], initial: Option<Version>, max_steps: u64) -> Verdict {
        struct Frame {
            step: u32,
            before: u32,
            /// The candidate after this one in the parent node.
            resume: Cursor,
        }

        let mut memo = Memo::default();
        let mut key = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut state = self.initial;
        let mut remaining = self.completed;
        let mut count: u64 = 0;

        // The first node with the most completed operations linearized, for
        // the report: none of its completed candidates fits its state (a
        // child through one would be further, and a memo hit on one would
        // mean an earlier node had been further).
        let mut best: Vec<u32> = Vec::new();
        let mut best_done = 0usize;
        let (mut best_candidates, mut best_blocking) = self.frontier();
        let mut low_water = 0usize;

        let mut cursor = Cursor::Fresh;
        loop {
            if remaining == 0 {
                let order = stack.iter().map(|f| self.steps[f.step as usize].input as usize).collect();
                return Verdict::Linearizable { order };
            }
            if count >= max_steps {
                return Verdict::Unknown { steps: count };
            }
            count += 1;

            let mut backtrack = true;
            if let Some((k, after_it)) = self.candidate(cursor, state) {
                let step = self.steps[k as usize];
                backtrack = false;
                cursor = after_it;
                if step.guard.admits(state) {
                    let after = step.effect.unwrap_or(state);
                    self.set(step);
                    self.key(after, &mut key);
                    if !memo.contains(key.as_slice()) {
                        memo.insert(key.as_slice().into());
                        stack.push(Frame { step: k, before: state, resume: after_it });
                        state = after;
                        self.lift(step);
                        if step.return_entry != NONE {
                            remaining -= 1;
                        }
                        if self.completed - remaining > best_done {
                            best_done = self.completed - remaining;
                            best.truncate(low_water);
                            best.extend(stack[low_water..].iter().map(|f| f.step));
                            low_water = stack.len();
                            (best_candidates, best_blocking) = self.frontier();
                        }
                        cursor = Cursor::Fresh;
                        continue;
                    }
                    self.clear(step);
                    // Already explored and failed. A step that never changes
                    // the state dominates its siblings, so the node fails too.
                    backtrack = step.effect.is_none();
                }
            }
            if !backtrack {
                continue;
            }

            // Undo the last choice and resume after it in its node; undo
            // dominant choices all the way up.
            loop {
                let Some(frame) = stack.pop() else {
                    let prefix: Vec<usize> = best.iter().map(|&k| self.steps[k as usize].input as usize).collect();
                    let concrete = replay(history, &prefix, initial);
                    return Verdict::NotLinearizable(Counterexample {
                        prefix,
                        state: concrete,
                        candidates: best_candidates,
                        blocking: best_blocking,
                    });
                };
                low_water = low_water.min(stack.len());
                let step = self.steps[frame.step as usize];
                self.unlift(step);
                self.clear(step);
                state = frame.before;
                if step.return_entry != NONE {
                    remaining += 1;
                }
                if step.effect.is_some() {
                    cursor = frame.resume;
                    break;
                }
            }
        }
    }
}
