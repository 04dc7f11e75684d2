/* libxsmm's fp32 direct convolution for freight_conv_libs (see xsmm_conv.h). This file compiles
 * libxsmm itself: libxsmm_source.h pulls in the library's sources (Debian's libxsmm-dev ships
 * them in /usr/include/libxsmm/), which bench/CMakeLists.txt makes reachable as "../src/". */
/* "Configured" header-only: the only difference from the default is that the version macros
 * (LIBXSMM_VERSION, LIBXSMM_BRANCH) come from the installed libxsmm_version.h instead of being
 * empty. */
#define LIBXSMM_CONFIGURED
#include <libxsmm_source.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xsmm_conv.h"

enum { kTensors = 6, kDimTypes = 10 };

/* One of the layer's tensors: libxsmm's layout, our buffer, libxsmm's handle on it. */
struct slot {
  libxsmm_dnn_tensor_datalayout* layout;
  libxsmm_dnn_tensor* tensor;
  float* data;
  size_t elems;
  int pad_h, pad_w; /* zero rim of a physically padded activation buffer */
};

struct freight_xsmm_conv {
  libxsmm_dnn_layer* layer;
  int n, c, h, w, k, r, oh, ow, threads;
  struct slot slot[kTensors]; /* indexed by enum freight_xsmm_tensor */
  void* scratch;
};

static const libxsmm_dnn_tensor_type kTypes[kTensors] = {
    LIBXSMM_DNN_REGULAR_INPUT,  LIBXSMM_DNN_REGULAR_OUTPUT,  LIBXSMM_DNN_REGULAR_FILTER,
    LIBXSMM_DNN_GRADIENT_INPUT, LIBXSMM_DNN_GRADIENT_OUTPUT, LIBXSMM_DNN_GRADIENT_FILTER};

static void say(char* why, size_t why_size, const char* what, libxsmm_dnn_err_t status) {
  if (why && why_size) snprintf(why, why_size, "%s: %s", what, libxsmm_dnn_get_error(status));
}

static int is_filter(int which) {
  return which == FREIGHT_XSMM_FILTER || which == FREIGHT_XSMM_GRAD_FILTER;
}
static int is_input_side(int which) {
  return which == FREIGHT_XSMM_INPUT || which == FREIGHT_XSMM_GRAD_INPUT;
}

/* Size of the layout's dimension of type `type` (the first one, for a blocked type). */
static unsigned dim_of(const libxsmm_dnn_tensor_datalayout* l, libxsmm_dnn_tensor_dimtype type) {
  unsigned d;
  for (d = 0; d < l->num_dims; ++d)
    if (l->dim_type[d] == type) return l->dim_size[d];
  return 0;
}

/* Offset in the layout of the element whose coordinate along each dimension type is
 * coord[type]. The layout lists dimensions innermost first; a type listed twice (a blocked
 * channel) is split there: the inner entry takes coord % block, the outer one the quotient. */
static size_t offset_of(const struct slot* s, const int coord_in[kDimTypes]) {
  int coord[kDimTypes];
  size_t offset = 0, stride = 1;
  unsigned d;
  memcpy(coord, coord_in, sizeof coord);
  coord[LIBXSMM_DNN_TENSOR_DIMTYPE_H] += s->pad_h;
  coord[LIBXSMM_DNN_TENSOR_DIMTYPE_W] += s->pad_w;
  for (d = 0; d < s->layout->num_dims; ++d) {
    const int type = (int)s->layout->dim_type[d];
    const int size = (int)s->layout->dim_size[d];
    offset += (size_t)(coord[type] % size) * stride;
    coord[type] /= size;
    stride *= (size_t)size;
  }
  return offset;
}

/* Visits every element of the plain tensor `which` (NCHW or KCRS, row-major) with its offset in
 * the layer's buffer: copy in (to_layer) or out. */
static void exchange(const freight_xsmm_conv* conv, int which, float* plain, int to_layer) {
  const struct slot* s = &conv->slot[which];
  int coord[kDimTypes] = {0};
  size_t i = 0;
  if (is_filter(which)) {
    int k, c, r, q;
    for (k = 0; k < conv->k; ++k)
      for (c = 0; c < conv->c; ++c)
        for (r = 0; r < conv->r; ++r)
          for (q = 0; q < conv->r; ++q, ++i) {
            size_t at;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_K] = k;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_C] = c;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_R] = r;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_S] = q;
            at = offset_of(s, coord);
            if (to_layer)
              s->data[at] = plain[i];
            else
              plain[i] = s->data[at];
          }
  } else {
    const int channels = is_input_side(which) ? conv->c : conv->k;
    const int height = is_input_side(which) ? conv->h : conv->oh;
    const int width = is_input_side(which) ? conv->w : conv->ow;
    int n, c, y, x;
    for (n = 0; n < conv->n; ++n)
      for (c = 0; c < channels; ++c)
        for (y = 0; y < height; ++y)
          for (x = 0; x < width; ++x, ++i) {
            size_t at;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_N] = n;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_C] = c;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_H] = y;
            coord[LIBXSMM_DNN_TENSOR_DIMTYPE_W] = x;
            at = offset_of(s, coord);
            if (to_layer)
              s->data[at] = plain[i];
            else
              plain[i] = s->data[at];
          }
  }
}

void freight_xsmm_conv_set(freight_xsmm_conv* conv, enum freight_xsmm_tensor which,
                           const float* plain) {
  exchange(conv, (int)which, (float*)plain, 1);
}

void freight_xsmm_conv_get(const freight_xsmm_conv* conv, enum freight_xsmm_tensor which,
                           float* plain) {
  exchange(conv, (int)which, plain, 0);
}

void freight_xsmm_conv_destroy(freight_xsmm_conv* conv) {
  int i;
  if (!conv) return;
  for (i = 0; i < kTensors; ++i) {
    struct slot* s = &conv->slot[i];
    if (s->tensor) {
      libxsmm_dnn_release_tensor(conv->layer, kTypes[i]);
      libxsmm_dnn_destroy_tensor(s->tensor);
    }
    if (s->layout) libxsmm_dnn_destroy_tensor_datalayout(s->layout);
    free(s->data);
  }
  if (conv->scratch) libxsmm_dnn_release_scratch(conv->layer, LIBXSMM_DNN_COMPUTE_KIND_ALL);
  if (conv->layer) libxsmm_dnn_destroy_conv_layer(conv->layer);
  free(conv->scratch);
  free(conv);
}

freight_xsmm_conv* freight_xsmm_conv_create(int n, int c, int h, int w, int k, int r, int stride,
                                            int pad, int threads, enum freight_xsmm_layout layout,
                                            char* why, size_t why_size) {
  libxsmm_dnn_conv_desc desc;
  libxsmm_dnn_err_t status = LIBXSMM_DNN_SUCCESS;
  freight_xsmm_conv* conv;
  size_t scratch_size;
  int i;

  libxsmm_init();
  conv = (freight_xsmm_conv*)calloc(1, sizeof *conv);
  if (!conv) return NULL;
  conv->n = n, conv->c = c, conv->h = h, conv->w = w, conv->k = k, conv->r = r;
  conv->oh = (h + 2 * pad - r) / stride + 1;
  conv->ow = (w + 2 * pad - r) / stride + 1;
  conv->threads = threads;

  memset(&desc, 0, sizeof desc);
  desc.N = n, desc.C = c, desc.H = h, desc.W = w, desc.K = k, desc.R = r, desc.S = r;
  desc.u = stride, desc.v = stride;
  /* Physical padding: the input buffers carry the zero rim (with pad_*_in == pad_*, libxsmm
   * reads the rim instead of copying each image into a padded scratch); the output buffers
   * have none. */
  desc.pad_h = pad, desc.pad_w = pad, desc.pad_h_in = pad, desc.pad_w_in = pad;
  desc.pad_h_out = 0, desc.pad_w_out = 0;
  desc.threads = threads;
  desc.datatype_in = LIBXSMM_DNN_DATATYPE_F32;
  desc.datatype_out = LIBXSMM_DNN_DATATYPE_F32;
  desc.buffer_format = layout == FREIGHT_XSMM_NHWC ? LIBXSMM_DNN_TENSOR_FORMAT_NHWC
                                                   : LIBXSMM_DNN_TENSOR_FORMAT_LIBXSMM;
  desc.filter_format = layout == FREIGHT_XSMM_NHWC ? LIBXSMM_DNN_TENSOR_FORMAT_RSCK
                                                   : LIBXSMM_DNN_TENSOR_FORMAT_LIBXSMM;
  desc.algo = LIBXSMM_DNN_CONV_ALGO_DIRECT;
  desc.options = LIBXSMM_DNN_CONV_OPTION_OVERWRITE; /* results replace, not add to, the buffers */
  desc.fuse_ops = LIBXSMM_DNN_CONV_FUSE_NONE;

  conv->layer = libxsmm_dnn_create_conv_layer(desc, &status);
  if (!conv->layer || status != LIBXSMM_DNN_SUCCESS) {
    say(why, why_size, "create_conv_layer", status);
    conv->layer = NULL; /* (libxsmm returns none when its setup fails) */
    freight_xsmm_conv_destroy(conv);
    return NULL;
  }
  for (i = 0; i < kTensors; ++i) {
    struct slot* s = &conv->slot[i];
    unsigned d;
    s->layout = libxsmm_dnn_create_tensor_datalayout(conv->layer, kTypes[i], &status);
    if (!s->layout || status != LIBXSMM_DNN_SUCCESS) {
      say(why, why_size, "create_tensor_datalayout", status);
      freight_xsmm_conv_destroy(conv);
      return NULL;
    }
    s->elems = 1;
    for (d = 0; d < s->layout->num_dims; ++d) s->elems *= s->layout->dim_size[d];
    if (!is_filter(i)) {
      const int height = is_input_side(i) ? h : conv->oh, width = is_input_side(i) ? w : conv->ow;
      s->pad_h = ((int)dim_of(s->layout, LIBXSMM_DNN_TENSOR_DIMTYPE_H) - height) / 2;
      s->pad_w = ((int)dim_of(s->layout, LIBXSMM_DNN_TENSOR_DIMTYPE_W) - width) / 2;
    }
    /* Zeroed: the padding rim of the input buffers must read as zeros. */
    if (posix_memalign((void**)&s->data, 64, s->elems * sizeof(float)) != 0) s->data = NULL;
    if (!s->data) {
      snprintf(why, why_size, "out of memory");
      freight_xsmm_conv_destroy(conv);
      return NULL;
    }
    memset(s->data, 0, s->elems * sizeof(float));
    s->tensor = libxsmm_dnn_link_tensor(s->layout, s->data, &status);
    if (s->tensor && status == LIBXSMM_DNN_SUCCESS)
      status = libxsmm_dnn_bind_tensor(conv->layer, s->tensor, kTypes[i]);
    if (!s->tensor || status != LIBXSMM_DNN_SUCCESS) {
      say(why, why_size, "link/bind_tensor", status);
      freight_xsmm_conv_destroy(conv);
      return NULL;
    }
  }
  scratch_size = libxsmm_dnn_get_scratch_size(conv->layer, LIBXSMM_DNN_COMPUTE_KIND_ALL, &status);
  if (status == LIBXSMM_DNN_SUCCESS) {
    if (posix_memalign(&conv->scratch, 64, scratch_size ? scratch_size : 64) != 0)
      conv->scratch = NULL;
    status = conv->scratch ? libxsmm_dnn_bind_scratch(conv->layer, LIBXSMM_DNN_COMPUTE_KIND_ALL,
                                                      conv->scratch)
                           : LIBXSMM_DNN_ERR_SCRATCH_NOT_ALLOCED;
  }
  if (status != LIBXSMM_DNN_SUCCESS) {
    say(why, why_size, "scratch", status);
    freight_xsmm_conv_destroy(conv);
    return NULL;
  }
  return conv;
}

int freight_xsmm_conv_run(freight_xsmm_conv* conv, enum freight_xsmm_pass pass, char* why,
                          size_t why_size) {
  const libxsmm_dnn_compute_kind kind = pass == FREIGHT_XSMM_FORWARD ? LIBXSMM_DNN_COMPUTE_KIND_FWD
                                        : pass == FREIGHT_XSMM_INPUT_GRAD
                                            ? LIBXSMM_DNN_COMPUTE_KIND_BWD
                                            : LIBXSMM_DNN_COMPUTE_KIND_UPD;
  libxsmm_dnn_err_t failed = LIBXSMM_DNN_SUCCESS;
  int team = 0;
#pragma omp parallel num_threads(conv->threads)
  {
    /* libxsmm splits the work for desc.threads threads and meets at barriers: a smaller team
     * (a nested region, a thread limit) would wait forever, so it does not start. */
    const int tid = omp_get_thread_num();
    if (tid == 0) team = omp_get_num_threads();
    if (omp_get_num_threads() == conv->threads) {
      const libxsmm_dnn_err_t status = libxsmm_dnn_execute_st(conv->layer, kind, 0, tid);
      if (status != LIBXSMM_DNN_SUCCESS) {
#pragma omp critical(freight_xsmm_status)
        failed = status;
      }
    }
  }
  if (team != conv->threads) {
    snprintf(why, why_size, "OpenMP gave %d threads of %d", team, conv->threads);
    return -1;
  }
  if (failed != LIBXSMM_DNN_SUCCESS) {
    say(why, why_size, "execute_st", failed);
    return -1;
  }
  return 0;
}

const char* freight_xsmm_version(void) {
  static char text[96];
  libxsmm_init();
  snprintf(text, sizeof text, "%s (%s), code for %s", LIBXSMM_VERSION, LIBXSMM_BRANCH,
           libxsmm_get_target_arch());
  return text;
}
