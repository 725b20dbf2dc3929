//! `--timeline FILE.svg`: one run drawn as a lane per node.
//!
//! The picture reads left to right in simulated seconds, from zero to the
//! world's `duration_ms`, with one horizontal lane per node in the world's
//! order, its name on the left. Each lane has two strips:
//!
//! - the upper, wide strip says what the node believed and whether it ran:
//!   light grey while it follows, a colour per generation while it believes
//!   it leads (with `g3` written inside when the bar has room), near-black
//!   from a crash until the node starts again, mid grey after a graceful
//!   `stop`, and diagonal hatching over whatever it was doing while it was
//!   paused;
//! - the lower, thin orange strip marks the time any link of the node was
//!   cut or held (`partition`, `partition-oneway` or `hold` naming it, until
//!   a `repair` or `release` of the same pair).
//!
//! Above the lanes, every fault the runner applied (and every crash and
//! pause, which the history records on the node itself) gets a grey tick
//! with a short label; its time is also traced faintly through the lanes of
//! the nodes it names. Violations are red: a red label with the property's
//! name above the lanes and a thick red line through the lanes of the nodes
//! involved (all lanes when it names none we know). Stale downstream writes,
//! the ones the fenced resource rejected, are red crosses on the writer's
//! lane. A legend along the bottom repeats all of this in brief.
//!
//! Only plotters' SVG backend is used, without any font stack: the backend
//! writes `<text>` elements and leaves the glyphs to the viewer, so the
//! layout here estimates text widths itself to keep labels from colliding.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::Path;

use hoplock_sim::history::{Entry, Event};
use hoplock_sim::invariants::terms;
use hoplock_sim::runner::Report;
use hoplock_sim::world::{Action, World};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Canvas width in pixels.
const WIDTH: u32 = 1200;
/// Height of one node's lane in pixels.
const LANE_HEIGHT: u32 = 60;
/// Height of the title row.
const TITLE_HEIGHT: i32 = 36;
/// At most this many rows of fault and violation labels above the lanes; a
/// label that fits in none of them is left out and only its tick is drawn.
/// The header grows with the rows in use, so a quiet run stays compact.
const LABEL_ROWS: usize = 5;
/// Height of one label row.
const LABEL_ROW_HEIGHT: i32 = 15;
/// The gap between the lowest label row and the lanes.
const HEADER_GAP: i32 = 8;
/// The x axis below the lanes: tick labels and the axis caption.
const X_AXIS_HEIGHT: u32 = 42;
/// The legend row at the very bottom.
const LEGEND_HEIGHT: u32 = 34;
/// The node names' column on the left.
const NAME_WIDTH: u32 = 120;
/// The gap right of the lanes, so the last x label fits.
const RIGHT_MARGIN: u32 = 24;
/// A bound on the canvas height, so a world with absurdly many nodes gives
/// an error instead of an SVG no viewer opens.
const MAX_HEIGHT: u64 = 200_000;

const FONT: &str = "sans-serif";
// Font sizes as plotters takes them; its SVG backend divides them by 1.24
// to get pixels, so 14 is about 11 px.
/// The title.
const TITLE_SIZE: u32 = 21;
/// Node names and the run's summary.
const NAME_SIZE: u32 = 17;
/// The axis, the legend.
const SMALL_SIZE: u32 = 15;
/// Words inside bars.
const BAR_SIZE: u32 = 14;
/// The labels above the lanes.
const LABEL_SIZE: u32 = 14;
const FOLLOWER: RGBColor = RGBColor(222, 222, 222);
const CRASHED: RGBColor = RGBColor(34, 34, 34);
const STOPPED: RGBColor = RGBColor(150, 150, 150);
const PAUSE_HATCH: RGBColor = RGBColor(20, 20, 60);
const CUT: RGBColor = RGBColor(255, 140, 0);
const FAULT: RGBColor = RGBColor(110, 110, 110);
const VIOLATION: RGBColor = RGBColor(214, 25, 28);
const TEXT: RGBColor = RGBColor(30, 30, 30);
const LANE_RULE: RGBColor = RGBColor(200, 200, 200);

/// Leader colours, one per generation, cycling. Red, orange and greys are
/// left out because violations, cut links and the non-leader states use
/// them.
const GENERATION_COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(57, 59, 121),
    RGBColor(0, 128, 128),
    RGBColor(205, 160, 0),
];

/// Draws `report` (a run of `world`) into an SVG file at `path`.
///
/// `title` heads the picture, followed by the run's seed. Fails, without
/// writing anything, on a world with no nodes or no duration, since there
/// is then no lane or no time axis to draw, and on one with thousands of
/// nodes, whose picture would be too tall to view; fails too if the file
/// cannot be written. History entries naming hosts the world lacks are
/// left out of the lanes but still labelled if they are faults.
pub fn draw(world: &World, report: &Report, title: &str, path: &Path) -> Result<(), String> {
    if world.nodes.is_empty() {
        return Err("cannot draw a timeline: the world has no nodes".into());
    }
    if world.duration_ms == 0 {
        return Err("cannot draw a timeline: the world's duration_ms is zero".into());
    }
    let run = Run::collect(world, report);
    // The labels are packed before anything is drawn because the header's
    // height depends on how many rows they need. The axis's pixel span
    // follows from the fixed margins alone, so it is known already.
    let axis = Axis { left: NAME_WIDTH as i32, right: (WIDTH - RIGHT_MARGIN) as i32, end_us: run.end_us };
    let labels = Labels::pack(&run, &axis);
    let header = (TITLE_HEIGHT + labels.rows.max(1) as i32 * LABEL_ROW_HEIGHT + HEADER_GAP) as u32;
    let height = u64::from(header + X_AXIS_HEIGHT + LEGEND_HEIGHT)
        + u64::from(LANE_HEIGHT).saturating_mul(world.nodes.len() as u64);
    let height = u32::try_from(height).ok().filter(|height| u64::from(*height) <= MAX_HEIGHT).ok_or_else(|| {
        format!("cannot draw a timeline of {} nodes: the picture would be too tall", world.nodes.len())
    })?;
    let failed = |err: &dyn Display| format!("drawing the timeline into {}: {err}", path.display());

    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|err| failed(&err))?;
    let end_secs = run.end_us as f64 / 1e6;
    let mut chart = ChartBuilder::on(&root)
        .margin_top(header)
        .margin_bottom(LEGEND_HEIGHT)
        .margin_right(RIGHT_MARGIN)
        .x_label_area_size(X_AXIS_HEIGHT)
        .y_label_area_size(NAME_WIDTH)
        // Only the x axis is plotters'; the lanes are laid out in pixels
        // below, so the y range is a placeholder.
        .build_cartesian_2d(0f64..end_secs, 0f64..1f64)
        .map_err(|err| failed(&err))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_labels(14)
        .x_label_formatter(&|secs| seconds_label(*secs))
        .x_desc("simulated seconds")
        .label_style((FONT, SMALL_SIZE))
        .axis_desc_style((FONT, SMALL_SIZE))
        .bold_line_style(RGBColor(228, 228, 228))
        // Lines between the labelled ticks would comb the gaps between the
        // strips; the labelled ones are enough to read times off.
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(|err| failed(&err))?;

    let (x_range, y_range) = chart.plotting_area().get_pixel_range();
    let geometry = Geometry {
        // The same span as `axis` unless plotters lays out its margins
        // differently from what is assumed above; the chart's own span then
        // wins, and labels are at most a few pixels off their ticks.
        axis: Axis { left: x_range.start, right: x_range.end, end_us: run.end_us },
        top: y_range.start,
        lane_height: (y_range.end - y_range.start) / world.nodes.len() as i32,
    };
    draw_lanes(&root, &geometry, &run).map_err(|err| failed(&err))?;
    draw_marks(&root, &geometry, &run, &labels).map_err(|err| failed(&err))?;
    draw_title(&root, &run, title, report.seed).map_err(|err| failed(&err))?;
    draw_legend(&root, &run, height).map_err(|err| failed(&err))?;
    root.present().map_err(|err| failed(&err))?;
    Ok(())
}

/// The drawing area everything is drawn on, in canvas pixels.
type Canvas<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult<'a> = Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>;

mod run;
use run::*;

/// `text` cut to at most `max` characters, with an ellipsis if cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut short: String = text.chars().take(max.saturating_sub(1)).collect();
    short.push('…');
    short
}

/// An x-axis label: whole seconds without decimals, others with as few as
/// they need (up to six, for runs of a few milliseconds).
fn seconds_label(secs: f64) -> String {
    let text = format!("{secs:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A guess at a label's width in pixels. The SVG has no font metrics to
/// offer, so this assumes an average sans-serif glyph of 0.55 em, a little
/// wide for lower-case text in common fonts, so estimates err towards room.
/// plotters' SVG backend writes a font size of `size / 1.24` pixels.
fn text_width(text: &str, size: u32) -> i32 {
    (text.chars().count() as f64 * f64::from(size) / 1.24 * 0.55).ceil() as i32
}

/// `text` shortened, with an ellipsis, until it is at most `width` pixels
/// wide at `size`.
fn fit(text: &str, size: u32, width: i32) -> String {
    let mut max = text.chars().count();
    while max > 1 && text_width(&shorten(text, max), size) > width {
        max -= 1;
    }
    shorten(text, max)
}

/// The time axis in canvas pixels.
struct Axis {
    left: i32,
    right: i32,
    end_us: u64,
}

impl Axis {
    /// The canvas x of a time, clamped to the axis. This is plotters' own
    /// mapping for an `f64` range, so marks sit exactly on the axis' ticks.
    fn x(&self, at_us: u64) -> i32 {
        if self.end_us == 0 {
            return self.left;
        }
        let fraction = at_us.min(self.end_us) as f64 / self.end_us as f64;
        self.left + (f64::from(self.right - self.left) * fraction + 1e-3).floor() as i32
    }
}

/// Where things go on the canvas.
struct Geometry {
    axis: Axis,
    /// The top of the first lane.
    top: i32,
    lane_height: i32,
}

impl Geometry {
    fn x(&self, at_us: u64) -> i32 {
        self.axis.x(at_us)
    }

    /// The top of lane `lane`.
    fn lane_top(&self, lane: usize) -> i32 {
        self.top + self.lane_height * lane as i32
    }

    /// The wide strip of a lane: what the node was doing.
    fn state_strip(&self, lane: usize) -> (i32, i32) {
        let top = self.lane_top(lane);
        (top + self.lane_height * 12 / 100, top + self.lane_height * 66 / 100)
    }

    /// The thin strip at the bottom of a lane: cut links.
    fn cut_strip(&self, lane: usize) -> (i32, i32) {
        let top = self.lane_top(lane);
        (top + self.lane_height * 74 / 100, top + self.lane_height * 88 / 100)
    }

    /// A span's left and right x, at least `min` pixels apart so that a
    /// short crash or pause is still visible.
    fn span(&self, from_us: u64, to_us: u64, min: i32) -> (i32, i32) {
        let (x0, x1) = (self.x(from_us), self.x(to_us.max(from_us)));
        if x1 - x0 >= min { (x0, x1) } else { (x0, x0 + min) }
    }
}

fn text_style(size: u32, color: &RGBColor, h: HPos, v: VPos) -> TextStyle<'_> {
    TextStyle::from((FONT, size).into_font()).color(color).pos(Pos::new(h, v))
}

/// Generations count from 1, which gets the palette's first colour.
fn generation_color(generation: u64) -> RGBColor {
    GENERATION_COLORS[(generation.wrapping_sub(1) % GENERATION_COLORS.len() as u64) as usize]
}

/// Black or white, whichever reads better on `background`.
fn ink_on(background: &RGBColor) -> RGBColor {
    let RGBColor(r, g, b) = *background;
    let luma = 0.299 * f64::from(r) + 0.587 * f64::from(g) + 0.114 * f64::from(b);
    if luma > 150.0 { BLACK } else { WHITE }
}

/// Diagonal hatching inside a rectangle, clipped to it.
fn hatch<'a>(root: &Canvas<'a>, (x0, y0): (i32, i32), (x1, y1): (i32, i32), color: &RGBColor) -> DrawResult<'a> {
    let height = y1 - y0;
    let style = color.mix(0.75).stroke_width(1);
    let mut start = x0 - height;
    while start < x1 {
        // The line rises one pixel per pixel from (start, y1); keep the
        // part that lies between x0 and x1.
        let from = (x0 - start).max(0);
        let to = (x1 - start).min(height);
        if from < to {
            root.draw(&PathElement::new(vec![(start + from, y1 - from), (start + to, y1 - to)], style))?;
        }
        start += 6;
    }
    Ok(())
}

fn draw_lanes<'a>(root: &Canvas<'a>, geometry: &Geometry, run: &Run<'_>) -> DrawResult<'a> {
    let name_style = text_style(NAME_SIZE, &TEXT, HPos::Right, VPos::Center);
    for (index, lane) in run.lanes.iter().enumerate() {
        let (top, bottom) = geometry.state_strip(index);
        let (cut_top, cut_bottom) = geometry.cut_strip(index);
        let rule_y = geometry.lane_top(index) + geometry.lane_height;
        root.draw(&PathElement::new(vec![(geometry.axis.left, rule_y), (geometry.axis.right, rule_y)], LANE_RULE))?;
        let name = fit(lane.name, NAME_SIZE, NAME_WIDTH as i32 - 16);
        root.draw(&Text::new(name, (geometry.axis.left - 10, (top + bottom) / 2), name_style.clone()))?;

        // The node follows unless something below says otherwise.
        root.draw(&Rectangle::new([(geometry.axis.left, top), (geometry.axis.right, bottom)], FOLLOWER.filled()))?;
        // Bars go in layers: a stopped leader keeps its term until its work
        // returns, so terms go over the stopped span, and a crash ends
        // everything, so it goes over both. The hatching of pauses comes
        // next and the words last, so no hatching runs through a word.
        let bar = |word: String, span: (i32, i32), color: RGBColor| Bar { word, span, color };
        let layers: [Vec<Bar>; 3] = [
            lane.stopped.iter().map(|&(from, to)| bar("stopped".into(), geometry.span(from, to, 2), STOPPED)).collect(),
            lane.leading
                .iter()
                .map(|&(from, to, g)| bar(format!("g{g}"), geometry.span(from, to, 1), generation_color(g)))
                .collect(),
            lane.crashed.iter().map(|&(from, to)| bar("crashed".into(), geometry.span(from, to, 2), CRASHED)).collect(),
        ];
        for Bar { span: (x0, x1), color, .. } in layers.iter().flatten() {
            root.draw(&Rectangle::new([(*x0, top), (*x1, bottom)], color.filled()))?;
        }
        // Hatching over, not instead of, the state: a paused leader still
        // shows its generation's colour.
        let paused: Vec<(i32, i32)> = lane.paused.iter().map(|&(from, to)| geometry.span(from, to, 3)).collect();
        for &(x0, x1) in &paused {
            hatch(root, (x0, top), (x1, bottom), &PAUSE_HATCH)?;
            root.draw(&Rectangle::new([(x0, top), (x1, bottom)], PAUSE_HATCH.stroke_width(1)))?;
        }
        // Each word is kept off the bars of the layers above its own.
        for (layer, words) in layers.iter().enumerate() {
            let covered: Vec<(i32, i32)> = layers[layer + 1..].iter().flatten().map(|bar| bar.span).collect();
            for bar in words {
                bar_label(root, bar, (top, bottom), &covered, &paused)?;
            }
        }
        for &(from, to) in &lane.cut {
            let (x0, x1) = geometry.span(from, to, 2);
            root.draw(&Rectangle::new([(x0, cut_top), (x1, cut_bottom)], CUT.filled()))?;
        }
    }
    Ok(())
}

/// A bar in a lane's wide strip and the word written in it.
struct Bar {
    word: String,
    /// Left and right canvas x.
    span: (i32, i32),
    color: RGBColor,
}

/// Writes the bar's word inside it if it fits somewhere `covered` leaves
/// visible: preferably where the bar is not hatched as `paused` either,
/// else over the hatching on a patch of the bar's colour.
fn bar_label<'a>(
    root: &Canvas<'a>,
    bar: &Bar,
    (top, bottom): (i32, i32),
    covered: &[(i32, i32)],
    paused: &[(i32, i32)],
) -> DrawResult<'a> {
    let Bar { word: text, span: (x0, x1), color } = bar;
    let (x0, x1) = (*x0, *x1);
    let width = text_width(text, BAR_SIZE);
    let visible = without(vec![(x0, x1)], covered);
    let roomy = |stretches: Vec<(i32, i32)>| {
        stretches.into_iter().max_by_key(|(a, b)| b - a).filter(|(a, b)| b - a >= width + 6)
    };
    let Some((a, b)) = roomy(without(visible.clone(), paused)).or_else(|| roomy(visible)) else {
        return Ok(());
    };
    let (x, y) = ((a + b) / 2, (top + bottom) / 2);
    let half = width / 2 + 2;
    root.draw(&Rectangle::new([(x - half, y - 8), (x + half, y + 8)], color.filled()))?;
    let ink = ink_on(color);
    root.draw(&Text::new(text.to_string(), (x, y), text_style(BAR_SIZE, &ink, HPos::Center, VPos::Center)))
}

/// `stretches` with every span in `holes` cut out of them.
fn without(mut stretches: Vec<(i32, i32)>, holes: &[(i32, i32)]) -> Vec<(i32, i32)> {
    for &(h0, h1) in holes {
        stretches =
            stretches.into_iter().flat_map(|(a, b)| [(a, b.min(h0)), (a.max(h1), b)]).filter(|(a, b)| a < b).collect();
    }
    stretches
}

/// Where a mark's label went: its row above the lanes and which side of
/// the tick it reads from.
#[derive(Clone, Copy)]
struct Slot {
    row: usize,
    /// Right of the tick, unless that side was taken or off the canvas.
    rightwards: bool,
}

/// The label rows, filled first come first served.
struct Labels {
    violations: Vec<Option<Slot>>,
    faults: Vec<Option<Slot>>,
    /// How many rows are in use.
    rows: usize,
}

impl Labels {
    /// Packs the labels: each takes the highest row where it overlaps no
    /// other label, crosses no tick of a label above it, and leaves its own
    /// tick's way down clear of the labels below. Violations go first so
    /// faults cannot crowd them out.
    fn pack(run: &Run<'_>, axis: &Axis) -> Labels {
        let mut rows = Rows::default();
        let violations = run.violations.iter().map(|mark| rows.place(axis.x(mark.at_us), &mark.label)).collect();
        let faults = run.faults.iter().map(|mark| rows.place(axis.x(mark.at_us), &mark.label)).collect();
        let rows = rows.labels.iter().rposition(|row| !row.is_empty()).map_or(0, |last| last + 1);
        Labels { violations, faults, rows }
    }
}

/// What each label row holds so far.
#[derive(Default)]
struct Rows {
    /// Labels' pixel spans, per row.
    labels: [Vec<(i32, i32)>; LABEL_ROWS],
    /// The ticks of labels in rows above, which pass through this one.
    ticks: [Vec<i32>; LABEL_ROWS],
}

impl Rows {
    fn place(&mut self, x: i32, text: &str) -> Option<Slot> {
        let width = text_width(text, LABEL_SIZE);
        // Labels read rightwards from their tick where the canvas has room,
        // and leftwards when that side is taken or off the edge.
        let sides = [true, false].into_iter().filter(|&rightwards| !rightwards || x + 3 + width <= WIDTH as i32 - 4);
        let sides: Vec<bool> = sides.collect();
        let (row, rightwards, (from, to)) = (0..LABEL_ROWS).find_map(|row| {
            sides.iter().find_map(|&rightwards| {
                let span = if rightwards { (x + 3, x + 3 + width) } else { (x - 3 - width, x - 3) };
                self.fits(row, x, span).then_some((row, rightwards, span))
            })
        })?;
        self.labels[row].push((from, to));
        for below in &mut self.ticks[row + 1..] {
            below.push(x);
        }
        Some(Slot { row, rightwards })
    }

    /// Whether a label spanning `from..to` with its tick at `x` fits in `row`.
    fn fits(&self, row: usize, x: i32, (from, to): (i32, i32)) -> bool {
        from >= 4
            && self.labels[row].iter().all(|&(a, b)| to + 6 <= a || b + 6 <= from)
            && self.ticks[row].iter().all(|&tick| tick < from - 1 || to + 1 < tick)
            && self.labels[row + 1..].iter().flatten().all(|&(a, b)| x + 2 < a || b < x - 2)
    }
}

/// The top of label row `row`.
fn row_top(row: usize) -> i32 {
    TITLE_HEIGHT + row as i32 * LABEL_ROW_HEIGHT
}

fn draw_marks<'a>(root: &Canvas<'a>, geometry: &Geometry, run: &Run<'_>, labels: &Labels) -> DrawResult<'a> {
    let plot_bottom = geometry.lane_top(run.lanes.len());
    // A tick runs from its label down to the lanes; one whose label did not
    // fit is a short stub just above them.
    let tick = |x: i32, slot: Option<Slot>| {
        vec![(x, slot.map_or(geometry.top - 6, |slot| row_top(slot.row))), (x, geometry.top)]
    };
    let label = |mark: &Mark, x: i32, slot: Option<Slot>, color: &RGBColor| -> DrawResult<'a> {
        let Some(slot) = slot else { return Ok(()) };
        let (text_x, anchor) = if slot.rightwards { (x + 3, HPos::Left) } else { (x - 3, HPos::Right) };
        let style = text_style(LABEL_SIZE, color, anchor, VPos::Top);
        root.draw(&Text::new(mark.label.clone(), (text_x, row_top(slot.row)), style))
    };

    for (mark, &slot) in run.faults.iter().zip(&labels.faults) {
        let x = geometry.x(mark.at_us);
        root.draw(&PathElement::new(tick(x, slot), FAULT.stroke_width(1)))?;
        label(mark, x, slot, &TEXT)?;
        // A faint trace through the lanes the fault names ties the tick to
        // what it did there.
        for &lane in &mark.lanes {
            let top = geometry.lane_top(lane);
            let line = vec![(x, top), (x, top + geometry.lane_height)];
            root.draw(&PathElement::new(line, FAULT.mix(0.45).stroke_width(1)))?;
        }
    }
    for (mark, &slot) in run.violations.iter().zip(&labels.violations) {
        let x = geometry.x(mark.at_us);
        root.draw(&PathElement::new(tick(x, slot), VIOLATION.stroke_width(1)))?;
        label(mark, x, slot, &VIOLATION)?;
        let spans: Vec<(i32, i32)> = if mark.lanes.is_empty() {
            vec![(geometry.top, plot_bottom)]
        } else {
            mark.lanes
                .iter()
                .map(|&lane| (geometry.lane_top(lane), geometry.lane_top(lane) + geometry.lane_height))
                .collect()
        };
        for (top, bottom) in spans {
            root.draw(&PathElement::new(vec![(x, top), (x, bottom)], VIOLATION.stroke_width(2)))?;
        }
    }

    // Stale writes go on top of everything else in their lane.
    for (index, lane) in run.lanes.iter().enumerate() {
        let (top, bottom) = geometry.state_strip(index);
        let y = (top + bottom) / 2;
        for &at in &lane.stale_writes {
            cross(root, (geometry.x(at), y), 4)?;
        }
    }
    Ok(())
}

/// A red ×, outlined in white so it shows on dark bars too.
fn cross<'a>(root: &Canvas<'a>, (x, y): (i32, i32), arm: i32) -> DrawResult<'a> {
    for (color, width) in [(WHITE, 4), (VIOLATION, 2)] {
        root.draw(&PathElement::new(vec![(x - arm, y - arm), (x + arm, y + arm)], color.stroke_width(width)))?;
        root.draw(&PathElement::new(vec![(x - arm, y + arm), (x + arm, y - arm)], color.stroke_width(width)))?;
    }
    Ok(())
}

fn draw_title<'a>(root: &Canvas<'a>, run: &Run<'_>, title: &str, seed: u64) -> DrawResult<'a> {
    let plural = |count: usize, word: &str| format!("{count} {word}{}", if count == 1 { "" } else { "s" });
    let summary = format!(
        "{} · {} · {}",
        plural(run.terms, "term"),
        plural(run.faults.len(), "fault"),
        plural(run.violations.len(), "violation")
    );
    let color = if run.violations.is_empty() { TEXT } else { VIOLATION };
    root.draw(&Text::new(
        summary.clone(),
        (WIDTH as i32 - 12, 12),
        text_style(NAME_SIZE, &color, HPos::Right, VPos::Top),
    ))?;

    // A long title gives way before the seed does: the seed is what
    // reproduces the run. Bold glyphs are about a tenth wider.
    let seed = format!(" · seed {seed}");
    let room = (WIDTH as i32 - 48 - text_width(&summary, NAME_SIZE)) * 10 / 11 - text_width(&seed, TITLE_SIZE);
    let heading = format!("{}{seed}", fit(title, TITLE_SIZE, room));
    let style = TextStyle::from((FONT, TITLE_SIZE, FontStyle::Bold).into_font())
        .color(&TEXT)
        .pos(Pos::new(HPos::Left, VPos::Top));
    root.draw(&Text::new(heading, (12, 9), style))?;
    Ok(())
}

fn draw_legend<'a>(root: &Canvas<'a>, run: &Run<'_>, height: u32) -> DrawResult<'a> {
    let y = height as i32 - LEGEND_HEIGHT as i32 / 2;
    let (top, bottom) = (y - 6, y + 6);
    let label = text_style(SMALL_SIZE, &TEXT, HPos::Left, VPos::Center);
    let mut x = 12;
    let entry = |x: &mut i32, swatch_width: i32, text: &str| -> DrawResult<'a> {
        root.draw(&Text::new(text.to_string(), (*x + swatch_width + 5, y), label.clone()))?;
        *x += swatch_width + 5 + text_width(text, SMALL_SIZE) + 16;
        Ok(())
    };

    root.draw(&Rectangle::new([(x, top), (x + 16, bottom)], FOLLOWER.filled()))?;
    entry(&mut x, 16, "follower")?;
    for (slot, color) in GENERATION_COLORS.iter().take(3).enumerate() {
        let left = x + slot as i32 * 9;
        root.draw(&Rectangle::new([(left, top), (left + 9, bottom)], color.filled()))?;
    }
    entry(&mut x, 27, "leader, colour per generation (gN)")?;
    root.draw(&Rectangle::new([(x, top), (x + 16, bottom)], FOLLOWER.filled()))?;
    hatch(root, (x, top), (x + 16, bottom), &PAUSE_HATCH)?;
    root.draw(&Rectangle::new([(x, top), (x + 16, bottom)], PAUSE_HATCH.stroke_width(1)))?;
    entry(&mut x, 16, "paused")?;
    root.draw(&Rectangle::new([(x, top), (x + 16, bottom)], CRASHED.filled()))?;
    entry(&mut x, 16, "crashed")?;
    // Stopped nodes are rare; name the colour only when it appears.
    if run.lanes.iter().any(|lane| !lane.stopped.is_empty()) {
        root.draw(&Rectangle::new([(x, top), (x + 16, bottom)], STOPPED.filled()))?;
        entry(&mut x, 16, "stopped")?;
    }
    root.draw(&Rectangle::new([(x, y + 1), (x + 16, y + 6)], CUT.filled()))?;
    entry(&mut x, 16, "link cut or held")?;
    root.draw(&PathElement::new(vec![(x + 4, top - 2), (x + 4, bottom + 2)], FAULT.stroke_width(1)))?;
    entry(&mut x, 8, "fault")?;
    root.draw(&PathElement::new(vec![(x + 4, top - 2), (x + 4, bottom + 2)], VIOLATION.stroke_width(2)))?;
    entry(&mut x, 8, "violation")?;
    cross(root, (x + 5, y), 4)?;
    entry(&mut x, 10, "stale write rejected")?;
    Ok(())
}

#[cfg(test)]
mod tests;
