# Sourced by the benchmarks that compare Rill with PyTorch on CPUs: both
# sides run the same OpenBLAS kernels. `rill` runs this CPU's own where
# OpenBLAS fell back to its generic ones and OPENBLAS_CORETYPE is unset
# (kernels/ops/cpu_kernels_info.h); PyTorch, calling the same library, would
# run the generic ones. So the kernels a `rill` run reports are named for
# every process that follows. Needs a built build/rill.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  same_blas_result=$(mktemp)
  build/rill run samples/linear_regression/linear_regression.json --steps 1 --set eval=off \
    --result "$same_blas_result" > /dev/null 2>&1 &&
    OPENBLAS_CORETYPE=$(/usr/bin/python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['cpu_kernels']['blas'])" \
      "$same_blas_result") && export OPENBLAS_CORETYPE
  rm -f "$same_blas_result"
fi
same_blas_core=${OPENBLAS_CORETYPE:-as OpenBLAS picks}
echo "OpenBLAS kernels on both sides: $same_blas_core"
