//! What `hoplock check-s3` found: each check's result, the findings, one
//! verdict, and how they are shown (a table, or JSON for machines).
//!
//! # The JSON report (`--json`), schema version 1
//!
//! One object on standard output:
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `schema_version` | integer | `1`; a new version may add fields, never change these |
//! | `verdict` | string | `SAFE`, `NOT_JUDGED`, `UNSUPPORTED`, `UNSAFE_IGNORES_CONDITIONS`, `UNSAFE_NOT_ATOMIC`, `UNSAFE_WEAK_ETAGS` or `ERROR` |
//! | `verdict_text` | string | the verdict as the table prints it, e.g. `UNSAFE: not atomic` |
//! | `exit_code` | integer | the process's exit code (130 when Ctrl-C cut the run short) |
//! | `error` | string or null | why the run could not finish (verdict `ERROR`) |
//! | `warnings` | array of strings | warnings (a wrong signature accepted, lagging reads) |
//! | `not_judged` | array of strings | checks that ran on too little evidence to judge, with why |
//! | `target` | object | `endpoints` (array), `bucket`, `prefix`, `fake_mode` (string or null), `server` (its `Server` header, or null) |
//! | `settings` | object | `rounds`, `concurrency`, `body_bytes`, `settle_ms`, `thorough`, `bare_etags` |
//! | `read_lag_ms` | integer or null | the longest time a write took to show in reads |
//! | `checks` | array | one object per check: `name`, `status` (`pass`, `fail`, `not-supported`, `skipped`), `verdict` (what a failure means, or null), `evidence` |
//! | `findings` | array | one object per finding: `name`, `value` |
//! | `clean_up` | object | `deleted` (integer), `left` (array of `{key, why}`), `came_back` (keys found again after their delete) |
//! | `elapsed_ms` | integer | how long the run took |

use std::fmt::Write as _;

use serde_json::{Value, json};

/// The report's JSON schema version.
pub const SCHEMA_VERSION: u64 = 1;

/// The one-word answer to "can hoplock elect on this store?".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// A condition that should fail succeeded.
    IgnoresConditions,
    /// Sequential checks pass, but races produce two winners or a
    /// non-linearizable history.
    NotAtomic,
    /// Different bytes got the same ETag.
    WeakEtags,
    /// Conditional writes are refused loudly: safe, but unusable.
    Unsupported,
    /// No check failed, but some ran on too little evidence to be judged.
    NotJudged,
    /// Every condition honoured, also under races, and every check judged.
    Safe,
    /// The run could not finish.
    Error,
}

impl Verdict {
    /// The verdict as the table prints it.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Safe => "SAFE",
            Verdict::NotJudged => "NOT JUDGED",
            Verdict::Unsupported => "UNSUPPORTED",
            Verdict::IgnoresConditions => "UNSAFE: ignores conditions",
            Verdict::NotAtomic => "UNSAFE: not atomic",
            Verdict::WeakEtags => "UNSAFE: weak ETags",
            Verdict::Error => "ERROR",
        }
    }

    /// The verdict's JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Safe => "SAFE",
            Verdict::NotJudged => "NOT_JUDGED",
            Verdict::Unsupported => "UNSUPPORTED",
            Verdict::IgnoresConditions => "UNSAFE_IGNORES_CONDITIONS",
            Verdict::NotAtomic => "UNSAFE_NOT_ATOMIC",
            Verdict::WeakEtags => "UNSAFE_WEAK_ETAGS",
            Verdict::Error => "ERROR",
        }
    }

    /// The exit code: one per verdict, and one for SAFE with warnings.
    pub fn exit_code(self, warnings: bool) -> u8 {
        match self {
            Verdict::Safe if warnings => EXIT_SAFE_WITH_WARNINGS,
            Verdict::Safe => 0,
            Verdict::Error => 1,
            Verdict::Unsupported => 4,
            Verdict::IgnoresConditions => 5,
            Verdict::NotAtomic => 6,
            Verdict::WeakEtags => 7,
            Verdict::NotJudged => 8,
        }
    }
}

/// The exit code of a SAFE verdict with warnings.
pub const EXIT_SAFE_WITH_WARNINGS: u8 = 3;

/// The exit code of a run stopped by Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The store did what S3 does.
    Pass,
    /// It did not; the check's verdict says what that means.
    Fail,
    /// The store refused the conditional request loudly (501, 400
    /// NotImplemented).
    NotSupported,
    /// Not run: an earlier check already settled it, or the run was cut
    /// short.
    Skipped,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::NotSupported => "not-supported",
            Status::Skipped => "skipped",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone)]
pub struct Check {
    /// The check's name, as the table shows it.
    pub name: &'static str,
    /// How it came out.
    pub status: Status,
    /// What a failure means for the verdict; `None` for a warning only.
    pub verdict: Option<Verdict>,
    /// What was sent and what came back.
    pub evidence: String,
}

impl Check {
    /// A passed check.
    pub fn pass(name: &'static str, evidence: impl Into<String>) -> Check {
        Check { name, status: Status::Pass, verdict: None, evidence: evidence.into() }
    }

    /// A failed check and the verdict it implies.
    pub fn fail(name: &'static str, verdict: Verdict, evidence: impl Into<String>) -> Check {
        Check { name, status: Status::Fail, verdict: Some(verdict), evidence: evidence.into() }
    }

    /// A failed check that is a warning, not a verdict.
    pub fn warn(name: &'static str, evidence: impl Into<String>) -> Check {
        Check { name, status: Status::Fail, verdict: None, evidence: evidence.into() }
    }

    /// A conditional request refused loudly.
    pub fn not_supported(name: &'static str, evidence: impl Into<String>) -> Check {
        Check { name, status: Status::NotSupported, verdict: Some(Verdict::Unsupported), evidence: evidence.into() }
    }

    /// A check not run.
    pub fn skipped(name: &'static str, why: impl Into<String>) -> Check {
        Check { name, status: Status::Skipped, verdict: None, evidence: why.into() }
    }
}

/// Everything one run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The endpoints checked.
    pub endpoints: Vec<String>,
    /// The bucket.
    pub bucket: String,
    /// The prefix written under.
    pub prefix: String,
    /// The fake S3's mode, when the built-in fake was checked.
    pub fake_mode: Option<String>,
    /// Race rounds per race check.
    pub rounds: u32,
    /// Racing clients per round.
    pub concurrency: u32,
    /// Bytes per racing write.
    pub body_bytes: usize,
    /// How long after the last refused write every key was read again.
    pub settle: std::time::Duration,
    /// Whether every check sent `If-Match` ETags bare (`--bare-etags`).
    pub bare_etags: bool,
    /// Whether the one-at-a-time checks also wrote a body over 5 MiB.
    pub thorough: bool,
    /// The longest time a write took to show in reads, once measured.
    pub read_lag: Option<std::time::Duration>,
    /// How long read-backs waited after a write, for the read lag.
    pub read_lag_wait: std::time::Duration,
    /// The `Server` header of the store's first answer, if any.
    pub server: Option<String>,
    /// When the run began, by this machine's clock.
    pub started: Option<std::time::SystemTime>,
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
    /// Facts reported but not judged.
    pub findings: Vec<(&'static str, String)>,
    /// Why the run could not finish.
    pub error: Option<String>,
    /// Whether Ctrl-C cut the run short.
    pub interrupted: bool,
    /// Keys deleted afterwards.
    pub deleted: usize,
    /// Keys that could not be deleted, with why.
    pub left: Vec<(String, String)>,
    /// Keys found again after their delete (and deleted once more), each
    /// with whether it held a write the store had refused.
    pub came_back: Vec<(String, bool)>,
    /// How long the run took.
    pub elapsed_ms: u64,
}

impl Report {
    /// The verdict: ERROR if the run did not finish; otherwise the first
    /// that applies of ignores conditions, not atomic, weak ETags,
    /// unsupported; NOT JUDGED if a check could not be judged; SAFE if
    /// every check was judged and none failed.
    pub fn verdict(&self) -> Verdict {
        if self.error.is_some() {
            return Verdict::Error;
        }
        let failed = self.checks.iter().filter_map(|check| check.verdict).min();
        match failed {
            Some(verdict) => verdict,
            None if self.not_judged().is_empty() => Verdict::Safe,
            None => Verdict::NotJudged,
        }
    }

    /// The checks that could not be judged, with why.
    pub fn not_judged(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|check| check.status == Status::Skipped)
            .map(|check| format!("{}: {}", check.name, check.evidence))
            .collect()
    }

    /// The warnings: failed checks that imply no verdict.
    pub fn warnings(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|check| check.status == Status::Fail && check.verdict.is_none())
            .map(|check| format!("{}: {}", check.name, check.evidence))
            .collect()
    }

    /// The exit code for this report.
    pub fn exit_code(&self) -> u8 {
        if self.interrupted {
            return EXIT_INTERRUPTED;
        }
        self.verdict().exit_code(!self.warnings().is_empty())
    }

    /// The report as a table, for people.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let target = match &self.fake_mode {
            Some(mode) => format!("the built-in fake S3 ({mode} mode) at {}", self.endpoints.join(", ")),
            None => self.endpoints.join(", "),
        };
        let _ = writeln!(out, "hoplock check-s3: {target}, bucket {}, prefix {}", self.bucket, self.prefix);
        let _ = writeln!(out, "{}\n", self.settings_line());
        let width = self.checks.iter().map(|check| check.name.len()).max().unwrap_or(5).max(5);
        let _ = writeln!(out, "{:<width$}  {:<13}  evidence", "check", "result");
        let _ = writeln!(out, "{:-<width$}  {:-<13}  {:-<8}", "", "", "");
        for check in &self.checks {
            let _ = writeln!(out, "{:<width$}  {:<13}  {}", check.name, result(check), check.evidence);
        }
        if !self.findings.is_empty() {
            let width = self.findings.iter().map(|(name, _)| name.len()).max().unwrap_or(7);
            let _ = writeln!(out, "\nfindings");
            for (name, value) in &self.findings {
                let _ = writeln!(out, "  {name:<width$}  {value}");
            }
        }
        let _ = writeln!(out);
        if let Some(error) = &self.error {
            let _ = writeln!(out, "error: {error}");
        }
        for warning in self.warnings() {
            let _ = writeln!(out, "warning: {warning}");
        }
        for check in self.not_judged() {
            let _ = writeln!(out, "not judged: {check}");
        }
        let _ = writeln!(out, "{}", self.clean_up_line());
        for (key, why) in &self.left {
            let _ = writeln!(out, "  left {key}: {why}");
        }
        let _ = writeln!(
            out,
            "verdict: {} (exit code {}, {:.1} s)",
            self.verdict().text(),
            self.exit_code(),
            self.elapsed_ms as f64 / 1000.0
        );
        out
    }

    fn settings_line(&self) -> String {
        let mut line = format!(
            "{} rounds of {} racing clients, {} KiB bodies, settle {} s",
            self.rounds,
            self.concurrency,
            self.body_bytes / 1024,
            self.settle.as_secs_f64()
        );
        if self.thorough {
            line.push_str(", thorough (a body over 5 MiB too)");
        }
        if self.bare_etags {
            line.push_str(", bare ETags");
        }
        line
    }

    fn clean_up_line(&self) -> String {
        let mut line = format!("clean-up: {} keys deleted, {} left", self.deleted, self.left.len());
        if !self.came_back.is_empty() {
            let _ = write!(line, ", {} came back after their delete (deleted again)", self.came_back.len());
        }
        line
    }

    /// The report as Markdown, to keep with a team's infrastructure docs.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let verdict = self.verdict();
        let _ = writeln!(out, "# hoplock check-s3: {}\n", verdict.text());
        let target = match &self.fake_mode {
            Some(mode) => format!("the built-in fake S3 ({mode} mode) at {}", self.endpoints.join(", ")),
            None => self.endpoints.join(", "),
        };
        let date = self.started.map_or_else(|| "unknown".to_owned(), hoplock::s3::xml::format_http_date);
        for (name, value) in [
            ("store", target),
            ("bucket and prefix", format!("`{}`, `{}`", self.bucket, self.prefix)),
            ("server", self.server.clone().unwrap_or_else(|| "no Server header".into())),
            ("settings", self.settings_line()),
            ("date", date),
            ("hoplock", env!("CARGO_PKG_VERSION").to_owned()),
            ("verdict", format!("**{}** (exit code {})", verdict.text(), self.exit_code())),
        ] {
            let _ = writeln!(out, "- {name}: {value}");
        }
        let cell = |text: &str| text.replace('|', "\\|").replace('\n', " ");
        let _ = writeln!(out, "\n| check | result | evidence |\n|---|---|---|");
        for check in &self.checks {
            let _ = writeln!(out, "| {} | {} | {} |", check.name, result(check), cell(&check.evidence));
        }
        if !self.findings.is_empty() {
            let _ = writeln!(out, "\n| finding | value |\n|---|---|");
            for (name, value) in &self.findings {
                let _ = writeln!(out, "| {name} | {} |", cell(value));
            }
        }
        let _ = writeln!(out);
        if let Some(error) = &self.error {
            let _ = writeln!(out, "- error: {error}");
        }
        for warning in self.warnings() {
            let _ = writeln!(out, "- warning: {}", cell(&warning));
        }
        for check in self.not_judged() {
            let _ = writeln!(out, "- not judged: {}", cell(&check));
        }
        let _ = writeln!(out, "- {}", self.clean_up_line());
        out
    }

    /// The report as JSON (schema in this module's docs).
    pub fn json(&self) -> Value {
        let verdict = self.verdict();
        json!({
            "schema_version": SCHEMA_VERSION,
            "verdict": verdict.name(),
            "verdict_text": verdict.text(),
            "exit_code": self.exit_code(),
            "error": self.error,
            "warnings": self.warnings(),
            "not_judged": self.not_judged(),
            "target": {
                "endpoints": self.endpoints,
                "bucket": self.bucket,
                "prefix": self.prefix,
                "fake_mode": self.fake_mode,
                "server": self.server,
            },
            "settings": {
                "rounds": self.rounds,
                "concurrency": self.concurrency,
                "body_bytes": self.body_bytes,
                "settle_ms": self.settle.as_millis() as u64,
                "thorough": self.thorough,
                "bare_etags": self.bare_etags,
            },
            "read_lag_ms": self.read_lag.map(|lag| lag.as_millis() as u64),
            "checks": self.checks.iter().map(|check| json!({
                "name": check.name,
                "status": check.status.name(),
                "verdict": check.verdict.map(Verdict::name),
                "evidence": check.evidence,
            })).collect::<Vec<_>>(),
            "findings": self.findings.iter().map(|(name, value)| json!({"name": name, "value": value})).collect::<Vec<_>>(),
            "clean_up": {
                "deleted": self.deleted,
                "left": self.left.iter().map(|(key, why)| json!({"key": key, "why": why})).collect::<Vec<_>>(),
                "came_back": self.came_back.iter().map(|(key, _)| key).collect::<Vec<_>>(),
            },
            "elapsed_ms": self.elapsed_ms,
        })
    }
}

/// A check's result as the table and the Markdown show it.
fn result(check: &Check) -> &'static str {
    match (check.status, check.verdict) {
        (Status::Fail, None) => "WARNING",
        (Status::Pass, _) => "pass",
        (Status::Fail, _) => "FAIL",
        (Status::NotSupported, _) => "not supported",
        (Status::Skipped, _) => "not judged",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(checks: Vec<Check>) -> Report {
        Report { checks, ..Report::default() }
    }

    #[test]
    fn the_first_verdict_in_the_stated_order_wins() {
        let unsupported = Check::not_supported("a", "");
        let weak = Check::fail("b", Verdict::WeakEtags, "");
        let racy = Check::fail("c", Verdict::NotAtomic, "");
        let ignores = Check::fail("d", Verdict::IgnoresConditions, "");
        let cases = [
            (vec![unsupported.clone(), weak.clone(), racy.clone(), ignores.clone()], Verdict::IgnoresConditions),
            (vec![unsupported.clone(), weak.clone(), racy.clone()], Verdict::NotAtomic),
            (vec![racy, ignores], Verdict::IgnoresConditions),
            (vec![unsupported.clone(), weak], Verdict::WeakEtags),
            (vec![Check::pass("e", ""), unsupported], Verdict::Unsupported),
            (vec![Check::pass("e", "")], Verdict::Safe),
        ];
        for (checks, expected) in cases {
            assert_eq!(report(checks).verdict(), expected);
        }
        let failed = Report { error: Some("unreachable".into()), ..report(vec![Check::pass("a", "")]) };
        assert_eq!(failed.verdict(), Verdict::Error);
    }

    #[test]
    fn safe_needs_every_check_judged() {
        let thin = report(vec![Check::pass("a", "5 writes"), Check::skipped("audit", "not judged: 3 writes")]);
        assert_eq!(thin.verdict(), Verdict::NotJudged);
        assert_eq!(thin.exit_code(), 8);
        assert_eq!(thin.not_judged(), vec!["audit: not judged: 3 writes".to_owned()]);
        assert_eq!(thin.json()["not_judged"][0], "audit: not judged: 3 writes");
        assert!(thin.table().contains("not judged: audit"), "{}", thin.table());
        let failed = report(vec![Check::skipped("audit", "not judged"), Check::fail("c", Verdict::NotAtomic, "")]);
        assert_eq!(failed.verdict(), Verdict::NotAtomic, "a failure is a verdict whatever else could not be judged");
    }

    #[test]
    fn the_markdown_report_escapes_cells_and_names_the_version() {
        let mut thin = report(vec![Check::pass("create", "a | b\nc")]);
        thin.findings.push(("ETag", "x|y".into()));
        let markdown = thin.markdown();
        assert!(markdown.starts_with("# hoplock check-s3: SAFE\n"), "{markdown}");
        assert!(markdown.contains("| create | pass | a \\| b c |"), "{markdown}");
        assert!(markdown.contains("| ETag | x\\|y |"), "{markdown}");
        assert!(markdown.contains(concat!("- hoplock: ", env!("CARGO_PKG_VERSION"))), "{markdown}");
    }

    #[test]
    fn warnings_have_their_own_exit_code_only_when_otherwise_safe() {
        let warned = report(vec![Check::pass("a", ""), Check::warn("auth", "accepted")]);
        assert_eq!(warned.verdict(), Verdict::Safe);
        assert_eq!(warned.exit_code(), EXIT_SAFE_WITH_WARNINGS);
        let unsafe_and_warned = report(vec![Check::warn("auth", "accepted"), Check::fail("c", Verdict::NotAtomic, "")]);
        assert_eq!(unsafe_and_warned.exit_code(), 6);
        let codes: Vec<u8> = [
            Verdict::Safe,
            Verdict::Error,
            Verdict::Unsupported,
            Verdict::IgnoresConditions,
            Verdict::NotAtomic,
            Verdict::WeakEtags,
            Verdict::NotJudged,
        ]
        .iter()
        .map(|verdict| verdict.exit_code(false))
        .chain([EXIT_SAFE_WITH_WARNINGS])
        .collect();
        let mut distinct = codes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), codes.len(), "one exit code per verdict: {codes:?}");
    }

    #[test]
    fn the_json_report_carries_its_schema_version_and_every_check() {
        let value =
            report(vec![Check::pass("create", "201"), Check::fail("races", Verdict::NotAtomic, "2 winners")]).json();
        assert_eq!(value["schema_version"], 1);
        assert_eq!(value["verdict"], "UNSAFE_NOT_ATOMIC");
        assert_eq!(value["exit_code"], 6);
        assert_eq!(value["checks"][1]["status"], "fail");
        assert_eq!(value["checks"][1]["verdict"], "UNSAFE_NOT_ATOMIC");
    }
}
