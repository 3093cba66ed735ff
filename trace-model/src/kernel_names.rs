//! What a kernel's name says, in one place for every part of shardscope: the short name nsys
//! shows, and whether the kernel is one of NCCL's.
//!
//! Capture's merge stores [`short_name`] in the `shortName` column as nsys does and the Kineto reader
//! fills [`crate::Kernel::short_name`] with it (nsys exports and Parquet datasets bring their own).
//! The Kineto reader and the NCCL join of the readers (`shardscope_io::nccl`) link NCCL operations
//! only to kernels for which [`is_nccl_kernel`] holds, and the analyzer's op-category rules are
//! tested to agree with it. Both take demangled names: capture demangles CUPTI's mangled names in
//! one batch as it merges, and the analyzer demangles the `_Z…` names that ROCm traces keep before
//! it classifies them.
//!
//! ```
//! use shardscope_model::kernel_names::{is_nccl_kernel, short_name};
//! let name = "void at::native::vectorized_elementwise_kernel<(int)8, at::native::FillFunctor<float>>(int, T2)";
//! assert_eq!(short_name(name), "vectorized_elementwise_kernel");
//! assert!(is_nccl_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
//! assert!(!is_nccl_kernel(name));
//! ```

/// The base name nsys shows as `shortName`: no return type, namespaces, template arguments or
/// parameters. `void at::native::vectorized_elementwise_kernel<(int)8, …>(int, T2, T3)` →
/// `vectorized_elementwise_kernel`. A name with nothing left after that is returned whole.
pub fn short_name(demangled: &str) -> &str {
    let mut text = demangled.trim();
    // Drop the parameter list: the last balanced `( … )` at the end.
    if text.ends_with(')')
        && let Some(open) = matching_open(text, '(', ')')
        && open > 0
    {
        text = text[..open].trim_end();
    }
    // Drop trailing template arguments.
    while text.ends_with('>') {
        match matching_open(text, '<', '>') {
            Some(open) if open > 0 => text = text[..open].trim_end(),
            _ => break,
        }
    }
    // Keep what follows the last top-level space (return type) and `::` (namespaces).
    let mut depth = 0i32;
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b' ' if depth == 0 => start = i + 1,
            b':' if depth == 0 && i + 1 < bytes.len() && bytes[i + 1] == b':' => start = i + 2,
            _ => {}
        }
    }
    let short = &text[start.min(text.len())..];
    if short.is_empty() { demangled } else { short }
}

/// Index of the bracket that opens the one closing at the end of `text`.
fn matching_open(text: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in text.char_indices().rev() {
        if c == close {
            depth += 1;
        } else if c == open {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// NCCL's device kernels (and RCCL's, which keep NCCL's names): `ncclDevKernel_*` (2.19 and
/// later), `ncclKernel_*` (earlier), in any case, with or without a `void ` return type, and also
/// when a name stayed mangled (`_Z…ncclDevKernel_…`).
pub fn is_nccl_kernel(name: &str) -> bool {
    let unqualified = name.strip_prefix("void ").unwrap_or(name);
    unqualified.get(..4).is_some_and(|head| head.eq_ignore_ascii_case("nccl"))
        || name.contains("ncclDevKernel")
        || name.contains("ncclKernel")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_match_what_nsys_stored() {
        // Pairs (demangledName, shortName) as an nsys 2025.3 export of the reference workload stores them.
        let cases = [
            (
                "void at::native::vectorized_elementwise_kernel<(int)8, at::native::FillFunctor<c10::BFloat16>, std::array<char *, (unsigned long)1>>(int, T2, T3)",
                "vectorized_elementwise_kernel",
            ),
            (
                "void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)1>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
                "vectorized_layer_norm_kernel",
            ),
            (
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            ),
            ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"),
        ];
        for (demangled, short) in cases {
            assert_eq!(short_name(demangled), short, "{demangled}");
        }
    }

    #[test]
    fn short_names_of_kineto_kernel_names() {
        assert_eq!(
            short_name("void at::native::elementwise_kernel<128, 2, at::native::f<{lambda(float)#1}>>(int, at::X)"),
            "elementwise_kernel"
        );
        assert_eq!(
            short_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
            "ncclKernel_AllReduce_RING_LL_Sum_float"
        );
        assert_eq!(short_name("triton_poi_fused_add_cos_sin_0"), "triton_poi_fused_add_cos_sin_0");
        assert_eq!(
            short_name("void (anonymous namespace)::softmax_warp_forward<float>(float*)"),
            "softmax_warp_forward"
        );
        assert_eq!(short_name("Memset (Device)"), "Memset");
    }

    #[test]
    fn nccl_kernels_in_every_spelling() {
        for name in [
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "void ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
            "NCCLKERNEL_Broadcast",
            "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE",
        ] {
            assert!(is_nccl_kernel(name), "{name}");
        }
        for name in ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "void at::native::reduce_kernel<512, 1>()", "nc"] {
            assert!(!is_nccl_kernel(name), "{name}");
        }
    }
}
