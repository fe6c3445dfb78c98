//! Where a call came from, kept at the call for a verdict judged after it returned: the hook's
//! return address and a few more, read from the frame-pointer chain (a few loads each, where
//! unwinding costs ~40,000 instructions), symbolised only when a fault is written. A late
//! verdict (a NaN judged on the verdict thread, an asynchronous error pinned by breadcrumbs)
//! then names the program's own line, as `gemm` mode does with a backtrace at the call.
//!
//! The walk itself is pure: it is given the words of the stack to read and the bounds of the
//! thread's stack, so it is unit-tested on a made-up stack; `ffi::host::call_site` reads the
//! live one.

/// Return addresses kept per call: the caller's own line, then its callers' where their
/// frames keep frame pointers (a C program at -O0, or built with -fno-omit-frame-pointer).
pub const CALL_SITE_FRAMES: usize = 4;

/// Return addresses, innermost first; zero past the last one known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallSite {
    pub returns: [u64; CALL_SITE_FRAMES],
}

impl CallSite {
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.returns[0] == 0
    }

    /// The addresses known, innermost first.
    pub fn addresses(&self) -> impl Iterator<Item = u64> + '_ {
        self.returns.iter().copied().take_while(|&a| a != 0)
    }
}

/// Where a hook's frame is, while it runs: its frame pointer (0: not known) and its thread's
/// stack, [low, high). Never leaves its thread (a dead thread's stack may be unmapped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookFrame {
    pub frame: u64,
    pub stack: (u64, u64),
    pub on_this_thread: std::marker::PhantomData<*const ()>,
}

impl HookFrame {
    pub fn new(frame: u64, stack: std::ops::Range<u64>) -> Self {
        Self { frame, stack: (stack.start, stack.end), on_this_thread: std::marker::PhantomData }
    }
}

/// Walks the frame-pointer chain from `frame`, the hook's own frame (whose first word holds
/// its caller's frame pointer and whose second the return address into its caller), within
/// the thread's `stack`. A frame outside the stack, out of line, or not above the one before
/// (a caller that uses the register for something else) ends the walk: a chain is only ever
/// followed upwards through the live stack, so no word outside it is read.
pub fn walk(frame: u64, stack: std::ops::Range<u64>, read: impl Fn(u64) -> u64) -> CallSite {
    let mut site = CallSite::default();
    let within = |fp: u64| fp.is_multiple_of(8) && fp >= stack.start && fp.checked_add(16).is_some_and(|end| end <= stack.end);
    let mut fp = frame;
    for slot in site.returns.iter_mut() {
        if !within(fp) {
            break;
        }
        let ret = read(fp + 8);
        if ret == 0 {
            break;
        }
        *slot = ret;
        let next = read(fp);
        if next <= fp {
            break;
        }
        fp = next;
    }
    site
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack of 64 words at 0x1000, written as (address, value) pairs.
    fn stack(words: &[(u64, u64)]) -> impl Fn(u64) -> u64 + '_ {
        move |at| words.iter().find(|w| w.0 == at).map_or(0, |w| w.1)
    }

    #[test]
    fn the_chain_is_followed_upwards_to_the_last_frame_in_the_stack() {
        let words = [(0x1000, 0x1040), (0x1008, 0xaaa), (0x1040, 0x1080), (0x1048, 0xbbb), (0x1080, 0), (0x1088, 0xccc)];
        let site = walk(0x1000, 0x1000..0x1200, stack(&words));
        assert_eq!(site.addresses().collect::<Vec<_>>(), [0xaaa, 0xbbb, 0xccc]);
    }

    #[test]
    fn a_frame_below_the_last_outside_the_stack_or_out_of_line_ends_the_walk() {
        // The caller keeps no frame pointer: the next "frame" points down, off the stack, or
        // to an odd address; only the hook's own return address is certain.
        for next in [0x0f00, 0x1000, 0x9000, 0x1043] {
            let words = [(0x1000, next), (0x1008, 0xaaa), (next, 0x1100), (next + 8, 0xbbb)];
            let site = walk(0x1000, 0x1000..0x1200, stack(&words));
            assert_eq!(site.addresses().collect::<Vec<_>>(), [0xaaa], "next frame at {next:#x}");
        }
        // The last 16 bytes of the stack still hold a frame; past them nothing is read.
        let words = [(0x11f0, 0x1300), (0x11f8, 0xaaa)];
        assert_eq!(walk(0x11f0, 0x1000..0x1200, stack(&words)).addresses().count(), 1);
        assert!(walk(0x11f8, 0x1000..0x1200, stack(&words)).is_empty());
    }

    #[test]
    fn an_unknown_stack_gives_no_call_site() {
        assert!(walk(0x1000, 1..1, |_| 0xaaa).is_empty());
    }

    #[test]
    fn a_long_chain_keeps_the_innermost_frames() {
        let words: Vec<(u64, u64)> = (0..10u64).flat_map(|i| [(0x1000 + i * 0x20, 0x1000 + (i + 1) * 0x20), (0x1008 + i * 0x20, 0xa00 + i)]).collect();
        let site = walk(0x1000, 0x1000..0x2000, stack(&words));
        assert_eq!(site.returns, [0xa00, 0xa01, 0xa02, 0xa03]);
    }
}
