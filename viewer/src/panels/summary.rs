//! Op-category shares per rank and per phase, as stacked bar charts.

use egui_plot::{Bar, BarChart, Plot};

use crate::analysis::{Categories, RankFigures};
use crate::timeline::paint::category_color;

/// Stacked bars: one bar per group (rank or phase), one segment per category, in percent of
/// that group's kernel time so ranks with different spans compare directly.
fn stacked_chart(
    ui: &mut egui::Ui,
    categories: &Categories,
    id: &str,
    groups: &[(String, Vec<(String, i64)>)],
    height: f32,
) {
    let mut category_order: Vec<String> = Vec::new();
    for (_, categories) in groups {
        for (name, _) in categories {
            if !category_order.contains(name) {
                category_order.push(name.clone());
            }
        }
    }
    let labels: Vec<String> = groups.iter().map(|(label, _)| label.clone()).collect();
    let mut charts: Vec<BarChart> = Vec::new();
    for category in &category_order {
        let bars: Vec<Bar> = groups
            .iter()
            .enumerate()
            .map(|(x, (_, time_by_category))| {
                let total: i64 = time_by_category.iter().map(|(_, ns)| ns).sum();
                let ns = time_by_category.iter().find(|(n, _)| n == category).map_or(0, |(_, ns)| *ns);
                let share = if total > 0 { 100.0 * ns as f64 / total as f64 } else { 0.0 };
                Bar::new(x as f64, share).width(0.7).fill(category_color(categories, category))
            })
            .collect();
        let mut chart = BarChart::new(category.clone(), bars).color(category_color(categories, category));
        {
            let below: Vec<&BarChart> = charts.iter().collect();
            chart = chart.stack_on(&below);
        }
        charts.push(chart);
    }
    Plot::new(id)
        .height(height)
        .allow_scroll(false)
        .allow_drag(false)
        .allow_zoom(false)
        .include_y(0.0)
        .include_y(100.0)
        .y_axis_label("% of kernel time")
        .x_axis_formatter(move |mark, _range| {
            let index = mark.value.round();
            if (mark.value - index).abs() < 1e-6 && index >= 0.0 {
                labels.get(index as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .show(ui, |plot_ui| {
            for chart in charts {
                plot_ui.bar_chart(chart);
            }
        });
    legend(ui, categories, &category_order);
}

/// The categories' colours under a chart, bottom segment first: beside the bars rather than over them.
fn legend(ui: &mut egui::Ui, categories: &Categories, order: &[String]) {
    ui.horizontal_wrapped(|ui| {
        for name in order {
            let (swatch, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
            ui.painter().rect_filled(swatch, 2.0, category_color(categories, name));
            ui.label(name);
        }
    });
}

/// The summary view over `ranks` (whole-trace figures), under the report's late-rank verdict.
pub fn summary_ui(ui: &mut egui::Ui, categories: &Categories, ranks: &[RankFigures], late_rank_verdict: &str) {
    if !late_rank_verdict.is_empty() {
        ui.label(egui::RichText::new(late_rank_verdict).strong());
        ui.add_space(6.0);
    }
    ui.heading("Op-category share per rank");
    let per_rank: Vec<(String, Vec<(String, i64)>)> =
        ranks.iter().map(|r| (r.label.clone(), r.categories.clone())).collect();
    stacked_chart(ui, categories, "summary_per_rank", &per_rank, 260.0);
    ui.add_space(8.0);
    ui.heading("Op-category share per phase");
    let mut per_phase: Vec<(String, Vec<(String, i64)>)> = Vec::new();
    for rank in ranks {
        for phase in &rank.phases {
            let entry = match per_phase.iter_mut().position(|(name, _)| *name == phase.name) {
                Some(i) => &mut per_phase[i].1,
                None => {
                    per_phase.push((phase.name.clone(), Vec::new()));
                    &mut per_phase.last_mut().expect("just pushed").1
                }
            };
            for (category, ns) in &phase.categories {
                match entry.iter_mut().find(|(c, _)| c == category) {
                    Some((_, total)) => *total += ns,
                    None => entry.push((category.clone(), *ns)),
                }
            }
        }
    }
    if per_phase.is_empty() {
        ui.label("No phases found in these traces.");
    } else {
        stacked_chart(ui, categories, "summary_per_phase", &per_phase, 260.0);
    }
}
