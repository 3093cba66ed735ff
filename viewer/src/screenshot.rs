//! `viewer --screenshot`: renders the app once, headless, and writes a PNG.
//!
//! It uses egui_kittest's wgpu renderer, which needs a Vulkan or GL driver (Mesa's software
//! ones do) but no display, so it works in CI and over ssh.
//!
//! The renderer is set up here rather than by egui_kittest, which panics when no adapter is found:
//! a machine without a usable driver gets one error naming the cause instead. The drivers' C
//! libraries write to the process's standard error while they probe (Mesa's EGL prints
//! "XDG_RUNTIME_DIR is invalid or not set" once per probe where there is no session): that text is
//! held back while the renderer starts, dropped when it starts, and folded into the error when it
//! does not.

use std::io::{Read as _, Seek as _};
use std::path::Path;

use anyhow::{Context as _, Result};
use eframe::egui_wgpu;
use egui_kittest::Harness;
use egui_kittest::wgpu::WgpuTestRenderer;

use crate::app::ViewerApp;

/// Why no headless renderer could be made: the renderer's error and what the drivers printed.
#[derive(Debug, thiserror::Error)]
#[error(
    "--screenshot: no GPU or software renderer for headless drawing: {cause}{printed} (install Mesa's Vulkan or EGL drivers, e.g. mesa-vulkan-drivers)"
)]
pub struct NoRenderer {
    cause: String,
    printed: String,
}

/// Renders `app` at `size` (points) and saves it as PNG at `out`. Every error names `out` (a [`NoRenderer`] stays
/// one under it, for the caller to tell a machine that cannot draw from bad input).
pub fn render_png(app: ViewerApp, size: egui::Vec2, out: &Path) -> Result<()> {
    let renderer = headless_renderer().with_context(|| out.display().to_string())?;
    let mut harness = Harness::builder()
        .with_size(size)
        // Kernel and range names may hold characters the built-in fonts lack: draw tofu, not panic.
        .allow_missing_glyphs()
        .renderer(renderer)
        .build_ui_state(|ui, app: &mut ViewerApp| app.show(ui), app);
    // A few frames so panels settle their sizes and fonts are laid out.
    harness.run_steps(4);
    let image =
        harness.render().map_err(|e| anyhow::anyhow!("{}: --screenshot: rendering failed: {e}", out.display()))?;
    image.save(out).with_context(|| format!("{}: cannot write PNG", out.display()))?;
    Ok(())
}

/// egui_kittest's wgpu renderer (software adapters first), or why there is none.
pub fn headless_renderer() -> Result<WgpuTestRenderer, NoRenderer> {
    let (state, printed) = with_stderr_held(|| {
        let setup = egui_kittest::wgpu::default_wgpu_setup();
        let instance = pollster::block_on(setup.new_instance());
        let config = egui_wgpu::WgpuConfiguration { wgpu_setup: setup, ..Default::default() };
        let options = egui_wgpu::RendererOptions::PREDICTABLE;
        pollster::block_on(egui_wgpu::RenderState::create(&config, &instance, None, options))
    });
    match state {
        Ok(state) => Ok(WgpuTestRenderer::from_render_state(state)),
        Err(error) => Err(NoRenderer { cause: error.to_string(), printed: folded(&printed) }),
    }
}

/// What the drivers printed, each distinct line once, as `; drivers said: …` (empty if nothing).
fn folded(printed: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    for line in printed.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    if lines.is_empty() { String::new() } else { format!("; drivers said: {}", lines.join(" | ")) }
}

/// Runs `f` with the process's standard error (file descriptor 2) sent to a temporary file, and returns its
/// result with what was written there. Where the file cannot be made, `f` runs with standard error as it was.
fn with_stderr_held<T>(f: impl FnOnce() -> T) -> (T, String) {
    let held = std::env::temp_dir().join(format!("shardscope-viewer-stderr-{}", std::process::id()));
    let Ok(mut file) = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&held) else {
        return (f(), String::new());
    };
    // The file is reached through its descriptor only.
    let _ = std::fs::remove_file(&held);
    use std::os::fd::AsRawFd as _;
    // SAFETY: `dup` on descriptor 2 has no memory effects; a negative result is checked.
    let saved = unsafe { libc::dup(2) };
    if saved < 0 {
        return (f(), String::new());
    }
    // SAFETY: both descriptors are open (`file` lives to the end of this function); `dup2` only
    // replaces descriptor 2, which is restored from `saved` below.
    let redirected = unsafe { libc::dup2(file.as_raw_fd(), 2) } >= 0;
    let result = f();
    if redirected {
        // SAFETY: `saved` is the duplicate of the original descriptor 2 made above.
        unsafe { libc::dup2(saved, 2) };
    }
    // SAFETY: `saved` is ours and no longer used.
    unsafe { libc::close(saved) };
    let mut printed = Vec::new();
    // At most 64 KiB of it: enough to name the cause.
    if file.rewind().is_ok() {
        let _ = file.take(64 << 10).read_to_end(&mut printed);
    }
    (result, String::from_utf8_lossy(&printed).into_owned())
}
