/* One fp32 convolution layer of libxsmm's DNN API (direct algorithm), behind a small C interface:
 * freight_conv_libs is C++, and libxsmm's header-only form (libxsmm_source.h, the form Debian's
 * libxsmm-dev supports) makes every libxsmm function static to the C file that includes it,
 * xsmm_conv.c. That file owns the layer, its six tensors (input, output, filter and their
 * gradients, each in the layout libxsmm asks for) and its scratch. */
#ifndef FREIGHT_BENCH_XSMM_CONV_H
#define FREIGHT_BENCH_XSMM_CONV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct freight_xsmm_conv freight_xsmm_conv;

/* Tensor layouts: libxsmm's own channel-blocked one (activations [N][C/cb][H][W][cb], filters
 * [K/kb][C/cb][R][S][cb][kb]), or NHWC activations with RSCK filters. */
enum freight_xsmm_layout { FREIGHT_XSMM_BLOCKED = 0, FREIGHT_XSMM_NHWC = 1 };

/* Passes: forward (libxsmm's FWD), input gradient (BWD), weight gradient (UPD). */
enum freight_xsmm_pass {
  FREIGHT_XSMM_FORWARD = 0,
  FREIGHT_XSMM_INPUT_GRAD = 1,
  FREIGHT_XSMM_WEIGHT_GRAD = 2
};

/* Plain tensors for freight_xsmm_conv_set/get, NCHW activations and KCRS (OIHW) filters. */
enum freight_xsmm_tensor {
  FREIGHT_XSMM_INPUT = 0,
  FREIGHT_XSMM_OUTPUT = 1,
  FREIGHT_XSMM_FILTER = 2,
  FREIGHT_XSMM_GRAD_INPUT = 3,
  FREIGHT_XSMM_GRAD_OUTPUT = 4,
  FREIGHT_XSMM_GRAD_FILTER = 5
};

/* A layer for N images of C x H x W, K filters of C x R x R, stride and zero padding on both
 * axes, run by `threads` threads, with all six tensors and the scratch bound. Every buffer
 * starts zeroed (the input's padding rim stays so); freight_xsmm_conv_set gives the inputs
 * values. NULL when libxsmm refuses the geometry or the layout, with its reason
 * (libxsmm_dnn_get_error) in why[why_size]. */
freight_xsmm_conv* freight_xsmm_conv_create(int n, int c, int h, int w, int k, int r, int stride,
                                            int pad, int threads, enum freight_xsmm_layout layout,
                                            char* why, size_t why_size);
void freight_xsmm_conv_destroy(freight_xsmm_conv* conv);

/* Runs one pass on the layer's threads (an OpenMP team, each thread calling
 * libxsmm_dnn_execute_st). Returns 0, or -1 with libxsmm's reason in why. */
int freight_xsmm_conv_run(freight_xsmm_conv* conv, enum freight_xsmm_pass pass, char* why,
                          size_t why_size);

/* Copies a plain tensor into the layer's buffer (only the inputs: INPUT, FILTER, GRAD_OUTPUT),
 * or the layer's buffer out to a plain tensor (any), for the correctness check. */
void freight_xsmm_conv_set(freight_xsmm_conv* conv, enum freight_xsmm_tensor which,
                           const float* plain);
void freight_xsmm_conv_get(const freight_xsmm_conv* conv, enum freight_xsmm_tensor which,
                           float* plain);

/* "1.17 (release), target avx512_core": the libxsmm compiled in and the code it generates. */
const char* freight_xsmm_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FREIGHT_BENCH_XSMM_CONV_H */
