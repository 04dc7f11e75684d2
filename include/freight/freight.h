// Umbrella header of the Freight C++ API.
#pragma once
#include "freight/autograd.h"
#include "freight/device.h"
#include "freight/dtype.h"
#include "freight/error.h"
#include "freight/nn/nn.h"
#include "freight/ops.h"
#include "freight/optim/optim.h"
#include "freight/parallel_thresholds.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/shape.h"
#include "freight/tensor.h"
