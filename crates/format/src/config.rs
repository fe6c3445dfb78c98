//! `CUBLASGUARD_*` configuration, parsed once. A bad value yields one message naming the
//! variable and the value, and the default is used: a typo must never stop a training run.

/// Which checks run on each intercepted call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checks {
    /// Handle and argument rules.
    pub args: bool,
    /// Operand pointers: device memory, and whole extents inside one allocation.
    pub bounds: bool,
    /// NaN/Inf scans of inputs and outputs.
    pub nan: bool,
    /// Synchronise after the call and pin asynchronous errors to it.
    pub sync: bool,
    /// Record kernel launches in the flight recorder (the suspects of a pending error).
    pub launches: bool,
}

impl Checks {
    pub const ALL: Self = Self { args: true, bounds: true, nan: true, sync: true, launches: true };
    pub const NONE: Self = Self { args: false, bounds: false, nan: false, sync: false, launches: false };

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut checks = Self::NONE;
        if text.split(',').all(|w| w.trim().is_empty()) {
            // An empty list would silently turn every check off; `none` says so on purpose.
            return Err("names no check (known: args, bounds, nan, sync, launches, all, none)".into());
        }
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "all" => checks = Self::ALL,
                "none" => {}
                "args" => checks.args = true,
                "bounds" => checks.bounds = true,
                "nan" => checks.nan = true,
                "sync" => checks.sync = true,
                "launches" => checks.launches = true,
                other => return Err(format!("unknown check '{other}' (known: args, bounds, nan, sync, launches, all, none)")),
            }
        }
        Ok(checks)
    }

    pub fn label(self) -> String {
        let names: Vec<&str> = [("args", self.args), ("bounds", self.bounds), ("nan", self.nan), ("sync", self.sync), ("launches", self.launches)]
            .iter()
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }
}

/// What the guard does once it has recorded a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFault {
    /// Record and let the call proceed unchanged.
    Continue,
    /// Return an error status from the faulting call, so the framework raises right there.
    Error,
    /// Write the trace, then abort the process.
    Abort,
}

impl OnFault {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "continue" => Ok(Self::Continue),
            "error" => Ok(Self::Error),
            "abort" => Ok(Self::Abort),
            other => Err(format!("unknown mode '{other}' (known: continue, error, abort)")),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Continue => "continue",
            Self::Error => "error",
            Self::Abort => "abort",
        }
    }
}

pub const DEFAULT_TRACE_PATTERN: &str = "cublasguard-%h-%p.json";
pub const DEFAULT_RING: usize = 256;
pub const MAX_RING: usize = 1 << 20;
pub const DEFAULT_STDERR_LINES: u32 = 10;
pub const DEFAULT_MAX_FAULTS: usize = 100;
pub const MAX_MAX_FAULTS: usize = 100_000;
/// Above this many bytes per operand, the NaN/Inf scan samples.
pub const DEFAULT_SCAN_BYTES: u64 = 256 << 20;
/// Bytes of pinned, device-mapped host memory per CUDA context that deferred verdicts' scans
/// land in (CUBLASGUARD_STAGING_BYTES): the device scan's counts need a few bytes a call, the
/// host scan a copy of what it reads.
pub const DEFAULT_STAGING_BYTES: u64 = 32 << 20;
/// The most CUBLASGUARD_STAGING_BYTES takes (all of it is page-locked).
pub const MAX_STAGING_BYTES: u64 = 4 << 30;

/// The variable naming the file the guard's lines go to instead of stderr.
pub const LOG_FILE_VARIABLE: &str = "CUBLASGUARD_LOG_FILE";

/// `CUBLASGUARD_LOG_FILE`'s path for process `pid` (`%p` replaced).
pub fn log_file_path(pattern: &str, pid: u32) -> String {
    pattern.replace("%p", &pid.to_string())
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The trace path pattern (`%p`, `%h`, `%r`).
    pub trace_pattern: String,
    /// True when the user named the path: then the trace is written even without faults.
    pub trace_requested: bool,
    pub checks: Checks,
    pub on_fault: OnFault,
    pub ring: usize,
    pub stderr_lines: u32,
    /// Faults stored in full; later ones are only counted.
    pub max_faults: usize,
    /// Bytes scanned per operand per call before the scan samples.
    pub scan_bytes: u64,
    /// CUBLASGUARD_STAGING_BYTES: the region each context's deferred verdicts land in.
    pub staging_bytes: u64,
    /// Scan one call in N per call site (1: every call).
    pub scan_every: u32,
    /// Keep the time spent scanning under this fraction of wall time by skipping scans
    /// (argument and bounds checks always run); `None`: no budget.
    pub budget: Option<f64>,
    /// Where operands are scanned: on the GPU (the scan kernel, through the driver API) or
    /// copied to the host.
    pub device_scan: DeviceScan,
    /// Which operands a call's NaN/Inf scan reads, and when (CUBLASGUARD_SCAN_ORDER).
    pub scan_order: ScanOrder,
    /// No banner line at start-up.
    pub quiet: bool,
    /// CUBLASGUARD_LOG_FILE: the file the guard's lines go to instead of stderr (`%p`: the
    /// pid). The library opens it when it is loaded, before the rest is read; kept here for
    /// the banner and the checks of the configuration.
    pub log_file: Option<String>,
    /// CUBLASGUARD_EXIT_SUMMARY=0: no "N fault(s) in M intercepted call(s)" line at exit
    /// (`cublasguard run` sets it: its own summary covers every process of the run).
    pub exit_summary: bool,
    /// CUBLASGUARD_SYNC: how the guard pins an asynchronous error to its call. `Deferred`
    /// unless ON_FAULT is error or abort, or origin mode is on: then `Gemm`.
    pub sync: SyncMode,
    /// CUBLASGUARD_LAUNCH_BREADCRUMBS=1 (with CUBLASGUARD_SYNC=deferred): a breadcrumb after
    /// every recorded kernel launch too, which pins a faulting kernel without synchronising.
    pub launch_breadcrumbs: bool,
    /// CUBLASGUARD_HANG_TIMEOUT: seconds a stream may have guarded work outstanding with none of
    /// its breadcrumbs landing before the watchdog records a `gpu_hang` and writes the trace
    /// (0: no watchdog).
    pub hang_timeout_s: u64,
    /// CUBLASGUARD_NAN_ORIGIN=1: after every kernel launch, the memory guarded calls read or
    /// wrote that the launch points into is scanned, and the first launch to make NaN/Inf
    /// there is recorded as its origin (a mode for a rerun, as CUDA_LAUNCH_BLOCKING is).
    pub nan_origin: bool,
    /// CUBLASGUARD_ORIGIN_FROM=TRACE: origin mode for a rerun of the program that wrote TRACE,
    /// watching from their creation only the allocations that held the NaN/Inf its guarded
    /// calls consumed (`nan_origin` is then on).
    pub origin_from: Option<String>,
    /// CUBLASGUARD_NVML=0: the GPU's health is not read (NVML is never loaded).
    pub nvml: bool,
    /// CUBLASGUARD_KERNEL_LOG: where the kernel log's Xid lines are read at a fault (the
    /// kernel's `/dev/kmsg`; a file of `dmesg` lines also reads).
    pub kernel_log: String,
    /// CUBLASGUARD_IGNORE: faults that match a rule are counted, not stored.
    pub ignore: Vec<crate::ignore::IgnoreRule>,
    /// CUBLASGUARD_DUMP: the folder operand dumps of faulting matrix multiplies go to.
    pub dump_dir: Option<String>,
    /// CUBLASGUARD_DUMP_MAX: dumps per process.
    pub dump_max: u32,
    /// CUBLASGUARD_DUMP_BYTES: bytes of operands per dump.
    pub dump_bytes: u64,
}

/// CUBLASGUARD_SYNC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// No synchronisation in a guarded call: a stream-ordered breadcrumb (the call's number,
    /// written into mapped host memory) after each guarded call says which calls completed, and
    /// an error that surfaces later is recorded on the first call whose breadcrumb never landed.
    /// The default.
    Deferred,
    /// The stream is synchronised before and after each guarded call.
    Gemm,
    /// As `Gemm`, and after every kernel launch too, like CUDA_LAUNCH_BLOCKING=1.
    Launches,
}

impl SyncMode {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "deferred" => Ok(Self::Deferred),
            "gemm" => Ok(Self::Gemm),
            "launches" => Ok(Self::Launches),
            _ => Err("not deferred, gemm or launches".into()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Deferred => "deferred",
            Self::Gemm => "gemm",
            Self::Launches => "launches",
        }
    }

    /// Whether a guarded call synchronises its stream (before and after it).
    pub fn synchronises_calls(self) -> bool {
        !matches!(self, Self::Deferred)
    }

    /// Whether every kernel launch is synchronised too.
    pub fn synchronises_launches(self) -> bool {
        matches!(self, Self::Launches)
    }
}

/// CUBLASGUARD_SCAN_ORDER: which operands of a cuBLAS call are scanned for NaN/Inf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanOrder {
    /// Every input before the call and every output after it.
    All,
    /// The outputs after the call, and the read-only inputs only when an output holds NaN/Inf
    /// (a NaN or Inf a matrix product consumes reaches its output): a third of the bytes of a
    /// GEMM's scans. Inputs the call overwrites (C with beta != 0, a solve's B) and cublasLt's
    /// (an epilogue such as ReLU can hide a consumed -Inf) are read before, as under `All`.
    OutputsFirst,
}

/// CUBLASGUARD_DEVICE_SCAN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceScan {
    /// The host scan only.
    Off,
    /// The device scan where the driver loads the kernel and its self-test passes; the host
    /// scan otherwise, recorded in the trace.
    Auto,
    /// As `Auto`, and a fallback is also said on stderr.
    On,
}

pub const DEFAULT_DUMP_MAX: u32 = 8;
pub const DEFAULT_KERNEL_LOG: &str = "/dev/kmsg";
pub const DEFAULT_DUMP_BYTES: u64 = 1 << 30;
/// Five minutes: no single kernel of a healthy job runs that long, nor does a collective wait
/// that long for a slow peer outside a checkpoint write, and it is half of PyTorch's default
/// NCCL timeout (10 minutes), so the trace is on disk before that watchdog tears the job down.
pub const DEFAULT_HANG_TIMEOUT_S: u64 = 300;
/// A day: a longer timeout is a typo, or a wish for none (0).
pub const MAX_HANG_TIMEOUT_S: u64 = 86_400;

impl Default for Config {
    fn default() -> Self {
        Self {
            trace_pattern: DEFAULT_TRACE_PATTERN.into(),
            trace_requested: false,
            checks: Checks::ALL,
            on_fault: OnFault::Continue,
            ring: DEFAULT_RING,
            stderr_lines: DEFAULT_STDERR_LINES,
            max_faults: DEFAULT_MAX_FAULTS,
            scan_bytes: DEFAULT_SCAN_BYTES,
            staging_bytes: DEFAULT_STAGING_BYTES,
            scan_every: 1,
            budget: None,
            device_scan: DeviceScan::Auto,
            scan_order: ScanOrder::All,
            quiet: false,
            log_file: None,
            exit_summary: true,
            sync: SyncMode::Deferred,
            launch_breadcrumbs: false,
            hang_timeout_s: DEFAULT_HANG_TIMEOUT_S,
            nan_origin: false,
            origin_from: None,
            nvml: true,
            kernel_log: DEFAULT_KERNEL_LOG.into(),
            ignore: Vec::new(),
            dump_dir: None,
            dump_max: DEFAULT_DUMP_MAX,
            dump_bytes: DEFAULT_DUMP_BYTES,
        }
    }
}

fn parse_count(text: &str, max: usize) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n <= max => Ok(n),
        Ok(_) => Err(format!("must be at most {max}")),
        Err(_) => Err("not a non-negative whole number".into()),
    }
}

impl Config {
    /// Origin mode reading every guarded call's operands at the call, to watch them: origin
    /// mode, unless it watches only a first run's memory (`origin_from`).
    pub fn origin_reads_operands(&self) -> bool {
        self.nan_origin && self.origin_from.is_none()
    }

    /// Reads the configuration through `lookup` (the environment, in the library), returning
    /// it with one message per rejected value.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Self, Vec<String>) {
        let mut config = Self::default();
        let mut problems = Vec::new();
        let mut reject = |var: &str, value: &str, why: String, default: &str| {
            problems.push(format!("{var}='{value}' ignored: {why}; using the default ({default})"));
        };
        if let Some(path) = lookup("CUBLASGUARD_TRACE") {
            if path.trim().is_empty() {
                reject("CUBLASGUARD_TRACE", &path, "empty path".into(), DEFAULT_TRACE_PATTERN);
            } else {
                config.trace_pattern = path;
                config.trace_requested = true;
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_CHECKS") {
            match Checks::parse(&v) {
                Ok(c) => config.checks = c,
                Err(why) => reject("CUBLASGUARD_CHECKS", &v, why, "all"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_ON_FAULT") {
            match OnFault::parse(&v) {
                Ok(m) => config.on_fault = m,
                Err(why) => reject("CUBLASGUARD_ON_FAULT", &v, why, "continue"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_RING") {
            match parse_count(&v, MAX_RING) {
                Ok(n) => config.ring = n,
                Err(why) => reject("CUBLASGUARD_RING", &v, why, "256"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_STDERR_LINES") {
            match parse_count(&v, u32::MAX as usize) {
                Ok(n) => config.stderr_lines = n as u32,
                Err(why) => reject("CUBLASGUARD_STDERR_LINES", &v, why, "10"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_MAX_FAULTS") {
            match parse_count(&v, MAX_MAX_FAULTS) {
                Ok(n) => config.max_faults = n,
                Err(why) => reject("CUBLASGUARD_MAX_FAULTS", &v, why, "100"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_SCAN_BYTES") {
            match parse_count(&v, usize::MAX) {
                Ok(n) if n >= 4096 => config.scan_bytes = n as u64,
                Ok(_) => reject("CUBLASGUARD_SCAN_BYTES", &v, "must be at least 4096".into(), "268435456"),
                Err(why) => reject("CUBLASGUARD_SCAN_BYTES", &v, why, "268435456"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_STAGING_BYTES") {
            match parse_count(&v, MAX_STAGING_BYTES as usize) {
                Ok(n) if n >= 4096 => config.staging_bytes = (n as u64).next_multiple_of(4096),
                Ok(_) => reject("CUBLASGUARD_STAGING_BYTES", &v, "must be at least 4096".into(), "33554432"),
                Err(why) => reject("CUBLASGUARD_STAGING_BYTES", &v, why, "33554432"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_HANG_TIMEOUT") {
            match parse_count(&v, MAX_HANG_TIMEOUT_S as usize) {
                Ok(n) => config.hang_timeout_s = n as u64,
                Err(why) => reject("CUBLASGUARD_HANG_TIMEOUT", &v, why, "300"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_SCAN_EVERY") {
            match parse_count(&v, u32::MAX as usize) {
                Ok(n) if n >= 1 => config.scan_every = n as u32,
                Ok(_) => reject("CUBLASGUARD_SCAN_EVERY", &v, "must be at least 1".into(), "1"),
                Err(why) => reject("CUBLASGUARD_SCAN_EVERY", &v, why, "1"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_BUDGET") {
            match v.trim().parse::<f64>() {
                Ok(f) if f > 0.0 && f <= 1.0 => config.budget = Some(f),
                _ => reject("CUBLASGUARD_BUDGET", &v, "not a fraction in (0, 1]".into(), "no budget"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_DEVICE_SCAN") {
            match v.trim() {
                "auto" => config.device_scan = DeviceScan::Auto,
                "on" | "1" => config.device_scan = DeviceScan::On,
                "off" | "0" => config.device_scan = DeviceScan::Off,
                _ => reject("CUBLASGUARD_DEVICE_SCAN", &v, "not auto, on or off".into(), "auto"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_SCAN_ORDER") {
            match v.trim() {
                "all" | "" => config.scan_order = ScanOrder::All,
                "outputs-first" => config.scan_order = ScanOrder::OutputsFirst,
                _ => reject("CUBLASGUARD_SCAN_ORDER", &v, "not all or outputs-first".into(), "all"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_LAUNCH_BREADCRUMBS") {
            match v.trim() {
                "1" | "on" | "yes" | "true" => config.launch_breadcrumbs = true,
                "0" | "off" | "no" | "false" | "" => config.launch_breadcrumbs = false,
                _ => reject("CUBLASGUARD_LAUNCH_BREADCRUMBS", &v, "not 1 or 0".into(), "0"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_NAN_ORIGIN") {
            match v.trim() {
                "1" | "on" | "yes" | "true" => config.nan_origin = true,
                "0" | "off" | "no" | "false" | "" => config.nan_origin = false,
                _ => reject("CUBLASGUARD_NAN_ORIGIN", &v, "not 1 or 0".into(), "0"),
            }
        }
        if let Some(path) = lookup("CUBLASGUARD_ORIGIN_FROM").filter(|p| !p.trim().is_empty()) {
            config.origin_from = Some(path);
            config.nan_origin = true;
        }
        // CUBLASGUARD_SYNC after ON_FAULT and NAN_ORIGIN: its default depends on them. A mode
        // that acts at the faulting call (error refuses it, abort stops there) needs the call's
        // kernel fault known before it returns, and origin mode, a rerun, synchronises every
        // launch anyway: for those, the default synchronises around each guarded call as well.
        // Not origin mode from a trace: it synchronises only the launches into the memory it
        // watches, and its guarded calls are judged as by default.
        let default_sync = if config.on_fault != OnFault::Continue || config.origin_reads_operands() { SyncMode::Gemm } else { SyncMode::Deferred };
        config.sync = default_sync;
        if let Some(v) = lookup("CUBLASGUARD_SYNC") {
            match SyncMode::parse(&v) {
                Ok(mode) => config.sync = mode,
                Err(why) => reject("CUBLASGUARD_SYNC", &v, why, default_sync.name()),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_NVML") {
            match v.trim() {
                "1" | "on" | "yes" | "true" => config.nvml = true,
                "0" | "off" | "no" | "false" => config.nvml = false,
                _ => reject("CUBLASGUARD_NVML", &v, "not 1 or 0".into(), "1"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_KERNEL_LOG") {
            if v.trim().is_empty() {
                reject("CUBLASGUARD_KERNEL_LOG", &v, "empty path".into(), DEFAULT_KERNEL_LOG);
            } else {
                config.kernel_log = v;
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_DUMP") {
            if v.trim().is_empty() {
                reject("CUBLASGUARD_DUMP", &v, "empty path".into(), "no dumps");
            } else {
                config.dump_dir = Some(v);
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_DUMP_MAX") {
            match parse_count(&v, u32::MAX as usize) {
                Ok(n) => config.dump_max = n as u32,
                Err(why) => reject("CUBLASGUARD_DUMP_MAX", &v, why, "8"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_DUMP_BYTES") {
            match parse_count(&v, usize::MAX) {
                Ok(n) if n > 0 => config.dump_bytes = n as u64,
                Ok(_) => reject("CUBLASGUARD_DUMP_BYTES", &v, "must be at least 1".into(), "1073741824"),
                Err(why) => reject("CUBLASGUARD_DUMP_BYTES", &v, why, "1073741824"),
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_LOG_FILE") {
            if v.trim().is_empty() {
                reject(LOG_FILE_VARIABLE, &v, "empty path".into(), "stderr");
            } else {
                config.log_file = Some(v);
            }
        }
        if let Some(v) = lookup("CUBLASGUARD_IGNORE") {
            let (rules, bad) = crate::ignore::parse_rules(&v);
            config.ignore = rules;
            problems.extend(bad);
        }
        if let Some(v) = lookup("CUBLASGUARD_QUIET") {
            config.quiet = !matches!(v.trim(), "" | "0" | "false" | "no");
        }
        if let Some(v) = lookup("CUBLASGUARD_EXIT_SUMMARY") {
            config.exit_summary = !matches!(v.trim(), "0" | "false" | "no" | "off");
        }
        (config, problems)
    }
}

/// The process's rank in a distributed job, from the variables launchers set.
pub fn rank_from(lookup: impl Fn(&str) -> Option<String>) -> Option<i64> {
    ["RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"].iter().find_map(|var| lookup(var).and_then(|v| v.trim().parse::<i64>().ok()))
}

/// The pattern as an absolute path, resolved against `cwd` (once, at start: a later chdir()
/// must not split the trace across folders).
pub fn absolute_pattern(pattern: &str, cwd: &std::path::Path) -> String {
    if pattern.starts_with('/') {
        pattern.to_string()
    } else {
        cwd.join(pattern).display().to_string()
    }
}

/// `path` with `-<pid>` before its `.json` (or at its end): the path of a process that must not
/// write another's file.
pub fn path_with_pid(path: &str, pid: u32) -> String {
    match path.strip_suffix(".json") {
        Some(stem) => format!("{stem}-{pid}.json"),
        None => format!("{path}-{pid}"),
    }
}

/// `path` with `-<pid>` added as `path_with_pid` adds it, and for `n` > 1 also `-<n>`: the
/// names a process tries, in order, when the ones before hold another process's trace.
pub fn path_with_pid_n(path: &str, pid: u32, n: u32) -> String {
    if n <= 1 {
        return path_with_pid(path, pid);
    }
    match path.strip_suffix(".json") {
        Some(stem) => format!("{stem}-{pid}-{n}.json"),
        None => format!("{path}-{pid}-{n}"),
    }
}

/// The abstract Unix socket a guarded process of user `uid` answers `cublasguard snapshot` on.
pub fn snapshot_socket_name(uid: u32, pid: u32) -> String {
    format!("{SNAPSHOT_SOCKET_PREFIX}{uid}-{pid}")
}

/// What every snapshot socket's name starts with (`/proc/net/unix` lists them with a `@`).
pub const SNAPSHOT_SOCKET_PREFIX: &str = "cublasguard-snapshot-";

/// The abstract socket name that claims trace `path` for user `uid` (its effective uid):
/// slot 0, or slot 1, 2, ... when another user's socket sits on the earlier ones. The uid
/// keeps two users' claims apart (each may write its own file at one path, in folders of its
/// own); it cannot stop another user binding the name, which is why a holder's uid is checked.
/// FNV-1a, not the standard library's hasher: every build of the guard must name a path alike.
pub fn claim_name(path: &str, uid: u32, slot: u32) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in path.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    if slot == 0 {
        format!("cublasguard-trace-{uid}-{hash:016x}")
    } else {
        format!("cublasguard-trace-{uid}-{hash:016x}-{slot}")
    }
}

/// The `process.run_id` in the first bytes of a trace (a whole trace, a crash record, or as
/// much of either as was read), if the `process` object is whole in them. The guard reads only
/// this much of a trace it finds at its path: whether an earlier process of its own run wrote it.
pub fn run_id_in_trace_head(head: &[u8]) -> Option<String> {
    use serde::Deserialize as _;
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        run_id: Option<String>,
    }
    const KEY: &[u8] = b"\"process\"";
    // The first "process" is the top-level key: only `format`, `version` and `guard` (a version
    // and a commit) come before it.
    let at = head.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &head[at..];
    let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    if rest[colon] != b':' {
        return None;
    }
    // One value, not a whole document: what follows the object is not read.
    let mut value = serde_json::Deserializer::from_slice(&rest[colon + 1..]);
    Head::deserialize(&mut value).ok()?.run_id
}

/// What `%r` becomes in a process with no rank.
pub const NO_RANK: &str = "norank";

/// Expands `%p` (pid), `%h` (host), `%r` (rank; `norank` for a process that has none, such
/// as torchrun's launcher, which must not take rank 0's name) and `%%` in a trace path.
pub fn expand_trace_path(pattern: &str, pid: u32, host: &str, rank: Option<i64>) -> String {
    expand_percent(pattern, |letter| match letter {
        'p' => Some(pid.to_string()),
        'h' => Some(host.to_string()),
        'r' => Some(rank.map_or_else(|| NO_RANK.to_string(), |rank| rank.to_string())),
        _ => None,
    })
}

/// Expands `%X` in `pattern` to what `letter(X)` gives, and `%%` to `%`; a letter it does not
/// know, and a `%` at the end, are kept as written.
pub fn expand_percent(pattern: &str, letter: impl Fn(char) -> Option<String>) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(other) => match letter(other) {
                Some(text) => out.push_str(&text),
                None => {
                    out.push('%');
                    out.push(other);
                }
            },
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let (config, problems) = Config::from_lookup(env(&[]));
        assert_eq!(config, Config::default());
        assert!(problems.is_empty());
        assert!(!config.trace_requested);
    }

    #[test]
    fn parses_every_variable() {
        let (config, problems) = Config::from_lookup(env(&[
            ("CUBLASGUARD_TRACE", "/tmp/t-%p.json"),
            ("CUBLASGUARD_CHECKS", "args, bounds"),
            ("CUBLASGUARD_ON_FAULT", "error"),
            ("CUBLASGUARD_RING", "16"),
            ("CUBLASGUARD_QUIET", "1"),
            ("CUBLASGUARD_SCAN_EVERY", "10"),
            ("CUBLASGUARD_BUDGET", "0.05"),
        ]));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.trace_pattern, "/tmp/t-%p.json");
        assert!(config.trace_requested);
        assert_eq!(config.checks, Checks { args: true, bounds: true, nan: false, sync: false, launches: false });
        assert_eq!(config.on_fault, OnFault::Error);
        assert_eq!(config.ring, 16);
        assert!(config.quiet);
        assert_eq!((config.scan_every, config.budget), (10, Some(0.05)));
    }

    #[test]
    fn the_scan_order_is_all_unless_outputs_first_is_asked_and_a_typo_is_named() {
        assert_eq!(Config::default().scan_order, ScanOrder::All);
        let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_SCAN_ORDER", "outputs-first")]));
        assert_eq!((config.scan_order, problems.len()), (ScanOrder::OutputsFirst, 0));
        let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_SCAN_ORDER", "outputs_first")]));
        assert_eq!(config.scan_order, ScanOrder::All);
        assert!(problems.iter().any(|p| p.contains("CUBLASGUARD_SCAN_ORDER")), "{problems:?}");
    }

    #[test]
    fn bad_values_are_named_and_defaulted() {
        let (config, problems) = Config::from_lookup(env(&[
            ("CUBLASGUARD_CHECKS", "args,speed"),
            ("CUBLASGUARD_ON_FAULT", "explode"),
            ("CUBLASGUARD_RING", "-3"),
            ("CUBLASGUARD_BUDGET", "2"),
        ]));
        assert_eq!(config.checks, Checks::ALL);
        assert_eq!(config.on_fault, OnFault::Continue);
        assert_eq!(config.ring, DEFAULT_RING);
        assert_eq!(config.budget, None);
        assert_eq!(problems.len(), 4);
        assert!(problems[0].contains("CUBLASGUARD_CHECKS='args,speed'") && problems[0].contains("speed"));
        assert!(problems[1].contains("CUBLASGUARD_ON_FAULT='explode'"));
        assert!(problems[2].contains("CUBLASGUARD_RING='-3'"));
    }

    #[test]
    fn the_hang_timeout_is_in_seconds_zero_turns_the_watchdog_off_and_nonsense_keeps_the_default() {
        assert_eq!(Config::default().hang_timeout_s, DEFAULT_HANG_TIMEOUT_S);
        for (text, seconds) in [("1", 1), (" 600 ", 600), ("0", 0)] {
            let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_HANG_TIMEOUT", text)]));
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(config.hang_timeout_s, seconds, "{text}");
        }
        for text in ["1.5", "-1", "ten", "86401"] {
            let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_HANG_TIMEOUT", text)]));
            assert_eq!(config.hang_timeout_s, DEFAULT_HANG_TIMEOUT_S, "{text}");
            assert!(problems.len() == 1 && problems[0].contains("CUBLASGUARD_HANG_TIMEOUT"), "{problems:?}");
        }
    }

    #[test]
    fn a_log_file_is_kept_with_its_pid_pattern_and_an_empty_one_is_refused() {
        let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_LOG_FILE", "/tmp/guard-%p.log")]));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.log_file.as_deref().map(|p| log_file_path(p, 42)), Some("/tmp/guard-42.log".to_string()));
        let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_LOG_FILE", " ")]));
        assert_eq!(config.log_file, None);
        assert!(problems.iter().any(|p| p.contains("CUBLASGUARD_LOG_FILE") && p.contains("empty path")), "{problems:?}");
    }

    #[test]
    fn a_guarded_call_blocks_the_host_only_when_a_synchronising_mode_is_named() {
        let (config, _) = Config::from_lookup(env(&[]));
        assert_eq!(config.sync, SyncMode::Deferred);
        assert!(!config.sync.synchronises_calls() && !config.sync.synchronises_launches());
        for (text, mode, calls, launches) in
            [(" gemm", SyncMode::Gemm, true, false), ("launches", SyncMode::Launches, true, true), ("deferred", SyncMode::Deferred, false, false)]
        {
            let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_SYNC", text)]));
            assert!(problems.is_empty(), "{text}: {problems:?}");
            assert_eq!((config.sync, config.sync.synchronises_calls(), config.sync.synchronises_launches()), (mode, calls, launches), "{text}");
        }
        // A typo falls back to the default, and says which.
        let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_SYNC", "always")]));
        assert_eq!(config.sync, SyncMode::Deferred);
        assert_eq!(problems, ["CUBLASGUARD_SYNC='always' ignored: not deferred, gemm or launches; using the default (deferred)"]);
    }

    #[test]
    fn origin_from_a_trace_is_origin_mode_and_an_empty_path_is_none() {
        let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_ORIGIN_FROM", "first/trace.json")]));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!((config.origin_from.as_deref(), config.nan_origin, config.sync), (Some("first/trace.json"), true, SyncMode::Deferred));
        let (config, _) = Config::from_lookup(env(&[("CUBLASGUARD_ORIGIN_FROM", " ")]));
        assert_eq!((config.origin_from, config.nan_origin), (None, false));
    }

    #[test]
    fn on_fault_error_or_abort_and_origin_mode_synchronise_unless_deferred_is_named() {
        for set in [("CUBLASGUARD_ON_FAULT", "error"), ("CUBLASGUARD_ON_FAULT", "abort"), ("CUBLASGUARD_NAN_ORIGIN", "1")] {
            assert_eq!(Config::from_lookup(env(&[set])).0.sync, SyncMode::Gemm, "{set:?}");
            let (config, problems) = Config::from_lookup(env(&[set, ("CUBLASGUARD_SYNC", "gmm")]));
            assert_eq!(config.sync, SyncMode::Gemm, "{set:?}");
            assert!(problems[0].ends_with("using the default (gemm)"), "{problems:?}");
            for named in [SyncMode::Deferred, SyncMode::Launches] {
                assert_eq!(Config::from_lookup(env(&[set, ("CUBLASGUARD_SYNC", named.name())])).0.sync, named, "{set:?}");
            }
        }
        assert_eq!(Config::from_lookup(env(&[("CUBLASGUARD_ON_FAULT", "continue"), ("CUBLASGUARD_NAN_ORIGIN", "0")])).0.sync, SyncMode::Deferred);
    }

    #[test]
    fn an_empty_check_list_is_refused_rather_than_turning_every_check_off() {
        for text in ["", " ", ",,", " , "] {
            assert!(Checks::parse(text).is_err(), "{text:?}");
            let (config, problems) = Config::from_lookup(env(&[("CUBLASGUARD_CHECKS", text)]));
            assert_eq!((config.checks, problems.len()), (Checks::ALL, 1), "{text:?}");
        }
    }

    #[test]
    fn a_relative_pattern_is_anchored_where_the_process_started() {
        let cwd = std::path::Path::new("/work/run");
        assert_eq!(absolute_pattern("cublasguard-%h-%p.json", cwd), "/work/run/cublasguard-%h-%p.json");
        assert_eq!(absolute_pattern("out/t.json", cwd), "/work/run/out/t.json");
        assert_eq!(absolute_pattern("/tmp/t.json", cwd), "/tmp/t.json");
        assert_eq!(path_with_pid("/tmp/t.json", 7), "/tmp/t-7.json");
        assert_eq!(path_with_pid("/tmp/trace", 7), "/tmp/trace-7");
        assert_eq!(path_with_pid_n("/tmp/t.json", 7, 1), "/tmp/t-7.json");
        assert_eq!(path_with_pid_n("/tmp/t.json", 7, 3), "/tmp/t-7-3.json");
        assert_eq!(path_with_pid_n("/tmp/trace", 7, 2), "/tmp/trace-7-2");
    }

    #[test]
    fn claim_names_differ_by_path_user_and_slot_and_fit_a_socket_address() {
        let a = claim_name("/tmp/t.json", 0, 0);
        assert_eq!(a, claim_name("/tmp/t.json", 0, 0));
        assert_ne!(a, claim_name("/tmp/u.json", 0, 0));
        assert_ne!(a, claim_name("/tmp/t.json", 1000, 0));
        assert_ne!(a, claim_name("/tmp/t.json", 0, 1));
        assert!(claim_name(&"x".repeat(4096), u32::MAX, 9).len() < 107);
    }

    #[test]
    fn the_run_id_is_read_from_a_trace_head_whole_or_cut_short() {
        let trace = crate::trace::Trace {
            process: crate::trace::Process { run_id: Some("abc-1".into()), argv: vec!["\"process\": {}".into()], ..Default::default() },
            ..Default::default()
        };
        let pretty = serde_json::to_vec_pretty(&trace).unwrap();
        assert_eq!(run_id_in_trace_head(&pretty).as_deref(), Some("abc-1"));
        let compact = serde_json::to_vec(&trace).unwrap();
        let cut = compact.windows(8).position(|w| w == b"\"environ").unwrap();
        assert_eq!(run_id_in_trace_head(&compact[..cut]).as_deref(), Some("abc-1"), "a crash record's head is enough");
        assert_eq!(run_id_in_trace_head(&pretty[..40]), None, "the process object cut short");
        let without = serde_json::to_vec(&crate::trace::Trace::default()).unwrap();
        assert_eq!(run_id_in_trace_head(&without), None);
        assert_eq!(run_id_in_trace_head(b"not json at all"), None);
    }

    #[test]
    fn none_and_all() {
        assert_eq!(Checks::parse("none").unwrap(), Checks::NONE);
        assert_eq!(Checks::parse("all").unwrap(), Checks::ALL);
        assert_eq!(Checks::parse("nan,sync").unwrap().label(), "nan,sync");
    }

    #[test]
    fn rank_follows_launcher_precedence() {
        assert_eq!(rank_from(env(&[("LOCAL_RANK", "3"), ("RANK", "11")])), Some(11));
        assert_eq!(rank_from(env(&[("SLURM_PROCID", "5")])), Some(5));
        assert_eq!(rank_from(env(&[("RANK", "x"), ("PMI_RANK", "2")])), Some(2));
        assert_eq!(rank_from(env(&[])), None);
    }

    #[test]
    fn expands_path_patterns() {
        assert_eq!(expand_trace_path("t-%h-%p-%r.json", 42, "node1", Some(3)), "t-node1-42-3.json");
        assert_eq!(expand_trace_path("%r/%%p%", 1, "h", None), "norank/%p%");
        assert_eq!(expand_trace_path("t-%r.json", 1, "h", Some(0)), "t-0.json");
        assert_eq!(expand_trace_path("a%xb", 1, "h", None), "a%xb");
    }
}
