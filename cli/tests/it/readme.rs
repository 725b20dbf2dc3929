//! Every `hoplock` command line in the README parses as written: run with
//! no credentials anywhere, each must fail on credentials, never on its
//! arguments (clap's usage errors exit with code 2).

use std::process::Command;

/// The `hoplock ...` command lines of the README's `sh` blocks, with
/// continuation lines joined.
fn readme_commands() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = line.split(" # ").next().unwrap_or("").trim_end();
        if pending.is_empty() && !line.starts_with("hoplock ") {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                commands.push(pending.split_whitespace().skip(1).map(str::to_string).collect());
                pending.clear();
            }
        }
    }
    commands
}

#[test]
fn every_hoplock_example_in_the_readme_parses() {
    let commands = readme_commands();
    assert!(commands.len() >= 4, "found {commands:?}");
    for args in commands {
        let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
            .args(&args)
            .env_clear()
            .env("HOME", std::env::temp_dir().join("hoplock-readme-no-home"))
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(2), "hoplock {}: {stderr}", args.join(" "));
        assert!(!stderr.contains("Usage:"), "hoplock {}: {stderr}", args.join(" "));
    }
}
