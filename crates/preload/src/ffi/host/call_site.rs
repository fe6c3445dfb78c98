//! The live side of `session::call_site`: the hook's own frame, read in the exported function
//! (`hook_frame!`), and the words of the calling thread's stack above it.

use crate::session::call_site::{walk, CallSite, HookFrame};

/// The frame of the function this expands in: an exported hook, so its caller's return
/// address is the second word of it. Zero where the guard was built without frame pointers
/// (`.cargo/config.toml` asks for them; a `RUSTFLAGS` of one's own replaces that): then no
/// call site is kept, as before there was one.
macro_rules! hook_frame {
    () => {{
        #[cfg(all(cublasguard_frame_pointers, target_arch = "x86_64"))]
        let frame: u64 = {
            let fp: u64;
            // SAFETY: copies a register; reads and writes no memory.
            unsafe { ::core::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags)) };
            fp
        };
        #[cfg(all(cublasguard_frame_pointers, target_arch = "aarch64"))]
        let frame: u64 = {
            let fp: u64;
            // SAFETY: copies a register; reads and writes no memory.
            unsafe { ::core::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags)) };
            fp
        };
        #[cfg(not(all(cublasguard_frame_pointers, any(target_arch = "x86_64", target_arch = "aarch64"))))]
        let frame: u64 = 0;
        frame
    }};
}
pub(crate) use hook_frame;

/// The call site of the hook whose frame `at` gives, read while the hook runs on this thread.
pub(crate) fn read(at: HookFrame) -> CallSite {
    if at.frame == 0 {
        return CallSite::default();
    }
    walk(at.frame, at.stack.0..at.stack.1, |word| {
        // SAFETY: `walk` reads only 8-aligned words inside the calling thread's own stack, at
        // or above the hook's frame, which is live while the hook runs (`HookFrame` is made in
        // the hook and read on its thread before it returns): mapped, and ours to read.
        unsafe { std::ptr::read_volatile(word as *const u64) }
    })
}
