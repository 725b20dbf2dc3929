//! The progress bar `cargo xtask sim` draws on stderr while it runs, with
//! an estimate of the time left.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::plan;

/// A progress bar on stderr: redrawn in place on a terminal, a line per
/// tenth otherwise (CI logs).
pub(super) struct Progress<'a> {
    pub(super) total: usize,
    pub(super) done: &'a AtomicUsize,
    pub(super) estimate: &'a Mutex<Estimate>,
    pub(super) quiet: bool,
}

/// How long the runs still to make will take: each scenario's at the mean
/// time its finished runs took, a scenario with none finished yet at the
/// mean of every finished run, spread over the worker threads. Worlds
/// differ in cost by orders of magnitude, so counting runs alone would be
/// far off; a sweep, with many seeds of each, soon has a good figure.
pub(super) struct Estimate {
    /// Runs still to make (or still running), per scenario.
    left: Vec<usize>,
    /// Runs finished and the seconds they took, per scenario.
    finished: Vec<(usize, f64)>,
    threads: usize,
}

impl Estimate {
    pub(super) fn new(scenarios: usize, jobs: &[plan::Job], threads: usize) -> Estimate {
        let mut left = vec![0; scenarios];
        for job in jobs {
            left[job.scenario] += 1;
        }
        Estimate { left, finished: vec![(0, 0.0); scenarios], threads: threads.max(1) }
    }

    pub(super) fn finished(&mut self, scenario: usize, seconds: f64) {
        self.left[scenario] = self.left[scenario].saturating_sub(1);
        let (runs, took) = &mut self.finished[scenario];
        *runs += 1;
        *took += seconds;
    }

    /// Seconds left, once any run has finished.
    fn seconds_left(&self) -> Option<f64> {
        let (runs, took) =
            self.finished.iter().fold((0, 0.0), |(runs, took), (more, longer)| (runs + more, took + longer));
        if runs == 0 {
            return None;
        }
        let overall = took / runs as f64;
        let left: f64 = self
            .left
            .iter()
            .zip(&self.finished)
            .map(|(left, (runs, took))| *left as f64 * if *runs > 0 { took / *runs as f64 } else { overall })
            .sum();
        Some(left / self.threads as f64)
    }
}

impl Progress<'_> {
    #[allow(clippy::disallowed_methods)] // The bar's own clock, outside any simulation.
    pub(super) fn show_until_done(&self) {
        let terminal = std::io::stderr().is_terminal();
        let started = std::time::Instant::now();
        let mut printed_tenth = 0;
        loop {
            let done = self.done.load(Ordering::SeqCst);
            if !self.quiet {
                let width = 40;
                let filled = (done * width).checked_div(self.total).unwrap_or(width);
                let seconds = self.estimate.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).seconds_left();
                let left = time_left(started.elapsed(), seconds);
                if terminal {
                    eprint!(
                        "\r[{}{}] {done}/{} runs{left}\x1b[K",
                        "#".repeat(filled),
                        ".".repeat(width - filled),
                        self.total
                    );
                    let _ = std::io::stderr().flush();
                } else {
                    let tenth = (done * 10).checked_div(self.total).unwrap_or(10);
                    if tenth > printed_tenth {
                        printed_tenth = tenth;
                        eprintln!("  {done}/{} runs{left}", self.total);
                    }
                }
            }
            if done >= self.total {
                if terminal && !self.quiet {
                    eprintln!();
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `, about 3m20s left`; nothing in the first second or before any run
/// has finished.
fn time_left(elapsed: Duration, seconds: Option<f64>) -> String {
    let Some(seconds) = seconds.filter(|_| elapsed >= Duration::from_secs(1)) else {
        return String::new();
    };
    let left = seconds.round() as u64;
    match left {
        0..60 => format!(", about {left}s left"),
        60..3600 => format!(", about {}m{:02}s left", left / 60, left % 60),
        _ => format!(", about {}h{:02}m left", left / 3600, left % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_weighs_each_scenario_by_its_own_runs() {
        let job = |scenario| plan::Job { scenario, seed: 0, replay: false };
        // Ten cheap runs of one scenario and two costly ones of another.
        let jobs: Vec<plan::Job> = (0..10).map(|_| job(0)).chain([job(1), job(1)]).collect();
        let mut estimate = Estimate::new(2, &jobs, 2);
        assert_eq!(estimate.seconds_left(), None);
        estimate.finished(0, 0.1);
        // Nothing is known of the costly one yet: it is guessed at the mean.
        assert!((estimate.seconds_left().unwrap() - (9.0 * 0.1 + 2.0 * 0.1) / 2.0).abs() < 1e-9);
        estimate.finished(1, 30.0);
        assert!((estimate.seconds_left().unwrap() - (9.0 * 0.1 + 30.0) / 2.0).abs() < 1e-9);
        assert_eq!(time_left(Duration::from_secs(5), Some(3725.0)), ", about 1h02m left");
        assert_eq!(time_left(Duration::from_secs(5), Some(200.0)), ", about 3m20s left");
        assert_eq!(time_left(Duration::from_millis(500), Some(200.0)), "");
    }
}
