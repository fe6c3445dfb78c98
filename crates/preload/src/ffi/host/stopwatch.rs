//! How long a lean call ran, from the CPU's own counter (x86-64's time-stamp counter, aarch64's
//! virtual counter) where the kernel keeps time with that counter: the lean path then reads the
//! wall clock once per call, for its end, and not a second time for its start (BENCHMARKS.md,
//! issue 27). Elsewhere, and until the counter's rate is known, a duration is the difference of
//! two wall-clock reads, as before.
//!
//! The rate is measured, not taken from the hardware's word for it (aarch64's CNTFRQ_EL0 is
//! set by firmware, sometimes wrongly; x86 has no portable way to ask): the counter and
//! CLOCK_MONOTONIC are read together when the session is armed, and again by the first lean
//! call at least `CALIBRATION_NS` later. Durations stay nanoseconds, as the recorder and the
//! trace keep them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Nanoseconds per counter tick, in 32.32 fixed point; 0: durations come from the wall clock
/// (the counter is not the kernel's clock source, its rate is not measured yet, or there is
/// none on this architecture).
static SCALE: AtomicU64 = AtomicU64::new(0);
/// The counter and CLOCK_MONOTONIC when the measurement of its rate began; `BASE_NS` 0: none
/// under way (not begun, or over).
static BASE_TICKS: AtomicU64 = AtomicU64::new(0);
static BASE_NS: AtomicU64 = AtomicU64::new(0);

/// How long the rate is measured over: a few tens of nanoseconds between reading the counter
/// and the clock make an error of a few parts per million.
const CALIBRATION_NS: u64 = 10_000_000;

/// The start of a call being timed: the counter's value, or the wall clock's where durations
/// come from it (`scale` 0).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Started {
    at: u64,
    /// `SCALE` when the call started, kept so that its end reads its start the same way even
    /// if the rate became known meanwhile.
    scale: u64,
}

impl Started {
    /// Now, for a call about to be forwarded.
    #[inline(always)]
    pub(crate) fn now() -> Self {
        let scale = SCALE.load(Ordering::Relaxed);
        let at = if scale != 0 { counter() } else { wall_clock() };
        Self { at, scale }
    }

    /// Nanoseconds since the start, given the wall clock's `time_ns` read at the end.
    #[inline(always)]
    pub(crate) fn elapsed_ns(self, time_ns: u64) -> u64 {
        if self.scale != 0 {
            ticks_to_ns(counter().saturating_sub(self.at), self.scale)
        } else {
            wall_clock_since(self.at, time_ns)
        }
    }
}

// The wall clock's side, out of line: the counter's side is then laid out straight through,
// with no jump around the other.

#[cold]
#[inline(never)]
fn wall_clock() -> u64 {
    super::process::now_ns()
}

#[cold]
#[inline(never)]
fn wall_clock_since(started_ns: u64, time_ns: u64) -> u64 {
    if BASE_NS.load(Ordering::Relaxed) != 0 {
        measure_rate();
    }
    time_ns.saturating_sub(started_ns)
}

/// `ticks` in nanoseconds at `scale` (32.32 fixed point).
#[inline(always)]
fn ticks_to_ns(ticks: u64, scale: u64) -> u64 {
    ((ticks as u128 * scale as u128) >> 32) as u64
}

/// When the session is armed: the measurement of the counter's rate begins, if the kernel keeps
/// time with it (so it runs at a constant rate, the same on every CPU).
pub(crate) fn begin_measuring() {
    if !counter_is_the_clock_source() {
        return;
    }
    if let Some((ticks, ns)) = counter_and_clock() {
        BASE_TICKS.store(ticks, Ordering::Relaxed);
        BASE_NS.store(ns.max(1), Ordering::Release);
    }
}

/// The end of the measurement, once `CALIBRATION_NS` passed since its beginning: the first
/// call to get here after that publishes the rate (or gives up on an implausible one).
#[cold]
#[inline(never)]
fn measure_rate() {
    let base_ns = BASE_NS.load(Ordering::Acquire);
    // One clock read on the calls before the time is up; the careful reading only at its end.
    if base_ns == 0 || monotonic_ns().is_none_or(|ns| ns.saturating_sub(base_ns) < CALIBRATION_NS) {
        return;
    }
    let Some((ticks, ns)) = counter_and_clock() else { return };
    let elapsed = ns.saturating_sub(base_ns);
    let base_ticks = BASE_TICKS.load(Ordering::Relaxed);
    if BASE_NS.compare_exchange(base_ns, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        if let Some(scale) = scale_of(ticks.wrapping_sub(base_ticks), elapsed) {
            SCALE.store(scale, Ordering::Relaxed);
        }
    }
}

/// Nanoseconds per tick (32.32) of a counter that advanced `ticks` in `ns`, when that is a
/// rate a CPU counter has (1 MHz to 10 GHz); `None` otherwise (it went backwards, stopped, or
/// the machine slept in between).
fn scale_of(ticks: u64, ns: u64) -> Option<u64> {
    if ticks == 0 || ticks > i64::MAX as u64 {
        return None;
    }
    let scale = ((ns as u128) << 32) / ticks as u128;
    let plausible = (1u128 << 32) / 10..=1000u128 << 32;
    plausible.contains(&scale).then_some(scale as u64)
}

/// The counter and CLOCK_MONOTONIC at one moment: the clock read between two reads of the
/// counter, their midpoint kept, the tightest of three tries (an interrupt between the reads
/// would skew one).
fn counter_and_clock() -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..3 {
        let before = counter();
        let ns = monotonic_ns()?;
        let after = counter();
        let spread = after.wrapping_sub(before);
        if best.is_none_or(|(s, _, _)| spread < s) {
            best = Some((spread, before.wrapping_add(spread / 2), ns));
        }
    }
    best.map(|(_, ticks, ns)| (ticks, ns))
}

fn monotonic_ns() -> Option<u64> {
    Some(super::process::clock_ns(libc::CLOCK_MONOTONIC)).filter(|&ns| ns != 0)
}

/// The kernel's current clock source, by the name it has for this architecture's counter.
fn counter_is_the_clock_source() -> bool {
    let own = if cfg!(target_arch = "x86_64") {
        "tsc"
    } else if cfg!(target_arch = "aarch64") {
        "arch_sys_counter"
    } else {
        return false;
    };
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource").is_ok_and(|name| name.trim() == own)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn counter() -> u64 {
    // SAFETY: RDTSC only reads the time-stamp counter (every x86-64 CPU has it).
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn counter() -> u64 {
    let ticks: u64;
    // SAFETY: CNTVCT_EL0 is readable at EL0 on Linux (the kernel's vDSO reads it the same way);
    // the instruction touches no memory and no flags.
    unsafe { std::arch::asm!("mrs {}, cntvct_el0", out(reg) ticks, options(nomem, nostack, preserves_flags)) };
    ticks
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(always)]
fn counter() -> u64 {
    0 // never used: `counter_is_the_clock_source` is false here
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_become_nanoseconds() {
        // A 3 GHz counter: a third of a nanosecond per tick.
        let scale = scale_of(3_000_000_000, 1_000_000_000).unwrap();
        assert_eq!(ticks_to_ns(3_000, scale), 999); // rounded down by the fixed point
        assert_eq!(ticks_to_ns(3_000_000_000, scale), 999_999_999);
        // A 25 MHz counter (aarch64's usual): 40 ns per tick.
        let scale = scale_of(250_000, 10_000_000).unwrap();
        assert_eq!(ticks_to_ns(1, scale), 40);
        assert_eq!(ticks_to_ns(u64::from(u32::MAX), scale), 40 * u64::from(u32::MAX));
    }

    #[test]
    fn implausible_rates_are_refused() {
        assert_eq!(scale_of(0, 10_000_000), None, "a stopped counter");
        assert_eq!(scale_of(u64::MAX - 5, 10_000_000), None, "a counter that went backwards");
        assert_eq!(scale_of(1_000_000_000, 10_000_000), None, "100 GHz");
        assert_eq!(scale_of(1_000, 10_000_000), None, "100 kHz");
    }

    #[test]
    fn the_wall_clock_times_a_call_until_the_rate_is_known() {
        let started = Started { at: 1_000, scale: 0 };
        assert_eq!(started.elapsed_ns(1_250), 250);
        assert_eq!(started.elapsed_ns(900), 0, "a clock set back");
    }

    #[test]
    fn the_counter_and_the_clock_are_read_together() {
        let first = counter_and_clock().unwrap();
        let second = counter_and_clock().unwrap();
        assert!(second.1 >= first.1);
        if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            assert!(second.0 > first.0, "the counter advances");
        }
    }
}
