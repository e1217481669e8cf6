#!/bin/bash
# Second device session: re-capture the examples with the capture's own unprofiled clock, the fixes
# bwdiag names for them captured too (for `bwdiag diff`), and interleaved A/B runs of the decode
# example's attention backends (the cuDNN planning finding). One tarball: $OUT/h200v.tar.gz.
set -u
NAME=h200v
. benchmarks/device_common.sh
timeout 120 $B calibrate --device cuda > "$R/calibrate.txt" 2>&1
cap train_transformer_h200 examples/train_transformer.py --steps 30
cap train_transformer_medium_h200 examples/train_transformer.py --steps 30 $TM
cap decode_kv_cache_h200 examples/decode_kv_cache.py --tokens 32
cap decode_kv_cache_medium_h200 examples/decode_kv_cache.py $DM
cap decode_kv_cache_h200_flash examples/decode_kv_cache.py --tokens 32 --sdpa-backend flash
cap decode_kv_cache_medium_h200_flash examples/decode_kv_cache.py $DM --sdpa-backend flash
cap train_transformer_h200_graphs examples/train_transformer.py --steps 30 --compile reduce-overhead
log "decode A/B"
for round in 1 2 3; do
    for backend in default flash efficient; do
        echo "round $round $backend tiny $(python3 examples/decode_kv_cache.py --tokens 32 --sdpa-backend $backend 2>&1 | tail -1)" >> "$R/decode_ab.txt"
        echo "round $round $backend medium $(python3 examples/decode_kv_cache.py $DM --sdpa-backend $backend 2>&1 | tail -1)" >> "$R/decode_ab.txt"
    done
done
pack
log "train plain"
for round in 1 2 3; do
    echo "round $round tiny $(python3 examples/train_transformer.py --steps 40 2>&1 | tail -1)" >> "$R/train_plain.txt"
    echo "round $round medium $(python3 examples/train_transformer.py --steps 40 $TM 2>&1 | tail -1)" >> "$R/train_plain.txt"
done
log done; pack
