// The library's bfloat16 linear layer for CPUs: y = x W^T, bfloat16 in and out, float32
// accumulation. Built at first use by specdec_lib.research.speed.kernels (torch.utils.cpp_extension).
//
// Why by hand: PyTorch's bfloat16 products on a CPU (oneDNN's, ATen's) either emulate the
// arithmetic of every token of a pass after the first (CPUs without AVX512-BF16 or AMX: a pass
// over n tokens costs about n one-token passes), or read the weights at well under the memory's
// pace for the passes decoding makes (one to a few tokens). These products read each weight once
// per pass and multiply it into every token of the pass, two ways:
//
// - AVX2 and FMA: each weight widened to float32 in registers, one fused multiply-add per token;
//   every output one float32 lane that accumulates its products in order of k. Weight layout:
//   [N / 16][K][16].
// - AVX512-BF16: VDPBF16PS, two bfloat16 products a lane an instruction (per pair of features
//   k, k + 1: the lane adds the product at k + 1, then the one at k, each rounded to float32 to
//   nearest even, subnormals flushed to zero). Weight layout: [N / 16][K / 2][16][2].
//
// Either way an output does not depend on how many rows the call has (the product is batch
// invariant), and it is rounded once to bfloat16 at the end (to nearest, ties to even).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t BLOCK = 16;  // outputs a block: two 8-lane float32 registers

// fn(std::integral_constant<int, T>{}) for a T of 1..Max known at run time: the tiles' token
// counts are template arguments (their accumulators are registers).
template <int Max, class F>
inline void with_tokens(int T, F&& fn) {
  if constexpr (Max > 1) {
    if (T < Max) return with_tokens<Max - 1>(T, fn);
  }
  fn(std::integral_constant<int, Max>{});
}

// fn(first block, blocks) over the weight's blocks of 16 outputs in runs of ``run_blocks``, on
// ATen's threads.
template <class F>
void over_runs(int64_t blocks, int64_t run_blocks, F&& fn) {
  const int64_t runs = (blocks + run_blocks - 1) / run_blocks;
  at::parallel_for(0, runs, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b0 = r * run_blocks;
      fn(b0, std::min(blocks, b0 + run_blocks) - b0);
    }
  });
}

inline void widen16(const uint16_t* p, __m256& lo, __m256& hi) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
  hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
}

inline uint16_t to_bf16(float f) {  // round to nearest, ties to even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// T tokens x NB blocks of 16 outputs: T * NB * 2 accumulators (at most 12 of AVX2's 16 registers).
// x holds the tile's tokens interleaved, x[k * T + t]: the T values a step broadcasts are adjacent.
template <int T, int NB>
inline void tile(const float* x, int64_t K, const uint16_t* w, uint16_t* y, int64_t ldy) {
  __m256 acc[T][NB][2];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) acc[t][b][0] = acc[t][b][1] = _mm256_setzero_ps();
  const int64_t stride = K * BLOCK;
  for (int64_t k = 0; k < K; ++k) {
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) {
      __m256 lo, hi;
      widen16(w + b * stride + k * BLOCK, lo, hi);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m256 xv = _mm256_broadcast_ss(x + k * T + t);
        acc[t][b][0] = _mm256_fmadd_ps(xv, lo, acc[t][b][0]);
        acc[t][b][1] = _mm256_fmadd_ps(xv, hi, acc[t][b][1]);
      }
    }
  }
  alignas(32) float out[BLOCK];
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < NB; ++b) {
      _mm256_store_ps(out, acc[t][b][0]);
      _mm256_store_ps(out + 8, acc[t][b][1]);
      uint16_t* dst = y + t * ldy + b * BLOCK;
      for (int i = 0; i < BLOCK; ++i) dst[i] = to_bf16(out[i]);
    }
}

template <int T>
void tiles(const float* x, int64_t K, const uint16_t* w, uint16_t* y, int64_t ldy, int64_t blocks) {
  constexpr int NB = T == 1 ? 4 : (T == 2 ? 2 : 1);  // no spills: at most 12 accumulators
  int64_t b = 0;
  for (; b + NB <= blocks; b += NB) tile<T, NB>(x, K, w + b * K * BLOCK, y + b * BLOCK, ldy);
  for (; b < blocks; ++b) tile<T, 1>(x, K, w + b * K * BLOCK, y + b * BLOCK, ldy);
}

// How many tokens the tile at a call's next ``left`` tokens takes.
inline int64_t tile_tokens(int64_t left) { return left <= 6 ? left : (left <= 8 ? 4 : 6); }

// Every token of the call against a run of blocks, in tiles of up to 6 tokens: the run's weights
// stay in cache while the tiles after the first read them again. Tile m's tokens start at m * K.
void run(const float* x, int64_t M, int64_t K, const uint16_t* w, uint16_t* y, int64_t N, int64_t blocks) {
  for (int64_t m = 0; m < M;) {
    const int T = static_cast<int>(tile_tokens(M - m));
    with_tokens<6>(T, [&](auto t) { tiles<decltype(t)::value>(x + m * K, K, w, y + m * N, N, blocks); });
    m += T;
  }
}

// AVX512-BF16: T tokens x NB blocks of 16 outputs, one 512-bit accumulator each (AVX-512 has 32).
namespace dot {

#define SPECDEC_BF16 __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))

template <int T, int NB>
SPECDEC_BF16 inline void tile(const uint16_t* x, int64_t K, const uint16_t* w, uint16_t* y,
                              int64_t ldy) {
  __m512 acc[T][NB];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) acc[t][b] = _mm512_setzero_ps();
  const int64_t stride = K * BLOCK;
  for (int64_t k = 0; k < K; k += 2) {
    __m512bh wv[NB];
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b)
      wv[b] = (__m512bh)_mm512_loadu_si512(w + b * stride + k * BLOCK);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      int32_t pair;  // features k and k + 1 of token t, broadcast to every lane
      std::memcpy(&pair, x + t * K + k, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) acc[t][b] = _mm512_dpbf16_ps(acc[t][b], xv, wv[b]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + t * ldy + b * BLOCK),
                          (__m256i)_mm512_cvtneps_pbh(acc[t][b]));
}

template <int T>
SPECDEC_BF16 void tiles(const uint16_t* x, int64_t K, const uint16_t* w, uint16_t* y, int64_t ldy,
                        int64_t blocks) {
  constexpr int NB = T == 1 ? 8 : (T <= 4 ? 4 : 2);  // at most 16 accumulators
  int64_t b = 0;
  for (; b + NB <= blocks; b += NB) tile<T, NB>(x, K, w + b * K * BLOCK, y + b * BLOCK, ldy);
  for (; b < blocks; ++b) tile<T, 1>(x, K, w + b * K * BLOCK, y + b * BLOCK, ldy);
}

SPECDEC_BF16 void run(const uint16_t* x, int64_t M, int64_t K, const uint16_t* w, uint16_t* y,
                      int64_t N, int64_t blocks) {
  for (int64_t m = 0; m < M;) {
    const int T = static_cast<int>(std::min<int64_t>(M - m, 8));
    with_tokens<8>(T, [&](auto t) { tiles<decltype(t)::value>(x + m * K, K, w, y + m * N, N, blocks); });
    m += T;
  }
}

void linear(const uint16_t* x, int64_t M, int64_t K, const uint16_t* w, uint16_t* y, int64_t N) {
  const int64_t blocks = N / BLOCK;
  over_runs(blocks, blocks >= 128 ? 8 : 1, [&](int64_t b0, int64_t nb) {  // small layers: a run a block
    run(x, M, K, w + b0 * K * BLOCK, y + b0 * BLOCK, N, nb);
  });
}

}  // namespace dot

}  // namespace

// [N, K] bfloat16 -> [N / 16, K, 16] (AVX2) or [N / 16, K / 2, 16, 2] (AVX512-BF16) bfloat16.
torch::Tensor pack(const torch::Tensor& w, bool bf16_pairs) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kBFloat16, "pack: a 2-d bfloat16 weight");
  const int64_t N = w.size(0), K = w.size(1);
  TORCH_CHECK(N % BLOCK == 0, "pack: the weight's rows (", N, ") are not a multiple of 16");
  if (!bf16_pairs) return w.reshape({N / BLOCK, BLOCK, K}).permute({0, 2, 1}).contiguous();
  TORCH_CHECK(K % 2 == 0, "pack: pairs of features need an even number of them, not ", K);
  return w.reshape({N / BLOCK, BLOCK, K / 2, 2}).permute({0, 2, 1, 3}).contiguous();
}

bool has_avx512_bf16() { return __builtin_cpu_supports("avx512bf16"); }

// x [..., K] bfloat16, packed by pack() ([N / 16, K, 16], or [N / 16, K / 2, 16, 2] for
// AVX512-BF16) -> [..., N] bfloat16.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed) {
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && packed.scalar_type() == torch::kBFloat16,
              "linear: bfloat16 input and weight");
  const bool pairs = packed.dim() == 4;
  TORCH_CHECK((packed.dim() == 3 || (pairs && packed.size(3) == 2)) && packed.size(2) == BLOCK &&
                  packed.is_contiguous(),
              "linear: a weight packed by pack()");
  const int64_t K = packed.size(1) * (pairs ? 2 : 1), N = packed.size(0) * BLOCK;
  TORCH_CHECK(x.size(-1) == K, "linear: input has ", x.size(-1), " features, the weight ", K);
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  auto y = torch::empty(sizes, x.options());
  const int64_t M = K ? x.numel() / K : 0;
  if (M == 0) return y;
  auto xc = x.contiguous();
  if (pairs) {
    TORCH_CHECK(has_avx512_bf16(), "linear: pairs of features need AVX512-BF16");
    dot::linear(reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>()), M, K,
                reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>()),
                reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>()), N);
    return y;
  }
  std::vector<float> xf(M * K);  // the tokens widened once, each tile's interleaved
  const uint16_t* xb = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
  for (int64_t m = 0; m < M;) {
    const int64_t T = tile_tokens(M - m);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) {
        const uint32_t u = static_cast<uint32_t>(xb[(m + t) * K + k]) << 16;
        std::memcpy(&xf[m * K + k * T + t], &u, 4);
      }
    m += T;
  }
  const uint16_t* w = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
  uint16_t* yp = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
  const int64_t blocks = N / BLOCK;
  over_runs(blocks, blocks >= 64 ? 4 : 1, [&](int64_t b0, int64_t nb) {  // small layers: a run a block
    run(xf.data(), M, K, w + b0 * K * BLOCK, yp + b0 * BLOCK, N, nb);
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "pack a [N, K] bfloat16 weight into blocks of 16 outputs");
  m.def("linear", &linear, "x W^T, float32 accumulation, on bfloat16 weights packed by pack()");
  m.def("has_avx512_bf16", &has_avx512_bf16, "whether this CPU has AVX512-BF16");
}
