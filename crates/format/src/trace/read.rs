//! Reading a trace: any file a guard wrote, of this format version or an older one (brought
//! up to date), and why a file is not one.

use super::*;

/// Why a file could not be read as a trace.
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    /// Names itself a cublasguard trace but is not complete JSON (cut short), or its fields do
    /// not have the types of this build's format version.
    NotJson(serde_json::Error),
    /// Another document: other JSON (a report, a timeline, a config file) or no JSON at all.
    Foreign(String),
}

impl ReadError {
    /// The file is some other document, not a trace of any kind: a folder of traces may hold
    /// such files beside them (a report's JSON, a timeline, a config file).
    pub fn is_foreign(&self) -> bool {
        matches!(self, Self::Foreign(_))
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::NotJson(e) => write!(f, "not a complete JSON trace ({e})"),
            Self::Foreign(why) => write!(f, "not a cublasguard trace: {why}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// A trace as far as this build could read it, and what it could not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    pub trace: Trace,
    /// For a person: what was left out and why (a newer format, kinds or fields this build does
    /// not know), naming the cublasguard that wrote the trace. Empty for a trace this build
    /// reads whole.
    pub notes: Vec<String>,
    /// The faults (by index in `trace.faults`) whose kind this build does not know: their kind
    /// is `FaultKind::Unknown`, their name as the trace spells it is here.
    pub unknown_kinds: BTreeMap<usize, String>,
    /// Faults stored in the trace that could not be read at all (a newer format), left out of
    /// `trace.faults`.
    pub unreadable_faults: u64,
}

impl Parsed {
    /// The fault's kind as the trace names it (its own spelling for a kind this build does not
    /// know).
    pub fn kind_name(&self, index: usize) -> &str {
        match self.unknown_kinds.get(&index) {
            Some(raw) => raw,
            None => self.trace.faults.get(index).map(|f| f.kind.name()).unwrap_or("unknown"),
        }
    }
}

/// Parses a trace, rejecting other JSON documents by name. See `parse_lenient`.
pub fn parse(text: &str) -> Result<Trace, ReadError> {
    parse_lenient(text).map(|p| p.trace)
}

/// Parses a trace, reading a newer one as far as this build can: a fault kind it does not know
/// becomes `FaultKind::Unknown` (its name kept), fields it does not know are left out, and in a
/// newer format version (or from a newer guard) a section or a fault it cannot read is left
/// out; each is said in `notes`, with the version of the cublasguard that wrote the trace. A
/// trace of this version that does not fit its own format is an error, as is a newer one whose
/// faults cannot be read at all.
pub fn parse_lenient(text: &str) -> Result<Parsed, ReadError> {
    use serde_json::Value;
    // A trace of this format version, by this build or an older one, is read straight into its
    // types: the JSON tree that reading a newer one needs costs ten times the text and more (a
    // trace of 20,000 faults is tens of MB).
    if let Ok(mut trace) = serde_json::from_str::<Trace>(text) {
        if trace.format == FORMAT && trace.version == VERSION && !newer_than_this_build(&trace.guard.version) {
            trace.faults.sort_by_key(|f| f.seq);
            return Ok(Parsed { trace, ..Default::default() });
        }
    }
    let mut value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        // Cut short, most likely: say so when it claims to be a trace.
        Err(e) if text.contains(FORMAT) => return Err(ReadError::NotJson(e)),
        Err(e) => return Err(ReadError::Foreign(format!("not JSON ({e})"))),
    };
    match value.get("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(Value::String(other)) => return Err(ReadError::Foreign(format!("format is '{}'", other.escape_debug()))),
        Some(other) => return Err(ReadError::Foreign(format!("\"format\" is not a string but {}", json_kind(other)))),
        None => return Err(ReadError::Foreign("no \"format\" field".into())),
    }
    let version = match value.get("version") {
        Some(v) => v.as_u64().ok_or_else(|| ReadError::Foreign(format!("\"version\" is not a whole number but {}", json_kind(v))))?,
        None => return Err(ReadError::Foreign("no \"version\" field".into())),
    };
    if version < OLDEST_VERSION as u64 {
        return Err(ReadError::Foreign(format!("format version {version}; this build reads {OLDEST_VERSION} to {VERSION}")));
    }
    if version < 2 {
        rename_version_1_arguments(&mut value);
    }
    let writer = value.pointer("/guard/version").and_then(Value::as_str).filter(|v| !v.is_empty()).map(String::from);
    // Kinds this build does not know: a placeholder it knows for now, the fault's kind set to
    // Unknown once it is read.
    let mut raw_kinds: BTreeMap<usize, String> = BTreeMap::new();
    if let Some(faults) = value.get_mut("faults").and_then(Value::as_array_mut) {
        faults.sort_by_key(|f| f.get("seq").and_then(Value::as_u64).unwrap_or(0));
        for (i, fault) in faults.iter_mut().enumerate() {
            if let Some(Value::String(kind)) = fault.get("kind") {
                if FaultKind::from_name(kind).is_none() {
                    raw_kinds.insert(i, kind.clone());
                    fault["kind"] = Value::String(FaultKind::ApiError.name().into());
                }
            }
        }
    }
    let newer = version > VERSION as u64 || writer.as_deref().is_some_and(newer_than_this_build);
    let (mut trace, kept, broken) = match Trace::deserialize(&value) {
        Ok(t) => {
            let kept = value.get("faults").and_then(Value::as_array).map(|a| (0..a.len()).collect()).unwrap_or_default();
            (t, kept, Vec::new())
        }
        Err(e) if !newer && raw_kinds.is_empty() => return Err(ReadError::NotJson(e)),
        Err(_) => in_parts(&value, version as u32)?,
    };
    let stored = value.get("faults").and_then(Value::as_array).map_or(0, Vec::len);
    let mut parsed = Parsed { unreadable_faults: (stored - kept.len()) as u64, ..Default::default() };
    for (index, original) in kept.iter().enumerate() {
        if let Some(raw) = raw_kinds.remove(original) {
            trace.faults[index].kind = FaultKind::Unknown;
            parsed.unknown_kinds.insert(index, raw);
        }
    }
    let unknown_fields = unknown_fields_of(&value, &trace, &kept);
    // One note, naming everything this build left out.
    let mut left_out = Vec::new();
    if version > VERSION as u64 {
        left_out.push(format!("the trace is format version {version} and this build reads version {VERSION}"));
    }
    if !parsed.unknown_kinds.is_empty() {
        let mut names: Vec<&str> = parsed.unknown_kinds.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let names: Vec<String> = names.iter().map(|n| format!("'{}'", n.escape_debug())).collect();
        left_out.push(format!("{} fault(s) of a kind it does not know ({}), shown as recorded, without advice", parsed.unknown_kinds.len(), names.join(", ")));
    }
    if !unknown_fields.is_empty() {
        const LISTED: usize = 8;
        let mut list: Vec<String> = unknown_fields.iter().take(LISTED).map(|f| f.escape_debug().to_string()).collect();
        if unknown_fields.len() > LISTED {
            list.push(format!("and {} more", unknown_fields.len() - LISTED));
        }
        left_out.push(format!("fields it does not know, left out ({})", list.join(", ")));
    }
    if !broken.is_empty() {
        left_out.push(format!("parts it could not read, left out ({})", broken.join(", ")));
    }
    if parsed.unreadable_faults > 0 {
        left_out.push(format!("{} fault(s) it could not read, left out", parsed.unreadable_faults));
    }
    if !left_out.is_empty() {
        let by = match &writer {
            Some(v) => format!("cublasguard {}", v.escape_debug()),
            None => "a cublasguard that did not record its version".into(),
        };
        let to = writer.as_ref().map(|v| format!(" to {} or later", v.escape_debug())).unwrap_or_default();
        parsed.notes.push(format!(
            "written by {by}; this is cublasguard {}, which read it as far as it could: {}. Upgrade cublasguard{to} to read all of it.",
            env!("CARGO_PKG_VERSION"),
            left_out.join("; ")
        ));
    }
    parsed.trace = trace;
    Ok(parsed)
}

/// Version 1 named a launch's configuration `gridX`, `gridY`, ... in recent calls and a free's
/// pointer `devPtr` in faults: the names of version 2 in their place.
fn rename_version_1_arguments(trace: &mut serde_json::Value) {
    use serde_json::Value;
    if let Some(faults) = trace.get_mut("faults").and_then(Value::as_array_mut) {
        for args in faults.iter_mut().filter_map(|f| f.get_mut("args")).filter_map(Value::as_object_mut) {
            if !args.contains_key("ptr") {
                if let Some(v) = args.remove("devPtr") {
                    args.insert("ptr".into(), v);
                }
            }
        }
    }
    if let Some(calls) = trace.get_mut("recent_calls").and_then(Value::as_array_mut) {
        for args in calls.iter_mut().filter_map(|c| c.get_mut("args")).filter_map(Value::as_object_mut) {
            for (dim, parts) in [("gridDim", ["gridX", "gridY", "gridZ"]), ("blockDim", ["blockX", "blockY", "blockZ"])] {
                if args.contains_key(dim) || !parts.iter().all(|p| args.contains_key(*p)) {
                    continue;
                }
                let values: Vec<Value> = parts.iter().filter_map(|p| args.remove(*p)).collect();
                args.insert(dim.into(), Value::Array(values));
            }
        }
    }
}

/// A trace read section by section, fault by fault: what cannot be read is left at its default
/// (and named) or, for a fault or a recent call, left out. The faults themselves must be there.
fn in_parts(value: &serde_json::Value, version: u32) -> Result<(Trace, Vec<usize>, Vec<String>), ReadError> {
    use serde::de::DeserializeOwned;
    let mut broken = Vec::new();
    fn part<T: DeserializeOwned + Default>(value: &serde_json::Value, key: &str, broken: &mut Vec<String>) -> T {
        match value.get(key).map(T::deserialize) {
            Some(Ok(v)) => v,
            None | Some(Err(_)) => {
                broken.push(key.to_string());
                T::default()
            }
        }
    }
    let faults = value
        .get("faults")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| ReadError::Foreign(format!("format version {version} with no \"faults\" list this build can read")))?;
    let (kept, faults): (Vec<usize>, Vec<Fault>) = faults.iter().enumerate().filter_map(|(i, f)| Some((i, Fault::deserialize(f).ok()?))).unzip();
    let calls = value.get("recent_calls").and_then(serde_json::Value::as_array);
    let recent_calls: Vec<RecentCall> = calls.map(|c| c.iter().filter_map(|c| RecentCall::deserialize(c).ok()).collect()).unwrap_or_default();
    let unread_calls = calls.map_or(0, |c| c.len() - recent_calls.len());
    if unread_calls > 0 {
        broken.push(format!("{unread_calls} recent call(s)"));
    }
    let trace = Trace {
        format: FORMAT.into(),
        version,
        guard: part(value, "guard", &mut broken),
        process: part(value, "process", &mut broken),
        environment: part(value, "environment", &mut broken),
        faults,
        recent_calls,
        summary: part(value, "summary", &mut broken),
        crash: value.get("crash").and_then(|c| Crash::deserialize(c).ok()),
    };
    Ok((trace, kept, broken))
}

/// Whether a guard version ("0.6.0", "1.2.3-rc1") is newer than this build's.
fn newer_than_this_build(version: &str) -> bool {
    fn numbers(v: &str) -> Vec<u64> {
        v.split(['-', '+']).next().unwrap_or("").split('.').map(|n| n.parse().unwrap_or(0)).collect()
    }
    numbers(version) > numbers(env!("CARGO_PKG_VERSION"))
}

/// The fields of the trace's JSON that this build does not know (it left them out), by path
/// ("faults[].new_field"); `kept`: the original index of each fault that was read. Empty values
/// (null, [], {}) are not counted: this build writes those fields by leaving them out.
fn unknown_fields_of(original: &serde_json::Value, read: &Trace, kept: &[usize]) -> std::collections::BTreeSet<String> {
    use serde_json::Value;
    fn walk(original: &Value, known: &Value, path: &str, out: &mut std::collections::BTreeSet<String>) {
        match (original, known) {
            (Value::Object(o), Value::Object(k)) => {
                for (key, v) in o {
                    let empty = matches!(v, Value::Null) || v.as_array().is_some_and(Vec::is_empty) || v.as_object().is_some_and(|m| m.is_empty());
                    let here = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                    match k.get(key) {
                        Some(kv) => walk(v, kv, &here, out),
                        None if !empty => {
                            out.insert(here);
                        }
                        None => {}
                    }
                }
            }
            (Value::Array(o), Value::Array(k)) => {
                for (v, kv) in o.iter().zip(k) {
                    walk(v, kv, &format!("{path}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Default::default();
    let Ok(known) = serde_json::to_value(read) else { return out };
    // The faults as read, beside the originals they came from.
    let mut original = original.clone();
    if let Some(faults) = original.get_mut("faults").and_then(Value::as_array_mut) {
        let all = std::mem::take(faults);
        *faults = all.into_iter().enumerate().filter(|(i, _)| kept.contains(i)).map(|(_, f)| f).collect();
    }
    if let (Some(Value::Array(calls)), Some(Value::Array(read_calls))) = (original.get("recent_calls"), known.get("recent_calls")) {
        if calls.len() != read_calls.len() {
            // Some were left out: which is which is not known, so compare none.
            original["recent_calls"] = Value::Array(Vec::new());
        }
    }
    walk(&original, &known, "", &mut out);
    out
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number that is not a whole one",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Traces are small (faults are capped); anything larger is not one.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// Reads a trace file: a regular file (a FIFO or a device is refused without blocking on it),
/// at most `MAX_TRACE_BYTES`. See `read_lenient`.
pub fn read(path: &Path) -> Result<Trace, ReadError> {
    read_lenient(path).map(|p| p.trace)
}

/// Reads a trace file as `parse_lenient` parses one.
pub fn read_lenient(path: &Path) -> Result<Parsed, ReadError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::Io(std::io::Error::other("not a regular file")));
    }
    if meta.len() > MAX_TRACE_BYTES {
        return Err(ReadError::Io(std::io::Error::other(format!("{} bytes: larger than any trace ({MAX_TRACE_BYTES} at most)", meta.len()))));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TRACE_BYTES + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    // The guard writes UTF-8 JSON: anything else is some other file.
    let text = String::from_utf8(bytes).map_err(|_| ReadError::Foreign("not UTF-8 text".into()))?;
    parse_lenient(&text)
}
