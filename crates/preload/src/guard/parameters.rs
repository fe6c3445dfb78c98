//! What a hooked call's pointer parameters hold, read through the `Device`: the edge touches the
//! program's memory, the handlers get values.

use super::Call;

/// The 8-byte value (a pointer, a handle, a size) at `ptr`: what a CUDA function wrote through
/// an out-parameter, asked only once it reported success. `None` for NULL.
pub(crate) fn written_u64<R: Copy>(call: &Call<'_, R>, ptr: u64) -> Option<u64> {
    let mut bytes = [0u8; 8];
    call.device.read_parameter(ptr, &mut bytes).then(|| u64::from_ne_bytes(bytes))
}

/// The C `int` at `ptr`, as `written_u64`.
pub(crate) fn written_i32<R: Copy>(call: &Call<'_, R>, ptr: u64) -> Option<i32> {
    let mut bytes = [0u8; 4];
    call.device.read_parameter(ptr, &mut bytes).then(|| i32::from_ne_bytes(bytes))
}

/// Three C `unsigned int`s at `ptr` (a `dim3`).
pub(crate) fn written_u32x3<R: Copy>(call: &Call<'_, R>, ptr: u64) -> Option<[u32; 3]> {
    let mut bytes = [0u8; 12];
    call.device.read_parameter(ptr, &mut bytes).then(|| {
        let word = |i: usize| u32::from_ne_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
        [word(0), word(1), word(2)]
    })
}
