//! Loading traces on a background thread so the window never freezes.
//!
//! [`Loader::start`] reads each file with `shardscope_io::load`, then builds the timeline
//! rows and the collective index, all off the UI thread. The UI polls [`Loader::poll`] each
//! frame and shows [`Loader::progress`]; failures come back as one-line messages and leave
//! the app running.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shardscope_model::Trace;

use crate::analysis::Categories;
use crate::collectives::CollectiveIndex;
use crate::timeline::layout::TimelineData;

/// A loaded, ready-to-draw set of traces.
pub struct Loaded {
    /// Tracks and traces.
    pub data: TimelineData,
    /// Same collective on every rank.
    pub collectives: CollectiveIndex,
    /// Files that failed, one line each; the others were still loaded.
    pub errors: Vec<String>,
    /// Seconds from start to ready.
    pub seconds: f64,
}

/// Where a load is.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Files read so far.
    pub files_done: usize,
    /// Files to read.
    pub files_total: usize,
    /// What is happening now.
    pub stage: String,
    /// Seconds since the load started.
    pub elapsed_s: f64,
}

/// A load in flight.
pub struct Loader {
    receiver: Receiver<Result<Loaded, Vec<String>>>,
    files_done: Arc<AtomicUsize>,
    files_total: usize,
    stage: Arc<Mutex<String>>,
    started: Instant,
}

/// Reads `paths` and builds everything the viewer shows, synchronously; the background
/// loader and the headless screenshot mode both use it.
pub fn load_paths(paths: &[PathBuf], on_file: impl FnMut(usize, &str)) -> Result<Loaded, Vec<String>> {
    load_paths_with(paths, Categories::builtin(), on_file)
}

/// Like [`load_paths`], with the analyzer settings (rules, phase pattern) the figures use.
pub fn load_paths_with(
    paths: &[PathBuf],
    categories: Categories,
    mut on_file: impl FnMut(usize, &str),
) -> Result<Loaded, Vec<String>> {
    let started = Instant::now();
    let mut traces: Vec<Trace> = Vec::new();
    let mut errors = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        on_file(i, &format!("reading {}", path.display()));
        match shardscope_io::load(path) {
            Ok(mut loaded) => traces.append(&mut loaded),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if traces.is_empty() {
        if errors.is_empty() {
            errors.push("no traces to show".to_string());
        }
        return Err(errors);
    }
    on_file(paths.len(), "building tracks");
    Ok(prepare_with(traces, categories, errors, started))
}

/// Builds the timeline and collective index of already-loaded traces, with the built-in rules.
pub fn prepare(traces: Vec<Trace>, errors: Vec<String>, started: Instant) -> Loaded {
    prepare_with(traces, Categories::builtin(), errors, started)
}

/// Like [`prepare`], with the analyzer settings the figures use.
pub fn prepare_with(traces: Vec<Trace>, categories: Categories, errors: Vec<String>, started: Instant) -> Loaded {
    let mut data = TimelineData::build(traces, categories);
    let collectives = CollectiveIndex::build(&data);
    data.collective_wait_ns = collectives.wait_ns().clone();
    Loaded { data, collectives, errors, seconds: started.elapsed().as_secs_f64() }
}

impl Loader {
    /// Starts reading `paths` on a new thread; `ctx` is asked to repaint when it is done.
    pub fn start(paths: Vec<PathBuf>, categories: Categories, ctx: egui::Context) -> Loader {
        let (sender, receiver) = channel();
        let files_done = Arc::new(AtomicUsize::new(0));
        let stage = Arc::new(Mutex::new(String::from("starting")));
        let files_total = paths.len();
        let (done, stage_out) = (files_done.clone(), stage.clone());
        std::thread::Builder::new()
            .name("viewer-load".into())
            .spawn(move || {
                let result = load_paths_with(&paths, categories, |i, what| {
                    done.store(i, Ordering::Relaxed);
                    if let Ok(mut s) = stage_out.lock() {
                        *s = what.to_string();
                    }
                    ctx.request_repaint();
                });
                // The receiver may be gone if the user started another load; nothing to do then.
                let _ = sender.send(result);
                ctx.request_repaint();
            })
            .expect("cannot start the loading thread");
        Loader { receiver, files_done, files_total, stage, started: Instant::now() }
    }

    /// The finished result, once there is one.
    pub fn poll(&self) -> Option<Result<Loaded, Vec<String>>> {
        match self.receiver.try_recv() {
            Ok(result) => Some(result),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(vec!["loader thread stopped unexpectedly".to_string()])),
        }
    }

    /// How far the load got.
    pub fn progress(&self) -> Progress {
        Progress {
            files_done: self.files_done.load(Ordering::Relaxed),
            files_total: self.files_total,
            stage: self.stage.lock().map(|s| s.clone()).unwrap_or_default(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
        }
    }
}
