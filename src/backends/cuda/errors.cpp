#include <string>

#include "backends/cuda/cuda.h"

namespace dp {

void cuda_fail(cudaError_t e, const char* what) {
  cudaGetLastError();  // clears a sticky-free error so the next call starts clean
  std::string msg = std::string(what) + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  fail(e == cudaErrorMemoryAllocation ? DP_ERR_OUT_OF_MEMORY : DP_ERR_DEVICE, "CUDA: " + msg);
}

void cublas_fail(cublasStatus_t s, const char* what) {
  fail(s == CUBLAS_STATUS_ALLOC_FAILED ? DP_ERR_OUT_OF_MEMORY : DP_ERR_DEVICE,
       std::string("cuBLAS: ") + what + " failed: " + cublasGetStatusString(s) + " (" + cublasGetStatusName(s) + ")");
}

void cudnn_fail(cudnnStatus_t s, const char* what) {
  char detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  std::string msg = std::string("cuDNN: ") + what + " failed: " + cudnnGetErrorString(s);
  if (detail[0]) msg += " (" + std::string(detail) + ")";
  fail(s == CUDNN_STATUS_ALLOC_FAILED ? DP_ERR_OUT_OF_MEMORY : DP_ERR_DEVICE, msg);
}

}  // namespace dp
