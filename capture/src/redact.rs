//! Keeping secrets out of the stored command lines and environment.
//!
//! A capture file gets shared (attached to a bug, copied to a laptop), and workloads are often
//! started with credentials on their command line (`--api-key=…`, `HF_TOKEN=… python …`).
//! Unless `--keep-cmdline` is given, every value that looks like a secret is replaced by
//! [`REDACTED`] before anything is written, by the rules of [`shardscope_io::redact`] (shared
//! with the analyzer's study records): values of secret-named options, assignments and
//! allow-listed environment variables, URL passwords, the word after `Bearer`, token-shaped
//! words, and all of these inside shell command strings (`sh -c '…'`).

pub use shardscope_io::redact::{REDACTED, SECRET_WORDS, is_secret_name, redact_args, redact_env_value};
use shardscope_model::Trace;

use crate::merge::CaptureExtras;

/// Redacts the command lines and environment values that [`crate::merge::merge`] put into
/// `trace` (process names) and `extras` (per-process command lines and environment).
pub fn redact_capture(trace: &mut Trace, extras: &mut CaptureExtras) {
    for (process, extra) in trace.processes.iter_mut().zip(extras.processes.iter_mut()) {
        extra.command_line = redact_args(&extra.command_line);
        process.name = extra.command_line.join(" ");
        for (name, value) in &mut extra.env {
            *value = redact_env_value(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(args: &[&str]) -> Vec<String> {
        redact_args(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn secret_options_and_assignments_lose_their_values() {
        assert_eq!(
            redact(&["env", "HF_TOKEN=hf_abc", "python3", "serve.py", "--api-key=sk-1", "--password", "hunter2", "-v"]),
            [
                "env",
                "HF_TOKEN=<redacted>",
                "python3",
                "serve.py",
                "--api-key=<redacted>",
                "--password",
                "<redacted>",
                "-v"
            ]
        );
        assert_eq!(
            redact(&["AWS_SECRET_ACCESS_KEY=x", "db_password=y"]),
            ["AWS_SECRET_ACCESS_KEY=<redacted>", "db_password=<redacted>"]
        );
    }

    #[test]
    fn ordinary_arguments_stay() {
        let args = ["torchrun", "--nproc_per_node=2", "infer.py", "--model", "llama", "a=b", "--token"];
        assert_eq!(redact(&args), args);
    }

    #[test]
    fn a_shell_command_string_and_env_values_are_redacted_inside() {
        let command = redact(&["sh", "-c", "python3 x.py --api-key=sk-abcdefghijkl HF_TOKEN=hf_abcdefghijkl"]);
        assert_eq!(command[2], "python3 x.py --api-key=<redacted> HF_TOKEN=<redacted>");
        assert_eq!(redact_env_value("NCCL_DEBUG", "INFO"), "INFO");
        assert_eq!(redact_env_value("WANDB_API_KEY", "abc"), REDACTED);
    }

    #[test]
    fn url_passwords_are_redacted() {
        assert_eq!(
            redact(&["--db=postgres://me:pw@host:5432/x", "https://host/a:b@c"]),
            ["--db=postgres://me:<redacted>@host:5432/x", "https://host/a:b@c"]
        );
    }
}
