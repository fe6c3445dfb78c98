//! Text from a trace or from advice as CommonMark: markup characters escaped, backtick pairs kept
//! as code spans, and lines that cannot open a block of their own.

/// `text` as CommonMark inline text: characters that would start markup are escaped, pairs of
/// backticks stay code spans, line breaks become spaces.
pub(super) fn md_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('`') {
        out.push_str(&md_escape(&rest[..i]));
        let after = &rest[i + 1..];
        match after.find('`') {
            Some(j) if j > 0 => {
                out.push_str(&md_code(&after[..j]));
                rest = &after[j + 1..];
            }
            _ => {
                out.push_str("\\`");
                rest = after;
            }
        }
    }
    out.push_str(&md_escape(rest));
    out
}

fn md_escape(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, &c) in chars.iter().enumerate() {
        // An underscore inside a word never starts emphasis; one at a word's edge may.
        let edge = |j: Option<usize>| j.and_then(|j| chars.get(j)).is_none_or(|n| !n.is_alphanumeric());
        match c {
            '\n' | '\r' => out.push(' '),
            '\\' | '`' | '*' | '[' | ']' | '<' | '>' | '&' | '~' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '_' if edge(i.checked_sub(1)) || edge(Some(i + 1)) => out.push_str("\\_"),
            _ => out.push(c),
        }
    }
    out
}

/// A CommonMark code span holding `text` exactly.
pub(super) fn md_code(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    if text.is_empty() {
        return String::new();
    }
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = text.starts_with('`') || text.ends_with('`') || (text.starts_with(' ') && text.ends_with(' ') && !text.trim().is_empty());
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A line of inline markdown that cannot open a block of its own (a heading, a quote, a list,
/// a thematic break) whatever text it starts with.
pub(super) fn md_block_safe(line: &str) -> String {
    let line = line.trim_start();
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    match line.chars().next() {
        Some('#' | '>' | '-' | '+' | '=' | '|') => format!("\\{line}"),
        Some(_) if digits > 0 && matches!(line[digits..].chars().next(), Some('.' | ')')) => format!("{}\\{}", &line[..digits], &line[digits..]),
        _ => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escapes_what_would_be_markup_and_keeps_code_spans() {
        assert_eq!(
            md_text("see `cublasguard doctor` for __init__ <redacted> *x* [1]"),
            "see `cublasguard doctor` for \\_\\_init\\_\\_ \\<redacted\\> \\*x\\* \\[1\\]"
        );
        assert_eq!(md_text("clip_grad_norm_ and nonfinite_input"), "clip_grad_norm\\_ and nonfinite_input");
        assert_eq!(md_text("an odd ` backtick"), "an odd \\` backtick");
        assert_eq!(md_code("a`b"), "``a`b``");
        assert_eq!(md_code("`x"), "`` `x ``");
        assert_eq!(md_block_safe("# not a heading"), "\\# not a heading");
        assert_eq!(md_block_safe("12. not a list"), "12\\. not a list");
        assert_eq!(md_block_safe("12 faults"), "12 faults");
    }
}
