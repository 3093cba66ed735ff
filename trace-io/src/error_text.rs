//! How the command-line tools print an error: one line, each cause once, no raw control characters.
//!
//! Both `analyzer` and `capture` end a failed run with one line naming the file and the cause; the
//! text comes from paths and from the inputs themselves, so it is escaped before it reaches a terminal.

use std::error::Error;

/// The chain of causes joined by ": ", each cause once (errors that name their source in their own
/// message would otherwise print it twice).
pub fn causes<'a>(chain: impl IntoIterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut text = String::new();
    for cause in chain {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    text
}

/// `text` on one line, control characters (newlines, escape sequences from paths or input text) written
/// as escapes.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a terminal could take `c` for a command rather than text: control characters (C0, DEL and the C1
/// range, where U+009B starts an escape sequence on its own) and the bidirectional overrides that reorder what
/// is shown.
fn terminal_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` (a table, a report: many lines) with every character a terminal would act on written as an escape
/// (`\u{1b}`), lines and tabs kept. Names in tables come from the inputs: a kernel named `\x1b]0;…\x07` must not
/// retitle or clear the user's terminal.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(terminal_unsafe) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if terminal_unsafe(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_table_keeps_its_lines_and_loses_its_escape_sequences() {
        let table = "kernel\tms\n\x1b]0;owned\x07gemm\u{9b}2J\u{202e}x\t1\n";
        assert_eq!(super::terminal_safe(table), "kernel\tms\n\\u{1b}]0;owned\\u{7}gemm\\u{9b}2J\\u{202e}x\t1\n");
        assert!(matches!(super::terminal_safe("plain\n"), std::borrow::Cow::Borrowed(_)));
    }

    use super::*;

    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "run.sqlite: {}", self.0)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_text_is_not_repeated() {
        let error = Wrapped(std::io::Error::other("disk full"));
        let mut chain: Vec<&(dyn Error + 'static)> = vec![&error];
        chain.extend(error.source());
        assert_eq!(causes(chain), "run.sqlite: disk full");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(one_line("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
    }
}
