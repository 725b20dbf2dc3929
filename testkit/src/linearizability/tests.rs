//! Hand-built histories, a brute-force oracle, and property tests over
//! histories produced by simulating a real atomic register.

use proptest::prelude::*;

use super::*;

// ---------------------------------------------------------------------------
// Helpers.

const NEVER_WRITTEN: Version = 1_000_000;

fn read(client: ClientId, invoke: Time, response: Time, value: Option<Version>) -> Operation {
    let outcome = value.map_or(Outcome::Missing, Outcome::Value);
    Operation::completed(client, Call::Read, invoke, response, outcome)
}

fn write(client: ClientId, call: Call, invoke: Time, response: Time, ok: bool) -> Operation {
    let outcome = if ok { Outcome::Ok } else { Outcome::Refused };
    Operation::completed(client, call, invoke, response, outcome)
}

fn create(value: Version) -> Call {
    Call::Create { value }
}

fn update(expected: Version, new: Version) -> Call {
    Call::Update { expected, new }
}

fn delete(expected: Version) -> Call {
    Call::Delete { expected }
}

fn put(value: Version) -> Call {
    Call::Put { value }
}

/// Checks `history` and, if it is linearizable, verifies the witness.
fn verdict(history: &[Operation]) -> Verdict {
    verdict_from(history, None)
}

fn verdict_from(history: &[Operation], initial: Option<Version>) -> Verdict {
    let verdict = Checker::new().initial_state(initial).check(history).expect("valid history");
    if let Verdict::Linearizable { order } = &verdict
        && let Err(why) = verify_witness(history, order, initial)
    {
        panic!("bad witness {order:?}: {why}\n{history:#?}");
    }
    verdict
}

fn linearizable(history: &[Operation]) -> bool {
    match verdict(history) {
        Verdict::Linearizable { .. } => true,
        Verdict::NotLinearizable(_) => false,
        Verdict::Unknown { steps } => panic!("gave up after {steps} steps"),
    }
}

fn order_of(history: &[Operation]) -> Vec<usize> {
    match verdict(history) {
        Verdict::Linearizable { order } => order,
        other => panic!("expected linearizable, got {other:?}"),
    }
}

/// The register's answer to `call` in `state`: the new state and whether
/// `outcome` (`None` for an indeterminate write, which must take effect when
/// placed in a witness) is what it would answer.
fn apply(state: Option<Version>, call: Call, outcome: Option<Outcome>) -> (Option<Version>, bool) {
    let (next, answer) = match call {
        Call::Read => (state, state.map_or(Outcome::Missing, Outcome::Value)),
        Call::Create { value } if state.is_none() => (Some(value), Outcome::Ok),
        Call::Update { expected, new } if state == Some(expected) => (Some(new), Outcome::Ok),
        Call::Delete { expected } if state == Some(expected) => (None, Outcome::Ok),
        Call::Put { value } => (Some(value), Outcome::Ok),
        Call::Remove => (None, Outcome::Ok),
        _ => (state, Outcome::Refused),
    };
    match outcome {
        Some(o) => (next, o == answer),
        None => (next, answer == Outcome::Ok),
    }
}

/// Independent check of a witness: every completed operation appears exactly
/// once, real time is respected, and a sequential register gives every
/// recorded answer.
fn verify_witness(history: &[Operation], order: &[usize], initial: Option<Version>) -> Result<(), String> {
    let mut seen = vec![false; history.len()];
    for &i in order {
        let slot = seen.get_mut(i).ok_or(format!("index {i} out of range"))?;
        if *slot {
            return Err(format!("operation {i} appears twice"));
        }
        *slot = true;
    }
    for (i, op) in history.iter().enumerate() {
        if op.response().is_some() && !seen[i] {
            return Err(format!("completed operation {i} is missing"));
        }
    }
    let mut latest_invoke = 0;
    for (pos, &i) in order.iter().enumerate() {
        let op = &history[i];
        if pos > 0 && op.response().is_some_and(|r| r < latest_invoke) {
            return Err(format!("operation {i} returned before an earlier one was invoked"));
        }
        latest_invoke = latest_invoke.max(op.invoke);
    }
    let mut state = initial;
    for &i in order {
        let op = &history[i];
        let (next, fits) = apply(state, op.call, op.outcome());
        if !fits {
            return Err(format!("operation {i} ({op}) does not fit state {state:?}"));
        }
        state = next;
    }
    Ok(())
}

/// Brute force: tries every ordering of every subset of operations that
/// contains all completed ones. Indeterminate operations placed in the order
/// may also be no-ops (refused), unlike in the checker's witnesses.
fn brute_force(history: &[Operation], initial: Option<Version>) -> bool {
    fn go(history: &[Operation], used: &mut Vec<bool>, order: &mut Vec<usize>, state: Option<Version>) -> bool {
        let all_completed = history.iter().zip(used.iter()).all(|(op, &u)| u || op.response().is_none());
        if all_completed {
            return true;
        }
        for i in 0..history.len() {
            if used[i] {
                continue;
            }
            let op = &history[i];
            if op.call == Call::Read && op.response().is_none() {
                continue;
            }
            // Real time: nothing already placed may have been invoked after
            // this one returned. Checking each operation against those placed
            // before it covers every pair.
            if order.iter().any(|&j| op.response().is_some_and(|r| r < history[j].invoke)) {
                continue;
            }
            let next = match op.outcome() {
                Some(o) => {
                    let (next, fits) = apply(state, op.call, Some(o));
                    if !fits {
                        continue;
                    }
                    next
                }
                // An indeterminate write placed here takes effect if its
                // condition holds, and is refused otherwise.
                None => apply(state, op.call, None).0,
            };
            used[i] = true;
            order.push(i);
            if go(history, used, order, next) {
                return true;
            }
            order.pop();
            used[i] = false;
        }
        false
    }
    go(history, &mut vec![false; history.len()], &mut Vec::new(), initial)
}

// ---------------------------------------------------------------------------
// Sequential histories.

#[test]
fn empty_history_is_linearizable() {
    assert_eq!(verdict(&[]), Verdict::Linearizable { order: vec![] });
}

#[test]
fn sequential_history_of_every_kind_is_linearizable() {
    let calls = [
        (Call::Read, Outcome::Missing),
        (update(1, 2), Outcome::Refused), // 404: key missing
        (delete(1), Outcome::Refused),
        (create(1), Outcome::Ok),
        (Call::Read, Outcome::Value(1)),
        (create(9), Outcome::Refused),
        (update(1, 2), Outcome::Ok),
        (Call::Read, Outcome::Value(2)),
        (update(1, 3), Outcome::Refused),
        (delete(1), Outcome::Refused),
        (delete(2), Outcome::Ok),
        (Call::Read, Outcome::Missing),
        (put(5), Outcome::Ok),
        (Call::Read, Outcome::Value(5)),
        (put(6), Outcome::Ok),
        (Call::Read, Outcome::Value(6)),
        (create(7), Outcome::Refused),
    ];
    let history: Vec<_> = calls
        .iter()
        .enumerate()
        .map(|(i, &(call, outcome))| {
            let t = 10 * i as Time;
            Operation::completed(i as ClientId % 3, call, t, t + 5, outcome)
        })
        .collect();
    assert_eq!(order_of(&history), (0..history.len()).collect::<Vec<_>>());
}

#[test]
fn read_of_a_value_never_written_is_not_linearizable() {
    assert!(!linearizable(&[read(1, 0, 1, Some(7))]));
    let history = [write(1, create(1), 0, 1, true), read(2, 2, 3, Some(7))];
    assert!(!linearizable(&history));
}

#[test]
fn stale_read_after_a_completed_write_is_not_linearizable() {
    let history = [write(1, put(1), 0, 1, true), write(1, put(2), 2, 3, true), read(2, 4, 5, Some(1))];
    let Verdict::NotLinearizable(cex) = verdict(&history) else {
        panic!("stale read accepted");
    };
    assert_eq!(cex.prefix, vec![0, 1]);
    assert_eq!(cex.state, Some(2));
    assert_eq!(cex.candidates, vec![2]);
    assert_eq!(cex.blocking, Some(2));
    let text = cex.explain(&history, 5);
    assert!(text.contains("holds 2"), "{text}");
    assert!(text.contains("#2: client 2 read [4, 5] -> value 1 (returned first)"), "{text}");
}

#[test]
fn missing_after_a_completed_create_is_not_linearizable() {
    let history = [write(1, create(1), 0, 1, true), read(2, 2, 3, None)];
    assert!(!linearizable(&history));
}

#[test]
fn two_sequential_winning_creates_are_not_linearizable() {
    let history = [write(1, create(1), 0, 1, true), write(2, create(2), 2, 3, true)];
    assert!(!linearizable(&history));
    // With a delete in between they are.
    let history = [write(1, create(1), 0, 1, true), write(1, delete(1), 2, 3, true), write(2, create(2), 4, 5, true)];
    assert_eq!(order_of(&history), vec![0, 1, 2]);
}

#[test]
fn update_against_a_stale_version_is_not_linearizable() {
    let history =
        [write(1, create(1), 0, 1, true), write(1, update(1, 2), 2, 3, true), write(2, update(1, 3), 4, 5, true)];
    assert!(!linearizable(&history));
}

#[test]
fn delete_with_a_wrong_version_is_not_linearizable() {
    let history = [write(1, create(1), 0, 1, true), write(2, delete(2), 2, 3, true)];
    assert!(!linearizable(&history));
}

#[test]
fn unjustified_refusals_are_not_linearizable() {
    // Create refused although the key is missing.
    assert!(!linearizable(&[write(1, create(1), 0, 1, false)]));
    // Update refused although the key holds the expected version.
    let history = [write(1, create(1), 0, 1, true), write(1, update(1, 2), 2, 3, false)];
    assert!(!linearizable(&history));
    // Delete refused although the key holds the expected version.
    let history = [write(1, create(1), 0, 1, true), write(1, delete(1), 2, 3, false)];
    assert!(!linearizable(&history));
}

#[test]
fn initial_state_is_configurable() {
    let history = [read(1, 0, 1, Some(5)), write(1, update(5, 6), 2, 3, true)];
    assert!(verdict_from(&history, Some(5)).is_linearizable());
    assert!(verdict_from(&history, None).is_violation());
    assert!(verdict_from(&[read(1, 0, 1, None)], Some(5)).is_violation());
}

#[test]
fn duplicate_versions_are_allowed() {
    let history = [
        write(1, put(1), 0, 1, true),
        write(1, put(2), 2, 3, true),
        write(1, put(1), 4, 5, true),
        read(2, 6, 7, Some(1)),
        write(2, update(1, 3), 8, 9, true),
    ];
    assert_eq!(order_of(&history), vec![0, 1, 2, 3, 4]);
}

// ---------------------------------------------------------------------------
// Concurrency.

#[test]
fn overlapping_creates_with_one_winner_are_linearizable() {
    let history = [write(1, create(1), 0, 10, false), write(2, create(2), 5, 15, true), read(3, 20, 30, Some(2))];
    // The winner must come first even though it was invoked later.
    assert_eq!(order_of(&history), vec![1, 0, 2]);
}

#[test]
fn overlapping_creates_with_two_winners_are_not_linearizable() {
    let history = [write(1, create(1), 0, 10, true), write(2, create(2), 5, 15, true)];
    assert!(!linearizable(&history));
}

#[test]
fn overlapping_creates_with_no_winner_are_not_linearizable() {
    let history = [write(1, create(1), 0, 10, false), write(2, create(2), 5, 15, false)];
    assert!(!linearizable(&history));
}

#[test]
fn a_read_overlapping_a_write_may_see_either_side() {
    let history = |seen| [write(1, put(1), 0, 10, true), write(1, put(2), 20, 40, true), read(2, 25, 30, seen)];
    assert_eq!(order_of(&history(Some(1))), vec![0, 2, 1]);
    assert_eq!(order_of(&history(Some(2))), vec![0, 1, 2]);
    assert!(!linearizable(&history(None)));
    assert!(!linearizable(&history(Some(3))));
}

#[test]
fn a_read_overlapping_a_create_may_see_either_side() {
    let history = |seen| [write(1, create(1), 0, 10, true), read(2, 5, 6, seen)];
    assert!(linearizable(&history(None)));
    assert!(linearizable(&history(Some(1))));
}

#[test]
fn operations_whose_intervals_touch_are_concurrent() {
    let history = |invoke| [write(1, create(1), 0, 10, true), read(2, invoke, 20, None)];
    assert!(linearizable(&history(10)));
    assert!(!linearizable(&history(11)));
}

#[test]
fn input_order_does_not_matter() {
    let history = [read(3, 20, 30, Some(2)), write(2, create(2), 5, 15, true), write(1, create(1), 0, 10, false)];
    assert_eq!(order_of(&history), vec![1, 2, 0]);
}

#[test]
fn a_chain_of_overlapping_updates_is_resolved() {
    // Four clients all try to update from 1; only the one that is read later
    // can have won, whatever their invocation order.
    let mut history = vec![write(0, create(1), 0, 1, true)];
    for c in 1..=4 {
        history.push(write(c, update(1, 10 + c), 10 + c, 50, c == 3));
    }
    history.push(read(9, 60, 70, Some(13)));
    let order = order_of(&history);
    assert_eq!(order.first(), Some(&0));
    assert_eq!(order.get(1), Some(&3));
}

// ---------------------------------------------------------------------------
// Indeterminate operations.

#[test]
fn an_indeterminate_write_seen_later_took_effect() {
    let history = [Operation::indeterminate(1, create(1), 0), read(2, 100, 110, Some(1))];
    assert_eq!(order_of(&history), vec![0, 1]);
}

#[test]
fn an_indeterminate_write_may_take_effect_long_after_its_invocation() {
    let history = [Operation::indeterminate(1, create(1), 0), read(2, 50, 60, None), read(2, 100, 110, Some(1))];
    assert_eq!(order_of(&history), vec![1, 0, 2]);

    let history = [
        Operation::indeterminate(1, put(1), 0),
        read(2, 10, 20, None),
        write(2, put(2), 30, 40, true),
        read(2, 50, 60, Some(1)),
    ];
    assert_eq!(order_of(&history), vec![1, 2, 0, 3]);
}

#[test]
fn an_indeterminate_write_cannot_be_undone() {
    // Seen, then gone without a delete.
    let history = [Operation::indeterminate(1, create(1), 0), read(2, 50, 60, Some(1)), read(2, 100, 110, None)];
    assert!(!linearizable(&history));
}

#[test]
fn an_indeterminate_write_may_be_omitted() {
    let history = [Operation::indeterminate(1, create(1), 0), read(2, 100, 110, None)];
    assert_eq!(order_of(&history), vec![1]);
}

#[test]
fn an_indeterminate_write_must_respect_its_condition() {
    // Create(1) could only have happened while the key was missing, which
    // would make the completed create(2) a loser.
    let history = |seen| {
        [Operation::indeterminate(1, create(1), 0), write(2, create(2), 10, 20, true), read(3, 30, 40, Some(seen))]
    };
    assert_eq!(order_of(&history(2)), vec![1, 2]);
    assert!(!linearizable(&history(1)));
}

#[test]
fn an_indeterminate_write_explains_a_refusal() {
    let history = [Operation::indeterminate(1, create(1), 0), write(2, create(2), 10, 20, false)];
    assert_eq!(order_of(&history), vec![0, 1]);
}

#[test]
fn rewriting_the_current_version_is_not_a_no_op() {
    // Put(3) while the key holds 3 changes nothing now, but the witness
    // needs it later, after the first update moved the key away from 3.
    let history = [
        Operation::indeterminate(0, create(3), 0),
        write(0, update(3, 1), 7, 7, true),
        Operation::indeterminate(0, put(3), 4),
        write(0, update(3, 1), 4, 4, true),
    ];
    assert_eq!(order_of(&history), vec![0, 3, 2, 1]);
}

#[test]
fn a_lost_delete_explains_a_second_winner() {
    let history =
        [write(1, create(1), 0, 1, true), Operation::indeterminate(1, delete(1), 2), write(2, create(2), 10, 11, true)];
    assert_eq!(order_of(&history), vec![0, 1, 2]);
}

#[test]
fn lost_writes_can_chain() {
    // Only the lost update explains the read, and only the lost create
    // enables the lost update.
    let history = [
        Operation::indeterminate(1, create(1), 0),
        Operation::indeterminate(2, update(1, 2), 5),
        read(3, 100, 110, Some(2)),
    ];
    assert_eq!(order_of(&history), vec![0, 1, 2]);
    // Without the create the update cannot happen.
    assert!(!linearizable(&history[1..]));
}

#[test]
fn an_indeterminate_read_is_ignored() {
    let history = [Operation::indeterminate(1, Call::Read, 0), write(2, create(2), 10, 20, true)];
    assert_eq!(order_of(&history), vec![1]);
}

// ---------------------------------------------------------------------------
// Errors, budget, recorder.

#[test]
fn a_response_before_the_invocation_is_an_error() {
    let history = [read(1, 0, 1, None), read(1, 10, 5, None)];
    assert_eq!(check(&history), Err(HistoryError::ResponseBeforeInvoke { index: 1, invoke: 10, response: 5 }));
}

#[test]
fn impossible_outcomes_are_errors() {
    let cases = [
        (Call::Read, Outcome::Ok),
        (Call::Read, Outcome::Refused),
        (put(1), Outcome::Refused),
        (put(1), Outcome::Missing),
        (create(1), Outcome::Value(1)),
        (update(1, 2), Outcome::Missing),
        (delete(1), Outcome::Value(1)),
    ];
    for (call, outcome) in cases {
        let history = [Operation::completed(1, call, 0, 1, outcome)];
        assert_eq!(check(&history), Err(HistoryError::OutcomeMismatch { index: 0, call, outcome }));
    }
}

/// `width` concurrent puts of distinct versions, concurrent reads that
/// observe each of them, then a read of a version nobody wrote: refuting it
/// means trying many subsets of puts and last writers (at width 20 more than
/// the default budget).
fn pathological(width: u64) -> Vec<Operation> {
    let mut history = Vec::new();
    for v in 1..=width {
        history.push(write(v, put(v), v, 1000, true));
        history.push(read(100 + v, v, 1000, Some(v)));
    }
    history.push(read(0, 2000, 2001, Some(NEVER_WRITTEN)));
    history
}

#[test]
fn an_exhausted_budget_is_unknown() {
    let history = pathological(16);
    let verdict = Checker::new().max_steps(1000).check(&history);
    assert_eq!(verdict, Ok(Verdict::Unknown { steps: 1000 }));
    // A budget of zero still decides the empty history.
    assert!(Checker::new().max_steps(0).check(&[]).unwrap().is_linearizable());
}

#[test]
fn a_small_pathological_history_is_refuted() {
    assert!(verdict(&pathological(6)).is_violation());
}

#[test]
fn the_recorder_builds_histories() {
    let mut rec = Recorder::new();
    let a = rec.invoke(1, create(1), 0);
    let b = rec.invoke(2, create(2), 5);
    let c = rec.invoke(3, Call::Read, 6);
    let d = rec.invoke(3, put(4), 7);
    rec.complete(b, Outcome::Refused, 15).unwrap();
    rec.indeterminate(a).unwrap();
    rec.complete(c, Outcome::Value(1), 20).unwrap();
    assert_eq!(rec.complete(b, Outcome::Ok, 16), Err(RecordError::AlreadyEnded(b)));
    assert_eq!(rec.indeterminate(a), Err(RecordError::AlreadyEnded(a)));
    let history = rec.into_history();
    assert_eq!(history.len(), 4);
    assert_eq!(history[a.index()].reply, Reply::Indeterminate);
    // `d` never ended, so it is indeterminate too.
    assert_eq!(history[d.index()].reply, Reply::Indeterminate);
    assert_eq!(order_of(&history), vec![0, 1, 2]);

    let mut other = Recorder::new();
    assert_eq!(other.complete(c, Outcome::Ok, 1), Err(RecordError::UnknownOp(c)));
    assert!(other.history().is_empty());
}

#[test]
fn checking_is_deterministic() {
    let history = simulate(&random_specs(7, 300, 6), 6, true);
    let first = verdict(&history);
    for _ in 0..3 {
        assert_eq!(verdict(&history), first);
    }
}

// ---------------------------------------------------------------------------
// Histories produced by a real atomic register.

/// One operation to simulate: client `client` waits `gap` after its previous
/// operation, then runs an operation that takes `duration` and takes effect
/// `frac` percent of the way through. `kind` picks the call, `pick` the
/// version a conditional write expects, and `fate` whether the reply is lost
/// (0: lost after taking effect, possibly much later; 1: lost before).
#[derive(Debug, Clone)]
struct Spec {
    client: usize,
    gap: u64,
    duration: u64,
    frac: u64,
    kind: u8,
    pick: u8,
    fate: u8,
}

/// Runs `specs` against a sequential register, linearizing each operation at
/// its chosen instant, and records the history the clients would observe.
/// Clients remember what they last saw and mostly write against that, as
/// lease holders do. Every written version is unique.
fn simulate(specs: &[Spec], clients: usize, allow_delete: bool) -> Vec<Operation> {
    let clients = clients.max(1);
    let mut clock = vec![0u64; clients];
    // (linearization point or None if lost, invoke, response)
    let mut timing = Vec::with_capacity(specs.len());
    for s in specs {
        let c = s.client % clients;
        let invoke = clock[c] + s.gap;
        let response = invoke + s.duration;
        clock[c] = response;
        let lost = s.kind % 8 > 2; // only writes lose their replies
        let point = match s.fate {
            0 if lost => Some(invoke + 4 * s.duration * s.frac / 100),
            1 if lost => None,
            _ => Some(invoke + s.duration * s.frac / 100),
        };
        timing.push((point, invoke, response));
    }
    let mut schedule: Vec<usize> = (0..specs.len()).collect();
    schedule.sort_by_key(|&i| (timing[i].0.unwrap_or(timing[i].1), i));

    let mut register: Option<Version> = None;
    let mut written: Vec<Version> = Vec::new();
    let mut known: Vec<Option<Version>> = vec![None; clients];
    let mut history = vec![Operation::indeterminate(0, Call::Read, 0); specs.len()];
    for i in schedule {
        let s = &specs[i];
        let c = s.client % clients;
        let fresh = i as Version + 1;
        let expected = match s.pick {
            0..=2 => known[c].unwrap_or(NEVER_WRITTEN + fresh),
            3 => register.unwrap_or(NEVER_WRITTEN + fresh),
            4 if !written.is_empty() => written[fresh as usize % written.len()],
            _ => NEVER_WRITTEN + fresh,
        };
        let call = match s.kind % 8 {
            0..=2 => Call::Read,
            3 => create(fresh),
            6 if allow_delete => delete(expected),
            7 => put(fresh),
            _ => update(expected, fresh),
        };
        let (point, invoke, response) = timing[i];
        history[i] = match point {
            None => Operation::indeterminate(c as ClientId, call, invoke),
            Some(_) => {
                let (next, _) = apply(register, call, Some(Outcome::Ok));
                let outcome = match call {
                    Call::Read => register.map_or(Outcome::Missing, Outcome::Value),
                    _ if apply(register, call, None).1 => Outcome::Ok,
                    _ => Outcome::Refused,
                };
                if outcome == Outcome::Ok {
                    register = next;
                    if let Some(v) = next {
                        written.push(v);
                    }
                }
                if s.fate == 0 && call.is_write() {
                    Operation::indeterminate(c as ClientId, call, invoke)
                } else {
                    known[c] = match outcome {
                        Outcome::Missing => None,
                        Outcome::Value(v) => Some(v),
                        Outcome::Ok => next,
                        Outcome::Refused => known[c],
                    };
                    Operation::completed(c as ClientId, call, invoke, response, outcome)
                }
            }
        };
    }
    history
}

/// A deterministic pseudo-random spec list (xorshift), for the larger tests.
fn random_specs(seed: u64, len: usize, clients: usize) -> Vec<Spec> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    (0..len)
        .map(|_| Spec {
            client: next(clients as u64) as usize,
            gap: next(20),
            duration: 1 + next(100),
            frac: next(101),
            kind: next(8) as u8,
            pick: next(6) as u8,
            fate: next(40) as u8,
        })
        .collect()
}

fn spec() -> impl Strategy<Value = Spec> {
    (0..8usize, 0..20u64, 1..100u64, 0..=100u64, 0..8u8, 0..6u8, 0..30u8).prop_map(
        |(client, gap, duration, frac, kind, pick, fate)| Spec { client, gap, duration, frac, kind, pick, fate },
    )
}

/// Whether `w` is a completed write that took effect.
fn effective(op: &Operation) -> bool {
    op.call.is_write() && op.outcome() == Some(Outcome::Ok)
}

fn written_value(op: &Operation) -> Option<Version> {
    match op.call {
        Call::Create { value } | Call::Put { value } | Call::Update { new: value, .. } => Some(value),
        _ => None,
    }
}

/// Sites where a mutation is guaranteed to make a legal history illegal.
/// Versions are unique, so once a completed write `w2` took effect after a
/// completed write `w1` returned, `w1`'s version is gone for good.
fn mutations(history: &[Operation]) -> Vec<(usize, Outcome, Option<Call>)> {
    let mut sites = Vec::new();
    let no_deletes = !history.iter().any(|op| matches!(op.call, Call::Delete { .. }));
    // (response of w1, its version) superseded by an effective w2 that
    // returned at the second time.
    let mut superseded: Vec<(Version, Time)> = Vec::new();
    for w1 in history.iter().filter(|op| effective(op)) {
        let (Some(v), Some(r1)) = (written_value(w1), w1.response()) else {
            continue;
        };
        let gone = history.iter().filter(|w2| effective(w2) && w2.invoke > r1).filter_map(Operation::response).min();
        if let Some(r2) = gone {
            superseded.push((v, r2));
        }
    }
    for (i, op) in history.iter().enumerate() {
        let Some(outcome) = op.outcome() else {
            continue;
        };
        match (op.call, outcome) {
            (Call::Read, _) => {
                sites.push((i, Outcome::Value(NEVER_WRITTEN), None));
                for &(v, r2) in &superseded {
                    if r2 < op.invoke {
                        sites.push((i, Outcome::Value(v), None));
                    }
                }
            }
            (Call::Create { .. }, Outcome::Refused) if no_deletes => {
                // The key existed before this create was invoked and no
                // delete can remove it.
                let existed = history.iter().any(|w| effective(w) && w.response().is_some_and(|r| r < op.invoke));
                if existed {
                    sites.push((i, Outcome::Ok, None));
                }
            }
            (Call::Update { expected, new }, Outcome::Refused) => {
                sites.push((i, Outcome::Ok, Some(update(NEVER_WRITTEN + 1, new))));
                for &(v, r2) in &superseded {
                    if r2 < op.invoke && v == expected {
                        sites.push((i, Outcome::Ok, None));
                    }
                }
            }
            (Call::Delete { .. }, Outcome::Refused) => {
                sites.push((i, Outcome::Ok, Some(delete(NEVER_WRITTEN + 1))));
            }
            _ => {}
        }
    }
    sites
}

fn mutate(history: &mut Vec<Operation>, choice: usize) {
    let sites = mutations(history);
    if sites.is_empty() {
        let end = history.iter().filter_map(Operation::response).max().unwrap_or(0);
        let last_invoke = history.iter().map(|op| op.invoke).max().unwrap_or(0);
        let t = end.max(last_invoke) + 1;
        history.push(read(99, t, t + 1, Some(NEVER_WRITTEN)));
        return;
    }
    let (i, outcome, call) = sites[choice % sites.len()];
    let op = &mut history[i];
    if let Some(call) = call {
        op.call = call;
    }
    if let Reply::Received { at, .. } = op.reply {
        op.reply = Reply::Received { at, outcome };
    }
}

fn random_small_history() -> impl Strategy<Value = (Vec<Operation>, Option<Version>)> {
    let call = prop_oneof![
        Just(Call::Read),
        (1..4u64).prop_map(create),
        (1..4u64, 1..4u64).prop_map(|(e, n)| update(e, n)),
        (1..4u64).prop_map(delete),
        (1..4u64).prop_map(put),
    ];
    let op =
        (call, 0..4u64, 0..20u64, 0..10u64, 0..10u8, 1..4u64).prop_map(|(call, client, invoke, duration, roll, v)| {
            if roll < 2 {
                return Operation::indeterminate(client, call, invoke);
            }
            let outcome = match call {
                Call::Read if roll < 4 => Outcome::Missing,
                Call::Read => Outcome::Value(v),
                Call::Put { .. } => Outcome::Ok,
                _ if roll < 6 => Outcome::Ok,
                _ => Outcome::Refused,
            };
            Operation::completed(client, call, invoke, invoke + duration, outcome)
        });
    (prop::collection::vec(op, 0..7), prop_oneof![Just(None), (1..4u64).prop_map(Some)])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The checker agrees with brute force on small arbitrary histories,
    /// including repeated versions and a non-empty initial state.
    #[test]
    fn agrees_with_brute_force((history, initial) in random_small_history()) {
        let expected = brute_force(&history, initial);
        let got = verdict_from(&history, initial);
        prop_assert_eq!(got.is_linearizable(), expected, "{:?}", got);
    }

    /// Histories of a real atomic register are linearizable, and one
    /// guaranteed-bad mutation makes them not.
    #[test]
    fn register_histories_are_linearizable_and_mutants_are_not(
        clients in 1..8usize,
        specs in prop::collection::vec(spec(), 1..60),
        allow_delete in any::<bool>(),
        choice in any::<usize>(),
    ) {
        let mut history = simulate(&specs, clients, allow_delete);
        let good = verdict(&history);
        prop_assert!(good.is_linearizable(), "{:?}", good);
        let mut reversed = history.clone();
        reversed.reverse();
        prop_assert!(verdict(&reversed).is_linearizable());

        mutate(&mut history, choice);
        let bad = verdict(&history);
        prop_assert!(bad.is_violation(), "{:?}\n{:#?}", bad, history);
    }
}

#[test]
fn a_long_history_with_ten_clients_is_linearizable() {
    for seed in 1..=3 {
        let history = simulate(&random_specs(seed, 2000, 10), 10, true);
        assert_eq!(history.len(), 2000);
        assert!(verdict(&history).is_linearizable(), "seed {seed}");
    }
}

#[test]
fn long_histories_with_one_bad_answer_are_refuted() {
    for seed in 1..=2 {
        let base = simulate(&random_specs(seed, 2000, 10), 10, true);
        let sites = mutations(&base).len();
        for choice in [sites / 4, sites / 2, 3 * sites / 4] {
            let mut history = base.clone();
            mutate(&mut history, choice);
            let Verdict::NotLinearizable(cex) = verdict(&history) else {
                panic!("seed {seed}, mutation {choice} accepted");
            };
            assert!(!cex.candidates.is_empty());
        }
    }
}
