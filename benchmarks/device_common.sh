# Shared by the device-session scripts (sourced, from the repository root): set NAME first.
#   R: the results folder; pack: tar it into $OUT/$NAME.tar.gz (atomically, after each phase, so a run
#   stopped at its limit still returns what it finished); log: a timestamped line; cap NAME ARGS…: one
#   `bwdiag run --no-analyze` into $R/NAME; B, TM, DM: the bwdiag command and the medium model sizes.
# Wheels missing on the device (orjson) travel in .whl/ and are installed into /tmp/site.
R=/tmp/bwdiag-$NAME; rm -rf "$R"; mkdir -p "$R"
OUT=${OUT:-/tmp/bwdiag-$NAME-out}; mkdir -p "$OUT"
pack() { tar czf "$OUT/.$NAME.tmp" -C "$R" . && mv "$OUT/.$NAME.tmp" "$OUT/$NAME.tar.gz"; }
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
cap() {
    local name=$1; shift
    log "capture $name"
    timeout 120 $B run --no-analyze --force -o "$R/$name" "$@" > "$R/$name.out" 2>&1
    echo "rc=$?" >> "$R/$name.out"; rm -f "$R/$name"/.rank*.done; pack
}
