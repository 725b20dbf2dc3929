//! What a run's history says, sorted into one lane per node: what each node
//! believed, when it was crashed, stopped or paused, when its links were cut,
//! and the faults and violations to mark.

use super::*;

/// What the history says, sorted into lanes and marks.
pub(super) struct Run<'w> {
    /// The end of the time axis, in µs.
    pub(super) end_us: u64,
    pub(super) lanes: Vec<Lane<'w>>,
    /// Fault ticks along the top, in time order.
    pub(super) faults: Vec<Mark>,
    /// Violation lines, in time order.
    pub(super) violations: Vec<Mark>,
    pub(super) terms: usize,
}

/// One node's lane.
#[derive(Default)]
pub(super) struct Lane<'w> {
    pub(super) name: &'w str,
    /// Believed leadership: start, end, generation.
    pub(super) leading: Vec<(u64, u64, u64)>,
    pub(super) crashed: Vec<(u64, u64)>,
    pub(super) stopped: Vec<(u64, u64)>,
    pub(super) paused: Vec<(u64, u64)>,
    /// Spans with some link of the node cut or held.
    pub(super) cut: Vec<(u64, u64)>,
    /// Rejected (stale) downstream writes.
    pub(super) stale_writes: Vec<u64>,
}

/// A labelled instant: a fault or a violation.
pub(super) struct Mark {
    pub(super) at_us: u64,
    pub(super) label: String,
    /// The lanes it concerns; empty means none for faults and all for
    /// violations.
    pub(super) lanes: Vec<usize>,
}

/// A cut or held link still in force while the history is read.
pub(super) struct OpenCut {
    pub(super) pair: (String, String),
    pub(super) since_us: u64,
}

impl<'w> Run<'w> {
    pub(super) fn collect(world: &'w World, report: &Report) -> Run<'w> {
        let end_us = world.duration_ms.saturating_mul(1000);
        let mut lanes: Vec<Lane<'w>> =
            world.nodes.iter().map(|node| Lane { name: node.name.as_str(), ..Lane::default() }).collect();
        // Later duplicates of a name keep an empty lane rather than
        // splitting one node's history over two.
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for (lane, node) in world.nodes.iter().enumerate() {
            index.entry(node.name.as_str()).or_insert(lane);
        }
        let lane_of = |name: &str| index.get(name).copied();

        // The runner hands over a time-ordered history, but a hand-made
        // report may not be; spans are paired up in time order, so sort a
        // copy only when needed.
        let entries: Cow<'_, [Entry]> = if report.entries.is_sorted_by_key(|entry| entry.at_us) {
            Cow::Borrowed(&report.entries)
        } else {
            let mut sorted = report.entries.clone();
            sorted.sort_by_key(|entry| entry.at_us);
            Cow::Owned(sorted)
        };

        let all_terms = terms(&entries, end_us);
        let term_count = all_terms.len();
        for term in all_terms {
            if let Some(lane) = lane_of(&term.node).and_then(|lane| lanes.get_mut(lane)) {
                lane.leading.push((term.start_us, term.end_us, term.generation));
            }
        }

        // Restarting a node records a crash at the same instant (its old
        // process dies); the restart's own label says enough there.
        let restarts: BTreeSet<(u64, &str)> = entries
            .iter()
            .filter_map(|entry| match &entry.event {
                Event::Fault { action } => match action.applied() {
                    Some(Action::Restart { node }) => Some((entry.at_us, node.as_str())),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let mut crashed_since: Vec<Option<u64>> = vec![None; lanes.len()];
        let mut stopped_since: Vec<Option<u64>> = vec![None; lanes.len()];
        let mut open_cuts: Vec<OpenCut> = Vec::new();
        let mut faults = Vec::new();
        for entry in entries.iter() {
            let at = entry.at_us;
            let lane = lane_of(&entry.node);
            match &entry.event {
                Event::Started { .. } => {
                    if let Some(lane) = lane {
                        close(&mut crashed_since, lane, at, &mut lanes, |lane| &mut lane.crashed);
                        close(&mut stopped_since, lane, at, &mut lanes, |lane| &mut lane.stopped);
                    }
                }
                Event::Crashed => {
                    if let Some(lane) = lane {
                        // A crash ends a graceful stop: from here on the
                        // node is down, not idle.
                        close(&mut stopped_since, lane, at, &mut lanes, |lane| &mut lane.stopped);
                        if let Some(since) = crashed_since.get_mut(lane) {
                            since.get_or_insert(at);
                        }
                    }
                    if !restarts.contains(&(at, entry.node.as_str())) {
                        faults.push(Mark {
                            at_us: at,
                            label: format!("crash {}", entry.node),
                            lanes: lane.into_iter().collect(),
                        });
                    }
                }
                Event::Paused { until_us } | Event::Suspended { until_us, .. } => {
                    if let Some(lane) = lane.and_then(|lane| lanes.get_mut(lane)) {
                        lane.paused.push((at, (*until_us).max(at)));
                    }
                    let millis = until_us.saturating_sub(at) / 1000;
                    let verb = if matches!(entry.event, Event::Suspended { .. }) { "suspend" } else { "pause" };
                    faults.push(Mark {
                        at_us: at,
                        label: format!("{verb} {} for {millis} ms", entry.node),
                        lanes: lane.into_iter().collect(),
                    });
                }
                Event::Downstream { accepted: false, .. } => {
                    if let Some(lane) = lane.and_then(|lane| lanes.get_mut(lane)) {
                        lane.stale_writes.push(at);
                    }
                }
                Event::Fault { action: fault } => {
                    // A skipped action gets a label, but no lane to trace
                    // it through.
                    let hosts = fault.applied().map(Action::hosts).unwrap_or_default();
                    match fault.applied() {
                        Some(
                            Action::Partition { a, b }
                            | Action::PartitionOneway { from: a, to: b }
                            | Action::Hold { a, b },
                        ) => {
                            let pair = unordered(a, b);
                            if !open_cuts.iter().any(|cut| cut.pair == pair) {
                                open_cuts.push(OpenCut { pair, since_us: at });
                            }
                        }
                        // turmoil heals a link on either verb, whichever
                        // of them cut it, so either closes the span.
                        Some(Action::Repair { a, b } | Action::Release { a, b }) => {
                            let pair = unordered(a, b);
                            open_cuts.retain(|cut| {
                                if cut.pair != pair {
                                    return true;
                                }
                                add_cut(&mut lanes, &lane_of, cut, at);
                                false
                            });
                        }
                        Some(Action::Stop { node }) => {
                            if let Some(since) = lane_of(node).and_then(|lane| stopped_since.get_mut(lane)) {
                                since.get_or_insert(at);
                            }
                        }
                        _ => {}
                    }
                    faults.push(Mark {
                        at_us: at,
                        label: shorten(&fault.label(), 32),
                        lanes: hosts.iter().filter_map(|host| lane_of(host)).collect(),
                    });
                }
                _ => {}
            }
        }
        for lane in 0..lanes.len() {
            close(&mut crashed_since, lane, end_us, &mut lanes, |lane| &mut lane.crashed);
            close(&mut stopped_since, lane, end_us, &mut lanes, |lane| &mut lane.stopped);
        }
        for cut in &open_cuts {
            add_cut(&mut lanes, &lane_of, cut, end_us);
        }

        let mut violations: Vec<Mark> = report
            .violations
            .iter()
            .map(|violation| Mark {
                at_us: violation.at_us,
                label: violation.property.name().to_string(),
                lanes: violation.nodes.iter().filter_map(|node| lane_of(node)).collect(),
            })
            .collect();
        violations.sort_by_key(|mark| mark.at_us);
        Run { end_us, lanes, faults, violations, terms: term_count }
    }
}

/// Ends the open span of `lane` in `open`, if any, at `at`.
pub(super) fn close<'w>(
    open: &mut [Option<u64>],
    lane: usize,
    at: u64,
    lanes: &mut [Lane<'w>],
    spans: for<'l> fn(&'l mut Lane<'w>) -> &'l mut Vec<(u64, u64)>,
) {
    if let (Some(since), Some(lane)) = (open.get_mut(lane).and_then(Option::take), lanes.get_mut(lane)) {
        spans(lane).push((since, at));
    }
}

/// Records a cut link, ended at `at`, on the lanes of both its ends.
pub(super) fn add_cut(lanes: &mut [Lane<'_>], lane_of: &impl Fn(&str) -> Option<usize>, cut: &OpenCut, at: u64) {
    let (a, b) = (&cut.pair.0, &cut.pair.1);
    let mut ends: Vec<usize> = [a, b].into_iter().filter_map(|host| lane_of(host)).collect();
    // A link from a node to itself is still one span on one lane.
    ends.dedup();
    for lane in ends {
        if let Some(lane) = lanes.get_mut(lane) {
            lane.cut.push((cut.since_us, at));
        }
    }
}

/// The pair in a fixed order, so `partition a s3` and `repair s3 a` match.
pub(super) fn unordered(a: &str, b: &str) -> (String, String) {
    if a <= b { (a.to_string(), b.to_string()) } else { (b.to_string(), a.to_string()) }
}
