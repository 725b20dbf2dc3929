//! Three electors share one in-memory lease key. The leader is made to
//! release, then to crash, then a crashed node comes back; every handover is
//! printed with its generation.
//!
//! Time is tokio's paused clock, so the minute of events below runs in an
//! instant and prints the same every time.
//!
//! Run it with `cargo run --example handover`.

#![allow(clippy::disallowed_methods)] // The example reads tokio's paused clock to print times.

use std::sync::Arc;
use std::time::Duration;

use hoplock::backend::memory::MemoryBackend;
use hoplock::entropy::SeededEntropy;
use hoplock::testing::faulty::{Fault, FaultControl, Faulty};
use hoplock::{Elector, Event};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

const TTL: Duration = Duration::from_secs(6);

struct Node {
    name: &'static str,
    elector: Elector<Faulty<MemoryBackend>>,
    network: FaultControl,
    task: Option<JoinHandle<()>>,
}

/// Starts a node: an elector that campaigns, printing its events.
fn start(name: &'static str, store: &MemoryBackend, seed: u64, origin: Instant) -> Node {
    let backend = Faulty::new(store.clone());
    let network = backend.control();
    let elector = Elector::builder(backend)
        .owner(name)
        .ttl(TTL)
        .entropy(Arc::new(SeededEntropy::new(seed)))
        .build()
        .expect("valid configuration");
    let mut events = elector.run();
    let task = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let at = origin.elapsed().as_secs_f64();
            match event {
                Event::Acquired { lease, .. } => {
                    println!("{at:7.3}s  {name}  leads with generation {}", lease.generation)
                }
                Event::Lost { generation, reason: None } => {
                    println!("{at:7.3}s  {name}  released generation {generation}")
                }
                Event::Lost { generation, reason: Some(reason) } => {
                    println!("{at:7.3}s  {name}  lost generation {generation}: {reason}")
                }
                _ => {}
            }
        }
    });
    Node { name, elector, network, task: Some(task) }
}

/// Crashes a node: its store calls hang and its task is gone, so nothing is
/// released and the others must wait out the TTL.
fn crash(node: &mut Node, origin: Instant) {
    println!("{:7.3}s  --  {} crashes", origin.elapsed().as_secs_f64(), node.name);
    node.network.set(Fault::Hang);
    if let Some(task) = node.task.take() {
        task.abort();
    }
}

fn leader(nodes: &[Node]) -> Option<usize> {
    nodes.iter().position(|node| node.elector.is_leader())
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let origin = Instant::now();
    let store = MemoryBackend::new();
    println!("   time  node  event (TTL {TTL:?}, poll every {:?})", TTL / 15);
    let mut nodes: Vec<Node> =
        ["a", "b", "c"].iter().enumerate().map(|(i, name)| start(name, &store, i as u64 + 1, origin)).collect();
    sleep(Duration::from_secs(10)).await;

    // A graceful release: the leader steps down and a contender takes over
    // within one poll interval, with the next generation.
    let first = leader(&nodes).expect("someone leads");
    println!("{:7.3}s  --  {} is asked to step down", origin.elapsed().as_secs_f64(), nodes[first].name);
    nodes[first].elector.stop();
    sleep(Duration::from_secs(10)).await;

    // A crash: the new leader vanishes without releasing. The others wait
    // out the TTL on their own clocks, then one takes over.
    let second = leader(&nodes).expect("someone took over");
    crash(&mut nodes[second], origin);
    sleep(Duration::from_secs(15)).await;

    // The crashed node restarts under the same name: a new incarnation, so
    // it does not mistake its old term for its own; it waits like anyone.
    let name = nodes[second].name;
    println!("{:7.3}s  --  {name} restarts", origin.elapsed().as_secs_f64());
    nodes[second] = start(name, &store, 42, origin);
    sleep(Duration::from_secs(5)).await;

    let third = leader(&nodes).expect("someone leads");
    crash(&mut nodes[third], origin);
    sleep(Duration::from_secs(15)).await;
    let last = leader(&nodes).expect("someone leads");
    println!(
        "{:7.3}s  --  {} leads with generation {}; the generation rose with every handover",
        origin.elapsed().as_secs_f64(),
        nodes[last].name,
        nodes[last].elector.current_generation().map(|g| g.get()).unwrap_or_default()
    );
}
