//! Kernel names as Nsight Systems shows them: demangled, plus a short base name.
//!
//! CUPTI reports the mangled name. nsys demangles with NVIDIA's own demangler, whose style
//! (`(int)8`, `<unnamed>`, `const T1 *`) differs from the GNU style of other demanglers, and
//! `nsys stats` groups kernels by that exact text. So when NVIDIA's `cu++filt` is available
//! (CUDA toolkit), all distinct names go through it in one call; otherwise `cpp_demangle`
//! gives a GNU-style name. The short name is derived from the demangled one the same way in
//! both cases.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Which demangler produced the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demangler {
    /// NVIDIA's `cu++filt`, the same style as nsys.
    CuFilt,
    /// The `cpp_demangle` crate (GNU style).
    CppDemangle,
}

/// Where `cu++filt` may be: `PATH`, `$CUDA_HOME/bin`, `/usr/local/cuda*/bin`.
pub fn find_cufilt() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(Path::new(&home).join("bin"));
    }
    dirs.push("/usr/local/cuda/bin".into());
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        let mut cuda: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cuda-")))
            .map(|p| p.join("bin"))
            .collect();
        cuda.sort();
        dirs.extend(cuda.into_iter().rev());
    }
    dirs.into_iter().map(|d| d.join("cu++filt")).find(|p| p.is_file())
}

/// Demangles every name in `mangled`, returning `mangled → demangled` (unmangled names map to
/// themselves) and the demangler used.
pub fn demangle_all(mangled: &[String], cufilt: Option<&Path>) -> (HashMap<String, String>, Demangler) {
    let candidates: Vec<&String> = mangled.iter().filter(|n| n.starts_with("_Z")).collect();
    let mut out: HashMap<String, String> = mangled.iter().map(|n| (n.clone(), n.clone())).collect();
    if let Some(tool) = cufilt
        && !candidates.is_empty()
        && let Some(lines) = run_cufilt(tool, &candidates)
    {
        for (name, demangled) in candidates.iter().zip(lines) {
            out.insert((*name).clone(), demangled);
        }
        return (out, Demangler::CuFilt);
    }
    for name in candidates {
        let options = cpp_demangle::DemangleOptions::new();
        if let Ok(text) = cpp_demangle::Symbol::new(name.as_bytes()).map(|s| s.demangle_with_options(&options))
            && let Ok(text) = text
        {
            out.insert(name.clone(), text);
        }
    }
    (out, Demangler::CppDemangle)
}

fn run_cufilt(tool: &Path, names: &[&String]) -> Option<Vec<String>> {
    let mut child =
        Command::new(tool).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
    let mut stdin = child.stdin.take()?;
    let input: String = names.iter().map(|n| format!("{n}\n")).collect();
    // Write from a thread so a full stdout pipe cannot block us while we still write.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    let lines: Vec<String> = String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect();
    (output.status.success() && lines.len() == names.len()).then_some(lines)
}

/// The base name nsys shows as `shortName`: no return type, namespaces, template arguments or
/// parameters. `void at::native::vectorized_elementwise_kernel<(int)8, …>(int, T2, T3)` →
/// `vectorized_elementwise_kernel`.
pub fn short_name(demangled: &str) -> String {
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
    if short.is_empty() { demangled.to_string() } else { short.to_string() }
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
    fn gnu_fallback_demangles_and_keeps_plain_names() {
        let names = vec![
            "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE".to_string(),
            "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT".to_string(),
        ];
        let (map, used) = demangle_all(&names, None);
        assert_eq!(used, Demangler::CppDemangle);
        assert_eq!(
            map[&names[0]],
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"
        );
        assert_eq!(short_name(&map[&names[0]]), "ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
        assert_eq!(map[&names[1]], names[1]);
    }
}
