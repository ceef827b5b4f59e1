// sgemm times OpenBLAS's cblas_sgemm on the shapes of flowkit's
// BenchmarkSgemm_* (kernels/cpu/bench_test.go) and prints GFLOP/s per shape,
// as the ceiling to compare flowkit's kernel against. Built and run by run.sh.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct shape {
	const char *name;
	int transA, transB;
	int m, n, k;
};

// Square NN products, then the MNIST CNN layers at batch 64, each one GEMM
// over the batch, as in bench_test.go.
static const struct shape shapes[] = {
	{"512", 0, 0, 512, 512, 512},
	{"1024", 0, 0, 1024, 1024, 1024},
	{"2048", 0, 0, 2048, 2048, 2048},
	{"MNISTConv1Fwd", 0, 0, 32, 64 * 28 * 28, 9},
	{"MNISTConv2Fwd", 0, 0, 64, 64 * 14 * 14, 288},
	{"MNISTConv2WGrad", 0, 1, 64, 288, 64 * 14 * 14},
	{"MNISTFC1Fwd", 0, 1, 64, 128, 3136},
	{"MNISTFC1DGrad", 0, 0, 64, 3136, 128},
};

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *random_floats(size_t n, unsigned *seed) {
	float *x = malloc(n * sizeof *x);
	if (x == NULL) {
		fprintf(stderr, "sgemm: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		x[i] = 2.0f * rand_r(seed) / RAND_MAX - 1.0f;
	}
	return x;
}

// Usage: sgemm [seconds per shape, default 1] [shape name, default all]
int main(int argc, char **argv) {
	// Seconds to spend timing each shape, after one warm-up call.
	double budget = argc > 1 ? atof(argv[1]) : 1.0;
	const char *only = argc > 2 ? argv[2] : NULL;
	unsigned seed = 1;
	printf("OpenBLAS %s, %d threads\n", openblas_get_config(), openblas_get_num_threads());
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const struct shape *sh = &shapes[s];
		if (only != NULL && strcmp(only, sh->name) != 0) {
			continue;
		}
		float *a = random_floats((size_t)sh->m * sh->k, &seed);
		float *b = random_floats((size_t)sh->k * sh->n, &seed);
		float *c = random_floats((size_t)sh->m * sh->n, &seed);
		int lda = sh->transA ? sh->m : sh->k;
		int ldb = sh->transB ? sh->k : sh->n;
		enum CBLAS_TRANSPOSE ta = sh->transA ? CblasTrans : CblasNoTrans;
		enum CBLAS_TRANSPOSE tb = sh->transB ? CblasTrans : CblasNoTrans;

		cblas_sgemm(CblasRowMajor, ta, tb, sh->m, sh->n, sh->k, 1, a, lda, b, ldb, 0, c, sh->n);
		long iters = 0;
		double start = now(), elapsed;
		do {
			cblas_sgemm(CblasRowMajor, ta, tb, sh->m, sh->n, sh->k, 1, a, lda, b, ldb, 0, c, sh->n);
			iters++;
			elapsed = now() - start;
		} while (elapsed < budget);
		double flops = 2.0 * sh->m * sh->n * sh->k * iters;
		printf("openblas_sgemm_%-16s %6ld iters %12.0f ns/op %8.2f GFLOP/s\n", sh->name, iters,
		       elapsed / iters * 1e9, flops / elapsed / 1e9);
		free(a);
		free(b);
		free(c);
	}
	return 0;
}
