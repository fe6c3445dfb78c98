//! The costs on the hot path that do not grow with the data: the argument validator, and the
//! allocation lookup from 10^3 to 10^6 live allocations (it must stay flat: O(log n)).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use cublasguard_format::cuda::Operation;
// The guard's allocation table, compiled into the bench from the guard's own source: the
// preload library is a cdylib only, which nothing links. Its one import (`crate::validate`)
// resolves to the format crate's, as in the guard.
#[allow(dead_code, unused_imports)]
#[path = "../crates/preload/src/state.rs"]
mod state;
use cublasguard_format::validate;
use state::{Allocation, Allocations};
use std::hint::black_box;
use std::time::Duration;
use validate::{GemmArgs, Span};

fn validator(c: &mut Criterion) {
    let args = GemmArgs {
        transa: Operation::T,
        transb: Operation::N,
        m: 1024,
        n: 256,
        k: 512,
        lda: 512,
        ldb: 512,
        ldc: 1024,
        alpha_is_null: false,
        beta_is_null: false,
        batch_count: 1,
    };
    let mut group = c.benchmark_group("validator");
    group.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    group.bench_function("check_gemm_args + 3 extents + containment", |b| {
        b.iter(|| {
            let a = black_box(&args);
            let ok = validate::check_gemm_args(a).is_none();
            let span = Span { base: 0x1000, size: 1 << 30 };
            let inside = [validate::shape_of_a(a), validate::shape_of_b(a), validate::shape_of_c(a)]
                .iter()
                .filter_map(|s| validate::operand_extent(*s, 4))
                .all(|e| validate::containment(0x1000, e, span) == validate::Containment::Inside);
            black_box((ok, inside))
        })
    });
    group.finish();
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocation lookup");
    group.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    for count in [1_000u64, 10_000, 100_000, 1_000_000] {
        let table = Allocations::default();
        for i in 0..count {
            table.insert(Allocation { base: 0x10_0000 + i * 4096, size: 2048, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        }
        // A GEMM's operands: the same few allocations, call after call.
        let operands: Vec<u64> = (0..6).map(|i| 0x10_0000 + (i * count / 6) * 4096 + 64).collect();
        let mut next = 0;
        group.bench_with_input(BenchmarkId::new("repeated operands", count), &count, |b, _| {
            b.iter(|| {
                next = (next + 1) % operands.len();
                black_box(table.containing(black_box(operands[next])))
            })
        });
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        group.bench_with_input(BenchmarkId::new("random pointers", count), &count, |b, &count| {
            b.iter(|| {
                // A pseudo-random live pointer in the middle of some allocation.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let ptr = 0x10_0000 + (x % count) * 4096 + 100;
                black_box(table.containing(black_box(ptr)))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, validator, lookup);
criterion_main!(benches);
