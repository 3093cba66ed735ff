//! Renders the viewer headless (egui_kittest, wgpu on Mesa's software Vulkan) and checks both
//! pictures (snapshots under `tests/snapshots/`) and state after simulated input: zoom, pan,
//! click selection, search, range statistics against the analyzer.
//!
//! First run or after an intended change: `UPDATE_SNAPSHOTS=true cargo test -p shardscope-viewer --test ui`.

use std::time::Instant;

use egui::{Event, Modifiers, MouseWheelSource, MouseWheelUnit, Pos2, TouchPhase, Vec2, vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use shardscope_viewer::app::{SideTab, StartOptions, ViewerApp};
use shardscope_viewer::load::{load_paths, prepare};
use shardscope_viewer::synthetic::{SyntheticSpec, generate};
use shardscope_viewer::timeline::layout::EventKind;
use shardscope_viewer::timeline::{WHEEL_ZOOM_PER_POINT, track_center_y};

/// Two ranks, 400 kernels each: small enough to read in a snapshot, with all-reduces and phases.
fn small_app() -> ViewerApp {
    let traces =
        generate(SyntheticSpec { ranks: 2, kernels_per_rank: 400, allreduce_every: 10, kernels_per_step: 200 });
    let mut app = ViewerApp::with_loaded(prepare(traces, Vec::new(), Instant::now()));
    // The toolbar prints the load time; pin it so snapshots do not depend on the machine.
    app.session.as_mut().unwrap().load_seconds = 0.0;
    app
}

fn harness(app: ViewerApp) -> Harness<'static, ViewerApp> {
    // Tooltips (over an event or a utilisation graph) fade in over a few frames.
    let mut harness = Harness::builder()
        .with_size(vec2(1400.0, 800.0))
        .with_max_steps(8)
        .build_ui_state(|ui, app: &mut ViewerApp| app.show(ui), app);
    harness.run();
    harness
}

/// Compares the harness's picture with `tests/snapshots/<name>.png`. Snapshots need a wgpu adapter (in CI, Mesa's
/// software Vulkan driver from `mesa-vulkan-drivers`): the tests that take one carry
/// `#[cfg_attr(not(wgpu_renderer), ignore = …)]`, set by the build script where it finds a driver, so without one
/// `cargo test` lists them as ignored; with a driver that wgpu cannot use, they fail.
fn snapshot(harness: &mut Harness<'_, ViewerApp>, name: &str) {
    harness.snapshot(name);
}

fn view_span(harness: &Harness<'_, ViewerApp>) -> (f64, f64) {
    let view = &harness.state().session.as_ref().unwrap().view;
    (view.start_ns, view.end_ns)
}

fn wheel(harness: &mut Harness<'_, ViewerApp>, at: Pos2, delta: Vec2) {
    harness.hover_at(at);
    harness.event(Event::MouseWheel {
        unit: MouseWheelUnit::Point,
        delta,
        phase: TouchPhase::Move,
        source: MouseWheelSource::Wheel,
        modifiers: Modifiers::NONE,
    });
    harness.run();
}

#[test]
fn wheel_zoom_scales_the_window_around_the_pointer() {
    let mut h = harness(small_app());
    let plot = h.state().session.as_ref().unwrap().view.last_plot_rect;
    let (start, end) = view_span(&h);
    // Pointer at a quarter of the width: the time under it must stay put.
    let at = Pos2::new(plot.left() + plot.width() / 4.0, plot.center().y);
    let anchor = start + (end - start) / 4.0;
    wheel(&mut h, at, vec2(0.0, 100.0));
    let (new_start, new_end) = view_span(&h);
    let factor = (new_end - new_start) / (end - start);
    assert!((factor - (-100.0 * WHEEL_ZOOM_PER_POINT).exp()).abs() < 1e-9, "factor {factor}");
    let new_anchor = new_start + (new_end - new_start) / 4.0;
    assert!((new_anchor - anchor).abs() < 1e-3 * (end - start), "anchor moved from {anchor} to {new_anchor}");
    // And back out.
    wheel(&mut h, at, vec2(0.0, -100.0));
    let (s, e) = view_span(&h);
    assert!(((e - s) / (end - start) - 1.0).abs() < 1e-9);
}

#[test]
fn w_and_s_zoom_and_a_and_d_pan() {
    let mut h = harness(small_app());
    h.remove_cursor();
    let (start, end) = view_span(&h);
    h.key_press(egui::Key::W);
    h.run();
    let (s1, e1) = view_span(&h);
    assert!(((e1 - s1) / (end - start) - 0.8).abs() < 1e-9);
    // Without a pointer the zoom anchors on the centre.
    assert!(((s1 + e1) / 2.0 - (start + end) / 2.0).abs() < 1.0);
    h.key_press(egui::Key::D);
    h.run();
    let (s2, e2) = view_span(&h);
    assert!((s2 - s1 - 0.1 * (e1 - s1)).abs() < 1.0, "pan by a tenth of the window");
    assert!(((e2 - s2) - (e1 - s1)).abs() < 1.0);
    h.key_press(egui::Key::S);
    h.run();
    let (s3, e3) = view_span(&h);
    assert!(((e3 - s3) / (e2 - s2) - 1.25).abs() < 1e-9);
}

#[test]
fn dragging_the_plot_pans_by_the_dragged_distance() {
    let mut h = harness(small_app());
    let plot = h.state().session.as_ref().unwrap().view.last_plot_rect;
    let (start, end) = view_span(&h);
    let ns_per_point = (end - start) / f64::from(plot.width());
    let from = Pos2::new(plot.center().x, plot.top() + 30.0);
    h.hover_at(from);
    h.run();
    h.drag_at(from);
    h.run();
    for step in 1..=4 {
        h.hover_at(from + vec2(50.0 * step as f32, 0.0));
        h.run();
    }
    h.drop_at(from + vec2(200.0, 0.0));
    h.run();
    let (new_start, new_end) = view_span(&h);
    // Content follows the pointer: dragging right shows earlier time.
    let moved_points = (start - new_start) / ns_per_point;
    assert!((moved_points - 200.0).abs() < 0.5, "moved {moved_points} points");
    assert!(((new_end - new_start) - (end - start)).abs() < 1.0);
}

#[test]
fn clicking_selects_the_event_under_the_pointer() {
    let mut h = harness(small_app());
    // Zoom onto the 50th kernel of rank 0 so it is wide, then click its middle.
    let (trace, kernel_index, start_ns, end_ns) = {
        let app = h.state();
        let data = &app.session.as_ref().unwrap().data;
        let k = &data.traces[0].kernels[50];
        (0usize, 50usize, k.start_ns, k.end_ns)
    };
    {
        let view = &mut h.state_mut().session.as_mut().unwrap().view;
        view.fit(start_ns - 1_000, end_ns + 1_000);
    }
    h.run();
    let (x, y) = {
        let app = h.state();
        let session = app.session.as_ref().unwrap();
        let data = &session.data;
        let event = shardscope_viewer::timeline::layout::EventRef::new(EventKind::Kernel, kernel_index);
        let track = data.track_of(trace, event).unwrap();
        let view = &session.view;
        let y = track_center_y(data, view, track).unwrap();
        let screen = view.to_screen(view.last_plot_rect.width());
        let x = view.last_plot_rect.left() + screen.x((start_ns + end_ns) / 2);
        (x, y)
    };
    let at = Pos2::new(x, y);
    h.hover_at(at);
    h.run();
    h.drag_at(at);
    h.run();
    h.drop_at(at);
    h.run();
    let selected = h.state().selected.expect("a click on a kernel selects it");
    assert_eq!(selected.trace, trace);
    assert_eq!(selected.event.kind(), EventKind::Kernel);
    assert_eq!(selected.event.index(), kernel_index);
    assert_eq!(h.state().tab, SideTab::Details);
}

#[test]
fn search_counts_matches_and_cycles_through_them() {
    let mut h = harness(small_app());
    let data = h.state().session.as_ref().unwrap().data.clone();
    let app = h.state_mut();
    app.search.query = "AllReduce".into();
    app.search.run(&data);
    // Every 10th of 400 kernels, on two ranks.
    assert_eq!(app.search.matches.len(), 80);
    let first = app.search.next_match().unwrap();
    app.select_and_reveal(first);
    let second = app.search.next_match().unwrap();
    assert_ne!(first, second);
    assert_eq!(app.search.previous_match(), Some(first));
    assert_eq!(app.search.previous_match(), app.search.matches.last().copied());
}

#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_search_with_a_selected_match() {
    let mut h = harness(small_app());
    let data = h.state().session.as_ref().unwrap().data.clone();
    let app = h.state_mut();
    app.search.query = "AllReduce".into();
    app.search.run(&data);
    let first = app.search.next_match().unwrap();
    app.select_and_reveal(first);
    app.search.next_match();
    app.search.previous_match();
    app.search.previous_match();
    h.run();
    snapshot(&mut h, "search");
}

#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_timeline() {
    let mut h = harness(small_app());
    snapshot(&mut h, "timeline");
}

#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_details_of_a_collective_with_its_peers() {
    let mut h = harness(small_app());
    let app = h.state_mut();
    let data = app.session.as_ref().unwrap().data.clone();
    // The third all-reduce of rank 1: its peer on rank 0 gets outlined, its launch gets an arrow.
    let index = data.traces[1].kernels.iter().enumerate().filter(|(_, k)| k.collective.is_some()).nth(2).unwrap().0;
    let selected = shardscope_viewer::timeline::Selected {
        trace: 1,
        event: shardscope_viewer::timeline::layout::EventRef::new(EventKind::Kernel, index),
    };
    app.select_and_reveal(selected);
    let session = app.session.as_mut().unwrap();
    let (start, end) = data.event_span(1, selected.event);
    session.view.fit(start - 60_000, end + 20_000);
    let peers = session.collectives.peers(&selected).len();
    assert_eq!(peers, 2);
    h.run();
    snapshot(&mut h, "details");
}

#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_range_statistics() {
    let mut h = harness(small_app());
    let app = h.state_mut();
    let session = app.session.as_mut().unwrap();
    let (t0, t1) = (session.data.t0_ns, session.data.t1_ns);
    session.view.range_ns = Some((t0 + (t1 - t0) / 4, t0 + (t1 - t0) / 2));
    app.tab = SideTab::Range;
    // One frame starts the background computation (a spinner repaints until it is in).
    h.step();
    h.state_mut().range_stats.wait();
    h.run();
    assert_eq!(h.state().range_stats.ranks.len(), 2);
    snapshot(&mut h, "range_statistics");
}

#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_summary_charts() {
    let mut h = harness(small_app());
    h.state_mut().tab = SideTab::Summary;
    h.step();
    h.state_mut().summary_stats.wait();
    h.run();
    let ranks = &h.state().summary_stats.ranks;
    assert_eq!(ranks.len(), 2);
    // Both phases of the synthetic run appear on each rank.
    assert!(ranks.iter().all(|r| r.phases.len() == 2), "{:?}", ranks[0].phases);
    snapshot(&mut h, "summary");
}

#[test]
fn dragging_on_the_time_axis_selects_that_range() {
    let mut h = harness(small_app());
    let plot = h.state().session.as_ref().unwrap().view.last_plot_rect;
    let (start, end) = view_span(&h);
    let ns_per_point = (end - start) / f64::from(plot.width());
    // The axis strip sits just above the rows.
    let y = plot.top() - 10.0;
    let from = Pos2::new(plot.left() + 100.0, y);
    let to = Pos2::new(plot.left() + 400.0, y);
    h.hover_at(from);
    h.run();
    h.drag_at(from);
    h.run();
    for step in 1..=3 {
        h.hover_at(from + vec2(100.0 * step as f32, 0.0));
        h.run();
    }
    h.drop_at(to);
    // Releasing opens the range panel, which computes on a thread behind a spinner.
    h.step();
    h.state_mut().range_stats.wait();
    h.run();
    let app = h.state();
    let (a, b) = app.session.as_ref().unwrap().view.range_ns.expect("a range");
    assert!((a as f64 - (start + 100.0 * ns_per_point)).abs() <= ns_per_point);
    assert!((b as f64 - (start + 400.0 * ns_per_point)).abs() <= ns_per_point);
    // The view itself did not move, and the range panel opened.
    assert_eq!(view_span(&h), (start, end));
    assert_eq!(h.state().tab, SideTab::Range);
}

#[test]
fn clicking_a_header_collapses_and_expands_its_group() {
    let mut h = harness(small_app());
    let (header_id, header_y, tracks_before) = {
        let app = h.state();
        let session = app.session.as_ref().unwrap();
        // The rank 0 header is the second row (after the host).
        let row = &session.data.rows[1];
        let shardscope_viewer::timeline::layout::RowContent::Header { id, .. } = &row.content else {
            panic!("row 1 is a header")
        };
        let first_track = 0;
        let y = track_center_y(&session.data, &session.view, first_track).unwrap();
        // The rank header is two header rows and the GPU's utilisation row above the first track.
        let above = 2.0 * shardscope_viewer::timeline::HEADER_HEIGHT + shardscope_viewer::timeline::UTILIZATION_HEIGHT;
        (*id, y - above, session.data.tracks.len())
    };
    let plot = h.state().session.as_ref().unwrap().view.last_plot_rect;
    let at = Pos2::new(plot.left() - 100.0, header_y);
    h.hover_at(at);
    h.run();
    h.drag_at(at);
    h.run();
    h.drop_at(at);
    h.run();
    {
        let app = h.state();
        let session = app.session.as_ref().unwrap();
        assert!(session.view.collapsed.contains(&header_id));
        // Rank 0's five tracks are hidden: the first visible track is now rank 1's first.
        assert!(track_center_y(&session.data, &session.view, 0).is_none());
        assert!(track_center_y(&session.data, &session.view, tracks_before / 2).is_some());
    }
    h.hover_at(at);
    h.run();
    h.drag_at(at);
    h.run();
    h.drop_at(at);
    h.run();
    let app = h.state();
    let session = app.session.as_ref().unwrap();
    assert!(!session.view.collapsed.contains(&header_id));
    assert!(track_center_y(&session.data, &session.view, 0).is_some());
}

#[test]
fn next_button_searches_in_the_background_then_selects_the_first_match() {
    let mut h = harness(small_app());
    h.state_mut().search.query = "^decode$".into();
    h.get_by_label("Next").click();
    // Frames go on while the search runs; give it up to two seconds.
    for _ in 0..200 {
        h.step();
        if !h.state().search.is_searching() && h.state().selected.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let app = h.state();
    // One decode range per request: two requests on each of two ranks.
    assert_eq!(app.search.matches.len(), 4);
    assert_eq!(app.search.current, Some(0));
    assert_eq!(app.selected, app.search.matches.first().copied());
    let selected = app.selected.unwrap();
    assert_eq!(selected.event.kind(), EventKind::Range);
    assert_eq!(app.session.as_ref().unwrap().data.event_name(selected.trace, selected.event), "decode");
}

fn sample(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces").join(name)
}

/// A bundled sample, as the screenshot mode shows it with `start`.
fn sample_app(name: &str, start: StartOptions) -> ViewerApp {
    let loaded = load_paths(&[sample(name)], |_, _| {}).expect("the bundled sample loads");
    let mut app = ViewerApp::with_loaded_and(loaded, start);
    app.session.as_mut().unwrap().load_seconds = 0.0;
    app.compute_now(&egui::Context::default());
    app
}

/// Within 2 % either side of `[start, end]`, as `TimelineView::fit` shows a span.
fn assert_fits(view: (f64, f64), start: i64, end: i64) {
    let margin = 0.02 * (end - start) as f64;
    assert!((view.0 - (start as f64 - margin)).abs() < 1.0, "start {} for {start}", view.0);
    assert!((view.1 - (end as f64 + margin)).abs() < 1.0, "end {} for {end}", view.1);
}

#[test]
fn a_run_opens_at_its_phase_ranges_and_home_shows_everything() {
    let mut h = harness(sample_app("tp2_capture.sqlite.gz", StartOptions::default()));
    h.remove_cursor();
    let (t0, t1, roi) = {
        let data = &h.state().session.as_ref().unwrap().data;
        (data.t0_ns, data.t1_ns, data.roi.expect("the capture has phase ranges"))
    };
    // The report's steady state (its second generate call, after the detected warm-up; the prefill / decode ranges
    // start at 7,434,815,348), not the launcher's start 2.9 s earlier.
    assert_eq!((roi.start_ns, roi.end_ns), (9_805_166_352, 9_817_173_511));
    assert!(roi.start_ns - t0 > 2_800_000_000, "t0 {t0}");
    assert_fits(view_span(&h), roi.start_ns, roi.end_ns);
    h.key_press(egui::Key::Home);
    h.run();
    assert_fits(view_span(&h), t0, t1);
    h.key_press(egui::Key::R);
    h.run();
    assert_fits(view_span(&h), roi.start_ns, roi.end_ns);
    h.get_by_label("Fit all").click();
    h.run();
    assert_fits(view_span(&h), t0, t1);
    h.get_by_label("Region of interest").click();
    h.run();
    assert_fits(view_span(&h), roi.start_ns, roi.end_ns);
}

/// `--window` shows exactly that window; with `--tab range` the range page holds the analyzer's figures of it.
#[test]
fn a_window_and_the_range_tab_show_the_analyzers_figures_of_that_window() {
    let window = (9_400_000_000, 9_500_000_000);
    let start = StartOptions { window_ns: Some(window), tab: Some(SideTab::Range), ..StartOptions::default() };
    let h = harness(sample_app("tp2_capture.sqlite.gz", start));
    assert_eq!(view_span(&h), (window.0 as f64, window.1 as f64));
    let app = h.state();
    assert_eq!(app.tab, SideTab::Range);
    assert_eq!(app.range_stats.window_ns, Some(window));
    let data = &app.session.as_ref().unwrap().data;
    let options = shardscope_analyzer::report::Options { window_ns: Some(window), ..Default::default() };
    let report = shardscope_analyzer::report::analyze(&data.traces, &options);
    let shown: Vec<(u32, i64)> = app.range_stats.ranks.iter().map(|r| (r.rank, r.gpu_busy_ns)).collect();
    let expected: Vec<(u32, i64)> = report.ranks.iter().map(|r| (r.rank, r.figures.gpu_busy_ns)).collect();
    assert_eq!(shown, expected);
    assert!(shown.iter().all(|(_, busy)| *busy > 0));
}

#[test]
fn the_summary_tab_opens_with_its_figures() {
    let start = StartOptions { tab: Some(SideTab::Summary), ..StartOptions::default() };
    let app = sample_app("tp2_capture.sqlite.gz", start);
    assert_eq!(app.tab, SideTab::Summary);
    assert!(!app.summary_stats.is_computing());
    assert_eq!(app.summary_stats.ranks.len(), 2);
    // The late-rank verdict is the report's, word for word.
    let data = &app.session.as_ref().unwrap().data;
    let report = shardscope_analyzer::report::analyze(&data.traces, &data.categories.options(None));
    assert_eq!(app.summary_stats.late_rank_verdict, shardscope_analyzer::output::summary::late_rank_verdict(&report));
    assert!(app.summary_stats.late_rank_verdict.starts_with("late rank: rank 0: the 40 of 73"));
}

/// The header gives the window shown on the trace clock, in the form `--window` takes, and the time axis names its
/// origin on that clock.
#[test]
fn the_header_gives_the_window_on_the_trace_clock() {
    let mut h = harness(small_app());
    h.run();
    let (start, end) = view_span(&h);
    let (start, end) = (start.floor() as i64, end.ceil() as i64);
    let length = shardscope_viewer::timeline::paint::format_duration((end - start) as f64);
    h.get_by_label(&format!("window {start}:{end} ns ({length})"));
    // Pasted into `--window`, it parses to the same span.
    assert_eq!(shardscope_analyzer::figures::window::parse(&format!("{start}:{end}")), Ok((start, end)));
}

/// Step 9 of the skewed sample (3.45 ms): rank 0 launches an all-reduce that rank 1 joins, the path crosses to
/// rank 1 there, and runs through rank 1's 2.2 ms sleep before its next all-reduce, which rank 0 waits in.
#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_critical_path_of_a_step_of_the_skewed_sample() {
    let start = StartOptions { critical_path: Some(Some(0)), ..StartOptions::default() };
    let mut h = harness(sample_app("tp2_skew_capture.sqlite.gz", start));
    {
        let app = h.state();
        // Step 0 after the sample's 9 detected warm-up steps: the step that was step 9 before warm-up was detected.
        let path = app.critical_path.overlay().expect("the path of the step");
        assert_eq!(path.step, Some(0));
        assert!(!path.segments.is_empty());
        // Every segment has its track: each stream and thread of the path is drawn.
        assert!(
            path.segments.iter().all(|s| s.track.is_some()),
            "{:?}",
            path.segments.iter().find(|s| s.track.is_none())
        );
        let sleep = path
            .segments
            .iter()
            .find(|s| {
                s.rank == 1 && s.category == "host_gap" && (1_900_000..2_600_000).contains(&(s.end_ns - s.start_ns))
            })
            .expect("rank 1's sleep is on the path");
        assert!(!sleep.run);
        let cross_rank: Vec<(u32, u32, &str)> = path
            .hops()
            .filter(|&(a, b)| path.segments[a].rank != path.segments[b].rank)
            .map(|(a, b)| (path.segments[a].rank, path.segments[b].rank, path.segments[b].after.as_str()))
            .collect();
        assert_eq!(cross_rank, [(0, 1, "collective wait on rank 0")]);
        // The view moved to the step.
        let (window_start, window_end) = path.window_ns.unwrap();
        assert_fits(view_span(&h), window_start, window_end.max(path.start_ns + path.measured_ns));
        assert!(path.summary().starts_with("critical path of step 0: "), "{}", path.summary());
    }
    snapshot(&mut h, "critical_path");
    // C hides it, and shows it again.
    h.remove_cursor();
    h.key_press(egui::Key::C);
    h.run();
    assert!(h.state().critical_path.overlay().is_none());
    h.key_press(egui::Key::C);
    h.run();
    assert!(h.state().critical_path.overlay().is_some());
}

/// The no-straggler replay of step 0 of the skewed sample: its rows end where `analyzer what-if --no-straggler
/// --step 0` says the ideal step ends, every GPU operation of the step has a row, and the replay is shorter than
/// the measured step (rank 1's sleep is gone). I hides and shows it.
#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_ideal_replay_of_a_step_of_the_skewed_sample() {
    use shardscope_analyzer::dependency::critical_path::build_model;
    use shardscope_analyzer::dependency::whatif::{Scenario, what_if};
    use shardscope_viewer::timeline::layout::RowContent;

    let start = StartOptions { ideal: Some(Some(0)), ..StartOptions::default() };
    let mut h = harness(sample_app("tp2_skew_capture.sqlite.gz", start));
    {
        let app = h.state();
        let replay = app.ideal.replay().expect("the replay of the step");
        let data = &app.session.as_ref().unwrap().data;
        // What `analyzer what-if --no-straggler --step 0` reports, with the settings the viewer uses.
        let model = build_model(&data.traces, &data.categories.options(None), None, Some(0)).expect("step 0");
        let report = what_if(&model, &Scenario { no_straggler: true, ..Scenario::default() });
        assert_eq!(replay.step, Some(0));
        assert_eq!(replay.start_ns, model.graph.window_start_ns);
        assert_eq!(replay.ideal_ns, report.ideal_ns);
        assert_eq!(replay.measured_ns, report.measured_ns);
        assert_eq!(replay.last_end_ns().expect("GPU work in step 0") - replay.start_ns, report.ideal_ns);
        let slowdown = report.slowdown.expect("the model fits step 0");
        assert!((replay.slowdown() - slowdown).abs() < 1e-9, "{} vs {slowdown}", replay.slowdown());
        assert!(report.ideal_ns < report.measured_ns, "{report:?}");
        // Every GPU operation of the model is on a row, and each row is one of the stream tracks.
        let gpu_ops = model.graph.ops.iter().filter(|o| o.kind.on_gpu()).count();
        assert_eq!(replay.unplaced, 0);
        assert_eq!(replay.rows.values().map(Vec::len).sum::<usize>(), gpu_ops);
        assert!(replay.rows.keys().all(|t| data.stream_track.values().any(|s| s == t)));
        // Each stream's replay runs its operations one after another.
        for ops in replay.rows.values() {
            assert!(ops.windows(2).all(|w| w[0].end_ns <= w[1].start_ns), "{ops:?}");
        }
        // A replay row right under every stream track, shown while the replay is, where the step has work.
        let ideal_rows: Vec<usize> = data
            .rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| matches!(r.content, RowContent::Ideal(_)).then_some(i))
            .collect();
        assert_eq!(ideal_rows.len(), data.stream_track.len());
        for &i in &ideal_rows {
            let (RowContent::Track(above), RowContent::Ideal(of)) = (&data.rows[i - 1].content, &data.rows[i].content)
            else {
                panic!("row {i} is not under its stream track");
            };
            assert_eq!(above, of);
        }
        assert_eq!(app.session.as_ref().unwrap().view.ideal.as_ref(), Some(&replay));
        // The view moved to the step.
        let (window_start, window_end) = replay.window_ns.unwrap();
        assert_fits(view_span(&h), window_start, window_end.max(replay.start_ns + replay.measured_ns));
        assert!(replay.summary().starts_with("ideal (no straggler) of step 0: measured "), "{}", replay.summary());
    }
    snapshot(&mut h, "ideal_replay");
    // Hovering the longest replayed operation tells its replayed and measured duration.
    let (at, name, replayed_ns) = {
        let app = h.state();
        let (session, replay) = (app.session.as_ref().unwrap(), app.ideal.replay().unwrap());
        let (&track, op) = replay
            .rows
            .iter()
            .flat_map(|(track, ops)| ops.iter().map(move |op| (track, op)))
            .max_by_key(|(_, op)| op.end_ns - op.start_ns)
            .unwrap();
        let view = &session.view;
        let screen = view.to_screen(view.last_plot_rect.width());
        let x = view.last_plot_rect.left() + screen.x((op.start_ns + op.end_ns) / 2);
        // The replay row is right under its stream track.
        let y = track_center_y(&session.data, view, track).unwrap() + shardscope_viewer::timeline::TRACK_HEIGHT;
        let name = session.data.event_name(op.trace, op.event.unwrap()).to_owned();
        (Pos2::new(x, y), name, op.end_ns - op.start_ns)
    };
    h.hover_at(at);
    h.run();
    h.get_by_label(&name);
    h.get_by_label(&format!("ideal {}", shardscope_viewer::timeline::paint::format_duration(replayed_ns as f64)));
    h.remove_cursor();
    h.key_press(egui::Key::I);
    h.run();
    assert!(h.state().ideal.replay().is_none());
    assert!(h.state().session.as_ref().unwrap().view.ideal.is_none());
    h.key_press(egui::Key::I);
    h.run();
    assert!(h.state().ideal.replay().is_some());
}

/// The row index of each GPU's memory row, and the content of the rows between the GPU's header and it.
fn memory_row(data: &shardscope_viewer::timeline::layout::TimelineData, index: usize) -> usize {
    use shardscope_viewer::timeline::layout::RowContent;
    data.rows.iter().position(|r| matches!(r.content, RowContent::Memory(i) if i == index)).expect("a memory row")
}

/// The memory sample (`capture --trace memory`): its one GPU has a memory row under its streams with the analyzer's
/// CUDA-level series, and hovering the row gives the level at the time under the pointer.
#[test]
fn the_memory_row_holds_the_analyzers_series_and_hover_gives_the_level_under_the_pointer() {
    use shardscope_analyzer::figures::memory::cuda_series;
    use shardscope_viewer::memory::format_bytes;
    use shardscope_viewer::timeline::layout::RowContent;

    let mut h = harness(sample_app("memory/memory_probe_capture.sqlite.gz", StartOptions::default()));
    h.run();
    let (at, expected) = {
        let session = h.state().session.as_ref().unwrap();
        let data = &session.data;
        assert_eq!(data.memory.len(), 1);
        let counter = &data.memory[0];
        let series = cuda_series(&data.traces[counter.trace], counter.device);
        // 20 device allocations and 9 releases (the other 475 records are static variables and pinned host memory).
        assert_eq!(series.points.len(), 29);
        assert_eq!(counter.series.iter().map(|s| (s.label, s.len())).collect::<Vec<_>>(), [("CUDA", 29)]);
        // The report's CUDA-level peak of the probe: PyTorch's 654,311,424 reserved plus 64 MiB + 128 KiB + 1 KiB.
        assert_eq!(counter.max_bytes(), 721_552_384);
        assert_eq!(counter.end_ns, data.t1_ns);
        // Under the GPU's streams: the rows above it up to the GPU's header are its graph and its tracks.
        let row = memory_row(data, 0);
        let header = (0..row).rev().find(|&r| matches!(data.rows[r].content, RowContent::Header { .. })).unwrap();
        let RowContent::Header { label, .. } = &data.rows[header].content else { unreachable!() };
        assert!(label.starts_with("GPU 0"), "{label}");
        let between: Vec<&RowContent> = data.rows[header + 1..row].iter().map(|r| &r.content).collect();
        assert!(matches!(between[0], RowContent::Utilization(_)), "{between:?}");
        assert!(between.iter().any(|c| matches!(c, RowContent::Track(_))));
        // The level held longest inside the view, hovered in its middle.
        let view = &session.view;
        let screen = view.to_screen(view.last_plot_rect.width());
        let (held, level) = series
            .points
            .windows(2)
            .filter(|w| w[0].time_ns as f64 > view.start_ns && (w[1].time_ns as f64) < view.end_ns)
            .map(|w| ((w[0].time_ns, w[1].time_ns), w[0].bytes))
            .max_by_key(|((from, to), _)| to - from)
            .expect("levels inside the view");
        assert!(level > 0);
        let x = view.last_plot_rect.left() + screen.x((held.0 + held.1) / 2);
        let y = shardscope_viewer::timeline::row_center_y(data, view, row).expect("the row is shown");
        // The time the tooltip reads from the pointer's position, as the axis counts it.
        let t_ns = screen.t(x - view.last_plot_rect.left()).floor() as i64;
        assert!(t_ns > held.0 && t_ns < held.1);
        let at_text = shardscope_viewer::timeline::paint::format_duration((t_ns - data.t0_ns) as f64);
        (Pos2::new(x, y), format!("CUDA {}\nat {at_text}", format_bytes(level)))
    };
    h.hover_at(at);
    h.run();
    h.get_by_label(&expected);
}

/// The torch.profiler trace of the same program has no CUDA-level records but the allocator's counters: its memory
/// row has the allocated and reserved lines, each point of the analyzer's framework series.
#[test]
fn a_kineto_memory_trace_has_allocated_and_reserved_lines() {
    use shardscope_analyzer::figures::memory::framework_series;

    let app = sample_app("memory/memory_probe_kineto.json.gz", StartOptions::default());
    let data = &app.session.as_ref().unwrap().data;
    assert_eq!(data.memory.len(), 1);
    let counter = &data.memory[0];
    let (allocated, reserved) = framework_series(&data.traces[counter.trace], counter.device);
    let shown: Vec<(&str, usize)> = counter.series.iter().map(|s| (s.label, s.len())).collect();
    assert_eq!(shown, [("allocated", allocated.len()), ("reserved", reserved.len())]);
    assert_eq!(allocated.len(), 409);
    // What PyTorch printed for the run: `max_memory_allocated()` and `max_memory_reserved()`.
    assert_eq!(counter.series[0].max_bytes(), 419_433_984);
    assert_eq!(counter.series[1].max_bytes(), 654_311_424);
    assert_eq!(counter.max_bytes(), 654_311_424);
    memory_row(data, 0);
}

#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_memory_row_of_the_memory_sample() {
    let mut h = harness(sample_app("memory/memory_probe_capture.sqlite.gz", StartOptions::default()));
    // From the first allocation on (the run opens at its steady steps, where the level stays put), the pointer on
    // the memory row two thirds across.
    let at = {
        let session = h.state_mut().session.as_mut().unwrap();
        let (first_ns, end_ns) = session.data.memory[0].span_ns();
        session.view.fit(first_ns, end_ns);
        let row = memory_row(&session.data, 0);
        h.run();
        let session = h.state().session.as_ref().unwrap();
        let plot = session.view.last_plot_rect;
        let y = shardscope_viewer::timeline::row_center_y(&session.data, &session.view, row).unwrap();
        Pos2::new(plot.left() + plot.width() * 2.0 / 3.0, y)
    };
    h.hover_at(at);
    h.run();
    snapshot(&mut h, "memory");
}

/// The eager module sample (`capture --torch-modules`): each of the GPU's module rows (layer, module below it,
/// module below that) counts, per path cut to its depth, exactly the kernels `analyzer modules --module-depth D`
/// gives that path (the rows below the first only the paths that deep); every span lies inside a span of the row
/// above; the rows sit above the GPU's streams, each deeper one under a header that folds it away.
#[test]
fn the_module_rows_count_what_analyzer_modules_counts() {
    use shardscope_analyzer::llm::modules::{ModuleOptions, NO_MODULE, module_report};
    use shardscope_viewer::timeline::layout::RowContent;
    use std::collections::BTreeMap;

    let app = sample_app("modules/qwen3_eager.sqlite.gz", StartOptions::default());
    let data = &app.session.as_ref().unwrap().data;
    let spans = &data.modules[0];
    assert_eq!(spans.depths, [3, 4, 5], "layer, module in the layer, module in that");
    let phase_pattern = regex::Regex::new(shardscope_analyzer::llm::phases::DEFAULT_PHASE_PATTERN).unwrap();
    for (level, &depth) in spans.depths.iter().enumerate() {
        let mut shown: BTreeMap<String, u64> = BTreeMap::new();
        for span in spans.spans.iter().filter(|s| usize::from(s.level) == level) {
            // The analyzer names the root module by its empty path, the row by its class.
            let path = spans.path_of(span);
            let path = if path.starts_with('(') { "" } else { path };
            *shown.entry(path.to_string()).or_default() += u64::from(span.kernels);
        }
        // The timeline shows every kernel: nothing left out as warm-up.
        let options = ModuleOptions {
            depth: Some(depth),
            phase_pattern: phase_pattern.clone(),
            window_ns: None,
            skip_steps: Some(0),
        };
        let report = module_report(&data.traces, &options);
        let mut expected: BTreeMap<String, u64> = BTreeMap::new();
        let deep_enough = |path: &str| level == 0 || (!path.is_empty() && path.split('.').count() >= depth);
        for row in report.ranks.iter().flat_map(|r| &r.phases).flat_map(|p| &p.rows) {
            if row.path != NO_MODULE && deep_enough(&row.path) {
                *expected.entry(row.path.clone()).or_default() += row.kernels;
            }
        }
        assert_eq!(shown, expected, "row {level}");
    }
    let count = |level: u16, path: &str| {
        spans.spans.iter().filter(|s| s.level == level && spans.path_of(s) == path).map(|s| s.kernels).sum::<u32>()
    };
    assert!(count(0, "model.layers.0") > 0 && count(0, "lm_head") > 0);
    assert!(count(1, "model.layers.3.mlp") > 0 && count(1, "model.layers.0.self_attn") > 0);
    assert!(count(2, "model.layers.0.self_attn.q_proj") > 0 && count(2, "model.layers.2.mlp.down_proj") > 0);
    let q_proj = spans.spans.iter().find(|s| spans.path_of(s) == "model.layers.0.self_attn.q_proj").unwrap();
    assert_eq!(spans.label_of(q_proj), "q_proj");
    // Spans are runs: two spans next to each other on one row of one GPU have different paths or a kernel without
    // one between.
    for level in 0..3u16 {
        let row: Vec<_> = spans.spans.iter().filter(|s| s.level == level).collect();
        for pair in row.windows(2).filter(|w| w[0].device == w[1].device) {
            let last_of_first = pair[0].first_kernel + pair[0].kernels - 1;
            assert!(pair[0].path != pair[1].path || pair[1].first_kernel > last_of_first + 1, "{pair:?}");
        }
        // Nesting: each span lies inside the span of the row above that starts last before it.
        if level > 0 {
            let above: Vec<_> = spans.spans.iter().filter(|s| s.level == level - 1).collect();
            for span in &row {
                let at = above.partition_point(|a| a.first_kernel <= span.first_kernel);
                let parent = above[at - 1];
                assert!(parent.start_ns <= span.start_ns && span.end_ns <= parent.end_ns, "{span:?} in {parent:?}");
                assert!(spans.path_of(span).starts_with(spans.path_of(parent)), "{span:?} in {parent:?}");
            }
        }
    }
    // Per GPU one module track per level, right under its utilisation graph, each holding its row's spans; a header
    // above each deeper one.
    assert_eq!(data.module_track.len(), 3);
    let device = spans.spans[0].device;
    let rows: Vec<usize> = (0..3u16)
        .map(|level| {
            let track = data.module_track[&(0, spans.spans[0].process, device, level)];
            let in_row = spans.spans.iter().filter(|s| s.level == level && s.device == device).count();
            assert_eq!(data.tracks[track].len(), in_row);
            let event = data.tracks[track].events[0];
            assert_eq!(event.kind(), EventKind::Module);
            assert_eq!(data.event_span(0, event), (data.tracks[track].starts_ns[0], data.tracks[track].ends_ns[0]));
            data.rows.iter().position(|r| matches!(r.content, RowContent::Track(t) if t == track)).unwrap()
        })
        .collect();
    assert!(matches!(data.rows[rows[0] - 1].content, RowContent::Utilization(_)));
    for (level, &row) in rows.iter().enumerate().skip(1) {
        assert_eq!(row, rows[level - 1] + 2);
        assert!(matches!(data.rows[row - 1].content, RowContent::Header { .. }));
        assert_eq!(data.rows[row].indent, data.rows[row - 1].indent + 1);
    }
}

/// Collapsing the header above the second module row hides it and the third, and keeps the layer row.
#[test]
fn collapsing_a_module_header_hides_the_deeper_rows() {
    use shardscope_viewer::timeline::layout::RowContent;
    use shardscope_viewer::timeline::row_center_y;

    let mut h = harness(sample_app("modules/qwen3_eager.sqlite.gz", StartOptions::default()));
    let (tracks, header) = {
        let data = &h.state().session.as_ref().unwrap().data;
        let mut tracks: Vec<(u16, usize)> = data.module_track.iter().map(|(k, &t)| (k.3, t)).collect();
        tracks.sort();
        let row = data.rows.iter().position(|r| matches!(r.content, RowContent::Track(t) if t == tracks[1].1));
        let header = match &data.rows[row.unwrap() - 1].content {
            RowContent::Header { id, .. } => *id,
            other => panic!("a header above the second module row, not {other:?}"),
        };
        (tracks.iter().map(|t| t.1).collect::<Vec<_>>(), header)
    };
    let visible = |h: &Harness<'_, ViewerApp>| {
        let session = h.state().session.as_ref().unwrap();
        tracks.iter().map(|&t| track_center_y(&session.data, &session.view, t).is_some()).collect::<Vec<_>>()
    };
    assert_eq!(visible(&h), [true, true, true]);
    h.state_mut().session.as_mut().unwrap().view.collapsed.insert(header);
    h.run();
    assert_eq!(visible(&h), [true, false, false]);
    let session = h.state().session.as_ref().unwrap();
    let header_row =
        session.data.rows.iter().position(|r| matches!(r.content, RowContent::Header { id, .. } if id == header));
    assert!(row_center_y(&session.data, &session.view, header_row.unwrap()).is_some(), "the header stays");
}

/// A trace without module ranges has no module rows.
#[test]
fn a_trace_without_module_ranges_has_no_module_rows() {
    let app = sample_app("tp2_capture.sqlite.gz", StartOptions::default());
    let data = &app.session.as_ref().unwrap().data;
    assert!(data.module_track.is_empty());
    assert!(data.modules.iter().all(|m| m.spans.is_empty()));
    assert!(data.memory.is_empty(), "the capture recorded no memory");
}

/// One decode step (past the first ones' warm-up) of the eager module sample: the module rows nest the layers, the
/// attention, MLP and norms of each layer, and the projections inside them (`modules`); with the header above the
/// second row collapsed only the layer row is left (`modules_collapsed`).
#[test]
#[cfg_attr(not(wgpu_renderer), ignore = "needs a Vulkan driver for wgpu (mesa-vulkan-drivers)")]
fn snapshot_module_row_of_a_decode_step() {
    let mut h = harness(sample_app("modules/qwen3_eager.sqlite.gz", StartOptions::default()));
    {
        let session = h.state_mut().session.as_mut().unwrap();
        let trace = &session.data.traces[0];
        let decode = trace.ranges.iter().filter(|r| trace.names.get(r.name) == "decode").nth(10).expect("decode steps");
        // The kernels launched in it, from the end of their longest pause (the host waits inside layer 0's
        // attention in every step) to the last one's end: the layers one after another.
        let (start_ns, end_ns) = (decode.start_ns, decode.end_ns);
        let launched_in = |k: &&shardscope_model::Kernel| {
            k.launch
                .and_then(|l| trace.api_calls.get(l as usize))
                .is_some_and(|c| (start_ns..end_ns).contains(&c.start_ns))
        };
        let kernels: Vec<(i64, i64)> =
            trace.kernels.iter().filter(launched_in).map(|k| (k.start_ns, k.end_ns)).collect();
        let after_pause = kernels.windows(2).max_by_key(|w| w[1].0 - w[0].1).map_or(kernels[0].0, |w| w[1].0);
        session.view.fit(after_pause, kernels.iter().map(|k| k.1).max().unwrap());
    }
    h.remove_cursor();
    h.run();
    snapshot(&mut h, "modules");
    {
        use shardscope_viewer::timeline::layout::RowContent;
        let session = h.state_mut().session.as_mut().unwrap();
        let data = &session.data;
        let second = data.module_track.iter().find(|(k, _)| k.3 == 1).map(|(_, &t)| t).unwrap();
        let row = data.rows.iter().position(|r| matches!(r.content, RowContent::Track(t) if t == second)).unwrap();
        let RowContent::Header { id, .. } = data.rows[row - 1].content else { panic!("a header above the row") };
        session.view.collapsed.insert(id);
    }
    h.run();
    snapshot(&mut h, "modules_collapsed");
}
