/* allreduce_mpi: the MPI counterpart of allreduce_bench.cc, with the same
 * collectives, sizes, iteration counts, timing (a call's time is its slowest
 * rank's; median and 10th/90th percentiles) and table. Built and run by
 * bench/allreduce_vs_mpi.sh:
 *
 *   mpirun -np 2 allreduce_mpi [--op all_reduce] [--sizes 4096,4194304,67108864] [--warmup 5] [--iters N]
 *
 * --op: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all. The
 * size is the whole buffer (all_gather's output, reduce_scatter's input, a
 * rank's all_to_all send buffer), as in nccl-tests.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double percentile(double* sorted, int n, double p) {
  int index = (int)(p * (n - 1) + 0.5);
  return sorted[index < n ? index : n - 1];
}

/* Floats in a buffer of about `bytes`: a multiple of the ranks, at least one each. */
static size_t bytes_count(size_t bytes, int n) {
  size_t count = bytes / sizeof(float) / (size_t)n * (size_t)n;
  return count > 0 ? count : (size_t)n;
}

static void run(const char* op, float* in, float* out, size_t count, size_t part) {
  if (strcmp(op, "all_reduce") == 0) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (strcmp(op, "all_gather") == 0)
    MPI_Allgather(in, (int)part, MPI_FLOAT, out, (int)part, MPI_FLOAT, MPI_COMM_WORLD);
  else if (strcmp(op, "reduce_scatter") == 0)
    MPI_Reduce_scatter_block(in, out, (int)part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (strcmp(op, "broadcast") == 0) MPI_Bcast(in, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  else MPI_Alltoall(in, (int)part, MPI_FLOAT, out, (int)part, MPI_FLOAT, MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t sizes[32] = {4096, 4u << 20, 64u << 20};
  int size_count = 3, warmup = 5, iters_flag = 0;
  const char* op = "all_reduce";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--op") == 0) op = argv[i + 1];
    else if (strcmp(argv[i], "--warmup") == 0) warmup = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--iters") == 0) iters_flag = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--sizes") == 0) {
      size_count = 0;
      for (char* p = strtok(argv[i + 1], ","); p && size_count < 32; p = strtok(NULL, ",")) {
        sizes[size_count++] = strtoull(p, NULL, 10);
      }
    }
  }
  /* busbw = algbw * factor: what each link carries (nccl-tests' PERFORMANCE.md). */
  double factor = 1.0;
  if (strcmp(op, "all_reduce") == 0) factor = 2.0 * (n - 1) / n;
  else if (strcmp(op, "all_gather") == 0 || strcmp(op, "reduce_scatter") == 0 || strcmp(op, "all_to_all") == 0)
    factor = (double)(n - 1) / n;
  else if (strcmp(op, "broadcast") != 0) {
    fprintf(stderr, "allreduce_mpi: unknown --op %s\n", op);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (rank == 0) {
    printf("# MPI %s, float32 sum, %d ranks\n", op, n);
    printf("# %12s %7s %11s %11s %11s %11s %11s\n", "bytes", "iters", "median_us", "p10_us", "p90_us", "algbw_GB/s",
           "busbw_GB/s");
  }
  for (int s = 0; s < size_count; ++s) {
    size_t count = bytes_count(sizes[s], n), bytes = count * sizeof(float), part = count / n;
    size_t auto_iters = ((size_t)2 << 30) / bytes;
    int iters = iters_flag > 0 ? iters_flag : (int)(auto_iters < 20 ? 20 : auto_iters > 1000 ? 1000 : auto_iters);
    float* in = malloc(bytes);
    float* out = malloc(bytes);
    for (size_t i = 0; i < count; ++i) in[i] = (float)(rank + 1);
    for (int i = 0; i < (warmup > 0 ? warmup : 1); ++i) run(op, in, out, count, part);
    float expected = (float)(n * (n + 1) / 2);
    if (strcmp(op, "all_reduce") == 0 && (out[0] != expected || out[count - 1] != expected)) {
      fprintf(stderr, "allreduce_mpi: wrong result %f\n", out[0]);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double* seconds = malloc(sizeof(double) * iters);
    double* slowest = malloc(sizeof(double) * iters);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters; ++i) {
      double start = MPI_Wtime();
      run(op, in, out, count, part);
      seconds[i] = MPI_Wtime() - start;
    }
    MPI_Reduce(seconds, slowest, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      qsort(slowest, iters, sizeof(double), compare);
      double median = percentile(slowest, iters, 0.5);
      double algbw = (double)bytes / median / 1e9;
      double busbw = algbw * factor;
      printf("  %12zu %7d %11.2f %11.2f %11.2f %11.3f %11.3f\n", bytes, iters, median * 1e6,
             percentile(slowest, iters, 0.1) * 1e6, percentile(slowest, iters, 0.9) * 1e6, algbw, busbw);
      fflush(stdout);
    }
    free(in);
    free(out);
    free(seconds);
    free(slowest);
  }
  MPI_Finalize();
  return 0;
}
