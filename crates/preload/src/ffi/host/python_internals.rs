//! The calling thread's innermost Python frames, read from CPython's own structures without the
//! GIL, for a call whose NaN/Inf verdict is judged later (CUBLASGUARD_SYNC=deferred).
//!
//! PyTorch's operators release the GIL before they reach cuBLAS, and a deferred verdict must not
//! wait for it (the public API needs it, and taking it at every call would hand the GIL round
//! every 5 ms against the program's other threads). But the thread's own frames are stable
//! while it is inside the hook: it runs no Python code, and no other thread changes another's
//! frames. So they are read as profilers that sample from outside read them (py-spy, austin):
//! the thread state's innermost frame, each frame's code object and instruction, following
//! the links. Only the layouts of the CPython versions below are known (3.10 to 3.13, each
//! measured with `offsetof` against its own headers, the same on every 64-bit little-endian
//! target); any other version, or a build whose objects are laid out otherwise (a debug or
//! free-threaded build: the code object's type is not `PyCode_Type` where this expects it),
//! reads nothing and says so.
//!
//! A frame's line is asked of `PyCode_Addr2Line` (it reads the code object's line table, which
//! never changes), and its file and function are copied out of the code object's strings; each
//! (code object, instruction) is resolved once per thread and kept, so a training loop's calls
//! cost a walk of a few pointers and a lookup per frame. Nothing read here outlives the call:
//! a code object may be freed once the thread returns to Python.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use crate::trace::PythonFrame;

/// Where the innermost frame and each frame's parts are, in one CPython version.
struct Layout {
    /// Offsets to follow from the thread state to the innermost frame pointer: one read at
    /// the first, then (3.11 and 3.12, through the `_PyCFrame`) one at the second.
    to_frame: (usize, Option<usize>),
    frame: FrameLayout,
    code_filename: usize,
    code_name: usize,
    code_linetable: usize,
    strings: StringLayout,
}

enum FrameLayout {
    /// 3.10: frames are `PyFrameObject`s; the instruction is `f_lasti`, an `int` counted in
    /// 2-byte code units (-1 before the first).
    Objects { back: usize, code: usize, lasti: usize },
    /// 3.11 on: `_PyInterpreterFrame`s; the instruction is a pointer into the code object's
    /// `co_code_adaptive`. From 3.12, frames owned by the C stack (`owner` 3) are shims that
    /// belong to no Python function.
    Interpreter { code: usize, previous: usize, instr: usize, owner: usize, code_units: usize },
}

/// `PyASCIIObject` and `PyCompactUnicodeObject` sizes: where a compact string's characters
/// start, ASCII or not.
struct StringLayout {
    ascii_size: usize,
    compact_size: usize,
}

const FRAME_OWNED_BY_CSTACK: u8 = 3;
/// `PyObject`'s `ob_type`, `PyVarObject`'s `ob_size`, `PyASCIIObject`'s `length` and `state`.
const OB_TYPE: usize = 8;
const OB_SIZE: usize = 16;
const STR_LENGTH: usize = 16;
const STR_STATE: usize = 32;

/// The offsets in each known version, as `offsetof` gives them against its headers:
/// (thread state to frame, frame, code object's filename, name and line table, strings).
fn layout(minor: u32) -> Option<Layout> {
    let (old_strings, new_strings) = (StringLayout { ascii_size: 48, compact_size: 72 }, StringLayout { ascii_size: 40, compact_size: 56 });
    let (to_frame, frame, (code_filename, code_name, code_linetable), strings) = match minor {
        10 => ((24, None), FrameLayout::Objects { back: 24, code: 32, lasti: 96 }, (104, 112, 120), old_strings),
        11 => ((56, Some(8)), FrameLayout::Interpreter { code: 32, previous: 48, instr: 56, owner: 69, code_units: 184 }, (112, 120, 136), old_strings),
        12 => ((56, Some(0)), FrameLayout::Interpreter { code: 0, previous: 8, instr: 56, owner: 70, code_units: 192 }, (112, 120, 136), new_strings),
        13 => ((72, None), FrameLayout::Interpreter { code: 0, previous: 8, instr: 56, owner: 70, code_units: 200 }, (112, 120, 136), new_strings),
        _ => return None,
    };
    Some(Layout { to_frame, frame, code_filename, code_name, code_linetable, strings })
}

/// What the reading needs from the running interpreter.
struct Reader {
    layout: Layout,
    code_type: usize,
    str_type: usize,
    addr2line: unsafe extern "C" fn(*mut c_void, c_int) -> c_int,
}

fn reader() -> Option<&'static Reader> {
    static READER: OnceLock<Option<Reader>> = OnceLock::new();
    READER
        .get_or_init(|| {
            if cfg!(not(all(target_pointer_width = "64", target_endian = "little"))) {
                return None;
            }
            let version = super::python::version()?;
            let minor = version.strip_prefix("3.")?.split('.').next()?.parse().ok()?;
            let layout = layout(minor)?;
            let code_type = super::python::lookup(c"PyCode_Type") as usize;
            let str_type = super::python::lookup(c"PyUnicode_Type") as usize;
            let addr2line = super::python::lookup(c"PyCode_Addr2Line");
            if code_type == 0 || str_type == 0 || addr2line.is_null() {
                return None;
            }
            // SAFETY: `int PyCode_Addr2Line(PyCodeObject *, int)`, in the C API since 3.8.
            let addr2line = unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, c_int) -> c_int>(addr2line) };
            Some(Reader { layout, code_type, str_type, addr2line })
        })
        .as_ref()
}

/// One frame's place: its code object and the byte offset of its instruction in it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Place {
    code: usize,
    offset: i32,
}

/// A place resolved, with its code object's line table then (a freed code object's address
/// reused by another is told apart by it).
struct Resolved {
    linetable: usize,
    frame: Arc<PythonFrame>,
}

/// Entries a thread keeps before it starts afresh: a long run's distinct call sites are far
/// fewer; a program that makes code on the fly does not grow it without end.
const PLACES_KEPT: usize = 4096;

thread_local! {
    static RESOLVED: RefCell<foldhash::HashMap<Place, Resolved>> = RefCell::new(foldhash::HashMap::default());
}

/// The innermost `limit` frames of the thread whose state is `tstate`, innermost first, or
/// `None` when this Python's layout is not known.
///
/// # Safety
/// `tstate` is the calling thread's own Python thread state, and the thread runs no Python
/// code while this reads (it is inside a hook, with the GIL released or held).
pub(crate) unsafe fn innermost_frames(tstate: *mut c_void, limit: usize) -> Option<Vec<Arc<PythonFrame>>> {
    let reader = reader()?;
    let mut frames = Vec::with_capacity(limit);
    // SAFETY: the caller's contract, passed on; each place walked is a live code object.
    unsafe { walk(reader, tstate, limit, &mut |code, offset| frames.push(resolve(reader, code, offset)))? };
    Some(frames)
}

/// As `innermost_frames`, only where the frames are (code object, instruction offset), into
/// `places`: no allocation and no lookup, for a thread about to wait. Nothing when this
/// Python's layout is not known.
///
/// # Safety
/// As `innermost_frames`.
pub(crate) unsafe fn innermost_places(tstate: *mut c_void, places: &mut crate::session::waits::PythonPlaces) {
    let Some(reader) = reader() else { return };
    let limit = places.code.len();
    let mut count = 0;
    // SAFETY: the caller's contract, passed on.
    let walked = unsafe {
        walk(reader, tstate, limit, &mut |code, offset| {
            if let (Some(c), Some(o)) = (places.code.get_mut(count), places.offset.get_mut(count)) {
                (*c, *o) = (code as u64, offset);
                count += 1;
            }
        })
    };
    places.count = if walked.is_some() { count } else { 0 };
}

/// The frames at `places` (`innermost_places`), named.
///
/// # Safety
/// Each place's code object is alive: a thread still waiting where they were read holds them
/// (its frames do). A code object is checked to be one before it is read further.
pub(crate) unsafe fn resolve_places(places: &crate::session::waits::PythonPlaces) -> Vec<PythonFrame> {
    let Some(reader) = reader() else { return Vec::new() };
    // SAFETY: the caller's contract; the type word of a live object is readable.
    unsafe {
        places
            .places()
            .map(|(code, offset)| (code as usize, offset))
            .take_while(|&(code, _)| code != 0 && read_word(code + OB_TYPE) == reader.code_type)
            .map(|(code, offset)| (*resolve(reader, code, offset)).clone())
            .collect()
    }
}

/// Calls `each` with the code object and instruction offset of the innermost `limit` frames of
/// the thread whose state is `tstate`, innermost first; `None` (having stopped) at a frame whose
/// code object is not one: this Python's objects are laid out otherwise.
///
/// # Safety
/// As `innermost_frames`.
unsafe fn walk(reader: &Reader, tstate: *mut c_void, limit: usize, each: &mut dyn FnMut(usize, i32)) -> Option<()> {
    // SAFETY: the caller's contract: the thread's frames are stable. Every address read is a
    // field of the thread state, a frame reached from it, or a code object a frame holds a
    // strong reference to, at the offsets of this exact CPython version; each code object's
    // type is checked before it is handed on.
    unsafe {
        let (first, second) = reader.layout.to_frame;
        let mut frame = read_word(tstate as usize + first);
        if let (Some(second), true) = (second, frame != 0) {
            frame = read_word(frame + second);
        }
        let (mut steps, mut found) = (0, 0);
        while frame != 0 && found < limit && steps < 4 * limit + 64 {
            steps += 1;
            let (code, offset, next) = match reader.layout.frame {
                FrameLayout::Objects { back, code, lasti } => {
                    let lasti = std::ptr::read((frame + lasti) as *const c_int);
                    (read_word(frame + code), lasti.saturating_mul(2), read_word(frame + back))
                }
                FrameLayout::Interpreter { code, previous, instr, owner, code_units } => {
                    let next = read_word(frame + previous);
                    if std::ptr::read((frame + owner) as *const u8) == FRAME_OWNED_BY_CSTACK {
                        frame = next;
                        continue;
                    }
                    let code = read_word(frame + code);
                    let offset = (read_word(frame + instr) as isize).wrapping_sub((code + code_units) as isize);
                    (code, i32::try_from(offset).unwrap_or(-1), next)
                }
            };
            frame = next;
            if code == 0 || read_word(code + OB_TYPE) != reader.code_type {
                // A frame of a Python function that holds no code object: the layout is not
                // the one expected (a debug or free-threaded build), nothing is read.
                return None;
            }
            each(code, offset);
            found += 1;
        }
    }
    Some(())
}

/// The frame at `offset` in `code`, resolved once per thread.
///
/// # Safety
/// `code` is a live code object of the running CPython version.
unsafe fn resolve(reader: &Reader, code: usize, offset: i32) -> Arc<PythonFrame> {
    let place = Place { code, offset };
    // SAFETY: the caller's contract.
    let linetable = unsafe { read_word(code + reader.layout.code_linetable) };
    // `try_with`: a call made while the thread's locals are being destroyed resolves afresh.
    let known = RESOLVED.try_with(|r| r.borrow().get(&place).filter(|k| k.linetable == linetable).map(|k| Arc::clone(&k.frame))).ok().flatten();
    if let Some(frame) = known {
        return frame;
    }
    // SAFETY: the caller's contract: the code object and its strings are alive; the offset is
    // checked against the code's length (counted in 2-byte units) before the line is asked for,
    // and one before the first instruction asks for the first line, as CPython does.
    let frame = unsafe {
        let units = read_word(code + OB_SIZE) as i64;
        let line = match reader.layout.frame {
            FrameLayout::Interpreter { .. } if i64::from(offset) >= 2 * units => 0,
            _ => (reader.addr2line)(code as *mut c_void, offset.max(-1)),
        };
        PythonFrame {
            file: read_str(reader, read_word(code + reader.layout.code_filename)),
            line: line.max(0) as u32,
            function: read_str(reader, read_word(code + reader.layout.code_name)),
        }
    };
    let frame = Arc::new(frame);
    let _ = RESOLVED.try_with(|r| {
        let mut r = r.borrow_mut();
        if r.len() >= PLACES_KEPT {
            r.clear();
        }
        r.insert(place, Resolved { linetable, frame: Arc::clone(&frame) });
    });
    frame
}

/// A `str` object's text: a compact string's characters (the code object's names and file
/// always are), else empty.
///
/// # Safety
/// `s` is null or a live object of the running CPython version.
unsafe fn read_str(reader: &Reader, s: usize) -> String {
    const MOST: usize = 4096;
    // SAFETY: the caller's contract; the type is checked before the string's fields are read,
    // and its characters are read within its length.
    unsafe {
        if s == 0 || read_word(s + OB_TYPE) != reader.str_type {
            return String::new();
        }
        let state = std::ptr::read((s + STR_STATE) as *const u32);
        let (kind, compact, ascii) = ((state >> 2) & 7, state & (1 << 5) != 0, state & (1 << 6) != 0);
        let length = (read_word(s + STR_LENGTH)).min(MOST);
        if !compact {
            return String::new();
        }
        if ascii {
            let bytes = std::slice::from_raw_parts((s + reader.layout.strings.ascii_size) as *const u8, length);
            return String::from_utf8_lossy(bytes).into_owned();
        }
        let data = s + reader.layout.strings.compact_size;
        (0..length)
            .map(|i| match kind {
                1 => u32::from(std::ptr::read((data + i) as *const u8)),
                2 => u32::from(std::ptr::read((data + 2 * i) as *const u16)),
                4 => std::ptr::read((data + 4 * i) as *const u32),
                _ => u32::from('?'),
            })
            .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect()
    }
}

/// # Safety
/// `address` is a readable, aligned pointer-sized word.
unsafe fn read_word(address: usize) -> usize {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read(address as *const usize) }
}
