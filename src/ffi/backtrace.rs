//! The native call stack of the program at a fault, without the guard's own frames.

use std::ffi::{c_void, CStr};

const MAX_FRAMES: usize = 48;

pub(crate) fn capture() -> Vec<String> {
    super::loader_gate::through(capture_now)
}

fn capture_now() -> Vec<String> {
    let mut frames = [std::ptr::null_mut::<c_void>(); MAX_FRAMES];
    // SAFETY: frames is writable for MAX_FRAMES entries.
    let n = unsafe { libc::backtrace(frames.as_mut_ptr(), MAX_FRAMES as i32) }.max(0) as usize;
    let own = object_of(capture_now as *const c_void).map(|(base, _)| base);
    frames[..n]
        .iter()
        .filter_map(|&addr| {
            let (base, file) = object_of(addr)?;
            (Some(base) != own).then(|| symbolise(addr, &file))
        })
        .collect()
}

fn object_of(addr: *const c_void) -> Option<(usize, String)> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads loader tables.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    Some((info.dli_fbase as usize, file))
}

fn symbolise(addr: *const c_void, file: &str) -> String {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let found = unsafe { libc::dladdr(addr, &mut info) } != 0 && !info.dli_sname.is_null();
    if found {
        let name = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
        let offset = addr as usize - info.dli_saddr as usize;
        format!("{name}+{offset:#x} ({file})")
    } else {
        let offset = addr as usize - info.dli_fbase as usize;
        format!("{addr:?} ({file}+{offset:#x})")
    }
}
