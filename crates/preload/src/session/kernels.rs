//! Kernel names by host-stub address: those the program registered at load
//! (`__cudaRegisterFunction`'s device name) and those resolved since, at a fault or when the
//! trace is written (never on the launch itself, which only records the address).

use parking_lot::Mutex;
use std::collections::HashMap;

#[derive(Default)]
pub struct KernelNames {
    names: Mutex<HashMap<u64, String>>,
}

impl KernelNames {
    /// A name the program registered (or one resolved once): kept for the address.
    pub fn register(&self, func: u64, name: String) {
        self.names.lock().insert(func, name);
    }

    pub fn known(&self, func: u64) -> Option<String> {
        self.names.lock().get(&func).cloned()
    }

    /// The name of `func`, resolving it with `resolve` the first time (the result is kept,
    /// the address itself when nothing names it).
    pub fn name(&self, func: u64, resolve: impl FnOnce(u64) -> Option<String>) -> String {
        if let Some(name) = self.known(func) {
            return name;
        }
        let name = resolve(func).unwrap_or_else(|| crate::trace::hex(func));
        self.names.lock().insert(func, name.clone());
        name
    }

    /// A table with the same names (a forked child's copy).
    pub fn copy(&self) -> Self {
        Self { names: Mutex::new(self.names.lock().clone()) }
    }
}

/// A C++ symbol demangled ("_Z5kfillPfi" -> "kfill(float*, int)"); anything else as it is.
pub(crate) fn demangle(symbol: &str) -> String {
    cpp_demangle::Symbol::new(symbol).ok().and_then(|s| s.demangle().ok()).unwrap_or_else(|| symbol.to_string())
}
