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
    let writer = std::thread::Builder::new()
        .name("capture-cufilt-input".into())
        .spawn(move || stdin.write_all(input.as_bytes()))
        .expect("cannot start the cu++filt input thread");
    let output = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    let lines: Vec<String> = String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect();
    (output.status.success() && lines.len() == names.len()).then_some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            shardscope_model::kernel_names::short_name(&map[&names[0]]),
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
        );
        assert_eq!(map[&names[1]], names[1]);
    }
}
