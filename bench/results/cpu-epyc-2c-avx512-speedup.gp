# written by freight bench
datafile = "./cpu-epyc-2c-avx512-speedup.dat"
out = "./cpu-epyc-2c-avx512-speedup"
title = "freight bench, AMD EPYC"
nkinds = 2
array kind_id[2] = ["pytorch_cpu_t2", "threads"]
array kind_title[2] = ["Freight over PyTorch, cpu, best-tuned", "Freight on the CPU: 2 threads over 1"]
array kind_models[2] = ["mlp mnist-cnn lenet5 lstm-rows fcn5 alexnet-cifar resnet56-cifar lstm-ptb", "mlp mnist-cnn lenet5 lstm-rows fcn5 alexnet-cifar resnet56-cifar lstm-ptb"]

# freight bench: speedup against batch size, one panel per kind of speedup (GPU over CPU,
# Freight over PyTorch, all CPU threads over one), one line per model.
#
# `freight bench` compiles this file in and writes it beside its data with these variables set
# first (re-run it there with `gnuplot <name>-speedup.gp` after editing):
#   datafile    rows "kind model batch speedup", sorted by kind, model, batch
#   out         output stem: writes out.png and out.svg
#   title       the figure's title
#   nkinds      number of panels, and arrays kind_id[nkinds] (first column of the data),
#               kind_title[nkinds] and kind_models[nkinds] (the models of a panel, as words)
if (!exists("datafile")) datafile = "bench-speedup.dat"
if (!exists("out")) out = "bench-speedup"
if (!exists("title")) title = "freight bench: speedup against batch size"

set datafile separator whitespace
set logscale x 2
set logscale y 2
set format y "%gx"
set xlabel "batch size"
set ylabel "speedup (higher is better)"
set grid xtics ytics mytics lc "gray90"
set key top left Left reverse box opaque samplen 2 font ",9"
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
set style data linespoints

do for [fmt in "png svg"] {
  if (fmt eq "png") {
    set terminal pngcairo size 520*nkinds, 460 enhanced font "sans,10"
  } else {
    set terminal svg size 520*nkinds, 460 dynamic enhanced font "sans,10"
  }
  set output out.".".fmt
  set multiplot layout 1, nkinds title title
  do for [k = 1:nkinds] {
    set title kind_title[k] font ",10"
    id = kind_id[k]
    plot for [m in kind_models[k]] datafile \
           using (strcol(1) eq id && strcol(2) eq m ? $3 : NaN):4 lw 2 pt 7 ps 0.8 title m, \
         1 with lines dt 2 lc "gray40" notitle
  }
  unset multiplot
  set output
}
