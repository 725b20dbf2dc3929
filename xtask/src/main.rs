//! Project tasks, run as `cargo xtask <task>`.
//!
//! Each task lives in its own module; this file only dispatches.

use std::process::ExitCode;

// A simulated run allocates a great deal in small pieces (every request's
// headers, bodies and history entries), and jemalloc serves that faster
// than the system allocator; mimalloc was measured slower still. The
// allocator decides no outcome: every trace is the same under either.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod azurite;
mod bench_hrw;
mod chaos;
mod docs;
mod fake_s3;
mod flags;
mod gcs_server;
mod moto_server;
mod mutants;
mod s3_server;
mod sim;
mod test;

/// The workspace's root directory.
fn workspace_root() -> Result<&'static std::path::Path, String> {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or_else(|| "xtask is not inside the workspace".to_string())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let task = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let result = match task.as_str() {
        "test" => test::run(&rest),
        "sim" => sim::run(&rest),
        "chaos" => chaos::run(&rest),
        // Hidden: the command each chaos world's `hoplock run` starts.
        "chaos-child" => chaos::child(&rest),
        "bench-hrw" => bench_hrw::run(&rest),
        "docs" => docs::run(&rest),
        "mutants" => mutants::run(&rest),
        // Hidden: starts SeaweedFS for hand testing and prints its settings.
        "s3-server" => s3_server::run(&rest),
        "fake-s3" => fake_s3::run(&rest),
        _ => {
            eprintln!(
                "usage: cargo xtask <task> [options]\n\ntasks:\n  sim         run the scenario files in the simulator (--help for options)\n  chaos       run the chaos worlds on real processes and a real S3 server (--help)\n  test        run every check CI runs\n  bench-hrw   run the HRW ownership benchmark and print the table\n  docs        write the docs' generated blocks from docs/results/ (--check: fail if stale)\n  mutants     the scenarios' mutation score against the elector (--help)\n  fake-s3     serve the simulator's fake S3 on 127.0.0.1 (--port N --mode M)\n  s3-server   install and start a real SeaweedFS server on 127.0.0.1"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask {task}: {err}");
            ExitCode::FAILURE
        }
    }
}
