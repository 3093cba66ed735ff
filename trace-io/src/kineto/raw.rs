//! The parts of a Kineto trace the reader uses, borrowed from the decompressed text wherever
//! possible and lenient about types, so that one odd field makes one event unusable (counted
//! later) instead of failing the whole file.
//!
//! Events and their `args` are filled by the scanner (`super::scan`); the small top-level
//! objects (`deviceProperties`, `distributedInfo`) by serde, which is what the `Deserialize`
//! impls of [`LooseInt`] and [`LooseStr`] are for.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One element of `traceEvents`, as the scanner ([`super::scan`]) reads it.
#[derive(Debug, Default)]
pub struct RawEvent<'a> {
    /// Phase: `X` complete event, `M` metadata, `s`/`f` flow start/finish, `i` instant.
    pub ph: LooseStr<'a>,
    /// Category (`kernel`, `cuda_runtime`, …).
    pub cat: LooseStr<'a>,
    /// Event name.
    pub name: LooseStr<'a>,
    /// Process id for CPU events, device ordinal for GPU events; a string for Kineto's own spans.
    pub pid: LooseInt,
    /// Thread id for CPU events, stream for GPU events.
    pub tid: LooseInt,
    /// Start, µs, as written (see [`super::time`]).
    pub ts: Option<&'a str>,
    /// Duration, µs, as written.
    pub dur: Option<&'a str>,
    /// Flow id (`ac2g` flows carry the correlation id here).
    pub id: LooseInt,
    /// `args` as written: only the events the model keeps pay for reading it (see
    /// [`RawEvent::parse_args`]).
    pub args: Option<&'a str>,
}

impl<'a> RawEvent<'a> {
    /// Reads the `args` keys the reader uses; `None` when `args` is absent or not an object.
    pub fn parse_args(&self) -> Option<RawArgs<'a>> {
        super::scan::parse_args(self.args?)
    }
}

/// The `args` keys the reader uses, across event categories (read by
/// [`super::scan::parse_args`]).
#[derive(Debug, Default)]
pub struct RawArgs<'a> {
    /// GPU ordinal of GPU events.
    pub device: LooseInt,
    /// CUDA stream of GPU events.
    pub stream: LooseInt,
    /// CUPTI correlation id (launch ↔ GPU activity).
    pub correlation: LooseInt,
    /// Kernel grid dimensions.
    pub grid: Dim3,
    /// Kernel block dimensions.
    pub block: Dim3,
    /// Bytes moved by a memcpy or set by a memset.
    pub bytes: LooseInt,
    /// AMD memcpy direction (`HtoD`, …).
    pub kind: LooseStr<'a>,
    /// Metadata events: the process or thread name.
    pub name: LooseStr<'a>,
    /// `Collective name`: NCCL metadata (on NCCL kernels in recent Kineto, on
    /// `record_param_comms` before).
    pub collective_name: LooseStr<'a>,
    /// `In msg nelems`: input element count of a collective.
    pub in_msg_nelems: LooseInt,
    /// `Out msg nelems`: output element count of a collective.
    pub out_msg_nelems: LooseInt,
    /// `Group size`: ranks in the collective's process group.
    pub group_size: LooseInt,
    /// Element type of a collective (`Float`, `BFloat16`, …).
    pub dtype: LooseStr<'a>,
    /// `Process Group Name`.
    pub process_group_name: LooseStr<'a>,
    /// `Process Group Ranks`, as written: a JSON array, or a string holding one.
    pub process_group_ranks: Option<&'a str>,
    /// `Input Dims`, as written: shapes of an op's inputs, `[[d0, d1], [], …]`.
    pub input_dims: Option<&'a str>,
    /// `Input type`, as written: types of an op's inputs, `["float", "Scalar", …]`.
    pub input_type: Option<&'a str>,
    /// `[memory]` events (`profile_memory=True`): their own keys, see [`MemoryArgs`].
    pub memory: MemoryArgs,
}

/// The keys of a `[memory]` instant event's `args`.
#[derive(Debug, Default)]
pub struct MemoryArgs {
    /// `Device Type`: 0 CPU, 1 CUDA (c10's `DeviceType`).
    pub device_type: LooseInt,
    /// `Device Id`: the GPU ordinal (-1 for host memory).
    pub device_id: LooseInt,
    /// `Addr`: the tensor's address.
    pub addr: LooseInt,
    /// `Bytes`: positive for an allocation, negative for a free.
    pub bytes: LooseInt,
    /// `Total Allocated`: bytes in tensors after the event.
    pub total_allocated: LooseInt,
    /// `Total Reserved`: bytes the allocator holds after the event.
    pub total_reserved: LooseInt,
}

/// An integer that may be written as a number, a float, or a string (`"7"`, `"stream 7"`).
/// Anything else (objects, arrays, `null`, text without digits), or a missing key, reads as
/// "absent".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LooseInt(pub Option<i64>);

impl LooseInt {
    /// The value, if any.
    pub fn get(self) -> Option<i64> {
        self.0
    }
}

/// Reads the last run of digits in a string: `"7"` → 7, `"stream 7"` → 7, `"Spans"` → none.
pub fn trailing_integer(text: &str) -> Option<i64> {
    let trimmed = text.trim();
    if let Ok(value) = trimmed.parse::<i64>() {
        return Some(value);
    }
    if let Some(hex) = trimmed.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    let end = trimmed.rfind(|c: char| c.is_ascii_digit())? + 1;
    let start = trimmed[..end].rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    trimmed[start..end].parse().ok()
}

impl<'de> Deserialize<'de> for LooseInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LooseIntVisitor;
        impl<'de> Visitor<'de> for LooseIntVisitor {
            type Value = LooseInt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LooseInt, E> {
                Ok(LooseInt(Some(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LooseInt, E> {
                Ok(LooseInt(i64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<LooseInt, E> {
                let fits = v.is_finite() && v.abs() < 9.0e18;
                Ok(LooseInt(fits.then(|| v.round() as i64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LooseInt, E> {
                Ok(LooseInt(trailing_integer(v)))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<LooseInt, E> {
                Ok(LooseInt(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<LooseInt, E> {
                Ok(LooseInt(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LooseInt, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(LooseInt(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LooseInt, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(LooseInt(None))
            }
        }
        deserializer.deserialize_any(LooseIntVisitor)
    }
}

/// A string, borrowed from the file's text when it has no escapes. Numbers are kept as their
/// decimal text; other JSON values read as "absent".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LooseStr<'a>(pub Option<Cow<'a, str>>);

impl<'a> LooseStr<'a> {
    /// The text, if the value was a string (or a number).
    pub fn as_str(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for LooseStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LooseStrVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for LooseStrVisitor<'a> {
            type Value = LooseStr<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<LooseStr<'a>, E> {
                Ok(LooseStr(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LooseStr<'a>, E> {
                Ok(LooseStr(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LooseStr<'a>, E> {
                Ok(LooseStr(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LooseStr<'a>, E> {
                Ok(LooseStr(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<LooseStr<'a>, E> {
                Ok(LooseStr(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<LooseStr<'a>, E> {
                Ok(LooseStr(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<LooseStr<'a>, E> {
                Ok(LooseStr(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LooseStr<'a>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(LooseStr(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LooseStr<'a>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(LooseStr(None))
            }
        }
        deserializer.deserialize_any(LooseStrVisitor(std::marker::PhantomData))
    }
}

/// A `[x, y, z]` launch dimension; shorter arrays are padded with 1, other values read as absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dim3(pub Option<[u32; 3]>);

impl Dim3 {
    /// Reads `[x, y, z]` (or fewer numbers); anything else is absent.
    pub fn parse(text: &str) -> Dim3 {
        let Some(inner) = text.trim().strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
            return Dim3(None);
        };
        let mut dims = [1u32; 3];
        if inner.trim().is_empty() {
            return Dim3(Some(dims));
        }
        for (index, part) in inner.split(',').enumerate() {
            let value = part.trim().parse::<u32>().ok().or_else(|| {
                let float = part.trim().parse::<f64>().ok()?;
                (float >= 0.0 && float <= f64::from(u32::MAX) && float.fract() == 0.0).then_some(float as u32)
            });
            match (value, dims.get_mut(index)) {
                (Some(v), Some(slot)) => *slot = v,
                _ => return Dim3(None),
            }
        }
        Dim3(Some(dims))
    }
}

/// One entry of the top-level `deviceProperties`.
#[derive(Deserialize, Default)]
pub struct RawDeviceProperties<'a> {
    /// Device ordinal.
    #[serde(default)]
    pub id: LooseInt,
    /// Marketing name.
    #[serde(borrow, default)]
    pub name: LooseStr<'a>,
    /// Global memory, bytes.
    #[serde(default, rename = "totalGlobalMem")]
    pub total_global_mem: LooseInt,
    /// Streaming multiprocessors (compute units on AMD).
    #[serde(default, rename = "numSms")]
    pub num_sms: LooseInt,
}

/// The top-level `distributedInfo`.
#[derive(Deserialize, Default)]
pub struct RawDistributedInfo<'a> {
    /// This file's rank.
    #[serde(default)]
    pub rank: LooseInt,
    /// Ranks in the job.
    #[serde(default)]
    pub world_size: LooseInt,
    /// Process groups known to this rank.
    #[serde(borrow, default)]
    pub pg_config: Option<Vec<RawProcessGroup<'a>>>,
}

/// One entry of `distributedInfo.pg_config`.
#[derive(Deserialize, Default)]
pub struct RawProcessGroup<'a> {
    /// The name kernels and `record_param_comms` refer to as `Process Group Name`.
    #[serde(borrow, default)]
    pub pg_name: LooseStr<'a>,
    /// Global ranks of the members.
    #[serde(default)]
    pub ranks: Option<Vec<LooseInt>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_values_tolerate_odd_types() {
        let info: RawDistributedInfo =
            serde_json::from_str(r#"{"rank": "3", "world_size": {"a": [1]}, "pg_config": [{"pg_name": 5}]}"#).unwrap();
        assert_eq!(info.rank.get(), Some(3));
        assert_eq!(info.world_size.get(), None);
        assert_eq!(info.pg_config.unwrap()[0].pg_name.as_str(), Some("5"));
        let device: RawDeviceProperties = serde_json::from_str(r#"{"id": 1.0, "name": null, "numSms": true}"#).unwrap();
        assert_eq!((device.id.get(), device.name.as_str(), device.num_sms.get()), (Some(1), None, None));
    }

    #[test]
    fn launch_dimensions_parse() {
        assert_eq!(Dim3::parse("[8, 1, 1]").0, Some([8, 1, 1]));
        assert_eq!(Dim3::parse("[2,3]").0, Some([2, 3, 1]));
        assert_eq!(Dim3::parse("[]").0, Some([1, 1, 1]));
        assert_eq!(Dim3::parse("[1, 2, 3, 4]").0, None);
        assert_eq!(Dim3::parse("\"x\"").0, None);
        assert_eq!(Dim3::parse("[-1, 1, 1]").0, None);
    }

    #[test]
    fn integers_hide_in_strings() {
        assert_eq!(trailing_integer("stream 7"), Some(7));
        assert_eq!(trailing_integer("0x1f"), Some(31));
        assert_eq!(trailing_integer("Spans"), None);
    }
}
