//! A thread-local flag set while a hook runs: calls made meanwhile (by the guard, or by the
//! real library internally) are forwarded untouched and not recorded.

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Set for the lifetime of the value; `None` when this thread is already inside a hook.
pub struct Reentry(());

impl Reentry {
    pub fn enter() -> Option<Self> {
        // During thread teardown the flag may be gone: treat that as "inside" and forward.
        let entered = INSIDE.try_with(|inside| !inside.replace(true)).unwrap_or(false);
        entered.then_some(Self(()))
    }
}

impl Drop for Reentry {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_entry_is_refused_until_the_outer_one_ends() {
        let outer = Reentry::enter();
        assert!(outer.is_some());
        assert!(Reentry::enter().is_none());
        drop(outer);
        assert!(Reentry::enter().is_some());
    }
}
