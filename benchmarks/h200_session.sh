#!/bin/bash
# One device session on a GPU machine (the lent H200), run from the repository root:
#   calibrate, capture the examples (training in bf16, KV-cache decode; a tiny and a medium size each),
#   Nsight Compute's DRAM bytes for benchmarks/ncu_bytes.py, and interleaved A/B timing of the training
#   example's fixes (benchmarks/gpu_ab.py). Everything lands in one tarball, $OUT/h200.tar.gz (rewritten
#   after each phase, so a run stopped at its limit still returns what it finished).
# Needs bwdiag's dependencies on that machine; wheels missing there (orjson) travel in .whl/.
# Phases are skipped once BUDGET seconds have passed.
set -u
BUDGET=${BUDGET:-500}
NAME=h200
. benchmarks/device_common.sh
left() { [ "$SECONDS" -lt "$1" ] || { log "skipped: $2 (past ${1}s)"; return 1; }; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nproc; command -v ncu; } > "$R/machine.txt" 2>&1

log calibrate
timeout 150 $B calibrate --device cuda > "$R/calibrate.txt" 2>&1; echo "rc=$?" >> "$R/calibrate.txt"
cp ~/.cache/bwdiag/*.json "$R/" 2>/dev/null; pack

cap train_transformer_h200 examples/train_transformer.py --steps 30
cap train_transformer_medium_h200 examples/train_transformer.py --steps 30 $TM
cap decode_kv_cache_h200 examples/decode_kv_cache.py --tokens 32
cap decode_kv_cache_medium_h200 examples/decode_kv_cache.py $DM

if left 200 "plain runs"; then
    log "plain runs"
    python3 examples/train_transformer.py --steps 30 > "$R/plain_train_tiny.txt" 2>&1
    python3 examples/train_transformer.py --steps 30 $TM > "$R/plain_train_medium.txt" 2>&1
    python3 examples/decode_kv_cache.py --tokens 32 > "$R/plain_decode_tiny.txt" 2>&1
    python3 examples/decode_kv_cache.py $DM > "$R/plain_decode_medium.txt" 2>&1
    pack
fi

if left 260 "ncu"; then
    log "ncu: bwdiag capture"
    timeout 90 $B run --no-analyze --force --step-on label:measure --wait 1 --warmup 1 --active 1 \
        -o "$R/ncu_bytes" benchmarks/ncu_bytes.py > "$R/ncu_bytes.out" 2>&1
    rm -f "$R/ncu_bytes"/.rank*.done
    log "ncu: counters"
    timeout 150 ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum \
        --nvtx --nvtx-include "measure/" --print-units base --csv --log-file "$R/ncu_bytes/ncu.csv" \
        python3 benchmarks/ncu_bytes.py --nvtx > "$R/ncu.out" 2>&1
    echo "rc=$?" >> "$R/ncu.out"; pack
fi

if left 330 "A/B tiny"; then
    log "A/B tiny"
    timeout 150 python3 benchmarks/gpu_ab.py --rounds 7 --steps 20 --variants base,fused,graphs,graphs+fused \
        > "$R/ab_tiny.json" 2> "$R/ab_tiny.err"; pack
fi
if left 400 "after capture (fused AdamW)"; then
    cap train_transformer_h200_fused examples/train_transformer.py --steps 30 --fused-adamw
fi
if left 420 "A/B medium"; then
    log "A/B medium"
    timeout $((BUDGET + 40 - SECONDS)) python3 benchmarks/gpu_ab.py --rounds 7 --steps 8 \
        --variants base,fused,graphs $TM > "$R/ab_medium.json" 2> "$R/ab_medium.err"; pack
fi
log done; pack
