//! NaN/Inf scans of operands by bit pattern, one generic routine for every floating format.
//! The bytes come through a `DeviceReader`, so the same scan serves device memory (copied in
//! chunks through the runtime) and the unit tests (plain slices).

pub use crate::cuda::DType;
use crate::validate::StoredShape;

/// Where a format keeps its exponent and mantissa, and whether it has infinities.
struct FloatBits {
    size: usize,
    exponent: u64,
    mantissa: u64,
    has_inf: bool,
}

/// The bit layout of a floating format; `None` for the integer types.
fn float_bits(dtype: DType) -> Option<FloatBits> {
    let f = |size, exponent, mantissa, has_inf| Some(FloatBits { size, exponent, mantissa, has_inf });
    match dtype {
        DType::F64 => f(8, 0x7ff0_0000_0000_0000, 0x000f_ffff_ffff_ffff, true),
        DType::F32 => f(4, 0x7f80_0000, 0x007f_ffff, true),
        DType::F16 => f(2, 0x7c00, 0x03ff, true),
        DType::BF16 => f(2, 0x7f80, 0x007f, true),
        DType::F8E5M2 => f(1, 0x7c, 0x03, true),
        // E4M3 ("fn"): no infinities; only S.1111.111 is NaN.
        DType::F8E4M3 => f(1, 0x78, 0x07, false),
        DType::I8 | DType::I32 | DType::C32 | DType::C64 | DType::CI8 | DType::Unknown(_) => None,
    }
}

/// NaN and Inf counts and the first non-finite element, by element index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub nan: u64,
    pub inf: u64,
    pub first_index: Option<u64>,
}

impl Tally {
    pub fn is_finite(&self) -> bool {
        self.nan == 0 && self.inf == 0
    }
}

/// Runs of at most this many bytes are tallied element by element.
const SHORT_RUN_BYTES: usize = 64;

/// Counts over a run of whole elements, as `W`-byte little-endian words: one pass, no
/// branches, so the compiler vectorises it (see BENCHMARKS.md for the bandwidth).
macro_rules! tally_words {
    // $acc: the narrowest counter that holds a block of $block elements, so each lane's count
    // stays as wide as the element and the loop vectorises at full width.
    ($name:ident, $word:ty, $size:expr, $acc:ty, $block:expr) => {
        fn $name(bytes: &[u8], f: &FloatBits, base: u64, tally: &mut Tally) {
            let (exp, man) = (f.exponent as $word, f.mantissa as $word);
            // NaN: exponent all ones and a mantissa; Inf: exponent all ones, no mantissa. For
            // E4M3, which has no Inf, only exponent and mantissa all ones is NaN.
            let (special_mask, special_value) = if f.has_inf { (exp, exp) } else { (exp | man, exp | man) };
            if bytes.len() <= SHORT_RUN_BYTES {
                // A few elements (a deferred verdict's small operands, a scalar): one plain pass,
                // without the blocked loop's set-up, which costs more than the elements do.
                for (i, w) in bytes.chunks_exact($size).enumerate() {
                    let mut raw = [0u8; $size];
                    raw.copy_from_slice(w);
                    let v = <$word>::from_le_bytes(raw);
                    if (v & special_mask) == special_value {
                        if !f.has_inf || v & man != 0 {
                            tally.nan += 1;
                        } else {
                            tally.inf += 1;
                        }
                        tally.first_index.get_or_insert(base + i as u64);
                    }
                }
                return;
            }
            let (mut special, mut nan) = (0u64, 0u64);
            for block in bytes.chunks(($size) * ($block)) {
                let (mut s, mut n): ($acc, $acc) = (0, 0);
                for w in block.chunks_exact($size) {
                    let mut raw = [0u8; $size];
                    raw.copy_from_slice(w);
                    let v = <$word>::from_le_bytes(raw);
                    let is_special = (v & special_mask) == special_value;
                    s += is_special as $acc;
                    n += (is_special & (!f.has_inf | (v & man != 0))) as $acc;
                }
                special += s as u64;
                nan += n as u64;
            }
            if special != 0 && tally.first_index.is_none() {
                // Only a run that holds a bad element pays for finding its position.
                tally.first_index = bytes
                    .chunks_exact($size)
                    .position(|w| {
                        let mut raw = [0u8; $size];
                        raw.copy_from_slice(w);
                        (<$word>::from_le_bytes(raw) & special_mask) == special_value
                    })
                    .map(|p| base + p as u64);
            }
            tally.nan += nan;
            tally.inf += special - nan;
        }
    };
}
tally_words!(tally_u64, u64, 8, u32, 1 << 16);
tally_words!(tally_u32, u32, 4, u32, 1 << 16);
tally_words!(tally_u16, u16, 2, u16, 65535);
tally_words!(tally_u8, u8, 1, u8, 255);

/// Tallies a contiguous run of elements of `dtype` whose first element has index `base`.
///
/// A complex element is two parts, each counted: a pair with NaN in both counts twice; the
/// first position is the element's.
pub fn tally_elements(dtype: DType, bytes: &[u8], base: u64, tally: &mut Tally) {
    if let Some(part) = dtype.complex_part() {
        let had_first = tally.first_index.is_some();
        tally_elements(part, bytes, base * 2, tally);
        if !had_first {
            tally.first_index = tally.first_index.map(|i| i / 2);
        }
        return;
    }
    let Some(f) = float_bits(dtype) else { return };
    match f.size {
        8 => tally_u64(bytes, &f, base, tally),
        4 => tally_u32(bytes, &f, base, tally),
        2 => tally_u16(bytes, &f, base, tally),
        _ => tally_u8(bytes, &f, base, tally),
    }
}

/// Reads device memory into host memory. Errors carry the CUDA error code.
pub trait DeviceReader {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32>;
    /// Whether a read answers a placeholder: the copy is queued and its bytes are judged once
    /// they land (a deferred verdict), so a scan makes the reads and tallies nothing.
    fn answers_placeholders(&self) -> bool {
        false
    }
    /// The `len` bytes at `addr` where they already lie in host memory (a deferred verdict's
    /// copy, landed in the staging region), scanned in place instead of copied; `None`: read.
    fn landed(&self, _addr: u64, _len: usize) -> Option<&[u8]> {
        None
    }
}

/// The outcome of scanning one stored matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatrixScan {
    pub nan: u64,
    pub inf: u64,
    /// (row, col) of the first non-finite element in column-major order, as stored.
    pub first_nonfinite: Option<(u64, u64)>,
    /// Elements read; fewer than rows x cols when the scan sampled.
    pub scanned_elements: u64,
    /// The matrix was larger than the byte budget, so only evenly spaced columns were read.
    pub sampled: bool,
    /// Scanned by the kernel on the device (else copied to the host and scanned there).
    pub on_device: bool,
}

/// Host buffer size for one chunk of a scan.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Scans the `rows x cols` matrix stored column-major at `addr` with leading dimension `ld`,
/// skipping the padding rows between columns. Reads go through `buf` in chunks, so the host
/// memory used is bounded whatever the operand's size. Above `max_bytes` of elements, only
/// evenly spaced columns (and at most `max_bytes` of each) are read.
pub fn scan_matrix(reader: &dyn DeviceReader, addr: u64, shape: StoredShape, dtype: DType, buf: &mut Vec<u8>, max_bytes: u64) -> Result<MatrixScan, i32> {
    let (Some(elem), true) = (dtype.size(), dtype.is_float()) else { return Ok(MatrixScan::default()) };
    if shape.rows <= 0 || shape.cols <= 0 || shape.ld < shape.rows {
        return Ok(MatrixScan::default());
    }
    let (rows, cols, ld) = (shape.rows as u64, shape.cols as u64, shape.ld as u64);
    // A chunk, or the whole extent when smaller (a fresh buffer for a small matrix stays small).
    let held = usize::try_from(ld.saturating_mul(cols - 1).saturating_add(rows).saturating_mul(elem)).unwrap_or(usize::MAX).min(CHUNK_BYTES);
    if buf.len() < held {
        buf.resize(held, 0);
    }
    let per_chunk = (CHUNK_BYTES as u64 / elem).max(1);
    let counting = !reader.answers_placeholders();
    let mut tally = Tally::default();
    let elements = rows.saturating_mul(cols);
    let sampled = elements.saturating_mul(elem) > max_bytes;
    // The runs to read, as (first element index, element count), each inside one column or,
    // unsampled, spanning the whole extent (padding rows are skipped below).
    let mut scanned = 0u64;
    let mut read_run = |start: u64, count: u64, tally: &mut Tally| -> Result<(), i32> {
        let end = start + count;
        let mut at = start;
        while at < end {
            let stop = (at + per_chunk).min(end);
            let len = ((stop - at) * elem) as usize;
            let bytes: &[u8] = match reader.landed(addr + at * elem, len) {
                Some(landed) if landed.len() == len => landed,
                _ => {
                    let into = &mut buf[..len];
                    reader.read(addr + at * elem, into)?;
                    into
                }
            };
            // The column segments [col * ld, col * ld + rows) that meet [at, stop).
            let mut col = at / ld;
            while col * ld < stop && col < cols {
                let seg_start = (col * ld).max(at);
                let seg_end = (col * ld + rows).min(stop);
                if seg_start < seg_end {
                    let lo = ((seg_start - at) * elem) as usize;
                    let hi = ((seg_end - at) * elem) as usize;
                    if counting {
                        tally_elements(dtype, &bytes[lo..hi], seg_start, tally);
                    }
                    scanned += seg_end - seg_start;
                }
                col += 1;
            }
            at = stop;
        }
        Ok(())
    };
    if !sampled {
        read_run(0, ld * (cols - 1) + rows, &mut tally)?;
    } else {
        let budget = (max_bytes / elem).max(1);
        let rows_per_column = rows.min(budget);
        let columns = (budget / rows_per_column).clamp(1, cols);
        let step = cols.div_ceil(columns);
        let mut col = 0;
        while col < cols {
            read_run(col * ld, rows_per_column, &mut tally)?;
            col += step;
        }
    }
    Ok(MatrixScan {
        nan: tally.nan,
        inf: tally.inf,
        first_nonfinite: tally.first_index.map(|i| (i % ld, i / ld)),
        scanned_elements: scanned,
        sampled,
        on_device: false,
    })
}

/// Bytes in host memory, addressed from 0: the host scan of a buffer the guard made itself
/// (the device self-test's answers) and the tests.
pub struct Slice<'a>(pub &'a [u8]);

impl DeviceReader for Slice<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32> {
        let a = usize::try_from(addr).map_err(|_| 1)?;
        let src = self.0.get(a..a.checked_add(out.len()).ok_or(1)?).ok_or(1)?;
        out.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Answers every read with NaN, and may say its answers are placeholders.
    struct AllNan {
        placeholders: bool,
        reads: std::cell::Cell<u64>,
    }

    impl DeviceReader for AllNan {
        fn read(&self, _addr: u64, out: &mut [u8]) -> Result<(), i32> {
            self.reads.set(self.reads.get() + out.len() as u64);
            out.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&f32::NAN.to_le_bytes()));
            Ok(())
        }
        fn answers_placeholders(&self) -> bool {
            self.placeholders
        }
    }

    #[test]
    fn a_scan_of_placeholders_makes_every_read_and_tallies_nothing() {
        let shape = StoredShape { rows: 3, cols: 4, ld: 5 };
        let mut buf = Vec::new();
        let real = AllNan { placeholders: false, reads: Default::default() };
        let counted = scan_matrix(&real, 0, shape, DType::F32, &mut buf, u64::MAX).unwrap();
        assert_eq!((counted.nan, counted.scanned_elements), (12, 12));
        let queued = AllNan { placeholders: true, reads: Default::default() };
        let placeheld = scan_matrix(&queued, 0, shape, DType::F32, &mut buf, u64::MAX).unwrap();
        assert_eq!(placeheld, MatrixScan { nan: 0, inf: 0, first_nonfinite: None, ..counted }, "the same reads and extent, no counts");
        assert_eq!(queued.reads.get(), real.reads.get());
    }

    /// Bytes already in host memory, which a scan must read in place: `read` fails.
    struct InPlace(Vec<u8>);

    impl DeviceReader for InPlace {
        fn read(&self, _addr: u64, _out: &mut [u8]) -> Result<(), i32> {
            Err(99)
        }
        fn landed(&self, addr: u64, len: usize) -> Option<&[u8]> {
            self.0.get(addr as usize..addr as usize + len)
        }
    }

    #[test]
    fn a_scan_of_bytes_that_landed_in_host_memory_reads_them_in_place_without_a_copy() {
        let values = [1.0, 2.0, f32::NAN, 4.0, f32::INFINITY, 6.0];
        let shape = StoredShape { rows: 2, cols: 3, ld: 2 };
        let mut buf = Vec::new();
        let s = scan_matrix(&InPlace(f32_bytes(&values)), 0, shape, DType::F32, &mut buf, u64::MAX).unwrap();
        assert_eq!((s.nan, s.inf, s.first_nonfinite, s.scanned_elements), (1, 1, Some((0, 1)), 6));
        assert!(buf.len() <= 24, "a small matrix's buffer stays small: {}", buf.len());
    }

    #[test]
    fn counts_nan_and_inf_per_format() {
        let cases: &[(DType, Vec<u8>, u64, u64)] = &[
            (DType::F32, f32_bytes(&[1.0, f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0]), 1, 2),
            (DType::F64, [1.0f64, f64::NAN, f64::NEG_INFINITY].iter().flat_map(|v| v.to_le_bytes()).collect(), 1, 1),
            // f16: 0x3c00 = 1.0, 0x7e00 = NaN, 0xfc00 = -Inf, 0x7bff = max finite
            (DType::F16, [0x3c00u16, 0x7e00, 0xfc00, 0x7bff].iter().flat_map(|v| v.to_le_bytes()).collect(), 1, 1),
            // bf16: 0x7fc0 = NaN, 0x7f80 = Inf, 0x7f7f = max finite
            (DType::BF16, [0x7fc0u16, 0x7f80, 0x7f7f].iter().flat_map(|v| v.to_le_bytes()).collect(), 1, 1),
            // e4m3: 0x7f / 0xff NaN; 0x78 and 0x7e are finite (448 is 0x7e); no Inf
            (DType::F8E4M3, vec![0x7f, 0xff, 0x78, 0x7e, 0x00], 2, 0),
            // e5m2: 0x7c Inf, 0x7d NaN, 0xfc -Inf, 0x7b finite
            (DType::F8E5M2, vec![0x7c, 0x7d, 0xfc, 0x7b], 1, 2),
            (DType::I32, vec![0xff; 8], 0, 0),
        ];
        for (dtype, bytes, nan, inf) in cases {
            let mut t = Tally::default();
            tally_elements(*dtype, bytes, 0, &mut t);
            assert_eq!((t.nan, t.inf), (*nan, *inf), "{dtype:?}");
        }
    }

    #[test]
    fn a_complex_element_is_two_parts_and_its_position_is_the_elements() {
        // c32 elements: (1, 2), (3, NaN), (Inf, 0): two bad parts, the first in element 1.
        let bytes = f32_bytes(&[1.0, 2.0, 3.0, f32::NAN, f32::INFINITY, 0.0]);
        let mut t = Tally::default();
        tally_elements(DType::C32, &bytes, 10, &mut t);
        assert_eq!((t.nan, t.inf, t.first_index), (1, 1, Some(11)));
        let scan = scan_matrix(&Slice(&bytes), 0, StoredShape { rows: 3, cols: 1, ld: 3 }, DType::C32, &mut Vec::new(), u64::MAX).unwrap();
        assert_eq!((scan.nan, scan.inf, scan.first_nonfinite), (1, 1, Some((1, 0))));
    }

    #[test]
    fn a_short_run_is_tallied_as_the_same_elements_in_a_long_one() {
        // Every format, NaN, Inf and finite words mixed: a run at or under the short path's
        // length counts and places them as the blocked loop does for those elements.
        let words: [u64; 8] = [0x3ff0_0000_0000_0000, 0x7ff8_0000_0000_0001, 0x7ff0_0000_0000_0000, 0x7f80_0000, 0x7fc0_0001, 0x7c00, 0x7e00, 0xff];
        let pattern: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2, DType::C32, DType::C64] {
            for len in [0, 8, 16, 48, 64] {
                let short = &pattern[..len];
                // The same elements after a long finite run, so the blocked loop tallies them.
                let mut long = vec![0u8; 4096];
                long.extend_from_slice(short);
                let (mut a, mut b) = (Tally::default(), Tally::default());
                tally_elements(dtype, short, 0, &mut a);
                tally_elements(dtype, &long, 0, &mut b);
                let elem = dtype.size().unwrap();
                let shift = 4096 / elem;
                assert_eq!((a.nan, a.inf, a.first_index.map(|i| i + shift)), (b.nan, b.inf, b.first_index), "{dtype:?}, {len} bytes");
            }
        }
    }

    #[test]
    fn counts_stay_exact_across_the_narrow_counters_blocks() {
        // u8 counters cover 255 elements, u16 counters 65535: cross both boundaries.
        for (dtype, bytes) in [(DType::F8E5M2, vec![0x7eu8; 1000]), (DType::F16, [0x7e00u16].repeat(70_000).iter().flat_map(|v| v.to_le_bytes()).collect())] {
            let n = (bytes.len() / dtype.size().unwrap() as usize) as u64;
            let mut t = Tally::default();
            tally_elements(dtype, &bytes, 0, &mut t);
            assert_eq!((t.nan, t.inf, t.first_index), (n, 0, Some(0)), "{dtype:?}");
        }
    }

    #[test]
    fn finds_first_nonfinite_by_row_and_col_and_skips_padding() {
        // 3 x 2 stored with ld = 4: the padding row (index 3, 7) holds NaN and must not count.
        let mut m = vec![0.0f32; 8];
        m[3] = f32::NAN;
        m[7] = f32::NAN;
        m[5] = f32::INFINITY; // row 1, col 1
        let data = f32_bytes(&m);
        let reader = Slice(&data);
        let shape = StoredShape { rows: 3, cols: 2, ld: 4 };
        let mut buf = Vec::new();
        let s = scan_matrix(&reader, 0, shape, DType::F32, &mut buf, u64::MAX).unwrap();
        assert_eq!((s.nan, s.inf, s.first_nonfinite), (0, 1, Some((1, 1))));
        assert_eq!((s.scanned_elements, s.sampled), (6, false));
    }

    #[test]
    fn samples_evenly_spaced_columns_above_the_budget() {
        // 4 x 100 matrix, budget of 40 elements: 10 columns, every 10th, scanned.
        let mut m = vec![0.0f32; 400];
        m[4 * 50 + 1] = f32::NAN; // column 50: sampled
        m[4 * 51 + 1] = f32::NAN; // column 51: not sampled
        let data = f32_bytes(&m);
        let reader = Slice(&data);
        let shape = StoredShape { rows: 4, cols: 100, ld: 4 };
        let s = scan_matrix(&reader, 0, shape, DType::F32, &mut Vec::new(), 160).unwrap();
        assert!(s.sampled);
        assert_eq!(s.scanned_elements, 40);
        assert_eq!((s.nan, s.first_nonfinite), (1, Some((1, 50))));
        // One tall column larger than the budget: only its first rows are read.
        let tall = StoredShape { rows: 400, cols: 1, ld: 400 };
        let s = scan_matrix(&reader, 0, tall, DType::F32, &mut Vec::new(), 64).unwrap();
        assert_eq!((s.scanned_elements, s.sampled), (16, true));
    }

    #[test]
    fn scans_across_chunk_boundaries() {
        let n = CHUNK_BYTES / 4 * 2 + 10;
        let mut m = vec![1.0f32; n];
        m[n - 1] = f32::NAN;
        m[CHUNK_BYTES / 4] = f32::NAN;
        let data = f32_bytes(&m);
        let reader = Slice(&data);
        let shape = StoredShape { rows: n as i64, cols: 1, ld: n as i64 };
        let s = scan_matrix(&reader, 0, shape, DType::F32, &mut Vec::new(), u64::MAX).unwrap();
        assert_eq!(s.nan, 2);
        assert_eq!(s.first_nonfinite, Some(((CHUNK_BYTES / 4) as u64, 0)));
    }

    #[test]
    fn read_errors_surface() {
        let reader = Slice(&[0; 4]);
        let shape = StoredShape { rows: 4, cols: 4, ld: 4 };
        assert_eq!(scan_matrix(&reader, 0, shape, DType::F32, &mut Vec::new(), u64::MAX), Err(1));
    }

    #[test]
    fn decodes_cuda_data_types() {
        assert_eq!(DType::from_cuda(14), DType::BF16);
        assert_eq!(DType::from_cuda(28).name(), "f8e4m3");
        assert_eq!(DType::from_cuda(77), DType::Unknown(77));
        assert_eq!(DType::Unknown(77).size(), None);
    }
}
