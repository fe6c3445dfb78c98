//! Property tests (a bounded fuzz run) of the pure checks that take a caller's raw numbers:
//! the GEMM argument rules, extents, containment and the scan. Nothing may panic or overflow,
//! and what they accept must satisfy NVIDIA's rules. CI raises the case count with
//! CUBLASGUARD_FUZZ_CASES.

use cublasguard::cuda::Operation;
use cublasguard::scan::{self, DType, DeviceReader};
use cublasguard::validate::{self, Containment, GemmArgs, Span, StoredShape};
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
                                                     dtype in prop_oneof![Just(0i32), Just(1), Just(2), Just(14), Just(28), Just(29), Just(3), Just(77)],
                                                     budget in 1u64..4096) {
        let dtype = DType::from_cuda(dtype);
        let shape = StoredShape { rows, cols, ld };
        let mut buf = Vec::new();
        if let Ok(s) = scan::scan_matrix(&Bytes(bytes), 0, shape, dtype, &mut buf, budget) {
            let elements = (rows.max(0) * cols.max(0)) as u64;
            prop_assert!(s.nan + s.inf <= s.scanned_elements && s.scanned_elements <= elements);
            if let Some((r, c)) = s.first_nonfinite {
                prop_assert!((r as i64) < rows && (c as i64) < cols);
            }
        }
    }
}
