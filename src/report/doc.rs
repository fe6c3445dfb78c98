//! The report's writer: one text written as plain text for a terminal or as CommonMark for an
//! issue or a chat, by paragraph, heading and item.

use std::fmt::Write as _;

use super::markdown::{md_block_safe, md_code, md_text};

/// The report's text, as plain text or as CommonMark.
pub(super) struct Doc {
    pub(super) md: bool,
    pub(super) out: String,
}

impl Doc {
    /// Text from a trace or from advice.
    pub(super) fn t(&self, s: &str) -> String {
        if self.md {
            md_text(s)
        } else {
            s.to_string()
        }
    }
    /// Code: a call, a path, a command.
    pub(super) fn c(&self, s: &str) -> String {
        if self.md {
            md_code(s)
        } else {
            s.to_string()
        }
    }
    /// A paragraph (markdown) or a line after a blank one (text).
    pub(super) fn para(&mut self, line: &str) {
        let line = if self.md { md_block_safe(line) } else { line.to_string() };
        let _ = writeln!(self.out, "\n{line}");
    }
    /// A heading: `## ...` in markdown.
    pub(super) fn heading(&mut self, markdown: &str, text: &str) {
        if self.md {
            let _ = writeln!(self.out, "\n## {markdown}\n");
        } else {
            let _ = writeln!(self.out, "\n{text}");
        }
    }
    /// A line of a fault's entry: a list item in markdown.
    pub(super) fn item(&mut self, line: &str) {
        if self.md {
            let _ = writeln!(self.out, "- {}", md_block_safe(line));
        } else {
            let _ = writeln!(self.out, "    {line}");
        }
    }
    /// A line under an item.
    pub(super) fn sub_item(&mut self, line: &str) {
        if self.md {
            let _ = writeln!(self.out, "  - {}", md_block_safe(line));
        } else {
            let _ = writeln!(self.out, "        {line}");
        }
    }
}
