#![no_main]
//! Raw bytes → GEMM arguments → the validator and extent arithmetic: nothing may panic.

use cublasguard_format::cuda::Operation;
use cublasguard_format::validate::{self, GemmArgs, Span};
use libfuzzer_sys::fuzz_target;

fn word(data: &[u8], i: usize) -> i64 {
    let mut b = [0u8; 8];
    for (j, slot) in b.iter_mut().enumerate() {
        *slot = data.get(i * 8 + j).copied().unwrap_or(0);
    }
    i64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let args = GemmArgs {
        transa: Operation::decode(word(data, 0) as i32),
        transb: Operation::decode(word(data, 1) as i32),
        m: word(data, 2),
        n: word(data, 3),
        k: word(data, 4),
        lda: word(data, 5),
        ldb: word(data, 6),
        ldc: word(data, 7),
        alpha_is_null: word(data, 8) & 1 == 1,
        beta_is_null: word(data, 8) & 2 == 2,
        batch_count: word(data, 12),
    };
    let _ = validate::check_gemm_args(&args).map(|p| p.message());
    for shape in [validate::shape_of_a(&args), validate::shape_of_b(&args), validate::shape_of_c(&args)] {
        if let Some(extent) = validate::operand_extent(shape, 4) {
            let _ = validate::containment(word(data, 9) as u64, extent, Span { base: word(data, 10) as u64, size: word(data, 11) as u64 });
        }
    }
});
