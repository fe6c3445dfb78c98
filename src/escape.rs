//! Text from a trace or a dump made safe to show: control characters and Unicode's
//! bidirectional marks escaped for a terminal, and a path quoted as one shell word for a
//! command the output offers.

/// Text for a terminal: control characters from a trace (escape sequences, carriage returns)
/// are shown as `\u{..}`, never sent raw; the report's own newlines and tabs stay.
pub fn escape_controls(text: &str) -> String {
    escape(text, false)
}

/// `escape_controls` for one field from a trace or a dump (a name, a message) shown inside a
/// line: its newlines and tabs are escaped too, so it cannot start a line of its own.
pub fn escape_field(text: &str) -> String {
    escape(text, true)
}

/// Whether a character changes how the text around it is shown rather than showing itself:
/// control characters, the line and paragraph separators, and Unicode's bidirectional marks,
/// embeddings, overrides and isolates (which can make a line read other than it is).
fn hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(text: &str, all: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c) && (all || (c != '\n' && c != '\t')) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A path as one shell word: quoted when it holds anything a shell would split or expand.
pub fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_from_a_trace_never_reach_the_terminal_raw() {
        let shown = escape_controls("bad\u{1b}[2J\rname\u{7}\u{9b}1m\nnext\tcol");
        assert_eq!(shown, "bad\\u{1b}[2J\\u{d}name\\u{7}\\u{9b}1m\nnext\tcol");
        assert!(!shown.chars().any(|c| c.is_control() && c != '\n' && c != '\t'));
    }

    #[test]
    fn paths_in_offered_commands_are_one_shell_word() {
        assert_eq!(shell_word("/tmp/d/x.safetensors"), "/tmp/d/x.safetensors");
        assert_eq!(shell_word("/tmp/my dumps/it's.safetensors"), "'/tmp/my dumps/it'\\''s.safetensors'");
    }
}
