//! Op categories: which kind of work a kernel does, from rules kept in a data file.
//!
//! The built-in rules are `analyzer/rules/categories.toml` (compiled in); users replace them with
//! `--rules FILE`. The first rule whose regex matches a kernel's demangled name decides its category.

use std::path::Path;

use regex::RegexSet;
use serde::Deserialize;
use shardscope_model::{CollectiveOp, NameId, Names};

/// The rules shipped with the analyzer.
pub const BUILTIN_RULES_TOML: &str = include_str!("../rules/categories.toml");

/// The category of communication kernels; reports split it by collective type.
pub const COMMUNICATION: &str = "communication";
/// Category of kernels no rule matched.
pub const OTHER: &str = "other";
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

/// Why a rules file could not be used.
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
    /// The file is not valid rules TOML, or a pattern is not a valid regex.
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

    /// The class of one kernel name.
    pub fn classify(&self, kernel_name: &str) -> KernelClass {
        let first = self.patterns.matches(kernel_name).iter().next();
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

/// The label a report uses for a kernel's category: `comm.<type>` for communication, else the category.
pub fn report_label(classifier: &Classifier, class: KernelClass, collective: Option<CollectiveOp>) -> String {
    if classifier.is_communication(class.category) {
        let op = class.collective.or(collective).unwrap_or(CollectiveOp::Other);
        format!("comm.{}", op.label())
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
