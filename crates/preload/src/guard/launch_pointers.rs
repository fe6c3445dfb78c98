//! What a kernel launch points into, and who wrote a NaN/Inf a call consumed: the pointers
//! among a launch's parameters (their layout from the driver, once per function; the aligned
//! 8-byte words of each, read from the program's `params` or `extra` buffer after the launch
//! took them) kept per launch, and at a consumed NaN the launches since that memory was last
//! seen finite that point into it.

use std::ffi::c_void;

use super::Call;
use crate::recorder::RecordedCall;
use crate::session::launch_memory::{pointer_words, TOUCHED_PER_LAUNCH};
use crate::trace::Suspect;

/// Where a launch's parameters are: a pointer to each (`params`; the runtime's `args`), or one
/// buffer described by the driver's `extra` list; and who lays them out (the driver for a
/// CUfunction, the runtime for a host stub).
#[derive(Clone, Copy)]
pub(crate) struct ParamSource {
    driver: bool,
    params: u64,
    extra: u64,
}

impl ParamSource {
    pub(crate) fn runtime(args: *mut *mut c_void) -> Self {
        Self { driver: false, params: args as u64, extra: 0 }
    }

    pub(crate) fn driver(params: *mut *mut c_void, extra: *mut *mut c_void) -> Self {
        Self { driver: true, params: params as u64, extra: extra as u64 }
    }
}

/// The pointers into live allocations among a launch's parameter words (at most
/// `TOUCHED_PER_LAUNCH`, distinct), read from the program's parameters after the launch took
/// them.
pub(crate) fn touched_pointers<R: Copy>(call: &Call<'_, R>, func: u64, source: ParamSource) -> ([u64; TOUCHED_PER_LAUNCH], usize) {
    use super::parameters::written_u64;
    let mut found = [0u64; TOUCHED_PER_LAUNCH];
    let mut n = 0;
    let Some(layout) = call.session.param_layouts.get(func, || call.device.param_layout(func, source.driver)) else { return (found, 0) };
    let buffer = if source.params == 0 { extra_buffer(call, source.extra) } else { None };
    let allocations = call.allocations();
    for (index, within) in pointer_words(&layout) {
        let at = if source.params != 0 {
            // The parameter's own storage: params[index] points to it.
            match written_u64(call, source.params + 8 * index as u64) {
                Some(p) if p != 0 => p + within,
                _ => continue,
            }
        } else {
            let Some((buffer, size)) = buffer else { break };
            let offset = u64::from(layout[index].0) + within;
            if offset.saturating_add(8) > size {
                continue;
            }
            buffer + offset
        };
        let Some(word) = written_u64(call, at) else { continue };
        if word == 0 || found[..n].contains(&word) || allocations.containing(word).is_none() {
            continue;
        }
        found[n] = word;
        n += 1;
        if n == TOUCHED_PER_LAUNCH {
            break;
        }
    }
    (found, n)
}

/// The parameter buffer of the driver's `extra` form: `CU_LAUNCH_PARAM_BUFFER_POINTER`'s
/// pointer and `CU_LAUNCH_PARAM_BUFFER_SIZE`'s size, up to `CU_LAUNCH_PARAM_END`.
fn extra_buffer<R: Copy>(call: &Call<'_, R>, extra: u64) -> Option<(u64, u64)> {
    use super::parameters::written_u64;
    const END: u64 = 0;
    const BUFFER_POINTER: u64 = 1;
    const BUFFER_SIZE: u64 = 2;
    if extra == 0 {
        return None;
    }
    let (mut buffer, mut size) = (None, None);
    for pair in 0..8u64 {
        let at = extra + 16 * pair;
        match written_u64(call, at)? {
            END => break,
            BUFFER_POINTER => buffer = written_u64(call, at + 8),
            BUFFER_SIZE => size = written_u64(call, at + 8).and_then(|p| written_u64(call, p)),
            _ => {}
        }
    }
    Some((buffer.filter(|b| *b != 0)?, size?))
}

/// The recorded launches since the memory at `[ptr, ptr + extent)` was last seen finite whose
/// parameters point into it, newest first (at most 8): who may have written the NaN/Inf a call
/// consumed from there.
pub(crate) fn writers<R: Copy>(call: &Call<'_, R>, ptr: u64, extent: u64) -> Vec<Suspect> {
    let s = call.session;
    let inside = |p: u64| p != 0 && p.wrapping_sub(ptr) < extent.max(1);
    let into_it = |c: &RecordedCall| s.launch_touches.get(c.seq).is_some_and(|pointers| pointers.iter().any(|&p| inside(p)));
    super::launch::launches_between(call, s.finite_seen.last(ptr), call.seq, 8, into_it).into_iter().rev().map(|(suspect, _)| suspect).collect()
}
