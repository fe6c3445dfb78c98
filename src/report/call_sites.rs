//! Where a call came from, in the user's terms: their own Python frame (a file is theirs by
//! where it lies), else the program's own native frame, with its source line and the user's
//! frames that called it; and a frame, or where a host thread waits, in one line.

use std::path::Path;

use cublasguard_format::trace::{self, BlockedThread, Fault};

use crate::regular_file::open_regular;

/// Where the call came from: the user's own Python frame, else the program's own native frame,
/// else the function itself.
pub fn call_site(f: &Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> String {
    user_place(f, exe, python).map(|(place, _)| place).unwrap_or_else(|| f.api.clone())
}

/// Whether a Python file is the user's, by where it lies, not by what its folders are called:
/// not one of the interpreter's own frozen or generated modules (`<frozen ...>`, `<string>`),
/// and not inside the folders the trace says the process's Python keeps its standard library
/// and installed packages in (`python`: `PythonPaths::holds`). A trace without them (an older
/// guard's) is read by the folders' names: not inside a `site-packages` or `dist-packages`
/// folder, nor a `pythonX.Y` folder directly inside a `lib` or `lib64`. Either way a folder of
/// the user's named `torch` or `python3` is the user's.
pub(crate) fn is_user_file(file: &str, python: Option<&trace::PythonPaths>) -> bool {
    if file.is_empty() || file.starts_with('<') {
        return false;
    }
    if let Some(paths) = python {
        return !paths.holds(file);
    }
    let parts: Vec<&str> = file.split('/').collect();
    let folders = &parts[..parts.len().saturating_sub(1)];
    let installed = folders.iter().any(|p| matches!(*p, "site-packages" | "dist-packages"));
    let stdlib = folders.windows(2).any(|w| {
        matches!(w[0], "lib" | "lib64")
            && w[1].strip_prefix("python").and_then(|v| v.split_once('.')).is_some_and(|(major, minor)| {
                !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()) && !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit())
            })
    });
    !installed && !stdlib
}

/// "model.py:57 in forward: h = self.fc1(x)": the innermost Python frame in the user's own
/// code, with its source line when the file can be read. A program without Python frames: the
/// innermost native frame in the program's own executable (`exe`), with its source line when
/// it was built with debug information.
pub fn user_line(fault: &trace::Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> Option<String> {
    let (place, source) = user_place(fault, exe, python)?;
    Some(match source {
        Some(line) => format!("{place}: {line}"),
        None => place,
    })
}

/// The user's own frame ("model.py:57 in forward") and its source line, if it can be read.
pub(super) fn user_place(fault: &trace::Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> Option<(String, Option<String>)> {
    let Some(frame) = fault.python_stack.iter().find(|f| is_user_file(&f.file, python)) else {
        let exe = exe?;
        let native = fault.backtrace.iter().find(|l| l.contains(&format!("({exe}+")))?;
        return Some(native_user_place(native));
    };
    let source = usize::try_from(frame.line).ok().and_then(|n| source_line(Path::new(&frame.file), n));
    Some((format!("{}:{} in {}", frame.file, frame.line, frame.function), source))
}

/// The user's frames that called the innermost one (`user_place`), innermost first: the run of
/// frames in the user's own files that follows it, up to the first one outside them, at most
/// `MAX_CALLERS`. A small helper's line alone hides the mistake at its caller.
pub(super) fn user_callers(fault: &trace::Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> Vec<(String, Option<String>)> {
    const MAX_CALLERS: usize = 2;
    if let Some(first) = fault.python_stack.iter().position(|f| is_user_file(&f.file, python)) {
        return fault.python_stack[first + 1..]
            .iter()
            .take_while(|f| is_user_file(&f.file, python))
            .take(MAX_CALLERS)
            .map(|frame| {
                let source = usize::try_from(frame.line).ok().and_then(|n| source_line(Path::new(&frame.file), n));
                (format!("{}:{} in {}", frame.file, frame.line, frame.function), source)
            })
            .collect();
    }
    let Some(exe) = exe else { return Vec::new() };
    let mine = |l: &String| l.contains(&format!("({exe}+"));
    let Some(first) = fault.backtrace.iter().position(mine) else { return Vec::new() };
    fault.backtrace[first + 1..].iter().take_while(|l| mine(l)).take(MAX_CALLERS).map(|l| native_user_place(l)).collect()
}

/// ("/src/mlp.c:57 in linear_forward", its source line) from "linear_forward at /src/mlp.c:57
/// (/bin/mlp+0x1634) [0x...]".
fn native_user_place(frame: &str) -> (String, Option<String>) {
    let head = frame.split(" (").next().unwrap_or(frame);
    match head.split_once(" at ") {
        Some((function, place)) => {
            let source = place.rsplit_once(':').and_then(|(file, line)| {
                let n: usize = line.parse().ok()?;
                source_line(Path::new(file), n)
            });
            (format!("{place} in {function}"), source)
        }
        None => (format!("{head} in {}", frame.split(" (").nth(1).and_then(|r| r.split('+').next()).unwrap_or("the program")), None),
    }
}

/// The most of a source file that is read for one line of it (a trace names the file, and a
/// trace can be hostile).
pub const SOURCE_CAP: u64 = 16 << 20;

/// Line `n` (from 1) of a source file, trimmed, read up to that line only; `None` when the file
/// is not a regular file of at most [`SOURCE_CAP`] bytes, has no such line, or it is blank.
fn source_line(path: &Path, n: usize) -> Option<String> {
    use std::io::{BufRead, Read};
    let file = open_regular(path, SOURCE_CAP).ok()?;
    let mut reader = std::io::BufReader::new(file.take(SOURCE_CAP));
    let mut line = Vec::new();
    for _ in 0..n.checked_sub(1)? {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
    }
    line.clear();
    if reader.read_until(b'\n', &mut line).ok()? == 0 {
        return None;
    }
    let text = String::from_utf8_lossy(&line).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The first frame of a backtrace that names a line, as "file:line in function" (else the
/// first frame as it is).
pub fn first_line(backtrace: &[String]) -> Option<String> {
    let frame = backtrace.iter().find(|f| f.contains(" at ")).or(backtrace.first())?;
    let head = frame.split(" (").next().unwrap_or(frame);
    Some(match head.split_once(" at ") {
        Some((function, place)) => format!("{place} in {function}"),
        None => head.to_string(),
    })
}

/// Where a host thread waits: its innermost Python frame in the user's own code (a Python
/// program waits inside torch's `synchronize`, called from the user's line), else its innermost
/// Python frame, else its native call site; "file:line in function".
pub fn wait_line(w: &BlockedThread, python: Option<&cublasguard_format::trace::PythonPaths>) -> Option<String> {
    python_or_native_line(&w.python_stack, &w.backtrace, python, true)
}

/// "file:line in function" of a call: its innermost Python frame in the user's own code (or,
/// with `any_python`, its innermost Python frame when none is), else its native call site.
pub fn python_or_native_line(
    frames: &[cublasguard_format::trace::PythonFrame],
    backtrace: &[String],
    python: Option<&cublasguard_format::trace::PythonPaths>,
    any_python: bool,
) -> Option<String> {
    let frame = frames.iter().find(|f| is_user_file(&f.file, python)).or(frames.first().filter(|_| any_python));
    match frame {
        Some(f) => Some(format!("{}:{} in {}", f.file, f.line, f.function)),
        None => first_line(backtrace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_file_is_the_users_by_where_it_lies_not_by_its_folders_names() {
        for users in ["/home/me/torch/train.py", "/home/me/lib/python3/train.py", "/srv/python3.12/model.py", "train.py", "/home/me/site-packages-notes/x.py"] {
            assert!(is_user_file(users, None), "{users} is the user's");
        }
        for not_users in [
            "/usr/lib/python3.12/site-packages/torch/nn/functional.py",
            "/venv/lib/python3.12/site-packages/transformers/models/bert.py",
            "/usr/lib/python3/dist-packages/numpy/core/numeric.py",
            "/usr/lib/python3.12/threading.py",
            "/opt/conda/lib64/python3.11/runpy.py",
            "<frozen runpy>",
            "<string>",
            "",
        ] {
            assert!(!is_user_file(not_users, None), "{not_users} is not the user's");
        }
    }
}
