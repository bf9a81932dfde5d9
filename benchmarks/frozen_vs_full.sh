#!/usr/bin/env bash
# Wall time of one `mlrc` run at the default budget with the frozen-trunk mode vs without
# (issue 5's report), back to back on the same machine: full training, frozen with the feature
# cache empty (features computed), frozen again (cache hit). Each run gets its own output
# folders under $OUT and a fresh $DMLBENCH_CACHE, so nothing is reused between the first two.
#
#   bash benchmarks/frozen_vs_full.sh [DATA_DIR] [LOSS]
#
# Prints the process wall time of each run; the records (under $OUT/results/<run>/) hold the
# per-step timings (timings_s) and the scores.
set -u
DATA_DIR=${1:-../shared/data/omniglot}
LOSS=${2:-mfcont}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export DMLBENCH_CACHE="$OUT/cache"
PY=${PYTHON:-python}
common=(run --protocol mlrc --loss "$LOSS" --dataset omniglot --data-dir "$DATA_DIR" --quiet)
frozen=(--set model.frozen_trunk=true --set data.augment=none)
run() {
  local name=$1; shift
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$PY" -m benchmark.cli.main "${common[@]}" --out "$OUT/runs/$name" --results-dir "$OUT/results/$name" "$@" \
    > "$OUT/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '%-12s rc=%d wall=%.1f s\n' "$name" "$rc" "$(echo "$t1 - $t0" | bc)"
}
echo "commit $(git rev-parse --short HEAD), output in $OUT"
run full
run frozen_miss "${frozen[@]}"
run frozen_hit "${frozen[@]}"
