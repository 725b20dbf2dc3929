//! The real processes of a chaos run: one `hoplock run` per node, started,
//! signalled and restarted as the schedule says, its stderr read line by
//! line into the run's history as it is written.
//!
//! Each node reaches the store only through its own fault proxy, so the
//! proxy's faults are that node's network. Its command runs in a process
//! group of its own (the binary puts it there); a pause stops both, as a
//! frozen container would, and a crash kills both at once.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicU64, Ordering};

use hoplock_sim::history::{Event, STOPPED};
use hoplock_testkit::fault_proxy::FaultProxy;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::plan::NodePlan;
use super::record::{Recorder, log_events};

/// How a node's process came to exit, as the harness expects it.
const RUNNING: u8 = 0;
const KILLED: u8 = 1;
const STOPPING: u8 = 2;

/// What every node's process is started with.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `hoplock` binary.
    pub hoplock: PathBuf,
    /// The harness's own binary, which runs the command (`chaos-child`).
    pub harness: PathBuf,
    /// The bucket and key of the lease.
    pub bucket: String,
    pub key: String,
    /// The store's credentials and region.
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    /// The downstream's `host:port`.
    pub downstream: String,
    /// The planted bug to switch on, if any.
    pub planted: Option<String>,
    /// libfaketime's preload library, when at hand.
    pub faketime: Option<PathBuf>,
}

/// One node: its proxy and its current process.
pub struct Node {
    pub plan: NodePlan,
    pub proxy: FaultProxy,
    /// Processes started so far; the current one is `name#(started - 1)`.
    started: u32,
    process: Option<Process>,
}

/// One process of a node. Each has its own flags: the task that waits for
/// a killed process may see it exit after its successor has started.
struct Process {
    pid: Option<i32>,
    /// The pid of the command it started last (0: none yet), as its log
    /// said.
    command_pid: Arc<AtomicI32>,
    /// How the harness expects it to exit.
    exit: Arc<AtomicU8>,
    alive: Arc<std::sync::atomic::AtomicBool>,
    /// When the harness killed it (`u64::MAX`: it has not). A line it wrote
    /// before it died may be read after: it is stamped no later than this,
    /// so it never lands after the crash (or the successor's start).
    killed_at_us: Arc<AtomicU64>,
}

impl Node {
    /// A node whose process has not started yet.
    pub fn new(plan: NodePlan, proxy: FaultProxy) -> Node {
        Node { plan, proxy, started: 0, process: None }
    }

    /// Whether its process is running.
    pub fn alive(&self) -> bool {
        self.process.as_ref().is_some_and(|process| process.alive.load(Ordering::SeqCst))
    }

    /// Starts a new process: incarnation 0, then one more each time.
    pub fn start(&mut self, launch: &Launch, recorder: &Recorder) -> Result<(), String> {
        let incarnation = self.started;
        self.started += 1;
        let name = self.plan.name.clone();
        let mut command = tokio::process::Command::new(&launch.hoplock);
        command
            .args(["--log-format", "json", "run", "--path-style"])
            .args(["--endpoint", &format!("http://{}", self.proxy.addr())])
            .args(["--bucket", &launch.bucket, "--key", &launch.key, "--region", &launch.region])
            .args(&self.plan.run_args)
            .arg("--")
            .arg(&launch.harness)
            .args(["chaos-child", "--downstream", &launch.downstream, "--node", &name, "--key", "lease"])
            .args(["--every-ms", &self.plan.child.every_ms.to_string()]);
        if self.plan.child.ignores_sigterm {
            command.arg("--ignore-sigterm");
        }
        if let Some(after) = self.plan.child.exits_after_ms {
            command.args(["--exit-after-ms", &after.to_string()]);
        }
        // Only what the process needs: no credentials or profiles from the
        // harness's own environment.
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWS_ACCESS_KEY_ID", &launch.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &launch.secret_key)
            .env("AWS_REGION", &launch.region)
            .env("HOPLOCK_LOG", "debug")
            .env("NO_COLOR", "1");
        if let Some(bug) = &launch.planted {
            command.env("HOPLOCK_PLANTED", bug);
        }
        if let (Some(library), Some((offset_ms, drift_ppb))) = (&launch.faketime, self.plan.clock) {
            command.envs(super::faketime::env(library, offset_ms, drift_ppb));
        }
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().map_err(|err| format!("cannot start {}: {err}", launch.hoplock.display()))?;
        let current = Process {
            pid: child.id().and_then(|pid| i32::try_from(pid).ok()),
            command_pid: Arc::new(AtomicI32::new(0)),
            exit: Arc::new(AtomicU8::new(RUNNING)),
            alive: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            killed_at_us: Arc::new(AtomicU64::new(u64::MAX)),
        };
        recorder.record(&name, Event::Started { incarnation });
        let process = format!("{name}#{incarnation}");
        let stderr = child.stderr.take();
        let (recorder, command_pid, exit, alive, killed_at_us) = (
            recorder.clone(),
            current.command_pid.clone(),
            current.exit.clone(),
            current.alive.clone(),
            current.killed_at_us.clone(),
        );
        self.process = Some(current);
        tokio::spawn(async move {
            if let Some(stderr) = stderr {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    recorder.log(&process, &line);
                    let said = log_events(&line);
                    let at_us = recorder.now_us().min(killed_at_us.load(Ordering::SeqCst));
                    for event in said.events {
                        recorder.record_at(at_us, &name, event);
                    }
                    if let Some(pid) = said.command_pid {
                        command_pid.store(pid, Ordering::SeqCst);
                    }
                }
            }
            let status = child.wait().await;
            alive.store(false, Ordering::SeqCst);
            match exit.load(Ordering::SeqCst) {
                KILLED => {}
                STOPPING => recorder.record(&name, Event::ElectorError { message: STOPPED.into() }),
                _ => {
                    let status = status.map_or_else(|err| err.to_string(), |status| status.to_string());
                    recorder.log(&process, &format!("chaos: the process exited by itself ({status})"));
                    recorder.record(&name, Event::CampaignEnded { message: format!("the process exited ({status})") });
                    // Whatever term it held ended with it.
                    recorder.record(&name, Event::Crashed);
                }
            }
        });
        Ok(())
    }

    /// SIGKILL to the process and its command's group: a crash.
    pub fn kill(&mut self, recorder: &Recorder) {
        if let Some(at_us) = self.sigkill(recorder) {
            recorder.record_at(at_us, &self.plan.name, Event::Crashed);
        }
    }

    /// SIGKILL at the end of a run: nothing is recorded, as the simulator
    /// records nothing of the nodes it stops when a run ends.
    pub fn end(&mut self, recorder: &Recorder) {
        self.sigkill(recorder);
    }

    /// Kills a running process and returns when: its lines read after are
    /// stamped no later than that.
    fn sigkill(&mut self, recorder: &Recorder) -> Option<u64> {
        let process = self.process.as_ref().filter(|process| process.alive.load(Ordering::SeqCst))?;
        let at_us = recorder.now_us();
        process.exit.store(KILLED, Ordering::SeqCst);
        process.killed_at_us.store(at_us, Ordering::SeqCst);
        self.signal(libc::SIGKILL);
        Some(at_us)
    }

    /// SIGTERM to the process: a graceful stop, which it must honour by
    /// stopping its command and releasing.
    pub fn terminate(&mut self) {
        if !self.alive() {
            return;
        }
        if let Some(process) = &self.process {
            process.exit.store(STOPPING, Ordering::SeqCst);
        }
        if let Some(pid) = self.process.as_ref().and_then(|process| process.pid) {
            signal(pid, libc::SIGTERM);
        }
    }

    /// SIGSTOP (`true`) or SIGCONT to the process and its command's group.
    pub fn freeze(&self, frozen: bool) {
        if self.alive() {
            self.signal(if frozen { libc::SIGSTOP } else { libc::SIGCONT });
        }
    }

    fn signal(&self, signal_number: i32) {
        let Some(process) = &self.process else { return };
        // The commands first, read from the kernel at this instant (a
        // command started a moment ago has not been logged yet), and the
        // one the log named; each leads a process group of its own.
        let mut groups = process.pid.map(children).unwrap_or_default();
        let logged = process.command_pid.load(Ordering::SeqCst);
        if logged > 0 && !groups.contains(&logged) {
            groups.push(logged);
        }
        if let Some(pid) = process.pid {
            signal(pid, signal_number);
        }
        for group in groups {
            signal(-group, signal_number);
        }
    }
}

impl Drop for Node {
    /// A run that ends early (an error, a panic) leaves no process behind.
    fn drop(&mut self) {
        if self.alive() {
            self.signal(libc::SIGKILL);
        }
    }
}

/// The children of process `pid`, as Linux lists them.
fn children(pid: i32) -> Vec<i32> {
    let listed = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    listed.split_whitespace().filter_map(|child| child.parse().ok()).collect()
}

fn signal(pid: i32, signal_number: i32) {
    // SAFETY: kill(2) on a process (or, negative, a process group) this
    // harness started.
    unsafe {
        libc::kill(pid, signal_number);
    }
}
