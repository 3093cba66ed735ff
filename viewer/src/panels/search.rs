//! Regex search over kernel and range names, with next / previous and a match count.
//!
//! The regex runs once per distinct name (a few thousand), then one pass over the events
//! looks each event's name up in that table, so searching ten million kernels costs one
//! linear scan, and only when the query changes.

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
    /// Runs the query if it changed since the last run. Returns true when the matches changed.
    pub fn run(&mut self, data: &TimelineData) -> bool {
        if self.query == self.searched {
            return false;
        }
        self.searched = self.query.clone();
        self.current = None;
        self.matches.clear();
        self.error = None;
        if self.query.is_empty() {
            return true;
        }
        match Regex::new(&self.query) {
            Ok(regex) => self.matches = find_matches(data, &regex),
            Err(e) => self.error = Some(e.to_string().lines().last().unwrap_or("invalid regex").to_string()),
        }
        true
    }

    /// Forgets results (after a new load).
    pub fn reset(&mut self) {
        self.searched.clear();
        self.matches.clear();
        self.current = None;
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
pub fn search_ui(ui: &mut egui::Ui, data: Option<&TimelineData>, state: &mut SearchState) -> Option<Selected> {
    let mut go_to = None;
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
    if let Some(data) = data
        && (submitted || previous || next)
    {
        state.run(data);
    }
    if submitted || next {
        go_to = state.next_match();
    } else if previous {
        go_to = state.previous_match();
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
    }
}
