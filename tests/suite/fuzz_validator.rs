//! Property tests (a bounded fuzz run) of the pure checks that take a caller's raw numbers:
//! the GEMM argument rules, extents, containment and the scan (and the scan kernel's host
//! build, against the host scan). Nothing may panic or overflow,
//! and what they accept must satisfy NVIDIA's rules. CI raises the case count with
//! CUBLASGUARD_FUZZ_CASES.

use cublasguard_format::cuda::{Diag, Fill, Operation, Side};
use cublasguard_format::scan::{self, DType, DeviceReader};
use cublasguard_format::validate::blas::{self, Factorisation, GbmvArgs, GemvArgs, TrsmArgs};
use cublasguard_format::validate::{self, Containment, GemmArgs, Span, StoredShape};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("CUBLASGUARD_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![-3i64..70, Just(i64::MAX), Just(i64::MIN), Just(i32::MAX as i64), any::<i64>()]
}

prop_compose! {
    fn gemm_args()(transa in -2i32..5, transb in -2i32..5, m in dim(), n in dim(), k in dim(),
                   lda in dim(), ldb in dim(), ldc in dim(), alpha_null in any::<bool>(), beta_null in any::<bool>(),
                   batch_count in dim())
                   -> GemmArgs {
        GemmArgs { transa: Operation::decode(transa), transb: Operation::decode(transb), m, n, k, lda, ldb, ldc,
                   alpha_is_null: alpha_null, beta_is_null: beta_null, batch_count }
    }
}

struct Bytes(Vec<u8>);
impl DeviceReader for Bytes {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32> {
        let start = usize::try_from(addr).map_err(|_| 1)?;
        let end = start.checked_add(out.len()).ok_or(1)?;
        out.copy_from_slice(self.0.get(start..end).ok_or(1)?);
        Ok(())
    }
}

use crate::common;

/// The scan kernel's host build (crates/preload/src/kernels), run as the stand-in driver runs it.
fn kernel_on_host(data: &[u8], shape: StoredShape, kind: u32, grid: u32, block: u32) -> [u64; 3] {
    use std::sync::OnceLock;
    type Run = unsafe extern "C" fn(*mut *mut std::ffi::c_void, u32, u32) -> i32;
    static DRIVER: OnceLock<libloading::Library> = OnceLock::new();
    // SAFETY: the stand-in driver, loaded once for its exported launcher.
    let lib = DRIVER.get_or_init(|| unsafe { libloading::Library::new(common::standin().join("driver/libcuda.so.1")) }.expect("the stand-in driver"));
    // SAFETY: the launcher's C signature (crates/preload/src/kernels/host_launch.cpp).
    let launch = unsafe { lib.get::<Run>(b"cudashim_run_nonfinite\0") }.expect("the kernel launcher");
    let mut result = [0u64, 0, u64::MAX];
    let (mut d, mut r, mut c, mut l, mut k, mut o) =
        (data.as_ptr() as u64, shape.rows as u64, shape.cols as u64, shape.ld as u64, kind, result.as_mut_ptr() as u64);
    let mut params: [*mut std::ffi::c_void; 6] =
        [&mut d as *mut u64 as _, &mut r as *mut u64 as _, &mut c as *mut u64 as _, &mut l as *mut u64 as _, &mut k as *mut u32 as _, &mut o as *mut u64 as _];
    // SAFETY: six live parameters as the kernel declares them; the caller's `data` holds the
    // whole matrix; `result` is three u64.
    assert_eq!(unsafe { launch(params.as_mut_ptr(), grid, block) }, 0);
    result
}

/// `struct scan_job` / `struct scan_jobs` of crates/preload/src/kernels/nonfinite.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ScanJob {
    data: u64,
    rows: u64,
    cols: u64,
    ld: u64,
    members: u64,
    stride: i64,
    kind: u32,
    array: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ScanJobs {
    job: [ScanJob; 6],
    count: u32,
    unused: u32,
}

/// The batched kernel's host build over `jobs`: per job NaN count, Inf count, ~(member << 40 | index).
fn many_kernel_on_host(jobs: &[ScanJob], grid: u32, block: u32) -> Vec<[u64; 3]> {
    type Run = unsafe extern "C" fn(*mut *mut std::ffi::c_void, u32, u32, u32) -> i32;
    // SAFETY: the stand-in driver, loaded for its exported launcher.
    let lib = unsafe { libloading::Library::new(common::standin().join("driver/libcuda.so.1")) }.expect("the stand-in driver");
    // SAFETY: the launcher's C signature (crates/preload/src/kernels/host_launch.cpp).
    let launch = unsafe { lib.get::<Run>(b"cudashim_run_nonfinite_many\0") }.expect("the batched kernel launcher");
    let mut packed = ScanJobs { count: jobs.len() as u32, ..Default::default() };
    packed.job[..jobs.len()].copy_from_slice(jobs);
    let mut result = vec![[0u64; 3]; jobs.len()];
    let mut out = result.as_mut_ptr() as u64;
    let mut params: [*mut std::ffi::c_void; 2] = [&mut packed as *mut ScanJobs as _, &mut out as *mut u64 as _];
    // SAFETY: the two live parameters the kernel declares; every job's members lie in memory
    // the caller holds; `result` is three u64 per job.
    assert_eq!(unsafe { launch(params.as_mut_ptr(), grid, jobs.len() as u32, block) }, 0);
    result
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn accepted_gemm_arguments_follow_nvidias_rules(args in gemm_args()) {
        let problem = validate::check_gemm_args(&args);
        if problem.is_none() {
            prop_assert!(args.m >= 0 && args.n >= 0 && args.k >= 0 && args.batch_count >= 0);
            prop_assert!(!matches!(args.transa, Operation::Unknown(_)) && !matches!(args.transb, Operation::Unknown(_)));
            let a = validate::shape_of_a(&args);
            let b = validate::shape_of_b(&args);
            prop_assert!(args.lda >= a.rows.max(1) && args.ldb >= b.rows.max(1) && args.ldc >= args.m.max(1));
            prop_assert!(!args.alpha_is_null && !args.beta_is_null);
        } else {
            prop_assert!(!problem.unwrap().message().is_empty());
        }
    }

    #[test]
    fn extents_never_overflow(rows in dim(), cols in dim(), ld in dim(), elem in prop_oneof![Just(1u64), Just(2), Just(4), Just(8)],
                              ptr in any::<u64>(), base in any::<u64>(), size in any::<u64>()) {
        let shape = StoredShape { rows, cols, ld };
        if let Some(extent) = validate::operand_extent(shape, elem) {
            prop_assert!(rows >= 0 && cols >= 0 && ld >= 0);
            if rows > 0 && cols > 0 {
                prop_assert!(extent >= rows as u64 * elem);
            }
            match validate::containment(ptr, extent, Span { base, size }) {
                Containment::Inside => prop_assert!(ptr < base || extent <= size - (ptr - base).min(size)),
                Containment::Overruns(n) => prop_assert!(n > 0 && n <= extent),
            }
        }
    }

    #[test]
    fn scans_never_panic_and_count_within_the_matrix(bytes in proptest::collection::vec(any::<u8>(), 0..512),
                                                     rows in -2i64..20, cols in -2i64..20, ld in -2i64..24,
                                                     dtype in prop_oneof![Just(0i32), Just(1), Just(2), Just(14), Just(28), Just(29), Just(3), Just(77), Just(4), Just(5)],
                                                     budget in 1u64..4096) {
        let dtype = DType::from_cuda(dtype);
        let shape = StoredShape { rows, cols, ld };
        let mut buf = Vec::new();
        if let Ok(s) = scan::scan_matrix(&Bytes(bytes), 0, shape, dtype, &mut buf, budget) {
            let elements = (rows.max(0) * cols.max(0)) as u64;
            // A complex element is two parts, each counted.
            let parts = if dtype.complex_part().is_some() { 2 } else { 1 };
            prop_assert!(s.nan + s.inf <= parts * s.scanned_elements && s.scanned_elements <= elements);
            if let Some((r, c)) = s.first_nonfinite {
                prop_assert!((r as i64) < rows && (c as i64) < cols);
            }
        }
    }

    #[test]
    fn accepted_gemv_and_trsm_arguments_follow_nvidias_rules(trans in -2i32..5, side in -2i32..4, uplo in -2i32..4, diag in -2i32..4,
                                                            m in dim(), n in dim(), lda in dim(), ldb in dim(), incx in dim(), incy in dim(),
                                                            batch in dim()) {
        let g = GemvArgs { trans: Operation::decode(trans), m, n, lda, incx, incy, alpha_is_null: false, beta_is_null: false };
        if g.check().is_none() {
            prop_assert!(m >= 0 && n >= 0 && lda >= m.max(1) && incx != 0 && incy != 0);
            for shape in [g.a(), g.x(), g.y()] {
                if let (Some(bytes), true) = (validate::operand_extent(shape, 16), shape.rows > 0 && shape.cols > 0) {
                    prop_assert!(bytes >= 16);
                }
            }
        }
        let t = TrsmArgs { side: Side::decode(side), uplo: Fill::decode(uplo), trans: Operation::decode(trans), diag: Diag::decode(diag),
                           m, n, lda, ldb, alpha_is_null: false, batch_count: batch };
        if t.check().is_none() {
            prop_assert!(matches!(t.side, Side::Left | Side::Right) && matches!(t.uplo, Fill::Lower | Fill::Upper));
            prop_assert!(matches!(t.diag, Diag::NonUnit | Diag::Unit) && batch >= 0);
            prop_assert!(lda >= t.a().rows.max(1) && ldb >= m.max(1));
        }
    }

    #[test]
    fn accepted_gbmv_arguments_follow_nvidias_rules_and_the_band_fits_its_storage(trans in -2i32..5, m in dim(), n in dim(), kl in dim(),
                                                                                 ku in dim(), lda in dim(), incx in dim(), incy in dim()) {
        let g = GbmvArgs { trans: Operation::decode(trans), m, n, kl, ku, lda, incx, incy, alpha_is_null: false, beta_is_null: false };
        if g.check().is_none() {
            prop_assert!(m >= 0 && n >= 0 && kl >= 0 && ku >= 0 && incx != 0 && incy != 0);
            prop_assert!(lda >= kl.saturating_add(ku).saturating_add(1));
            let a = g.a();
            prop_assert!(a.rows <= a.ld && a.cols == n, "the stored diagonals fit the leading dimension: {:?}", a);
            let (xn, yn) = if matches!(g.trans, Operation::N) { (n, m) } else { (m, n) };
            prop_assert_eq!((g.x_len(), g.y_len()), (xn, yn));
        }
    }

    #[test]
    fn accepted_factorisations_have_sane_shapes(trans in -2i32..5, m in dim(), n in dim(), nrhs in dim(), lda in dim(), ldb in dim(),
                                                batch in dim(), which in 0u8..4) {
        let op = Operation::decode(trans);
        let f = match which {
            0 => Factorisation::Getrf { n, lda, batch },
            1 => Factorisation::Getrs { trans: op, n, nrhs, lda, ldb, batch },
            2 => Factorisation::Geqrf { m, n, lda, batch },
            _ => Factorisation::Gels { trans: op, m, n, nrhs, lda, ldc: ldb, batch },
        };
        if f.check().is_none() {
            prop_assert!(f.batch() >= 0);
            let a = f.a();
            prop_assert!(a.rows >= 0 && a.cols >= 0 && a.ld >= a.rows.max(1));
            if let Some(r) = f.rhs() {
                prop_assert!(r.ld >= r.rows.max(1) && r.cols >= 0);
            }
            for shape in [f.pivots(), f.tau(), Some(blas::info_array(f.batch()))].into_iter().flatten() {
                prop_assert!(shape.rows >= 0 && shape.ld >= shape.rows);
            }
        }
    }

    #[test]
    fn strided_vectors_span_one_plus_n_minus_one_increments(n in any::<i32>(), inc in any::<i32>()) {
        // The C API's n and increments are `int`.
        let (n, inc) = (i64::from(n), i64::from(inc));
        let shape = blas::vector_shape(n, inc);
        if let Some(bytes) = validate::operand_extent(shape, 1) {
            let want = if n <= 0 { 0 } else if inc == 0 { 1 } else { (n as u128 - 1) * inc.unsigned_abs() as u128 + 1 };
            prop_assert_eq!(bytes as u128, want);
        }
    }

}

proptest! {
    // Each case runs the kernel once per thread of its grid: a tenth of the other properties'
    // cases keeps CI's long run to seconds.
    #![proptest_config(ProptestConfig { cases: cases() / 10, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_scan_kernels_host_build_agrees_with_the_host_scan(seed in proptest::collection::vec(any::<u8>(), 1..2048),
                                                             rows in prop_oneof![1i64..24, 1i64..700], cols in 1i64..24, pad in 0i64..5,
                                                             offset in 0usize..17,
                                                             kind in prop_oneof![Just(0u32), Just(1), Just(2), Just(14), Just(28), Just(29)],
                                                             grid in 1u32..6, block in prop_oneof![Just(1u32), Just(7), Just(32), Just(256)]) {
        let dtype = DType::from_cuda(kind as i32);
        let shape = StoredShape { rows, cols, ld: rows + pad };
        let needed = ((shape.ld * (cols - 1) + rows) as u64 * dtype.size().unwrap()) as usize;
        // Random bytes hold NaN/Inf patterns of every format now and then; the seed is repeated
        // to cover the matrix. `offset` moves the matrix off a 16-byte boundary (by whole
        // elements or not), so the kernel's unaligned heads and tails are read too.
        let bytes: Vec<u8> = seed.iter().cycle().take(needed + offset).copied().collect();
        let matrix = &bytes[offset..];
        let host = scan::scan_matrix(&Bytes(matrix.to_vec()), 0, shape, dtype, &mut Vec::new(), u64::MAX).unwrap();
        let [nan, inf, first] = kernel_on_host(matrix, shape, kind, grid, block);
        let first = (first != u64::MAX).then(|| (first % shape.ld as u64, first / shape.ld as u64));
        prop_assert_eq!((nan, inf, first), (host.nan, host.inf, host.first_nonfinite));
    }

    #[test]
    fn the_batched_scan_kernels_host_build_agrees_with_the_host_scan_member_by_member(
        seed in proptest::collection::vec(any::<u8>(), 1..2048),
        rows in prop_oneof![1i64..20, 1i64..400], cols in 1i64..12, pad in 0i64..3, members in 1u64..5, gap in 0i64..9,
        offset in 0usize..17, kinds in proptest::collection::vec(prop_oneof![Just(0u32), Just(1), Just(2), Just(14), Just(28), Just(29)], 1..4),
        arrays in any::<bool>(), grid in 1u32..5, block in prop_oneof![Just(1u32), Just(32), Just(256)]) {
        // Each job: `members` matrices `stride` elements apart (a strided batch), or the same
        // matrices reached through an array of their addresses.
        let mut buffers = Vec::new();
        let mut jobs = Vec::new();
        for (j, &kind) in kinds.iter().enumerate() {
            let dtype = DType::from_cuda(kind as i32);
            let elem = dtype.size().unwrap() as usize;
            let shape = StoredShape { rows, cols, ld: rows + pad };
            let extent = (shape.ld * (cols - 1) + rows) as usize;
            let stride = extent as i64 + gap;
            let needed = (stride as usize * (members as usize - 1) + extent) * elem;
            let bytes: Vec<u8> = seed.iter().cycle().skip(j * 7).take(needed + offset).copied().collect();
            let base = bytes.as_ptr() as u64 + offset as u64;
            let addresses: Vec<u64> = (0..members).map(|m| base + m * stride as u64 * elem as u64).collect();
            let mut expected = [0u64, 0, 0];
            for (m, &addr) in addresses.iter().enumerate() {
                let at = (addr - bytes.as_ptr() as u64) as usize;
                let s = scan::scan_matrix(&Bytes(bytes[at..].to_vec()), 0, shape, dtype, &mut Vec::new(), u64::MAX).unwrap();
                expected[0] += s.nan;
                expected[1] += s.inf;
                if let (0, Some((r, c))) = (expected[2], s.first_nonfinite) {
                    expected[2] = !((m as u64) << 40 | (c * shape.ld as u64 + r));
                }
            }
            let job = if arrays {
                ScanJob { data: addresses.as_ptr() as u64, rows: rows as u64, cols: cols as u64, ld: shape.ld as u64, members, stride: 0, kind, array: 1 }
            } else {
                ScanJob { data: base, rows: rows as u64, cols: cols as u64, ld: shape.ld as u64, members, stride, kind, array: 0 }
            };
            jobs.push((job, expected));
            buffers.push((bytes, addresses));
        }
        let answers = many_kernel_on_host(&jobs.iter().map(|(j, _)| *j).collect::<Vec<_>>(), grid, block);
        for ((_, expected), answer) in jobs.iter().zip(&answers) {
            prop_assert_eq!(answer, expected);
        }
        drop(buffers);
    }
}
