//! `cublasguard timeline`: recent calls and faults as Chrome Trace Event JSON (Perfetto,
//! chrome://tracing): one track per thread, one per stream for faults, faults as instants.

use cublasguard::trace::Trace;
use serde_json::{json, Value};

pub fn events(traces: &[Trace]) -> Value {
    let mut events = Vec::new();
    for t in traces {
        let pid = t.process.pid;
        let label = match t.process.rank {
            Some(r) => format!("{} (rank {r})", t.process.argv.first().cloned().unwrap_or_default()),
            None => t.process.argv.first().cloned().unwrap_or_else(|| format!("pid {pid}")),
        };
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}));
        let mut threads: Vec<u32> = t.recent_calls.iter().map(|c| c.thread).chain(t.faults.iter().map(|f| f.thread)).collect();
        threads.sort_unstable();
        threads.dedup();
        for tid in &threads {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": format!("thread {tid}")}}));
        }
        let mut streams: Vec<String> = t.faults.iter().filter_map(|f| f.stream.clone()).collect();
        streams.sort();
        streams.dedup();
        // Stream tracks get ids above any thread id.
        let stream_tid = |s: &str| 1u64 << 32 | streams.iter().position(|x| x == s).unwrap_or(0) as u64;
        for s in &streams {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": stream_tid(s), "args": {"name": format!("stream {s}")}}));
        }
        for c in &t.recent_calls {
            events.push(json!({
                "ph": "i", "s": "t", "cat": "call", "name": c.api, "pid": pid, "tid": c.thread,
                "ts": c.time_ns as f64 / 1000.0,
                "args": {"seq": c.seq, "status": c.status, "args": c.args},
            }));
        }
        for f in &t.faults {
            let args = json!({"seq": f.seq, "api": f.api, "message": f.message, "status": f.status_name});
            let name = format!("{}: {}", f.kind.name(), f.api);
            events.push(json!({"ph": "i", "s": "p", "cat": "fault", "name": name, "pid": pid, "tid": f.thread, "ts": f.time_ns as f64 / 1000.0, "args": args}));
            if let Some(s) = &f.stream {
                events.push(json!({"ph": "i", "s": "t", "cat": "fault", "name": name, "pid": pid, "tid": stream_tid(s), "ts": f.time_ns as f64 / 1000.0, "args": args}));
            }
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}
