//! A thread-local flag set while a hook runs: calls made meanwhile (by the guard, or by the
//! real library internally) are forwarded untouched and not recorded.

use super::thread::PER_THREAD;

/// Set for the lifetime of the value; `None` when this thread is already inside a hook.
pub(crate) struct Reentry(());

impl Reentry {
    pub(crate) fn enter() -> Option<Self> {
        // During thread teardown the flag may be gone: treat that as "inside" and forward.
        let entered = PER_THREAD.try_with(|t| !t.inside.replace(true)).unwrap_or(false);
        entered.then_some(Self(()))
    }
}

impl Drop for Reentry {
    fn drop(&mut self) {
        let _ = PER_THREAD.try_with(|t| t.inside.set(false));
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
