// Umbrella header of freight::nn: modules, layers, LSTM, containers.
#pragma once
#include "freight/nn/container.h"
#include "freight/nn/layers.h"
#include "freight/nn/lstm.h"
#include "freight/nn/module.h"
