//! What the command hands the user back: an error with the exit status it maps to, and text on
//! stdout, where a reader that went away (a closed pipe: `| head`) is not an error.

use std::io::Write;

/// An error for the user, with the exit status it maps to.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: i32,
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> Self {
        Self { message: message.into(), code: 2 }
    }
}

/// Writes `text` to stdout and flushes it; a closed pipe ends the output quietly.
pub fn print(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::usage(format!("writing the report: {e}"))),
    }
}
