//! Keeping secrets out of stored command lines and environments: a capture's process table, a study's records.
//!
//! Files the tools write get shared (attached to a bug, copied to a laptop), and workloads are often started with
//! credentials on their command line. Every value that looks like a secret is replaced by [`REDACTED`]:
//! - by its name: `--NAME=value`, `--NAME value` and `NAME=value` where NAME contains one of [`SECRET_WORDS`];
//! - by its form: the password of a URL (`https://user:pw@host`), the word after `Bearer`
//!   (`Authorization: Bearer …`), and words shaped like tokens, bare or as a value ([`looks_like_token`]: known
//!   prefixes such as `sk-`, `hf_`, `ghp_`, `xoxb-`, AWS `AKIA…`, and long random-looking strings);
//! - inside shell command strings (`sh -c '… --api-key=… HF_TOKEN=…'`): an argument holding spaces or quotes is
//!   split into words and each word redacted as above, keeping everything else of the string.
//!
//! Short options whose letter does not say what they hold (`-p 8080`, `-k 3`) keep their value unless the value
//! itself looks like a token: `-p` is a port as often as a password.

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Parts of a name (case-insensitive) that mark its value as a secret.
pub const SECRET_WORDS: &[&str] = &["key", "token", "secret", "password", "passwd", "credential", "auth", "cookie"];

/// Prefixes of well-known token formats (API keys of OpenAI/Anthropic, Hugging Face, GitHub, Slack, GitLab, Google,
/// Stripe), each followed by at least [`MIN_TOKEN_TAIL`] token characters.
const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "hf_",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxr-",
    "xoxs-",
    "glpat-",
    "AIza",
];

/// Characters after a known prefix that make it a token rather than a word such as `sk-learn`.
const MIN_TOKEN_TAIL: usize = 8;

/// A bare string at least this long, of token characters mixing upper case, lower case and digits, with at least
/// [`MIN_ENTROPY_BITS`] bits per character, is taken for a secret. Hex digests (4 bits per character at most),
/// paths (with `/` or `.`) and words are not.
const MIN_RANDOM_LENGTH: usize = 32;
const MIN_ENTROPY_BITS: f64 = 4.2;

/// Whether a variable or option named `name` holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// Whether `word` has the form of a token: a known prefix with a long enough tail, an AWS access key id, or a
/// long random-looking string.
pub fn looks_like_token(word: &str) -> bool {
    let token_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_');
    if TOKEN_PREFIXES.iter().any(|prefix| {
        word.strip_prefix(prefix).is_some_and(|tail| tail.len() >= MIN_TOKEN_TAIL && tail.chars().all(token_char))
    }) {
        return true;
    }
    let aws = ["AKIA", "ASIA"].iter().any(|p| word.starts_with(p))
        && word.len() == 20
        && word.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    aws || looks_random(word)
}

fn looks_random(word: &str) -> bool {
    if word.len() < MIN_RANDOM_LENGTH || !word.chars().all(|c| c.is_ascii_alphanumeric() || "-_+=".contains(c)) {
        return false;
    }
    let has = |f: fn(&char) -> bool| word.chars().any(|c| f(&c));
    if !(has(char::is_ascii_uppercase) && has(char::is_ascii_lowercase) && has(char::is_ascii_digit)) {
        return false;
    }
    let mut counts = [0u32; 128];
    for byte in word.bytes() {
        counts[usize::from(byte & 0x7f)] += 1;
    }
    let n = word.len() as f64;
    let bits: f64 = counts.iter().filter(|&&c| c > 0).map(|&c| -(f64::from(c) / n) * (f64::from(c) / n).log2()).sum();
    bits >= MIN_ENTROPY_BITS
}

/// `args` (a command line as its words) with secret values replaced; an argument holding spaces or quotes (a
/// shell script given to `sh -c`, a header given to `curl -H`) is redacted word by word inside.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut value_follows = false;
    for arg in args {
        let after_secret_name = std::mem::take(&mut value_follows);
        if after_secret_name && !arg.starts_with('-') {
            out.push(REDACTED.to_string());
            continue;
        }
        if arg.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
            out.push(redact_text(arg));
            continue;
        }
        let (redacted, secret_value_next) = redact_word(arg);
        value_follows = secret_value_next;
        out.push(redacted);
    }
    out
}

/// One word of a command line, redacted; also whether the next word is the value of a secret-named option
/// (`--password`, `Bearer`).
fn redact_word(arg: &str) -> (String, bool) {
    if arg.eq_ignore_ascii_case("bearer") || arg.to_ascii_lowercase().ends_with(":bearer") {
        return (arg.to_string(), true);
    }
    if let Some(option) = arg.strip_prefix('-') {
        let option = option.trim_start_matches('-');
        return match option.split_once('=') {
            Some((name, _)) if is_secret_name(name) => {
                (format!("{}={REDACTED}", &arg[..arg.len() - option.len() + name.len()]), false)
            }
            Some((_, value)) if looks_like_token(value) => {
                (format!("{}={REDACTED}", &arg[..arg.len() - value.len() - 1]), false)
            }
            Some(_) => (redact_url_password(arg), false),
            None => (arg.to_string(), is_secret_name(option)),
        };
    }
    if let Some((name, value)) = arg.split_once('=')
        && ((is_variable_name(name) && is_secret_name(name)) || looks_like_token(value))
    {
        return (format!("{name}={REDACTED}"), false);
    }
    if looks_like_token(arg) {
        return (REDACTED.to_string(), false);
    }
    if let Some((name, value)) = arg.split_once(':')
        && is_secret_name(name)
        && !value.is_empty()
        && !value.starts_with("//")
    {
        return (format!("{name}:{REDACTED}"), false);
    }
    (redact_url_password(arg), false)
}

/// A text holding a command line or a header (`sh -c` scripts, `Authorization: Bearer …`): every word between
/// spaces, quotes and shell operators is redacted as [`redact_args`] does, the rest kept byte for byte.
pub fn redact_text(text: &str) -> String {
    let separator = |c: char| c.is_whitespace() || "'\"`;|&()<>".contains(c);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut start = None;
    for (at, c) in text.char_indices() {
        match (separator(c), start) {
            (true, Some(s)) => {
                spans.push((s, at));
                start = None;
            }
            (false, None) => start = Some(at),
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut value_follows = false;
    for (s, e) in spans {
        let word = &text[s..e];
        let replacement = if std::mem::take(&mut value_follows) && !word.starts_with('-') {
            REDACTED.to_string()
        } else {
            let (redacted, next) = redact_word(word);
            value_follows = next;
            redacted
        };
        out.push_str(&text[copied..s]);
        out.push_str(&replacement);
        copied = e;
    }
    out.push_str(&text[copied..]);
    out
}

/// An environment variable's value: redacted whole when its name says it is a secret, else word by word.
pub fn redact_env_value(name: &str, value: &str) -> String {
    if is_secret_name(name) { REDACTED.to_string() } else { redact_text(value) }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(args: &[&str]) -> Vec<String> {
        redact_args(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn secrets_inside_a_shell_command_string_are_redacted() {
        let script = "HF_TOKEN=hf_abcdefghijklmnop python3 serve.py --api-key=sk-proj1234567890 --port 8000 && \
                      curl -H 'Authorization: Bearer eyJhbGciOi.x' https://u:pw@host/v1";
        let out = redact(&["sh", "-c", script]);
        assert_eq!(
            out[2],
            "HF_TOKEN=<redacted> python3 serve.py --api-key=<redacted> --port 8000 && curl -H 'Authorization: \
             Bearer <redacted>' https://u:<redacted>@host/v1"
        );
    }

    #[test]
    fn bare_tokens_are_redacted_by_their_form() {
        let out = redact(&[
            "run",
            "ghp_0123456789abcdefABCDEF",
            "AKIAIOSFODNN7EXAMPLE",
            "xoxb-1234-5678-abcdefgh",
            "q8Zt3LmN0pXv7RkW2sYb9HcJ4fGd6TqA1",
            "--model=meta-llama/Llama-3.1-8B-Instruct",
            "3f786850e387550fdab836ed7e6dc881de23001b",
            "sk-learn",
            "-p",
            "8080",
            "--user-token",
            "abc",
        ]);
        assert_eq!(
            out,
            [
                "run",
                "<redacted>",
                "<redacted>",
                "<redacted>",
                "<redacted>",
                "--model=meta-llama/Llama-3.1-8B-Instruct",
                "3f786850e387550fdab836ed7e6dc881de23001b",
                "sk-learn",
                "-p",
                "8080",
                "--user-token",
                "<redacted>"
            ]
        );
    }

    #[test]
    fn env_values_are_redacted_by_name_or_form() {
        assert_eq!(redact_env_value("HF_TOKEN", "x"), REDACTED);
        assert_eq!(redact_env_value("EXTRA", "--key=abc --n 2"), "--key=<redacted> --n 2");
        assert_eq!(redact_env_value("PATH", "/usr/bin:/bin"), "/usr/bin:/bin");
    }
}
