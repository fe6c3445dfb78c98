//! What a hook's arguments are, declared by their types in the hook table (compiler-rt's
//! `COMMON_INTERCEPTOR_READ_RANGE` / `WRITE_RANGE`, written beside the signature): a table line
//! marked `declared` gives each data pointer one of the types below, which are plain raw
//! pointers to C (the export's ABI is the header's) but distinct to Rust, so the line says what
//! the call does with each operand, and an argument of no declared kind does not compile (a
//! pointer cannot silently lose its check by being spelt `*mut`). The export hands its handler
//! the arguments as `Args`: each one's name in the table (NVIDIA's header names), its kind and
//! its bits; the operand model and the recorded form are built from them (guard/blas.rs), and
//! the handler keeps only its rule: the shapes and the argument checks.

use std::cell::Cell;
use std::ffi::{c_int, c_void};

use crate::Hook;

/// The pointees that give each declared pointer type its own Rust type; never made.
pub(crate) mod pointee {
    pub enum Input {}
    pub enum Accumulator {}
    pub enum Overwritten {}
    pub enum Output {}
    pub enum DotResult {}
    pub enum Scalar {}
    pub enum Workspace {}
}

/// An operand the call reads (`const T *A`).
pub(crate) type In = *const pointee::Input;
/// Read when beta is not zero, and written (gemv's y).
pub(crate) type Acc = *mut pointee::Accumulator;
/// Read, then overwritten (a solve's right-hand side).
pub(crate) type InOut = *mut pointee::Overwritten;
/// Written only.
pub(crate) type Out = *mut pointee::Output;
/// A dot product's result, in host or device memory as the handle's pointer mode says.
pub(crate) type ResultOut = *mut pointee::DotResult;
/// alpha or beta: host or device memory as the handle's pointer mode says.
pub(crate) type Scalar = *const pointee::Scalar;
/// Scratch memory the call is lent (cuDNN's `workSpace`): only its extent matters.
pub(crate) type Workspace = *mut pointee::Workspace;

/// What a declared argument is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgKind {
    /// The library handle (or another opaque object the call is given).
    Handle,
    /// A C `int`: a size, a leading dimension, an increment or an enum (named `trans`,
    /// `side`, `uplo` or `diag`).
    Int,
    /// Another plain value (a size in bytes, a seed, a float): passed on, not read.
    Value,
    Scalar,
    Operand(Access),
}

/// What the call does with an operand's memory (`check::operand_call::Role`, as the table
/// declares it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Input,
    Accumulator,
    Overwritten,
    Output,
    DotResult,
    Workspace,
}

/// One argument as the export passed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeclaredArg {
    pub name: &'static str,
    pub kind: ArgKind,
    /// The value: a pointer's address, an `int` sign-extended.
    pub bits: u64,
}

impl DeclaredArg {
    /// Whether it points to memory the call reads or writes: an operand, a workspace or a
    /// scalar (not a handle, a descriptor or a plain value).
    pub fn points_to_data(&self) -> bool {
        matches!(self.kind, ArgKind::Operand(_) | ArgKind::Scalar)
    }
}

/// A type the table may give a declared argument.
pub(crate) trait Declare: Copy {
    const KIND: ArgKind;
    fn bits(self) -> u64;

    fn declared(self, name: &'static str) -> DeclaredArg {
        DeclaredArg { name, kind: Self::KIND, bits: self.bits() }
    }
}

impl Declare for c_int {
    const KIND: ArgKind = ArgKind::Int;
    fn bits(self) -> u64 {
        i64::from(self) as u64
    }
}

macro_rules! declared_values {
    ( $( $ty:ty ),* ) => {
        $( impl Declare for $ty {
            const KIND: ArgKind = ArgKind::Value;
            fn bits(self) -> u64 {
                self as u64
            }
        } )*
    };
}

declared_values!(usize, u64);

impl Declare for f32 {
    const KIND: ArgKind = ArgKind::Value;
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl Declare for f64 {
    const KIND: ArgKind = ArgKind::Value;
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

impl Declare for *mut c_void {
    const KIND: ArgKind = ArgKind::Handle;
    fn bits(self) -> u64 {
        self as u64
    }
}

macro_rules! declared_pointers {
    ( $( $ty:ty => $kind:expr ),* $(,)? ) => {
        $( impl Declare for $ty {
            const KIND: ArgKind = $kind;
            fn bits(self) -> u64 {
                self as u64
            }
        } )*
    };
}

declared_pointers! {
    In => ArgKind::Operand(Access::Input),
    Acc => ArgKind::Operand(Access::Accumulator),
    InOut => ArgKind::Operand(Access::Overwritten),
    Out => ArgKind::Operand(Access::Output),
    ResultOut => ArgKind::Operand(Access::DotResult),
    Workspace => ArgKind::Operand(Access::Workspace),
    Scalar => ArgKind::Scalar,
}

/// The `int` arguments whose values are a cuBLAS enum, by their header names, with the labels
/// the trace gives their values.
pub(crate) fn enum_labels(name: &str) -> Option<&'static [&'static str]> {
    use crate::cuda::{Diag, Fill, Side};
    match name {
        "trans" => Some(&["N", "T", "C"]),
        "side" => Some(Side::LABELS),
        "uplo" => Some(Fill::LABELS),
        "diag" => Some(Diag::LABELS),
        _ => None,
    }
}

/// A declared call's arguments, in the table's order.
#[derive(Debug)]
pub(crate) struct Args<'a> {
    pub hook: Hook,
    pub list: &'a [DeclaredArg],
    /// A rule asked for a name its line does not have (of that kind): its answer is not to be
    /// trusted, and the call goes unchecked (`missed`).
    missed: Cell<bool>,
}

impl<'a> Args<'a> {
    pub fn new(hook: Hook, list: &'a [DeclaredArg]) -> Self {
        Self { hook, list, missed: Cell::new(false) }
    }

    fn named(&self, name: &str, int: bool) -> Option<&'a DeclaredArg> {
        let found = self.list.iter().find(|a| a.name == name && (a.kind == ArgKind::Int) == int);
        if found.is_none() {
            self.missed.set(true);
        }
        found
    }

    /// The `int` argument of this name (0, and `missed`, when the line has none).
    pub fn int(&self, name: &str) -> c_int {
        self.named(name, true).map_or(0, |a| a.bits as i64 as c_int)
    }

    /// The pointer argument of this name (null, and `missed`, when the line has none).
    pub fn pointer(&self, name: &str) -> u64 {
        self.named(name, false).map_or(0, |a| a.bits)
    }

    /// Whether a rule asked for an argument the line does not declare: a rule and its line out
    /// of step, which the guard answers by checking nothing rather than checking zeros.
    pub fn missed(&self) -> bool {
        self.missed.get()
    }

    /// Whether the line has a scalar of this name (a dot product has no alpha).
    pub fn has_scalar(&self, name: &str) -> bool {
        self.list.iter().any(|a| a.name == name && a.kind == ArgKind::Scalar)
    }

    /// The library's handle: the handle argument named `handle`, wherever the line puts it
    /// (cuDNN's dropout setters take a descriptor first).
    pub fn handle(&self) -> u64 {
        self.list.iter().find(|a| a.kind == ArgKind::Handle && a.name == "handle").map_or(0, |a| a.bits)
    }

    /// The operands, in the table's order, with what the call does with each.
    pub fn operands(&self) -> impl Iterator<Item = (&'static str, Access, u64)> + 'a {
        self.list.iter().filter_map(|a| match a.kind {
            ArgKind::Operand(access) => Some((a.name, access, a.bits)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_declared_type_says_its_kind_and_passes_its_bits_unchanged() {
        let a = (0x1000usize as In).declared("A");
        assert_eq!((a.name, a.kind, a.bits), ("A", ArgKind::Operand(Access::Input), 0x1000));
        assert_eq!((0x20usize as Acc).declared("y").kind, ArgKind::Operand(Access::Accumulator));
        assert_eq!((0x20usize as InOut).declared("B").kind, ArgKind::Operand(Access::Overwritten));
        assert_eq!((0x20usize as Out).declared("C").kind, ArgKind::Operand(Access::Output));
        assert_eq!((0x20usize as ResultOut).declared("result").kind, ArgKind::Operand(Access::DotResult));
        assert_eq!((0x20usize as Scalar).declared("alpha").kind, ArgKind::Scalar);
        assert_eq!((-3 as c_int).declared("incx").bits as i64, -3);
        assert_eq!((0x20usize as Workspace).declared("ws").kind, ArgKind::Operand(Access::Workspace));
        assert_eq!((0.5f64.declared("epsilon").kind, 0.5f64.declared("epsilon").bits), (ArgKind::Value, 0.5f64.to_bits()));
        assert!(!(0x20usize as *mut c_void).declared("xDesc").points_to_data() && (0x20usize as Scalar).declared("alpha").points_to_data());
    }

    #[test]
    fn arguments_are_found_by_their_names_in_the_table() {
        let list = [
            (0x10usize as *mut c_void).declared("handle"),
            (1 as c_int).declared("trans"),
            (-2 as c_int).declared("incx"),
            (0x40usize as In).declared("x"),
            (0x80usize as Acc).declared("y"),
        ];
        let args = Args::new(Hook::cublasSgemv_v2, &list);
        assert_eq!((args.handle(), args.int("trans"), args.int("incx"), args.pointer("x")), (0x10, 1, -2, 0x40));
        assert!(!args.missed());
        assert_eq!(args.int("x"), 0, "a pointer is not read as an int");
        assert!(args.missed(), "and the rule that asked is told it missed");
        let args = Args::new(Hook::cublasSgemv_v2, &list);
        assert_eq!((args.pointer("incx"), args.int("missing")), (0, 0));
        assert!(args.missed());
        let dropout = [(0x5usize as *mut c_void).declared("desc"), (0x6usize as *mut c_void).declared("handle")];
        assert_eq!(Args::new(Hook::cudnnSetDropoutDescriptor, &dropout).handle(), 0x6, "the handle by its name, not its place");
        let operands: Vec<_> = args.operands().collect();
        assert_eq!(operands, [("x", Access::Input, 0x40), ("y", Access::Accumulator, 0x80)]);
    }

    #[test]
    fn the_enum_arguments_are_labelled_as_the_trace_has_always_labelled_them() {
        assert_eq!(enum_labels("trans"), Some(&["N", "T", "C"][..]));
        assert_eq!(enum_labels("side").map(|l| l[0]), Some("left"));
        assert_eq!(enum_labels("m"), None);
    }
}
