//! Operand dumps at fault time (`CUBLASGUARD_DUMP`): the bytes of a faulting matrix multiply's
//! operands, read through the `Device` trait (the model device tests it like the scans), with
//! the call record, in one safetensors file (`dump::encode`).
//!
//! What the call overwrites (C, when beta != 0) is read before the call, while dumps are left
//! in the quota: the call itself may be the one that faults. Everything else is read after it.

use std::collections::BTreeMap;

use super::Call;
use crate::check::operand_call::{Members, OperandCallCheck, OperandReport, Role};
use crate::dump::{self, Tensor};
use crate::recorder::CallArgs;
use crate::trace::Fault;

/// Operands read before the call, and what could not be.
#[derive(Default)]
pub(crate) struct Before {
    tensors: Vec<Tensor>,
    notes: Vec<String>,
    bytes: u64,
}

/// Whether this call could still produce a dump: a matrix multiply, with dumps left.
pub(crate) fn wanted(call: &Call<'_, i32>, record: &CallArgs) -> bool {
    matches!(record, CallArgs::Gemm { .. }) && call.session.dumps_left()
}

/// C as it is before the call, when the call reads it (beta != 0); and, when a fault is
/// already found, the inputs too: a call with a bad operand may leave nothing readable after it.
pub(crate) fn before_call(call: &Call<'_, i32>, check: &OperandCallCheck<'_>) -> Before {
    let mut before = Before::default();
    let reads_c = !scalar(call, check, check.call.beta).is_some_and(|[re, im]| re == 0.0 && im == 0.0);
    let early = check.finding.is_some();
    for (i, op) in check.operands.iter().enumerate() {
        let Some(op) = op else { continue };
        let name = match op.spec.role {
            Role::Accumulator | Role::Addend if reads_c => "C",
            Role::Input if early => op.spec.name,
            _ => continue,
        };
        {
            match read_operand(call, check, i, op, name, before.bytes) {
                Ok(t) => {
                    before.bytes += t.data.len() as u64;
                    before.tensors.push(t);
                }
                Err(note) => before.notes.push(note),
            }
        }
    }
    before
}

/// A scalar argument's value, read as the library reads it.
fn scalar(call: &Call<'_, i32>, check: &OperandCallCheck<'_>, ptr: Option<u64>) -> Option<[f64; 2]> {
    let (bytes, size) = check.read_scalar(ptr, call.allocations(), call.device)?;
    Some(dump::element(check.call.scalar, &bytes[..size]))
}

/// One operand's members, each as its stored matrix; `Err` says why it is left out.
fn read_operand(call: &Call<'_, i32>, check: &OperandCallCheck<'_>, i: usize, op: &OperandReport<'_>, name: &str, used: u64) -> Result<Tensor, String> {
    let spec = op.spec;
    if !op.readable {
        return Err(format!("{name} not dumped: it is not inside live device memory"));
    }
    let elem =
        spec.dtype.size().filter(|_| dump::dumpable(spec.dtype)).ok_or_else(|| format!("{name} not dumped: {} cannot be stored", spec.dtype.name()))? as usize;
    let (rows, cols, ld) = (spec.shape.rows.max(0) as usize, spec.shape.cols.max(0) as usize, spec.shape.ld.max(0) as usize);
    let count = spec.members.count();
    let bytes = (count as u128) * (rows * cols * elem) as u128;
    let cap = call.session.config.dump_bytes;
    if used as u128 + bytes > cap as u128 {
        return Err(format!("{name} not dumped: its {bytes} bytes would pass CUBLASGUARD_DUMP_BYTES ({cap})"));
    }
    // The program may be short of memory (a `ulimit -v`, a cgroup): an operand that cannot be
    // held is left out, never a reason to abort the program.
    let unallocated = || format!("{name} not dumped: {bytes} bytes could not be allocated");
    let member = rows * cols * elem;
    let mut data: Vec<u8> = Vec::new();
    data.try_reserve_exact(usize::try_from(bytes).map_err(|_| unallocated())?).map_err(|_| unallocated())?;
    let mut columns: Vec<u8> = Vec::new();
    columns.try_reserve_exact(member).map_err(|_| unallocated())?;
    columns.resize(member, 0);
    let column = rows * elem;
    for b in 0..count {
        let addr = check.member_address(i, b).ok_or_else(|| format!("{name} not dumped: member {b} has no address"))?;
        let failed = |code| format!("{name} not dumped: reading it failed with CUDA error {code}");
        if ld == rows {
            call.device.read(addr, &mut columns, check.stream()).map_err(failed)?;
        } else {
            for (c, into) in columns.chunks_exact_mut(column.max(1)).enumerate().take(cols) {
                call.device.read(addr + (c * ld * elem) as u64, into, check.stream()).map_err(failed)?;
            }
        }
        dump::append_row_major(&columns, rows, cols, elem, &mut data);
    }
    let batch = (!matches!(spec.members, Members::One)).then_some(count);
    Ok(Tensor { name: name.to_string(), dtype: spec.dtype, batch, rows: rows as u64, cols: cols as u64, data })
}

/// Writes the dump of `fault` and returns its path and what it left out. `forwarded`: the real
/// call ran, so the outputs hold its results.
pub(crate) fn write(call: &Call<'_, i32>, check: &OperandCallCheck<'_>, before: &Before, forwarded: bool, fault: &Fault) -> (Option<String>, Option<String>) {
    let s = call.session;
    let Some(dir) = s.config.dump_dir.as_deref() else { return (None, None) };
    if !s.claim_dump() {
        return (None, None);
    }
    let mut tensors = Vec::new();
    let mut notes = before.notes.clone();
    let mut used = before.bytes;
    let mut add = |i: usize, op: &OperandReport<'_>, name: &str, tensors: &mut Vec<Tensor>| match read_operand(call, check, i, op, name, used) {
        Ok(t) => {
            used += t.data.len() as u64;
            tensors.push(t);
        }
        Err(note) => notes.push(note),
    };
    for (i, op) in check.operands.iter().enumerate() {
        let Some(op) = op else { continue };
        let read_before = before.tensors.iter().any(|t| t.name == op.spec.name) || before.notes.iter().any(|n| n.starts_with(&format!("{} ", op.spec.name)));
        if op.spec.role == Role::Input && !read_before {
            add(i, op, op.spec.name, &mut tensors);
        }
    }
    if forwarded {
        for (i, op) in check.operands.iter().enumerate() {
            let Some(op) = op else { continue };
            match op.spec.role {
                Role::Accumulator => add(i, op, "C_out", &mut tensors),
                Role::Output => add(i, op, "D_out", &mut tensors),
                _ => {}
            }
        }
    } else {
        notes.push("no output: the call did not run (the fault was found before it, and CUBLASGUARD_ON_FAULT refused it or ends the process)".into());
    }
    // What was read before the call is written from where it is, not copied.
    let all: Vec<&Tensor> = tensors.iter().chain(before.tensors.iter()).collect();
    let meta = metadata(call, check, &all, &notes, forwarded, fault);
    let name = format!("cublasguard-{}-{}-{}", std::process::id(), fault.seq, fault.api);
    let written = call.outlet.create_file(dir, &name, "safetensors", &mut |file| dump::write_to(&all, &meta, file));
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    match written {
        Ok(path) => (Some(path), note),
        Err(why) => {
            let why = format!("the dump {dir}/{name}.safetensors could not be written: {why}");
            (
                None,
                Some(match note {
                    Some(note) => format!("{why}; {note}"),
                    None => why,
                }),
            )
        }
    }
}

fn metadata(call: &Call<'_, i32>, check: &OperandCallCheck<'_>, tensors: &[&Tensor], notes: &[String], forwarded: bool, fault: &Fault) -> serde_json::Value {
    use serde_json::json;
    let described: BTreeMap<&str, serde_json::Value> =
        tensors.iter().map(|t| (t.name.as_str(), json!({"dtype": t.dtype.name(), "rows": t.rows, "cols": t.cols, "batch": t.batch}))).collect();
    json!({
        "format": dump::FORMAT,
        "guard": env!("CARGO_PKG_VERSION"),
        "api": fault.api,
        "seq": fault.seq,
        "kind": fault.kind.name(),
        "message": fault.message,
        "status": fault.status,
        "args": fault.args,
        "handle": fault.handle,
        "lt": check.call.lt,
        "scalar_type": check.call.scalar.name(),
        "alpha": scalar(call, check, check.call.alpha),
        "beta": scalar(call, check, check.call.beta),
        "reduced_precision": check.call.reduced_precision_compute || fault.handle.as_ref().is_some_and(|h| h.reduced_precision),
        "forwarded": forwarded,
        "tensors": described,
        "not_dumped": notes,
    })
}
