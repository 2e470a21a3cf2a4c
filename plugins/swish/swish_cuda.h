/* The CUDA half of swish (swish_cuda.cu), called by swish.c's
 * dp_plugin_device_impls entries. */
#ifndef SWISH_CUDA_H
#define SWISH_CUDA_H
#include "dp_plugin.h"
#ifdef __cplusplus
extern "C" {
#endif
int swish_cuda_forward(const dp_host_api* api, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap);
int swish_cuda_backward(const dp_host_api* api, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap);
#ifdef __cplusplus
}
#endif
#endif
