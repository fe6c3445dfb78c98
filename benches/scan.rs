//! NaN/Inf scan bandwidth per dtype against memcpy, on buffers larger than the last-level
//! cache (and one that fits in it). Figures go to BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use cublasguard_format::scan::{tally_elements, DType, Tally};
use std::hint::black_box;
use std::time::Duration;

fn scan(c: &mut Criterion) {
    let mut group = c.benchmark_group("scan");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(20);
    for size in [1usize << 20, 64 << 20] {
        let src: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8 & 0x3f).collect(); // finite in every format
        let mut dst = vec![0u8; size];
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("memcpy", size), &size, |b, _| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(&dst);
            })
        });
        for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2] {
            group.bench_with_input(BenchmarkId::new(dtype.name(), size), &size, |b, _| {
                b.iter(|| {
                    let mut t = Tally::default();
                    tally_elements(dtype, black_box(&src), 0, &mut t);
                    black_box(t)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, scan);
criterion_main!(benches);
