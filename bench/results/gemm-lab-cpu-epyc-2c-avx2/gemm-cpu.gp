# GEMM lab chart: gnuplot "./gemm-cpu.gp" (run in this directory)
set terminal pngcairo size 1100,800 font ',11'
set output "./gemm-cpu.png"
set title "GEMM lab, CPU: AMD EPYC, 2 cores" noenhanced
set xlabel 'n (C = A·B, all three n × n, float32)' offset 0,0.4
set ylabel 'GFLOP/s (2n³ / median time)'
set logscale x 2
set logscale y 10
set grid xtics ytics mytics
set format y '%g'
set xtics (128, 256, 512, 1024, 2048)
set xrange [102.4:2560]
set key below maxrows 4 width 2 noenhanced
set datafile missing '?'
set datafile separator '\t'
plot "./gemm-cpu.dat" using 1:2 with linespoints lw 2 pt 5 ps 1.2 dt 1 lc rgb '#cc79a7' title "(1) naive i-j-k", \
     "./gemm-cpu.dat" using 1:3 with linespoints lw 2 pt 6 ps 1.2 dt 1 lc rgb '#009e73' title "(2) loop order i-k-j", \
     "./gemm-cpu.dat" using 1:4 with linespoints lw 2 pt 7 ps 1.2 dt 1 lc rgb '#56b4e9' title "(3) cache-tiled", \
     "./gemm-cpu.dat" using 1:5 with linespoints lw 2 pt 8 ps 1.2 dt 1 lc rgb '#e69f00' title "(4) packed + 14x32 register tile", \
     "./gemm-cpu.dat" using 1:6 with linespoints lw 2 pt 9 ps 1.2 dt 2 lc rgb '#e69f00' title "(5) packed, all cores (2 threads)", \
     "./gemm-cpu.dat" using 1:7 with linespoints lw 2 pt 10 ps 1.2 dt 1 lc rgb '#000000' title "(6) OpenBLAS sgemm", \
     "./gemm-cpu.dat" using 1:8 with linespoints lw 2 pt 11 ps 1.2 dt 2 lc rgb '#000000' title "(6) OpenBLAS sgemm, all cores (2 threads)", \
     92.9484 with lines dt 3 lw 1.5 lc rgb '#a0a0a0' title "peak, 1 core", \
     1.94355 with lines dt 3 lw 1.5 lc rgb '#e69f00' title "(4) micro-kernel alone, in L1", \
     185.897 with lines dt 3 lw 1.5 lc rgb '#505050' title "peak, 2 cores"
set terminal svg size 1100,800 dynamic font ',11'
set output "./gemm-cpu.svg"
replot
