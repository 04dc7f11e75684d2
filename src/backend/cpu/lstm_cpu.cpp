// CPU kernels of the LSTM family: the fused cell (forward and backward) and the whole-sequence
// recurrences.
//
// The recurrences split the batch across threads: batch rows never interact, so each thread
// runs all T steps on its own rows (a small single-threaded GEMM against W_hh, then the cell)
// with no synchronisation between steps. The per-step GEMMs are small ([B, H]·[H, 4H]), and
// splitting each of them across threads inside the BLAS would cost a fork/join per step and
// share W_hh's packing work badly; one parallel region for the whole sequence avoids both.
// When the batch is too small to split, the steps run one after another with the BLAS's own
// threads instead.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/vec_math.h"
#include "ops/kernels/lstm.h"

namespace freight::cpu {
namespace {

// float: the vectorisable approximations; double: libm.
template <class T>
inline T sigmoid_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return vsigmoid(x);
  else
    return 1.0 / (1.0 + std::exp(-x));
}
template <class T>
inline T tanh_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return vtanh(x);
  else
    return std::tanh(x);
}

// Row-major C[m, n] = A[m, k]·op(B) + beta·C, op(B) = B [k, n] or Bᵀ for B [n, k].
template <class T>
void gemm_rows(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, bool tb,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Forward cell over rows [r0, r1) of one step. a [B, 4H] holds the pre-activations (without
// the bias) and receives the activations i, f, g, o; then
//   c = f⊙c_prev + i⊙g,   h = o⊙tanh(c).
// h is also written to out + r·out_ld when out is given (the batch-first output).
template <class T>
void cell_forward_rows(T* a_all, const T* bias, const T* c_prev, T* c, T* h, T* out, int64_t out_ld,
                       int64_t r0, int64_t r1, int64_t H) {
  for (int64_t r = r0; r < r1; ++r) {
    T* a = a_all + r * 4 * H;
    const T* cp = c_prev + r * H;
    T* cr = c + r * H;
    T* hr = h + r * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      T i = sigmoid_of<T>(a[j] + bias[j]);
      T f = sigmoid_of<T>(a[H + j] + bias[H + j]);
      T g = tanh_of<T>(a[2 * H + j] + bias[2 * H + j]);
      T o = sigmoid_of<T>(a[3 * H + j] + bias[3 * H + j]);
      T cn = f * cp[j] + i * g;
      a[j] = i;
      a[H + j] = f;
      a[2 * H + j] = g;
      a[3 * H + j] = o;
      cr[j] = cn;
      hr[j] = o * tanh_of<T>(cn);
    }
    if (out) std::copy(hr, hr + H, out + r * out_ld);
  }
}

// Backward cell over rows [r0, r1) of one step. With dh = dh_out + dh_next and τ = tanh(c)
// (recomputed rather than stored):
//   dc_total = dc + dh⊙o⊙(1 − τ²)        (c reaches the loss through h and through c_next)
//   d(pre-act) of i = dc_total⊙g⊙i(1 − i),   of f = dc_total⊙c_prev⊙f(1 − f),
//              of g = dc_total⊙i⊙(1 − g²),   of o = dh⊙τ⊙o(1 − o)
//   dc_prev = dc_total⊙f   (written over dc).
// Row r of dh_out is at dh_out + r·dh_out_ld. When db is given, the rows of d(pre-act) are
// also added into it (the bias gradient is their sum over batch and steps).
template <class T>
void cell_backward_rows(const T* a_all, const T* c_prev, const T* c, const T* dh_out,
                        int64_t dh_out_ld, const T* dh_next, T* dc, T* da_all, T* db, int64_t r0,
                        int64_t r1, int64_t H) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* a = a_all + r * 4 * H;
    T* da = da_all + r * 4 * H;
    const T* cp = c_prev + r * H;
    const T* cr = c + r * H;
    const T* ho = dh_out + r * dh_out_ld;
    const T* hn = dh_next + r * H;
    T* dcr = dc + r * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
      T tc = tanh_of<T>(cr[j]);
      T dh = ho[j] + hn[j];
      T dct = dcr[j] + dh * o * (T(1) - tc * tc);
      da[j] = dct * g * i * (T(1) - i);
      da[H + j] = dct * cp[j] * f * (T(1) - f);
      da[2 * H + j] = dct * i * (T(1) - g * g);
      da[3 * H + j] = dh * tc * o * (T(1) - o);
      dcr[j] = dct * f;
    }
    if (db) {
#pragma omp simd
      for (int64_t j = 0; j < 4 * H; ++j) db[j] += da[j];
    }
  }
}

// Rows of hidden units per chunk when the cell kernels run on their own (each unit costs a few
// transcendental functions, so chunks are smaller than for plain elementwise loops).
int64_t cell_grain_rows(int64_t H) {
  return std::max<int64_t>(1, 8192 / std::max<int64_t>(H, 1));
}

// Fewest batch rows worth giving a thread of its own in the sequence kernels: below this the
// per-thread GEMMs get too thin for the BLAS micro-kernels (they work on blocks of rows).
constexpr int64_t kMinRowsPerThread = 8;

int batch_threads(int64_t B) {
  int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return int(std::clamp<int64_t>(B / kMinRowsPerThread, 1, max_threads));
}

// Runs fn(r0, r1) over the batch split in `nt` contiguous shards, one per thread.
template <class Fn>
void over_batch_shards(int nt, int64_t B, Fn&& fn) {
  if (nt <= 1) {
    fn(int64_t(0), B);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int64_t k = omp_get_thread_num(), n = omp_get_num_threads();
    int64_t r0 = B * k / n, r1 = B * (k + 1) / n;
    if (r0 < r1) fn(r0, r1);
  }
}

// ---------------------------------------------------------------- cell slots
void cell_forward_cpu(Tensor& gates, const Tensor& bias, const Tensor& c_prev, Tensor& c,
                      Tensor& h) {
  int64_t B = gates.size(0), H = gates.size(1) / 4;
  dispatch_floating(gates.dtype(), "lstm_cell_forward", [&](auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(gates.data_ptr());
    const T* b = static_cast<const T*>(bias.data_ptr());
    const T* cp = static_cast<const T*>(c_prev.data_ptr());
    T* cn = static_cast<T*>(c.data_ptr());
    T* hn = static_cast<T*>(h.data_ptr());
    parallel_for(B, cell_grain_rows(H), [&](int64_t r0, int64_t r1) {
      cell_forward_rows<T>(a, b, cp, cn, hn, nullptr, 0, r0, r1, H);
    });
  });
}

void cell_backward_cpu(const Tensor& gates, const Tensor& c_prev, const Tensor& c,
                       const Tensor& dh_out, const Tensor& dh_next, Tensor& dc, Tensor& dgates) {
  int64_t B = gates.size(0), H = gates.size(1) / 4;
  dispatch_floating(gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(gates.data_ptr());
    const T* cp = static_cast<const T*>(c_prev.data_ptr());
    const T* cn = static_cast<const T*>(c.data_ptr());
    const T* ho = static_cast<const T*>(dh_out.data_ptr());
    const T* hn = static_cast<const T*>(dh_next.data_ptr());
    T* dcp = static_cast<T*>(dc.data_ptr());
    T* da = static_cast<T*>(dgates.data_ptr());
    parallel_for(B, cell_grain_rows(H), [&](int64_t r0, int64_t r1) {
      cell_backward_rows<T>(a, cp, cn, ho, H, hn, dcp, da, nullptr, r0, r1, H);
    });
  });
}

// ---------------------------------------------------------------- whole sequences
void sequence_forward_cpu(const Tensor& w_hh, const Tensor& bias, Tensor& gates, Tensor& hs,
                          Tensor& cs, Tensor& output, bool h0_zero) {
  const int64_t T = gates.size(0), B = gates.size(1), H = gates.size(2) / 4;
  dispatch_floating(gates.dtype(), "lstm_sequence_forward", [&](auto tag) {
    using T_ = decltype(tag);
    const T_* w = static_cast<const T_*>(w_hh.data_ptr());
    const T_* b = static_cast<const T_*>(bias.data_ptr());
    T_* a = static_cast<T_*>(gates.data_ptr());
    T_* h = static_cast<T_*>(hs.data_ptr());
    T_* c = static_cast<T_*>(cs.data_ptr());
    T_* out = static_cast<T_*>(output.data_ptr());
    const int64_t ga = B * 4 * H, gh = B * H;  // per-step strides
    // Step t on rows [r0, r1): gates[t] += h_{t-1}·W_hhᵀ, then the cell.
    auto step_rows = [&](int64_t t, int64_t r0, int64_t r1, bool threads_inside) {
      T_* at = a + t * ga;
      if (t > 0 || !h0_zero)
        gemm_rows<T_>(r1 - r0, 4 * H, H, h + t * gh + r0 * H, H, w, true, H, T_(1), at + r0 * 4 * H,
                      4 * H);
      auto cell = [&](int64_t s0, int64_t s1) {
        cell_forward_rows<T_>(at, b, c + t * gh, c + (t + 1) * gh, h + (t + 1) * gh, out + t * H,
                              T * H, s0, s1, H);
      };
      if (threads_inside)
        parallel_for(r1 - r0, cell_grain_rows(H),
                     [&](int64_t s0, int64_t s1) { cell(r0 + s0, r0 + s1); });
      else
        cell(r0, r1);
    };
    int nt = batch_threads(B);
    if (nt > 1) {
      over_batch_shards(nt, B, [&](int64_t r0, int64_t r1) {
        for (int64_t t = 0; t < T; ++t) step_rows(t, r0, r1, false);
      });
    } else {
      for (int64_t t = 0; t < T; ++t) step_rows(t, 0, B, true);
    }
  });
}

void sequence_backward_cpu(const Tensor& w_hh, const Tensor& gates, const Tensor& cs,
                           const Tensor& dout, Tensor& dh, Tensor& dc, Tensor& dgates,
                           Tensor& dbias, bool need_dh0) {
  const int64_t T = gates.size(0), B = gates.size(1), H = gates.size(2) / 4;
  dispatch_floating(gates.dtype(), "lstm_sequence_backward", [&](auto tag) {
    using T_ = decltype(tag);
    const T_* w = static_cast<const T_*>(w_hh.data_ptr());
    const T_* a = static_cast<const T_*>(gates.data_ptr());
    const T_* c = static_cast<const T_*>(cs.data_ptr());
    const T_* go = static_cast<const T_*>(dout.data_ptr());
    T_* dhp = static_cast<T_*>(dh.data_ptr());
    T_* dcp = static_cast<T_*>(dc.data_ptr());
    T_* da = static_cast<T_*>(dgates.data_ptr());
    const int64_t ga = B * 4 * H, gh = B * H;
    int nt = batch_threads(B);
    // Per-shard partial sums of the bias gradient, added up at the end.
    std::vector<T_> db_parts(size_t(nt) * 4 * H, T_(0));
    // Step t on rows [r0, r1): the cell, then dh_{t-1}[rows] = dA_t[rows]·W_hh (the cell has
    // already consumed dh_t[rows], so the GEMM may overwrite it).
    auto step_rows = [&](int64_t t, int64_t r0, int64_t r1, T_* db) {
      cell_backward_rows<T_>(a + t * ga, c + t * gh, c + (t + 1) * gh, go + t * H, T * H, dhp, dcp,
                             da + t * ga, db, r0, r1, H);
      if (t > 0 || need_dh0)
        gemm_rows<T_>(r1 - r0, H, 4 * H, da + t * ga + r0 * 4 * H, 4 * H, w, false, H, T_(0),
                      dhp + r0 * H, H);
    };
    if (nt > 1) {
      over_batch_shards(nt, B, [&](int64_t r0, int64_t r1) {
        T_* db = db_parts.data() + omp_get_thread_num() * 4 * H;
        for (int64_t t = T - 1; t >= 0; --t) step_rows(t, r0, r1, db);
      });
    } else {
      // The cell runs on the pool's threads (each with its own bias partial sums), the GEMM
      // on the BLAS's.
      nt = std::max(1, omp_get_max_threads());
      db_parts.assign(size_t(nt) * 4 * H, T_(0));
      for (int64_t t = T - 1; t >= 0; --t) {
        parallel_for(B, cell_grain_rows(H), [&](int64_t r0, int64_t r1) {
          T_* db = db_parts.data() + (omp_in_parallel() ? omp_get_thread_num() : 0) * 4 * H;
          cell_backward_rows<T_>(a + t * ga, c + t * gh, c + (t + 1) * gh, go + t * H, T * H, dhp,
                                 dcp, da + t * ga, db, r0, r1, H);
        });
        if (t > 0 || need_dh0)
          gemm_rows<T_>(B, H, 4 * H, da + t * ga, 4 * H, w, false, H, T_(0), dhp, H);
      }
    }
    T_* dbo = static_cast<T_*>(dbias.data_ptr());
    for (int64_t j = 0; j < 4 * H; ++j) {
      T_ s = 0;
      for (int k = 0; k < nt; ++k) s += db_parts[size_t(k) * 4 * H + j];
      dbo[j] = s;
    }
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::lstm_cell_forward, CPU, cell_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::lstm_cell_backward, CPU, cell_backward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::lstm_sequence_forward, CPU, sequence_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::lstm_sequence_backward, CPU, sequence_backward_cpu);

}  // namespace freight::cpu
