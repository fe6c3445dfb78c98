//! The launch grid of the on-device scan, from the work and the device (issue 30). The kernel
//! (crates/preload/src/kernels/nonfinite.cu) cuts each matrix into runs of contiguous elements
//! (the whole matrix when `ld == rows` or it has one column, else one run per column) and each
//! run into segments of `SEGMENT_BYTES`, one warp per segment, warps stepping over the segments
//! with a grid stride. So a launch needs no more blocks than the device holds at once (more
//! only queue behind them), and no more than there are segments for its warps.

use crate::validate::StoredShape;

/// `SEGMENT` of the kernel: 32 lanes, eight 16-byte loads each.
pub const SEGMENT_BYTES: u64 = 32 * 16 * 8;

/// Threads per block of every scan launch (whole warps: the kernel's lanes are warps).
pub const THREADS: u32 = 256;

/// Blocks resident at once when the device cannot be asked: 132 SMs (an H100/H200) of eight.
pub const FALLBACK_RESIDENT_BLOCKS: u32 = 132 * 8;

/// The segments the kernel reads for `members` matrices of `shape` with `element`-byte elements.
pub fn segments(shape: StoredShape, element: u64, members: u64) -> u64 {
    let (rows, cols, ld) = (shape.rows.max(0) as u64, shape.cols.max(0) as u64, shape.ld.max(0) as u64);
    let contiguous = ld == rows || cols == 1;
    let (runs, run_elements) = if contiguous { (1, rows.saturating_mul(cols)) } else { (cols, rows) };
    let per_run = run_elements.saturating_mul(element).div_ceil(SEGMENT_BYTES);
    members.saturating_mul(runs).saturating_mul(per_run)
}

/// Blocks the device holds at once: its SMs times the blocks of `THREADS` resident on each (the
/// driver's occupancy answer, else the SM's thread limit); `None` parts unknown.
pub fn resident_blocks(sms: Option<i32>, blocks_per_sm: Option<i32>, threads_per_sm: Option<i32>) -> u32 {
    let per_sm = match (blocks_per_sm, threads_per_sm) {
        (Some(b), _) if b > 0 => b as u32,
        (_, Some(t)) if t >= THREADS as i32 => t as u32 / THREADS,
        _ => 8,
    };
    match sms {
        Some(n) if n > 0 => (n as u32).saturating_mul(per_sm).clamp(1, 1 << 16),
        _ => FALLBACK_RESIDENT_BLOCKS,
    }
}

/// Blocks for a launch over `segments` segments: one warp each at most, the device's resident
/// blocks at most, one at least.
pub fn blocks_for(segments: u64, resident: u32) -> u32 {
    let warps_per_block = (THREADS / 32) as u64;
    segments.div_ceil(warps_per_block).clamp(1, resident.max(1) as u64) as u32
}

/// What the batched scan kernel wrote for each job (three words a job: NaN count, Inf count,
/// and the complement of its first bad (member << 40 | index), 0 for none): each job's counts,
/// and the member holding its first NaN/Inf.
pub fn batch_results(jobs: &[super::BatchScan], words: &[u64]) -> Vec<(crate::scan::MatrixScan, Option<u64>)> {
    jobs.iter()
        .enumerate()
        .map(|(j, job)| {
            let word = |k: usize| words.get(3 * j + k).copied().unwrap_or(0);
            let (nan, inf, first) = (word(0), word(1), word(2));
            let key = (first != 0).then_some(!first);
            let ld = job.shape.ld.max(1) as u64;
            let scan = crate::scan::MatrixScan {
                nan,
                inf,
                first_nonfinite: key.map(|k| k & ((1 << 40) - 1)).map(|index| (index % ld, index / ld)),
                scanned_elements: (job.shape.rows.max(0) as u64).saturating_mul(job.shape.cols.max(0) as u64).saturating_mul(job.members),
                sampled: false,
                on_device: true,
            };
            (scan, key.map(|k| k >> 40))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(rows: i64, cols: i64, ld: i64) -> StoredShape {
        StoredShape { rows, cols, ld }
    }

    #[test]
    fn a_contiguous_matrix_is_one_run_cut_into_segments_and_a_padded_one_a_run_per_column() {
        // 1024 x 1024 f32, ld == rows: 4 MiB in 4 KiB segments.
        assert_eq!(segments(shape(1024, 1024, 1024), 4, 1), 1024);
        // Padded: 1024 columns of 4 KiB each, one segment per column.
        assert_eq!(segments(shape(1024, 1024, 1030), 4, 1), 1024);
        // Short padded columns still take a segment each; a single column is contiguous.
        assert_eq!(segments(shape(3, 10, 8), 2, 1), 10);
        assert_eq!(segments(shape(3000, 1, 4000), 2, 1), 2);
        assert_eq!(segments(shape(2, 2, 2), 4, 5), 5, "a batch: per member");
        assert_eq!(segments(shape(0, 4, 4), 4, 1), 0);
    }

    #[test]
    fn the_grid_is_the_devices_resident_blocks_not_the_element_count() {
        // An H200: 132 SMs, 2048 threads each, eight blocks of 256.
        let h200 = resident_blocks(Some(132), None, Some(2048));
        assert_eq!(h200, 1056);
        assert_eq!(resident_blocks(Some(132), Some(6), Some(2048)), 792, "the driver's occupancy answer wins");
        // 1 GiB of f32: far more segments than the device holds blocks; the grid stays.
        assert_eq!(blocks_for(segments(shape(1 << 14, 1 << 14, 1 << 14), 4, 1), h200), 1056);
        // A 2x2 matrix: one block, whatever the device.
        assert_eq!(blocks_for(segments(shape(2, 2, 2), 4, 1), h200), 1);
        assert_eq!(blocks_for(0, h200), 1);
        assert_eq!(resident_blocks(None, None, None), FALLBACK_RESIDENT_BLOCKS);
        assert_eq!(resident_blocks(Some(4), None, Some(100)), 32, "a thread limit below a block: eight per SM");
    }
}
