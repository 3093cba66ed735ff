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

#[cfg(test)]
mod tests {
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
