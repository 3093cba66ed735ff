//! Hostile and broken inputs, made here rather than committed: each gives a correct result with
//! its damage counted as a warning, or a one-line error naming the file; never a panic, a hang,
//! memory sized from numbers in the file, or a write outside a private temporary file.

use std::io::Write;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use shardscope_io::{Error, load};
use shardscope_model::{Device, Kernel, Process, Trace};

/// A folder of its own under the temporary folder, removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("shardscope-hostile-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small valid export: one process, one GPU, `kernels` kernels of 100 ns each.
fn small_export(path: &Path, kernels: i64) {
    let mut trace = Trace::default();
    let process = trace.add_process(Process { pid: 7, global_pid: 7 << 24, ..Process::default() });
    let device = trace.add_device(Device { ordinal: 0, process: Some(process), ..Device::default() });
    let name = trace.names.intern("gemm_kernel");
    for i in 0..kernels {
        let start_ns = 1_000 + i * 1_000;
        trace.kernels.push(Kernel {
            start_ns,
            end_ns: start_ns + 100,
            name,
            short_name: name,
            device,
            process,
            ..Kernel::default()
        });
    }
    trace.finish();
    shardscope_io::nsys_writer::write(&trace, path).unwrap();
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn sql(path: &Path, statements: &str) {
    rusqlite::Connection::open(path).unwrap().execute_batch(statements).unwrap();
}

fn one_line_error(result: Result<Vec<Trace>, Error>, path: &Path) -> String {
    let error = result.expect_err("an error").to_string();
    assert!(!error.contains('\n'), "one line: {error}");
    assert!(error.starts_with(&path.display().to_string()), "names the file: {error}");
    error
}

fn warning_count(trace: &Trace, what: &str) -> u64 {
    trace.warnings.iter().filter(|w| w.what.contains(what)).map(|w| w.count).sum()
}

#[test]
fn a_view_in_place_of_a_table_is_refused_without_running_it() {
    let scratch = Scratch::new("view");
    let file = scratch.path("view.sqlite");
    small_export(&file, 3);
    // An endless recursive view: running it would grow memory until the process dies.
    sql(
        &file,
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO real_kernels;
         CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS
           WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x AS start, x AS end FROM n;",
    );
    let error = one_line_error(load(&file), &file);
    assert!(error.contains("'CUPTI_ACTIVITY_KIND_KERNEL' is a view"), "{error}");
}

#[test]
fn views_the_reader_does_not_read_are_ignored() {
    let scratch = Scratch::new("other-view");
    let file = scratch.path("view.sqlite");
    small_export(&file, 3);
    sql(
        &file,
        "CREATE VIEW my_notes AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x FROM n;",
    );
    assert_eq!(load(&file).unwrap()[0].kernels.len(), 3);
}

#[test]
fn huge_rowids_size_nothing() {
    let scratch = Scratch::new("rowid");
    let file = scratch.path("rowid.sqlite");
    small_export(&file, 3);
    // One row moved to rowid 2^62: a reader that sized its work from rowids would try to
    // reserve exabytes, or plan 10^13 shares of the table.
    sql(
        &file,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = 4611686018427387904 WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL);",
    );
    let trace = &load(&file).unwrap()[0];
    assert_eq!(trace.kernels.len(), 3);
    sql(
        &file,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = -4611686018427387904 WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL);",
    );
    assert_eq!(load(&file).unwrap()[0].kernels.len(), 3);
}

#[test]
fn inverted_and_out_of_range_times_are_counted_not_lost() {
    let scratch = Scratch::new("times");
    let file = scratch.path("times.sqlite");
    small_export(&file, 4);
    sql(
        &file,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 50 WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL);
         UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775807 WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL);",
    );
    let trace = &load(&file).unwrap()[0];
    assert_eq!(warning_count(trace, "kernel that ends before it starts"), 1);
    assert_eq!(warning_count(trace, "kernel with a time beyond"), 1);
    assert_eq!(trace.kernels.len(), 3);
    assert!(trace.kernels.iter().all(|k| k.end_ns >= k.start_ns && k.duration_ns() >= 0));
}

#[test]
fn a_gzip_bomb_stops_at_the_bound_with_a_clear_error() {
    let scratch = Scratch::new("bomb");
    // An SQLite header and then zeros: 129 MiB unpacked, over the 128 MiB floor.
    let mut unpacked = b"SQLite format 3\0".to_vec();
    unpacked.resize(129 << 20, 0);
    let file = scratch.path("bomb.sqlite.gz");
    std::fs::write(&file, gzip(&unpacked)).unwrap();
    let error = one_line_error(load(&file), &file);
    assert!(error.contains("unpacks to more than") && error.contains("SHARDSCOPE_MAX_UNPACKED_BYTES"), "{error}");

    // The same bound holds for gzipped JSON, which is scanned as it is unpacked.
    let mut json = b"{\"traceEvents\": [".to_vec();
    json.resize(129 << 20, b' ');
    let file = scratch.path("bomb.json.gz");
    std::fs::write(&file, gzip(&json)).unwrap();
    let error = one_line_error(load(&file), &file);
    assert!(error.contains("unpacks to more than"), "{error}");
}

#[test]
fn long_whitespace_between_events_is_read() {
    let scratch = Scratch::new("whitespace");
    let mut json = br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7}}"#.to_vec();
    json.extend(std::iter::repeat_n(b' ', 8 << 20));
    json.extend_from_slice(br#", {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 5, "args": {"device": 0, "stream": 7}}]}"#);
    let file = scratch.path("spaces.json");
    std::fs::write(&file, &json).unwrap();
    assert_eq!(load(&file).unwrap()[0].kernels.len(), 2);
}

#[test]
fn a_link_planted_in_the_temporary_folder_is_not_followed() {
    let scratch = Scratch::new("symlink");
    let file = scratch.path("export.sqlite");
    small_export(&file, 2);
    let gz = scratch.path("export.sqlite.gz");
    std::fs::write(&gz, gzip(&std::fs::read(&file).unwrap())).unwrap();
    // Where earlier versions unpacked to: a fixed name made of the process id and a counter.
    let victim = scratch.path("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let planted: Vec<PathBuf> =
        (0..4).map(|n| std::env::temp_dir().join(format!("shardscope-{}-{n}.sqlite", std::process::id()))).collect();
    for link in &planted {
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(&victim, link).unwrap();
    }
    let loaded = load(&gz);
    for link in &planted {
        let _ = std::fs::remove_file(link);
    }
    assert_eq!(loaded.unwrap()[0].kernels.len(), 2);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn folder_members_that_are_skipped_are_reported() {
    let scratch = Scratch::new("folder");
    let folder = scratch.path("ranks");
    std::fs::create_dir(&folder).unwrap();
    small_export(&folder.join("rank0.sqlite"), 2);
    std::fs::write(folder.join("notes.txt"), b"not a trace").unwrap();
    let fifo = folder.join("rank1.sqlite");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // Opening the pipe would block for ever: it must be skipped, and said so.
    let traces = load(&folder).unwrap();
    assert_eq!(traces.len(), 1);
    assert_eq!(warning_count(&traces[0], "(not a trace) in"), 1);
    assert_eq!(warning_count(&traces[0], "(not a regular file) in"), 1);
    let names: Vec<&str> = traces[0].warnings.iter().map(|w| w.what.as_str()).collect();
    assert!(names.iter().any(|w| w.ends_with(": notes.txt")), "{names:?}");
    assert!(names.iter().any(|w| w.ends_with(": rank1.sqlite")), "{names:?}");

    // Only unusable members: an error, not an empty result.
    std::fs::remove_file(folder.join("rank0.sqlite")).unwrap();
    let error = one_line_error(load(&folder), &folder);
    assert!(error.contains("no SQLite or JSON trace"), "{error}");
}

#[test]
fn many_stray_folder_members_give_one_warning_per_cause() {
    let scratch = Scratch::new("strays");
    let folder = scratch.path("ranks");
    std::fs::create_dir(&folder).unwrap();
    small_export(&folder.join("rank0.sqlite"), 2);
    let strays = 20_000;
    for i in 0..strays {
        std::fs::write(folder.join(format!("note{i:05}.txt")), b"x").unwrap();
    }
    let traces = load(&folder).unwrap();
    let skipped: Vec<_> = traces[0].warnings.iter().filter(|w| w.what.contains("folder member skipped")).collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].count, strays);
    assert!(skipped[0].what.ends_with(": note00000.txt, note00001.txt, note00002.txt, …"), "{}", skipped[0].what);
}

#[test]
fn a_pipe_is_read_once() {
    let scratch = Scratch::new("pipe");
    let file = scratch.path("export.sqlite");
    small_export(&file, 2);
    let fifo = scratch.path("pipe");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let bytes = gzip(&std::fs::read(&file).unwrap());
    let writer = {
        let fifo = fifo.clone();
        std::thread::Builder::new().name("pipe-writer".into()).spawn(move || std::fs::write(fifo, bytes)).unwrap()
    };
    let traces = load(&fifo).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(traces[0].kernels.len(), 2);
    assert_eq!(traces[0].source.path, fifo.display().to_string());
}

/// Bytes of a small valid export and a small valid Kineto file, to mutate.
fn seeds() -> &'static (Vec<u8>, Vec<u8>) {
    static SEEDS: std::sync::OnceLock<(Vec<u8>, Vec<u8>)> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let scratch = Scratch::new("seeds");
        let file = scratch.path("seed.sqlite");
        small_export(&file, 5);
        let json = br#"{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 5, "dur": 2, "args": {"correlation": 9}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 9}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 20, "dur": 5, "args": {"device": 0, "stream": 7, "bytes": 64}},
            {"ph": "X", "cat": "user_annotation", "name": "decode", "pid": 1, "tid": 2, "ts": 1, "dur": 30}
        ]}"#
        .to_vec();
        (std::fs::read(&file).unwrap(), json)
    })
}

/// Applies byte edits (position as a share of the length, new byte) to `bytes`.
fn mutate(bytes: &[u8], edits: &[(f64, u8)], cut: Option<f64>) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(at, byte) in edits {
        let index = ((at * out.len() as f64) as usize).min(out.len() - 1);
        out[index] = byte;
    }
    if let Some(cut) = cut {
        out.truncate((cut * out.len() as f64) as usize);
    }
    out
}

/// Reads `bytes` as a file: any result is fine except a panic; an error names the file.
fn read_any(bytes: &[u8], name: &str) -> Result<(), TestCaseError> {
    let scratch = Scratch::new(&format!("prop-{name}-{:?}", std::thread::current().id()).replace(['(', ')'], ""));
    let file = scratch.path(name);
    std::fs::write(&file, bytes).unwrap();
    match load(&file) {
        Ok(traces) => {
            for trace in &traces {
                for kernel in &trace.kernels {
                    prop_assert!(kernel.end_ns >= kernel.start_ns);
                }
            }
        }
        Err(error) => {
            let text = error.to_string();
            prop_assert!(!text.contains('\n'));
            prop_assert!(text.starts_with(&file.display().to_string()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damaged_sqlite_reads_or_fails_cleanly(
        edits in prop::collection::vec((0.0f64..1.0, any::<u8>()), 1..8),
        cut in prop::option::weighted(0.2, 0.0f64..1.0),
    ) {
        read_any(&mutate(&seeds().0, &edits, cut), "damaged.sqlite")?;
    }

    #[test]
    fn damaged_json_reads_or_fails_cleanly(
        edits in prop::collection::vec((0.0f64..1.0, prop::sample::select(b"{}[]\",:0-9eE.+ \\xa".to_vec())), 1..6),
        cut in prop::option::weighted(0.2, 0.0f64..1.0),
        gzipped in any::<bool>(),
    ) {
        let bytes = mutate(&seeds().1, &edits, cut);
        let bytes = if gzipped { gzip(&bytes) } else { bytes };
        read_any(&bytes, "damaged.json")?;
    }

    #[test]
    fn damaged_gzip_reads_or_fails_cleanly(
        edits in prop::collection::vec((0.0f64..1.0, any::<u8>()), 1..4),
        cut in prop::option::weighted(0.3, 0.0f64..1.0),
        sqlite in any::<bool>(),
    ) {
        let seed = if sqlite { &seeds().0 } else { &seeds().1 };
        read_any(&mutate(&gzip(seed), &edits, cut), "damaged.gz")?;
    }

    #[test]
    fn semantically_wild_kernel_rows_read_or_fail_cleanly(
        rows in prop::collection::vec((any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()), 1..6),
    ) {
        let scratch = Scratch::new(&format!("rows-{:?}", std::thread::current().id()).replace(['(', ')'], ""));
        let file = scratch.path("rows.sqlite");
        small_export(&file, 1);
        let conn = rusqlite::Connection::open(&file).unwrap();
        for (start, end, device, name, rowid) in rows {
            let _ = conn.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (rowid, start, end, deviceId, demangledName, shortName, globalPid) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)",
                rusqlite::params![rowid, start, end, device, name, 7i64 << 24],
            );
        }
        drop(conn);
        let bytes = std::fs::read(&file).unwrap();
        read_any(&bytes, "rows.sqlite")?;
    }
}
