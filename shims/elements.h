/* Element types of the stand-in cuBLAS and cublasLt: cudaDataType values, and conversion of
 * every type to and from double, so one GEMM routine serves them all (f16/bf16/fp8 are
 * computed in double and rounded back, as "real CPU arithmetic"). */
#ifndef CUBLASGUARD_STANDIN_ELEMENTS_H
#define CUBLASGUARD_STANDIN_ELEMENTS_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
    R_32F = 0, R_64F = 1, R_16F = 2, R_8I = 3, R_32I = 10, R_16BF = 14, R_8F_E4M3 = 28, R_8F_E5M2 = 29,
    /* complex pairs: cuComplex, cuDoubleComplex, and pairs of int8 */
    C_32F = 4, C_64F = 5, C_8I = 7
};

static inline size_t element_size(int type) {
    switch (type) {
    case C_64F: return 16;
    case R_64F: case C_32F: return 8;
    case R_32F: case R_32I: return 4;
    case R_16F: case R_16BF: case C_8I: return 2;
    case R_8I: case R_8F_E4M3: case R_8F_E5M2: return 1;
    default: return 0;
    }
}

static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000 | (man << 13);
    else if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (x >> 16) & 0x8000;
    uint32_t exp = (x >> 23) & 0xff, man = x & 0x7fffff;
    if (exp == 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f) return sign | 0x7c00; /* overflow: Inf */
    if (e <= 0) {
        if (e < -10) return sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e), half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* may carry into Inf, as it should */
    return sign | (uint16_t)h;
}

static inline float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* NaN stays NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* FP8: E4M3 (no Inf; S.1111.111 is NaN; max 448) and E5M2 (IEEE-like). */
static inline float fp8_to_float(uint8_t v, int e4m3) {
    int sign = v >> 7, exp_bits = e4m3 ? 4 : 5, man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    int exp = (v >> man_bits) & ((1 << exp_bits) - 1), man = v & ((1 << man_bits) - 1);
    float r;
    if (e4m3 && exp == 15 && man == 7) r = NAN;
    else if (!e4m3 && exp == 31) r = man ? NAN : INFINITY;
    else if (exp == 0) r = ldexpf((float)man, 1 - bias - man_bits);
    else r = ldexpf((float)(man | (1 << man_bits)), exp - bias - man_bits);
    return sign ? -r : r;
}

static inline uint8_t float_to_fp8(float f, int e4m3) {
    if (isnan(f)) return e4m3 ? 0x7f : 0x7e;
    uint8_t best = 0;
    float best_err = INFINITY;
    for (int v = 0; v < 256; v++) { /* nearest representable value: slow, simple, exact */
        float c = fp8_to_float((uint8_t)v, e4m3);
        if (isnan(c)) continue;
        float err = fabsf(c - f);
        if (err < best_err || (isinf(f) && c == f)) { best_err = err; best = (uint8_t)v; }
    }
    return best;
}

static inline double load_element(int type, const void *base, size_t i) {
    switch (type) {
    case R_64F: return ((const double *)base)[i];
    case R_32F: return ((const float *)base)[i];
    case R_16F: return half_to_float(((const uint16_t *)base)[i]);
    case R_16BF: return bf16_to_float(((const uint16_t *)base)[i]);
    case R_8I: return ((const int8_t *)base)[i];
    case R_32I: return ((const int32_t *)base)[i];
    case R_8F_E4M3: return fp8_to_float(((const uint8_t *)base)[i], 1);
    case R_8F_E5M2: return fp8_to_float(((const uint8_t *)base)[i], 0);
    default: return 0;
    }
}

static inline void store_element(int type, void *base, size_t i, double v) {
    switch (type) {
    case R_64F: ((double *)base)[i] = v; break;
    case R_32F: ((float *)base)[i] = (float)v; break;
    case R_16F: ((uint16_t *)base)[i] = float_to_half((float)v); break;
    case R_16BF: ((uint16_t *)base)[i] = float_to_bf16((float)v); break;
    case R_8I: ((int8_t *)base)[i] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v); break;
    case R_32I: ((int32_t *)base)[i] = (int32_t)v; break;
    case R_8F_E4M3: ((uint8_t *)base)[i] = float_to_fp8((float)v, 1); break;
    case R_8F_E5M2: ((uint8_t *)base)[i] = float_to_fp8((float)v, 0); break;
    default: break;
    }
}

/* The scale (alpha/beta) type of a cublasComputeType_t, or -1 for an unknown compute type. */
static inline int scale_type_of(int compute) {
    switch (compute) {
    case 64: case 65: return R_16F;
    case 68: case 69: case 74: case 75: case 77: case 78: return R_32F;
    case 70: case 71: case 79: return R_64F;
    case 72: case 73: return R_32I;
    default: return -1;
    }
}

/* Whether a type is one of the complex pairs. */
static inline int is_complex_type(int type) { return type == C_32F || type == C_64F || type == C_8I; }

/* cublasGemmEx's complex rows (the cuBLAS documentation's table): A/B C_32F or C_8I with C
 * C_32F under CUBLAS_COMPUTE_32F[_PEDANTIC], all C_32F under the FAST modes, all C_64F under
 * CUBLAS_COMPUTE_64F[_PEDANTIC] and CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT. Their scale type is C's. */
static inline int supported_complex_combination(int compute, int ab, int c) {
    switch (compute) {
    case 68: case 69: return (ab == C_32F || ab == C_8I) && c == C_32F;
    case 74: case 75: case 77: case 78: return ab == C_32F && c == C_32F;
    case 70: case 71: case 79: return ab == C_64F && c == C_64F;
    default: return 0;
    }
}

/* cublasGemmEx's supported (compute, A/B type, C type) combinations (NVIDIA's table, real types). */
static inline int supported_combination(int compute, int ab, int c) {
    switch (compute) {
    case 64: case 65: return ab == R_16F && c == R_16F;
    case 68: case 69:
        return (ab == R_16BF && (c == R_16BF || c == R_32F)) || (ab == R_16F && (c == R_16F || c == R_32F)) ||
               (ab == R_8I && c == R_32F) || (ab == R_32F && c == R_32F) ||
               /* FP8 (cublasLt, sm_89 and later): E4M3/E5M2 inputs, a wider output */
               ((ab == R_8F_E4M3 || ab == R_8F_E5M2) && (c == R_32F || c == R_16F || c == R_16BF));
    case 74: case 75: case 77: case 78: return ab == R_32F && c == R_32F;
    case 70: case 71: case 79: return ab == R_64F && c == R_64F;
    case 72: case 73: return ab == R_8I && c == R_32I;
    default: return 0;
    }
}
#endif
