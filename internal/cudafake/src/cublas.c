/*
 * A fake libcublas: a column-major reference GEMM that checks its arguments
 * the way cuBLAS documents them, and its operands against the device
 * allocations, defined with the prototypes cublas_api.h declares.
 */
#include "fake.h"

#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

struct cublasContext { cudaStream_t stream; void *workspace; size_t workspace_size; cublasPointerMode_t mode; };

const char *cublasGetStatusName(cublasStatus_t status) {
	switch (status) {
	case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
	default: return "CUBLAS_STATUS_UNKNOWN";
	}
}

const char *cublasGetStatusString(cublasStatus_t status) {
	return status == CUBLAS_STATUS_INVALID_VALUE ? "an invalid value was used as an argument" : "fake status";
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
	if (!fake_current_ctx()) return CUBLAS_STATUS_NOT_INITIALIZED;
	*handle = calloc(1, sizeof(struct cublasContext));
	(*handle)->mode = CUBLAS_POINTER_MODE_DEVICE; /* so that the bindings must set it */
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
	if (!fake_current_ctx()) return CUBLAS_STATUS_NOT_INITIALIZED;
	free(handle);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
	handle->stream = streamId;
	handle->workspace = NULL; /* as documented: back to the default pool */
	handle->workspace_size = 0;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes) {
	if (!workspace || (uintptr_t)workspace % 256 || workspaceSizeInBytes < ((size_t)4 << 20)) return CUBLAS_STATUS_INVALID_VALUE;
	if (!fake_device_range("cublasSetWorkspace_v2", "workspace", workspace, workspaceSizeInBytes)) return CUBLAS_STATUS_INVALID_VALUE;
	handle->workspace = workspace;
	handle->workspace_size = workspaceSizeInBytes;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
	if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
	handle->mode = mode;
	return CUBLAS_STATUS_SUCCESS;
}

struct gemm_op {
	int transa, transb, m, n, k, type, lda, ldb, ldc, batch;
	double alpha, beta;
	const void *A, *B;
	void *C;
	long long sa, sb, sc;
};

/* operands sets the extents in bytes of A, B and C. */
static void operands(const struct gemm_op *g, size_t *a, size_t *b, size_t *c) {
	size_t es = g->type == CUDA_R_32F ? 4 : 2;
	*a = g->k == 0 ? 0 : g->transa ? fake_matrix_bytes(g->k, g->m, g->lda, g->batch, g->sa, es) : fake_matrix_bytes(g->m, g->k, g->lda, g->batch, g->sa, es);
	*b = g->k == 0 ? 0 : g->transb ? fake_matrix_bytes(g->n, g->k, g->ldb, g->batch, g->sb, es) : fake_matrix_bytes(g->k, g->n, g->ldb, g->batch, g->sb, es);
	*c = fake_matrix_bytes(g->m, g->n, g->ldc, g->batch, g->sc, es);
}

/* in_memory checks the operands against the device allocations. */
static int in_memory(const char *call, const struct gemm_op *g) {
	size_t a, b, c;
	operands(g, &a, &b, &c);
	return fake_device_range(call, "A", g->A, a) && fake_device_range(call, "B", g->B, b) && fake_device_range(call, "C", g->C, c);
}

static void run_gemm(void *arg) {
	struct gemm_op *g = arg;
	if (!in_memory("GEMM", g)) {
		fake_fault();
		return;
	}
	if (fake_noop_kernels()) { /* every operand read, C written, no product */
		size_t na, nb, nc;
		operands(g, &na, &nb, &nc);
		fake_touch(g->A, na);
		fake_touch(g->B, nb);
		size_t es = g->type == CUDA_R_32F ? 4 : 2;
		for (int bi = 0; bi < g->batch; bi++)
			for (int j = 0; j < g->n; j++) {
				size_t col = bi * g->sc + (size_t)j * g->ldc;
				if (g->beta == 0) {
					memset((char *)g->C + col * es, 0, g->m * es);
					continue;
				}
				for (int i = 0; i < g->m; i++)
					fake_store(g->C, g->type, col + i, g->beta * fake_load(g->C, g->type, col + i));
			}
		return;
	}
	for (int b = 0; b < g->batch; b++)
		for (int j = 0; j < g->n; j++)
			for (int i = 0; i < g->m; i++) {
				double sum = 0;
				for (int p = 0; p < g->k; p++) {
					size_t ia = g->transa ? (size_t)p + (size_t)i * g->lda : (size_t)i + (size_t)p * g->lda;
					size_t ib = g->transb ? (size_t)j + (size_t)p * g->ldb : (size_t)p + (size_t)j * g->ldb;
					sum += fake_load(g->A, g->type, b * g->sa + ia) * fake_load(g->B, g->type, b * g->sb + ib);
				}
				size_t ic = b * g->sc + (size_t)i + (size_t)j * g->ldc;
				double c = g->beta == 0 ? 0 : g->beta * fake_load(g->C, g->type, ic);
				fake_store(g->C, g->type, ic, g->alpha * sum + c);
			}
}

#define MAX1(x) ((x) > 1 ? (x) : 1)

static cublasStatus_t gemm(const char *call, cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                           const void *alpha, const void *A, cudaDataType Atype, int lda, long long sa,
                           const void *B, cudaDataType Btype, int ldb, long long sb, const void *beta,
                           void *C, cudaDataType Ctype, int ldc, long long sc, int batch,
                           cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
	if (!fake_current_ctx()) return CUBLAS_STATUS_NOT_INITIALIZED;
	/* The bindings must give every call a workspace and host pointer mode. */
	if (!h->workspace || h->mode != CUBLAS_POINTER_MODE_HOST) return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
	if (lda < MAX1(transa == CUBLAS_OP_N ? m : k) || ldb < MAX1(transb == CUBLAS_OP_N ? k : n) || ldc < MAX1(m))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (Atype != Btype || Atype != Ctype || (Atype != CUDA_R_32F && Atype != CUDA_R_16BF)) return CUBLAS_STATUS_NOT_SUPPORTED;
	if (computeType != CUBLAS_COMPUTE_32F && !(computeType == CUBLAS_COMPUTE_32F_FAST_TF32 && Atype == CUDA_R_32F))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (algo != CUBLAS_GEMM_DEFAULT) return CUBLAS_STATUS_INVALID_VALUE;
	struct gemm_op g = {
		transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, Atype, lda, ldb, ldc, batch,
		*(const float *)alpha, *(const float *)beta, A, B, C, sa, sb, sc,
	};
	if (!in_memory(call, &g)) return CUBLAS_STATUS_INVALID_VALUE;
	return fake_submit(h->stream, run_gemm, &g, sizeof g) == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
	return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
	return gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
	            ldc, strideC, batchCount, computeType, algo);
}
