// Umbrella header of freight::optim: optimizers and learning-rate schedules.
#pragma once
#include "freight/optim/optimizer.h"
#include "freight/optim/schedule.h"
