// emu_fiber_switch (include/emu_fiber.h): push the callee-saved registers, swap stack pointers,
// pop the other fiber's registers and return on its stack. The x87/SSE control words are not
// switched: no emulated thread changes rounding modes.
#include "emu_fiber.h"

asm(R"(
  .pushsection .text
  .globl emu_fiber_switch
  .type emu_fiber_switch, @function
emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_fiber_switch, .-emu_fiber_switch
  .popsection
)");
