//! Keeping secrets out of the stored command lines and environment.
//!
//! A capture file gets shared (attached to a bug, copied to a laptop), and workloads are often
//! started with credentials on their command line (`--api-key=…`, `HF_TOKEN=… python …`).
//! Unless `--keep-cmdline` is given, every value whose name looks like a secret is replaced by
//! [`REDACTED`] before anything is written: `--NAME=value` and `--NAME value` where NAME
//! contains one of [`SECRET_WORDS`], `NAME=value` words with such a name, allow-listed
//! environment variables with such a name, and the password of a URL (`https://user:pw@host`).

use shardscope_model::Trace;

use crate::merge::CaptureExtras;

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Parts of a name (case-insensitive) that mark its value as a secret.
pub const SECRET_WORDS: &[&str] = &["key", "token", "secret", "password", "passwd", "credential", "auth", "cookie"];

/// Whether a variable or option named `name` holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// `args` with the values of secret-looking options and assignments replaced.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut value_follows = false;
    for arg in args {
        if std::mem::take(&mut value_follows) && !arg.starts_with('-') {
            out.push(REDACTED.to_string());
            continue;
        }
        if let Some(option) = arg.strip_prefix('-') {
            let option = option.trim_start_matches('-');
            match option.split_once('=') {
                Some((name, _)) if is_secret_name(name) => {
                    out.push(format!("{}={REDACTED}", &arg[..arg.len() - option.len() + name.len()]))
                }
                Some(_) => out.push(redact_url_password(arg)),
                None => {
                    value_follows = is_secret_name(option);
                    out.push(arg.clone());
                }
            }
            continue;
        }
        match arg.split_once('=') {
            Some((name, _)) if is_variable_name(name) && is_secret_name(name) => out.push(format!("{name}={REDACTED}")),
            _ => out.push(redact_url_password(arg)),
        }
    }
    out
}

/// An environment-style name: letters, digits and `_`, not starting with a digit.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `scheme://user:password@host…` → `scheme://user:<redacted>@host…`; anything else unchanged.
fn redact_url_password(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else { return text.to_string() };
    let authority_start = scheme_end + 3;
    let authority_end = text[authority_start..].find(['/', '?', '#']).map_or(text.len(), |i| authority_start + i);
    let authority = &text[authority_start..authority_end];
    match authority.rfind('@').and_then(|at| authority[..at].find(':').map(|colon| (colon, at))) {
        Some((colon, at)) => {
            format!("{}{REDACTED}{}", &text[..authority_start + colon + 1], &text[authority_start + at..])
        }
        None => text.to_string(),
    }
}

/// Redacts the command lines and environment values that [`crate::merge::merge`] put into
/// `trace` (process names) and `extras` (per-process command lines and environment).
pub fn redact_capture(trace: &mut Trace, extras: &mut CaptureExtras) {
    for (process, extra) in trace.processes.iter_mut().zip(extras.processes.iter_mut()) {
        extra.command_line = redact_args(&extra.command_line);
        process.name = extra.command_line.join(" ");
        for (name, value) in &mut extra.env {
            if is_secret_name(name) {
                *value = REDACTED.to_string();
            }
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
    fn url_passwords_are_redacted() {
        assert_eq!(
            redact(&["--db=postgres://me:pw@host:5432/x", "https://host/a:b@c"]),
            ["--db=postgres://me:<redacted>@host:5432/x", "https://host/a:b@c"]
        );
    }
}
