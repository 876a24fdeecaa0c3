#!/usr/bin/env bash
# GPT-2's byte-pair encoding of Moby-Dick (data/moby-dick.txt, 1.2 MB):
# `rill tokenize` (text/bpe.h) against the npm package gpt-3-encoder's own
# encoder under node (tests/text/gpt2_encode.js, which gives it the book in
# parts of about 4 KB: its own encode() is quadratic in the text's length).
# Runs alternate; each side times its encoding only (the vocabulary loaded
# before the clock starts); tokens/s, median, min, max and the ratio.
#   bench/bpe_bench.sh [runs=5]
# Needs a build, node and data/gpt2 (./dev fetches it).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
text=data/moby-dick.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rill_rates=() node_rates=()
for ((r = 0; r < runs; ++r)); do
  rill_rates+=("$(build/rill tokenize "$text" -o "$tmp/t.bin" | sed -E 's/.* ([0-9]+) tokens\/s$/\1/')")
  node_rates+=("$(node tests/text/gpt2_encode.js data/gpt2 "$text" --speed |
    /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["tokens"] / j["seconds"])')")
done
echo "GPT-2 BPE of $text ($(stat -c %s "$text") bytes), $runs runs each, node $(node --version)"
/usr/bin/python3 bench/summarize.py "rill" "${rill_rates[*]}" "gpt-3-encoder" "${node_rates[*]}" tokens/s
