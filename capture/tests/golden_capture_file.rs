//! The whole capture file made from real spools, table by table, against a dump kept in
//! `tests/data/golden/tp2_capture.txt`.
//!
//! The spools are those of `golden_spool.rs` (the injection library's, from a two-rank run on
//! H200s) and of `nccl-profiler/tests/data/tp2-h200` (the NCCL plugin's, from another run of the
//! same workload). The dump was taken with the launcher as it was before its spool readers, NCCL
//! tables and file writer were reorganised, so this test holds the file format to what those spools
//! produced then: every row of every table, in order, with string ids replaced by their text (which id a
//! string gets depends on the order the writer meets it; `StringIds` is compared as the set of its texts).
//! Only `SHARDSCOPE_GPU_LINKS` (NVML's view of the
//! machine running the test) and the link columns `kernelCorrelationId` and `kernelStart`, which files of that time
//! did not have, are left out.
//!
//! Renewed twice since, for intended changes: `--trace all` no longer includes `sync` (the `trace` row of
//! `SHARDSCOPE_CAPTURE_META`); then the `captureMode` row, the kernel-channel table `SHARDSCOPE_NCCL_CHANNELS`,
//! and the warning that counts the NCCL operations of processes without a CUDA spool (the NCCL spools here come
//! from another run, so none of their pids recorded one; they were passed over without a word before). Nothing
//! else differed. Then the copies' memory kinds: the 292 `CUPTI_ACTIVITY_KIND_MEMCPY` rows have `srcKind` 0
//! (pageable) and `dstKind` 2 (device) where they had NULL; nothing else differed.
//!
//! To renew the dump after an intended change of the file: `SHARDSCOPE_BLESS=1 cargo test -p
//! shardscope-capture --test golden_capture_file`, and read the diff.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use rusqlite::types::ValueRef;

fn unpack_spools(dir: &Path) {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(manifest.join("tests/data/tp2_spool")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
        std::fs::write(dir.join(path.file_stem().unwrap()), bytes).unwrap();
    }
    for name in ["nccl-624.bin", "nccl-625.bin"] {
        std::fs::copy(manifest.join("nccl-profiler/tests/data/tp2-h200").join(name), dir.join(name)).unwrap();
    }
}

/// Columns added to the file format after the dump was taken.
const NEWER_COLUMNS: &[&str] = &["kernelCorrelationId", "kernelStart"];

/// JSON text with its objects' keys sorted; other text as it is. The order serde_json writes keys
/// in depends on a feature another crate of the workspace may switch on in the same build.
fn canonical_json(text: &str) -> String {
    fn sorted(value: serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let entries: BTreeMap<String, serde_json::Value> =
                    map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
                let mut out = serde_json::Map::new();
                out.extend(entries);
                serde_json::Value::Object(out)
            }
            serde_json::Value::Array(items) => serde_json::Value::Array(items.into_iter().map(sorted).collect()),
            other => other,
        }
    }
    if !text.starts_with(['{', '[']) {
        return text.to_string();
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => sorted(value).to_string(),
        Err(_) => text.to_string(),
    }
}

/// Columns that hold a `StringIds.id`.
const STRING_ID_COLUMNS: &[&str] = &["demangledName", "shortName", "mangledName", "nameId", "textId", "jsonTextId"];

/// Every table but the machine-dependent one, rows in insertion order, one line per row.
fn dump(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    let strings: HashMap<i64, String> = conn
        .prepare("SELECT id, value FROM StringIds")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let tables = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .filter(|name: &String| name != "SHARDSCOPE_GPU_LINKS" && name != "StringIds")
        .collect::<Vec<String>>();
    let mut out = String::new();
    let mut texts: Vec<&String> = strings.values().collect();
    texts.sort();
    out += "== StringIds (value)\n";
    for text in texts {
        out += &format!("{text:?}\n");
    }
    for table in tables {
        let mut statement = conn.prepare(&format!("SELECT * FROM {table} ORDER BY rowid")).unwrap();
        let names: Vec<String> = statement.column_names().map(str::to_string).collect();
        let kept: Vec<usize> = (0..names.len()).filter(|&i| !NEWER_COLUMNS.contains(&names[i].as_str())).collect();
        out += &format!("== {table} ({})\n", kept.iter().map(|&i| names[i].as_str()).collect::<Vec<_>>().join(", "));
        let mut rows = statement.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let cells: Vec<String> = kept
                .iter()
                .map(|&i| match row.get_ref(i).unwrap() {
                    ValueRef::Integer(id) if STRING_ID_COLUMNS.contains(&names[i].as_str()) => {
                        format!("{:?}", strings.get(&id).expect("a string id"))
                    }
                    ValueRef::Null => "NULL".to_string(),
                    ValueRef::Integer(v) => v.to_string(),
                    ValueRef::Real(v) => format!("{v:?}"),
                    ValueRef::Text(t) => format!("{:?}", canonical_json(&String::from_utf8_lossy(t))),
                    ValueRef::Blob(b) => format!("x'{}'", b.iter().map(|b| format!("{b:02x}")).collect::<String>()),
                })
                .collect();
            out += &cells.join("|");
            out.push('\n');
        }
    }
    out
}

#[test]
fn spools_from_before_the_reorganisation_make_the_same_capture_file() {
    let dir = std::env::temp_dir().join(format!("shardscope-golden-file-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    unpack_spools(&dir.join("spool"));
    let output = dir.join("tp2.sqlite");
    let status = Command::new(env!("CARGO_BIN_EXE_capture"))
        .arg("--merge")
        .arg(dir.join("spool"))
        .arg("-o")
        .arg(&output)
        .status()
        .unwrap();
    assert!(status.success());
    let actual = dump(&output);

    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden/tp2_capture.txt.gz");
    if std::env::var_os("SHARDSCOPE_BLESS").is_some() {
        let mut encoder =
            flate2::write::GzEncoder::new(std::fs::File::create(&golden).unwrap(), flate2::Compression::best());
        std::io::Write::write_all(&mut encoder, actual.as_bytes()).unwrap();
        encoder.finish().unwrap();
    }
    let mut expected = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&golden).unwrap()).read_to_string(&mut expected).unwrap();
    // Line by line, so a failure names the first row that differs instead of printing megabytes.
    for (index, (want, got)) in expected.lines().zip(actual.lines()).enumerate() {
        assert_eq!(got, want, "line {} of the dump", index + 1);
    }
    assert_eq!(actual.lines().count(), expected.lines().count(), "rows in the dump");
    std::fs::remove_dir_all(&dir).unwrap();
}
