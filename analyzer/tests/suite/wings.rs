//! The analyzer's wings point one way, and its functions stay short enough to read whole.
//!
//! `analyzer/src/lib.rs` lists the wings in order (`pub mod huge_pages;` … `pub mod study;`); each may use only the
//! wings listed before it. This test reads the sources and fails on
//!
//! - a `crate::<wing>` path (or a `crate::{…}` group naming one) in a wing listed before that wing,
//! - a non-test function of more than [`MAX_FUNCTION_LINES`] lines in `analyzer/src` or in the Parquet reader and
//!   writer (`trace-io/src/parquet`); functions of `#[cfg(test)]` modules and `tests.rs` files are left out;
//! - a `Result<…, String>` outside test code in the analyzer's library (`analyzer/src` but `main.rs`, the binary):
//!   in a function's signature, a closure's return type or a type alias, the library's errors are typed
//!   (`thiserror` enums); the text is what they display.
//!
//! Comments, strings and character literals are blanked before anything is looked at, so that a brace or a path
//! in them counts for nothing. The checkers also run on fabricated sources, so a checker that lets everything
//! through fails too.

use std::path::{Path, PathBuf};

/// The longest a non-test function may be, in lines from its `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 150;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the analyzer sits in the workspace").to_path_buf()
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display())) {
            let path = entry.expect("a readable folder entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `source` with comments, string literals (plain, raw, byte) and character literals replaced by spaces, line
/// breaks kept, so that positions and line numbers stay those of the file.
fn blank_literals(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(bytes.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let after_word = at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').map_or(bytes.len(), |n| at + n);
            blank(&mut out, at, end);
            at = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut end) = (0usize, at);
            while end < bytes.len() {
                if bytes[end..].starts_with(b"/*") {
                    depth += 1;
                    end += 2;
                } else if bytes[end..].starts_with(b"*/") {
                    depth -= 1;
                    end += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    end += 1;
                }
            }
            blank(&mut out, at, end);
            at = end;
        } else if let Some(hashes) = raw_string_start(rest).filter(|_| !after_word) {
            // r"…", r#"…"#, br"…": ends at the quote followed by as many hashes.
            let open = rest.iter().position(|&b| b == b'"').expect("a raw string opens with a quote") + 1;
            let closing: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let end = bytes[at + open..]
                .windows(closing.len())
                .position(|w| w == closing.as_slice())
                .map_or(bytes.len(), |n| at + open + n + closing.len());
            blank(&mut out, at, end);
            at = end;
        } else if rest[0] == b'"' {
            let mut end = at + 1;
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, at, end + 1);
            at = end + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{1F600}', 'é'); otherwise a lifetime, left as it is.
            let close = match rest.get(1) {
                Some(b'\\') => rest.iter().skip(2).position(|&b| b == b'\'').map(|n| n + 2),
                Some(_) => {
                    let width = std::str::from_utf8(&rest[1..rest.len().min(5)])
                        .or_else(|e| std::str::from_utf8(&rest[1..1 + e.valid_up_to()]))
                        .ok()
                        .and_then(|s| s.chars().next())
                        .map_or(1, char::len_utf8);
                    (rest.get(1 + width) == Some(&b'\'')).then_some(1 + width)
                }
                None => None,
            };
            match close {
                Some(close) => {
                    blank(&mut out, at, at + close + 1);
                    at += close + 1;
                }
                None => at += 1,
            }
        } else {
            at += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The number of `#` of a raw string opening at the start of `text` (`r"`, `r#"`, `br##"`), if one does.
fn raw_string_start(text: &[u8]) -> Option<usize> {
    let text = text.strip_prefix(b"b").unwrap_or(text);
    let text = text.strip_prefix(b"r")?;
    let hashes = text.iter().take_while(|&&b| b == b'#').count();
    (text.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The position just past the brace that closes the one at `open`.
fn matching_brace(text: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (at, &byte) in text.iter().enumerate().skip(open) {
        match byte {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// `blanked` (see [`blank_literals`]) with the bodies of `#[cfg(test)]` modules blanked too.
fn without_test_modules(blanked: &str) -> String {
    let mut out = blanked.as_bytes().to_vec();
    let mut from = 0;
    while let Some(found) = blanked[from..].find("#[cfg(test)]") {
        let attribute = from + found;
        from = attribute + 1;
        let after = blanked[attribute + "#[cfg(test)]".len()..].trim_start();
        if !after.starts_with("mod ") && !after.starts_with("pub mod ") {
            continue;
        }
        let item = blanked.len() - after.len();
        let Some(open) = blanked[item..].find(['{', ';']).map(|n| item + n) else { continue };
        if out[open] == b'{' {
            let end = matching_brace(blanked.as_bytes(), open);
            for byte in &mut out[open..end] {
                if *byte != b'\n' {
                    *byte = b' ';
                }
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every function with a body in `source` (a whole file): its name, first line (1-based) and length in lines.
fn function_lengths(source: &str) -> Vec<(String, usize, usize)> {
    let text = without_test_modules(&blank_literals(source));
    let bytes = text.as_bytes();
    let mut functions = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("fn ") {
        let at = from + found;
        from = at + 3;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let name: String =
            text[at + 3..].trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside the signature's brackets; a `;` there first: no body.
        let mut depth = 0i32;
        let mut open = None;
        for (offset, &byte) in bytes[at..].iter().enumerate() {
            match byte {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(at + offset);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let end = matching_brace(bytes, open);
        let first_line = text[..at].matches('\n').count() + 1;
        let lines = text[at..end].matches('\n').count() + 1;
        functions.push((name, first_line, lines));
    }
    functions
}

/// The functions of `source` longer than `max_lines`, as `file:line name (N lines)`.
fn long_functions(file: &str, source: &str, max_lines: usize) -> Vec<String> {
    function_lengths(source)
        .into_iter()
        .filter(|(_, _, lines)| *lines > max_lines)
        .map(|(name, line, lines)| format!("{file}:{line} {name} ({lines} lines)"))
        .collect()
}

/// The wings `lib_rs` declares (`pub mod X;`), in order.
fn wing_order(lib_rs: &str) -> Vec<String> {
    blank_literals(lib_rs)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod ")?.strip_suffix(';').map(str::to_string))
        .collect()
}

/// The top-level modules `source` names through `crate::`: `crate::a::…` and each name of `crate::{a, b::…}`.
fn crate_paths(source: &str) -> Vec<String> {
    let text = blank_literals(source);
    let mut names = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("crate") {
        let at = from + found;
        from = at + 5;
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(rest) = text[at + 5..].trim_start().strip_prefix("::") else { continue };
        let rest = rest.trim_start();
        let word = |s: &str| s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: those after `{` and after each `,` at depth 0.
            let mut depth = 0;
            let mut expect_name = true;
            for (offset, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if expect_name && !c.is_whitespace() => {
                        names.push(word(&group[offset..]));
                        expect_name = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(word(rest));
        }
    }
    names.retain(|n: &String| !n.is_empty());
    names
}

/// The wing of `relative` (a path under `analyzer/src`): its first component without `.rs`.
fn wing_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.strip_suffix(".rs").unwrap_or(first).to_string())
}

/// Every use of a later wing by a wing, one line each.
fn wing_violations(order: &[String], files: &[(PathBuf, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (relative, source) in files {
        let Some(wing) = wing_of(relative) else { continue };
        let Some(position) = order.iter().position(|w| *w == wing) else { continue };
        for used in crate_paths(source) {
            if order.iter().position(|w| *w == used).is_some_and(|p| p > position) {
                problems.push(format!("{}: wing {wing} uses crate::{used}, a later wing", relative.display()));
            }
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

#[test]
fn each_wing_uses_only_the_wings_before_it() {
    let src = repo_root().join("analyzer/src");
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).expect("analyzer/src/lib.rs");
    let order = wing_order(&lib_rs);
    assert_eq!(
        order,
        ["huge_pages", "stage_times", "figures", "llm", "report", "output", "dependency", "findings", "study"],
        "the wings of lib.rs, in order"
    );
    let files: Vec<(PathBuf, String)> = rust_files(&src)
        .into_iter()
        .map(|path| {
            let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.strip_prefix(&src).expect("under analyzer/src").to_path_buf(), source)
        })
        .collect();
    assert!(files.len() > 30, "the analyzer's sources were found ({} files)", files.len());
    let problems = wing_violations(&order, &files);
    assert!(problems.is_empty(), "wings using later wings:\n{}", problems.join("\n"));
}

#[test]
fn no_function_of_the_analyzer_or_the_parquet_code_is_longer_than_the_limit() {
    let root = repo_root();
    let mut problems = Vec::new();
    let mut functions = 0;
    for dir in ["analyzer/src", "trace-io/src/parquet"] {
        for path in rust_files(&root.join(dir)) {
            if path.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let relative = path.strip_prefix(&root).expect("under the workspace").display().to_string();
            functions += function_lengths(&source).len();
            problems.extend(long_functions(&relative, &source, MAX_FUNCTION_LINES));
        }
    }
    assert!(functions > 500, "the functions were found ({functions})");
    assert!(
        problems.is_empty(),
        "non-test functions over {MAX_FUNCTION_LINES} lines (split them where their parts begin):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_length_check_counts_bodies_and_skips_literals_and_test_modules() {
    let body = "    let x = 1;\n".repeat(10);
    let source = format!(
        "/// fn in_a_comment() {{\nfn short(a: [u8; 2]) -> u8 {{\n    let s = \"}}\"; let c = '}}'; let r = r#\"{{\"#;\n{body}    a[0]\n}}\n\
         trait T {{ fn declared(&self); }}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}    }}\n}}\n\
         fn after<'a>(x: &'a str) -> &'a str {{ x }}\n"
    );
    let lengths = function_lengths(&source);
    // `short` spans lines 2 to 15; `after` is on line 32, after the test module's 14 lines.
    assert_eq!(lengths, [("short".to_string(), 2, 14), ("after".to_string(), 32, 1)]);
    assert_eq!(long_functions("f.rs", &source, 13), ["f.rs:2 short (14 lines)"]);
    assert!(long_functions("f.rs", &source, 14).is_empty());
}

#[test]
fn the_wing_check_finds_paths_and_groups_naming_a_later_wing() {
    let order: Vec<String> = ["figures", "report", "study"].map(String::from).to_vec();
    let files = vec![
        (PathBuf::from("figures/run.rs"), "use crate::study::Study;\n// crate::report in a comment\n".to_string()),
        (PathBuf::from("report.rs"), "use crate::{figures::run, study::{self}};\nlet s = \"crate::study\";".into()),
        (PathBuf::from("report/partial.rs"), "fn f() { crate::figures::run::x(); }".into()),
        (PathBuf::from("study.rs"), "use crate::report::Report;".into()),
    ];
    assert_eq!(
        wing_violations(&order, &files),
        [
            "figures/run.rs: wing figures uses crate::study, a later wing",
            "report.rs: wing report uses crate::study, a later wing"
        ]
    );
    assert_eq!(wing_order("//! doc\npub mod b;\n\npub mod a;\nmod private;\n"), ["b", "a"]);
}

/// Every `Result<…, String>` of `source` (a whole file) outside comments, literals and test modules, as
/// `file:line`. Only the last type argument counts: `Result<String, E>` is fine, `PyResult<String>` is not `Result`.
fn string_errors(file: &str, source: &str) -> Vec<String> {
    let text = without_test_modules(&blank_literals(source));
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find("Result<") {
        let at = from + offset;
        from = at + "Result<".len();
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        // The type arguments up to the matching `>`, split at the commas of their own level; the `>` of a `->`
        // inside them (a closure type) closes nothing.
        let (mut depth, mut argument_start, mut last_argument) = (1usize, from, "");
        for (index, &byte) in bytes.iter().enumerate().skip(from) {
            match byte {
                b'<' | b'(' | b'[' => depth += 1,
                b'>' if bytes[index - 1] == b'-' => {}
                b'>' | b')' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        last_argument = &text[argument_start..index];
                        break;
                    }
                }
                b',' if depth == 1 => argument_start = index + 1,
                _ => {}
            }
        }
        if argument_start > from && matches!(last_argument.trim(), "String" | "std::string::String") {
            found.push(format!("{file}:{}", text[..at].matches('\n').count() + 1));
        }
    }
    found
}

#[test]
fn the_analyzer_library_returns_typed_errors_not_strings() {
    let root = repo_root();
    let mut problems = Vec::new();
    let mut files = 0;
    for path in rust_files(&root.join("analyzer/src")) {
        if path.file_name().is_some_and(|n| n == "tests.rs") || path == root.join("analyzer/src/main.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let relative = path.strip_prefix(&root).expect("under the workspace").display().to_string();
        files += 1;
        problems.extend(string_errors(&relative, &source));
    }
    assert!(files > 50, "the library's files were read ({files})");
    assert!(
        problems.is_empty(),
        "`Result<…, String>` in the analyzer's library (give the module a thiserror enum whose messages read as \
         the strings did):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_string_error_check_finds_signatures_closures_and_aliases_only_outside_tests() {
    let source = "\
pub fn parse(text: &str) -> Result<u32, String> { todo!() }
fn nested(a: &str) -> Result<Vec<(&str, &str)>, String> { todo!() }
fn guard<T>(step: impl FnOnce() -> Result<T, String>) -> Result<T, Error> { todo!() }
type DrawResult<T> = Result<T, std::string::String>;
fn text() -> Result<String, ParseError> { todo!() }
fn python() -> PyResult<String> { todo!() }
fn named() -> Result<(), StringError> { todo!() }
fn io() -> std::io::Result<String> { todo!() }
// fn commented() -> Result<(), String>
const S: &str = \"Result<(), String>\";
#[cfg(test)]
mod tests {
    fn helper() -> Result<(), String> { Ok(()) }
}
";
    assert_eq!(string_errors("f.rs", source), ["f.rs:1", "f.rs:2", "f.rs:3", "f.rs:4"]);
}
