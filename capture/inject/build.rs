//! Test executables export their symbols (`-rdynamic`), as a preloaded library's come first in symbol lookup:
//! the library's own `cudaProfilerStart` is then what a call by name finds, and the capture window tests can
//! check the detached mode's profiler trigger (`src/attach.rs`) in one process.

fn main() {
    println!("cargo:rustc-link-arg-tests=-rdynamic");
}
