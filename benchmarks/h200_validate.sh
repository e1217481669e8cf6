#!/bin/bash
# Second device session: re-capture the examples with the capture's own unprofiled clock, the fixes
# bwdiag names for them captured too (for `bwdiag diff`), and interleaved A/B runs of the decode
# example's attention backends (the cuDNN planning finding). One tarball: $OUT/h200v.tar.gz.
set -u
R=/tmp/bwdiag-h200v; rm -rf "$R"; mkdir -p "$R"
OUT=${OUT:-/tmp/bwdiag-h200v-out}; mkdir -p "$OUT"
pack() { tar czf "$OUT/.tmp" -C "$R" . && mv "$OUT/.tmp" "$OUT/h200v.tar.gz"; }
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$R/log.txt"; }
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
B="python3 -m bwdiag"
TM="--d-model 1024 --heads 16 --layers 8 --seq 1024 --batch 8 --vocab 32000"
DM="--d-model 2048 --heads 16 --layers 8 --batch 16 --prompt 1024 --tokens 32 --vocab 32000"
timeout 120 $B calibrate --device cuda > "$R/calibrate.txt" 2>&1
cap() {
    local name=$1; shift
    log "capture $name"
    timeout 120 $B run --no-analyze --force -o "$R/$name" "$@" > "$R/$name.out" 2>&1
    echo "rc=$?" >> "$R/$name.out"; rm -f "$R/$name"/.rank*.done; pack
}
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
