# Roofline of "mlp": each layer at (FLOPs/byte, achieved GFLOP/s)
# under min(peak, intensity x bandwidth) from the measured peaks. Regenerate: gnuplot "./bench/results/explain-cpu-epyc-2c-avx2/mlp.gp"
set logscale xy
set grid
set key top left
set xrange [0.01:100]
set yrange [0.1:1000]
set xlabel 'arithmetic intensity (FLOP/byte)'
set ylabel 'GFLOP/s'
set title "mlp: roofline, batch 64"
peak0 = 152.862
bw0 = 24.4994
roof0(x) = x * bw0 < peak0 ? x * bw0 : peak0
set terminal pngcairo size 1000,700
set output "./bench/results/explain-cpu-epyc-2c-avx2/mlp.png"
plot roof0(x) with lines lw 2 lc rgb '#1f77b4' title "cpu roof: 153 GFLOP/s, 24.5 GB/s", \
     "./bench/results/explain-cpu-epyc-2c-avx2/mlp.dat" using 1:2:(1+20*$3) with points pt 7 ps variable lc rgb '#1f77b4' title "cpu layers (size: share of step)", \
     "./bench/results/explain-cpu-epyc-2c-avx2/mlp.dat" using 1:2:4 with labels offset 1,0.6 font ',8' tc rgb '#1f77b4' notitle
set terminal svg size 1000,700 dynamic
set output "./bench/results/explain-cpu-epyc-2c-avx2/mlp.svg"
replot
unset output
