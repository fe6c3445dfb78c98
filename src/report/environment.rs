//! The report's environment: the CUDA, driver and cuBLAS versions and libraries of the first
//! process, each process's failed capability probe and GPU health, a libcublas and libcublasLt
//! of different releases, and the GPU core dumps.

use std::path::Path;

use cublasguard_format::gpu_health::{GpuHealth, GpuHealthState};
use cublasguard_format::trace::{self, FaultKind};

use super::call_sites::is_user_file;
use super::core_dumps::{core_dumps, cuda_gdb_command};
use super::doc::Doc;
use super::load::Loaded;
use crate::doctor::setup_checks::release_of_file;

/// A libcublas and a libcublasLt the process mapped from different folders (or, where the
/// files are still there and named by release, of different releases): pytorch#174320.
fn cublas_pair_note(env: &trace::Environment) -> Option<String> {
    let libraries = &env.libraries;
    let find = |prefix: &str| libraries.iter().find(|l| l.soname.starts_with(prefix)).map(|l| Path::new(&l.path));
    let (cublas, lt) = (find("libcublas.so")?, find("libcublasLt.so")?);
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (a, b) = (real(cublas), real(lt));
    let releases = (release_of_file(&a), release_of_file(&b));
    let mixed_files = matches!(releases, (Some(x), Some(y)) if x != y);
    // The versions the libraries themselves reported in the process: major.minor must agree.
    let mixed_versions = matches!((env.cublas_version, env.cublaslt_version), (Some(x), Some(y)) if x / 100 != y / 100);
    if a.parent() == b.parent() && !mixed_files && !mixed_versions {
        return None;
    }
    let what = match (env.cublas_version, env.cublaslt_version) {
        (Some(x), Some(y)) if mixed_versions => {
            format!("of different releases (cuBLAS {}.{}.{}, cuBLASLt {}.{}.{})", x / 10000, x / 100 % 100, x % 100, y / 10000, y / 100 % 100, y % 100)
        }
        _ if mixed_files => "of different releases".to_string(),
        _ => "from different folders".to_string(),
    };
    Some(format!(
        "note: libcublas ({}) and libcublasLt ({}) are {what}: a libcublasLt that is not libcublas's own breaks cuBLAS (pytorch#174320); `cublasguard doctor` compares their releases",
        cublas.display(),
        lt.display()
    ))
}

/// One line on a process's GPU health through the run: the devices NVML read and what happened
/// to them, or why NVML could not say (nothing where there is no NVML at all: the doctor says).
fn gpu_health_line(pid: u32, h: &GpuHealth) -> Option<String> {
    match h.state {
        GpuHealthState::Ready => {
            let devices: Vec<String> = h
                .devices
                .iter()
                .map(|d| {
                    let who = if h.standin { format!("stand-in device {}", d.index) } else { format!("GPU {} ({})", d.index, d.name) };
                    match d.temperature_c {
                        Some(t) => format!("{who}, {t} C"),
                        None => who,
                    }
                })
                .collect();
            let events = if h.events.is_empty() {
                "no Xid or ECC event during the run".to_string()
            } else {
                format!("{} Xid/ECC event(s) during the run", h.events.len())
            };
            Some(format!("GPU health of pid {pid} (NVML): {}; {events}", if devices.is_empty() { "no device".into() } else { devices.join(", ") }))
        }
        GpuHealthState::Hung | GpuHealthState::Failed | GpuHealthState::Starting => {
            Some(format!("GPU health of pid {pid} not read: {}", h.note.as_deref().unwrap_or(h.state.name())))
        }
        GpuHealthState::Missing | GpuHealthState::Off => None,
    }
}

pub(super) fn environment(doc: &mut Doc, loaded: &[Loaded]) {
    let Some(first) = loaded.first() else { return };
    let env = &first.trace.environment;
    let v = |x: Option<i32>| x.map(|v| format!("{}.{}", v / 1000, v % 1000 / 10)).unwrap_or_else(|| "unknown".into());
    doc.heading("Environment", "Environment:");
    let line = format!(
        "CUDA runtime {}, driver {}{}, cuBLAS {}",
        v(env.runtime_version),
        v(env.driver_version),
        if env.driver.loaded { "" } else { " (libcuda.so.1 not loaded)" },
        env.cublas_version.map(|c| format!("{}.{}.{}", c / 10000, c / 100 % 100, c % 100)).unwrap_or_else(|| "unknown".into())
    );
    doc.item(&doc.t(&line));
    for lib in &env.libraries {
        let line = format!("{} => {}", doc.c(&lib.soname), doc.c(&lib.path));
        doc.item(&line);
    }
    // A failed capability probe is a fact about the machine, said once per process, not a fault.
    for l in loaded {
        let Some(probe) = &l.trace.environment.probe else { continue };
        let cause = probe.cause.as_ref().map(|c| c.message.as_str()).unwrap_or(probe.status_name.as_str());
        let place = probe
            .python_stack
            .iter()
            .find(|f| is_user_file(&f.file, l.trace.environment.python_paths.as_ref()))
            .map(|f| format!(", at {}:{} in {}", f.file, f.line, f.function))
            .unwrap_or_default();
        // Beside the same process's failed starts, counted as faults, the probe is their
        // first sign, not something apart from them.
        let failed_start = l.trace.faults.iter().any(|f| f.kind == FaultKind::InitFailed);
        let line = if failed_start {
            format!(
                "note: pid {} asked {} (#{}) whether CUDA is usable and it is not{place}; its later calls failed to start CUDA too (the faults above)",
                l.trace.process.pid, probe.api, probe.seq
            )
        } else {
            format!(
                "note: pid {} asked {} (#{}) whether CUDA is usable and it is not{place}: {cause}. A probe, not a fault: a program may fall back to the CPU",
                l.trace.process.pid, probe.api, probe.seq
            )
        };
        doc.item(&doc.t(&line));
    }
    for l in loaded {
        if let Some(line) = l.trace.environment.gpu_health.as_ref().and_then(|h| gpu_health_line(l.trace.process.pid, h)) {
            doc.item(&doc.t(&line));
        }
    }
    let mut pairs: Vec<String> = loaded.iter().filter_map(|l| cublas_pair_note(&l.trace.environment)).collect();
    pairs.dedup();
    for note in pairs {
        doc.item(&doc.t(&note));
    }
    for dump in core_dumps(loaded) {
        let line = match (&dump.command, &dump.pattern) {
            (Some(command), _) => {
                let files: Vec<String> = dump.files.iter().map(|f| doc.c(&f.display().to_string())).collect();
                format!("GPU core dump of pid {}: {}; open it with {}", dump.pid, files.join(", "), doc.c(command))
            }
            (None, Some(pattern)) => format!(
                "GPU core dumps were on for pid {} ({}): none at {}, so no GPU exception stopped it (or the driver could not write there); one is opened with {}",
                dump.pid,
                doc.c("CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1"),
                doc.c(pattern),
                doc.c(&cuda_gdb_command(Path::new("FILE")))
            ),
            (None, None) => format!(
                "GPU core dumps were on for pid {} ({}), with no {}: the driver writes them to its default name in the program's working folder; one is opened with {}",
                dump.pid,
                doc.c("CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1"),
                doc.c("CUDA_COREDUMP_FILE"),
                doc.c(&cuda_gdb_command(Path::new("FILE")))
            ),
        };
        doc.item(&line);
    }
}
