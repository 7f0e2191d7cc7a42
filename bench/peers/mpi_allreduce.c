/* mpi-allreduce: W ranks (launched by mpirun) each hold S bytes of float32 and
 * MPI_Allreduce(MPI_FLOAT, MPI_SUM) them, out of place, once per iteration after an
 * MPI_Barrier; each rank times its own call with MPI_Wtime.
 *
 *   mpirun -np W mpi-allreduce --bytes S --iters N --warmup K
 *
 * Rank 0 gathers every rank's times (MPI_Gather) and prints, on stdout,
 *   RANK r t_1 ... t_N        (milliseconds, one line per rank)
 *   VERIFIED 1
 * Every element of every result is checked against the exact sum (inputs are small
 * integers); a wrong element is reported on stderr and the run aborts (exit != 0). */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t parse_bytes(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  uint64_t m = 1;
  if (*end == 'K' || *end == 'k') m = 1024ull;
  else if (*end == 'M' || *end == 'm') m = 1024ull * 1024;
  else if (*end == 'G' || *end == 'g') m = 1024ull * 1024 * 1024;
  return (uint64_t)(v * (double)m);
}

/* Rank r's input at element i in iteration it: a small integer, so sums are exact. */
static inline float input(int r, size_t i, int it) {
  return (float)((i + 7u * (unsigned)r + 3u * (unsigned)it) & 15u);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  uint64_t bytes = 4u << 20;
  int iters = 10, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = parse_bytes(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else {
      if (rank == 0) fprintf(stderr, "mpi-allreduce: unknown argument %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (bytes == 0 || bytes % 4 || bytes / 4 > 0x7fffffffu || iters < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "mpi-allreduce: bad --bytes/--iters/--warmup\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t n = (size_t)(bytes / 4);
  float* in = malloc(bytes);
  float* out = malloc(bytes);
  double* times = malloc(sizeof(double) * (size_t)iters);
  if (!in || !out || !times) {
    fprintf(stderr, "mpi-allreduce: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int it = 0; it < warmup + iters; ++it) {
    float expect[16];
    for (int k = 0; k < 16; ++k) {
      expect[k] = 0.0f;
      for (int r = 0; r < size; ++r) expect[k] += (float)((k + 7 * r) & 15);
    }
    for (size_t i = 0; i < n; ++i) in[i] = input(rank, i, it);
    memset(out, 0xff, bytes); /* NaN: a result never written cannot pass */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    if (it >= warmup) times[it - warmup] = (t1 - t0) * 1e3;
    for (size_t i = 0; i < n; ++i) {
      float e = expect[(i + 3u * (unsigned)it) & 15u];
      if (out[i] != e) {
        fprintf(stderr, "mpi-allreduce: rank %d: iteration %d: element %zu is %.9g, expected "
                        "%.9g\n", rank, it, i, (double)out[i], (double)e);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  }
  double* all = rank == 0 ? malloc(sizeof(double) * (size_t)iters * (size_t)size) : NULL;
  MPI_Gather(times, iters, MPI_DOUBLE, all, iters, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      printf("RANK %d", r);
      for (int i = 0; i < iters; ++i) printf(" %.4f", all[(size_t)r * iters + i]);
      printf("\n");
    }
    printf("VERIFIED 1\n");
    fflush(stdout);
    free(all);
  }
  free(in);
  free(out);
  free(times);
  MPI_Finalize();
  return 0;
}
