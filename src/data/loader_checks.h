// The checks a dataset and loader options pass before batches are made from them, shared by the
// host Loader and the GPU-resident DeviceData (--data-on-device); `who` starts each message.
#pragma once
#include "freight/data/loader.h"

namespace freight::data {

void check_loader_inputs(const Dataset& dataset, const LoaderOptions& options, const char* who);

}  // namespace freight::data
