//! Which files are a run's traces: names that match the trace pattern (`%p`, `%h`, `%r` any
//! text, a `-PID` a process adds), modified since the run started, written by its processes.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Whether `name` is a trace file name of `pattern`: the pattern itself, or the pattern with the
/// `-PID` or `-PID-N` a process adds when the path holds another process's trace (a fixed path
/// in a forked child, a helper started by fork + exec, a later program of the same run).
pub fn matches_trace_name(pattern: &str, name: &str) -> bool {
    if matches_pattern(pattern, name) {
        return true;
    }
    let (stem_pattern, extension) = match pattern.strip_suffix(".json") {
        Some(stem) => (stem, ".json"),
        None => (pattern, ""),
    };
    let Some(stem) = name.strip_suffix(extension) else { return false };
    let pid_suffix = |tail: &str| {
        let parts: Vec<&str> = tail.split('-').collect();
        parts.len() <= 2 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    stem.match_indices('-').any(|(at, _)| pid_suffix(&stem[at + 1..]) && matches_pattern(stem_pattern, &stem[..at]))
}

/// Whether `name` matches a trace file-name pattern whose `%p`, `%h`, `%r` may be anything.
pub fn matches_pattern(pattern: &str, name: &str) -> bool {
    let mut glob = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('p' | 'h' | 'r') => glob.push('*'),
                Some('%') => glob.push('%'),
                Some(o) => {
                    glob.push('%');
                    glob.push(o);
                }
                None => glob.push('%'),
            }
        } else {
            glob.push(c);
        }
    }
    wildcard(glob.as_bytes(), name.as_bytes())
}

fn wildcard(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| wildcard(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && wildcard(rest, &s[1..]),
    }
}

/// Trace files this run wrote: those matching the pattern, modified since `since`, and written
/// by a process this run started (its `process.run_id`).
pub fn written_traces(pattern: &str, since: SystemTime, run_id: &str) -> Vec<PathBuf> {
    candidate_traces(pattern, since)
        .into_iter()
        .filter(|p| cublasguard_format::trace::read(p).is_ok_and(|t| t.process.run_id.as_deref() == Some(run_id)))
        .collect()
}

/// Files matching the pattern (with a `-PID` added or not), modified since `since`.
pub fn candidate_traces(pattern: &str, since: SystemTime) -> Vec<PathBuf> {
    let path = Path::new(pattern);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Some(file_pattern) = path.file_name().and_then(|f| f.to_str()) else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| matches_trace_name(file_pattern, n)))
        .filter(|e| e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_patterns_match_their_files() {
        assert!(matches_pattern("cublasguard-%h-%p.json", "cublasguard-node1-1234.json"));
        assert!(matches_pattern("t-%r.json", "t-3.json"));
        assert!(!matches_pattern("cublasguard-%h-%p.json", "other.json"));
        assert!(!matches_pattern("t.json", "t.json.tmp"));
        assert!(matches_pattern("t.json", "t.json"));
    }

    #[test]
    fn trace_names_with_a_pid_added_are_the_patterns_too() {
        for name in ["t.json", "t-123.json", "t-123-2.json"] {
            assert!(matches_trace_name("t.json", name), "{name}");
        }
        for name in ["t-.json", "t-x.json", "t-1-2-3.json", "t.json.tmp", "u-1.json", ".cgc-0123.tmp"] {
            assert!(!matches_trace_name("t.json", name), "{name}");
        }
        assert!(matches_trace_name("c-%h-%p.json", "c-node-7-7.json"));
        assert!(matches_trace_name("trace", "trace-7"));
        assert!(!matches_trace_name("trace", "trace-7.json"));
    }
}
