"""Prints median, min and max of each side's samples/s and the ratio of the
first side's median to the second's. Used by bench/*_bench.sh:
  summarize.py "LABEL_A" "x1 x2 ..." "LABEL_B" "y1 y2 ..." [UNIT]
UNIT defaults to samples/s.
"""
import statistics
import sys

label_a, values_a, label_b, values_b = sys.argv[1:5]
unit = sys.argv[5] if len(sys.argv) > 5 else "samples/s"
a = [float(x) for x in values_a.split()]
b = [float(x) for x in values_b.split()]
for name, xs in ((label_a, a), (label_b, b)):
    print(f"{name:10s} median {statistics.median(xs):9.0f} {unit}  min {min(xs):9.0f}  max {max(xs):9.0f}")
print(f"ratio {label_a}/{label_b} (medians): {statistics.median(a) / statistics.median(b):.2f}x")
