//! `cublasguard timeline`: recent calls and faults as Chrome Trace Event JSON (Perfetto,
//! chrome://tracing). Each process is a `pid`; each recent call a complete event (`X`, from
//! its entry to its return) on its thread's track, and on its stream's track too for calls that
//! name a stream; each fault an instant (`i`) on the same tracks; tracks are named by metadata
//! events (`M`).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::report::Loaded;

/// Stream tracks' ids: above any Linux thread id (pid_max is at most 2^22), within the 31 bits
/// every viewer reads.
const STREAM_TRACK_BASE: u64 = 1 << 30;

/// Where the timeline goes unless `-o` says: beside the first trace (`TRACE.timeline.json`),
/// or inside the folder named first.
pub fn default_output(first: &Path) -> PathBuf {
    if first.is_dir() {
        return first.join("cublasguard.timeline.json");
    }
    let stem = first.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    first.with_file_name(format!("{stem}.timeline.json"))
}

/// Writes `bytes` to `output` without ever writing through what is there: into a new file
/// beside it (created with `O_EXCL`, so never through a link planted under its name, with
/// `mode`), then renamed over `output`, which replaces a symbolic link there, never its target.
pub fn write_new_file(output: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let folder = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = output.file_name().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let mut attempt = 0u32;
    loop {
        let temp = folder.join(format!(".{}.{}-{attempt}.tmp", name.to_string_lossy(), std::process::id()));
        let opened = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&temp);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = file.write_all(bytes).and_then(|_| file.sync_all()).and_then(|_| std::fs::rename(&temp, output));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        return written;
    }
}

/// The permissions a timeline of `trace` gets: the trace's own, read and write bits only (a
/// timeline holds what its trace holds), 0600 when the trace's cannot be read.
pub fn mode_for(trace: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(trace).ok().filter(|m| m.is_file()).map(|m| m.permissions().mode() & 0o666).filter(|m| m & 0o600 == 0o600).unwrap_or(0o600)
}

/// The earliest moment any event of the traces starts at (ns since the Unix epoch).
fn base_ns(loaded: &[Loaded]) -> u64 {
    loaded
        .iter()
        .flat_map(|l| {
            let t = &l.trace;
            let calls = t.recent_calls.iter().map(|c| c.time_ns.saturating_sub(c.duration_ns));
            calls.chain(t.faults.iter().map(|f| f.time_ns)).chain(t.crash.iter().map(|c| c.time_ns))
        })
        .min()
        .unwrap_or(0)
}

/// The trace events. Times (`ts`, `dur`) are microseconds from the earliest event, kept in
/// `otherData.base_time_ns` (a string: it does not fit a double): microseconds since 1970 in a
/// double keep only a quarter of a microsecond, too coarse for calls a few hundred ns apart.
pub fn events(loaded: &[Loaded]) -> Value {
    let base = base_ns(loaded);
    let us = |ns: u64| ns.saturating_sub(base) as f64 / 1000.0;
    let mut events = Vec::new();
    for l in loaded {
        let t = &l.trace;
        let pid = t.process.pid;
        let program = t.process.argv.first().cloned().unwrap_or_else(|| format!("pid {pid}"));
        let label = match t.process.rank {
            Some(r) => format!("{program} (rank {r}, pid {pid})"),
            None => format!("{program} (pid {pid})"),
        };
        events.push(json!({"ph": "M", "name": "process_name", "ts": 0, "pid": pid, "tid": 0, "args": {"name": label}}));
        let mut threads: Vec<u32> =
            t.recent_calls.iter().map(|c| c.thread).chain(t.faults.iter().map(|f| f.thread)).chain(t.crash.iter().map(|c| c.thread)).collect();
        threads.sort_unstable();
        threads.dedup();
        for &tid in &threads {
            let named = t.faults.iter().find(|f| f.thread == tid).and_then(|f| f.thread_name.clone());
            let name = match named {
                Some(n) => format!("{n} (thread {tid})"),
                None if tid == pid => format!("main thread {tid}"),
                None => format!("thread {tid}"),
            };
            events.push(json!({"ph": "M", "name": "thread_name", "ts": 0, "pid": pid, "tid": tid, "args": {"name": name}}));
        }
        let call_stream = |c: &cublasguard_format::trace::RecentCall| c.args.address("stream").map(cublasguard_format::trace::hex);
        let mut streams: Vec<String> = t.recent_calls.iter().filter_map(call_stream).chain(t.faults.iter().filter_map(|f| f.stream.clone())).collect();
        streams.sort();
        streams.dedup();
        let stream_tid = |s: &str| STREAM_TRACK_BASE + streams.iter().position(|x| x == s).unwrap_or(0) as u64;
        for s in &streams {
            let name = if s == "0x0" { "stream 0x0 (the default stream)".to_string() } else { format!("stream {s}") };
            events.push(json!({"ph": "M", "name": "thread_name", "ts": 0, "pid": pid, "tid": stream_tid(s), "args": {"name": name}}));
        }
        for c in &t.recent_calls {
            let start = c.time_ns.saturating_sub(c.duration_ns);
            let args = json!({"seq": c.seq, "status": c.status, "thread": c.thread, "scanned": c.scanned, "args": c.args});
            let event = |tid: u64| json!({"ph": "X", "cat": "call", "name": c.api, "pid": pid, "tid": tid, "ts": us(start), "dur": c.duration_ns as f64 / 1000.0, "args": args});
            events.push(event(c.thread as u64));
            if let Some(s) = call_stream(c) {
                events.push(event(stream_tid(&s)));
            }
        }
        for (i, f) in t.faults.iter().enumerate() {
            let kind = l.unknown_kinds.get(&i).map(String::as_str).unwrap_or(f.kind.name());
            let args = json!({"seq": f.seq, "api": f.api, "kind": kind, "message": f.message, "status": f.status_name});
            let name = format!("{kind}: {}", f.api);
            let event = |tid: u64| json!({"ph": "i", "s": "t", "cat": "fault", "name": name, "pid": pid, "tid": tid, "ts": us(f.time_ns), "args": args});
            events.push(event(f.thread as u64));
            if let Some(s) = &f.stream {
                events.push(event(stream_tid(s)));
            }
        }
        if let Some(c) = &t.crash {
            let args = json!({"signal": c.signal, "thread": c.thread});
            events.push(json!({"ph": "i", "s": "p", "cat": "crash", "name": format!("crash: {}", c.name), "pid": pid, "tid": c.thread, "ts": us(c.time_ns), "args": args}));
        }
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"base_time_ns": base.to_string(), "generator": format!("cublasguard {}", env!("CARGO_PKG_VERSION"))},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cublasguard_format::trace::{self, RecentCall, Trace};

    fn call(seq: u64, time_ns: u64, duration_ns: u64, stream: Option<u64>) -> RecentCall {
        let mut args = trace::Args::default();
        if let Some(s) = stream {
            args.insert("stream", trace::Arg::Address(s));
        }
        RecentCall { seq, api: "cudaLaunchKernel".into(), status: 0, time_ns, duration_ns, thread: 7, args, scanned: false, captured: false }
    }

    #[test]
    fn each_call_is_a_complete_event_from_its_start_on_its_thread_and_its_stream() {
        let mut t = Trace::default();
        t.process.pid = 7;
        t.recent_calls = vec![call(1, 1_000_000_000_000_002_000, 1_500, None), call(2, 1_000_000_000_000_010_000, 250, Some(5))];
        let v = events(&[Loaded::new("t.json".into(), trace::Parsed { trace: t, ..Default::default() })]);
        assert_eq!(v["otherData"]["base_time_ns"], "1000000000000000500", "the first call's start");
        let x: Vec<&Value> = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 3, "the second call twice: its thread and its stream");
        assert_eq!((x[0]["ts"].as_f64(), x[0]["dur"].as_f64(), x[0]["tid"].as_u64()), (Some(0.0), Some(1.5), Some(7)));
        assert_eq!((x[1]["ts"].as_f64(), x[1]["dur"].as_f64()), (Some(9.25), Some(0.25)));
        assert_eq!(x[2]["tid"].as_u64(), Some(STREAM_TRACK_BASE));
        let names: Vec<&str> = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "M").filter_map(|e| e["args"]["name"].as_str()).collect();
        assert!(names.contains(&"main thread 7") && names.contains(&"stream 0x5"), "{names:?}");
    }

    #[test]
    fn the_default_output_sits_beside_the_first_trace() {
        assert_eq!(default_output(Path::new("/runs/trace-12.json")), Path::new("/runs/trace-12.timeline.json"));
        assert_eq!(default_output(Path::new("trace")), Path::new("trace.timeline.json"));
        assert_eq!(default_output(Path::new("/")), Path::new("/cublasguard.timeline.json"));
    }
}
