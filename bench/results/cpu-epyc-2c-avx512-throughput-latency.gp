# written by freight bench
datafile = "./cpu-epyc-2c-avx512-throughput-latency.dat"
out = "./cpu-epyc-2c-avx512-throughput-latency"
title = "freight bench, AMD EPYC"
nseries = 4
array series_id[4] = ["freight_cpu_t1", "pytorch_cpu_t1", "freight_cpu_t2", "pytorch_cpu_t2"]
array series_title[4] = ["Freight, cpu, 1 thread", "PyTorch, cpu, 1 thread (faster BLAS)", "Freight, cpu, 2 threads", "PyTorch, cpu, best-tuned (up to 2 threads)"]

# freight bench: throughput against latency. One point per model and system (Freight or
# PyTorch on a device and thread setting): x is the batch-1 inference latency (forward, eval
# mode, no grad: the Ferrari's lap time), y the best training throughput over the batch sizes
# measured (samples/s: the truck's load per hour). Lower right is a latency machine, upper left
# a throughput machine.
#
# `freight bench` compiles this file in and writes it beside its data with these variables set
# first (re-run it there with `gnuplot <name>-throughput-latency.gp`):
#   datafile    rows "series model latency_ms samples_per_s"
#   out         output stem: writes out.png and out.svg
#   title       the figure's title
#   nseries     number of systems, and arrays series_id[nseries] (first column of the data) and
#               series_title[nseries]
if (!exists("datafile")) datafile = "bench-throughput-latency.dat"
if (!exists("out")) out = "bench-throughput-latency"
if (!exists("title")) title = "freight bench: training throughput against batch-1 latency"

set datafile separator whitespace
set logscale x 10
set logscale y 10
set format x "%g"
set format y "10^{%T}"
set xlabel "batch-1 inference latency, ms (lower is better)"
set ylabel "training throughput, samples/s (higher is better)"
set grid xtics ytics mxtics mytics lc "gray90"
set key outside right top Left reverse samplen 1 font ",9"
set offsets graph 0.08, graph 0.15, graph 0.1, graph 0.1

do for [fmt in "png svg"] {
  if (fmt eq "png") {
    set terminal pngcairo size 900, 560 enhanced font "sans,10"
  } else {
    set terminal svg size 900, 560 dynamic enhanced font "sans,10"
  }
  set output out.".".fmt
  set title title
  plot for [s = 1:nseries] datafile \
         using (strcol(1) eq series_id[s] ? $3 : NaN):4 with points pt (s % 2 ? 7 : 5) ps 1.3 \
         lc s title series_title[s], \
       for [s = 1:nseries] datafile \
         using (strcol(1) eq series_id[s] ? $3 : NaN):4:2 with labels offset char 0.6, char 0.6 \
         left font ",8" tc lt s notitle
  set output
}
