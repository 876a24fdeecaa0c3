#!/usr/bin/env bash
# Packs a CUDA build (./dev build on a machine with nvcc) into .gpu/ (ignored
# by git) for the GPU machine, where bench/gpu_all_check.sh and
# bench/gpu_profile.sh run it through `bash .gpu/run`:
#   bench/gpu_pack.sh
# The GPU kit (GPU_KIT, by default ../shared/tools/gpu-kit.sh beside the
# checkout) packs build/rill, the CUDA suites, Fashion-MNIST and the shared
# libraries the GPU machine lacks; this adds what the checks also run (the
# CUDA module, the device-collective bench, the launched device-collective
# program), then compresses the programs too (xz, unpacked once by the
# first `bash .gpu/run`), so that the package and data/moby-dick.txt stay
# well within the 64 MiB a call carries (uncompressed they came within 1.6
# MiB of it). Carry `.gpu` and `data/moby-dick.txt`.
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${GPU_KIT:-$(pwd)/../shared/tools/gpu-kit.sh}
[ -x "$kit" ] || [ -f "$kit" ] || { echo "no GPU kit at $kit (set GPU_KIT)" >&2; exit 1; }
extra=(build/kernels/librill_cuda.so build/bench/device_collective_bench build/samples/device_collectives_demo)
for f in "${extra[@]}"; do
  [ -f "$f" ] || { echo "$f is missing: build with CUDA first (./dev build where nvcc is found)" >&2; exit 1; }
done
[ -s data/moby-dick.txt ] || { echo "data/moby-dick.txt is missing: ./dev build fetches it" >&2; exit 1; }
bash "$kit" --fashion-mnist "${extra[@]}"
# The programs, compressed too. The run script unpacks the programs and the
# libraries on first use, each into a folder of its own first, so that
# runs started at once (the check starts some in the background) never see
# half a folder; and the `rill` wrapper is written here, once, finding the
# package from its own path, not rewritten by every run while others may be
# starting it.
tar cJf .gpu/bin.tar.xz -C .gpu bin
rm -rf .gpu/bin
unpack() {
  printf '[ -d "$here/%s" ] || { t=$(mktemp -d "$here/.%s.XXXXXX") \&\& tar xJf "$here/%s.tar.xz" -C "$t" \&\& mv -T "$t/%s" "$here/%s" 2>/dev/null; rm -rf "$t"; }' "$1" "$1" "$1" "$1" "$1"
}
sed -i -e "/^\[ -d \"\$here\/lib\" \] || tar xJf/d" -e '/^printf .*exec %s\/bin\/build\/rill/d' -e '/^chmod +x "\$here\/rill"/d' .gpu/run
sed -i -e "/^here=/a $(unpack lib)" -e "/^here=/a $(unpack bin)" .gpu/run
cat > .gpu/rill <<'RILL'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH=$here/lib:/usr/local/cuda/lib64 exec "$here/bin/build/rill" "$@"
RILL
chmod +x .gpu/rill
for want in 'bin.tar.xz' 'lib.tar.xz'; do
  grep -q "$want" .gpu/run || { echo "could not add the unpacking of $want to .gpu/run" >&2; exit 1; }
done
if grep -q 'printf\|tar xJf "$here/lib.tar.xz" -C "$here"' .gpu/run; then
  echo ".gpu/run still writes the wrapper or unpacks in place: the GPU kit changed; look at it" >&2
  exit 1
fi
total=$(du -cb .gpu data/moby-dick.txt | tail -1 | cut -f1)
limit=$((64 << 20))
echo "package: $(du -sh .gpu | cut -f1) in .gpu, $((total >> 20)) MiB with data/moby-dick.txt, of $((limit >> 20)) MiB a call carries"
[ "$total" -lt "$limit" ] || { echo "too large to carry" >&2; exit 1; }
