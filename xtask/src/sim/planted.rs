//! `--planted NAME`: the same runs with one of the library's
//! deliberate bugs switched on. `--planted all` checks that the
//! scenarios catch every bug: it succeeds only if each one makes at
//! least one scenario show a violation its file does not expect (for
//! the liveness bug, or break one of the file's bounds).

use super::*;

/// The bugs exist only in a build with the `planted` feature, so a
/// plain build runs itself again through cargo with it.
pub fn rerun_with_feature(args: &[String]) -> Result<(), String> {
    let status = std::process::Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--profile", "test", "--package", "xtask", "--features", "planted", "--", "sim"])
        .args(args)
        .status()
        .map_err(|err| format!("could not start cargo: {err}"))?;
    if status.success() { Ok(()) } else { Err(format!("the planted run failed ({status})")) }
}

#[cfg(not(feature = "planted"))]
pub fn plant(_: &str) -> Result<(), String> {
    unreachable!("only called in a build with the planted feature")
}

#[cfg(not(feature = "planted"))]
pub fn check_all(_: &Path, _: &Options) -> Result<(), String> {
    unreachable!("only called in a build with the planted feature")
}

/// Switches on the bug named `name` for the rest of the process.
#[cfg(feature = "planted")]
pub fn plant(name: &str) -> Result<(), String> {
    use hoplock::planted::{self, Bug, UnknownBug};
    let bug: Bug = name.parse().map_err(|err: UnknownBug| err.to_string())?;
    planted::plant(Some(bug));
    eprintln!("==> planted bug {bug} (breaks {})", bug.rule());
    Ok(())
}

#[cfg(feature = "planted")]
pub fn check_all(root: &Path, options: &Options) -> Result<(), String> {
    use hoplock::planted::{self, Bug};

    if options.trace.is_some() || options.timeline.is_some() || options.json {
        return Err("--planted all prints its own table; --trace, --timeline and --json need one bug".into());
    }
    let scenarios = load(root, &options.scenarios)?;
    let mut missed = Vec::new();
    println!("{:<27} {:<5} {:>6}  caught by", "planted bug", "rule", "caught");
    for bug in Bug::ALL {
        planted::plant(Some(bug));
        // A determinism bug (rule D) breaks no checker of a run: only a
        // replay shows it, so only its runs are replayed.
        let determinism = bug.rule().starts_with('D');
        let outcomes = run_all(&scenarios, options, false, determinism);
        // Caught means a violation the file does not expect. A liveness
        // bug (rule L1) breaks no safety checker: for it, a bound the
        // file sets (a handover slower than it allows) counts too, and
        // only for it, so a safety bug is never called caught because
        // it also made some run busier; likewise a replay that gives
        // another trace counts only for a determinism bug. A run that
        // fails to start or a finding that goes missing is not caught.
        let liveness = bug.rule().starts_with('L');
        let catching: Vec<&str> = scenarios
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| {
                !outcome.verdict.unexpected.is_empty()
                    || (liveness && outcome.verdict.breaks_a_bound())
                    || (determinism && !outcome.diverged.is_empty())
            })
            .map(|(named, _)| named.name.as_str())
            .collect();
        println!(
            "{:<27} {:<5} {:>6}  {}",
            bug.name(),
            bug.rule(),
            if catching.is_empty() { "NO" } else { "yes" },
            catching.join(", ")
        );
        if catching.is_empty() {
            missed.push(bug.name());
        }
    }
    planted::plant(None);
    if missed.is_empty() {
        println!("every planted bug was caught by the scenarios");
        Ok(())
    } else {
        Err(format!("no scenario caught: {}", missed.join(", ")))
    }
}
