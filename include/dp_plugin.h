/* dp_plugin.h — write a dp layer type in C or C++, compile it alone into a
 * shared library, name it in a model's JSON (docs/plugins.md).
 *
 * This is the only header a plugin needs; a plugin links nothing from libdp.
 * It exports one symbol, dp_plugin_init, which receives the host's function
 * table, asked for by version (as sqlite3ext.h and ONNX Runtime's OrtApiBase
 * do), and registers its layer types through it:
 *
 *   DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap) {
 *     const dp_host_api* api = base->get_api(base, 1);  // the lowest version whose features it uses
 *     if (!api) { snprintf(err, cap, "needs host API 1"); return 1; }
 *     return api->register_layer(base->registrar, &my_type);
 *   }
 *
 * Rules, for everything below:
 * - Memory: the host owns every tensor, parameter, buffer and scratch block;
 *   a plugin never frees what the host gives it, and the host never frees
 *   what the plugin allocates (its instances, through destroy).
 * - Errors: a callback returns 0 on success, non-zero on failure with a
 *   NUL-terminated message in err (cap bytes, cap >= 256). The host prefixes
 *   the layer's JSON path and type. The args_* accessors report their own
 *   path-named message: on their failure return non-zero from create at once.
 *   Callbacks must not throw; a C++ exception that escapes one anyway is
 *   caught and reported as DP_ERR_PLUGIN ("forward threw: ..."), and one
 *   from destroy is dropped (docs/plugins.md, "Exceptions").
 * - ABI: every struct begins with struct_size and only grows at its end
 *   ("append only": a field once published never moves); the host reads only
 *   the fields a plugin's struct_size covers, and a plugin must check
 *   api->struct_size before using a field appended after version 1.
 * - Thread-safety is written on each callback. "Concurrent" means several
 *   replica threads call it at once with the same instance.
 * - Lifetime: a plugin stays loaded until its context is destroyed and every
 *   model built from its types is gone (models must be destroyed before the
 *   context, as dp.h says).
 */
#ifndef DP_PLUGIN_H
#define DP_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define DP_PLUGIN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define DP_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DP_PLUGIN_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The host API version this header describes. A host gives every version it
 * supports (today: 1 and 2); get_api returns NULL for any other. Version 2
 * adds device code: a layer type may bring CUDA forward and backward
 * (dp_plugin_device_impls), and dp_plugin_run says where a call runs. A
 * plugin asks for the lowest version whose features it uses (a CPU-only one:
 * 1), so that it loads on every dp that has them; one written for version 1
 * works unchanged. */
#define DP_PLUGIN_ABI_VERSION 2
#define DP_PLUGIN_MAX_DIMS 8 /* = DP_MAX_DIMS */

/* Element types (the values of dp.h's dp_dtype). */
enum { DP_PLUGIN_F32 = 0, DP_PLUGIN_I64 = 1 };
/* Devices a tensor lives on (dp_plugin_tensor::device_type,
 * dp_plugin_run::device_type). CUDA: version 2. */
enum { DP_PLUGIN_DEVICE_CPU = 0, DP_PLUGIN_DEVICE_CUDA = 1 };
/* How a parameter or buffer starts (as PyTorch's reset_parameters()). */
enum {
  DP_PLUGIN_INIT_ZEROS = 0,
  DP_PLUGIN_INIT_ONES = 1,
  DP_PLUGIN_INIT_UNIFORM = 2, /* U(-bound, bound), bound >= 0 */
  DP_PLUGIN_INIT_CONSTANT = 3 /* every element = bound (nn.init.constant_: PReLU's 0.25); hosts whose
                                 table has args_int_range (DP_PLUGIN_HAS) know it */
};

/* Opaque host objects, valid only during the call that hands them over. */
typedef struct dp_plugin_registrar dp_plugin_registrar; /* during dp_plugin_init */
typedef struct dp_plugin_args dp_plugin_args;           /* during create */
typedef struct dp_plugin_build dp_plugin_build;         /* during infer */

/* A shape: per sample (no batch dim) at build time. */
typedef struct dp_plugin_shape {
  int32_t ndim;
  int64_t dims[DP_PLUGIN_MAX_DIMS];
} dp_plugin_shape;

/* A view of a tensor: batch on dim 0, row-major and contiguous today
 * (strides in elements are given so that a plugin can check that). data is
 * host memory on a CPU replica, the replica's GPU memory on a CUDA one. */
typedef struct dp_plugin_tensor {
  void* data; /* NULL for a gradient nobody needs */
  int32_t dtype;
  int32_t ndim;
  int64_t shape[DP_PLUGIN_MAX_DIMS];
  int64_t strides[DP_PLUGIN_MAX_DIMS];
  int32_t device_type; /* DP_PLUGIN_DEVICE_CPU or _CUDA */
  int32_t device_index; /* the CUDA ordinal; 0 on a CPU */
} dp_plugin_tensor;

/* Elements of a tensor view (the product of its shape); header-only. */
static inline int64_t dp_plugin_numel(const dp_plugin_tensor* t) {
  int64_t k = 1;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) k *= t->shape[i];
  return k;
}

/* What one replica's forward or backward sees (host-owned, read-only). */
typedef struct dp_plugin_run {
  size_t struct_size;
  int32_t training;      /* 1 in training mode, 0 in evaluation */
  int32_t layer_index;   /* position in the model */
  uint64_t seed;         /* the model's seed */
  int64_t step;          /* training forward passes so far */
  int64_t sample_offset; /* global batch index of this replica's first row */
  int64_t batch_total;   /* rows of the whole batch, over all replicas */
  void* host;            /* the host's; do not touch */
  /* Version 1 ends here. Appended in version 2 (a host that gives version 2
   * fills them): */
  int32_t device_type;  /* DP_PLUGIN_DEVICE_CPU, or _CUDA in device_impls' calls */
  int32_t device_index; /* the CUDA ordinal the replica runs on (0 on a CPU) */
  void* stream;         /* CUDA: the replica's cudaStream_t; NULL on a CPU */
  /* Append only. */
} dp_plugin_run;

/* The tensors of one call. params/buffers/stats follow the order in which
 * infer declared them, packed one after another. */
typedef struct dp_plugin_io {
  size_t struct_size;
  int32_t num_inputs;
  const dp_plugin_tensor* inputs; /* num_inputs views */
  dp_plugin_tensor output;        /* forward: shaped [batch, infer's output], fill it */
  dp_plugin_tensor grad_output;   /* backward: d loss / d output */
  /* backward: num_inputs views shaped as the inputs, to OVERWRITE; data is
   * NULL where no gradient is needed (the model's input). */
  const dp_plugin_tensor* grad_inputs;
  const float* params; /* this layer's parameters, shared by all replicas */
  float* grads;        /* backward ACCUMULATES (+=) into these: this replica's own */
  const float* buffers; /* shared buffers (running statistics): read-only here */
  float* stats;        /* this replica's declare_stats floats: a training forward writes them */
} dp_plugin_io;

/* A forward or backward: 0, or non-zero with a message in err. */
typedef int (*dp_plugin_run_fn)(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err,
                                size_t cap);

/* Version 2: a layer type's code for devices other than the CPU, pointed to
 * by dp_plugin_layer_type::device_impls (copied at register_layer). Only a
 * plugin that asked for version 2 may set it.
 *
 * CUDA (both or neither): forward and backward with the contract of the CPU
 * ones, on a CUDA replica. Every pointer in io (inputs, output, gradients,
 * params, grads, buffers, stats) and api->scratch's blocks are that
 * replica's GPU memory (run->device_index; the host has made it current);
 * the dp_plugin_tensor arrays themselves are host memory. Launch every
 * kernel and copy on run->stream (a cudaStream_t) and return without
 * synchronising: no cudaDeviceSynchronize, cudaStreamSynchronize,
 * cudaMalloc or cudaFree (use api->scratch), no default stream. Errors a
 * launch reports (cudaGetLastError) are the plugin's to return. CONCURRENT as
 * the CPU calls, each replica on its own stream. api->parallel_for runs fn on
 * the calling thread there, and api->uniform01 is a host function: device
 * code cannot call it. merge_stats still runs on the host (the host copies
 * the stats back). A type without CUDA code (cuda_forward NULL) is refused by
 * a group on CUDA devices, naming the layer. */
typedef struct dp_plugin_device_impls {
  size_t struct_size; /* sizeof(dp_plugin_device_impls) */
  dp_plugin_run_fn cuda_forward;
  dp_plugin_run_fn cuda_backward;
  /* Append only. */
} dp_plugin_device_impls;

/* A layer type. Copied by the host at register_layer (name included). */
typedef struct dp_plugin_layer_type {
  size_t struct_size; /* sizeof(dp_plugin_layer_type) */
  const char* name;   /* the JSON "type": an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 64
                         characters) that no known type has */
  uint32_t version;   /* the type's own version, shown by dp_context_plugin_info */
  int32_t min_inputs; /* inputs taken: [min_inputs, max_inputs]; max < 0: any */
  int32_t max_inputs;
  void* user; /* handed back to create */

  /* Parses the layer's JSON hyperparameters through api->args_* (which mark
   * keys as read: any key left unread is an error naming it) and returns a
   * new instance in *instance. Model build, one thread at a time. */
  int (*create)(void* user, dp_plugin_args* args, void** instance, char* err, size_t cap);
  /* Frees an instance (NULL-safe). After every replica is gone. */
  void (*destroy)(void* instance);
  /* Output shape from input shapes (per sample); declares the parameters,
   * buffers and stats through api->declare_*. Called once per instance at
   * model build, before any forward; may record shapes in the instance. */
  int (*infer)(void* instance, dp_plugin_build* build, const dp_plugin_shape* inputs, int32_t num_inputs,
               dp_plugin_shape* output, char* err, size_t cap);
  /* CPU forward. CONCURRENT: one call per replica at once, so the instance
   * is read-only here; per-replica memory comes from api->scratch. */
  int (*forward)(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap);
  /* CPU backward, after this replica's forward. CONCURRENT, as forward. */
  int (*backward)(const void* instance, const dp_plugin_run* run, const dp_plugin_io* io, char* err, size_t cap);
  /* Optional (NULL: none). After a training forward on every replica: folds
   * the replicas' stats (stats[r], from counts[r] rows) into the buffers.
   * One thread, replicas in order. */
  void (*merge_stats)(const void* instance, float* buffers, const float* const* stats, const int64_t* counts,
                      int32_t replicas);
  /* Version 2: a const dp_plugin_device_impls* (its CUDA code), or NULL for
   * a CPU-only type. Must be NULL for a plugin that asked for version 1. */
  const void* device_impls;
  /* Version 1 ends here. Append only. */
} dp_plugin_layer_type;

/* The host's function table (versions 1 and 2 share it; version 2 only
 * gives a layer type device code, see dp_plugin_device_impls). */
typedef struct dp_host_api {
  size_t struct_size;
  uint32_t version;

  /* Registers a layer type. Only inside dp_plugin_init; registration is
   * all-or-nothing: if init returns non-zero (or any registration fails),
   * none of the plugin's types stay. Returns non-zero for a bad struct or a
   * duplicate name (init should then return non-zero), and when called
   * outside dp_plugin_init or from another thread (a registrar kept for
   * later: nothing is registered). */
  int (*register_layer)(dp_plugin_registrar* registrar, const dp_plugin_layer_type* type);

  /* Hyperparameters (inside create only, on its thread). */
  const char* (*args_json)(const dp_plugin_args* args); /* the layer's JSON object as text */
  const char* (*args_path)(const dp_plugin_args* args); /* "/layers/3" */
  int (*args_has)(const dp_plugin_args* args, const char* key);
  /* Each returns 0 and sets *out (the default when the key is absent), or
   * non-zero with a message naming the JSON path ("/layers/3/beta:
   * expected a number in [0, 10], got -1"), which the host reports. */
  int (*args_int)(dp_plugin_args* args, const char* key, int64_t def, int64_t min, int64_t* out);
  int (*args_float)(dp_plugin_args* args, const char* key, double def, double lo, double hi, double* out);
  int (*args_bool)(dp_plugin_args* args, const char* key, int def, int* out);
  /* *out is valid until create returns. */
  int (*args_string)(dp_plugin_args* args, const char* key, const char* def, const char** out);

  /* Declarations (inside infer only). Parameters are named
   * "<layer name>.<suffix>" and saved in checkpoints; buffers too. init is a
   * DP_PLUGIN_INIT_* value; bound is U(-bound, bound)'s (>= 0) or the
   * constant's (finite). A bad declaration fails with a message the host
   * reports as DP_ERR_PLUGIN (infer should then return non-zero). */
  int (*declare_param)(dp_plugin_build* build, const char* suffix, int32_t ndim, const int64_t* shape, int32_t init,
                       double bound);
  int (*declare_buffer)(dp_plugin_build* build, const char* suffix, int32_t ndim, const int64_t* shape,
                        int32_t init, double bound);
  /* Floats of per-replica statistics a training forward writes (io->stats). */
  int (*declare_stats)(dp_plugin_build* build, int64_t count);

  /* During forward/backward; safe from the replica's own thread. */
  /* Scratch block `slot` of this replica and layer, at least `bytes` bytes,
   * 64-byte aligned: kept across calls and steps, so what forward writes,
   * backward reads; reallocated (contents lost) only when bytes grows. NULL
   * when out of memory. On a CUDA replica: GPU memory from the replica's
   * caching allocator, safe to use on run->stream. */
  void* (*scratch)(const dp_plugin_run* run, int32_t slot, size_t bytes);
  /* Calls fn(user, begin, end) over [0, n) in contiguous ranges of at least
   * `grain`, on this device's worker threads (concurrently); returns when
   * all are done. fn must not call back into the host. On a CUDA replica,
   * one call over [0, n) on the calling thread. A C++ exception from fn
   * fails the forward or backward that called parallel_for (DP_ERR_PLUGIN),
   * whatever it returns. */
  void (*parallel_for)(const dp_plugin_run* run, int64_t n, int64_t grain,
                       void (*fn)(void* user, int64_t begin, int64_t end), void* user);
  /* A uniform number in [0, 1), a pure function of (model seed, layer index,
   * step, global sample index of `row`, counter): the same on every split.
   * Safe from any thread. */
  float (*uniform01)(const dp_plugin_run* run, int64_t row, uint64_t counter);
  /* Version 1 as first published ends here. Appended since (check with
   * DP_PLUGIN_HAS(api, name) before use: an older host's table ends above). */

  /* As args_int, with a maximum too: "expected an integer in [min, max]". */
  int (*args_int_range)(dp_plugin_args* args, const char* key, int64_t def, int64_t min, int64_t max, int64_t* out);
  /* Append only. */
} dp_host_api;

/* Whether the host's table `api` has the function `name` (one appended
 * after version 1 was first published). */
#define DP_PLUGIN_HAS(api, name) \
  ((api)->struct_size >= offsetof(dp_host_api, name) + sizeof((api)->name))

/* What dp_plugin_init receives. */
typedef struct dp_host_api_base {
  size_t struct_size;
  /* The table of the given version, or NULL when this host cannot give it
   * (the host then reports which version the plugin asked for). */
  const dp_host_api* (*get_api)(const struct dp_host_api_base* base, uint32_t version);
  dp_plugin_registrar* registrar;
  const char* host_version; /* dp_version() */
} dp_host_api_base;

/* The one symbol a plugin exports. Returns 0 on success; non-zero with a
 * message in err (cap bytes) to refuse loading. Called once per context
 * that loads the library, on the loading thread. */
typedef int (*dp_plugin_init_fn)(const dp_host_api_base* base, char* err, size_t cap);
DP_PLUGIN_EXPORT int dp_plugin_init(const dp_host_api_base* base, char* err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* DP_PLUGIN_H */
