//! Keyed single writers: four members share 100 keys through one membership
//! object on S3. Members join, one leaves gracefully and one crashes; after
//! each change the example prints who holds how many keys at which rounds,
//! which keys moved and how long they took to move.
//!
//! The S3 server is the project's fake S3, served on a loopback port, and
//! each member talks to it over HTTP with the production S3 backend. Time is
//! real and the TTL is 3 s, so the story takes about fifteen seconds.
//!
//! Every figure printed comes from the members themselves: their snapshots,
//! and a log in which each key's work records when it started and stopped.
//! At the end that log is checked: no key may ever have had two members
//! acting for it at once. The example exits non-zero if one did.
//!
//! Run it with `cargo run --example keyed`.

#![allow(clippy::disallowed_methods)] // The example runs on real time: it times the story and paces it with tokio's timer.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hoplock::clock::SystemClock;
use hoplock::hrw::{Membership, Round};
use hoplock::keyed::{KeyedError, KeyedHandle, KeyedWriter, Leaver};
use hoplock::s3::config::Addressing;
use hoplock::s3::credentials::CredentialSource;
use hoplock::s3::sigv4::Credentials;
use hoplock::s3::{S3Backend, S3Config};
use hoplock_testkit::acting::ActingLog;
use hoplock_testkit::fake_s3::{FakeS3, server};
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(3);
const KEY_COUNT: usize = 100;
const BUCKET: &str = "hoplock-demo";
const OBJECT: &str = "demo/members";
const ACCESS_KEY: &str = "DEMO";
const SECRET_KEY: &str = "demo-secret";

/// How long the example waits for the keys to settle after a change before
/// it gives up. A crash takes the longest: the survivors wait out the
/// crashed member's TTL before they evict it.
const SETTLE_WITHIN: Duration = Duration::from_secs(15);

/// The interval in which `member` acted for `key` at `round`, with its
/// times on the standard clock the example measures with.
fn interval(log: &ActingLog, key: &str, member: &str, round: Round) -> Option<(Instant, Option<Instant>)> {
    let intervals = log.intervals();
    let acting = intervals.get(key)?.iter().find(|a| a.member == member && a.round == round)?;
    Some((acting.start.into_std(), acting.stop.map(|stop| stop.into_std())))
}

/// A running member.
struct Node {
    id: &'static str,
    handle: KeyedHandle,
    leaver: Leaver,
    task: JoinHandle<Result<(), KeyedError>>,
}

/// Starts a member with its own S3 client. Its work does nothing but wait
/// to be cancelled; a real one would write downstream, fenced by the round.
fn start(id: &'static str, config: &S3Config, keys: &[String], log: &ActingLog) -> Result<Node, String> {
    let store = S3Backend::new(config.clone()).map_err(|e| format!("cannot build {id}'s S3 backend: {e}"))?;
    let writer = KeyedWriter::builder(store)
        .id(id)
        .keys(keys.iter().cloned())
        .ttl(TTL)
        .create_at(1)
        .build()
        .map_err(|e| format!("cannot build member {id}: {e}"))?;
    let (handle, leaver) = (writer.handle(), writer.leaver());
    let log = log.clone();
    let task = tokio::spawn(async move {
        writer
            .run(move |ctx| {
                // Recorded here rather than inside the task, so that the
                // start is logged even if the task is aborted before it runs.
                let stop = log.start(id, &ctx);
                async move {
                    ctx.cancelled().await;
                    drop(stop);
                }
            })
            .await
    });
    Ok(Node { id, handle, leaver, task })
}

/// Who runs each key, and at which round.
type Holders = BTreeMap<String, (&'static str, Round)>;

/// Waits until every node in `nodes` is in the same active view, made of
/// exactly these nodes, and every key runs on exactly one of them. Returns
/// the view and the holders then.
async fn settle(nodes: &[&Node], keys: &[String]) -> Result<(u64, Holders), String> {
    let deadline = Instant::now() + SETTLE_WITHIN;
    let mut expected: Vec<&str> = nodes.iter().map(|node| node.id).collect();
    expected.sort_unstable();
    loop {
        if let Some(settled) = settled(nodes, keys, &expected).await {
            return Ok(settled);
        }
        if Instant::now() >= deadline {
            return Err(format!("the keys did not settle on {expected:?} within {SETTLE_WITHIN:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn settled(nodes: &[&Node], keys: &[String], expected: &[&str]) -> Option<(u64, Holders)> {
    let mut view = None;
    let mut holders = Holders::new();
    for node in nodes {
        // The active view's members, not merely the newest view's: a joiner
        // starts its keys only once every member has adopted its join.
        let members = node.handle.members().await.ok()?;
        let mut ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
        ids.sort_unstable();
        let snapshot = node.handle.snapshot();
        if ids != expected || !snapshot.active || view.is_some_and(|v| Some(v) != snapshot.view) {
            return None;
        }
        view = snapshot.view;
        for (key, round) in snapshot.running.iter() {
            // Snapshots are taken one after another, so a key that moved in
            // between can show up twice; look again later.
            if holders.insert(key.clone(), (node.id, *round)).is_some() {
                return None;
            }
        }
    }
    (holders.len() == keys.len()).then_some((view?, holders))
}

/// Seconds since the story began, for the timeline.
fn at(origin: Instant) -> String {
    format!("{:7.3}s", origin.elapsed().as_secs_f64())
}

/// "round 4" or "rounds 2..4".
fn rounds(rounds: impl IntoIterator<Item = Round>) -> String {
    let rounds: Vec<u64> = rounds.into_iter().map(Round::get).collect();
    match (rounds.iter().min(), rounds.iter().max()) {
        (Some(low), Some(high)) if low == high => format!("round {low}"),
        (Some(low), Some(high)) => format!("rounds {low}..{high}"),
        _ => "no rounds".into(),
    }
}

/// "0.412 s" or "0.412..0.498 s".
fn spread(durations: impl IntoIterator<Item = Duration>) -> String {
    let durations: Vec<f64> = durations.into_iter().map(|d| d.as_secs_f64()).collect();
    let low = durations.iter().copied().fold(f64::INFINITY, f64::min);
    let high = durations.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if durations.is_empty() {
        "-".into()
    } else if high - low < 0.0005 {
        format!("{low:.3} s")
    } else {
        format!("{low:.3}..{high:.3} s")
    }
}

/// One line per member: how many keys it holds, at which rounds.
fn print_view(origin: Instant, view: u64, holders: &Holders) {
    println!("{}  all {} keys held in view {view}:", at(origin), holders.len());
    let mut members: BTreeMap<&str, Vec<Round>> = BTreeMap::new();
    for (member, round) in holders.values() {
        members.entry(member).or_default().push(*round);
    }
    for (member, held) in &members {
        println!("            {member}  {:3} keys  {}", held.len(), rounds(held.iter().copied()));
    }
}

/// Prints what moved between `before` and `after`, timed from `since`, and
/// returns any broken expectation: a moved key's round must rise, and a key
/// that stayed must keep its round.
fn print_moves(
    origin: Instant,
    since: Instant,
    before: &Holders,
    after: &Holders,
    log: &ActingLog,
    what: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut routes: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    let (mut old_rounds, mut new_rounds, mut took, mut unheld) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut stayed = 0;
    for (key, &(to, new_round)) in after {
        let Some(&(from, old_round)) = before.get(key) else { continue };
        if from == to {
            stayed += 1;
            if new_round != old_round {
                problems.push(format!("{key} stayed with {to} but its round changed from {old_round} to {new_round}"));
            }
            continue;
        }
        routes.entry((from, to)).or_default().push(key);
        old_rounds.push(old_round);
        new_rounds.push(new_round);
        if new_round <= old_round {
            problems
                .push(format!("{key} moved from {from} to {to} but its round went from {old_round} to {new_round}"));
        }
        let (old, new) = (interval(log, key, from, old_round), interval(log, key, to, new_round));
        if let Some((started, _)) = new {
            took.push(started.saturating_duration_since(since));
            if let Some(stopped) = old.and_then(|(_, stop)| stop) {
                unheld.push(started.saturating_duration_since(stopped));
            }
        }
    }
    let moved = old_rounds.len();
    println!("{}  {moved} keys moved; {stayed} stayed where they were, at the same rounds:", at(origin));
    for ((from, to), keys) in &routes {
        let sample: Vec<&str> = keys.iter().take(4).copied().collect();
        let more = if keys.len() > sample.len() { " ..." } else { "" };
        println!("            {:3} from {from} to {to}  ({}{more})", keys.len(), sample.join(" "));
    }
    if moved > 0 {
        println!("            their rounds rose from {} to {}", rounds(old_rounds), rounds(new_rounds));
        println!("            each started at its new holder {} after {what}", spread(took));
        println!("            each went unheld for {} between its old holder's stop and the new start", spread(unheld));
    }
    problems
}

#[tokio::main]
async fn main() -> ExitCode {
    match story().await {
        Ok(problems) if problems.is_empty() => ExitCode::SUCCESS,
        Ok(problems) => {
            for problem in problems {
                eprintln!("FAILED: {problem}");
            }
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the story; returns the broken expectations, or an error if it could
/// not run at all.
async fn story() -> Result<Vec<String>, String> {
    // The fake S3, on a port the OS picks, with one bucket and one key pair.
    let s3 = FakeS3::builder(Arc::new(SystemClock::new()), 1)
        .credentials(ACCESS_KEY, SECRET_KEY)
        .bucket(BUCKET)
        .build()
        .map_err(|e| format!("cannot build the fake S3: {e}"))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1 for the fake S3: {e}"))?;
    let endpoint = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve(s3, listener, async move {
        let _ = stopped.await;
    }));

    let mut config = S3Config::new(BUCKET, OBJECT);
    config.endpoint = Some(endpoint.clone());
    config.addressing = Addressing::PathStyle;
    config.credentials = CredentialSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY));

    let keys: Vec<String> = (0..KEY_COUNT).map(|i| format!("job-{i:03}")).collect();
    let log = ActingLog::default();
    let mut problems = Vec::new();
    let origin = Instant::now();
    println!("   time  event (TTL {TTL:?}; membership object s3://{BUCKET}/{OBJECT} at {endpoint})");

    // 1. Three members start at once. They race to create the object, the
    // others join it, and the keys spread out as each join is adopted.
    println!("{}  --  a, b and c start", at(origin));
    let a = start("a", &config, &keys, &log)?;
    let b = start("b", &config, &keys, &log)?;
    let c = start("c", &config, &keys, &log)?;
    let (view, first) = settle(&[&a, &b, &c], &keys).await?;
    print_view(origin, view, &first);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 2. A fourth member joins. HRW moves to it only the keys it now owns,
    // about a quarter; their old holders stop them before d starts them,
    // and d starts them at the join's view, a round above any before.
    let joined = Instant::now();
    println!("{}  --  d joins", at(origin));
    let d = start("d", &config, &keys, &log)?;
    let (view, second) = settle(&[&a, &b, &c, &d], &keys).await?;
    print_view(origin, view, &second);
    problems.extend(print_moves(origin, joined, &first, &second, &log, "d joined"));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 3. A graceful leave: b stops its keys and removes its entry, so the
    // others take them over at their next read, without waiting for a TTL.
    let left = Instant::now();
    println!("{}  --  b leaves gracefully", at(origin));
    b.leaver.leave();
    match b.task.await {
        Ok(Ok(())) => println!("{}  b has left", at(origin)),
        Ok(Err(e)) => return Err(format!("b could not leave: {e}")),
        Err(e) => return Err(format!("b's task failed: {e}")),
    }
    let (view, third) = settle(&[&a, &c, &d], &keys).await?;
    print_view(origin, view, &third);
    problems.extend(print_moves(origin, left, &second, &third, &log, "b was asked to leave"));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 4. A crash: c's task is aborted, so its keys' work is dropped on the
    // spot and nothing tells the others. They go on seeing c's entry until
    // its nonce has not changed for a TTL, then evict it and take its keys.
    let crashed = Instant::now();
    println!("{}  --  c crashes", at(origin));
    c.task.abort();
    let _ = c.task.await;
    let (view, fourth) = settle(&[&a, &d], &keys).await?;
    print_view(origin, view, &fourth);
    problems.extend(print_moves(origin, crashed, &third, &fourth, &log, "c crashed"));
    // Read after the takeover, by when every aborted task has been dropped
    // and its guard has recorded the stop.
    let held_by_c: Vec<&String> = third.iter().filter(|(_, (member, _))| *member == "c").map(|(key, _)| key).collect();
    let c_stops: Vec<Duration> = held_by_c
        .iter()
        .filter_map(|key| interval(&log, key, "c", third[*key].1)?.1)
        .map(|stop| stop.saturating_duration_since(crashed))
        .collect();
    println!(
        "            c's work on its {} keys was dropped {} after the crash ({} stops recorded)",
        held_by_c.len(),
        spread(c_stops.iter().copied()),
        c_stops.len()
    );

    // The last members leave too, so that every interval in the log is
    // closed before it is checked.
    println!("{}  --  a and d leave", at(origin));
    a.leaver.leave();
    d.leaver.leave();
    for node in [a, d] {
        match node.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(format!("{} could not leave: {e}", node.id)),
            Err(e) => problems.push(format!("{}'s task failed: {e}", node.id)),
        }
    }
    let _ = shutdown.send(());
    let _ = serving.await;

    let overlaps = log.problems();
    let intervals = log.intervals();
    let checked: usize = intervals.values().map(Vec::len).sum();
    if overlaps.is_empty() {
        println!(
            "{}  checked {checked} acting intervals over {} keys: no key ever had two members acting at once",
            at(origin),
            intervals.len()
        );
    } else {
        println!("{}  checked {checked} acting intervals: {} problems", at(origin), overlaps.len());
    }
    problems.extend(overlaps);
    Ok(problems)
}
