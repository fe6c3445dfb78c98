//! Turns a recorded fault into what a person needs: the shapes in the terms their framework
//! uses, the probable cause, and what to do next. The recorder records facts; this is where
//! they are interpreted.

use cublasguard_format::gpu_health::xid;
use cublasguard_format::trace::{Fault, FaultKind, InitCauseKind, Operand, Trace};
use serde::Serialize;

use super::call_sites::first_line;
use super::gpu_context::gpu_context;
use super::hang_cause::{hang_cause, hang_steps};

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Diagnosis {
    /// "looks like nn.Linear(...)" when the GEMM has that shape.
    pub layer: Option<String>,
    /// Each operand in row-major terms (how PyTorch and NumPy print tensors).
    pub row_major: Vec<String>,
    pub cause: String,
    pub next_steps: Vec<String>,
    /// What the GPU's health adds: its Xids, ECC errors of the run, heat and slowdowns
    /// (context, not a cause, unless the cause says so).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_context: Vec<String>,
}

/// A NaN/Inf verdict judged after its call returned (deferred, the default) carries the call
/// site kept at the call; where it has none (an older trace, a guard built without frame
/// pointers) and no Python frames either, the trace does not say where in the program the call
/// was made: the step says how to have it.
fn late_call_site_step(fault: &Fault) -> Option<String> {
    let late = matches!(fault.kind, FaultKind::NonfiniteInput | FaultKind::NonfiniteOutput) && fault.found_at_seq.is_some();
    (late && fault.backtrace.is_empty() && fault.python_stack.is_empty()).then(|| {
        format!(
            "This verdict was judged after call #{} returned (CUBLASGUARD_SYNC=deferred, the default), so the trace has no backtrace of it: \
             to see which line of the program made the call, run it again with CUBLASGUARD_SYNC=gemm (each call judged before it returns, with \
             its native backtrace).",
            fault.seq
        )
    })
}

/// cuBLAS GEMMs as PyTorch issues them for y = x W^T: transa = T, transb = N, m = out, n = batch, k = in.
/// Why an asynchronous error is on its call: the guard's synchronisation right after it (gemm
/// mode), or the breadcrumbs (deferred: the default), which blame a call only when its own work
/// was the first on its stream not to complete, and otherwise leave the error where it surfaced.
fn async_cause(fault: &Fault) -> String {
    if fault.breadcrumbs.is_empty() {
        return "the kernel launched by this call faulted; the guard synchronised right after it (as CUDA_LAUNCH_BLOCKING=1 would), so this call is the culprit, not a later one".into();
    }
    match fault.found_at_seq {
        Some(found) => {
            let there = if found == 0 { "the exit".to_string() } else { format!("call #{found}") };
            format!(
                "the kernel launched by this call faulted: the work queued before it on its stream completed and this call's did not (its breadcrumb never landed), so this call is the culprit, as CUDA_LAUNCH_BLOCKING=1 would have shown, not {there}, where the error surfaced"
            )
        }
        // Blamed where it surfaced with a success status: its own work was the first unfinished.
        None if fault.status == 0 => "the kernel launched by this call faulted: every breadcrumb left before it landed and its own work did not complete, so this call is the culprit, as CUDA_LAUNCH_BLOCKING=1 would have shown"
            .into(),
        None => "a kernel queued on the device faulted and the error surfaced at this call, which is not necessarily the culprit: the message above says, from the breadcrumbs each guarded call left on its stream, which calls had not completed (CUBLASGUARD_SYNC=launches pins it to its launch)"
            .into(),
    }
}

/// The inputs of a `nonfinite_output` fault that were not read (outputs first, judged after
/// the call, as its message says): its operands not scanned, the workspace aside. Other faults
/// have operands left unscanned for other reasons (cublasLt's C with beta = 0, an integer
/// pivot array), which say nothing of whether the call made the NaN.
fn unread_inputs(fault: &Fault) -> Vec<&str> {
    if !fault.message.contains(cublasguard_format::trace::INPUTS_LEFT_UNREAD) {
        return Vec::new();
    }
    fault.operands.iter().filter(|o| !o.scanned && o.name != "workspace").map(|o| o.name.as_str()).collect()
}

pub fn linear_layer(fault: &Fault) -> Option<String> {
    let args = &fault.args;
    if args.label("transa")? != "T" || args.label("transb")? != "N" {
        return None;
    }
    let (m, n, k) = (args.int("m")?, args.int("n")?, args.int("k")?);
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

/// What kind of program made the calls: the advice is in its terms (PyTorch's, JAX's, a Python
/// program's, or the CUDA C API's for a C/C++ program).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Program {
    #[serde(rename = "pytorch")]
    PyTorch,
    Jax,
    /// Python, with no framework the trace names.
    Python,
    /// A C/C++ (or other compiled) program calling CUDA and cuBLAS itself.
    Native,
}

/// Decides the program's kind from what its trace records: the Python it runs (its version,
/// the faults' Python frames, an interpreter as the executable), the framework the guard found
/// loaded (PyTorch's `libtorch_cuda.so`), the libraries' paths and the native frames. Without
/// Python it is a native program, even one that links libtorch.
pub fn program_of(t: &Trace) -> Program {
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let interpreter = t.process.exe.iter().chain(t.process.argv.first()).any(|p| base(p).starts_with("python"));
    let python = t.environment.python_version.is_some() || interpreter || t.faults.iter().any(|f| !f.python_stack.is_empty() || f.python_stack_note.is_some());
    if !python {
        return Program::Native;
    }
    // Where the frames and libraries come from.
    // A frame in the user's own code says nothing of the framework, whatever its folders are
    // called (a project in a folder named `torch`): where the trace says which files are
    // installed, only those count.
    let installed = |file: &str| t.environment.python_paths.as_ref().is_none_or(|paths| paths.holds(file));
    let files = t.faults.iter().flat_map(|f| f.python_stack.iter().map(|p| p.file.as_str())).filter(|file| installed(file));
    let native = t.faults.iter().flat_map(|f| f.backtrace.iter().map(String::as_str));
    let libraries = t.environment.libraries.iter().map(|l| l.path.as_str());
    let places: Vec<&str> = files.chain(native).chain(libraries).collect();
    let torch = t.environment.framework.as_ref().is_some_and(|f| f.name == "torch")
        || places.iter().any(|p| p.contains("/torch/") || p.contains("libtorch"))
        || t.faults.iter().any(|f| f.thread_name.as_deref().is_some_and(|n| n.starts_with("pt_autograd")));
    let jax = places.iter().any(|p| p.contains("/jax/") || p.contains("/jaxlib/") || p.contains("jax_plugins") || p.contains("xla_extension"));
    if torch {
        Program::PyTorch
    } else if jax {
        Program::Jax
    } else {
        Program::Python
    }
}

/// `cublasSgemm` for `cublasSgemm_v2`: the name a C program calls (cublas_v2.h's macro).
fn c_name(api: &str) -> &str {
    api.strip_suffix("_v2").unwrap_or(api)
}

/// `earlier_nonfinite`: an earlier fault in the run already saw non-finite values, so this
/// one is probably propagation. `program`: whose terms the advice is in.
pub fn diagnose(fault: &Fault, earlier_nonfinite: Option<u64>, program: Program) -> Diagnosis {
    let layer = linear_layer(fault);
    let unread = unread_inputs(fault);
    let row_major = fault.operands.iter().map(row_major).collect();
    let tf32 = fault.handle.as_ref().is_some_and(|h| h.reduced_precision);
    let steps = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let call = c_name(&fault.api);
    let native = program == Program::Native;
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
                let advice = match program {
                    Program::PyTorch => steps(&[
                        "If this is the first layer: check the input features (data loading, normalisation, division by zero, log of 0) with torch.isfinite(x).all() before the model.",
                        "If it happens after some training steps: the weights diverged; lower the learning rate, clip gradients (torch.nn.utils.clip_grad_norm_), and turn on torch.autograd.set_detect_anomaly(True) to find the backward op that made them.",
                        "Known-benign NaNs (masked attention, torch.where) can be excluded by checking the operand's first position above.",
                    ]),
                    Program::Jax => steps(&[
                        "If this is the first layer: check the input arrays (data loading, normalisation, division by zero, log of 0) with jnp.isfinite(x).all() before the model.",
                        "To find the operation that made them: jax.config.update(\"jax_debug_nans\", True) stops at the first one that produces a NaN.",
                        "If it happens after some training steps: the weights diverged; lower the learning rate or clip gradients (optax.clip_by_global_norm).",
                    ]),
                    Program::Python => steps(&[
                        "Check the arrays before they reach the GPU (data loading, normalisation, division by zero, log of 0), with numpy.isfinite(x).all() or your framework's isfinite.",
                        "If it happens after some iterations: the values diverged; lower the learning rate (step size) or rescale the data.",
                    ]),
                    Program::Native => vec![
                        format!(
                            "Check the buffer you pass to {call} as {op}: copy it back with cudaMemcpy(host, d_{op}, bytes, cudaMemcpyDeviceToHost) right after you fill it and test every element with isfinite(); the first step that leaves a NaN/Inf in it is the culprit (a division by zero, log of 0 or sqrt of a negative number in your own code or kernel)."
                        ),
                        "If it is finite at first and goes bad after some iterations: the values diverge; lower the step size (learning rate) or rescale the data.".into(),
                        format!("A NaN you make on purpose can be kept out of the report with `CUBLASGUARD_IGNORE='kind=nonfinite_input,api={},operand={op}'`.", fault.api),
                    ],
                };
                (
                    format!("operand {op} is {input} and already held NaN/Inf before this call: the bad values were made earlier, outside cuBLAS"),
                    advice,
                )
            }
        },
        FaultKind::NonfiniteOutput if !unread.is_empty() => (
            format!(
                "this call's output holds NaN/Inf, and whether it consumed them (from {}) or produced them is not known: those inputs \
                 were not read (CUBLASGUARD_SCAN_ORDER=outputs-first reads them only once an output is bad, and in the default mode that \
                 is after they may have changed)",
                unread.join(", ")
            ),
            vec![
                "Rerun with CUBLASGUARD_SYNC=gemm (outputs first reads the inputs right after the call there) or CUBLASGUARD_SCAN_ORDER=all, to tell a NaN the call consumed from one it made.".into(),
                "The earliest such call is where the NaN first appears in a GEMM's output: look at what fed its inputs (the kernels launched just before it, in the trace's recent calls).".into(),
            ],
        ),
        FaultKind::NonfiniteOutput => {
            let mut cause = "this call produced Inf/NaN from finite inputs: overflow (values beyond the dtype's range) or Inf - Inf".to_string();
            if tf32 {
                cause.push_str("; the handle uses TF32 tensor-op math, which rounds float32 inputs to 10 mantissa bits");
            }
            let mut s = match program {
                Program::PyTorch => steps(&[
                    "Lower the learning rate or add gradient clipping (torch.nn.utils.clip_grad_norm_); exploding weights overflow first in the largest GEMM.",
                    "In fp16, use loss scaling (torch.cuda.amp.GradScaler) or bf16, whose range matches float32.",
                    "Check the operands' magnitudes: an input scaled by a huge factor overflows the product.",
                ]),
                Program::Jax => steps(&[
                    "Lower the learning rate or clip gradients (optax.clip_by_global_norm); exploding weights overflow first in the largest GEMM.",
                    "In fp16, scale the loss or use bf16, whose range matches float32.",
                    "Check the operands' magnitudes: an input scaled by a huge factor overflows the product.",
                ]),
                Program::Python => steps(&[
                    "If this runs in a training loop: lower the learning rate or clip gradients; exploding weights overflow first in the largest GEMM.",
                    "In fp16, scale the loss or use bf16, whose range matches float32.",
                    "Check the operands' magnitudes: an input scaled by a huge factor overflows the product.",
                ]),
                Program::Native => vec![
                    format!("Check the magnitudes of the buffers you pass to {call}: copy A and B back with cudaMemcpy and find their largest |value|; a sum of products beyond the output type's range (3.4e38 for float, 65504 for half) overflows to Inf, and Inf - Inf gives NaN."),
                    "If this runs in a training loop or an iterative solver: lower the learning rate (step size) or rescale the inputs; exploding values overflow first in the largest GEMM.".into(),
                    "For half-precision data: accumulate in float (cublasGemmEx with CUBLAS_COMPUTE_32F) or scale the inputs down.".into(),
                ],
            };
            if tf32 {
                s.push(match program {
                    Program::PyTorch => "To compare with strict float32: torch.backends.cuda.matmul.allow_tf32 = False (or NVIDIA_TF32_OVERRIDE=0).".into(),
                    Program::Jax => "To compare with strict float32: jax.default_matmul_precision(\"highest\") (or NVIDIA_TF32_OVERRIDE=0).".into(),
                    Program::Python => "To compare with strict float32: NVIDIA_TF32_OVERRIDE=0 turns TF32 off for the whole process.".into(),
                    Program::Native => "To compare with strict float32: cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) (or NVIDIA_TF32_OVERRIDE=0).".into(),
                });
            }
            (cause, s)
        }
        FaultKind::InvalidArgument => (
            "the arguments break cuBLAS's rules: a shape or leading dimension does not fit the matrices".into(),
            match program {
                Program::PyTorch => steps(&[
                    "Compare the feature width of the input with the layer's in_features (x.shape[-1] must equal in_features).",
                    "A view with unusual strides can break the rule too: call .contiguous() on the input before the op.",
                ]),
                Program::Jax | Program::Python => steps(&[
                    "Compare the shapes of the arrays you multiply: the inner dimensions must agree (x.shape[-1] == w.shape[0]).",
                ]),
                Program::Native => vec![
                    format!("lda/ldb/ldc are the stored matrices' row counts (column-major): for {call}, lda >= max(1, m) if transa = N, else max(1, k); ldb >= max(1, k) if transb = N, else max(1, n); ldc >= max(1, m)."),
                    "Row-major data: compute C^T = B^T A^T (swap A and B, and m and n) instead of passing row-major leading dimensions.".into(),
                ],
            },
        ),
        FaultKind::HostPointer => (
            "an operand is host (CPU) memory, passed to a GPU call".into(),
            match program {
                Program::PyTorch => steps(&["Move the tensor to the GPU (tensor.to('cuda')) or the module (model.cuda()) so every operand lives on the same device."]),
                Program::Jax => steps(&["Put the array on the device (jax.device_put(x)) before the call."]),
                Program::Python => steps(&["Pass device arrays (CuPy's, or your framework's GPU tensors), not NumPy arrays or other host memory."]),
                Program::Native => vec![
                    format!("Copy the host data into a cudaMalloc'd buffer with cudaMemcpy(d_x, x, bytes, cudaMemcpyHostToDevice) and pass that device pointer to {call}."),
                    "Or allocate the buffer with cudaMallocManaged, which host and device can both use.".into(),
                ],
            },
        ),
        FaultKind::OutOfBounds => (
            "an operand extends past the end of its allocation: the call would read or write memory that is not part of the tensor".into(),
            match program {
                Program::Native => vec![
                    format!("Check each buffer's size against what {call} reads: ld x cols elements of its type (A is lda x k with transa = N, else lda x m); a wrong feature width (k), a wrong leading dimension or a buffer allocated too small is the usual cause."),
                    "Check that the buffer was not freed and allocated again smaller.".into(),
                ],
                Program::PyTorch => steps(&[
                    "A wrong feature width is the usual cause: the input has fewer features than the layer's in_features, or a view/stride is wrong.",
                    "Check the leading dimensions and that the buffer was not freed or allocated too small.",
                ]),
                Program::Jax | Program::Python => steps(&[
                    "Compare the shapes and strides of the arrays you multiply with the buffers behind them: an inner dimension larger than the data, or a view laid over a smaller buffer, is the usual cause.",
                    "Check the leading dimensions and that the buffer was not freed or allocated too small.",
                ]),
            },
        ),
        FaultKind::GpuHang => (hang_cause(fault), hang_steps(fault)),
        FaultKind::AsyncError => (
            async_cause(fault),
            steps(&[
                "Check this call's operands above (pointers, extents); an illegal address means it touched memory outside its buffers.",
                "Sticky errors (illegal address, launch failure) leave the CUDA context unusable: the process must restart.",
            ]),
        ),
        FaultKind::ApiError if fault.cause.as_ref().is_some_and(|c| matches!(c.kind, InitCauseKind::CudnnSublibrary | InitCauseKind::CudnnIncompatible)) => {
            let cause = fault.cause.as_ref().map(|c| c.message.clone()).unwrap_or_default();
            (cause, cudnn_steps(fault.cause.as_ref().map(|c| c.kind)))
        }
        FaultKind::ApiError if fault.status_name.starts_with("CUDNN_STATUS_EXECUTION_FAILED") => (
            format!("cuDNN returned {}: its kernels could not run", fault.status_name),
            steps(&[
                "Usually the symptom of an earlier asynchronous fault (the CUDA error this fault names, if any): read the earliest fault in this report.",
                "Rerun with CUBLASGUARD_SYNC=launches (or CUDA_LAUNCH_BLOCKING=1) to pin the kernel that faulted.",
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
                match program {
                    Program::PyTorch => steps(&[
                        "Reduce the batch size, or use gradient checkpointing / mixed precision to shrink activations.",
                        "Free what is no longer needed (del tensors, torch.cuda.empty_cache()); a growing tracked count across steps means a leak.",
                        "Check that no other process holds the GPU (nvidia-smi).",
                    ]),
                    Program::Jax => steps(&[
                        "Reduce the batch size; JAX preallocates most of the GPU's memory at start: XLA_PYTHON_CLIENT_PREALLOCATE=false or a smaller XLA_PYTHON_CLIENT_MEM_FRACTION leaves room for others.",
                        "Check that no other process holds the GPU (nvidia-smi).",
                    ]),
                    Program::Python => steps(&[
                        "Reduce the batch size, or free arrays that are no longer needed; a growing tracked count across steps means a leak.",
                        "Check that no other process holds the GPU (nvidia-smi).",
                    ]),
                    Program::Native => steps(&[
                        "Reduce the batch size or the buffers' sizes.",
                        "cudaFree the buffers you no longer need; a tracked count that grows across iterations means a leak (a cudaMalloc without its cudaFree).",
                        "Check that no other process holds the GPU (nvidia-smi).",
                    ]),
                },
            )
        }
        FaultKind::InitFailed => {
            let cause = fault.cause.as_ref().map(|c| c.message.clone()).unwrap_or_else(|| "CUDA could not start".into());
            let s = match fault.cause.as_ref().map(|c| c.kind) {
                Some(InitCauseKind::NoDriver) => steps(&[
                    "Install the NVIDIA driver (nvidia-smi must work); in a container, start it with GPU access (--gpus all, nvidia-container-toolkit).",
                    "Run `cublasguard doctor` to see which CUDA libraries the program would load.",
                ]),
                Some(InitCauseKind::OutOfFileDescriptors) => {
                    let mut s = steps(&[
                        "This is the process's file descriptors, not the driver: reinstalling drivers will not help.",
                        "Raise the limit: `ulimit -n 65536` in the shell that starts the job (LimitNOFILE= in a systemd unit, --ulimit nofile=65536:65536 for docker).",
                        "If the count grows as the program runs, something opens files, sockets or pipes and never closes them: `ls /proc/PID/fd | wc -l` while it runs shows it.",
                    ]);
                    if program == Program::PyTorch {
                        s.push("DataLoader workers pass tensors through descriptors: torch.multiprocessing.set_sharing_strategy(\"file_system\") uses far fewer.".into());
                    }
                    s
                }
                Some(InitCauseKind::DriverTooOld) if native => steps(&[
                    "Upgrade the NVIDIA driver to one that supports the runtime's CUDA version, or build the program with a CUDA toolkit the driver supports (or install the CUDA forward-compatibility package, cuda-compat).",
                ]),
                Some(InitCauseKind::DriverTooOld) => steps(&[
                    "Upgrade the NVIDIA driver to one that supports the runtime's CUDA version, or install the framework build for the driver's CUDA version.",
                ]),
                Some(InitCauseKind::NoDevice) => steps(&[
                    "Check CUDA_VISIBLE_DEVICES (empty or -1 hides every GPU) and that the job or container was given a GPU.",
                ]),
                Some(InitCauseKind::OutOfMemory) => {
                    let mut s = steps(&["The device had no room for cuBLAS's workspace: this is memory, not the driver. Reinstalling drivers will not help."]);
                    s.push(match program {
                        Program::PyTorch => "torch.cuda.empty_cache() before the first matmul, a smaller batch, or PYTORCH_CUDA_ALLOC_CONF to cap the caching allocator.".into(),
                        Program::Jax => "JAX preallocates most of the GPU's memory at start: XLA_PYTHON_CLIENT_PREALLOCATE=false, or a smaller XLA_PYTHON_CLIENT_MEM_FRACTION.".into(),
                        Program::Python => "A memory pool can hold nearly all memory: CuPy's cupy.get_default_memory_pool().free_all_blocks(), TensorFlow TF_FORCE_GPU_ALLOW_GROWTH=true.".into(),
                        Program::Native => format!("Create the handle ({call}) before the large allocations, or cudaFree buffers you no longer need before creating it."),
                    });
                    s.push("Check nvidia-smi for other processes holding memory on the same GPU.".into());
                    s
                }
                Some(InitCauseKind::ForkedChild) => match program {
                    Program::PyTorch => steps(&[
                        "Use the spawn start method for workers that touch CUDA: torch.multiprocessing.set_start_method(\"spawn\"), or DataLoader(..., multiprocessing_context=\"spawn\").",
                        "Or keep CUDA out of the parent until the workers are started; worker_init_fn does not help, the context is already lost at fork.",
                    ]),
                    Program::Jax | Program::Python => steps(&[
                        "Use the spawn start method for workers that touch CUDA: multiprocessing.set_start_method(\"spawn\").",
                        "Or keep CUDA out of the parent until the workers are started: the context is already lost at fork.",
                    ]),
                    Program::Native => steps(&[
                        "A CUDA context does not survive fork(): start CUDA only in the child, after the fork, or start workers with posix_spawn/exec instead of a bare fork.",
                    ]),
                },
                Some(kind @ (InitCauseKind::CudnnSublibrary | InitCauseKind::CudnnIncompatible)) => cudnn_steps(Some(kind)),
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
                match program {
                    Program::Native => vec![
                        format!("Keep the buffer allocated until every call that uses it has run: cudaFree it after the last {call} that reads it (after cudaStreamSynchronize when the calls are asynchronous)."),
                        "With several streams, a buffer freed on one stream may still be in use on another: synchronise first, or free it with cudaFreeAsync on the stream that uses it.".into(),
                    ],
                    Program::PyTorch => steps(&[
                        "Keep the buffer (the tensor) alive until every call that uses it has run; free it after the last one.",
                        "With several streams, a buffer freed on one stream may still be in use on another: synchronise first (PyTorch: tensor.record_stream(stream)).",
                    ]),
                    Program::Jax | Program::Python => steps(&[
                        "Keep the buffer (the array) alive until every call that uses it has run; free it after the last one.",
                        "With several streams, a buffer freed on one stream may still be in use on another: synchronise first.",
                    ]),
                },
            )
        }
        FaultKind::NonfiniteOrigin => {
            let kernel = fault.args.get("kernel").and_then(|k| k.as_str()).unwrap_or("this kernel");
            let mut s = match program {
                Program::Native => steps(&[
                    "Look at this kernel's arithmetic on its inputs: a division by zero, log or sqrt of a non-positive number, an overflow of its type.",
                    "compute-sanitizer --tool memcheck rules out an out-of-range read that brought in garbage.",
                ]),
                _ => steps(&[
                    "The Python line above launched it: check that operation's inputs (a log or division of a bad value, a norm of zero, an fp16/bf16 overflow: try float32 there, or a smaller learning rate).",
                    "torch.autograd.set_detect_anomaly(True) names the backward op when the kernel is in the backward pass.",
                ]),
            };
            s.push(format!("A kernel that writes -inf or NaN on purpose (an attention mask) is kept out with CUBLASGUARD_IGNORE='kernel={kernel}'."));
            (
                format!("{kernel} made the first NaN/Inf of the run in memory a guarded call uses: this is the origin; the cuBLAS calls that consumed it later only passed it on"),
                s,
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
    if let Some(step) = late_call_site_step(fault) {
        next_steps.push(step);
    }
    if let Some(e) = &fault.error {
        if !matches!(fault.kind, FaultKind::AsyncError) {
            // The trace says whose call saw it: the guard's own synchronisation, or the program's
            // own call ("surfaced at the program's own cudaMemcpy, ...").
            let programs = fault.message.contains(&format!("the program's own {}", e.call)) || matches!(e.call.as_str(), "cudaFree" | "cudaMalloc");
            let whose = if programs { "the program's own" } else { "the guard's" };
            next_steps.push(format!(
                "The device then reported {} ({}) at {whose} {}: this call's kernel faulted because of the problem above.",
                e.name, e.code, e.call
            ));
        }
    }
    if !fault.suspects.is_empty() && fault.kind != FaultKind::GpuHang {
        // A pending error: the kernels launched since the device was last found clean.
        let n = fault.suspects.len();
        let stream = fault.stream.as_deref();
        let likely = fault.suspects.iter().rev().find(|s| Some(s.stream.as_str()) == stream).or(fault.suspects.last());
        if let Some(k) = likely {
            let at = first_line(&k.backtrace).map(|l| format!(", at {l}")).unwrap_or_default();
            if n == 1 {
                cause = format!("{cause}; the kernel that faulted is {} (launched at call #{}{at})", k.kernel, k.seq);
            } else {
                cause = format!(
                    "{cause}; one of these {n} kernels faulted (launched since the device was last found clean); the most likely is the last \
                     one on this stream: {} (call #{}{at})",
                    k.kernel, k.seq
                );
                next_steps.insert(
                    0,
                    "Run again with CUBLASGUARD_SYNC=launches: the guard then synchronises after every launch and pins the error to the launch that caused it."
                        .into(),
                );
            }
        }
    }
    if let (FaultKind::NonfiniteInput, Some(w)) = (fault.kind, fault.writers.first()) {
        // A kernel launched since the operand's memory was last seen finite wrote into it.
        let others = match fault.writers.len() {
            1 => String::new(),
            n => format!("; {} other launch(es) since also point into it", n - 1),
        };
        cause = format!(
            "{cause}; probable origin: kernel {} (launched at call #{}, grid {}x{}x{}, stream {}), the newest launch since this memory was last \
             seen finite whose parameters point into it{others}",
            w.kernel, w.seq, w.grid[0], w.grid[1], w.grid[2], w.stream
        );
        next_steps.insert(
            0,
            format!(
                "Look at {} first: it wrote into this operand after it was last seen finite (a log or division of a bad value, an overflow in fp16/bf16, a masked fill).",
                w.kernel
            ),
        );
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
            if native {
                format!("Build the program (and the libraries it links) with kernels for sm_{sm}: nvcc -gencode arch=compute_{sm},code=sm_{sm} (or include PTX for the driver to compile), and use a cuBLAS that supports it.")
            } else {
                format!("Run `cublasguard doctor --python <the program's python>`: it lists the framework's compiled architectures next to sm_{sm}; install a build that includes it (a newer release, or one built for a newer CUDA).")
            },
        );
    }
    let gpu_context = fault.gpu_health.as_ref().map(gpu_context).unwrap_or_default();
    if let Some(x) = fault.cause.as_ref().filter(|c| c.kind == InitCauseKind::GpuHardware).and_then(|c| xid(c.xid?)) {
        // The GPU failed: the call only ran when it did. What the call looked like stays above.
        cause = format!("the GPU failed, not the program: it logged Xid {} during the run ({})", x.number, x.meaning);
        next_steps = vec![
            format!("NVIDIA's action for Xid {}: {}.", x.number, x.action),
            "Run `cublasguard doctor` on this machine for the GPU's health (ECC errors, remapped rows, temperature); `nvidia-smi -q` and the kernel log (dmesg) show the Xid too.".into(),
            "The program's call is not the cause: after the GPU is healthy again, the same run is expected to pass.".into(),
        ];
    } else if let Some(health) = fault.gpu_health.as_ref() {
        let program_xids = health.program_xids();
        if let Some(x) = program_xids.first() {
            cause = format!("{cause} (the GPU logged Xid {}: {}; the program's own fault, the GPU is fine)", x.number, x.meaning);
        }
    }
    Diagnosis { layer, row_major, cause, next_steps, gpu_context }
}

/// Next steps for a cuDNN cause: its libraries, or the CUDA it was built for.
fn cudnn_steps(kind: Option<InitCauseKind>) -> Vec<String> {
    let steps = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match kind {
        Some(InitCauseKind::CudnnIncompatible) => steps(&[
            "Install the cuDNN built for this CUDA (nvidia-cudnn-cu12 for CUDA 12, -cu13 for CUDA 13), or upgrade the runtime and the driver to the CUDA cuDNN was built for.",
            "Run `cublasguard doctor` to see the driver's CUDA version and the libraries the program loads.",
        ]),
        _ => steps(&[
            "Run `cublasguard doctor`: it resolves cuDNN's dispatcher and every sublibrary (with the engines and heuristics libcudnn_graph loads) as cuDNN does and names the missing or mismatched one.",
            "Install one cuDNN whole, in one folder (pip install --force-reinstall nvidia-cudnn-cu13, or -cu12), and take any other cuDNN off LD_LIBRARY_PATH (or out of /etc/ld.so.conf.d, then sudo ldconfig).",
        ]),
    }
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
    use cublasguard_format::trace::Position;

    fn fault(kind: FaultKind) -> Fault {
        Fault {
            thread: 1,
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
                not_checked: None,
                nan: Some(1),
                inf: Some(0),
                first_nonfinite: Some(Position { row: 2, col: 3 }),
            }],
            ..Fault::new(7, "cublasSgemm_v2", kind, "m", 0, "CUBLAS_STATUS_SUCCESS")
        }
    }

    #[test]
    fn recognises_a_linear_layer_and_translates_to_row_major() {
        let d = diagnose(&fault(FaultKind::NonfiniteInput), None, Program::PyTorch);
        assert_eq!(d.layer.as_deref(), Some("looks like nn.Linear(in_features=8, out_features=16) on a batch of 32"));
        assert_eq!(d.row_major, ["B as row-major: [32, 8] f32, first non-finite at [3, 2]"]);
        assert!(d.cause.contains("the features fed to this Linear"), "{}", d.cause);
        assert!(d.next_steps[0].contains("input features"));
    }

    #[test]
    fn a_late_verdict_without_frames_says_how_to_have_its_call_site() {
        let mut f = fault(FaultKind::NonfiniteInput);
        f.found_at_seq = Some(9);
        let steps = |f: &Fault| diagnose(f, None, Program::Native).next_steps;
        assert!(steps(&f).iter().any(|s| s.contains("CUBLASGUARD_SYNC=gemm") && s.contains(&format!("#{}", f.seq))), "{:?}", steps(&f));
        // Found at the call, or with a backtrace or Python frames: nothing to add.
        let says = |f: &Fault| steps(f).iter().any(|s| s.contains("CUBLASGUARD_SYNC=gemm"));
        let mut at_call = f.clone();
        at_call.found_at_seq = None;
        let mut with_frames = f.clone();
        with_frames.python_stack = vec![cublasguard_format::trace::PythonFrame { file: "t.py".into(), line: 3, function: "f".into() }];
        let mut with_backtrace = f.clone();
        with_backtrace.backtrace = vec!["main (a.out+0x10) [0x10]".into()];
        assert!(!says(&at_call) && !says(&with_frames) && !says(&with_backtrace));
    }

    #[test]
    fn later_nonfinite_inputs_are_propagation() {
        let d = diagnose(&fault(FaultKind::NonfiniteInput), Some(3), Program::Native);
        assert!(d.cause.starts_with("propagation") && d.cause.contains("#3"), "{}", d.cause);
    }

    #[test]
    fn an_asynchronous_error_is_called_this_calls_only_when_a_synchronisation_or_the_breadcrumbs_say_so() {
        let cause = |breadcrumbs: bool, found_at_seq: Option<u64>, status: i32| {
            let mut f = fault(FaultKind::AsyncError);
            (f.found_at_seq, f.status) = (found_at_seq, status);
            if breadcrumbs {
                f.breadcrumbs.push(cublasguard_format::trace::StreamProgress {
                    stream: "0x0".into(),
                    context: "1".into(),
                    last_landed: Some(6),
                    first_unfinished: Some(7),
                    first_unfinished_api: Some("cublasSgemm_v2".into()),
                    unfinished: 2,
                });
            }
            diagnose(&f, None, Program::Native).cause
        };
        assert!(cause(false, None, 0).contains("the guard synchronised right after it"), "gemm mode");
        let later = cause(true, Some(9), 0);
        assert!(later.contains("this call is the culprit") && later.contains("not call #9, where the error surfaced"), "{later}");
        assert!(!later.contains("synchronised"), "deferred: nothing synchronised: {later}");
        assert!(cause(true, Some(0), 0).contains("not the exit, where the error surfaced"));
        assert!(cause(true, None, 0).contains("this call is the culprit"), "its own work was the first unfinished");
        let surfaced = cause(true, None, 700);
        assert!(surfaced.contains("not necessarily the culprit") && surfaced.contains("CUBLASGUARD_SYNC=launches"), "{surfaced}");
    }

    #[test]
    fn an_output_whose_inputs_were_not_read_is_not_said_to_be_produced_from_finite_inputs() {
        let mut f = fault(FaultKind::NonfiniteOutput);
        let produced = diagnose(&f, None, Program::Native);
        assert!(produced.cause.contains("produced Inf/NaN from finite inputs"), "{}", produced.cause);
        let mut a = f.operands[0].clone();
        (a.name, a.scanned) = ("A".into(), false);
        f.operands.insert(0, a);
        // An operand left unscanned for another reason (cublasLt's C with beta = 0) changes nothing.
        assert!(diagnose(&f, None, Program::Native).cause.contains("produced Inf/NaN from finite inputs"));
        f.message = "this call's output operand B holds 1 NaN; whether it consumed it or produced it is not known: its inputs A were not read \
                     (CUBLASGUARD_SCAN_ORDER=outputs-first reads them after an output is bad, ...)"
            .into();
        let d = diagnose(&f, None, Program::Native);
        assert!(d.cause.contains("not known") && d.cause.contains("(from A)") && !d.cause.contains("from finite inputs"), "{}", d.cause);
        assert!(d.next_steps[0].contains("CUBLASGUARD_SYNC=gemm"), "{:?}", d.next_steps);
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
            FaultKind::UseAfterFree,
            FaultKind::Unknown,
        ] {
            for program in [Program::PyTorch, Program::Jax, Program::Python, Program::Native] {
                let d = diagnose(&fault(kind), None, program);
                assert!(!d.cause.is_empty() && !d.next_steps.is_empty(), "{kind:?} {program:?}");
            }
        }
    }

    /// Words that only make sense in a PyTorch program.
    const PYTORCH_WORDS: [&str; 7] = ["torch.", "GradScaler", "nn.Linear", "in_features", ".to('cuda')", "model.cuda", "record_stream"];

    #[test]
    fn a_c_program_gets_cuda_c_advice_and_no_pytorch_advice() {
        for kind in [
            FaultKind::NonfiniteInput,
            FaultKind::NonfiniteOutput,
            FaultKind::InvalidArgument,
            FaultKind::HostPointer,
            FaultKind::OutOfBounds,
            FaultKind::AllocFailed,
            FaultKind::UseAfterFree,
        ] {
            let mut f = fault(kind);
            f.handle = Some(cublasguard_format::trace::HandleRecord {
                ptr: "0x1".into(),
                math_mode: "CUBLAS_TF32_TENSOR_OP_MATH".into(),
                pointer_mode: "HOST".into(),
                stream: "0x0".into(),
                reduced_precision: true,
            });
            let d = diagnose(&f, None, Program::Native);
            let advice = d.next_steps.join("\n");
            for w in PYTORCH_WORDS {
                assert!(!advice.contains(w), "{kind:?}: '{w}' in C advice:\n{advice}");
            }
            assert!(advice.contains("cuda") || advice.contains("cublas") || advice.contains("ld"), "{kind:?}: {advice}");
            let torch = diagnose(&f, None, Program::PyTorch).next_steps.join("\n");
            assert!(PYTORCH_WORDS.iter().any(|w| torch.contains(w)), "{kind:?}: PyTorch advice in a PyTorch program:\n{torch}");
        }
        let d = diagnose(&fault(FaultKind::NonfiniteInput), None, Program::Native);
        assert!(d.next_steps[0].contains("the buffer you pass to cublasSgemm as B") && d.next_steps[0].contains("isfinite"), "{:?}", d.next_steps);
    }

    fn trace_of(f: Fault) -> Trace {
        Trace { faults: vec![f], ..Default::default() }
    }

    #[test]
    fn the_program_kind_comes_from_what_the_trace_records() {
        let c = trace_of(fault(FaultKind::NonfiniteInput));
        assert_eq!(program_of(&c), Program::Native);
        // libtorch linked into a C++ program: still native, no Python.
        let mut cpp = c.clone();
        cpp.environment.framework = Some(cublasguard_format::trace::FrameworkBuild { name: "torch".into(), version: None, cuda: None });
        assert_eq!(program_of(&cpp), Program::Native);
        let mut torch = cpp.clone();
        torch.environment.python_version = Some("3.12.3".into());
        assert_eq!(program_of(&torch), Program::PyTorch);
        let mut plain = c.clone();
        plain.process.argv = vec!["/usr/bin/python3".into(), "frames.py".into()];
        assert_eq!(program_of(&plain), Program::Python);
        let mut jax = plain.clone();
        jax.faults[0].python_stack = vec![cublasguard_format::trace::PythonFrame {
            file: "/venv/lib/python3.12/site-packages/jax/_src/dispatch.py".into(),
            line: 1,
            function: "apply".into(),
        }];
        assert_eq!(program_of(&jax), Program::Jax);
        let mut autograd = plain.clone();
        autograd.faults[0].python_stack_note = Some("an autograd thread".into());
        autograd.faults[0].thread_name = Some("pt_autograd_0".into());
        assert_eq!(program_of(&autograd), Program::PyTorch);
    }

    #[test]
    fn not_linear_unless_t_n() {
        let mut f = fault(FaultKind::InvalidArgument);
        f.args.insert("transa", "N");
        assert_eq!(linear_layer(&f), None);
    }

    #[test]
    fn formats_bytes() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
