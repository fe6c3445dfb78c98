//! What `cublasguard report` leads a hang with (`gpu_hang`, issue 50): the kernel each stuck
//! process waits in, the call queued behind it and where its host waits; over several traces
//! (a run's ranks), which ranks wait in the same launch of a kernel and which never launched it.

use cublasguard_format::trace::{FaultKind, Trace};

use super::call_sites::{python_or_native_line, wait_line};
use super::load::Loaded;

/// A process as a person names it in a run: its rank, else its pid.
fn who(t: &Trace) -> String {
    match t.process.rank {
        Some(r) => format!("rank {r}"),
        None => format!("pid {}", t.process.pid),
    }
}

/// "1st", "2nd", "412th".
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// One stuck stream of one process.
struct Stuck<'a> {
    trace: &'a Trace,
    kernel: Option<(&'a str, u64)>,
    /// Where the program launched that kernel ("file:line in function"), when it was kept.
    launched_at: Option<String>,
    line: String,
}

/// How many times `t` launched `kernel`, as far as its trace shows: the highest ordinal its
/// recent launches of it carry (counted from the start), else how many of them are recent.
fn launches_of(t: &Trace, kernel: &str) -> u64 {
    let launches = || t.recent_calls.iter().filter(|c| c.args.label("kernel") == Some(kernel));
    launches().filter_map(|c| c.args.int("launch")).max().map_or_else(|| launches().count() as u64, |n| n.max(0) as u64)
}

/// The lines that lead the report of traces holding a `gpu_hang` (none without).
pub fn lines(loaded: &[Loaded]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stuck = Vec::new();
    for l in loaded {
        for f in l.trace.faults.iter().filter(|f| f.kind == FaultKind::GpuHang) {
            let Some(h) = &f.hang else { continue };
            let stream = f.stream.as_deref().unwrap_or("?");
            // The stuck call's own line: its user's Python frame when it kept one, else native.
            let paths = l.trace.environment.python_paths.as_ref();
            let at = python_or_native_line(&f.python_stack, &f.backtrace, paths, false).map(|l| format!(" at {l}")).unwrap_or_default();
            let launched_at = h.kernel.as_ref().and_then(|k| python_or_native_line(&[], &k.backtrace, paths, false));
            let mut line = match &h.kernel {
                // A slow kernel, not a hang: what waited, and that it went on.
                Some(k) if h.completed_later => format!(
                    "Slow, not hung: {} waited at least {} s in kernel {} (call #{}, its {} launch of it, on stream {stream}{}) before {} #{}{at}, then its work completed",
                    who(&l.trace),
                    h.stalled_s,
                    k.kernel,
                    k.seq,
                    ordinal(h.kernel_ordinal.unwrap_or(1)),
                    launched_at.as_ref().map(|l| format!(", made at {l}")).unwrap_or_default(),
                    f.api,
                    f.seq,
                ),
                None if h.completed_later => {
                    format!("Slow, not hung: {}'s {} #{}{at} on stream {stream} did not complete for at least {} s, then did", who(&l.trace), f.api, f.seq, h.stalled_s)
                }
                Some(k) => format!(
                    "Hung: {} is stuck in kernel {} (call #{}, grid [{}, {}, {}], its {} launch of it, on stream {stream}{}), launched after call #{} and before {} #{}{at}, which is queued behind it and has not completed for {} s",
                    who(&l.trace),
                    k.kernel,
                    k.seq,
                    k.grid[0],
                    k.grid[1],
                    k.grid[2],
                    ordinal(h.kernel_ordinal.unwrap_or(1)),
                    launched_at.as_ref().map(|l| format!(", made at {l}")).unwrap_or_default(),
                    h.last_landed.unwrap_or(0),
                    f.api,
                    f.seq,
                    h.stalled_s
                ),
                None => format!(
                    "Hung: {}'s {} #{}{at} on stream {stream} has not completed for {} s (no kernel launched before it on the stream is recorded)",
                    who(&l.trace),
                    f.api,
                    f.seq,
                    h.stalled_s
                ),
            };
            if h.completed_later {
                line.push_str(" (raise CUBLASGUARD_HANG_TIMEOUT if such waits are expected).");
                out.push(line);
                continue;
            }
            match h.blocked_threads.first() {
                Some(w) => line.push_str(&format!(
                    "; the host waits in {} #{} (thread {}){}",
                    w.api,
                    w.seq,
                    w.thread,
                    wait_line(w, l.trace.environment.python_paths.as_ref()).map(|l| format!(" at {l}")).unwrap_or_default()
                )),
                None if h.found_by == "exit" => line.push_str("; the process exited without waiting for it"),
                None => line.push_str("; no host thread was inside a CUDA synchronisation"),
            }
            line.push('.');
            out.push(line.clone());
            stuck.push(Stuck { trace: &l.trace, kernel: h.kernel.as_ref().map(|k| (k.kernel.as_str(), h.kernel_ordinal.unwrap_or(1))), launched_at, line });
        }
    }
    if loaded.len() > 1 {
        out.extend(ranks(loaded, &stuck));
    }
    out
}

/// Which processes wait in the same launch of a kernel, and which never launched it.
fn ranks(loaded: &[Loaded], stuck: &[Stuck]) -> Vec<String> {
    let mut keys: Vec<(&str, u64)> = stuck.iter().filter_map(|s| s.kernel).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::new();
    for (kernel, n) in keys {
        let waiting: Vec<&Stuck> = stuck.iter().filter(|s| s.kernel == Some((kernel, n))).collect();
        let launched_at = waiting.iter().find_map(|s| s.launched_at.as_ref()).map(|l| format!(", made at {l}")).unwrap_or_default();
        let mut line = format!(
            "{} wait in {kernel} ({} {} launch of it{launched_at})",
            join(waiting.iter().map(|s| who(s.trace))),
            if waiting.len() > 1 { "their" } else { "its" },
            ordinal(n)
        );
        let waiting: Vec<&Trace> = waiting.iter().map(|s| s.trace).collect();
        for l in loaded.iter().filter(|l| !waiting.iter().any(|t| std::ptr::eq(*t, &l.trace))) {
            let t = &l.trace;
            let launched = launches_of(t, kernel);
            let last = t.recent_calls.iter().max_by_key(|c| c.seq).map(|c| format!("{} #{}", c.api, c.seq)).unwrap_or_else(|| "none recorded".into());
            let elsewhere = stuck.iter().find(|s| std::ptr::eq(s.trace, t) && s.kernel != Some((kernel, n)));
            if launched < n {
                line.push_str(&format!(
                    "; {} never launched its {}: its last call was {last}{}",
                    who(t),
                    ordinal(n),
                    match elsewhere {
                        Some(s) => format!(", and it hangs elsewhere ({})", s.line.trim_start_matches("Hung: ").trim_end_matches('.')),
                        None if t.crash.is_some() => ", and it crashed".to_string(),
                        None => " (it did not hang: it took another branch, or died)".to_string(),
                    }
                ));
            } else {
                line.push_str(&format!("; {} launched it and went on: its last call was {last}", who(t)));
            }
        }
        line.push('.');
        out.push(line);
    }
    out
}

/// "rank 0, rank 1 and rank 3".
fn join(names: impl Iterator<Item = String>) -> String {
    let names: Vec<String> = names.collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_read_as_english() {
        assert_eq!([1, 2, 3, 4, 11, 12, 13, 21, 412].map(ordinal), ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "412th"]);
    }
}
