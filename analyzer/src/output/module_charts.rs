//! The module tables drawn: per rank and phase, a layer × module heatmap (GPU µs per step of each module below the
//! layer level, in each layer) and the shares of the largest module rows, as an HTML page with inline SVG
//! (`analyzer modules --html`). Every number drawn is a figure of [`ModuleReport`].

use std::collections::BTreeMap;

use crate::llm::modules::{ModuleReport, NO_MODULE, PhaseModules};
use crate::output::charts::{self, Chart, ChartKind, Segment};
use crate::output::html::{self, Section};

/// Rows drawn one by one in the share chart; the rest are summed as `other modules`.
const SHARE_ROWS: usize = 12;

/// The heatmap of one phase: rows are modules below the layer level, columns the layers (µs per step).
fn layer_heatmap(name: String, title: String, phase: &PhaseModules) -> Option<Section> {
    let layers: Vec<u32> = {
        let mut layers: Vec<u32> = phase.rows.iter().filter_map(|r| r.layer).collect();
        layers.sort_unstable();
        layers.dedup();
        layers
    };
    let last = *layers.last()?;
    // Columns are layer numbers read from range names: a number far beyond the layers present is no model's layer
    // count, and no grid is sized from it.
    if last as usize > 4 * layers.len() + 64 {
        return None;
    }
    let mut cells: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    let steps = phase.instances.max(1) as f64;
    for row in phase.rows.iter().filter(|r| r.layer.is_some()) {
        let module =
            if row.within_layer.is_empty() { "(the layer itself)".to_string() } else { row.within_layer.clone() };
        let line = cells.entry(module).or_insert_with(|| vec![None; last as usize + 1]);
        let layer = row.layer.unwrap_or(0) as usize;
        line[layer] = Some(line[layer].unwrap_or(0.0) + row.gpu_ns as f64 / steps / 1e3);
    }
    let height = (80 + 22 * cells.len() as u32).clamp(240, 1400);
    let (rows, cells): (Vec<String>, Vec<Vec<Option<f64>>>) = cells.into_iter().unzip();
    let chart = Chart {
        name,
        title,
        size_px: (1100, height),
        kind: ChartKind::Heatmap { rows, x_label: "layer".into(), cells, unit: "µs per step".into() },
    };
    let caption = "GPU time per step of each module below the layer level (rows), in each layer (columns): the \
                   kernels launched inside the module's range, or captured inside it for CUDA graph replays."
        .to_string();
    Some(Section { chart, caption })
}

/// The shares of the phase's kernel time taken by its largest module rows.
fn share_chart(name: String, title: String, phase: &PhaseModules) -> Section {
    let mut rows: Vec<_> = phase.rows.iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.gpu_ns));
    let label = |path: &str, class: &str| if path.is_empty() { format!("({class})") } else { path.to_string() };
    let mut segments: Vec<Segment> = rows
        .iter()
        .take(SHARE_ROWS)
        .enumerate()
        .map(|(i, r)| Segment {
            label: label(&r.path, &r.class),
            value: r.share * 100.0,
            source_ns: Some(r.gpu_ns),
            color: charts::series_color(i),
        })
        .collect();
    let rest: i64 = rows.iter().skip(SHARE_ROWS).map(|r| r.gpu_ns).sum();
    if rest > 0 {
        let share = rest as f64 / phase.gpu_ns.max(1) as f64 * 100.0;
        let color = charts::series_color(SHARE_ROWS);
        segments.push(Segment { label: "other modules".into(), value: share, source_ns: Some(rest), color });
    }
    let chart = Chart {
        name,
        title,
        size_px: (900, 520),
        kind: ChartKind::Stacked {
            columns: vec![phase.phase.clone()],
            segments: vec![segments],
            y_label: "% of the phase's kernel time".into(),
        },
    };
    let caption = format!(
        "The {SHARE_ROWS} module rows with the most GPU time and the rest; `{NO_MODULE}` is kernel time launched \
         outside every module range."
    );
    Section { chart, caption }
}

/// The page: a heatmap and a share chart per rank and phase.
pub fn page(report: &ModuleReport) -> Result<String, html::PageError> {
    let mut page = html::page_start("shardscope modules");
    page.push_str("<h1>GPU time per module</h1>\n");
    for rank in &report.ranks {
        for (index, phase) in rank.phases.iter().enumerate() {
            let stem = format!("r{}_p{index}", rank.rank);
            let what = format!("rank {} · {}", rank.rank, phase.phase);
            let heatmap = layer_heatmap(format!("layers_{stem}"), format!("Layer × module, {what}"), phase);
            for section in heatmap.into_iter().chain([share_chart(format!("shares_{stem}"), what.clone(), phase)]) {
                page.push_str(&html::chart_section(&section)?);
            }
        }
    }
    page.push_str(html::page_end());
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::modules::ModuleRow;

    fn phase(layers: &[u32]) -> PhaseModules {
        let rows = layers
            .iter()
            .map(|&layer| ModuleRow {
                path: format!("model.layers.{layer}.mlp"),
                layer: Some(layer),
                within_layer: "mlp".into(),
                gpu_ns: 2000,
                ..ModuleRow::default()
            })
            .collect();
        PhaseModules {
            phase: "decode".into(),
            instances: 2,
            gpu_ns: 2000 * layers.len() as i64,
            rows,
            ..Default::default()
        }
    }

    #[test]
    fn heatmap_has_a_column_per_layer_and_refuses_absurd_layer_numbers() {
        let section = layer_heatmap("l".into(), "t".into(), &phase(&[0, 1, 3])).expect("a heatmap");
        let ChartKind::Heatmap { rows, cells, .. } = section.chart.kind else { panic!("not a heatmap") };
        assert_eq!(rows, ["mlp"]);
        assert_eq!(cells, [vec![Some(1.0), Some(1.0), None, Some(1.0)]]);
        assert!(layer_heatmap("l".into(), "t".into(), &phase(&[0, 4_000_000_000])).is_none());
    }
}
