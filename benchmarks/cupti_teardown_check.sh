#!/bin/bash
# Does `bwdiag run` leave the script slower after its window? The tiny training example's own
# "steps 10-39" figure, plain, under bwdiag run (which sets TEARDOWN_CUPTI=1), and under bwdiag run
# with TEARDOWN_CUPTI=0 (Kineto keeps CUPTI attached): two interleaved rounds. Run on a CUDA machine.
NAME=cupti
. benchmarks/device_common.sh
for r in 1 2; do
  echo "plain $(python3 examples/train_transformer.py --steps 40 | tail -1)"
  echo "bwdiag-new $($B run --no-analyze --force -o "$R/a" examples/train_transformer.py --steps 40 2>/dev/null | tail -1)"
  echo "bwdiag-old $(TEARDOWN_CUPTI=0 $B run --no-analyze --force -o "$R/b" examples/train_transformer.py --steps 40 2>/dev/null | tail -1)"
done
