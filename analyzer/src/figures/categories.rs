//! Op categories: which kind of work a kernel does, from rules kept in a data file.
//!
//! The built-in rules are `analyzer/rules/categories.toml` (compiled in); users replace them with
//! `--rules FILE`. The first rule whose regex matches a kernel's base name decides its category.
//!
//! The base name is the function's name alone: the demangled name (ROCm traces keep `_Z…` names mangled,
//! so they are demangled here) without its return type, template argument lists and parameter list.
//! Matching the whole signature would let words inside argument types decide: `moe::finalize<cutlass::…>`
//! is not a CUTLASS GEMM and `quantize(…flashinfer::…)` is not attention. Generic launch wrappers
//! (`cutlass::Kernel2<Op>`, `cutlass::device_kernel<Op>`) say nothing themselves, so the wrapped
//! operation's base name is appended after a space: `cutlass::Kernel2 cutlass_80_tensorop_…gemm…`.

use std::path::Path;

use regex::RegexSet;
use serde::Deserialize;
use shardscope_model::{CollectiveOp, NameId, Names};

/// The rules shipped with the analyzer.
pub const BUILTIN_RULES_TOML: &str = include_str!("../../rules/categories.toml");

/// The category of runtime helpers that do no work of the program (XLA's autotuning redzone checks and delay
/// kernels): left out when steps are inferred from kernels.
pub const RUNTIME: &str = "runtime";

/// The category of communication kernels; reports split it by collective type.
pub const COMMUNICATION: &str = "communication";
/// Prefix of communication labels in reports: `comm.all_reduce`.
pub const COMM_PREFIX: &str = "comm.";
/// Prefix of the labels of time matched collectives spent waiting for the last rank: `wait.all_reduce`.
pub const WAIT_PREFIX: &str = "wait.";
/// Category of kernels no rule matched.
pub const OTHER: &str = "other";
/// Category of CUDA graphs recorded as whole executions (their kernels are unknown).
pub const CUDA_GRAPH: &str = "cuda_graph";
/// Category of memory copies.
pub const MEMCPY: &str = "memcpy";
/// Category of memory sets.
pub const MEMSET: &str = "memset";

/// Index of a category in [`Classifier::categories`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CategoryId(pub u16);

/// What the rules say about one kernel name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelClass {
    /// Its category.
    pub category: CategoryId,
    /// For communication kernels: the collective type the rule or the name gives, if any.
    pub collective: Option<CollectiveOp>,
}

/// Why a rules file (category rules, or the findings thresholds of `findings::rules`) could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The rules file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid rules TOML, a pattern is not a valid regex, or a threshold is out of range.
    #[error("{path}: {cause}")]
    Invalid {
        /// The rules file.
        path: String,
        /// What is wrong.
        cause: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    rule: Vec<RuleEntry>,
    /// Optional per-category settings (the viewer's colour).
    #[serde(default)]
    category: Vec<CategoryEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CategoryEntry {
    name: String,
    /// `#rrggbb`.
    color: String,
}

/// `#rrggbb` as its three bytes.
fn parse_color(text: &str) -> Option<[u8; 3]> {
    let hex = text.strip_prefix('#').filter(|h| h.len() == 6 && h.is_ascii())?;
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
    Some([byte(0)?, byte(2)?, byte(4)?])
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    category: String,
    pattern: String,
    collective: Option<String>,
}

/// Classifies kernel names into op categories.
#[derive(Debug, Clone)]
pub struct Classifier {
    categories: Vec<String>,
    patterns: RegexSet,
    rule_class: Vec<KernelClass>,
    other: CategoryId,
    memcpy: CategoryId,
    memset: CategoryId,
    communication: Option<CategoryId>,
    /// Colour of each category (by id) where the rules file gives one, as RGB.
    colors: Vec<Option<[u8; 3]>>,
}

impl Classifier {
    /// The built-in rules.
    pub fn builtin() -> Classifier {
        Classifier::from_toml(BUILTIN_RULES_TOML, "built-in rules").expect("the built-in rules are valid")
    }

    /// Rules from a TOML file.
    pub fn load(path: &Path) -> Result<Classifier, RulesError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| RulesError::Io { path: path.display().to_string(), source })?;
        Classifier::from_toml(&text, &path.display().to_string())
    }

    /// Rules from TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Classifier, RulesError> {
        // Regex errors span several lines (pattern, caret, message); errors here are one line.
        let invalid = |cause: String| RulesError::Invalid {
            path: origin.to_string(),
            cause: cause.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" "),
        };
        let file: RulesFile = toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
        let mut categories: Vec<String> = Vec::new();
        let mut rule_class = Vec::with_capacity(file.rule.len());
        let intern = |name: &str, categories: &mut Vec<String>| -> CategoryId {
            let index = categories.iter().position(|c| c == name).unwrap_or_else(|| {
                categories.push(name.to_string());
                categories.len() - 1
            });
            CategoryId(index as u16)
        };
        for (index, rule) in file.rule.iter().enumerate() {
            if rule.category.is_empty() {
                return Err(invalid(format!("rule {} has an empty category", index + 1)));
            }
            let collective = match &rule.collective {
                None => None,
                Some(text) => match CollectiveOp::parse(text) {
                    CollectiveOp::Other => {
                        return Err(invalid(format!("rule {}: unknown collective '{text}'", index + 1)));
                    }
                    op => Some(op),
                },
            };
            if collective.is_some() && rule.category != COMMUNICATION {
                return Err(invalid(format!("rule {}: 'collective' needs category '{COMMUNICATION}'", index + 1)));
            }
            rule_class.push(KernelClass { category: intern(&rule.category, &mut categories), collective });
        }
        let patterns = RegexSet::new(file.rule.iter().map(|r| &r.pattern)).map_err(|e| invalid(e.to_string()))?;
        let other = intern(OTHER, &mut categories);
        let memcpy = intern(MEMCPY, &mut categories);
        let memset = intern(MEMSET, &mut categories);
        let communication = categories.iter().position(|c| c == COMMUNICATION).map(|i| CategoryId(i as u16));
        let mut colors = vec![None; categories.len()];
        for entry in &file.category {
            let index = categories
                .iter()
                .position(|c| *c == entry.name)
                .ok_or_else(|| invalid(format!("colour for '{}', which no rule names", entry.name)))?;
            let color = parse_color(&entry.color).ok_or_else(|| {
                invalid(format!("category '{}': colour '{}' is not #rrggbb", entry.name, entry.color))
            })?;
            colors[index] = Some(color);
        }
        Ok(Classifier { categories, patterns, rule_class, other, memcpy, memset, communication, colors })
    }

    /// The class of one kernel name (demangled or mangled).
    pub fn classify(&self, kernel_name: &str) -> KernelClass {
        let demangled = demangle(kernel_name);
        let kernel_name = demangled.as_deref().unwrap_or(kernel_name);
        let first = self.patterns.matches(&base_name(kernel_name)).iter().next();
        let mut class = first.map_or(KernelClass { category: self.other, collective: None }, |i| self.rule_class[i]);
        if self.is_communication(class.category) && class.collective.is_none() {
            class.collective = match CollectiveOp::parse(kernel_name) {
                CollectiveOp::Other => None,
                op => Some(op),
            };
        }
        class
    }

    /// Classes of every interned name, indexed by [`NameId`]: classify each distinct name once.
    pub fn classify_names(&self, names: &Names) -> Vec<KernelClass> {
        names.iter().map(|(_, name)| self.classify(name)).collect()
    }

    /// The class of a name from a table made by [`Classifier::classify_names`].
    pub fn lookup(table: &[KernelClass], name: NameId) -> KernelClass {
        table[name.0 as usize]
    }

    /// Category names, in rule order, then `other`, `memcpy`, `memset`.
    pub fn categories(&self) -> &[String] {
        &self.categories
    }

    /// Name of a category.
    pub fn name(&self, id: CategoryId) -> &str {
        &self.categories[id.0 as usize]
    }

    /// True for the communication category.
    pub fn is_communication(&self, id: CategoryId) -> bool {
        self.communication == Some(id)
    }

    /// The communication category, if the rules have one.
    pub fn communication(&self) -> Option<CategoryId> {
        self.communication
    }

    /// The colour the rules file gives a category (`[[category]]` tables), as RGB.
    pub fn color(&self, id: CategoryId) -> Option<[u8; 3]> {
        self.colors.get(usize::from(id.0)).copied().flatten()
    }

    /// Category of memory copies.
    pub fn memcpy(&self) -> CategoryId {
        self.memcpy
    }

    /// Category of memory sets.
    pub fn memset(&self) -> CategoryId {
        self.memset
    }
}

/// The demangled form of an Itanium-mangled name (`_Z…`), `None` for names that are not mangled or do not
/// demangle.
pub fn demangle(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    symbol.demangle().ok()
}

/// Launch wrappers whose own name says nothing about the work: the wrapped operation (the first template argument
/// that is a type, not a number: ck_tile's `kentry<256, 1, ck_tile::Rmsnorm2dFwd<…>, …>` wraps `Rmsnorm2dFwd`) is
/// what rules should see.
const GENERIC_WRAPPERS: [&str; 5] = ["Kernel", "Kernel2", "device_kernel", "kernel", "kentry"];

/// What the rules match: the function name of a demangled kernel signature with namespaces, without return
/// type, template arguments and parameters; for a generic launch wrapper, followed by the wrapped operation's
/// base name. `void at::native::vectorized_elementwise_kernel<4, Add<float>>(int, …)` →
/// `at::native::vectorized_elementwise_kernel`.
pub fn base_name(name: &str) -> String {
    let mut base = String::with_capacity(name.len());
    // The top-level arguments of the first template list after the name.
    let mut template_arguments: Vec<String> = Vec::new();
    let mut depth = 0usize;
    let mut in_first_template = false;
    let mut previous = '\0';
    for c in name.chars() {
        // `->` inside `Memcpy DtoD (Device -> Device)` is an arrow, not a closing bracket.
        let closes = c == ')' || (c == '>' && previous != '-');
        match c {
            '(' | '<' => {
                if depth == 0 && c == '<' && template_arguments.is_empty() {
                    in_first_template = true;
                    template_arguments.push(String::new());
                } else if in_first_template {
                    template_arguments.last_mut().into_iter().for_each(|a| a.push(c));
                }
                depth += 1;
            }
            _ if closes && depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    in_first_template = false;
                } else if in_first_template {
                    template_arguments.last_mut().into_iter().for_each(|a| a.push(c));
                }
            }
            ',' if depth == 1 && in_first_template => template_arguments.push(String::new()),
            _ if depth == 0 => base.push(c),
            _ if in_first_template => template_arguments.last_mut().into_iter().for_each(|a| a.push(c)),
            _ => {}
        }
        previous = c;
    }
    let base = base.trim();
    // Kernels return void; other return types (rare) are one word before the name.
    let base = base.strip_prefix("void ").unwrap_or(base).trim().to_string();
    let last_component = base.rsplit("::").next().unwrap_or(&base);
    if GENERIC_WRAPPERS.contains(&last_component) {
        // A number (`256`, `1u`, `(unsigned char)1`, `true`) is a launch bound, not the wrapped operation.
        let is_type = |argument: &&String| {
            let text = argument.trim();
            let starts_like_a_name = text.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_');
            starts_like_a_name && text != "true" && text != "false"
        };
        if let Some(argument) = template_arguments.iter().find(is_type) {
            let wrapped = base_name(argument.trim());
            if !wrapped.is_empty() {
                return format!("{base} {wrapped}");
            }
        }
    }
    base
}

/// The label a report uses for a kernel's category: `comm.<type>` for communication, else the category.
pub fn report_label(classifier: &Classifier, class: KernelClass, collective: Option<CollectiveOp>) -> String {
    if classifier.is_communication(class.category) {
        let op = class.collective.or(collective).unwrap_or(CollectiveOp::Other);
        format!("{COMM_PREFIX}{}", op.label())
    } else {
        classifier.name(class.category).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn category(c: &Classifier, name: &str) -> String {
        let class = c.classify(name);
        report_label(c, class, None)
    }

    #[test]
    fn every_kernel_the_model_calls_nccl_is_communication_in_the_builtin_rules() {
        // The rules file and `kernel_names::is_nccl_kernel` (which decides what NCCL operations link
        // to) must not drift apart: every demangled NCCL kernel name is communication for both.
        let c = Classifier::builtin();
        for name in [
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "void ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
        ] {
            assert!(shardscope_model::kernel_names::is_nccl_kernel(name), "{name}");
            assert!(c.is_communication(c.classify(name).category), "{name}");
        }
    }

    #[test]
    fn builtin_rules_classify_the_kernel_families_of_llm_serving() {
        let c = Classifier::builtin();
        let cases = [
            (
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
                "comm.all_reduce",
            ),
            ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "comm.send_recv"),
            ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)", "comm.all_gather"),
            ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, ...)", "comm.all_reduce"),
            ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<...>", "comm.all_reduce"),
            ("void quickreduce::allreduce_prototype_twoshot<...>", "comm.all_reduce"),
            ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "gemm"),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
            ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(...)", "gemm"),
            ("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float>", "gemm"),
            ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128", "attention"),
            ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>", "attention"),
            (
                "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)1>",
                "norm",
            ),
            ("void vllm::rms_norm_kernel<c10::BFloat16>(...)", "norm"),
            (
                "void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<c10::BFloat16>>",
                "elementwise",
            ),
            ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel>", "elementwise"),
            ("void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>", "embedding_sampling"),
            (
                "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4>",
                "embedding_sampling",
            ),
            ("Memcpy DtoD (Device -> Device)", "memcpy"),
            ("Memset (Device)", "memset"),
            ("my_unknown_kernel", "other"),
        ];
        for (name, expected) in cases {
            assert_eq!(category(&c, name), expected, "{name}");
        }
    }

    #[test]
    fn builtin_rules_classify_compiled_programs_and_generic_entries() {
        let c = Classifier::builtin();
        let cases = [
            // XLA: fusion kinds by their names, GEMM fusions and custom calls, runtime helpers of the autotuner.
            ("loop_multiply_fusion_7", "elementwise"),
            ("input_add_reduce_fusion_6", "elementwise"),
            ("input_reduce_fusion", "elementwise"),
            ("loop_is_finite_fusion", "elementwise"),
            ("fusion_115", "elementwise"),
            ("transpose_fusion_2", "elementwise"),
            ("concatenate_fusion", "elementwise"),
            ("input_scatter_fusion_1", "elementwise"),
            ("wrapped_convert", "elementwise"),
            ("loop_rsqrt_multiply_fusion_3", "norm"),
            ("gemm_fusion_dot_general_16", "gemm"),
            ("triton_gemm_dot_3", "gemm"),
            ("cudnn_fusion_1", "gemm"),
            (
                "stream_executor::gpu::RedzoneAllocatorKernelImpl(unsigned char *, unsigned char, unsigned long, unsigned int *)",
                "runtime",
            ),
            (
                "stream_executor::gpu::<unnamed>::DelayKernel(volatile stream_executor::GpuSemaphoreState *, stream_executor::GpuSemaphoreState)",
                "runtime",
            ),
            (
                "void stream_executor::gpu::xla_fp_comparison<Eigen::bfloat16>(T1 *, T1 *, float, unsigned long, int *)",
                "runtime",
            ),
            ("stream_executor::gpu::RepeatBufferKernelImpl(char *, long, long)", "runtime"),
            // ck_tile's generic entry: the kernel inside decides, launch bounds before it do not.
            (
                "void ck_tile::kentry<256, 1, ck_tile::Rmsnorm2dFwd<ck_tile::Rmsnorm2dFwdPipelineOnePass<ck_tile::Rmsnorm2dFwdPipelineProblem<ck_tile::bf16_t, float>>>, ck_tile::Rmsnorm2dFwdHostArgs>(ck_tile::Rmsnorm2dFwdHostArgs)",
                "norm",
            ),
            (
                "void ck_tile::kentry<1, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVS<int>>>(int)",
                "attention",
            ),
            ("void ck_tile::kentry<64, 2, ck_tile::GemmKernel<ck_tile::GemmPipeline<int>>>(int)", "gemm"),
            // Inductor's Triton kernels by the ops fused into them.
            ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "norm"),
            ("triton_per_fused_add_mean_mul_pow_rsqrt_3", "norm"),
            ("triton_per_fused_native_layer_norm_2", "norm"),
            ("triton_poi_fused__to_copy_1", "elementwise"),
            ("triton_poi_fused_add_mul_silu_4", "elementwise"),
            ("triton_tem_fused_mm_0", "gemm"),
            ("triton_red_fused_argmax_0", "embedding_sampling"),
            ("triton_poi_fused_embedding_0", "embedding_sampling"),
            // Performance-portability launchers: the loop body per index.
            (
                "void clover::par_ranged2d_kernel<PdV_kernel(bool, int, int)::[lambda(int, int) (instance 1)]>(clover::Range2d, T1)",
                "elementwise",
            ),
        ];
        for (name, expected) in cases {
            assert_eq!(category(&c, name), expected, "{name}");
        }
    }

    /// Per built-in rule: real kernel names (from NVIDIA, AMD and framework traces) it must give its category,
    /// and real names that mention its words only inside template or parameter lists, or that belong to a
    /// neighbouring category, which it must not take.
    #[test]
    fn each_builtin_rule_takes_its_kernels_and_leaves_the_others() {
        let c = Classifier::builtin();
        let must: &[(&str, &[&str])] = &[
            (
                "comm.all_reduce",
                &[
                    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
                    // RCCL keeps NCCL's kernel names.
                    "ncclDevKernel_Generic_AllReduce_Sum_bf16_RING_LL128(ncclDevKernelArgsStorage<4096ul>)",
                    "void sglang::cross_device_reduce_2stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)",
                ],
            ),
            ("comm.send_recv", &["ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"]),
            (
                "kv_cache",
                &[
                    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, int, int, int, float const*, float const*)",
                    "void vllm::reshape_and_cache_kernel<c10::BFloat16, c10::BFloat16, (vllm::Fp8KVCacheDataType)0>(c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16*, c10::BFloat16*, long const*, int, int, int, int, int, float const*, float const*)",
                    "store_kvcache_kernel",
                    "void flashinfer::AppendPagedKVCacheKernel<128u, 8u, __nv_bfloat16, int>(flashinfer::paged_kv_t<__nv_bfloat16, int>, __nv_bfloat16*, __nv_bfloat16*, int*, int*, unsigned int, unsigned int, unsigned int, unsigned int)",
                ],
            ),
            (
                "rope",
                &[
                    "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)",
                    "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u, 8u, 16u, __nv_bfloat16, long>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, float*, long*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long)",
                    "triton_poi_fused_apply_rope_0",
                ],
            ),
            (
                "attention",
                &[
                    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(Flash_fwd_params)",
                    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 1u, 8u, 4u, 4u, 1u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::DefaultAttention<false, false, false, false> >, flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)",
                    "void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128, (vllm::Fp8KVCacheDataType)0, false>(unsigned short*, unsigned short const*, unsigned short const*, unsigned short const*, int, float, int const*, int const*, int, float const*, int, int, int, float const*, float const*)",
                    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
                    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
                    // A CUTLASS launch wrapper around a flash-attention operation.
                    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> > > > > >(flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2> > >::Params)",
                ],
            ),
            (
                "gemm",
                &[
                    "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT",
                    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
                    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)",
                    "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_LPA8_LPB8_LPM0_LRVW4_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PWA0_SIA3_SS1_SU0_SUM0_SUS0_SPO0_SRVW0_SSO0_SVW4_TLDS1_USFGROn1_VSn1_VWA4_VWB1_WSGRA0_WSGRB0_WS64_WG32_8_1",
                    "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s4_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_swiGlu_sm100a",
                    "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s4_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100a",
                    "fused_moe_kernel",
                    "void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>(int, int, int, int, int, __hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16*, int, int)",
                    "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long, float*, long, int*)",
                ],
            ),
            (
                "moe",
                &[
                    "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, unsigned long, int*)",
                    "void vllm::moe::topkGatingSoftmax<8, 128, 4, 16, 32, int>(float const*, bool const*, float*, int, int*, int*, int, int, int)",
                    // Names CUTLASS only in its template arguments: the routing epilogue, not a GEMM.
                    "void tensorrt_llm::kernels::finalizeMoeRoutingKernel<cutlass::bfloat16_t, cutlass::bfloat16_t, cutlass::bfloat16_t, (tensorrt_llm::kernels::ScaleMode)1, false>(cutlass::bfloat16_t const*, cutlass::bfloat16_t*, cutlass::bfloat16_t const*, float const*, int const*, int const*, long, long, long, long)",
                    "void tensorrt_llm::kernels::expandInputRowsKernel<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 const*, __nv_bfloat16*, float const*, float*, int const*, int*, long, long, long, long, long const*)",
                ],
            ),
            (
                "quantization",
                &[
                    // Names FlashInfer in its parameter list: not attention.
                    "void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)0, __nv_bfloat16, 16, false>(int, int, int, __nv_bfloat16 const*, float const*, unsigned int*, unsigned int*, flashinfer::QuantizationSFLayout)",
                    "void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*, float*, c10::BFloat16 const*, float const*, int)",
                    "_per_token_group_quant_fp8",
                    "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, float const*, int, int, unsigned char*, bool)",
                ],
            ),
            (
                "norm",
                &[
                    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)1>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
                    "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
                    "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)",
                    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, float)",
                    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
                ],
            ),
            (
                "conv",
                &[
                    "cudnn_infer_volta_scudnn_128x64_stridedB_interior_nn_v1",
                    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
                    "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
                    "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)",
                    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel",
                ],
            ),
            (
                "embedding_sampling",
                &[
                    "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>(at::GenericPackedTensorAccessor<c10::Half, 1ul, at::RestrictPtrTraits, long>, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)",
                    "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<c10::Half, float, c10::Half, 2ul, 32>(at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, long>)",
                    "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long, long, long)",
                    "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*, decltype(nullptr) const*, int const*, int const*, int const*, int*, decltype(nullptr)*, int*)",
                    "void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
                    "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)2, (cub::BlockReduceAlgorithm)2, 4u, false, float, int>(float*, int*, int*, float*, int*, unsigned int, float, int, unsigned int, unsigned long, unsigned long)",
                ],
            ),
            (
                "elementwise",
                &[
                    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
                    "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)",
                    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
                    "void cub::DeviceScanKernel<cub::DeviceScanPolicy<int>::Policy600, int*, int*, cub::ScanTileState<int, true>, cub::Sum, cub::NullType, int>(int*, int*, cub::ScanTileState<int, true>, int, cub::Sum, cub::NullType, int)",
                    "triton_poi_fused_add_mul_0",
                    // A ROCm trace's mangled name: demangled, then matched.
                    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
                ],
            ),
        ];
        for (expected, names) in must {
            for name in *names {
                assert_eq!(category(&c, name), *expected, "{name}");
            }
        }
        // Names a rule must not take: its words only in template or parameter lists, or in a neighbour's kernel.
        let must_not: &[(&str, &str)] = &[
            (
                "kv_cache",
                "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(Flash_fwd_params)",
            ),
            (
                "attention",
                "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)",
            ),
            (
                "attention",
                "void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)0, __nv_bfloat16, 16, false>(int, int, int, __nv_bfloat16 const*, float const*, unsigned int*, unsigned int*, flashinfer::QuantizationSFLayout)",
            ),
            (
                "gemm",
                "void tensorrt_llm::kernels::finalizeMoeRoutingKernel<cutlass::bfloat16_t, cutlass::bfloat16_t, cutlass::bfloat16_t, (tensorrt_llm::kernels::ScaleMode)1, false>(cutlass::bfloat16_t const*, cutlass::bfloat16_t*)",
            ),
            (
                "gemm",
                "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>(fbgemm_gpu::GenericPackedTensorAccessor<c10::Half, 1ul>)",
            ),
            (
                "gemm",
                "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*)",
            ),
            (
                "conv",
                "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long, long, long)",
            ),
            ("moe", "fused_moe_kernel"),
            // RoPE's kernel says "embedding".
            (
                "embedding_sampling",
                "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)",
            ),
            (
                "rope",
                "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, int, int, int, float const*, float const*)",
            ),
            (
                "quantization",
                "void deep_gemm::fp8_gemm_kernel<128u, 128u, 128u, 1u, 8u>(float*, int*, unsigned int, __nv_fp8_e4m3 const*)",
            ),
            (
                "norm",
                "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::NormOps<float, float, float, float>, unsigned int, float, 4>)",
            ),
            (
                "elementwise",
                "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
            ),
        ];
        for (not_expected, name) in must_not {
            assert_ne!(category(&c, name), *not_expected, "{name}");
        }
    }

    #[test]
    fn base_names_leave_out_return_type_templates_and_parameters() {
        assert_eq!(
            base_name(
                "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float)"
            ),
            "at::native::vectorized_elementwise_kernel"
        );
        assert_eq!(base_name("Memcpy DtoD (Device -> Device)"), "Memcpy DtoD");
        assert_eq!(
            base_name(
                "void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_64x64_tn_align8>(cutlass_80_tensorop_s16816gemm_64x64_tn_align8::Params)"
            ),
            "cutlass::Kernel2 cutlass_80_tensorop_s16816gemm_64x64_tn_align8"
        );
        assert_eq!(base_name("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT"), "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT");
        assert_eq!(
            demangle(
                "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
            )
            .map(|d| base_name(&d)),
            Some("at::native::vectorized_elementwise_kernel".to_string())
        );
        assert_eq!(demangle("nvjet_sm90"), None);
        assert_eq!(demangle("_Znot a symbol"), None);
    }

    #[test]
    fn every_builtin_category_has_a_colour_and_bad_colours_are_refused() {
        let c = Classifier::builtin();
        for (index, name) in c.categories().iter().enumerate() {
            assert!(c.color(CategoryId(index as u16)).is_some(), "{name} has no colour");
        }
        assert_eq!(c.color(c.communication().unwrap()), Some([0xe1, 0x57, 0x59]));
        let rule = "[[rule]]\ncategory = \"moe\"\npattern = 'fused_moe'\n";
        let with = |table: &str| Classifier::from_toml(&format!("{rule}\n[[category]]\n{table}"), "mine.toml");
        assert_eq!(with("name = \"moe\"\ncolor = \"#0a0B0c\"").unwrap().color(CategoryId(0)), Some([10, 11, 12]));
        assert!(with("name = \"moe\"\ncolor = \"red\"").unwrap_err().to_string().contains("#rrggbb"));
        assert!(with("name = \"gemm\"\ncolor = \"#000000\"").unwrap_err().to_string().contains("no rule names"));
    }

    #[test]
    fn user_rules_replace_the_builtin_ones() {
        let text = "[[rule]]\ncategory = \"moe\"\npattern = 'fused_moe'\n\n[[rule]]\ncategory = \"communication\"\ncollective = \"all_to_all\"\npattern = 'deepep_dispatch'\n";
        let c = Classifier::from_toml(text, "mine.toml").unwrap();
        assert_eq!(category(&c, "fused_moe_kernel"), "moe");
        assert_eq!(category(&c, "deepep_dispatch_kernel"), "comm.all_to_all");
        assert_eq!(category(&c, "nvjet_sm90"), "other");
        assert_eq!(c.categories(), ["moe", "communication", "other", "memcpy", "memset"]);
    }

    #[test]
    fn bad_rules_name_the_file_and_the_cause() {
        let bad_regex = Classifier::from_toml("[[rule]]\ncategory = \"x\"\npattern = '('\n", "r.toml").unwrap_err();
        assert!(bad_regex.to_string().starts_with("r.toml: "), "{bad_regex}");
        let bad_field = Classifier::from_toml("[[rule]]\ncategory = \"x\"\nregex = 'a'\n", "r.toml").unwrap_err();
        assert!(bad_field.to_string().contains("r.toml"), "{bad_field}");
        let bad_op = Classifier::from_toml(
            "[[rule]]\ncategory = \"communication\"\ncollective = \"teleport\"\npattern = 'a'\n",
            "r.toml",
        )
        .unwrap_err();
        assert!(bad_op.to_string().contains("teleport"), "{bad_op}");
        for error in [bad_regex, bad_field, bad_op] {
            assert_eq!(error.to_string().lines().count(), 1, "{error}");
        }
    }
}
