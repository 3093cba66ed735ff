//! Reader for PyTorch-profiler (Kineto) Chrome-trace JSON, plain or gzipped.
//!
//! The whole file is decompressed into one buffer and parsed in a single streaming pass: the
//! top-level object is visited key by key and each element of `traceEvents` is deserialized into
//! a small borrowed struct ([`raw::RawEvent`]) and handed to the [`builder::Builder`] at once, so
//! no JSON tree of the file is ever built. What the model keeps:
//!
//! | Kineto | model |
//! | --- | --- |
//! | `kernel` (`Kernel` in old files) | [`Kernel`](shardscope_model::Kernel); NCCL ones get a [`Collective`](shardscope_model::Collective) |
//! | `gpu_memcpy`, `gpu_memset` | [`MemOp`](shardscope_model::MemOp) |
//! | `cuda_runtime`, `cuda_driver` | [`ApiCall`](shardscope_model::ApiCall) |
//! | `user_annotation`, `ProfilerStep#N` ops | CPU-annotation [`Range`](shardscope_model::Range) |
//! | `gpu_user_annotation` | GPU-annotation range on its device and stream |
//! | `ph: M` `process_name` / `thread_name` | process name / [`ThreadName`](shardscope_model::ThreadName) |
//! | `deviceProperties`, `distributedInfo` | [`Device`](shardscope_model::Device)s, process rank |
//!
//! Other categories (`cpu_op`, `python_function`, …) are skipped on purpose.

mod builder;
mod collective;
mod raw;
mod time;

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use shardscope_model::Trace;

pub use builder::short_kernel_name;
pub use time::micros_text_to_ns;

use crate::Error;
use builder::Builder;
use raw::{LooseInt, LooseStr, RawDeviceProperties, RawDistributedInfo, RawEvent};

/// Reads a Kineto JSON file (plain or gzipped, told apart by content) into a trace.
pub fn read(path: &Path) -> Result<Trace, Error> {
    let text = read_text(path)?;
    parse(path, &text)
}

/// The file's JSON text: gunzipped when it starts with the gzip magic bytes.
fn read_text(path: &Path) -> Result<Vec<u8>, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if bytes.is_empty() {
        return Err(Error::format(path, "file is empty"));
    }
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut text = Vec::with_capacity(gzip_size_hint(&bytes));
    flate2::read::MultiGzDecoder::new(&bytes[..])
        .read_to_end(&mut text)
        .map_err(|e| Error::format(path, format!("corrupt or truncated gzip data: {e}")))?;
    Ok(text)
}

/// The uncompressed size a gzip member records in its last four bytes (modulo 4 GiB), used only
/// to size the buffer; clamped so that a damaged trailer cannot ask for absurd memory.
fn gzip_size_hint(gzip: &[u8]) -> usize {
    let Some(trailer) = gzip.len().checked_sub(4).and_then(|at| gzip.get(at..)) else { return 0 };
    let recorded = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) as usize;
    recorded.min(gzip.len().saturating_mul(64))
}

/// Parses the JSON text of `path` into a trace.
fn parse(path: &Path, text: &[u8]) -> Result<Trace, Error> {
    let text = text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(text);
    // One validation of the whole buffer is cheaper than serde_json checking every string.
    let text = std::str::from_utf8(text)
        .map_err(|e| Error::format(path, format!("not UTF-8 text (byte {})", e.valid_up_to())))?;
    let mut builder = Builder::new(&path.display().to_string());
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let saw_events = TraceFileSeed { builder: &mut builder }
        .deserialize(&mut deserializer)
        .and_then(|saw| deserializer.end().map(|()| saw))
        .map_err(|e| Error::format(path, format!("not valid Kineto JSON: {e}")))?;
    if !saw_events {
        return Err(Error::format(path, "not a Chrome trace: the JSON object has no 'traceEvents'"));
    }
    Ok(builder.finish())
}

/// Visits the top-level object; yields whether it held `traceEvents`.
struct TraceFileSeed<'b> {
    builder: &'b mut Builder,
}

impl<'de> DeserializeSeed<'de> for TraceFileSeed<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TraceFileSeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut saw_events = false;
        while let Some(key) = map.next_key::<LooseStr<'de>>()? {
            match key.as_str().unwrap_or("") {
                "traceEvents" => {
                    map.next_value_seed(EventsSeed { builder: &mut *self.builder })?;
                    saw_events = true;
                }
                "schemaVersion" => {
                    let version: &RawValue = map.next_value()?;
                    self.builder.set_schema_version(version.get());
                }
                "baseTimeNanoseconds" => {
                    let base: LooseInt = map.next_value()?;
                    self.builder.set_base_time_ns(base.get());
                }
                "host_name" | "hostname" => {
                    let host: LooseStr = map.next_value()?;
                    self.builder.set_host_name(host.as_str().unwrap_or(""));
                }
                // Small objects, taken raw first so that an odd shape costs a warning, not the file.
                "deviceProperties" => {
                    let raw: &RawValue = map.next_value()?;
                    match serde_json::from_str::<Vec<RawDeviceProperties>>(raw.get()) {
                        Ok(devices) => self.builder.set_device_properties(devices),
                        Err(_) => self.builder.warn("'deviceProperties' is not a list of objects (ignored)"),
                    }
                }
                "distributedInfo" => {
                    let raw: &RawValue = map.next_value()?;
                    match serde_json::from_str::<RawDistributedInfo>(raw.get()) {
                        Ok(info) => self.builder.set_distributed_info(info),
                        Err(_) => self.builder.warn("'distributedInfo' has an unexpected shape (ignored)"),
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(saw_events)
    }
}

/// Streams the `traceEvents` array into the builder, one event at a time.
struct EventsSeed<'b> {
    builder: &'b mut Builder,
}

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'traceEvents' as an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(EventSeed { builder: &mut *self.builder })?.is_some() {}
        Ok(())
    }
}

/// Reads one element of `traceEvents` and hands it to the builder in place (events are read
/// into a stack value and passed by reference, never moved around).
struct EventSeed<'b> {
    builder: &'b mut Builder,
}

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let event: RawEvent<'de> = de::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        self.builder.add_event(&event);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.builder.warn(NOT_AN_OBJECT);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.builder.warn(NOT_AN_OBJECT);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.builder.warn(NOT_AN_OBJECT);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.builder.warn(NOT_AN_OBJECT);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.builder.warn(NOT_AN_OBJECT);
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.builder.warn(NOT_AN_OBJECT);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.builder.warn(NOT_AN_OBJECT);
        Ok(())
    }
}

const NOT_AN_OBJECT: &str = "traceEvents element that is not an object skipped";
