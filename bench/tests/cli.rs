//! The `bench` binary on a machine without an NVIDIA driver: one line on stderr, exit status 2, no file.

use std::process::Command;

/// True when the NVIDIA driver library can be opened here.
fn driver_present() -> bool {
    ["libcuda.so.1", "libcuda.so"].into_iter().any(|name| {
        // SAFETY: opening the driver library only runs its initialisers.
        unsafe { libloading::Library::new(name) }.is_ok()
    })
}

#[test]
#[cfg_attr(nvidia_driver, ignore = "an NVIDIA driver is installed here: the no-driver path cannot be tested")]
fn without_a_driver_bench_exits_2_with_one_line() {
    assert!(!driver_present(), "a driver opens here though bench/build.rs did not find one in ldconfig's cache");
    let output_file = std::env::temp_dir().join(format!("shardscope-bench-cli-{}.json", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_bench")).arg("-o").arg(&output_file).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("bench: no NVIDIA driver"), "{stderr}");
    assert!(output.stdout.is_empty());
    assert!(!output_file.exists());
}

#[test]
fn bad_arguments_exit_2() {
    let output = Command::new(env!("CARGO_BIN_EXE_bench")).args(["--max-bytes", "lots"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a size"));
}
