//===- Reference.cpp - plain C++ fp64 references --------------------------===//
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kiln::kernels {

/// The tensor's elements in row-major logical order, whatever its strides.
static std::vector<double> toDoubles(const HostTensor &t) {
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    out[i] = t.flatAt(i);
  return out;
}

/// The (batch, K/V head) pair that (batch, query head) pair `bh` reads.
static int64_t kvPair(const AttentionShape &s, int64_t bh) {
  const int64_t G = queryHeadsPerKv(s), H = s.heads;
  return bh / H * (H / G) + bh % H / G;
}

void attentionReference(const AttentionShape &s, const HostTensor &q,
                        const HostTensor &k, const HostTensor &v, HostTensor &o,
                        HostTensor &lse,
                        const std::vector<int64_t> &keyLengths) {
  const int64_t D = s.headDim, Nq = s.seqQ;
  if (s.keyLengths && int64_t(keyLengths.size()) != s.batch)
    throw Error("attentionReference: " + std::to_string(keyLengths.size()) +
                " key lengths for a batch of " + std::to_string(s.batch));
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(D));
  std::vector<double> Q = toDoubles(q), K = toDoubles(k), V = toDoubles(v);
  std::vector<double> scores(s.seqK), out(D);
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh)
    for (int64_t i = 0; i < Nq; ++i) {
      const double *qi = &Q[(bh * Nq + i) * D];
      const int64_t kvh = kvPair(s, bh);
      // K and V's rows per (batch, K/V head); the keys this batch attends to.
      const int64_t rows = s.seqK, b = bh / s.heads;
      const int64_t Nk =
          s.keyLengths ? std::clamp<int64_t>(keyLengths[size_t(b)], 0, rows)
                       : rows;
      // Causal: query i at key i, or with key lengths at Nk - Nq + i (the
      // batch's last Nq positions).
      const int64_t at = s.keyLengths ? Nk - Nq + i : i;
      int64_t last = s.causal ? std::min(at, Nk - 1) : Nk - 1;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= last; ++j) {
        const double *kj = &K[(kvh * rows + j) * D];
        double acc = 0;
        for (int64_t d = 0; d < D; ++d)
          acc += qi[d] * kj[d];
        scores[j] = acc * scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      std::fill(out.begin(), out.end(), 0.0);
      for (int64_t j = 0; j <= last; ++j) {
        double p = std::exp(scores[j] - mx);
        sum += p;
        const double *vj = &V[(kvh * rows + j) * D];
        for (int64_t d = 0; d < D; ++d)
          out[d] += p * vj[d];
      }
      for (int64_t d = 0; d < D; ++d)
        o.flatSet((bh * Nq + i) * D + d, last < 0 ? 0.0 : out[d] / sum);
      lse.flatSet(bh * Nq + i, mx + std::log(sum));
    }
}

void attentionBackwardReference(const AttentionShape &s, const HostTensor &q,
                                const HostTensor &k, const HostTensor &v,
                                const HostTensor &dO, HostTensor &dq,
                                HostTensor &dk, HostTensor &dv) {
  const int64_t D = s.headDim, Nq = s.seqQ, Nk = s.seqK;
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(D));
  std::vector<double> Q = toDoubles(q), K = toDoubles(k), V = toDoubles(v),
                      dOut = toDoubles(dO);
  std::vector<double> dQ(Q.size()), dK(K.size(), 0.0), dV(V.size(), 0.0);
  std::vector<double> p(Nk), dp(Nk);
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh)
    for (int64_t i = 0; i < Nq; ++i) {
      const double *qi = &Q[(bh * Nq + i) * D], *doi = &dOut[(bh * Nq + i) * D];
      const int64_t kvh = kvPair(s, bh);
      const int64_t last = s.causal ? std::min(i, Nk - 1) : Nk - 1;
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t j = 0; j <= last; ++j) {
        const double *kj = &K[(kvh * Nk + j) * D], *vj = &V[(kvh * Nk + j) * D];
        double acc = 0, dacc = 0;
        for (int64_t d = 0; d < D; ++d) {
          acc += qi[d] * kj[d];
          dacc += doi[d] * vj[d];
        }
        p[j] = acc * scale;
        dp[j] = dacc;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= last; ++j)
        sum += (p[j] = std::exp(p[j] - mx));
      double delta = 0;
      for (int64_t j = 0; j <= last; ++j)
        delta += (p[j] /= sum) * dp[j];
      double *dqi = &dQ[(bh * Nq + i) * D];
      for (int64_t j = 0; j <= last; ++j) {
        const double ds = p[j] * (dp[j] - delta);
        const double *kj = &K[(kvh * Nk + j) * D];
        double *dkj = &dK[(kvh * Nk + j) * D], *dvj = &dV[(kvh * Nk + j) * D];
        for (int64_t d = 0; d < D; ++d) {
          dqi[d] += scale * ds * kj[d];
          dkj[d] += scale * ds * qi[d];
          dvj[d] += p[j] * doi[d];
        }
      }
    }
  for (int64_t i = 0; i < int64_t(dQ.size()); ++i)
    dq.flatSet(i, dQ[i]);
  for (int64_t i = 0; i < int64_t(dK.size()); ++i) {
    dk.flatSet(i, dK[i]);
    dv.flatSet(i, dV[i]);
  }
}

void gemmReference(const HostTensor &a, const HostTensor &b, HostTensor &c,
                   const HostTensor *bias, GemmActivation activation,
                   const HostTensor *residual) {
  int64_t M = a.shape()[0], K = a.shape()[1], N = b.shape()[1];
  if (b.shape()[0] != K || c.shape() != std::vector<int64_t>{M, N} ||
      (bias && bias->shape() != std::vector<int64_t>{N}) ||
      (residual && residual->shape() != std::vector<int64_t>{M, N}))
    throw Error("gemmReference: shapes do not chain");
  std::vector<double> A = toDoubles(a), B = toDoubles(b), row(N);
  std::vector<double> Bias = bias ? toDoubles(*bias) : std::vector<double>(N);
  for (int64_t i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t kk = 0; kk < K; ++kk)
      for (int64_t j = 0; j < N; ++j)
        row[j] += A[i * K + kk] * B[kk * N + j];
    for (int64_t j = 0; j < N; ++j) {
      double x = row[j] + Bias[j];
      if (activation == GemmActivation::Relu)
        x = std::max(x, 0.0);
      if (activation == GemmActivation::GeluTanh)
        x = 0.5 * x *
            (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      if (residual)
        x += residual->flatAt(i * N + j);
      c.flatSet(i * N + j, x);
    }
  }
}

HostTensor transposeMatrix(const HostTensor &m) {
  if (m.shape().size() != 2)
    throw Error("transposeMatrix: a matrix (rank 2) is needed, got rank " +
                std::to_string(m.shape().size()));
  const int64_t R = m.shape()[0], C = m.shape()[1];
  HostTensor t(m.dtype(), {C, R});
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j)
      t.flatSet(j * R + i, m.flatAt(i * C + j));
  return t;
}

void ropeTables(int64_t positions, int64_t headDim, HostTensor &cos,
                HostTensor &sin) {
  const int64_t half = headDim / 2;
  if (cos.shape() != std::vector<int64_t>{positions, half} ||
      sin.shape() != cos.shape())
    throw Error("ropeTables: cos and sin must be (positions, headDim/2)");
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(10000.0, -2.0 * i / headDim);
      cos.flatSet(p * half + i, std::cos(angle));
      sin.flatSet(p * half + i, std::sin(angle));
    }
}

void rmsNormReference(const HostTensor &x, const HostTensor &w, HostTensor &y,
                      double eps) {
  const int64_t R = x.shape()[0], C = x.shape()[1];
  for (int64_t r = 0; r < R; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < C; ++j)
      ms += x.flatAt(r * C + j) * x.flatAt(r * C + j);
    const double inv = 1 / std::sqrt(ms / double(C) + eps);
    for (int64_t j = 0; j < C; ++j)
      y.flatSet(r * C + j, x.flatAt(r * C + j) * inv * w.flatAt(j));
  }
}

void layerNormReference(const HostTensor &x, const HostTensor &w,
                        const HostTensor &b, HostTensor &y, double eps) {
  const int64_t R = x.shape()[0], C = x.shape()[1];
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < C; ++j)
      mean += x.flatAt(r * C + j);
    mean /= double(C);
    for (int64_t j = 0; j < C; ++j)
      var += (x.flatAt(r * C + j) - mean) * (x.flatAt(r * C + j) - mean);
    const double inv = 1 / std::sqrt(var / double(C) + eps);
    for (int64_t j = 0; j < C; ++j)
      y.flatSet(r * C + j,
                (x.flatAt(r * C + j) - mean) * inv * w.flatAt(j) + b.flatAt(j));
  }
}

void softmaxReference(const HostTensor &x, HostTensor &y) {
  int64_t R = x.shape()[0], C = x.shape()[1];
  std::vector<double> X = toDoubles(x);
  for (int64_t r = 0; r < R; ++r) {
    const double *xr = &X[r * C];
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t c = 0; c < C; ++c)
      mx = std::max(mx, xr[c]);
    for (int64_t c = 0; c < C; ++c)
      sum += std::exp(xr[c] - mx);
    for (int64_t c = 0; c < C; ++c)
      y.flatSet(r * C + c, std::exp(xr[c] - mx) / sum);
  }
}

} // namespace kiln::kernels
