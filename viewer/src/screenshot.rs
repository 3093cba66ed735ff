//! `viewer --screenshot`: renders the app once, headless, and writes a PNG.
//!
//! It uses egui_kittest's wgpu renderer, which needs a Vulkan or GL driver (Mesa's software
//! ones do) but no display, so it works in CI and over ssh.

use std::path::Path;

use anyhow::{Context as _, Result};
use egui_kittest::Harness;

use crate::app::ViewerApp;

/// Renders `app` at `size` (points) and saves it as PNG at `out`.
pub fn render_png(app: ViewerApp, size: egui::Vec2, out: &Path) -> Result<()> {
    let mut harness = Harness::builder()
        .with_size(size)
        // Kernel and range names may hold characters the built-in fonts lack: draw tofu, not panic.
        .allow_missing_glyphs()
        .build_ui_state(|ui, app: &mut ViewerApp| app.show(ui), app);
    // A few frames so panels settle their sizes and fonts are laid out.
    harness.run_steps(4);
    let image = harness.render().map_err(|e| anyhow::anyhow!("rendering failed: {e}"))?;
    image.save(out).with_context(|| format!("{}: cannot write PNG", out.display()))?;
    Ok(())
}
