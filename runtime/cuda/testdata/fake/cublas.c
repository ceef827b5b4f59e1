/*
 * A fake libcublas for TestFakeDriver: a column-major reference GEMM that
 * checks its arguments the way cuBLAS documents them, defined with the
 * prototypes cublas_api.h declares.
 */
#include "fake.h"

#include <cublas_v2.h>
#include <stdlib.h>

struct cublasContext { cudaStream_t stream; void *workspace; size_t workspace_size; cublasPointerMode_t mode; };

const char *cublasGetStatusName(cublasStatus_t status) {
	switch (status) {
	case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
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

static void run_gemm(void *arg) {
	struct gemm_op *g = arg;
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

static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
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
	fake_submit(h->stream, run_gemm, &g, sizeof g);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
	return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
	return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
	            ldc, strideC, batchCount, computeType, algo);
}
