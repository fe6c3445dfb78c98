//! The one list of hooked functions, a leaf every layer reads (compiler-rt's
//! `sanitizer_common_interceptors.inc`): each line a function's library, its C signature
//! (plain integers and raw pointers only), its handler and, for the calls frameworks make
//! most, its lean path. `with_hook_table!(m)` hands the whole list to the macro `m`: here it
//! makes `Hook` and the names, which the guard and the session number and count calls by;
//! the FFI edge (ffi/intercept/hooks) makes each export, its real-function slot and its
//! guarded copies from the same lines. The signatures' types and the handlers are named as the
//! FFI edge sees them (it is where they are expanded); here only the names are read.

/// Hands the hook table to `$callback!`, one entry per hooked function:
/// `Library fn name(arg: Type, ...) -> Ret => handler[, lean PATH | , lean_described PATH | , lean_always PATH | , declared];`
///
/// `declared`: the line's types say what each argument is (hook_args.rs: `In`, `Acc`, `InOut`,
/// `Out`, `ResultOut`, `Scalar`, a handle, an `int`), its names are the header's, and the
/// handler is given them as `hook_args::Args` and keeps only its rule.
macro_rules! with_hook_table {
    ( $callback:ident ) => {
        $callback! {
            Cublas fn cublasCreate_v2(handle: *mut Handle) -> c_int => handles::create;
            Cublas fn cublasDestroy_v2(handle: Handle) -> c_int => handles::destroy;
            Cublas fn cublasSetStream_v2(handle: Handle, stream: Stream) -> c_int => handles::set_stream;
            Cublas fn cublasSetPointerMode_v2(handle: Handle, mode: c_int) -> c_int => handles::set_pointer_mode;
            Cublas fn cublasSetMathMode(handle: Handle, mode: c_int) -> c_int => handles::set_math_mode;
            Cublas fn cublasSgemm_v2(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::sgemm, lean gemm::SGEMM;
            Cublas fn cublasSgemm_v2_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64) -> c_int => gemm::sgemm, lean gemm::SGEMM;
            Cublas fn cublasDgemm_v2(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::dgemm, lean gemm::DGEMM;
            Cublas fn cublasDgemm_v2_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64) -> c_int => gemm::dgemm, lean gemm::DGEMM;
            Cublas fn cublasHgemm(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::hgemm, lean gemm::HGEMM;
            Cublas fn cublasHgemm_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64) -> c_int => gemm::hgemm, lean gemm::HGEMM;
            Cublas fn cublasSgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::sgemm_strided, lean gemm::SGEMM_STRIDED;
            Cublas fn cublasSgemmStridedBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, sa: i64, b: P, ldb: i64, sb: i64, beta: P, c: P, ldc: i64, sc: i64, count: i64) -> c_int => gemm::sgemm_strided, lean gemm::SGEMM_STRIDED;
            Cublas fn cublasDgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::dgemm_strided, lean gemm::DGEMM_STRIDED;
            Cublas fn cublasDgemmStridedBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, sa: i64, b: P, ldb: i64, sb: i64, beta: P, c: P, ldc: i64, sc: i64, count: i64) -> c_int => gemm::dgemm_strided, lean gemm::DGEMM_STRIDED;
            Cublas fn cublasHgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::hgemm_strided, lean gemm::HGEMM_STRIDED;
            Cublas fn cublasHgemmStridedBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, sa: i64, b: P, ldb: i64, sb: i64, beta: P, c: P, ldc: i64, sc: i64, count: i64) -> c_int => gemm::hgemm_strided, lean gemm::HGEMM_STRIDED;
            Cublas fn cublasSgemmBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int, count: c_int) -> c_int => gemm::sgemm_batched;
            Cublas fn cublasSgemmBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64, count: i64) -> c_int => gemm::sgemm_batched;
            Cublas fn cublasGemmEx(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, at: c_int, lda: c_int, b: P, bt: c_int, ldb: c_int, beta: P, c: P, ct: c_int, ldc: c_int, compute: c_int, algo: c_int) -> c_int => gemm::gemm_ex, lean gemm::GEMM_EX;
            Cublas fn cublasGemmEx_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, at: c_int, lda: i64, b: P, bt: c_int, ldb: i64, beta: P, c: P, ct: c_int, ldc: i64, compute: c_int, algo: c_int) -> c_int => gemm::gemm_ex, lean gemm::GEMM_EX;
            Cublas fn cublasGemmStridedBatchedEx(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, at: c_int, lda: c_int, sa: i64, b: P, bt: c_int, ldb: c_int, sb: i64, beta: P, c: P, ct: c_int, ldc: c_int, sc: i64, count: c_int, compute: c_int, algo: c_int) -> c_int => gemm::gemm_strided_ex, lean gemm::STRIDED_GEMM_EX;
            Cublas fn cublasGemmStridedBatchedEx_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, at: c_int, lda: i64, sa: i64, b: P, bt: c_int, ldb: i64, sb: i64, beta: P, c: P, ct: c_int, ldc: i64, sc: i64, count: i64, compute: c_int, algo: c_int) -> c_int => gemm::gemm_strided_ex, lean gemm::STRIDED_GEMM_EX;
            Cublas fn cublasGemmBatchedEx(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, at: c_int, lda: c_int, b: P, bt: c_int, ldb: c_int, beta: P, c: P, ct: c_int, ldc: c_int, count: c_int, compute: c_int, algo: c_int) -> c_int => gemm::gemm_batched_ex;
            Cublas fn cublasGemmBatchedEx_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, at: c_int, lda: i64, b: P, bt: c_int, ldb: i64, beta: P, c: P, ct: c_int, ldc: i64, count: i64, compute: c_int, algo: c_int) -> c_int => gemm::gemm_batched_ex;
            Cublas fn cublasSetWorkspace_v2(handle: Handle, workspace: *mut c_void, bytes: usize) -> c_int => handles::set_workspace;
            Cublas fn cublasSgemmEx(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, at: c_int, lda: c_int, b: P, bt: c_int, ldb: c_int, beta: P, c: P, ct: c_int, ldc: c_int) -> c_int => gemm::sgemm_ex;
            Cublas fn cublasCgemm_v2(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::cgemm, lean gemm::CGEMM;
            Cublas fn cublasCgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::cgemm_strided, lean gemm::CGEMM_STRIDED;
            Cublas fn cublasZgemm_v2(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::zgemm, lean gemm::ZGEMM;
            Cublas fn cublasZgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::zgemm_strided, lean gemm::ZGEMM_STRIDED;
            Cublas fn cublasSgemv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gemv, declared;
            Cublas fn cublasDgemv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gemv, declared;
            Cublas fn cublasCgemv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gemv, declared;
            Cublas fn cublasZgemv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gemv, declared;
            Cublas fn cublasSgbmv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, kl: c_int, ku: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gbmv, declared;
            Cublas fn cublasDgbmv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, kl: c_int, ku: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gbmv, declared;
            Cublas fn cublasCgbmv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, kl: c_int, ku: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gbmv, declared;
            Cublas fn cublasZgbmv_v2(handle: Handle, trans: c_int, m: c_int, n: c_int, kl: c_int, ku: c_int, alpha: Scalar, A: In, lda: c_int, x: In, incx: c_int, beta: Scalar, y: Acc, incy: c_int) -> c_int => blas::gbmv, declared;
            Cublas fn cublasSdot_v2(handle: Handle, n: c_int, x: In, incx: c_int, y: In, incy: c_int, result: ResultOut) -> c_int => blas::dot, declared;
            Cublas fn cublasDdot_v2(handle: Handle, n: c_int, x: In, incx: c_int, y: In, incy: c_int, result: ResultOut) -> c_int => blas::dot, declared;
            Cublas fn cublasCdotu_v2(handle: Handle, n: c_int, x: In, incx: c_int, y: In, incy: c_int, result: ResultOut) -> c_int => blas::dot, declared;
            Cublas fn cublasCdotc_v2(handle: Handle, n: c_int, x: In, incx: c_int, y: In, incy: c_int, result: ResultOut) -> c_int => blas::dot, declared;
            Cublas fn cublasZdotu_v2(handle: Handle, n: c_int, x: In, incx: c_int, y: In, incy: c_int, result: ResultOut) -> c_int => blas::dot, declared;
            Cublas fn cublasZdotc_v2(handle: Handle, n: c_int, x: In, incx: c_int, y: In, incy: c_int, result: ResultOut) -> c_int => blas::dot, declared;
            Cublas fn cublasDotEx(handle: Handle, n: c_int, x: In, xType: c_int, incx: c_int, y: In, yType: c_int, incy: c_int, result: ResultOut, resultType: c_int, executionType: c_int) -> c_int => blas::dot_ex, declared;
            Cublas fn cublasStrsm_v2(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int) -> c_int => blas::trsm, declared;
            Cublas fn cublasStrsmBatched(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int, batchCount: c_int) -> c_int => blas::trsm_batched, declared;
            Cublas fn cublasDtrsm_v2(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int) -> c_int => blas::trsm, declared;
            Cublas fn cublasDtrsmBatched(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int, batchCount: c_int) -> c_int => blas::trsm_batched, declared;
            Cublas fn cublasCtrsm_v2(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int) -> c_int => blas::trsm, declared;
            Cublas fn cublasCtrsmBatched(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int, batchCount: c_int) -> c_int => blas::trsm_batched, declared;
            Cublas fn cublasZtrsm_v2(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int) -> c_int => blas::trsm, declared;
            Cublas fn cublasZtrsmBatched(handle: Handle, side: c_int, uplo: c_int, trans: c_int, diag: c_int, m: c_int, n: c_int, alpha: Scalar, A: In, lda: c_int, B: InOut, ldb: c_int, batchCount: c_int) -> c_int => blas::trsm_batched, declared;
            Cublas fn cublasSgetrfBatched(handle: Handle, n: c_int, Aarray: InOut, lda: c_int, PivotArray: Out, infoArray: Out, batchSize: c_int) -> c_int => blas::getrf_batched, declared;
            Cublas fn cublasSgetrsBatched(handle: Handle, trans: c_int, n: c_int, nrhs: c_int, Aarray: In, lda: c_int, devIpiv: In, Barray: InOut, ldb: c_int, info: Out, batchSize: c_int) -> c_int => blas::getrs_batched, declared;
            Cublas fn cublasSgeqrfBatched(handle: Handle, m: c_int, n: c_int, Aarray: InOut, lda: c_int, TauArray: Out, info: Out, batchSize: c_int) -> c_int => blas::geqrf_batched, declared;
            Cublas fn cublasSgelsBatched(handle: Handle, trans: c_int, m: c_int, n: c_int, nrhs: c_int, Aarray: InOut, lda: c_int, Carray: InOut, ldc: c_int, info: Out, devInfoArray: Out, batchSize: c_int) -> c_int => blas::gels_batched, declared;
            Cublas fn cublasDgetrfBatched(handle: Handle, n: c_int, Aarray: InOut, lda: c_int, PivotArray: Out, infoArray: Out, batchSize: c_int) -> c_int => blas::getrf_batched, declared;
            Cublas fn cublasDgetrsBatched(handle: Handle, trans: c_int, n: c_int, nrhs: c_int, Aarray: In, lda: c_int, devIpiv: In, Barray: InOut, ldb: c_int, info: Out, batchSize: c_int) -> c_int => blas::getrs_batched, declared;
            Cublas fn cublasDgeqrfBatched(handle: Handle, m: c_int, n: c_int, Aarray: InOut, lda: c_int, TauArray: Out, info: Out, batchSize: c_int) -> c_int => blas::geqrf_batched, declared;
            Cublas fn cublasDgelsBatched(handle: Handle, trans: c_int, m: c_int, n: c_int, nrhs: c_int, Aarray: InOut, lda: c_int, Carray: InOut, ldc: c_int, info: Out, devInfoArray: Out, batchSize: c_int) -> c_int => blas::gels_batched, declared;
            Cublas fn cublasCgetrfBatched(handle: Handle, n: c_int, Aarray: InOut, lda: c_int, PivotArray: Out, infoArray: Out, batchSize: c_int) -> c_int => blas::getrf_batched, declared;
            Cublas fn cublasCgetrsBatched(handle: Handle, trans: c_int, n: c_int, nrhs: c_int, Aarray: In, lda: c_int, devIpiv: In, Barray: InOut, ldb: c_int, info: Out, batchSize: c_int) -> c_int => blas::getrs_batched, declared;
            Cublas fn cublasCgeqrfBatched(handle: Handle, m: c_int, n: c_int, Aarray: InOut, lda: c_int, TauArray: Out, info: Out, batchSize: c_int) -> c_int => blas::geqrf_batched, declared;
            Cublas fn cublasCgelsBatched(handle: Handle, trans: c_int, m: c_int, n: c_int, nrhs: c_int, Aarray: InOut, lda: c_int, Carray: InOut, ldc: c_int, info: Out, devInfoArray: Out, batchSize: c_int) -> c_int => blas::gels_batched, declared;
            Cublas fn cublasZgetrfBatched(handle: Handle, n: c_int, Aarray: InOut, lda: c_int, PivotArray: Out, infoArray: Out, batchSize: c_int) -> c_int => blas::getrf_batched, declared;
            Cublas fn cublasZgetrsBatched(handle: Handle, trans: c_int, n: c_int, nrhs: c_int, Aarray: In, lda: c_int, devIpiv: In, Barray: InOut, ldb: c_int, info: Out, batchSize: c_int) -> c_int => blas::getrs_batched, declared;
            Cublas fn cublasZgeqrfBatched(handle: Handle, m: c_int, n: c_int, Aarray: InOut, lda: c_int, TauArray: Out, info: Out, batchSize: c_int) -> c_int => blas::geqrf_batched, declared;
            Cublas fn cublasZgelsBatched(handle: Handle, trans: c_int, m: c_int, n: c_int, nrhs: c_int, Aarray: InOut, lda: c_int, Carray: InOut, ldc: c_int, info: Out, devInfoArray: Out, batchSize: c_int) -> c_int => blas::gels_batched, declared;
            CublasLt fn cublasLtCreate(handle: *mut *mut c_void) -> c_int => lt::create;
            CublasLt fn cublasLtDestroy(handle: *mut c_void) -> c_int => lt::destroy;
            CublasLt fn cublasLtMatmulDescCreate(desc: *mut *mut c_void, compute: c_int, scale: c_int) -> c_int => lt::matmul_desc_create, lean_always lt::MATMUL_DESC_CREATE;
            CublasLt fn cublasLtMatmulDescDestroy(desc: *mut c_void) -> c_int => lt::descriptor_destroy, lean_always lt::DESCRIPTOR_DESTROY;
            CublasLt fn cublasLtMatrixLayoutCreate(layout: *mut *mut c_void, dtype: c_int, rows: u64, cols: u64, ld: i64) -> c_int => lt::layout_create, lean_always lt::LAYOUT_CREATE;
            CublasLt fn cublasLtMatrixLayoutDestroy(layout: *mut c_void) -> c_int => lt::descriptor_destroy, lean_always lt::DESCRIPTOR_DESTROY;
            CublasLt fn cublasLtMatrixLayoutSetAttribute(layout: *mut c_void, attr: c_int, buf: P, size: usize) -> c_int => lt::layout_set_attribute, lean_always lt::LAYOUT_SET_ATTRIBUTE;
            CublasLt fn cublasLtMatmulDescSetAttribute(desc: *mut c_void, attr: c_int, buf: P, size: usize) -> c_int => lt::matmul_desc_set_attribute, lean_always lt::MATMUL_DESC_SET_ATTRIBUTE;
            CublasLt fn cublasLtMatmul(h: *mut c_void, desc: *mut c_void, alpha: P, a: P, ad: *mut c_void, b: P, bd: *mut c_void, beta: P, c: P, cd: *mut c_void, d: *mut c_void, dd: *mut c_void, algo: P, ws: *mut c_void, ws_bytes: usize, stream: Stream) -> c_int => lt::matmul, lean_described lt::MATMUL;
            Cudart fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> c_int => memory::malloc;
            Cudart fn cudaFree(dev_ptr: *mut c_void) -> c_int => memory::free;
            Cudart fn cudaMallocAsync(dev_ptr: *mut *mut c_void, size: usize, stream: Stream) -> c_int => memory::malloc_async;
            Cudart fn cudaFreeAsync(dev_ptr: *mut c_void, stream: Stream) -> c_int => memory::free_async;
            Cudart fn cudaMallocManaged(dev_ptr: *mut *mut c_void, size: usize, flags: u32) -> c_int => memory::malloc_managed;
            Cudart fn cudaMallocPitch(dev_ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> c_int => memory::malloc_pitch;
            Cudart fn cudaMallocFromPoolAsync(dev_ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int => memory::malloc_from_pool;
            Cudart fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> c_int => memory::malloc_host;
            Cudart fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) -> c_int => memory::host_alloc;
            Cudart fn cudaFreeHost(ptr: *mut c_void) -> c_int => memory::free_host;
            Driver fn cuMemAllocHost_v2(ptr: *mut *mut c_void, size: usize) -> c_int => memory::malloc_host;
            Driver fn cuMemFreeHost(ptr: *mut c_void) -> c_int => memory::free_host;
            // A CUdeviceptr is declared as the pointer it holds (the same width and calling convention),
            // so the runtime's handlers serve the driver's allocation functions.
            Driver fn cuMemAlloc_v2(dptr: *mut *mut c_void, size: usize) -> c_int => memory::malloc;
            Driver fn cuMemAllocManaged(dptr: *mut *mut c_void, size: usize, flags: u32) -> c_int => memory::malloc_managed;
            Driver fn cuMemAllocPitch_v2(dptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize, elem: u32) -> c_int => memory::mem_alloc_pitch;
            Driver fn cuMemAllocAsync(dptr: *mut *mut c_void, size: usize, stream: Stream) -> c_int => memory::malloc_async;
            Driver fn cuMemAllocAsync_ptsz(dptr: *mut *mut c_void, size: usize, stream: Stream) -> c_int => memory::malloc_async;
            Driver fn cuMemAllocFromPoolAsync(dptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int => memory::malloc_from_pool;
            Driver fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int => memory::malloc_from_pool;
            Driver fn cuMemFree_v2(dptr: *mut c_void) -> c_int => memory::free;
            Driver fn cuMemFreeAsync(dptr: *mut c_void, stream: Stream) -> c_int => memory::free_async;
            Driver fn cuMemFreeAsync_ptsz(dptr: *mut c_void, stream: Stream) -> c_int => memory::free_async;
            Driver fn cuMemAddressReserve(ptr: *mut u64, size: usize, align: usize, addr: u64, flags: u64) -> c_int => memory::mem_address_reserve;
            Driver fn cuMemAddressFree(ptr: u64, size: usize) -> c_int => memory::mem_address_free;
            Driver fn cuMemCreate(handle: *mut u64, size: usize, prop: P, flags: u64) -> c_int => memory::mem_create;
            Driver fn cuMemRelease(handle: u64) -> c_int => memory::mem_release;
            Driver fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) -> c_int => memory::mem_map;
            Driver fn cuMemUnmap(ptr: u64, size: usize) -> c_int => memory::mem_unmap;
            Cudart fn cudaIpcOpenMemHandle(dev_ptr: *mut *mut c_void, handle: IpcHandle, flags: u32) -> c_int => memory::ipc_open;
            Cudart fn cudaIpcCloseMemHandle(dev_ptr: *mut c_void) -> c_int => memory::ipc_close;
            Cudart fn cudaExternalMemoryGetMappedBuffer(dev_ptr: *mut *mut c_void, memory: P, desc: *const ExternalBufferDesc) -> c_int => memory::external_buffer;
            Driver fn cuIpcOpenMemHandle_v2(dptr: *mut *mut c_void, handle: IpcHandle, flags: u32) -> c_int => memory::ipc_open;
            Driver fn cuIpcCloseMemHandle(dptr: *mut c_void) -> c_int => memory::ipc_close;
            Driver fn cuExternalMemoryGetMappedBuffer(dptr: *mut *mut c_void, memory: P, desc: *const ExternalBufferDesc) -> c_int => memory::external_buffer;
            Cudart fn cudaGetDeviceCount(count: *mut c_int) -> c_int => memory::get_device_count;
            Cudart fn cudaStreamSynchronize(stream: Stream) -> c_int => sync::stream_synchronize;
            Cudart fn cudaDeviceSynchronize() -> c_int => sync::device_synchronize;
            Cudart fn cudaEventSynchronize(event: *mut c_void) -> c_int => sync::event_synchronize;
            Cudart fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int) -> c_int => sync::memcpy;
            Driver fn cuStreamSynchronize(stream: Stream) -> c_int => sync::stream_synchronize;
            Driver fn cuCtxSynchronize() -> c_int => sync::device_synchronize;
            Driver fn cuEventSynchronize(event: *mut c_void) -> c_int => sync::event_synchronize;
            Driver fn cuMemcpyDtoH_v2(dst: u64, src: u64, count: usize) -> c_int => sync::driver_copy;
            Driver fn cuMemcpyHtoD_v2(dst: u64, src: u64, count: usize) -> c_int => sync::driver_copy;
            Cudart fn cudaLaunchKernel(func: P, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Stream) -> c_int => launch::launch_kernel;
            Cudart fn cudaLaunchCooperativeKernel(func: P, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Stream) -> c_int => launch::launch_kernel;
            Cudart fn cudaLaunchKernelExC(config: *const LaunchConfig, func: P, args: *mut *mut c_void) -> c_int => launch::launch_kernel_ex;
            Driver fn cuLaunchKernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Stream, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => launch::driver_launch;
            Driver fn cuLaunchKernel_ptsz(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Stream, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => launch::driver_launch;
            Driver fn cuLaunchCooperativeKernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Stream, params: *mut *mut c_void) -> c_int => launch::cooperative_launch;
            Driver fn cuLaunchCooperativeKernel_ptsz(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Stream, params: *mut *mut c_void) -> c_int => launch::cooperative_launch;
            Driver fn cuLaunchKernelEx(config: *const DriverLaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => launch::driver_launch_ex;
            Driver fn cuLaunchKernelEx_ptsz(config: *const DriverLaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => launch::driver_launch_ex;
            Driver fn cuModuleGetFunction(function: *mut Handle, module: Handle, name: *const std::ffi::c_char) -> c_int => launch::module_get_function;
            Driver fn cuLibraryGetKernel(kernel: *mut Handle, library: Handle, name: *const std::ffi::c_char) -> c_int => launch::module_get_function;
            Driver fn cuKernelGetFunction(function: *mut Handle, kernel: Handle) -> c_int => launch::kernel_get_function;
            Cudart fn cudaStreamEndCapture(stream: Stream, graph: *mut Handle) -> c_int => graphs::end_capture;
            Cudart fn cudaGraphInstantiate(exec: *mut Handle, graph: Handle, flags: u64) -> c_int => graphs::instantiate;
            Cudart fn cudaGraphInstantiateWithFlags(exec: *mut Handle, graph: Handle, flags: u64) -> c_int => graphs::instantiate;
            Cudart fn cudaGraphExecUpdate(exec: Handle, graph: Handle, info: *mut c_void) -> c_int => graphs::exec_update;
            Driver fn cuStreamEndCapture(stream: Stream, graph: *mut Handle) -> c_int => graphs::end_capture;
            Driver fn cuStreamEndCapture_ptsz(stream: Stream, graph: *mut Handle) -> c_int => graphs::end_capture;
            Driver fn cuGraphInstantiateWithFlags(exec: *mut Handle, graph: Handle, flags: u64) -> c_int => graphs::instantiate;
            Driver fn cuGraphExecUpdate_v2(exec: Handle, graph: Handle, info: *mut c_void) -> c_int => graphs::exec_update;
            Cudart fn cudaGraphExecKernelNodeSetParams(exec: Handle, node: Handle, params: *const c_void) -> c_int => graphs::node_changed;
            Cudart fn cudaGraphExecNodeSetParams(exec: Handle, node: Handle, params: *mut c_void) -> c_int => graphs::node_changed;
            Driver fn cuGraphExecKernelNodeSetParams_v2(exec: Handle, node: Handle, params: *const c_void) -> c_int => graphs::node_changed;
            Driver fn cuGraphExecNodeSetParams(exec: Handle, node: Handle, params: *mut c_void) -> c_int => graphs::node_changed;
            Cudart fn cudaGraphExecDestroy(exec: Handle) -> c_int => graphs::exec_destroyed;
            Driver fn cuGraphExecDestroy(exec: Handle) -> c_int => graphs::exec_destroyed;
            Cudart fn cudaGraphLaunch(exec: Handle, stream: Stream) -> c_int => launch::graph_launch;
            Driver fn cuGraphLaunch(exec: Handle, stream: Stream) -> c_int => launch::graph_launch;
            Driver fn cuGraphLaunch_ptsz(exec: Handle, stream: Stream) -> c_int => launch::graph_launch;
            Cudnn fn cudnnCreate(handle: *mut Handle) -> c_int => cudnn::create;
            Cudnn fn cudnnDestroy(handle: Handle) -> c_int => cudnn::destroy;
            Cudnn fn cudnnSetStream(handle: Handle, stream: Stream) -> c_int => cudnn::set_stream;
            Cudnn fn cudnnGetLastErrorString(message: *mut std::ffi::c_char, max_size: usize) -> () => cudnn::get_last_error_string;
            Cudnn fn cudnnBackendCreateDescriptor(kind: c_int, descriptor: *mut Handle) -> c_int => cudnn::backend_create_descriptor;
            Cudnn fn cudnnBackendFinalize(descriptor: Handle) -> c_int => cudnn::backend_finalize;
            Cudnn fn cudnnBackendExecute(handle: Handle, plan: Handle, pack: Handle) -> c_int => cudnn::backend_execute;
            // The legacy entry points PyTorch 2.15 imports that run work on the device: data pointers
            // are `P`, descriptors and handles `Handle` (cudnn::Word tells them apart by that).
            Cudnn fn cudnnConvolutionForward(handle: Handle, alpha: Scalar, x_desc: Handle, x: In, w_desc: Handle, w: In, conv: Handle, algo: c_int, ws: Workspace, ws_bytes: usize, beta: Scalar, y_desc: Handle, y: Acc) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnConvolutionBackwardData(handle: Handle, alpha: Scalar, w_desc: Handle, w: In, dy_desc: Handle, dy: In, conv: Handle, algo: c_int, ws: Workspace, ws_bytes: usize, beta: Scalar, dx_desc: Handle, dx: Acc) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnConvolutionBackwardFilter(handle: Handle, alpha: Scalar, x_desc: Handle, x: In, dy_desc: Handle, dy: In, conv: Handle, algo: c_int, ws: Workspace, ws_bytes: usize, beta: Scalar, dw_desc: Handle, dw: Acc) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnConvolutionBiasActivationForward(handle: Handle, alpha1: Scalar, x_desc: Handle, x: In, w_desc: Handle, w: In, conv: Handle, algo: c_int, ws: Workspace, ws_bytes: usize, alpha2: Scalar, z_desc: Handle, z: In, bias_desc: Handle, bias: In, act: Handle, y_desc: Handle, y: Out) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnFindConvolutionForwardAlgorithmEx(handle: Handle, x_desc: Handle, x: In, w_desc: Handle, w: In, conv: Handle, y_desc: Handle, y: Out, requested: c_int, returned: Out, perf: Out, ws: Workspace, ws_bytes: usize) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnFindConvolutionBackwardDataAlgorithmEx(handle: Handle, w_desc: Handle, w: In, dy_desc: Handle, dy: In, conv: Handle, dx_desc: Handle, dx: Out, requested: c_int, returned: Out, perf: Out, ws: Workspace, ws_bytes: usize) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnFindConvolutionBackwardFilterAlgorithmEx(handle: Handle, x_desc: Handle, x: In, dy_desc: Handle, y: In, conv: Handle, dw_desc: Handle, dw: Out, requested: c_int, returned: Out, perf: Out, ws: Workspace, ws_bytes: usize) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnBatchNormalizationForwardInference(handle: Handle, mode: c_int, alpha: Scalar, beta: Scalar, x_desc: Handle, x: In, y_desc: Handle, y: Acc, bn_desc: Handle, scale: In, bias: In, mean: In, variance: In, epsilon: f64) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnBatchNormalizationForwardTrainingEx(handle: Handle, mode: c_int, ops: c_int, alpha: Scalar, beta: Scalar, x_desc: Handle, x: In, z_desc: Handle, z: In, y_desc: Handle, y: Acc, bn_desc: Handle, scale: In, bias: In, factor: f64, running_mean: InOut, running_var: InOut, epsilon: f64, save_mean: Out, save_inv_var: Out, act: Handle, ws: Workspace, ws_bytes: usize, reserve: Out, reserve_bytes: usize) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnBatchNormalizationBackwardEx(handle: Handle, mode: c_int, ops: c_int, alpha_data: Scalar, beta_data: Scalar, alpha_param: Scalar, beta_param: Scalar, x_desc: Handle, x: In, y_desc: Handle, y: In, dy_desc: Handle, dy: In, dz_desc: Handle, dz: Out, dx_desc: Handle, dx: Acc, dbn_desc: Handle, scale: In, bias: In, dscale: Acc, dbias: Acc, epsilon: f64, save_mean: In, save_inv_var: In, act: Handle, ws: Workspace, ws_bytes: usize, reserve: In, reserve_bytes: usize) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnPoolingForward(handle: Handle, pooling: Handle, alpha: Scalar, x_desc: Handle, x: In, beta: Scalar, y_desc: Handle, y: Acc) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnAddTensor(handle: Handle, alpha: Scalar, a_desc: Handle, A: In, beta: Scalar, c_desc: Handle, C: Acc) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnCTCLoss(handle: Handle, probs_desc: Handle, probs: In, labels: In, label_lengths: In, input_lengths: In, costs: Out, grads_desc: Handle, grads: Out, algo: c_int, ctc: Handle, ws: Workspace, ws_bytes: usize) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnCTCLoss_v8(handle: Handle, algo: c_int, ctc: Handle, probs_desc: Handle, probs: In, labels: In, label_lengths: In, input_lengths: In, costs: Out, grads_desc: Handle, grads: Out, ws_bytes: usize, ws: Workspace) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnRNNForward(handle: Handle, rnn: Handle, mode: c_int, seq_lengths: In, x_desc: Handle, x: In, y_desc: Handle, y: Out, h_desc: Handle, hx: In, hy: Out, c_desc: Handle, cx: In, cy: Out, weight_bytes: usize, weights: In, ws_bytes: usize, ws: Workspace, reserve_bytes: usize, reserve: InOut) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnRNNBackwardData_v8(handle: Handle, rnn: Handle, seq_lengths: In, y_desc: Handle, y: In, dy: In, x_desc: Handle, dx: Out, h_desc: Handle, hx: In, dhy: In, dhx: Out, c_desc: Handle, cx: In, dcy: In, dcx: Out, weight_bytes: usize, weights: In, ws_bytes: usize, ws: Workspace, reserve_bytes: usize, reserve: InOut) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnRNNBackwardWeights_v8(handle: Handle, rnn: Handle, add: c_int, seq_lengths: In, x_desc: Handle, x: In, h_desc: Handle, hx: In, y_desc: Handle, y: In, weight_bytes: usize, dweights: Acc, ws_bytes: usize, ws: Workspace, reserve_bytes: usize, reserve: In) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnSpatialTfGridGeneratorForward(handle: Handle, st: Handle, theta: In, grid: Out) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnSpatialTfGridGeneratorBackward(handle: Handle, st: Handle, dgrid: In, dtheta: Out) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnSpatialTfSamplerForward(handle: Handle, st: Handle, alpha: Scalar, x_desc: Handle, x: In, grid: In, beta: Scalar, y_desc: Handle, y: Acc) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnSpatialTfSamplerBackward(handle: Handle, st: Handle, alpha: Scalar, x_desc: Handle, x: In, beta: Scalar, dx_desc: Handle, dx: Acc, alpha_dgrid: Scalar, dy_desc: Handle, dy: In, grid: In, beta_dgrid: Scalar, dgrid: Acc) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnSetDropoutDescriptor(desc: Handle, handle: Handle, dropout: f32, states: Out, bytes: usize, seed: u64) -> c_int => cudnn::legacy, declared;
            Cudnn fn cudnnRestoreDropoutDescriptor(desc: Handle, handle: Handle, dropout: f32, states: In, bytes: usize, seed: u64) -> c_int => cudnn::legacy, declared;
            Cudart fn __cudaRegisterFunction(handle: *mut *mut c_void, host: P, device_fun: *mut std::ffi::c_char, device_name: *const std::ffi::c_char, limit: c_int, tid: P, bid: P, block_dim: P, grid_dim: P, warp_size: *mut c_int) -> () => launch::register_function;
        }
    };
}
pub(crate) use with_hook_table;

/// `Hook`, its names and its count, from the table's names alone.
macro_rules! hook_names {
    ( $( $lib:ident fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty => $handler:path $( , $kind:ident $( $lean:path )? )? ; )* ) => {
        /// A hooked function, by the order of the table.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Hook { $( $name, )* }

        /// Names of the hooked symbols, in table order (the session counts calls by index).
        pub(crate) static HOOK_NAMES: &[&str] = &[ $( stringify!($name), )* ];

        /// Each hooked function's argument names, in table order (NVIDIA's header names where a
        /// line is `declared`: the trace names a declared call's arguments by them).
        pub(crate) static HOOK_ARGS: &[&[&str]] = &[ $( &[ $( stringify!($arg) ),* ], )* ];

        /// How many hooked functions there are.
        pub(crate) const HOOK_COUNT: usize = [$( stringify!($name) ),*].len();

        impl Hook {
            /// Every hook, in table order.
            pub(crate) const ALL: &'static [Hook] = &[ $( Hook::$name, )* ];

            pub(crate) fn index(self) -> usize {
                self as usize
            }

            pub(crate) fn name(self) -> &'static str {
                HOOK_NAMES[self as usize]
            }
        }
    };
}

with_hook_table!(hook_names);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_is_numbered_by_its_place_in_the_table_and_named_once() {
        assert_eq!((Hook::ALL.len(), HOOK_NAMES.len()), (HOOK_COUNT, HOOK_COUNT));
        for (i, hook) in Hook::ALL.iter().enumerate() {
            assert_eq!((hook.index(), hook.name()), (i, HOOK_NAMES[i]));
        }
        let mut names = HOOK_NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), HOOK_COUNT, "a function listed twice");
        assert_eq!(Hook::cublasSgemm_v2.name(), "cublasSgemm_v2");
    }
}
