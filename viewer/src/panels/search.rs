//! Regex search over kernel and range names, with next / previous and a match count.
//!
//! The regex runs once per distinct name (a few thousand), then one pass over the events
//! looks each event's name up in that table, so searching ten million kernels costs one
//! linear scan, and only when the query changes. That scan (about 70 ms for ten million
//! kernels) runs on a background thread from the search bar, so typing Enter never stalls
//! a frame.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError, channel};

use regex::Regex;
use shardscope_model::Trace;

use crate::timeline::Selected;
use crate::timeline::layout::{EventKind, EventRef, TimelineData};

/// Search box state and results.
#[derive(Debug, Default)]
pub struct SearchState {
    /// What the user typed.
    pub query: String,
    /// The query the matches belong to.
    searched: String,
    /// Compile error of the last query.
    pub error: Option<String>,
    /// Matches sorted by start time.
    pub matches: Vec<Selected>,
    /// Index of the current match.
    pub current: Option<usize>,
    /// A search running in the background: its query, its result, and the step to take
    /// when it arrives (true = next, false = previous).
    pending: Option<PendingSearch>,
}

/// What a background search sends back: the matches, or why the query is not a regex.
type SearchResult = Result<Vec<Selected>, String>;

/// A query on its way: the query, where its result arrives, and the step to take then.
type PendingSearch = (String, Receiver<SearchResult>, Option<bool>);

/// Compiles `query` into a one-line error or the matches.
fn search(data: &TimelineData, query: &str) -> SearchResult {
    let regex = Regex::new(query).map_err(|e| e.to_string().lines().last().unwrap_or("invalid regex").to_string())?;
    Ok(find_matches(data, &regex))
}

fn matching_names(trace: &Trace, regex: &Regex) -> Vec<bool> {
    trace.names.iter().map(|(_, name)| regex.is_match(name)).collect()
}

/// Every kernel (by full or short name) and range whose name matches `regex`, sorted by start.
pub fn find_matches(data: &TimelineData, regex: &Regex) -> Vec<Selected> {
    let mut found: Vec<(i64, Selected)> = Vec::new();
    for (ti, trace) in data.traces.iter().enumerate() {
        let hit = matching_names(trace, regex);
        let is_hit = |id: shardscope_model::NameId| hit.get(id.0 as usize).copied().unwrap_or(false);
        for (i, k) in trace.kernels.iter().enumerate() {
            if is_hit(k.name) || is_hit(k.short_name) {
                found.push((k.start_ns, Selected { trace: ti, event: EventRef::new(EventKind::Kernel, i) }));
            }
        }
        for (i, r) in trace.ranges.iter().enumerate() {
            if is_hit(r.name) {
                found.push((r.start_ns, Selected { trace: ti, event: EventRef::new(EventKind::Range, i) }));
            }
        }
    }
    found.sort_by_key(|(start, s)| (*start, s.trace));
    found.into_iter().map(|(_, s)| s).collect()
}

impl SearchState {
    /// Runs the query now if it changed since the last run. Returns true when the matches changed.
    pub fn run(&mut self, data: &TimelineData) -> bool {
        if self.query == self.searched {
            return false;
        }
        self.pending = None;
        let result = if self.query.is_empty() { Ok(Vec::new()) } else { search(data, &self.query) };
        let query = self.query.clone();
        self.install(query, result);
        true
    }

    fn install(&mut self, query: String, result: SearchResult) {
        self.searched = query;
        self.current = None;
        match result {
            Ok(matches) => {
                self.matches = matches;
                self.error = None;
            }
            Err(error) => {
                self.matches.clear();
                self.error = Some(error);
            }
        }
    }

    /// Starts the query on a background thread unless its results are shown or on their way;
    /// `step` (true = next, false = previous) is taken once they are in.
    pub fn run_in_background(&mut self, data: &Arc<TimelineData>, step: Option<bool>, ctx: &egui::Context) {
        if self.query == self.searched || self.query.is_empty() {
            if self.query.is_empty() {
                self.install(String::new(), Ok(Vec::new()));
            }
            return;
        }
        if let Some((query, _, pending_step)) = &mut self.pending
            && *query == self.query
        {
            *pending_step = step.or(*pending_step);
            return;
        }
        let (sender, receiver) = channel();
        let (data, query, ctx) = (Arc::clone(data), self.query.clone(), ctx.clone());
        std::thread::Builder::new()
            .name("viewer-search".into())
            .spawn(move || {
                // The receiver is gone when a newer query replaced this one: nothing to do then.
                let _ = sender.send(search(&data, &query));
                ctx.request_repaint();
            })
            .expect("cannot start the search thread");
        self.pending = Some((self.query.clone(), receiver, step));
    }

    /// Takes a finished background search; returns the match to show if a step was waiting.
    pub fn poll(&mut self) -> Option<Selected> {
        let (_, receiver, _) = self.pending.as_ref()?;
        match receiver.try_recv() {
            Ok(result) => {
                let (query, _, step) = self.pending.take()?;
                self.install(query, result);
                match step {
                    Some(true) => self.next_match(),
                    Some(false) => self.previous_match(),
                    None => None,
                }
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.pending = None;
                None
            }
        }
    }

    /// Blocks until a background search is in (for tests); returns what [`Self::poll`] would.
    pub fn wait(&mut self) -> Option<Selected> {
        let (query, receiver, step) = self.pending.take()?;
        let result = receiver.recv().ok()?;
        self.install(query, result);
        match step {
            Some(true) => self.next_match(),
            Some(false) => self.previous_match(),
            None => None,
        }
    }

    /// True while a background search runs.
    pub fn is_searching(&self) -> bool {
        self.pending.is_some()
    }

    /// Forgets results (after a new load).
    pub fn reset(&mut self) {
        self.searched.clear();
        self.matches.clear();
        self.current = None;
        self.pending = None;
    }

    /// Moves to the next match (wrapping) and returns it.
    pub fn next_match(&mut self) -> Option<Selected> {
        if self.matches.is_empty() {
            return None;
        }
        let next = self.current.map_or(0, |c| (c + 1) % self.matches.len());
        self.current = Some(next);
        Some(self.matches[next])
    }

    /// Moves to the previous match (wrapping) and returns it.
    pub fn previous_match(&mut self) -> Option<Selected> {
        if self.matches.is_empty() {
            return None;
        }
        let len = self.matches.len();
        let previous = self.current.map_or(len - 1, |c| (c + len - 1) % len);
        self.current = Some(previous);
        Some(self.matches[previous])
    }
}

/// The search bar; returns the match to show when the user stepped to one.
pub fn search_ui(ui: &mut egui::Ui, data: Option<&Arc<TimelineData>>, state: &mut SearchState) -> Option<Selected> {
    let mut go_to = state.poll();
    ui.label("Search");
    let edit = ui.add(
        egui::TextEdit::singleline(&mut state.query)
            .hint_text("regex over kernel and range names")
            .desired_width(220.0)
            .id_salt("search_query"),
    );
    let submitted = edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
    let previous = ui.button("Prev").on_hover_text("previous match").clicked();
    let next = ui.button("Next").on_hover_text("next match").clicked();
    // Search on Enter or a step, not on every keystroke: a query scans every event once.
    let step = if submitted || next {
        Some(true)
    } else if previous {
        Some(false)
    } else {
        None
    };
    if let (Some(data), Some(forward)) = (data, step) {
        if state.query != state.searched {
            state.run_in_background(data, Some(forward), ui.ctx());
        } else if forward {
            go_to = state.next_match();
        } else {
            go_to = state.previous_match();
        }
    }
    if state.is_searching() {
        ui.spinner();
    }
    match (&state.error, state.current) {
        (Some(error), _) => {
            ui.colored_label(ui.visuals().error_fg_color, error);
        }
        (None, Some(current)) => {
            ui.label(format!("{} / {} matches", current + 1, state.matches.len()));
        }
        (None, None) => {
            ui.label(format!("{} matches", state.matches.len()));
        }
    }
    go_to
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Categories;
    use crate::synthetic::{SyntheticSpec, generate};

    #[test]
    fn finds_kernels_and_ranges_and_cycles() {
        let traces =
            generate(SyntheticSpec { ranks: 2, kernels_per_rank: 200, allreduce_every: 10, kernels_per_step: 100 });
        let data = TimelineData::build(traces, Categories::builtin());
        let mut state = SearchState { query: "AllReduce".into(), ..SearchState::default() };
        state.run(&data);
        // Every 10th kernel of each rank.
        assert_eq!(state.matches.len(), 40);
        state.query = "^(prefill|decode)$".into();
        state.run(&data);
        // Two steps per rank, one prefill and one decode each.
        assert_eq!(state.matches.len(), 8);
        let first = state.next_match().unwrap();
        assert_eq!(state.previous_match(), state.matches.last().copied());
        assert_eq!(state.next_match(), Some(first));
        state.query = "(".into();
        state.run(&data);
        assert!(state.error.is_some());
        // The background path finds the same matches and takes the waiting step.
        let data = Arc::new(data);
        let mut background = SearchState { query: "AllReduce".into(), ..SearchState::default() };
        background.run_in_background(&data, Some(true), &egui::Context::default());
        assert!(background.is_searching());
        let first = background.wait();
        assert_eq!(background.matches.len(), 40);
        assert_eq!(first, background.matches.first().copied());
        assert_eq!(background.current, Some(0));
    }
}
