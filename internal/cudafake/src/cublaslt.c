/*
 * A fake libcublasLt: descriptors that check attribute sizes the way
 * cuBLASLt does, a heuristic that checks the layouts agree, and a
 * column-major reference matmul with the bias, ReLU and bias-gradient
 * (BGRADB) epilogues whose
 * operands are checked against the device allocations.
 * Entry points have the prototypes cublasLt.h declares.
 */
#include "fake.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define ALGO_MAGIC 0xf10c0de5ull
#define FAKE_ALGOS 3 /* candidates the heuristic offers */

struct desc { cublasComputeType_t compute; cudaDataType_t scale; int32_t transa, transb; uint32_t epilogue; const void *bias; };
struct layout { cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct pref { uint64_t max_workspace; uint32_t align[4]; int set[5]; };

_Static_assert(sizeof(struct desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc fits");
_Static_assert(sizeof(struct layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
_Static_assert(sizeof(struct pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "pref fits");
_Static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "heuristic result is 96 bytes");

struct cublasLtContext { int unused; };

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
	if (!fake_current_ctx()) return CUBLAS_STATUS_NOT_INITIALIZED;
	*lightHandle = calloc(1, sizeof(struct cublasLtContext));
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) { free(lightHandle); return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType) {
	if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_FAST_TF32) return CUBLAS_STATUS_NOT_SUPPORTED;
	if (scaleType != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
	cublasLtMatmulDescOpaque_t *o = calloc(1, sizeof *o);
	struct desc *d = (struct desc *)o;
	d->compute = computeType;
	d->scale = scaleType;
	d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
	*matmulDesc = o;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) { free(matmulDesc); return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t sizeInBytes) {
	struct desc *d = (struct desc *)matmulDesc;
	if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
	switch (attr) {
	case CUBLASLT_MATMUL_DESC_TRANSA:
	case CUBLASLT_MATMUL_DESC_TRANSB: {
		if (sizeInBytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
		int32_t v = *(const int32_t *)buf;
		if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
		*(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &d->transa : &d->transb) = v;
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATMUL_DESC_EPILOGUE: {
		if (sizeInBytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
		uint32_t v = *(const uint32_t *)buf;
		if (v != CUBLASLT_EPILOGUE_DEFAULT && v != CUBLASLT_EPILOGUE_RELU && v != CUBLASLT_EPILOGUE_BIAS && v != CUBLASLT_EPILOGUE_RELU_BIAS &&
		    v != CUBLASLT_EPILOGUE_BGRADB)
			return CUBLAS_STATUS_NOT_SUPPORTED;
		d->epilogue = v;
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
		if (sizeInBytes != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
		d->bias = *(const void *const *)buf;
		return CUBLAS_STATUS_SUCCESS;
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
	if (type != CUDA_R_32F && type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
	if (ld < (int64_t)rows || rows > (1u << 31) || cols > (1u << 31)) return CUBLAS_STATUS_INVALID_VALUE;
	cublasLtMatrixLayoutOpaque_t *o = calloc(1, sizeof *o);
	*(struct layout *)o = (struct layout){ type, rows, cols, ld };
	*matLayout = o;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) { free(matLayout); return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
	*pref = calloc(1, sizeof(cublasLtMatmulPreferenceOpaque_t));
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { free(pref); return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t sizeInBytes) {
	struct pref *p = (struct pref *)pref;
	switch (attr) {
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
		if (sizeInBytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
		p->max_workspace = *(const uint64_t *)buf;
		p->set[0] = 1;
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
		if (sizeInBytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
		int i = attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
		p->align[i] = *(const uint32_t *)buf;
		p->set[1 + i] = 1;
		return CUBLAS_STATUS_SUCCESS;
	}
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
}

/* check returns whether the layouts describe op(A) m×k, op(B) k×n and C, D m×n. */
static int check(const struct desc *d, const struct layout *a, const struct layout *b, const struct layout *c, const struct layout *dd) {
	uint64_t m = dd->rows, n = dd->cols;
	uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
	uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
	return am == m && bn == n && ak == bk && ak > 0 && c->rows == m && c->cols == n &&
	       a->type == b->type && a->type == c->type && c->type == dd->type &&
	       !(d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount) {
	const struct pref *p = (const struct pref *)preference;
	if (requestedAlgoCount <= 0) return CUBLAS_STATUS_INVALID_VALUE;
	for (int i = 0; i < 5; i++)
		if (!p->set[i]) return CUBLAS_STATUS_INVALID_VALUE; /* the bindings set all five */
	if (!check((struct desc *)operationDesc, (struct layout *)Adesc, (struct layout *)Bdesc, (struct layout *)Cdesc, (struct layout *)Ddesc)) {
		*returnAlgoCount = 0;
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	/* FLOWKIT_FAKE_CUBLASLT_EPILOGUES=none: no algorithm for any epilogue,
	 * as a real cuBLASLt may answer for some, so that callers' fallbacks run. */
	const char *ep = getenv("FLOWKIT_FAKE_CUBLASLT_EPILOGUES");
	if (ep && strcmp(ep, "none") == 0 && ((struct desc *)operationDesc)->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
		*returnAlgoCount = 0;
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	/* FAKE_ALGOS candidates, all computing the same; the last is refused
	 * by cublasLtMatmul (as a real library may refuse one it offered), so
	 * that callers trying every candidate must skip it. */
	int n = requestedAlgoCount < FAKE_ALGOS ? requestedAlgoCount : FAKE_ALGOS;
	for (int i = 0; i < n; i++) {
		cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[i];
		memset(r, 0, sizeof *r);
		r->algo.data[0] = ALGO_MAGIC;
		r->algo.data[1] = p->align[0] | (uint64_t)p->align[1] << 16 | (uint64_t)p->align[2] << 32;
		r->algo.data[2] = i;
		r->workspaceSize = p->max_workspace / 2;
		r->state = CUBLAS_STATUS_SUCCESS;
		r->wavesCount = 1;
	}
	*returnAlgoCount = n;
	return CUBLAS_STATUS_SUCCESS;
}

struct matmul_op {
	struct desc d;
	struct layout a, b, c;
	double alpha, beta;
	const void *A, *B, *C;
	void *D;
};

static void run_matmul(void *arg) {
	struct matmul_op *o = arg;
	int type = o->a.type;
	if (fake_noop_kernels()) { /* every operand read, D written, no product */
		size_t es = type == CUDA_R_32F ? 4 : 2;
		fake_touch(o->A, fake_matrix_bytes(o->a.rows, o->a.cols, o->a.ld, 1, 0, es));
		fake_touch(o->B, fake_matrix_bytes(o->b.rows, o->b.cols, o->b.ld, 1, 0, es));
		fake_touch(o->C, fake_matrix_bytes(o->c.rows, o->c.cols, o->c.ld, 1, 0, es));
		for (uint64_t j = 0; j < o->c.cols; j++) memset((char *)o->D + j * o->c.ld * es, 0, o->c.rows * es);
		if (o->d.epilogue == CUBLASLT_EPILOGUE_BGRADB) memset((void *)o->d.bias, 0, o->c.cols * es);
		return;
	}
	if (o->d.epilogue == CUBLASLT_EPILOGUE_BGRADB) { /* the bias gradient: op(B)'s column sums, one per column of D */
		uint64_t k = o->d.transb ? o->b.cols : o->b.rows;
		for (uint64_t j = 0; j < o->c.cols; j++) {
			double sum = 0;
			for (uint64_t p = 0; p < k; p++) sum += fake_load(o->B, type, o->d.transb ? j + p * o->b.ld : p + j * o->b.ld);
			fake_store((void *)o->d.bias, type, j, sum);
		}
	}
	for (uint64_t j = 0; j < o->c.cols; j++)
		for (uint64_t i = 0; i < o->c.rows; i++) {
			double sum = 0;
			uint64_t k = o->d.transa ? o->a.rows : o->a.cols;
			for (uint64_t p = 0; p < k; p++) {
				size_t ia = o->d.transa ? p + i * o->a.ld : i + p * o->a.ld;
				size_t ib = o->d.transb ? j + p * o->b.ld : p + j * o->b.ld;
				sum += fake_load(o->A, type, ia) * fake_load(o->B, type, ib);
			}
			size_t ic = i + j * o->c.ld;
			double v = o->alpha * sum + (o->beta == 0 ? 0 : o->beta * fake_load(o->C, type, ic));
			if (o->d.epilogue == CUBLASLT_EPILOGUE_BIAS || o->d.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS)
				v += fake_load(o->d.bias, type, i); /* one per row of D */
			if ((o->d.epilogue == CUBLASLT_EPILOGUE_RELU || o->d.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) && v < 0) v = 0;
			fake_store(o->D, type, ic, v);
		}
}

static uint32_t align_of(const void *p) {
	uintptr_t u = (uintptr_t)p;
	uint32_t a = 256;
	while (a > 1 && u % a) a /= 2;
	return a;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
	if (!fake_current_ctx()) return CUBLAS_STATUS_NOT_INITIALIZED;
	struct desc *d = (struct desc *)computeDesc;
	if (!algo || algo->data[0] != ALGO_MAGIC || algo->data[2] >= FAKE_ALGOS) return CUBLAS_STATUS_INVALID_VALUE;
	if (algo->data[2] == FAKE_ALGOS - 1) return CUBLAS_STATUS_NOT_SUPPORTED;
	/* The operands must be at least as aligned as the preference promised. */
	uint64_t al = algo->data[1];
	if (align_of(A) < (al & 0xffff) || align_of(B) < ((al >> 16) & 0xffff) || align_of(D) < ((al >> 32) & 0xffff))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (!workspace || workspaceSizeInBytes < ((size_t)4 << 20)) return CUBLAS_STATUS_INVALID_VALUE;
	if (!check(d, (struct layout *)Adesc, (struct layout *)Bdesc, (struct layout *)Cdesc, (struct layout *)Ddesc)) return CUBLAS_STATUS_INVALID_VALUE;
	int bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS, bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADB;
	if ((bias || bgrad) && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
	const struct layout *la = (struct layout *)Adesc, *lb = (struct layout *)Bdesc, *lc = (struct layout *)Cdesc, *ld = (struct layout *)Ddesc;
	size_t es = la->type == CUDA_R_32F ? 4 : 2;
	if (!fake_device_range("cublasLtMatmul", "A", A, fake_matrix_bytes(la->rows, la->cols, la->ld, 1, 0, es)) ||
	    !fake_device_range("cublasLtMatmul", "B", B, fake_matrix_bytes(lb->rows, lb->cols, lb->ld, 1, 0, es)) ||
	    !fake_device_range("cublasLtMatmul", "C", C, fake_matrix_bytes(lc->rows, lc->cols, lc->ld, 1, 0, es)) ||
	    !fake_device_range("cublasLtMatmul", "D", D, fake_matrix_bytes(ld->rows, ld->cols, ld->ld, 1, 0, es)) ||
	    (bias && !fake_device_range("cublasLtMatmul", "bias", d->bias, ld->rows * es)) ||
	    (bgrad && !fake_device_range("cublasLtMatmul", "bias gradient", d->bias, ld->cols * es)) ||
	    !fake_device_range("cublasLtMatmul", "workspace", workspace, workspaceSizeInBytes))
		return CUBLAS_STATUS_INVALID_VALUE;
	struct matmul_op o = {
		*d, *(struct layout *)Adesc, *(struct layout *)Bdesc, *(struct layout *)Ddesc,
		*(const float *)alpha, *(const float *)beta, A, B, C, D,
	};
	return fake_submit(stream, run_matmul, &o, sizeof o) == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
