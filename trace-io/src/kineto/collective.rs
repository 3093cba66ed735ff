//! NCCL collective metadata from Kineto events.
//!
//! Kineto records what a collective did in one of three places, depending on the PyTorch
//! version: the NCCL kernel's own `args` (`Collective name`, `In msg nelems`, `dtype`, …, in
//! recent versions), the `record_param_comms` CPU op around the launch (same keys, older
//! versions), or only the `nccl:<op>` annotation around the launch, whose `Input Dims` and
//! `Input type` give the tensor shapes. [`CommInfo`] is what any of these says.

use shardscope_model::CollectiveOp;

use super::raw::RawArgs;

/// What one source says about a collective; every field may be missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CommInfo {
    /// The operation.
    pub op: CollectiveOp,
    /// Input elements per rank.
    pub in_elems: Option<u64>,
    /// Output elements per rank.
    pub out_elems: Option<u64>,
    /// Element type as written (`Float`, `float`, `BFloat16`).
    pub dtype: Option<String>,
    /// Input bytes per rank.
    pub bytes: Option<u64>,
    /// Process group name.
    pub group_name: Option<String>,
    /// Ranks in the group.
    pub group_size: Option<u32>,
    /// Global ranks of the group members.
    pub group_ranks: Vec<u32>,
}

impl CommInfo {
    /// True when the source told more than the operation's name.
    pub fn has_sizes(&self) -> bool {
        self.in_elems.is_some() || self.bytes.is_some()
    }
}

/// Reads the NCCL keys of a kernel's or a `record_param_comms` op's `args`; `None` without
/// `Collective name`.
pub fn from_args(args: &RawArgs) -> Option<CommInfo> {
    let name = args.collective_name.as_str()?;
    let in_elems = non_negative(args.in_msg_nelems.get());
    let out_elems = non_negative(args.out_msg_nelems.get());
    let dtype = args.dtype.as_str().filter(|d| !d.is_empty()).map(str::to_owned);
    let bytes = match (in_elems, dtype.as_deref().and_then(dtype_bytes)) {
        (Some(elems), Some(size)) => elems.checked_mul(size),
        _ => None,
    };
    Some(CommInfo {
        op: CollectiveOp::parse(name),
        in_elems,
        out_elems,
        dtype,
        bytes,
        group_name: args.process_group_name.as_str().map(str::to_owned),
        group_size: args.group_size.get().and_then(|v| u32::try_from(v).ok()),
        group_ranks: args.process_group_ranks.map(parse_ranks).unwrap_or_default(),
    })
}

/// Reads a `nccl:<op>` annotation (`nccl:all_reduce`, `nccl:_all_gather_base`); `None` for
/// other names. Sizes come from `Input Dims` × `Input type` when the annotation has them.
pub fn from_annotation(name: &str, args: &RawArgs) -> Option<CommInfo> {
    let op_text = strip_prefix_ignore_case(name, "nccl:")?;
    let mut info = CommInfo { op: CollectiveOp::parse(op_text), ..CommInfo::default() };
    if let Some(dims) = args.input_dims {
        let sizes = tensor_sizes(dims, args.input_type);
        info.in_elems = sizes.elems;
        info.bytes = sizes.bytes;
        info.dtype = sizes.dtype;
    }
    Some(info)
}

fn strip_prefix_ignore_case<'t>(text: &'t str, prefix: &str) -> Option<&'t str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &text[prefix.len()..])
}

fn non_negative(value: Option<i64>) -> Option<u64> {
    value.and_then(|v| u64::try_from(v).ok())
}

/// Size in bytes of one element of a PyTorch dtype, as written by `record_param_comms`
/// (`Float`, `BFloat16`, `Long`) or by `Input type` (`float`, `c10::Half`, `long int`).
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    let lower = dtype.to_ascii_lowercase();
    let bare = lower.strip_prefix("c10::").unwrap_or(&lower);
    let normalized: String = bare.chars().filter(|c| !matches!(c, ' ' | '_')).collect();
    let size = match normalized.as_str() {
        "double" | "float64" | "long" | "longint" | "int64" | "int64t" | "uint64" | "complexfloat" | "complex64" => 8,
        "float" | "float32" | "int" | "int32" | "int32t" | "uint32" | "complexhalf" | "complex32" => 4,
        "half" | "float16" | "bfloat16" | "short" | "int16" | "uint16" => 2,
        "char" | "signedchar" | "int8" | "byte" | "uint8" | "unsignedchar" | "bool" => 1,
        "complexdouble" | "complex128" => 16,
        other if other.starts_with("float8") => 1,
        _ => return None,
    };
    Some(size)
}

/// Global ranks from `Process Group Ranks`, written as an array or as a string `"[0, 1]"`.
pub fn parse_ranks(raw: &str) -> Vec<u32> {
    raw.split(|c: char| !c.is_ascii_digit())
        .filter(|digits| !digits.is_empty())
        .filter_map(|digits| digits.parse().ok())
        .collect()
}

/// Element and byte totals of an op's tensor inputs.
#[derive(Debug, Default, PartialEq, Eq)]
struct TensorSizes {
    elems: Option<u64>,
    bytes: Option<u64>,
    dtype: Option<String>,
}

/// Sums the shapes in `Input Dims` over the inputs whose `Input type` is a tensor element type
/// (not `Scalar`, `TensorList` or empty). Bytes are known only when every such type is.
fn tensor_sizes(dims: &str, types: Option<&str>) -> TensorSizes {
    let Ok(shapes) = serde_json::from_str::<Vec<serde_json::Value>>(dims) else {
        return TensorSizes::default();
    };
    let types: Vec<serde_json::Value> = types.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default();
    let mut elems_total: Option<u64> = None;
    let mut bytes_total: Option<u64> = Some(0);
    let mut first_dtype = None;
    for (index, shape) in shapes.iter().enumerate() {
        let dtype = types.get(index).and_then(|t| t.as_str()).unwrap_or("");
        if dtype.is_empty() || dtype == "Scalar" || dtype.contains("List") {
            continue;
        }
        let Some(dimensions) = shape.as_array() else { continue };
        let Some(elems) = dimensions.iter().try_fold(1u64, |product, d| product.checked_mul(d.as_u64()?)) else {
            continue;
        };
        elems_total = Some(elems_total.unwrap_or(0) + elems);
        bytes_total = match (bytes_total, dtype_bytes(dtype)) {
            (Some(total), Some(size)) => elems.checked_mul(size).and_then(|b| total.checked_add(b)),
            _ => None,
        };
        first_dtype.get_or_insert_with(|| dtype.to_owned());
    }
    TensorSizes { elems: elems_total, bytes: elems_total.and(bytes_total), dtype: first_dtype }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_sizes_cover_both_spellings() {
        assert_eq!(dtype_bytes("Float"), Some(4));
        assert_eq!(dtype_bytes("float"), Some(4));
        assert_eq!(dtype_bytes("BFloat16"), Some(2));
        assert_eq!(dtype_bytes("c10::Half"), Some(2));
        assert_eq!(dtype_bytes("long int"), Some(8));
        assert_eq!(dtype_bytes("Float8_e4m3fn"), Some(1));
        assert_eq!(dtype_bytes("Scalar"), None);
    }

    #[test]
    fn ranks_parse_from_string_or_array() {
        assert_eq!(parse_ranks("\"[0, 1, 2]\""), vec![0, 1, 2]);
        assert_eq!(parse_ranks("[4,5]"), vec![4, 5]);
        assert_eq!(parse_ranks("\"[]\""), Vec::<u32>::new());
    }

    #[test]
    fn annotation_sizes_skip_scalars_and_lists() {
        let sizes =
            tensor_sizes("[[394241], [], [2, 3], [[1, 2]]]", Some(r#"["float", "Scalar", "c10::Half", "TensorList"]"#));
        assert_eq!(sizes.elems, Some(394241 + 6));
        assert_eq!(sizes.bytes, Some(394241 * 4 + 6 * 2));
        assert_eq!(sizes.dtype.as_deref(), Some("float"));
        let unknown = tensor_sizes("[[], []]", Some(r#"["TensorList", "Scalar"]"#));
        assert_eq!(unknown, TensorSizes::default());
    }

    #[test]
    fn annotations_name_their_op() {
        assert_eq!(from_annotation("nccl:all_to_all", &RawArgs::default()).unwrap().op, CollectiveOp::AllToAll);
        assert_eq!(from_annotation("nccl:_all_gather_base", &RawArgs::default()).unwrap().op, CollectiveOp::AllGather);
        assert_eq!(from_annotation("gloo:all_reduce", &RawArgs::default()), None);
    }
}
