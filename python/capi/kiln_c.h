/*===- kiln_c.h - kiln's attention behind a C ABI, for Python and others --===*
 *
 * What the Python package (python/kiln) calls through ctypes: attention's
 * forward and backward on tensors the caller allocated, on the caller's
 * stream and device. Each function returns 0, or KILN_C_BAD_INPUT /
 * KILN_C_FAILED with a message in `error` (NUL-terminated, cut to
 * `error_size`). Nothing is launched when the inputs are refused.
 *
 * Tensors are (B, H, N, D) in index order with any strides in elements
 * (a (B, N, H, D) tensor passes its strides permuted); LSE is fp32
 * (B, H, Nq), natural-log logsumexp of each row of scaled scores. K and V
 * (and dK, dV) may have fewer heads than Q, a divisor Hk of H
 * (grouped-query attention): query head h reads K/V head h / (H / Hk).
 *
 *===----------------------------------------------------------------------===*/
#ifndef KILN_C_H
#define KILN_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_C_API __attribute__((visibility("default")))

enum { KILN_C_OK = 0, KILN_C_BAD_INPUT = 1, KILN_C_FAILED = 2 };
enum {
  KILN_C_BF16 = 0,
  KILN_C_F16 = 1,
  KILN_C_F32 = 2,
  KILN_C_I32 = 3,
  KILN_C_I64 = 4
};

/* One tensor: its base and, per dimension, size and stride (elements). */
typedef struct {
  void *data;
  int64_t sizes[4];
  int64_t strides[4];
} kiln_c_tensor;

typedef struct {
  int dtype;    /* KILN_C_BF16 or KILN_C_F16 */
  int causal;   /* query i attends to keys j <= i */
  double scale; /* 0: 1/sqrt(D) */
  void *stream; /* a CUstream / cudaStream_t; NULL: the legacy default */
  int device;   /* the tensors' device ordinal */
  int deterministic; /* backward: 1 the same gradients bit for bit on every
                        run (dQ without atomics); 0 the default schedule */
  int pointers_checked; /* 1: the caller has checked that every tensor is
                           memory of `device` (the launch asks the driver
                           about none); 0: each pointer is checked */
} kiln_c_attention_options;

/* Floats of workspace the forward takes for q and k's problem (into
 * *elements; 0: none): fp32, allocated by the caller. Where the problem's
 * row blocks are too few to fill the device's SMs (decoding, short queries
 * on long keys) the forward splits the keys into ranges, each range's O and
 * logsumexp kept here until a second kernel combines them. */
KILN_C_API int kiln_c_attention_forward_workspace(
    const kiln_c_attention_options *options, const kiln_c_tensor *q,
    const kiln_c_tensor *k, int64_t *elements, char *error, size_t error_size);

/* The same for kiln_c_attention_forward_key_lengths, which splits the keys
 * into more ranges where the batches' lengths differ. */
KILN_C_API int kiln_c_attention_forward_key_lengths_workspace(
    const kiln_c_attention_options *options, const kiln_c_tensor *q,
    const kiln_c_tensor *k, int64_t *elements, char *error, size_t error_size);

/* O = softmax(scale Q Kᵀ) V and LSE. q, k, v, o: 4-D; lse: 3-D fp32;
 * workspace: kiln_c_attention_forward_workspace's floats (NULL where 0). */
KILN_C_API int kiln_c_attention_forward(
    const kiln_c_attention_options *options, const kiln_c_tensor *q,
    const kiln_c_tensor *k, const kiln_c_tensor *v, const kiln_c_tensor *o,
    const kiln_c_tensor *lse, void *workspace, char *error, size_t error_size);

/* kiln_c_attention_forward where each batch attends to its own number of
 * keys: k_lengths, 1-D int32 (B) on the device, says that batch b attends
 * to its first L = k_lengths[b] keys of Nk (new queries reading a KV cache
 * whose sequences hold different numbers of tokens; slots past a length are
 * never read, whatever they hold). Causal: the queries are the last Nq of
 * the L positions (query i sees keys j <= L - Nq + i: aligned at the bottom
 * right). Lengths outside [0, Nk] are clamped; a row of no keys gets O 0 and
 * LSE -inf. The workspace is
 * kiln_c_attention_forward_key_lengths_workspace's for q and k. No
 * backward. */
KILN_C_API int kiln_c_attention_forward_key_lengths(
    const kiln_c_attention_options *options, const kiln_c_tensor *q,
    const kiln_c_tensor *k, const kiln_c_tensor *v,
    const kiln_c_tensor *k_lengths, const kiln_c_tensor *o,
    const kiln_c_tensor *lse, void *workspace, char *error, size_t error_size);

/* Floats of workspace the backward takes for this problem: fp32,
 * contiguous, allocated by the caller (B·H·(2·round_up(Nq, 4) + Nq·D)):
 * per-row statistics and dQ's accumulator. */
KILN_C_API int64_t kiln_c_attention_backward_workspace(int64_t batch,
                                                       int64_t heads,
                                                       int64_t seq_q,
                                                       int64_t head_dim);

/* dQ, dK, dV from the forward's inputs, O and LSE and the gradient of O,
 * with the backward's default schedule (AttentionBackwardConfig). */
KILN_C_API int kiln_c_attention_backward(const kiln_c_attention_options *options,
                              const kiln_c_tensor *q, const kiln_c_tensor *k,
                              const kiln_c_tensor *v, const kiln_c_tensor *o,
                              const kiln_c_tensor *d_o,
                              const kiln_c_tensor *lse, void *workspace,
                              const kiln_c_tensor *d_q,
                              const kiln_c_tensor *d_k,
                              const kiln_c_tensor *d_v, char *error,
                              size_t error_size);

/* The element types of a row norm's tensors, each KILN_C_BF16 or
 * KILN_C_F32: x (and dx), w (and b), y (and dy). Under bf16 autocast kiln's
 * norms read fp32 x, w and b as they are and write bf16 y. */
typedef struct {
  int x, w, y;
} kiln_c_row_norm_dtypes;

/* Y = RMSNorm(X) * W (kind 0) or LayerNorm(X) * W + B (kind 1) over the
 * rows of x and y (2-D, rows contiguous) with w and b (1-D, cols), any
 * cols, of `dtypes` (NULL: all bf16); fp32 math; the schedule tuned for
 * cols and dtypes on first use.
 * Launched on `stream` on device `device`. b is ignored for kind 0. */
KILN_C_API int kiln_c_row_norm(int kind, const kiln_c_row_norm_dtypes *dtypes,
                               const kiln_c_tensor *x, const kiln_c_tensor *w,
                               const kiln_c_tensor *b, const kiln_c_tensor *y,
                               double eps, void *stream, int device,
                               char *error, size_t error_size);

/* The gradients of kiln_c_row_norm: dx (x's dtype) from x, w and dy (y's
 * dtype; rows contiguous), and the fp32 partial sums dw_partial (and, kind
 * 1, db_partial) (P, cols), one row per program of P: dW (dB) is the sum of
 * their rows, which the caller takes. P (any >= 1;
 * kiln_c_row_norm_backward_programs gives the one kiln tunes for) is
 * dw_partial's row count. b_partial is ignored for kind 0. */
KILN_C_API int kiln_c_row_norm_backward(
    int kind, const kiln_c_row_norm_dtypes *dtypes, const kiln_c_tensor *x,
    const kiln_c_tensor *w, const kiln_c_tensor *dy, const kiln_c_tensor *dx,
    const kiln_c_tensor *dw_partial, const kiln_c_tensor *db_partial,
    double eps, void *stream, int device, char *error, size_t error_size);

/* The P kiln_c_row_norm_backward is tuned for at `rows` rows on a GPU of
 * `sm_count` SMs (two programs per SM, at most one a row). */
KILN_C_API int64_t kiln_c_row_norm_backward_programs(int64_t rows,
                                                     int64_t sm_count);

/* The K ranges S kiln splits an (M x K)·(K x N) "linear" without bias,
 * activation or Z into on a GPU of `sm_count` SMs; 1: not split (C (M, N)
 * then). */
KILN_C_API int64_t kiln_c_linear_split_k(int64_t m, int64_t n, int64_t k,
                                         int64_t sm_count);

/* A tensor argument of a library kernel, by the kernel's name for it. */
typedef struct {
  const char *name; /* "X", "Labels", ... */
  int dtype;        /* KILN_C_BF16 ... KILN_C_I64 */
  int rank;         /* 1..4: the first `rank` sizes and strides count */
  kiln_c_tensor tensor;
} kiln_c_named_tensor;

/* A library kernel other than attention on named tensors, its schedule
 * tuned for the problem's class on first use (then read from the tuning
 * database), launched on `stream` on device `device`:
 *   "rotary": X, Y (H, T, D) bf16, Pos (T) i32, Cos, Sin (P, D/2) f32;
 *     option 1: the inverse rotation (the gradient).
 *   "cross_entropy_fwd": X (R, V) bf16, Labels (R) i64, LSE, Loss (R) f32;
 *     option: the ignored label.
 *   "cross_entropy_bwd": X, Labels, LSE, Scale (1) f32, DLoss (R) f32 (or
 *     none: 1 for every row), DX (R, V) bf16; option: the ignored label.
 *   "linear": A (M, K) or AT (K, M), B (K, N) or BT (N, K) (nn.Linear's
 *     weight as stored), C (M, N) bf16, Bias (N) bf16 (optional), Z (M, N)
 *     bf16 (optional: the pre-activation); option 0: no activation, 1:
 *     ReLU, 2: GELU (tanh form). Or C (S, M, N) f32 with S >= 2, no Bias,
 *     Z or activation: the products of S ranges of K, stored apart, which
 *     the caller sums (kiln_c_linear_split_k gives the S kiln chooses).
 * Bad input (a missing or misshapen tensor, an unknown op) is refused
 * before anything is launched. */
KILN_C_API int kiln_c_op(const char *op, int64_t option,
                         const kiln_c_named_tensor *tensors, int count,
                         void *stream, int device, char *error,
                         size_t error_size);

/* Launch-ready kernel variants the library has loaded (one per problem and
 * alignment variant; problems past the 256 most recently used are
 * forgotten), and how many compiles the process made. */
KILN_C_API void kiln_c_cache_stats(int64_t *variants, int64_t *compiles);

KILN_C_API const char *kiln_c_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_H */
