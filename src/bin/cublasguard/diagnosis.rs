//! Turns a recorded fault into what a person needs: the shapes in the terms their framework
//! uses, the probable cause, and what to do next. The recorder records facts; this is where
//! they are interpreted.

use cublasguard::trace::{Fault, FaultKind, InitCauseKind, Operand};
use serde::Serialize;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Diagnosis {
    /// "looks like nn.Linear(...)" when the GEMM has that shape.
    pub layer: Option<String>,
    /// Each operand in row-major terms (how PyTorch and NumPy print tensors).
    pub row_major: Vec<String>,
    pub cause: String,
    pub next_steps: Vec<String>,
}

fn arg_i64(fault: &Fault, name: &str) -> Option<i64> {
    fault.args.get(name)?.as_i64()
}

fn arg_str<'a>(fault: &'a Fault, name: &str) -> Option<&'a str> {
    fault.args.get(name)?.as_str()
}

/// cuBLAS GEMMs as PyTorch issues them for y = x W^T: transa = T, transb = N, m = out, n = batch, k = in.
pub fn linear_layer(fault: &Fault) -> Option<String> {
    if arg_str(fault, "transa")? != "T" || arg_str(fault, "transb")? != "N" {
        return None;
    }
    let (m, n, k) = (arg_i64(fault, "m")?, arg_i64(fault, "n")?, arg_i64(fault, "k")?);
    Some(format!("looks like nn.Linear(in_features={k}, out_features={m}) on a batch of {n}"))
}

/// A column-major rows x cols matrix is the row-major cols x rows tensor.
pub fn row_major(op: &Operand) -> String {
    let mut s = format!("{} as row-major: [{}, {}] {}", op.name, op.cols, op.rows, op.dtype);
    if let Some(p) = op.first_nonfinite {
        s.push_str(&format!(", first non-finite at [{}, {}]", p.col, p.row));
    }
    s
}

fn bad_operand(fault: &Fault) -> Option<&Operand> {
    fault.operands.iter().find(|o| o.nan.unwrap_or(0) + o.inf.unwrap_or(0) > 0)
}

/// `earlier_nonfinite`: an earlier fault in the run already saw non-finite values, so this
/// one is probably propagation.
pub fn diagnose(fault: &Fault, earlier_nonfinite: Option<u64>) -> Diagnosis {
    let layer = linear_layer(fault);
    let row_major = fault.operands.iter().map(row_major).collect();
    let tf32 = fault.handle.as_ref().is_some_and(|h| h.reduced_precision);
    let steps = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // A failed handle creation with a cause (ALLOC_FAILED) reads like a failed start.
    let kind = if fault.kind == FaultKind::ApiError && fault.cause.is_some() { FaultKind::InitFailed } else { fault.kind };
    let (mut cause, mut next_steps) = match kind {
        FaultKind::NonfiniteInput => match earlier_nonfinite {
            Some(seq) => (
                format!("propagation: the non-finite values came from an earlier call (#{seq}); that one is where to look"),
                steps(&["Read the earliest fault in this report first."]),
            ),
            None => {
                let op = bad_operand(fault).map(|o| o.name.as_str()).unwrap_or("an input");
                let input = if layer.is_some() && op == "B" {
                    "the layer's input (the features fed to this Linear)"
                } else if layer.is_some() && op == "A" {
                    "the layer's weight"
                } else {
                    "an input operand"
                };
                (
                    format!("operand {op} is {input} and already held NaN/Inf before this call: the bad values were made earlier, outside cuBLAS"),
                    steps(&[
                        "If this is the first layer: check the input features (data loading, normalisation, division by zero, log of 0) with torch.isfinite(x).all() before the model.",
                        "If it happens after some training steps: the weights diverged; lower the learning rate, clip gradients (torch.nn.utils.clip_grad_norm_), and turn on torch.autograd.set_detect_anomaly(True) to find the backward op that made them.",
                        "Known-benign NaNs (masked attention, torch.where) can be excluded by checking the operand's first position above.",
                    ]),
                )
            }
        },
        FaultKind::NonfiniteOutput => {
            let mut cause = "this call produced Inf/NaN from finite inputs: overflow (values beyond the dtype's range) or Inf - Inf".to_string();
            if tf32 {
                cause.push_str("; the handle uses TF32 tensor-op math, which rounds float32 inputs to 10 mantissa bits");
            }
            let mut s = steps(&[
                "Lower the learning rate or add gradient clipping (torch.nn.utils.clip_grad_norm_); exploding weights overflow first in the largest GEMM.",
                "In fp16, use loss scaling (torch.cuda.amp.GradScaler) or bf16, whose range matches float32.",
                "Check the operands' magnitudes: an input scaled by a huge factor overflows the product.",
            ]);
            if tf32 {
                s.push("To compare with strict float32: torch.backends.cuda.matmul.allow_tf32 = False (or NVIDIA_TF32_OVERRIDE=0).".into());
            }
            (cause, s)
        }
        FaultKind::InvalidArgument => (
            "the arguments break cuBLAS's rules: a shape or leading dimension does not fit the matrices".into(),
            steps(&[
                "Compare the feature width of the input with the layer's in_features (x.shape[-1] must equal in_features).",
                "In C/C++: lda/ldb/ldc are the stored matrices' row counts (column-major); for transposed operands the rule swaps.",
            ]),
        ),
        FaultKind::HostPointer => (
            "an operand is host (CPU) memory, passed to a GPU call".into(),
            steps(&[
                "Move the tensor to the GPU (tensor.to('cuda')) or the module (model.cuda()) so every operand lives on the same device.",
                "In C/C++: copy host data into a cudaMalloc'd buffer with cudaMemcpy before the call.",
            ]),
        ),
        FaultKind::OutOfBounds => (
            "an operand extends past the end of its allocation: the call would read or write memory that is not part of the tensor".into(),
            steps(&[
                "A wrong feature width is the usual cause: the input has fewer features than the layer's in_features, or a view/stride is wrong.",
                "Check the leading dimensions and that the buffer was not freed or allocated too small.",
            ]),
        ),
        FaultKind::AsyncError => (
            "the kernel launched by this call faulted; the guard synchronised right after it (as CUDA_LAUNCH_BLOCKING=1 would), so this call is the culprit, not a later one".into(),
            steps(&[
                "Check this call's operands above (pointers, extents); an illegal address means it touched memory outside its buffers.",
                "Sticky errors (illegal address, launch failure) leave the CUDA context unusable: the process must restart.",
            ]),
        ),
        FaultKind::ApiError => {
            let steps_for = match fault.status_name.as_str() {
                "CUBLAS_STATUS_EXECUTION_FAILED" => &[
                    "Usually the symptom of an earlier asynchronous fault: read the earliest fault in this report.",
                    "Without the guard, rerun with CUDA_LAUNCH_BLOCKING=1 to pin it; with the guard, the earlier async_error names the call.",
                ][..],
                "CUBLAS_STATUS_NOT_INITIALIZED" => &[
                    "The CUDA context could not start: see `cublasguard doctor` for the driver, device visibility and memory.",
                ][..],
                "CUBLAS_STATUS_ALLOC_FAILED" | "cudaErrorMemoryAllocation" => &["Out of device memory: reduce the batch size."][..],
                "CUBLAS_STATUS_NOT_SUPPORTED" | "CUBLAS_STATUS_ARCH_MISMATCH" => &[
                    "The type combination or GPU architecture is not supported by this cuBLAS: check the dtypes and the GPU's compute capability.",
                ][..],
                _ => &["Check the call's arguments above and the library versions (`cublasguard doctor`)."][..],
            };
            (format!("the library returned {} and no guard check explains it", fault.status_name), steps(steps_for))
        }
        FaultKind::AllocFailed => {
            let mut cause = "out of device memory".to_string();
            if let Some(m) = fault.memory {
                if let (Some(free), Some(total)) = (m.free, m.total) {
                    cause.push_str(&format!(
                        ": {} free of {} ({} in {} allocations tracked by the guard)",
                        bytes(free),
                        bytes(total),
                        bytes(m.tracked_live_bytes),
                        m.tracked_live_count
                    ));
                }
            }
            (
                cause,
                steps(&[
                    "Reduce the batch size, or use gradient checkpointing / mixed precision to shrink activations.",
                    "Free what is no longer needed (del tensors, torch.cuda.empty_cache()); a growing tracked count across steps means a leak.",
                    "Check that no other process holds the GPU (nvidia-smi).",
                ]),
            )
        }
        FaultKind::InitFailed => {
            let cause = fault.cause.as_ref().map(|c| c.message.clone()).unwrap_or_else(|| "CUDA could not start".into());
            let s = match fault.cause.as_ref().map(|c| c.kind) {
                Some(InitCauseKind::NoDriver) => steps(&[
                    "Install the NVIDIA driver (nvidia-smi must work); in a container, start it with GPU access (--gpus all, nvidia-container-toolkit).",
                    "Run `cublasguard doctor` to see which CUDA libraries the program would load.",
                ]),
                Some(InitCauseKind::DriverTooOld) => steps(&[
                    "Upgrade the NVIDIA driver to one that supports the runtime's CUDA version, or install the framework build for the driver's CUDA version.",
                ]),
                Some(InitCauseKind::NoDevice) => steps(&[
                    "Check CUDA_VISIBLE_DEVICES (empty or -1 hides every GPU) and that the job or container was given a GPU.",
                ]),
                Some(InitCauseKind::OutOfMemory) => steps(&[
                    "The device had no room for cuBLAS's workspace: this is memory, not the driver. Reinstalling drivers will not help.",
                    "PyTorch: torch.cuda.empty_cache() before the first matmul, a smaller batch, or PYTORCH_CUDA_ALLOC_CONF to cap the caching allocator; TensorFlow: TF_FORCE_GPU_ALLOW_GROWTH=true (it maps all memory otherwise).",
                    "Check nvidia-smi for other processes holding memory on the same GPU.",
                ]),
                Some(InitCauseKind::ForkedChild) => steps(&[
                    "Use the spawn start method for workers that touch CUDA: torch.multiprocessing.set_start_method(\"spawn\"), or DataLoader(..., multiprocessing_context=\"spawn\").",
                    "Or keep CUDA out of the parent until the workers are started; worker_init_fn does not help, the context is already lost at fork.",
                ]),
                Some(InitCauseKind::ContextLost) => steps(&[
                    "This is not the first fault: read the earlier one, whose call number the cause names; every call after it fails the same way.",
                    "Run again with the guard (or CUDA_LAUNCH_BLOCKING=1) to pin that first fault to its call.",
                ]),
                _ => steps(&[
                    "Check nvidia-smi for the device state, memory already in use at start-up, and driver messages (dmesg).",
                ]),
            };
            (cause, s)
        }
        FaultKind::UseAfterFree => {
            let by = fault.freed_by.as_ref().map(|f| format!(" (by {} at call #{}, {} at {})", f.api, f.seq, bytes(f.size), f.base)).unwrap_or_default();
            (
                format!("use after free: an operand points into device memory the program freed earlier{by}"),
                steps(&[
                    "Keep the buffer (the tensor) alive until every call that uses it has run; free it after the last one.",
                    "With several streams, a buffer freed on one stream may still be in use on another: synchronise first (PyTorch: tensor.record_stream(stream)).",
                ]),
            )
        }
        FaultKind::InvalidHandle => (
            "the cuBLAS handle is not a live one: never created, destroyed already, or inherited across fork".into(),
            steps(&["Create the handle with cublasCreate in this process and destroy it only after the last call that uses it."]),
        ),
        FaultKind::Unknown => (
            "a fault of a kind this cublasguard does not know: the guard's own message above says what it found".into(),
            steps(&["Upgrade cublasguard to the version that wrote this trace (the note at the top names it) for its advice on this kind."]),
        ),
    };
    if let Some(e) = &fault.error {
        if !matches!(fault.kind, FaultKind::AsyncError) {
            next_steps.push(format!(
                "The device then reported {} ({}) at the guard's {}: this call's kernel faulted because of the problem above.",
                e.name, e.code, e.call
            ));
        }
    }
    if !fault.suspects.is_empty() {
        // A pending error: the kernels launched since the device was last found clean.
        let n = fault.suspects.len();
        let stream = fault.stream.as_deref();
        let likely = fault.suspects.iter().rev().find(|s| Some(s.stream.as_str()) == stream).or(fault.suspects.last());
        if let Some(k) = likely {
            if n == 1 {
                cause = format!("{cause}; the kernel that faulted is {} (launched at call #{})", k.kernel, k.seq);
            } else {
                cause = format!(
                    "{cause}; one of these {n} kernels faulted (launched since the device was last found clean); the most likely is the last \
                     one on this stream: {} (call #{})",
                    k.kernel, k.seq
                );
                next_steps.insert(0, "Run again with CUBLASGUARD_SYNC=launches: the guard then synchronises after every launch and pins the error to the launch that caused it.".into());
            }
        }
    }
    if let Some(device) = &fault.device {
        // The guard recorded the device because an architecture mismatch explains this status.
        let sm = device.compute_capability.replace('.', "");
        cause = format!(
            "probably a build without kernels for this device's architecture: the device is sm_{sm} (compute capability {}), \
             and {} ({}) at this point is what a library or framework built for older architectures returns ({cause})",
            device.compute_capability, fault.status_name, fault.status
        );
        next_steps.insert(
            0,
            format!("Run `cublasguard doctor --python <the program's python>`: it lists the framework's compiled architectures next to sm_{sm}; install a build that includes it (a newer release, or one built for a newer CUDA)."),
        );
    }
    Diagnosis { layer, row_major, cause, next_steps }
}

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cublasguard::trace::Position;

    fn fault(kind: FaultKind) -> Fault {
        Fault {
            seq: 7,
            api: "cublasSgemm_v2".into(),
            kind,
            message: "m".into(),
            status: 0,
            status_name: "CUBLAS_STATUS_SUCCESS".into(),
            error: None,
            cause: None,
            thread: 1,
            stream: None,
            time_ns: 0,
            handle: None,
            args: serde_json::from_str(r#"{"transa":"T","transb":"N","m":16,"n":32,"k":8}"#).unwrap(),
            operands: vec![Operand {
                name: "B".into(),
                ptr: "0x1".into(),
                dtype: "f32".into(),
                rows: 8,
                cols: 32,
                ld: 8,
                bytes: Some(1024),
                allocation: None,
                member_allocation: None,
                scanned: true,
                sampled: false,
                batch_count: None,
                stride: None,
                pointer_array: false,
                bad_member: None,
                scan_path: None,
                nan: Some(1),
                inf: Some(0),
                first_nonfinite: Some(Position { row: 2, col: 3 }),
            }],
            memory: None,
            backtrace: vec![],
            device: None,
            freed_by: None,
            python_stack: vec![],
            python_stack_note: None,
            thread_name: None,
            suspects: Vec::new(),
            dump: None,
            dump_note: None,
        }
    }

    #[test]
    fn recognises_a_linear_layer_and_translates_to_row_major() {
        let d = diagnose(&fault(FaultKind::NonfiniteInput), None);
        assert_eq!(d.layer.as_deref(), Some("looks like nn.Linear(in_features=8, out_features=16) on a batch of 32"));
        assert_eq!(d.row_major, ["B as row-major: [32, 8] f32, first non-finite at [3, 2]"]);
        assert!(d.cause.contains("the features fed to this Linear"), "{}", d.cause);
        assert!(d.next_steps[0].contains("input features"));
    }

    #[test]
    fn later_nonfinite_inputs_are_propagation() {
        let d = diagnose(&fault(FaultKind::NonfiniteInput), Some(3));
        assert!(d.cause.starts_with("propagation") && d.cause.contains("#3"), "{}", d.cause);
    }

    #[test]
    fn every_kind_has_a_cause_and_a_next_step() {
        for kind in [
            FaultKind::InvalidHandle,
            FaultKind::InvalidArgument,
            FaultKind::HostPointer,
            FaultKind::OutOfBounds,
            FaultKind::NonfiniteInput,
            FaultKind::NonfiniteOutput,
            FaultKind::AsyncError,
            FaultKind::ApiError,
            FaultKind::AllocFailed,
            FaultKind::InitFailed,
        ] {
            let d = diagnose(&fault(kind), None);
            assert!(!d.cause.is_empty() && !d.next_steps.is_empty(), "{kind:?}");
        }
    }

    #[test]
    fn not_linear_unless_t_n() {
        let mut f = fault(FaultKind::InvalidArgument);
        f.args.insert("transa".into(), serde_json::json!("N"));
        assert_eq!(linear_layer(&f), None);
    }

    #[test]
    fn formats_bytes() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
