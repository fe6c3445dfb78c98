//! The on-device scan's self-test: before its first verdict in a CUDA context, the scan kernel
//! is run on one small matrix per dtype with NaN and Inf planted at known places (and a NaN in
//! the padding between columns, which it must skip), and its answers are compared with the
//! host scan's. This module makes the matrices and judges the answers; ffi/cuda_client/device_scan.rs runs
//! them on the device.

use crate::scan::{scan_matrix, DType, MatrixScan, Slice};
use crate::validate::StoredShape;

/// One planted matrix: its bytes as stored and what the host scan finds in them.
pub struct Planted {
    pub dtype: DType,
    pub shape: StoredShape,
    pub bytes: Vec<u8>,
    pub expected: MatrixScan,
}

/// A NaN and (where the format has one) an Inf of `dtype`, as bytes.
fn specials(dtype: DType) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    Some(match dtype {
        DType::F32 => (f32::NAN.to_le_bytes().to_vec(), Some(f32::NEG_INFINITY.to_le_bytes().to_vec())),
        DType::F64 => (f64::NAN.to_le_bytes().to_vec(), Some(f64::INFINITY.to_le_bytes().to_vec())),
        DType::F16 => (0x7e01u16.to_le_bytes().to_vec(), Some(0xfc00u16.to_le_bytes().to_vec())),
        DType::BF16 => (0xffc1u16.to_le_bytes().to_vec(), Some(0x7f80u16.to_le_bytes().to_vec())),
        DType::F8E4M3 => (vec![0x7f], None),
        DType::F8E5M2 => (vec![0xfe], Some(vec![0x7c])),
        _ => return None,
    })
}

/// The dtypes the kernel scans.
pub const DTYPES: [DType; 6] = [DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2];

/// A 7 x 5 matrix with leading dimension 9 per dtype: NaN at (3, 2) and (5, 3), an Inf at
/// (1, 4) (a third NaN for E4M3, which has no Inf), and a NaN at (8, 0), in the padding. The
/// counts differ, so an answer that mixes NaN and Inf up cannot pass.
pub fn planted() -> Vec<Planted> {
    let shape = StoredShape { rows: 7, cols: 5, ld: 9 };
    DTYPES
        .iter()
        .filter_map(|&dtype| {
            let (nan, inf) = specials(dtype)?;
            let elem = dtype.size()? as usize;
            // 0x11 in every byte is a small finite value in every format.
            let mut bytes = vec![0x11u8; (shape.ld * shape.cols) as usize * elem];
            let mut put = |row: i64, col: i64, value: &[u8]| {
                let at = (col * shape.ld + row) as usize * elem;
                bytes[at..at + elem].copy_from_slice(value);
            };
            put(3, 2, &nan);
            put(5, 3, &nan);
            put(1, 4, inf.as_deref().unwrap_or(&nan));
            put(8, 0, &nan);
            let expected = scan_matrix(&Slice(&bytes), 0, shape, dtype, &mut Vec::new(), u64::MAX).ok()?;
            Some(Planted { dtype, shape, bytes, expected })
        })
        .collect()
}

/// What differs between the device's answer and the host's, for the message; `None`: agreed.
pub fn judge(planted: &Planted, device: &MatrixScan) -> Option<String> {
    let e = &planted.expected;
    let same = (device.nan, device.inf, device.first_nonfinite) == (e.nan, e.inf, e.first_nonfinite);
    (!same).then(|| {
        format!(
            "{}: the kernel found {} NaN, {} Inf, first at {:?}; the host scan finds {} NaN, {} Inf, first at {:?}",
            planted.dtype.name(),
            device.nan,
            device.inf,
            device.first_nonfinite,
            e.nan,
            e.inf,
            e.first_nonfinite
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_gets_a_matrix_whose_planted_values_the_host_scan_finds_and_whose_padding_it_skips() {
        let cases = planted();
        assert_eq!(cases.len(), DTYPES.len());
        for p in &cases {
            let want_inf = if p.dtype == DType::F8E4M3 { 0 } else { 1 };
            let want_nan = 3 - want_inf;
            assert_eq!((p.expected.nan, p.expected.inf, p.expected.first_nonfinite), (want_nan, want_inf, Some((3, 2))), "{:?}", p.dtype);
        }
    }

    #[test]
    fn an_answer_that_swaps_nan_and_inf_is_named_with_what_differed() {
        let p = &planted()[1];
        let mut wrong = p.expected;
        assert!(judge(p, &wrong).is_none());
        (wrong.nan, wrong.inf) = (wrong.inf, wrong.nan + 1);
        let why = judge(p, &wrong).unwrap();
        assert!(why.starts_with("f32: the kernel found 1 NaN, 3 Inf"), "{why}");
    }
}
