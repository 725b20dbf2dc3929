//! Figures read back out of a stored `cargo xtask sim` table: the run's
//! totals and the request costs of chosen scenarios.
//!
//! The table is laid out in columns padded to their widest cell with a rule
//! of dashes under the header ([`crate::sim`]'s `columns`), so the rule
//! gives each column's span and a cell is read by its header's title.

use std::collections::BTreeMap;

use super::thousands;

/// A stored run: its rows by scenario name, and its summary lines.
pub struct SimResults {
    rows: BTreeMap<String, BTreeMap<String, String>>,
    /// `as_expected/scenarios scenarios as expected; R runs, S simulated s in C CPU s (Xx)`.
    summary: String,
    /// `same seed, same trace: N seeds run twice, D gave another trace`.
    replays: String,
}

/// The keyed scenarios whose cost the docs quote, with what each shows.
const KEYED_COSTS: [(&str, &str); 4] = [
    ("keyed-cost-100", "3 members, 100 keys, TTL 30 s"),
    ("keyed-cost-10000", "3 members, 10,000 keys, TTL 30 s"),
    ("keyed-large", "20 members, TTL 6 s, write races on the one object"),
    ("keyed-baseline-lease-per-key", "the baseline: one `Elector` per key and member, 3 members, 100 keys"),
];

impl SimResults {
    pub fn parse(text: &str) -> Result<SimResults, String> {
        let lines: Vec<&str> = text.lines().collect();
        let header_at =
            lines.iter().position(|line| line.starts_with("scenario ")).ok_or("no table header in the stored run")?;
        let rule = lines.get(header_at + 1).filter(|line| line.starts_with('-')).ok_or("no rule under the header")?;
        // Column spans: runs of dashes in the rule.
        let mut spans = Vec::new();
        let mut start = None;
        for (at, ch) in rule.char_indices().chain([(rule.len(), ' ')]) {
            match (ch == '-', start) {
                (true, None) => start = Some(at),
                (false, Some(from)) => {
                    spans.push((from, at));
                    start = None;
                }
                _ => {}
            }
        }
        let cell = |line: &str, (from, to): (usize, usize), last: bool| -> String {
            let chars: Vec<char> = line.chars().collect();
            let end = if last { chars.len() } else { to.min(chars.len()) };
            chars.get(from.min(chars.len())..end).map(|cell| cell.iter().collect::<String>()).unwrap_or_default()
        };
        let titles: Vec<String> = spans
            .iter()
            .enumerate()
            .map(|(index, span)| cell(lines[header_at], *span, index + 1 == spans.len()).trim().to_string())
            .collect();
        let mut rows = BTreeMap::new();
        for line in &lines[header_at + 2..] {
            if line.trim().is_empty() {
                break;
            }
            let row: BTreeMap<String, String> = titles
                .iter()
                .zip(&spans)
                .enumerate()
                .map(|(index, (title, span))| {
                    (title.clone(), cell(line, *span, index + 1 == spans.len()).trim().to_string())
                })
                .collect();
            let name = row.get("scenario").cloned().unwrap_or_default();
            rows.insert(name, row);
        }
        let find = |needle: &str| {
            lines
                .iter()
                .find(|line| line.contains(needle))
                .map(|line| line.to_string())
                .ok_or_else(|| format!("the stored run has no line with {needle:?}"))
        };
        Ok(SimResults { rows, summary: find("scenarios as expected;")?, replays: find("same seed, same trace:")? })
    }

    /// The run's totals as a sentence.
    pub fn totals(&self) -> Result<String, String> {
        let words: Vec<&str> = self.summary.split_whitespace().collect();
        // "110/110 scenarios as expected; 5033 runs, 455040 simulated s in 270.1 CPU s (1685x)"
        let number = |at: usize| -> Result<f64, String> {
            words
                .get(at)
                .map(|word| word.trim_matches(|c: char| !c.is_ascii_digit() && c != '.'))
                .and_then(|word| word.parse().ok())
                .ok_or_else(|| format!("cannot read the summary line {:?}", self.summary))
        };
        let (expected, scenarios) = words
            .first()
            .and_then(|pair| pair.split_once('/'))
            .ok_or_else(|| format!("cannot read the summary line {:?}", self.summary))?;
        let (runs, simulated, cpu, speed) = (number(4)?, number(6)?, number(10)?, number(13)?);
        let replay_words: Vec<&str> = self.replays.split_whitespace().collect();
        let (replayed, diverged) =
            (replay_words.get(4).copied().unwrap_or("?"), replay_words.get(8).copied().unwrap_or("?"));
        Ok(format!(
            "In the recorded run of `cargo xtask sim`, {expected} of {scenarios} scenario files turned out as they \
             expect, over {} runs and {} simulated seconds in {cpu:.0} CPU seconds ({}× real time); {replayed} seeds \
             were run twice and {diverged} gave another trace.\n",
            thousands(runs as u64),
            thousands(simulated as u64),
            thousands(speed as u64),
        ))
    }

    /// The request costs of the keyed cost worlds against the per-key-lease
    /// baseline, as a Markdown table.
    pub fn keyed_costs(&self) -> Result<String, String> {
        let mut out = String::from("| scenario | world | S3 requests per member-hour |\n|---|---|---|\n");
        let mut cost = BTreeMap::new();
        for (name, world) in KEYED_COSTS {
            let row = self.rows.get(name).ok_or_else(|| format!("the stored run has no row for {name}"))?;
            let cell = row.get("S3 req/leader-h").ok_or("the stored run has no request column")?;
            let per_hour: u64 = cell
                .split_whitespace()
                .next()
                .and_then(|number| number.parse().ok())
                .ok_or_else(|| format!("{name}: cannot read requests per member-hour from {cell:?}"))?;
            cost.insert(name, per_hour);
            out.push_str(&format!("| `{name}` | {world} | {} |\n", thousands(per_hour)));
        }
        let ratio = cost["keyed-baseline-lease-per-key"] as f64 / cost["keyed-cost-100"].max(1) as f64;
        out.push_str(&format!(
            "\nThe per-key-lease baseline makes {ratio:.0} times the requests of `keyed-cost-100`, and \
             `keyed-cost-10000` costs what `keyed-cost-100` does: the cost does not grow with the keys.\n"
        ));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
scenario                      seeds  expected  outcome      violations  failover p50/p99  S3 req/leader-h  reads/TTL  sim-s/CPU-s
----------------------------  -----  --------  -----------  ----------  ----------------  ---------------  ---------  -----------
keyed-cost-100                4      safe      as expected  none        -                 751 /member-h    -          900
keyed-cost-10000              4      safe      as expected  none        -                 756 /member-h    -          300
keyed-large                   4      safe      as expected  none        leave 1.00/2.00s  5650 /member-h   -          20
keyed-baseline-lease-per-key  4      safe      as expected  none        -                 38200 /member-h  -          50

4/4 scenarios as expected; 16 runs, 7200 simulated s in 12.4 CPU s (576x)
same seed, same trace: 4 seeds run twice, 0 gave another trace
";

    #[test]
    fn the_totals_come_from_the_summary_lines() {
        let totals = SimResults::parse(RUN).unwrap().totals().unwrap();
        assert!(totals.contains("4 of 4 scenario files"), "{totals}");
        assert!(totals.contains("16 runs and 7,200 simulated seconds in 12 CPU seconds (576× real time)"), "{totals}");
        assert!(totals.contains("4 seeds were run twice and 0 gave another trace"), "{totals}");
    }

    #[test]
    fn a_missing_row_is_an_error_naming_it() {
        let without = RUN.replace("keyed-large ", "keyed-small ");
        let error = SimResults::parse(&without).unwrap().keyed_costs().unwrap_err();
        assert!(error.contains("keyed-large"), "{error}");
    }
}
