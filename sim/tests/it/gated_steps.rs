//! turmoil's gated step, which the runner uses to let hosts with nothing to
//! do sit steps out: a host that sits out and then runs acts at the instants
//! it would have acted at when stepped every tick, and a host that acts on a
//! wake-up the gate did not know of fails the run instead of acting late.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TICK: Duration = Duration::from_millis(10);
const PORT: u16 = 7000;

/// When the client's timer fires, in simulated time since the start.
const CLIENT_WAKES: Duration = Duration::from_millis(1_005);

/// The gate a test steps with: the client's timer is either known (the gate
/// asks for the client to run in the step it falls in) or not (the client
/// never has to run). The server never has a timer.
struct Gate {
    knows_the_client_timer: bool,
    catch_ups: usize,
    /// Hosts that ran only for a timer, living the steps they sat out and
    /// that one in one tick.
    merged: Vec<String>,
}

impl turmoil::HostGate for Gate {
    fn must_run(&mut self, host: &str, until: Duration) -> bool {
        host == "client" && self.knows_the_client_timer && until >= CLIENT_WAKES && until < CLIENT_WAKES + TICK
    }

    fn catching_up(&mut self, _host: &str) {
        self.catch_ups += 1;
    }

    fn merging(&mut self, host: &str) {
        self.merged.push(host.to_string());
    }
}

/// A world of a server that writes down when each byte it reads arrived,
/// and a client that sleeps on a plain tokio timer, then connects, sends
/// three bytes and waits for the server to hang up.
fn world(arrivals: Rc<RefCell<Vec<Duration>>>) -> turmoil::Sim<'static> {
    let mut sim = turmoil::Builder::new()
        .tick_duration(TICK)
        .min_message_latency(Duration::from_millis(3))
        .max_message_latency(Duration::from_millis(3))
        .simulation_duration(Duration::from_secs(60))
        .build();
    sim.host("server", move || {
        let arrivals = arrivals.clone();
        async move {
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
            let (mut stream, _) = listener.accept().await?;
            let mut byte = [0u8; 1];
            while stream.read(&mut byte).await? == 1 {
                arrivals.borrow_mut().push(turmoil::sim_elapsed().unwrap_or_default());
            }
            Ok(())
        }
    });
    sim.host("client", || async {
        #[allow(clippy::disallowed_methods)] // The test's point: a timer on no agenda.
        tokio::time::sleep(CLIENT_WAKES - Duration::from_millis(1)).await;
        let mut stream = turmoil::net::TcpStream::connect(("server", PORT)).await?;
        stream.write_all(&[1, 2, 3]).await?;
        stream.shutdown().await?;
        Ok(())
    });
    sim
}

fn run(gate: Option<&mut Gate>) -> Result<Vec<Duration>, String> {
    let arrivals = Rc::new(RefCell::new(Vec::new()));
    let mut sim = world(arrivals.clone());
    let mut gate = gate;
    while sim.elapsed() < Duration::from_secs(2) {
        match gate.as_deref_mut() {
            Some(gate) => sim.step_gated(TICK, gate).map_err(|err| err.to_string())?,
            None => sim.step().map_err(|err| err.to_string())?,
        };
    }
    if let Some(gate) = gate {
        sim.catch_up(gate).map_err(|err| err.to_string())?;
    }
    let arrivals = arrivals.borrow().clone();
    Ok(arrivals)
}

#[test]
fn hosts_that_sit_out_steps_act_at_the_instants_they_would_have() {
    let every_tick = run(None).expect("stepping every host every tick");
    assert_eq!(every_tick.len(), 3, "the server read three bytes: {every_tick:?}");
    let mut gate = Gate { knows_the_client_timer: true, catch_ups: 0, merged: Vec::new() };
    let gated = run(Some(&mut gate)).expect("a gate that knows every timer");
    assert_eq!(gated, every_tick);
    // Both hosts sat out the first second and lived it in one go: the
    // client, woken by its timer only, in the tick of its timer; the server,
    // woken by the client's connect, before it.
    assert_eq!(gate.merged, ["client"], "the client ran for its timer alone");
    assert!(gate.catch_ups >= 1, "the server never caught up apart: {}", gate.catch_ups);
}

#[test]
fn a_host_acting_on_a_timer_the_gate_does_not_know_fails_the_step() {
    let mut gate = Gate { knows_the_client_timer: false, catch_ups: 0, merged: Vec::new() };
    let err = run(Some(&mut gate)).expect_err("the client's timer is on no agenda");
    assert!(err.contains("client sent a message while living"), "{err}");
}
