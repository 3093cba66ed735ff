//! A study's command template read as the words of one command, so that a point's values are passed as argument
//! values and never read by a shell.
//!
//! The template is split into words the way a POSIX shell splits them (spaces; `'…'`, `"…"` and `\x` quoting),
//! and each `{name}` inside a word is replaced by the value, which stays inside that one argument whatever it
//! holds (spaces, quotes, `;`, `$(…)`). Anything only a shell gives meaning to outside quotes (`|`, `&`, `;`,
//! `<`, `>`, `(`, `)`, `$`, `` ` ``, `*`, `?`) is refused with a message pointing at `shell = true`, rather than
//! being passed on as a literal the user did not mean.
//!
//! With `shell = true` the template runs under `sh -c` with each value quoted as one shell word; a placeholder
//! inside the template's own quotes is refused there, because the value's quoting would end the template's quote.

/// One part of a word: text as written, or a placeholder.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Placeholder(String),
}

/// A command template split into words.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandTemplate {
    words: Vec<Vec<Piece>>,
}

/// Why a command template cannot be read or filled in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// With `shell = true`, a placeholder inside the template's own quotes.
    #[error(
        "placeholder {{{0}}} inside quotes: with `shell = true` every value is already quoted as one shell word; \
         remove the quotes around it"
    )]
    QuotedPlaceholder(String),
    /// A `\` at the very end.
    #[error("the command ends with a lone '\\'")]
    LoneBackslash,
    /// Shell syntax in a command that runs without a shell.
    #[error(
        "uses shell syntax ('{0}') outside quotes, but runs without a shell: set `shell = true` to run it under \
         sh -c, or quote the character"
    )]
    ShellNeeded(char),
    /// A quote that is never closed.
    #[error("the command has an unclosed quote")]
    UnclosedQuote,
    /// No words.
    #[error("`command` is empty")]
    Empty,
    /// A placeholder with no value.
    #[error("unknown parameter {{{0}}}")]
    UnknownParameter(String),
}

/// Characters that mean something to a shell only, outside quotes.
const SHELL_SYNTAX: &str = "|&;<>()$`*?";

/// Where the lexer is.
#[derive(Clone, Copy, PartialEq)]
enum Quote {
    None,
    Single,
    Double,
}

impl CommandTemplate {
    /// Reads `template`. `shell`: the template runs under `sh -c` (only placeholders inside quotes are refused);
    /// otherwise shell syntax outside quotes, and `$` or `` ` `` inside double quotes, are refused.
    pub fn parse(template: &str, shell: bool) -> Result<CommandTemplate, CommandError> {
        let mut words: Vec<Vec<Piece>> = Vec::new();
        let mut word: Option<Vec<Piece>> = None;
        let mut quote = Quote::None;
        let mut chars = template.chars().peekable();
        let push_char = |word: &mut Option<Vec<Piece>>, c: char| {
            let pieces = word.get_or_insert_with(Vec::new);
            match pieces.last_mut() {
                Some(Piece::Text(text)) => text.push(c),
                _ => pieces.push(Piece::Text(c.to_string())),
            }
        };
        while let Some(c) = chars.next() {
            match (quote, c) {
                (_, '{') if chars.peek() == Some(&'{') => {
                    chars.next();
                    push_char(&mut word, '{');
                }
                (_, '}') if chars.peek() == Some(&'}') => {
                    chars.next();
                    push_char(&mut word, '}');
                }
                (_, '{') => {
                    let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    if shell && quote != Quote::None {
                        return Err(CommandError::QuotedPlaceholder(name));
                    }
                    word.get_or_insert_with(Vec::new).push(Piece::Placeholder(name));
                }
                (Quote::None, '\'') => {
                    word.get_or_insert_with(Vec::new);
                    quote = Quote::Single;
                }
                (Quote::None, '"') => {
                    word.get_or_insert_with(Vec::new);
                    quote = Quote::Double;
                }
                (Quote::Single, '\'') | (Quote::Double, '"') => quote = Quote::None,
                (Quote::None, '\\') | (Quote::Double, '\\') => match chars.next() {
                    Some(next) if quote == Quote::None || "$`\"\\".contains(next) => push_char(&mut word, next),
                    Some(next) => {
                        push_char(&mut word, '\\');
                        push_char(&mut word, next);
                    }
                    None => return Err(CommandError::LoneBackslash),
                },
                (Quote::None, c) if c.is_whitespace() => words.extend(word.take()),
                (Quote::None, c) if !shell && SHELL_SYNTAX.contains(c) => return Err(CommandError::ShellNeeded(c)),
                (Quote::Double, c) if !shell && "$`".contains(c) => return Err(CommandError::ShellNeeded(c)),
                (_, c) => push_char(&mut word, c),
            }
        }
        if quote != Quote::None {
            return Err(CommandError::UnclosedQuote);
        }
        words.extend(word.take());
        if words.is_empty() {
            return Err(CommandError::Empty);
        }
        Ok(CommandTemplate { words })
    }

    /// The command's arguments with every placeholder replaced by its value (each value inside its word).
    pub fn argv(&self, values: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, CommandError> {
        self.words
            .iter()
            .map(|word| {
                word.iter().try_fold(String::new(), |mut out, piece| {
                    match piece {
                        Piece::Text(text) => out.push_str(text),
                        Piece::Placeholder(name) => {
                            out.push_str(&values(name).ok_or_else(|| CommandError::UnknownParameter(name.clone()))?)
                        }
                    }
                    Ok(out)
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(template: &str, value: &str) -> Result<Vec<String>, CommandError> {
        CommandTemplate::parse(template, false)?.argv(&|_| Some(value.to_string()))
    }

    #[test]
    fn a_value_is_one_argument_whatever_it_holds() {
        let hostile = "x' ; touch /tmp/pwned ; echo '$(id)";
        assert_eq!(
            argv("echo '{x}' {x} \"a {x}\"", hostile).unwrap(),
            ["echo".to_string(), hostile.to_string(), hostile.to_string(), format!("a {hostile}")]
        );
        assert_eq!(argv(r"cp a\ b {{lit}} {out}", "o").unwrap(), ["cp", "a b", "{lit}", "o"]);
    }

    proptest::proptest! {
        /// Any template either reads or is refused with a message; never a panic.
        #[test]
        fn any_template_reads_or_is_refused(template in "\\PC{0,60}", shell in proptest::bool::ANY) {
            if let Ok(parsed) = CommandTemplate::parse(&template, shell) {
                let _ = parsed.argv(&|_| Some("v".into()));
            }
        }

        /// Whatever a value holds, it comes out as exactly the argument (or part of the argument) it stands in.
        #[test]
        fn a_value_is_always_one_whole_argument(value in "\\PC{0,40}") {
            let argv = argv("run --flag={x} {x} '{x}'", &value).unwrap();
            proptest::prop_assert_eq!(argv, vec![
                "run".to_string(),
                format!("--flag={value}"),
                value.clone(),
                value.clone()
            ]);
        }
    }

    #[test]
    fn shell_syntax_needs_shell_mode_and_quoted_placeholders_are_refused_there() {
        for template in ["a | b", "a; b", "a > out", "echo $HOME", "echo \"$HOME\"", "ls *.txt", "a && b"] {
            let error = CommandTemplate::parse(template, false).unwrap_err().to_string();
            assert!(error.contains("shell = true"), "{template}: {error}");
            assert!(CommandTemplate::parse(template, true).is_ok(), "{template}");
        }
        let error = CommandTemplate::parse("echo '{x}'", true).unwrap_err().to_string();
        assert!(error.contains("inside quotes"), "{error}");
        assert!(CommandTemplate::parse("echo 'unclosed", false).unwrap_err().to_string().contains("unclosed"));
    }
}
