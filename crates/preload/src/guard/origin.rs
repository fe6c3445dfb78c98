//! Origin mode (`CUBLASGUARD_NAN_ORIGIN=1`, for a rerun, as `CUDA_LAUNCH_BLOCKING` is): the
//! operands guarded calls read and write are watched, and after every kernel launch (its
//! stream synchronised) the watched memory in the allocations its parameters point into is
//! scanned. The first launch after which such memory holds NaN/Inf it did not hold at its last
//! scan is the origin: a `nonfinite_origin` fault on that launch, with its kernel, grid, the
//! memory and the first element, and (the fault being recorded on the launching thread) its
//! Python frames. Memory that held NaN/Inf when first seen is never blamed, nor is a launch
//! that only lowers the count.

use std::ffi::c_int;

use super::Call;
use crate::check::operand_call::{scan_on_stream, OperandCallCheck};
use crate::check::Finding;
use crate::scan::MatrixScan;
use crate::session::launch_memory::{is_origin, Region};
use crate::trace::{hex, AllocationRecord, FaultKind, Operand, Position};
use crate::validate::StoredShape;

/// After a guarded call's checks: its operands (single matrices of a floating type, inside
/// live memory) are watched from now on, with what their scans found.
pub(crate) fn watch_operands(call: &Call<'_, i32>, check: &OperandCallCheck<'_>) {
    let s = call.session;
    for o in check.operands.iter().flatten() {
        if !o.readable || o.spec.members.count() != 1 || !o.spec.dtype.is_float() || o.spec.triangle.is_some() {
            continue;
        }
        let Some(bytes) = o.extent.filter(|b| *b > 0) else { continue };
        s.watched.watch(o.spec.ptr, bytes, o.spec.dtype, o.scan.filter(|sc| !sc.sampled).map(|sc| sc.nan + sc.inf));
    }
}

/// Origin mode from a first run's trace, at an allocation: memory that held the NaN/Inf a
/// guarded call of the first run consumed, found again by its allocation's ordinal and size,
/// is watched from now on, with what it holds now.
pub(crate) fn watch_if_consumed_before(call: &Call<'_, c_int>, allocation: crate::state::Allocation) {
    let s = call.session;
    let Some(targets) = s.origin_targets.get() else { return };
    for t in targets.iter().filter(|t| t.ordinal == allocation.ordinal && t.allocation_size == allocation.size) {
        let region = Region { ptr: allocation.base + t.offset, bytes: t.bytes, dtype: t.dtype, nonfinite: None, tainted: false };
        let now = scan_region(call, &region, allocation.stream.unwrap_or(0)).map(|found| found.nan + found.inf);
        s.watched.watch_fresh(region.ptr, region.bytes, region.dtype, now);
    }
}

/// Whether a launch given `pointers` needs its stream synchronised and scanned: always in
/// origin mode, but from a trace only when it points into an allocation holding watched memory.
pub(crate) fn launch_is_watched(call: &Call<'_, c_int>, pointers: &[u64]) -> bool {
    let s = call.session;
    if !s.origin_from_trace() {
        return true;
    }
    let allocations = call.allocations();
    pointers.iter().filter_map(|&p| allocations.containing(p)).any(|a| s.watched.any_inside(a.base, a.size))
}

/// A launch, as the fault of its origin describes it.
pub(crate) struct Launched<'a> {
    pub kernel: &'a dyn Fn() -> String,
    pub args: crate::recorder::CallArgs,
    pub stream: u64,
}

/// After a launch whose stream the guard synchronised clean: the watched memory in the
/// allocations its parameters point into is scanned, and memory that turned non-finite makes
/// this launch its origin.
pub(crate) fn after_launch(call: &Call<'_, c_int>, launched: &Launched<'_>, pointers: &[u64]) {
    let s = call.session;
    let allocations = call.allocations();
    let mut bases: Vec<u64> = Vec::with_capacity(pointers.len());
    for &p in pointers {
        let Some(a) = allocations.containing(p) else { continue };
        if bases.contains(&a.base) {
            continue;
        }
        bases.push(a.base);
        for region in s.watched.inside(a.base, a.size) {
            let Some(found) = scan_region(call, &region, launched.stream) else { continue };
            let now = found.nan + found.inf;
            let Some((before, tainted)) = s.watched.rescanned(region.ptr, now) else { continue };
            if is_origin(before, tainted, now) {
                report(call, launched, &region, &found, a);
            }
        }
    }
}

/// The region's NaN/Inf, on the device where the scan kernel runs, else copied to the host.
fn scan_region(call: &Call<'_, c_int>, region: &Region, stream: u64) -> Option<MatrixScan> {
    let elements = region.bytes / region.dtype.size()?;
    let rows = i64::try_from(elements).ok().filter(|r| *r > 0)?;
    let shape = StoredShape { rows, cols: 1, ld: rows };
    let mut result = None;
    call.device.with_scan_buffer(&mut |buf| result = scan_on_stream(call.device, region.ptr, shape, region.dtype, stream, buf, u64::MAX));
    result
}

fn report(call: &Call<'_, c_int>, launched: &Launched<'_>, region: &Region, found: &MatrixScan, allocation: crate::state::Allocation) {
    let kernel = (launched.kernel)();
    let first = found.first_nonfinite.map(|(row, _)| row);
    let mut what = Vec::new();
    if found.nan > 0 {
        what.push(format!("{} NaN", found.nan));
    }
    if found.inf > 0 {
        what.push(format!("{} Inf", found.inf));
    }
    let offset = region.ptr - allocation.base;
    let s = call.session;
    // From a first run's trace: the memory is named by what consumed it there.
    let consumed = s.origin_targets.get().and_then(|targets| targets.iter().find(|t| t.ordinal == allocation.ordinal && t.offset == offset));
    // What the memory is and where the rule came from, in either form.
    let (allocation_named, watched, why) = match consumed {
        Some(t) => (
            format!("allocation #{} at", allocation.ordinal),
            "",
            format!(
                ". It is the memory {} #{} consumed NaN/Inf from in the first run (CUBLASGUARD_ORIGIN_FROM={})",
                t.consumed_by.1,
                t.consumed_by.0,
                s.config.origin_from.as_deref().unwrap_or("?")
            ),
        ),
        None => ("the allocation at".to_string(), "a guarded call uses and that ", " (CUBLASGUARD_NAN_ORIGIN)".to_string()),
    };
    let message = format!(
        "{kernel} wrote {} into {} memory at {} (offset {offset} of {allocation_named} {}{}) that {watched}held none at its last check: \
         the first NaN/Inf there came from this launch{why}",
        what.join(" and "),
        region.dtype.name(),
        hex(region.ptr),
        hex(allocation.base),
        first.map(|i| format!("; first at element {i}")).unwrap_or_default(),
    );
    let mut fault = call.fault(Finding::new(FaultKind::NonfiniteOrigin, message), 0, "cudaSuccess");
    fault.args = launched.args.to_args();
    fault.args.insert("kernel", kernel);
    fault.stream = Some(hex(launched.stream));
    let elements = found.scanned_elements.max(1) as i64;
    fault.operands = vec![Operand {
        name: "written".into(),
        ptr: hex(region.ptr),
        dtype: region.dtype.name(),
        rows: elements,
        cols: 1,
        ld: elements,
        bytes: Some(region.bytes),
        allocation: Some(AllocationRecord {
            base: hex(allocation.base),
            size: allocation.size,
            api: Some(allocation.api.to_string()),
            ordinal: Some(allocation.ordinal).filter(|&n| n > 0),
        }),
        member_allocation: None,
        scanned: true,
        sampled: found.sampled,
        batch_count: None,
        stride: None,
        pointer_array: false,
        bad_member: None,
        scan_path: Some(if found.on_device { "device" } else { "host" }.into()),
        not_checked: None,
        nan: Some(found.nan),
        inf: Some(found.inf),
        first_nonfinite: first.map(|row| Position { row, col: 0 }),
    }];
    call.report(fault);
}
