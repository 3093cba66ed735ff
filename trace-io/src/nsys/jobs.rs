//! The readers' work plan: the big tables cut into shares of rowids, every job run on a small pool of threads, each
//! with its own read-only connection, the costliest first, and the outputs handed back in job order.

use shardscope_model::{ApiCall, Kernel, MemOp};

use super::strings::StringTable;
use super::{Database, Error, Extent, int, max_rows, open_read_only, scan};

/// Rows per share of a big table: large enough that per-share costs vanish, small enough that
/// a ten-million-row table keeps many threads busy.
pub(super) const ROWS_PER_JOB: i64 = 400_000;

/// Threads for the table readers, at most.
const MAX_READER_THREADS: usize = 16;

/// One unit of reading work.
pub(super) enum Job {
    Kernels(scan::RowIds),
    ApiCalls(scan::RowIds),
    MemOps,
    Ranges(scan::RowIds),
}

/// What a [`Job`] produced.
pub(super) enum Output {
    Kernels(scan::Scan<Kernel>),
    ApiCalls(scan::Scan<ApiCall>),
    MemOps(scan::Scan<MemOp>),
    Ranges(scan::RangeShare),
}

/// Kernel, API and NVTX tables in shares of about `rows_per_job` rowids (nsys writes dense rowids, so the shares
/// are even), as many shares as fill the reader threads evenly, then the copy tables whole. Only the kernel
/// and copy tables for [`Extent::GpuWork`].
pub(super) fn plan_jobs(db: &Database<'_>, rows_per_job: i64, extent: Extent) -> Vec<Job> {
    let threads = reader_threads() as u64;
    let shares = |table: &str| -> Vec<scan::RowIds> {
        let bound = |aggregate: &str| {
            db.conn
                .query_row(&format!("SELECT {aggregate}(rowid) FROM \"{table}\""), [], |row| Ok(int(row, 0)))
                .ok()
                .flatten()
        };
        match (db.has(table).then(|| bound("min")).flatten(), db.has(table).then(|| bound("max")).flatten()) {
            (Some(first), Some(last)) if last.saturating_sub(first) >= rows_per_job => {
                // Rowids are the file's to choose and may be sparse: the number of shares comes
                // from the rows the file can hold, and each share widens to cover the span.
                let span = last.abs_diff(first).saturating_add(1);
                let by_rows = max_rows(db.file_bytes).div_ceil(rows_per_job as u64).max(1);
                // A last wave with fewer shares than threads leaves threads idle while the slowest finish.
                let shares = span.div_ceil(rows_per_job as u64).next_multiple_of(threads).min(by_rows).min(span);
                let width = span.div_ceil(shares);
                (0..shares)
                    .map(|share| {
                        let start = first.saturating_add_unsigned(share * width);
                        let end = start.saturating_add_unsigned(width - 1).min(last);
                        Some((start, end))
                    })
                    .collect()
            }
            _ => vec![None],
        }
    };
    let mut jobs: Vec<Job> = shares("CUPTI_ACTIVITY_KIND_KERNEL").into_iter().map(Job::Kernels).collect();
    if extent == Extent::Whole {
        jobs.extend(shares("CUPTI_ACTIVITY_KIND_RUNTIME").into_iter().map(Job::ApiCalls));
        jobs.extend(shares("NVTX_EVENTS").into_iter().map(Job::Ranges));
    }
    jobs.push(Job::MemOps);
    jobs
}

/// Runs every job on a small pool of threads, each with its own read-only connection, and
/// returns the outputs in job order (which keeps rows in table order).
pub(super) fn run_jobs(
    db: &Database<'_>,
    jobs: &[Job],
    strings: &StringTable,
    classes: scan::ApiClasses,
    nvtx_types: &scan::NvtxTypes,
    extent: Extent,
) -> Result<Vec<Output>, Error> {
    let threads = reader_threads();
    // Longest first, so that a table read whole (the NVTX events can be millions of rows) does not start last
    // and run on alone; the outputs still come back in job order.
    let mut schedule: Vec<usize> = (0..jobs.len()).collect();
    schedule.sort_by_key(|&index| std::cmp::Reverse(estimated_cost(db, &jobs[index])));
    let next_job = std::sync::atomic::AtomicUsize::new(0);
    let (path, tables, file_bytes) = (db.path, db.tables, db.file_bytes);
    let worker = || -> Result<Vec<(usize, Output)>, Error> {
        let conn = open_read_only(path)?;
        let db = Database { path, conn: &conn, tables, file_bytes };
        let mut done = Vec::new();
        loop {
            let next = next_job.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(&index) = schedule.get(next) else { return Ok(done) };
            let job = &jobs[index];
            let output = match *job {
                Job::Kernels(rowids) => Output::Kernels(scan::kernels(&db, strings, rowids, extent)?),
                Job::ApiCalls(rowids) => Output::ApiCalls(scan::api_calls(&db, strings, classes, rowids)?),
                Job::MemOps => Output::MemOps(scan::memops(&db, strings)?),
                Job::Ranges(rowids) => Output::Ranges(scan::ranges(&db, strings, nvtx_types, rowids)?),
            };
            done.push((index, output));
        }
    };
    // The calling thread takes jobs too; a helper that cannot be started leaves its share to the others.
    let results: Vec<Result<Vec<(usize, Output)>, Error>> =
        std::thread::scope(|s| {
            let helpers: Vec<_> = (1..threads.min(jobs.len()))
                .filter_map(|i| {
                    std::thread::Builder::new().name(format!("shardscope-nsys-read-{i}")).spawn_scoped(s, worker).ok()
                })
                .collect();
            let mut results = vec![worker()];
            results.extend(helpers.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| Err(Error::format(path, "internal error: a table reader panicked")))
            }));
            results
        });
    let mut outputs = Vec::with_capacity(jobs.len());
    for result in results {
        outputs.extend(result?);
    }
    outputs.sort_by_key(|(index, _)| *index);
    Ok(outputs.into_iter().map(|(_, output)| output).collect())
}

/// Threads for the table readers: one per core, at most [`MAX_READER_THREADS`].
fn reader_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, MAX_READER_THREADS)
}

/// A whole kernel row costs its reader about twice what a host call or NVTX row does (16 columns against 7 or 8;
/// 0.8 against 0.35 µs per row on 16 busy threads, 10 M × 8 file).
const KERNEL_ROW_COST: usize = 2;

/// About how much reading a job costs, in host-call rows: its rows, a whole kernel row counting
/// [`KERNEL_ROW_COST`].
fn estimated_cost(db: &Database<'_>, job: &Job) -> usize {
    let rows = estimated_rows(db, job);
    match job {
        Job::Kernels(_) => rows.saturating_mul(KERNEL_ROW_COST),
        _ => rows,
    }
}

/// About how many rows a job reads: its share's rowid span, or the rowid span of the tables it reads whole.
fn estimated_rows(db: &Database<'_>, job: &Job) -> usize {
    match *job {
        Job::Kernels(Some((first, last))) | Job::ApiCalls(Some((first, last))) | Job::Ranges(Some((first, last))) => {
            last.abs_diff(first).saturating_add(1).try_into().unwrap_or(usize::MAX)
        }
        Job::Kernels(None) => db.row_hint("CUPTI_ACTIVITY_KIND_KERNEL", None),
        Job::ApiCalls(None) => db.row_hint("CUPTI_ACTIVITY_KIND_RUNTIME", None),
        Job::Ranges(None) => db.row_hint("NVTX_EVENTS", None),
        Job::MemOps => db
            .row_hint("CUPTI_ACTIVITY_KIND_MEMCPY", None)
            .saturating_add(db.row_hint("CUPTI_ACTIVITY_KIND_MEMSET", None)),
    }
}
