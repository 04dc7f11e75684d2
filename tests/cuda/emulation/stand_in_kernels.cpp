// Stand-ins for CUDA kernels not written yet (convolution, pooling, batch norm, LSTM, the
// optimizers), for the emulation only: each runs the slot's CPU kernel, queued on the device's
// emulated stream with its arguments copied, as a launch would be (so it is recorded into a
// graph during a capture and runs at each replay). This is valid only in the emulation, where
// device memory is host memory; it lets the emulation run whole GPU training steps (the
// trainer, uploads, graph capture and replay) before the real kernels exist. A slot that has a
// CUDA kernel keeps it: the stand-in is registered only where none is.
#include <tuple>
#include <type_traits>

#include "backend/cuda/cuda_context.h"
#include "core/kernel.h"
#include "ops/kernels/conv.h"
#include "ops/kernels/lstm.h"
#include "ops/kernels/norm.h"
#include "ops/kernels/optim.h"
#include "ops/kernels/pool.h"

namespace freight::emu_stand_in {
namespace {

template <class Sig>
struct Deferred;

template <class... A>
struct Deferred<void(A...)> {
  template <Kernel<void(A...)>* Slot>
  static void run(A... args) {
    auto cpu = Slot->get(DeviceType::CPU);
    auto copied = std::make_tuple(std::decay_t<A>(args)...);
    ::emu::enqueue(freight::cuda::stream(0), [cpu, copied]() mutable { std::apply(cpu, copied); });
  }
};

template <class Sig, Kernel<Sig>* Slot>
void stand_in() {
  if (!Slot->has(DeviceType::CUDA)) Slot->set(DeviceType::CUDA, &Deferred<Sig>::template run<Slot>);
}

template <class Sig>
Sig* signature_of(Kernel<Sig>&);

#define STAND_IN(slot) \
  stand_in<std::remove_pointer_t<decltype(signature_of(kernels::slot))>, &kernels::slot>()

struct Registration {
  Registration() {
    STAND_IN(conv2d_forward);
    STAND_IN(conv2d_backward_input);
    STAND_IN(conv2d_backward_weight);
    STAND_IN(max_pool2d_forward);
    STAND_IN(max_pool2d_backward);
    STAND_IN(avg_pool2d_forward);
    STAND_IN(avg_pool2d_backward);
    STAND_IN(batch_norm_stats);
    STAND_IN(batch_norm_update_running);
    STAND_IN(batch_norm_invstd);
    STAND_IN(batch_norm_forward);
    STAND_IN(batch_norm_backward);
    STAND_IN(lstm_cell_forward);
    STAND_IN(lstm_cell_backward);
    STAND_IN(lstm_sequence_forward);
    STAND_IN(lstm_sequence_backward);
    STAND_IN(sgd_step);
    STAND_IN(adam_step);
  }
} registration;

}  // namespace
}  // namespace freight::emu_stand_in
