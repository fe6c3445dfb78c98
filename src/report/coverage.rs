//! What the guard did not scan whole: calls whose NaN/Inf scan was skipped on purpose
//! (CUBLASGUARD_SCAN_EVERY, CUBLASGUARD_BUDGET), operands left unscanned for want of room in
//! the default mode's staging region, and operands past CUBLASGUARD_SCAN_BYTES scanned by a
//! sample, said plainly beside "no faults", never hidden in the trace's counters.

use cublasguard_format::trace::Summary;

/// The sentences for the summaries of a run's traces; none when every call the checks wanted
/// was scanned whole.
pub fn unscanned_lines<'a>(summaries: impl Iterator<Item = &'a Summary>) -> Vec<String> {
    let (mut skipped_calls, mut no_room, mut at_call, mut sampled, mut captured) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut unfollowed = 0u64;
    for s in summaries {
        captured = captured.saturating_add(s.captured_calls);
        unfollowed = unfollowed.saturating_add(s.unfollowed_captured_calls);
        skipped_calls = skipped_calls.saturating_add(s.skipped_scans);
        sampled = sampled.saturating_add(s.sampled_operands);
        no_room = no_room.saturating_add(s.deferred_verdicts.get("no_room").copied().unwrap_or(0));
        at_call = at_call.saturating_add(s.deferred_verdicts.get("judged_at_call").copied().unwrap_or(0));
    }
    let mut lines = Vec::new();
    if skipped_calls > 0 {
        lines.push(format!(
            "{skipped_calls} {} not scanned for NaN/Inf, as CUBLASGUARD_SCAN_EVERY or CUBLASGUARD_BUDGET asked: \
             unset them to scan every call.",
            plural(skipped_calls, "call was", "calls were")
        ));
    }
    if captured > 0 {
        // Both modes scan a captured call's operands after each replay of its graph, all but
        // those the guard does not follow to the replays.
        let mut line = format!(
            "{captured} {} captured into a CUDA graph and not scanned at the capture: {} at each replay, and {} operands \
             are scanned after each replay",
            plural(captured, "call was", "calls were"),
            plural(captured, "its kernel runs", "their kernels run"),
            plural(captured, "its", "their")
        );
        let unfollowed = unfollowed.min(captured);
        if unfollowed > 0 {
            line.push_str(&format!(
                ", but for {unfollowed} {} pointer-array batches (their pointers are in device memory) and triangular \
                 matrices: no replay scans those",
                plural(unfollowed, "call's", "calls'")
            ));
        }
        line.push('.');
        lines.push(line);
    }
    if no_room > 0 {
        lines.push(format!(
            "{no_room} {} not scanned for NaN/Inf: the staging region the default mode's scans land in had no room \
             left for {} (a larger CUBLASGUARD_STAGING_BYTES, `cublasguard run --staging-bytes BYTES`, or \
             CUBLASGUARD_SYNC=gemm, `--sync gemm`, scans them).",
            plural(no_room, "operand was", "operands were"),
            plural(no_room, "it", "them")
        ));
    }
    if sampled > 0 {
        lines.push(format!(
            "{sampled} {} larger than CUBLASGUARD_SCAN_BYTES: an even sample of {} was scanned, not every element \
             (a larger CUBLASGUARD_SCAN_BYTES, `cublasguard run --scan-bytes BYTES`, scans more).",
            plural(sampled, "operand was", "operands were"),
            plural(sampled, "its columns", "their columns")
        ));
    }
    if at_call > 0 && lines.is_empty() {
        lines.push(format!(
            "{at_call} {} scanned at the call, waiting for the GPU as CUBLASGUARD_SYNC=gemm does: the staging region \
             (CUBLASGUARD_STAGING_BYTES, `cublasguard run --staging-bytes BYTES`) had no room for {} scans, or held \
             as many waiting verdicts as it allows (the host far ahead of the GPU).",
            plural(at_call, "call was", "calls were"),
            plural(at_call, "its", "their")
        ));
    }
    lines
}

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(skipped: u64, counts: &[(&str, u64)]) -> Summary {
        Summary { skipped_scans: skipped, deferred_verdicts: counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(), ..Summary::default() }
    }

    #[test]
    fn captured_calls_are_said_to_be_unscanned() {
        // Both modes scan captured operands after each replay (issue 52).
        let lines = unscanned_lines([Summary { captured_calls: 2, ..Summary::default() }].iter());
        assert_eq!(
            lines,
            ["2 calls were captured into a CUDA graph and not scanned at the capture: their kernels run at each replay, \
              and their operands are scanned after each replay."]
        );
        let one = unscanned_lines([Summary { captured_calls: 1, ..Summary::default() }].iter());
        assert_eq!(one, ["1 call was captured into a CUDA graph and not scanned at the capture: its kernel runs at each replay, and its operands are scanned after each replay."]);
        // What the replays do not follow is not said to be scanned.
        let some = unscanned_lines([Summary { captured_calls: 3, unfollowed_captured_calls: 1, ..Summary::default() }].iter());
        assert_eq!(
            some,
            ["3 calls were captured into a CUDA graph and not scanned at the capture: their kernels run at each replay, \
              and their operands are scanned after each replay, but for 1 call's pointer-array batches (their pointers are \
              in device memory) and triangular matrices: no replay scans those."]
        );
    }

    #[test]
    fn unscanned_operands_and_skipped_calls_are_said_with_the_setting_that_scans_them() {
        assert!(unscanned_lines([summary(0, &[("deferred", 5)])].iter()).is_empty(), "everything scanned");
        let lines = unscanned_lines([summary(2, &[("no_room", 1)]), summary(1, &[("no_room", 2)])].iter());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("3 calls were not scanned") && lines[0].contains("CUBLASGUARD_SCAN_EVERY"), "{lines:?}");
        assert!(lines[1].starts_with("3 operands were not scanned") && lines[1].contains("CUBLASGUARD_STAGING_BYTES"), "{lines:?}");
        assert!(lines[1].contains("run --staging-bytes BYTES"), "the run option beside the variable: {lines:?}");
        let sampled = unscanned_lines([Summary { sampled_operands: 2, ..Summary::default() }].iter());
        assert!(sampled[0].starts_with("2 operands were larger than CUBLASGUARD_SCAN_BYTES"), "{sampled:?}");
        assert!(sampled[0].contains("run --scan-bytes BYTES"), "{sampled:?}");
        let at_call = unscanned_lines([summary(0, &[("judged_at_call", 1)])].iter());
        assert!(at_call[0].starts_with("1 call was scanned at the call") && at_call[0].contains("no room for its scans"), "{at_call:?}");
    }
}
