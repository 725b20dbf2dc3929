//! Every `hoplock` command line in the README and the docs parses as
//! written: run with no credentials anywhere, each must fail on
//! credentials, never on its arguments (clap's usage errors exit with
//! code 2).

use std::process::Command;

/// The user-facing documents: the README and every page of `docs/`.
fn documents() -> Vec<String> {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut paths = vec![root.join("README.md")];
    let mut pages: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths.iter().map(|path| std::fs::read_to_string(path).unwrap()).collect()
}

/// The `hoplock ...` command lines of the documents' `sh` blocks, with
/// continuation lines joined.
fn readme_commands() -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    for document in documents() {
        commands.extend(commands_in(&document));
    }
    commands
}

fn commands_in(readme: &str) -> Vec<Vec<String>> {
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
fn every_hoplock_example_in_the_docs_parses() {
    let commands = readme_commands();
    assert!(commands.len() >= 8, "found {commands:?}");
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
