/* dp — data-parallel neural-network training, as PyTorch's nn.DataParallel,
 * behind a stable C ABI.
 *
 * Conventions, for every function below:
 * - Every call that can fail returns a dp_status. On failure the thread-local
 *   message dp_last_error() says what went wrong and where (for a model, the
 *   JSON path), and the out-parameters are left untouched.
 * - No exception, abort or exit crosses this boundary; objects stay usable
 *   after a failed call.
 * - Objects are opaque handles. A function named *_create / *_from_* hands the
 *   caller a new object that the caller owns and releases with the matching
 *   *_destroy; every *_destroy accepts NULL.
 * - Thread safety: distinct objects may be used from distinct threads at once;
 *   one object must not be used by two threads at once unless said otherwise.
 *   A group or optimizer uses its model: do not use the model, or another
 *   group of it, from another thread while they run. (The calls that run or
 *   change a group check this: dp_group_forward, _backward, _zero_grad,
 *   _train_step, _forward_backward, _evaluate, _set_option, _set_training,
 *   _last_split, dp_optimizer_create, _step, _copy_state, _set_state,
 *   dp_checkpoint_save and _load; so do the calls that read or write a
 *   model's values: dp_model_copy_parameters, _set_parameters,
 *   _copy_gradients, _copy_buffers, _set_buffers, _load_safetensors,
 *   _save_safetensors, _save_weights, _export_onnx, and dp_group_create and
 *   _create_distributed. One made while another thread's runs on the same
 *   model fails with DP_ERR_INVALID_ARGUMENT rather than waiting or racing:
 *   "the group is in use by another thread's call" (the same group), "the
 *   model is in use by another thread's call" (a dp_model_* call), or "...
 *   through another group". In a process group the other ranks then wait in
 *   their collective until DP_COMM_TIMEOUT: do not share a model between
 *   threads there.)
 * - Lifetimes: a model must outlive its groups, a group its optimizers; a
 *   context must outlive everything created from it.
 */
#ifndef DP_H
#define DP_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define DP_API __declspec(dllexport)
#elif defined(__GNUC__)
#define DP_API __attribute__((visibility("default")))
#else
#define DP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version: bumped only on an incompatible change. */
#define DP_ABI_VERSION 1
#define DP_MAX_DIMS 8

typedef enum dp_status {
  DP_OK = 0,
  DP_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad enum, a too small buffer */
  DP_ERR_JSON = 2,             /* text that is not JSON */
  DP_ERR_MODEL = 3,            /* JSON that is not a valid model or config */
  DP_ERR_SHAPE = 4,            /* shapes that do not fit together */
  DP_ERR_IO = 5,               /* a file that cannot be read */
  DP_ERR_DEVICE = 6,           /* a device that does not exist or failed */
  DP_ERR_NUMERIC = 7,          /* a NaN or infinite loss */
  DP_ERR_OUT_OF_MEMORY = 8,
  DP_ERR_PLUGIN = 9,
  DP_ERR_INTERNAL = 10,        /* a bug in dp: please report it */
  DP_ERR_COMM = 11             /* another process of the process group died, left, or did not
                                  answer within DP_COMM_TIMEOUT; the group cannot be used again */
} dp_status;

typedef enum dp_dtype { DP_F32 = 0, DP_I64 = 1 } dp_dtype;

typedef struct dp_context dp_context;
typedef struct dp_model dp_model;
typedef struct dp_tensor dp_tensor;
typedef struct dp_group dp_group;
typedef struct dp_optimizer dp_optimizer;
typedef struct dp_dataset dp_dataset;
typedef struct dp_loader dp_loader;

/* The message of the last failed call on this thread; "" if none. Owned by
 * dp, valid until the next dp call on this thread. Never NULL. */
DP_API const char* dp_last_error(void);
/* "MAJOR.MINOR.PATCH"; static storage. */
DP_API const char* dp_version(void);
/* A static name of a status ("DP_ERR_MODEL"). */
DP_API const char* dp_status_name(dp_status status);

/* ---- Context: holds the layer registry and the loaded plugins. ---- */
DP_API dp_status dp_context_create(dp_context** out);
/* Unloads the context's plugins once nothing built from them remains:
 * destroy models (and their groups) before their context. */
DP_API void dp_context_destroy(dp_context* ctx);

typedef enum dp_context_option {
  /* Bytes of host memory a model built from this context may take with its
   * groups, optimizers and batches (parameters, gradients, buffers, the
   * replicas' gradients and layer scratch on CPUs (conv2d's unfolded input,
   * per worker thread), optimizer state, activations), each estimated and
   * checked before it is allocated: what does not fit is refused with
   * DP_ERR_OUT_OF_MEMORY naming the layer and the bytes. 0 (default): the
   * machine's available memory at the time of each check (MemAvailable).
   * Applies to models built after the call. */
  DP_CONTEXT_MEMORY_LIMIT = 0,
  /* 1: a model's JSON may load plugin libraries it names by path
   * ({"plugins": ["./swish.so"]}). 0 (default): a model file is data and
   * loads no code of its own choosing: its "plugins" may name libraries the
   * program already loaded (dp_context_load_plugin) or bare names found in
   * a DP_PLUGIN_PATH directory or dp's own plugin folder (below); anything
   * else is DP_ERR_PLUGIN. */
  DP_CONTEXT_ALLOW_MODEL_PLUGINS = 1
} dp_context_option;
/* Sets a context option (DP_ERR_INVALID_ARGUMENT for an unknown option or
 * value). Not thread-safe with other uses of the same context. */
DP_API dp_status dp_context_set_option(dp_context* ctx, dp_context_option option, int64_t value);

/* ---- Plugins: layer types from shared libraries (dp_plugin.h,
 * docs/plugins.md). ----
 * Loads a plugin into the context (dlopen RTLD_NOW | RTLD_LOCAL) and
 * registers its layer types for the models built from this context. path
 * with a '/' is a file path (relative to the current directory); a bare name
 * ("swish") is searched in the directories of DP_PLUGIN_PATH (colon-
 * separated; as given, then name.so, then libname.so), then in dp's own
 * plugin folder, <folder of libdp.so>/dp/plugins (pkg-config's plugindir
 * once installed; none when dp is linked into the program, not a shared
 * libdp.so), then in the current directory. A model's JSON may list
 * plugins too, {"plugins": ["swish"]}: by default only libraries already
 * loaded or bare names in DP_PLUGIN_PATH or dp's plugin folder;
 * paths ("./swish.so", relative to the model file for dp_model_from_file)
 * only with DP_CONTEXT_ALLOW_MODEL_PLUGINS. Loading a library
 * already loaded is a no-op. DP_ERR_PLUGIN, with nothing registered and the
 * context unchanged, for: a missing file, a library without dp_plugin_init,
 * a host API version this dp lacks, a type name already known (built in or
 * from another plugin), or an init that fails (its message is included).
 * Not thread-safe with other uses of the same context (models being built). */
DP_API dp_status dp_context_load_plugin(dp_context* ctx, const char* path);
/* How many plugins the context has loaded. */
DP_API dp_status dp_context_num_plugins(const dp_context* ctx, int* count);
/* Plugin `index` (load order): its canonical path and the layer types it
 * registered with their versions, "swish@1,rms_norm@1". Both strings are
 * owned by the context. */
DP_API dp_status dp_context_plugin_info(const dp_context* ctx, int index, const char** path, const char** layer_types);

/* ---- Models: built from JSON (docs/model-format.md). ---- */
DP_API dp_status dp_model_from_json(dp_context* ctx, const char* json, dp_model** out);
/* path: a regular file of at most 64 MiB holding the model's JSON; a missing
 * or unreadable file, a directory, a device or FIFO, or a larger file is
 * DP_ERR_IO naming the path (and the size and limit), found without reading
 * past the limit. */
DP_API dp_status dp_model_from_file(dp_context* ctx, const char* path, dp_model** out);
DP_API void dp_model_destroy(dp_model* m);
/* Total number of float parameters (all tensors). */
DP_API dp_status dp_model_num_parameters(const dp_model* m, int64_t* count);
/* Copies all parameters, in declaration order, into dst; count is the number
 * of floats dst holds and must be at least dp_model_num_parameters. */
DP_API dp_status dp_model_copy_parameters(const dp_model* m, float* dst, int64_t count);
/* Overwrites all parameters from src (count floats, declaration order). A
 * NaN or infinite value is DP_ERR_NUMERIC naming the tensor and element, and
 * nothing is set (the values every load accepts; set_buffers and
 * dp_optimizer_set_state too, where exp_avg_sq must also be >= 0). */
DP_API dp_status dp_model_set_parameters(dp_model* m, const float* src, int64_t count);
/* The accumulated gradients, same layout as the parameters. */
DP_API dp_status dp_model_copy_gradients(const dp_model* m, float* dst, int64_t count);
/* Parameter tensors: how many, and the name ("0.weight", as nn.Sequential
 * names them) and shape of one. *name is owned by the model. */
DP_API dp_status dp_model_num_parameter_tensors(const dp_model* m, int* count);
DP_API dp_status dp_model_parameter_info(const dp_model* m, int index, const char** name, int* ndim,
                                         int64_t shape[DP_MAX_DIMS]);
/* Buffers (batch-norm running statistics): same layout rules. */
DP_API dp_status dp_model_num_buffers(const dp_model* m, int64_t* count);
DP_API dp_status dp_model_copy_buffers(const dp_model* m, float* dst, int64_t count);
/* Overwrites all buffers from src (count floats, declaration order). */
DP_API dp_status dp_model_set_buffers(dp_model* m, const float* src, int64_t count);
/* Buffer tensors: how many, and the name ("1.running_mean", PyTorch's
 * state_dict name) and shape of one. *name is owned by the model. */
DP_API dp_status dp_model_num_buffer_tensors(const dp_model* m, int* count);
DP_API dp_status dp_model_buffer_info(const dp_model* m, int index, const char** name, int* ndim,
                                      int64_t shape[DP_MAX_DIMS]);
/* The per-sample input shape from the model's "input". */
DP_API dp_status dp_model_input_shape(const dp_model* m, int* ndim, int64_t shape[DP_MAX_DIMS]);
/* The per-sample output shape (of the last layer). */
DP_API dp_status dp_model_output_shape(const dp_model* m, int* ndim, int64_t shape[DP_MAX_DIMS]);

/* ---- Tensors: dense, row-major, on the host. ---- */
/* A new tensor holding a copy of data (numel * element size bytes). */
DP_API dp_status dp_tensor_from_host(dp_context* ctx, dp_dtype dtype, const void* data, int ndim,
                                     const int64_t* shape, dp_tensor** out);
/* Overwrites the tensor's contents (bytes must equal its size): lets a
 * training loop reuse one input tensor without allocating per step. */
DP_API dp_status dp_tensor_copy_from_host(dp_tensor* t, const void* src, size_t bytes);
/* A new zero-filled tensor (a buffer for dp_loader_next, say). */
DP_API dp_status dp_tensor_create(dp_context* ctx, dp_dtype dtype, int ndim, const int64_t* shape, dp_tensor** out);
DP_API dp_status dp_tensor_shape(const dp_tensor* t, int* ndim, int64_t shape[DP_MAX_DIMS]);
DP_API dp_status dp_tensor_dtype(const dp_tensor* t, dp_dtype* dtype);
/* Copies the contents out; bytes must be at least the tensor's size. */
DP_API dp_status dp_tensor_copy_to_host(const dp_tensor* t, void* dst, size_t bytes);
DP_API void dp_tensor_destroy(dp_tensor* t);
/* Zero-copy tensors (what the Python binding's NumPy and DLPack support is
 * built on).
 *
 * A borrowed tensor: a new tensor that views the caller's memory instead of
 * owning a copy. data (not NULL, aligned to the element size) holds numel *
 * element size bytes, row-major and contiguous, and must stay valid until the
 * tensor is destroyed; dp reads it where the tensor is an input and writes it
 * through dp_tensor_copy_from_host. release (may be NULL) is called once, with
 * user, by dp_tensor_destroy: the owner's hook to let go of the memory (a
 * DLPack deleter, a reference count). If the call fails, release is not called
 * and the caller still owns data.
 * A borrowed tensor never changes shape or storage: a call that would resize
 * it (dp_loader_next, which reshapes the tensors it fills) fails with
 * DP_ERR_INVALID_ARGUMENT ("cannot resize a borrowed tensor") and leaves it
 * as it was. Every other call takes it like any tensor. */
typedef void (*dp_release_fn)(void* user);
DP_API dp_status dp_tensor_from_host_borrowed(dp_context* ctx, dp_dtype dtype, void* data, int ndim,
                                              const int64_t* shape, dp_release_fn release, void* user,
                                              dp_tensor** out);
/* The address of a tensor's elements (row-major, contiguous; for a tensor of
 * no elements, NULL or an address not to be read or written). Reading and writing
 * through it is allowed while no dp call uses the tensor. Valid until the
 * tensor is resized (dp_loader_next may swap in other storage) or destroyed;
 * a borrowed tensor's is always the caller's data. */
DP_API dp_status dp_tensor_data(const dp_tensor* t, void** data);
/* 1 if the tensor is borrowed (dp_tensor_from_host_borrowed), else 0. */
DP_API dp_status dp_tensor_is_borrowed(const dp_tensor* t, int* borrowed);
/* Moves t's elements to page-locked host memory, as PyTorch's
 * Tensor.pin_memory(): GPU groups then copy batches from it asynchronously,
 * without a staging copy. Later resizes stay page-locked (a loader with
 * "pin_memory": true hands out such tensors itself). DP_ERR_DEVICE when
 * there is no usable GPU; DP_ERR_INVALID_ARGUMENT for a borrowed tensor. */
DP_API dp_status dp_tensor_pin_memory(dp_tensor* t);

/* ---- Device groups: nn.DataParallel over a list of devices. ---- */
/* devices: "cpu:0,cpu:1,cpu:2" or "cuda:0,cuda:1"; CPU and CUDA devices do
 * not mix in one group. A CPU device is a worker thread, whatever its
 * number: more devices than cores is allowed, and "cpu:0,cpu:0" is two
 * devices. A GPU may repeat ("cuda:0,cuda:0" runs two replicas on one GPU).
 * "auto" (the CLI's and Python's default) is not taken here: build the list
 * from dp_device_count. The group keeps one
 * persistent replica per device; CPU replicas share the model's parameters
 * and own their gradient buffers; each GPU holds one copy of the parameters,
 * kept identical by identical updates, and its replicas' own gradients.
 * Tensors passed in and out stay host tensors. DP_ERR_DEVICE names a device
 * that does not exist, a build without CUDA, or a layer type without a CUDA
 * implementation. While a GPU group trains a model, the dp_model_copy_*
 * calls fetch the newest values from the GPU. Several groups may share one
 * model: each call starts from the newest parameters, whichever group (CPU
 * or GPU) wrote them. */
DP_API dp_status dp_group_create(dp_model* m, const char* devices, dp_group** out);
/* The number of devices of `kind` ("cpu": the cores; "cuda": the GPUs this
 * process can use). For "cuda", *count is 0 when this build has no CUDA
 * backend or no GPU is usable, and *why (if not NULL) then points to a
 * sentence saying which, else to ""; it stays valid until the next call on
 * this thread. */
DP_API dp_status dp_device_count(const char* kind, int* count, const char** why);
/* A description of device `index` of `kind` ("NVIDIA H200, 139.8 GiB,
 * compute capability 9.0"; "CPU core 0 of AMD EPYC, oneDNN 2.6.3 sgemm,
 * avx512_core": the processor, and the library and instruction set of the
 * CPU's matrix products), valid until the next call on this thread. */
DP_API dp_status dp_device_name(const char* kind, int index, const char** name);
DP_API void dp_group_destroy(dp_group* g);
DP_API dp_status dp_group_num_devices(const dp_group* g, int* count);

typedef enum dp_group_option {
  /* DP_SPLIT_CHUNK (default): torch.chunk's rule, chunk = ceil(B/n), so 10
   * rows on 8 devices run as 2,2,2,2,2. DP_SPLIT_BALANCED: sizes differ by at
   * most one, 30 on 8 as 4,4,4,4,4,4,3,3. */
  DP_GROUP_SPLIT = 0,
  /* Threads each device uses for its own work (default 1; CPU devices). */
  DP_GROUP_THREADS_PER_DEVICE = 1,
  /* 1: float32 matrix products and convolutions on GPUs may use TF32 tensor
   * cores (faster, about 1e-3 relative error); 0 (default): full float32, as
   * PyTorch's default torch.backends.cuda.matmul.allow_tf32 = False. */
  DP_GROUP_ALLOW_TF32 = 2,
  /* 1: GPU convolutions use the algorithms cuDNN measures fastest, timed
   * once per shape on the first step (PyTorch's torch.backends.cudnn.benchmark);
   * 0 (default): cuDNN's heuristics, preferring deterministic algorithms, so
   * gradients are the same run to run. */
  DP_GROUP_CUDNN_BENCHMARK = 3,
  /* Mixed precision, as torch.autocast on CUDA: DP_PRECISION_FP32 (default)
   * computes everything in float32; DP_PRECISION_BF16 / _FP16 run the matrix
   * products (linear) and convolutions on GPUs with operands rounded to
   * bfloat16 / float16 and float32 accumulation (tensor cores), while
   * parameters, gradients (and their sum over devices), optimizer state,
   * checkpoints, activations between layers, softmax, losses and batch norm
   * stay float32. FP16 gradients may overflow or vanish without loss scaling
   * (dp_optimizer_set_grad_scaler). CPU devices compute in float32 only:
   * another value fails there with DP_ERR_DEVICE, the group unchanged. */
  DP_GROUP_PRECISION = 4
} dp_group_option;
enum { DP_SPLIT_CHUNK = 0, DP_SPLIT_BALANCED = 1 };
enum { DP_PRECISION_FP32 = 0, DP_PRECISION_BF16 = 1, DP_PRECISION_FP16 = 2 };
DP_API dp_status dp_group_set_option(dp_group* g, dp_group_option option, int64_t value);

/* Training mode (1, the default) or evaluation mode (0): dropout and batch
 * norm behave as in PyTorch's model.train() / model.eval(). Any other value:
 * DP_ERR_INVALID_ARGUMENT, the mode unchanged. */
DP_API dp_status dp_group_set_training(dp_group* g, int training);
/* Scatters input along dim 0, runs every replica, gathers the outputs on the
 * first device. *output is new, owned by the caller. */
DP_API dp_status dp_group_forward(dp_group* g, const dp_tensor* input, dp_tensor** output);
/* Back-propagates grad_output (the shape of the last forward's output) and
 * adds the parameter gradients into the model's (accumulates). */
DP_API dp_status dp_group_backward(dp_group* g, const dp_tensor* grad_output);
DP_API dp_status dp_group_zero_grad(dp_group* g);
/* The rows each device ran in the last forward or train step, in device
 * order (idle devices are not listed). */
DP_API dp_status dp_group_last_split(const dp_group* g, int64_t* sizes, int capacity, int* count);

/* ---- Process groups: one group over the devices of several processes. ----
 * Processes on one machine or many train one model as if all their devices
 * were in one group (docs/distributed.md). Each process joins a process
 * group, then creates its group with dp_group_create_distributed from the
 * same model JSON, naming its own devices; every process then makes the
 * same calls in the same order. The global batch is split over all
 * processes' devices in rank order by the group's split rule; each process
 * passes only its rows of it (a loader sharded with dp_loader_shard reads
 * exactly those), and gets the global batch's loss, accuracy, batch-norm
 * statistics and gradients, so results do not depend on the number of
 * processes. Processes communicate over TCP with Gloo (or, in a job mpirun
 * started, with Open MPI's collectives: "backend": "mpi" or DP_BACKEND=mpi,
 * where a failure inside a step ends the whole job instead of returning
 * DP_ERR_COMM); on GPUs, gradients are summed with NCCL over every process's
 * GPUs. Every process names CPU
 * devices, or every process CUDA devices (DP_ERR_DEVICE otherwise).
 *
 * A process that dies or stops answering fails its peers' calls with
 * DP_ERR_COMM within DP_COMM_TIMEOUT seconds (default 300); after
 * DP_ERR_COMM the process group and its groups cannot be used again.
 * Errors every process detects alike (differing models, a refused input, a
 * NaN loss) leave everything usable, on every process. */
typedef struct dp_process_group dp_process_group;
/* Joins the process group and returns once every process has (a collective
 * call). config_json NULL or "" reads the launcher's environment: torchrun,
 * Slurm-style and Kubernetes jobs (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_RANK,
 * _SIZE, _LOCAL_RANK) or srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID);
 * with none of them, a world of one process. A JSON object's keys override
 * them: {"rank": 1, "world_size": 2, "local_rank": 1, "master_addr":
 * "10.0.0.1", "master_port": 29500, "timeout_s": 300, "backend": "gloo"}
 * ("gloo" or "mpi"; default DP_BACKEND, else "gloo"). Rank 0 serves the
 * start-up store at master_addr:master_port. Errors: DP_ERR_COMM naming the
 * ranks still missing after the timeout and the address tried, or a
 * differing world size; DP_ERR_IO when rank 0 cannot listen there. *out is
 * owned by the caller; destroy it after the groups created on it (they keep
 * it alive until then). */
DP_API dp_status dp_process_group_create(const char* config_json, dp_process_group** out);
DP_API void dp_process_group_destroy(dp_process_group* pg);
DP_API dp_status dp_process_group_rank(const dp_process_group* pg, int* rank);
DP_API dp_status dp_process_group_world_size(const dp_process_group* pg, int* world_size);
/* The process's rank among those on its machine: LOCAL_RANK (or mpirun's,
 * Slurm's) or the config's "local_rank"; where neither gives it, its place in
 * rank order among the group's processes with its host name. */
DP_API dp_status dp_process_group_local_rank(const dp_process_group* pg, int* local_rank);
/* The group's processes on this machine (those with this host name): they
 * share its cores. */
DP_API dp_status dp_process_group_local_world_size(const dp_process_group* pg, int* local_world_size);
/* Returns once every process has called it. */
DP_API dp_status dp_process_group_barrier(dp_process_group* pg);
/* A collective check that every process has the same value of a setting of
 * its own (a program's flags, say), compared as text: DP_ERR_INVALID_ARGUMENT
 * on every process when one differs, "rank R's <what> differs from rank 0's:
 * rank 0 has <value>, rank R has <value>"; DP_ERR_COMM naming the rank that
 * left or did not call it within the time limit. Goes through the start-up
 * store, not the collectives, so it is for setting up, not for every step. */
DP_API dp_status dp_process_group_check_same(dp_process_group* pg, const char* what, const char* value);
/* Stopping together, e.g. on Ctrl-C in one process's shell (a process that
 * stops alone leaves the others waiting in its next collective until
 * DP_COMM_TIMEOUT). A process asks with dp_process_group_request_stop; the
 * request travels with the results of the next job of a group on pg
 * (dp_group_train_step, dp_group_forward_backward, dp_group_evaluate,
 * dp_group_forward; not dp_group_backward), at no extra cost, and after that
 * job dp_process_group_stop_requested gives every process the same answer:
 * *processes, how many had asked (0: none yet; it stays set). A training
 * loop checks it after each step and, when non-zero, leaves the loop on
 * every process after the same step, then saves (dp_checkpoint_save is
 * collective). Not for a signal handler: set a flag there and ask from the
 * loop. In a world of one process a request is agreed at once. */
DP_API dp_status dp_process_group_request_stop(dp_process_group* pg);
DP_API dp_status dp_process_group_stop_requested(const dp_process_group* pg, int* processes);
/* A group over this process's `devices` ("cpu:0,cpu:1"), part of one group
 * over every process's devices (a collective call). Every process starts
 * from rank 0's parameters and buffers. DP_ERR_INVALID_ARGUMENT on every
 * process when their models differ, naming the rank and what differs.
 * dp_group_forward returns this process's rows; dp_group_train_step and
 * dp_group_evaluate the global batch's loss and accuracy; dp_group_last_split
 * this process's devices' rows; dp_checkpoint_save writes on rank 0 only,
 * and dp_checkpoint_load reads on every process. */
DP_API dp_status dp_group_create_distributed(dp_model* m, const char* devices, dp_process_group* pg, dp_group** out);
/* The devices of all processes, and where this process's begin among them. */
DP_API dp_status dp_group_global_devices(const dp_group* g, int* count, int* first);
/* Since the group was created: seconds this process spent in collectives
 * with the other processes (*busy), and the part of them its steps waited
 * for after their own backward had finished (*exposed: what overlapping
 * communication with backward did not hide). 0 without processes. */
DP_API dp_status dp_group_comm_seconds(const dp_group* g, double* busy, double* exposed);

/* ---- Optimizers: JSON config, PyTorch's names, defaults and update formulas. ----
 * {"type": "sgd", "lr": 0.001, "momentum": 0, "dampening": 0, "nesterov": false, "weight_decay": 0}
 * {"type": "adam" | "adamw", "lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8,
 *  "weight_decay": 0 (adam) | 0.01 (adamw)}
 * (the values shown are the defaults; "type" is required) */
DP_API dp_status dp_optimizer_create(dp_group* g, const char* json_config, dp_optimizer** out);
/* One step on the model's gradients. With no backward (dp_group_backward,
 * dp_group_forward_backward, dp_group_train_step) since dp_group_zero_grad or
 * the group's creation it does nothing and counts no step, as torch.optim
 * skips parameters whose .grad is None (zero_grad's default). */
DP_API dp_status dp_optimizer_step(dp_optimizer* opt);
/* The learning rate, read and set (a schedule sets it before each step: read
 * after step k it is step k's, where PyTorch's scheduler.get_last_lr() after
 * k scheduler.step() calls shows step k + 1's). */
DP_API dp_status dp_optimizer_lr(const dp_optimizer* opt, double* lr);
/* With a schedule, sets its base learning rate (PyTorch's initial_lr). */
DP_API dp_status dp_optimizer_set_lr(dp_optimizer* opt, double lr);
/* A learning-rate schedule, as torch.optim.lr_scheduler computes it: before
 * optimizer step t (0-based; t = the steps taken so far, plus those a grad
 * scaler skipped, which checkpoints hold, so a resumed run follows the same
 * curve) the learning rate becomes
 * schedule(base, t), base being the learning rate when the schedule is set.
 * NULL or "": none (the base learning rate again). Per step, not per epoch;
 * the values shown are the defaults (PyTorch's), 1/3 meaning exactly that (a
 * written 0.333 is taken as written):
 * {"type": "constant"}                                                             the base lr
 * {"type": "linear", "start_factor": 1/3, "end_factor": 1, "total_iters": 5}     LinearLR
 * {"type": "step", "step_size": N, "gamma": 0.1}                                   StepLR
 * {"type": "exponential", "gamma": G}                                              ExponentialLR
 * {"type": "multistep", "milestones": [N, ...], "gamma": 0.1}                      MultiStepLR
 * {"type": "cosine", "T_max": N, "eta_min": 0}                                     CosineAnnealingLR
 * {"type": "cosine_warmup", "warmup_steps": W, "total_steps": N, "warmup_start_factor": 1/3, "eta_min": 0}
 *     SequentialLR(LinearLR for W steps, then CosineAnnealingLR(T_max = N - W))
 * {"type": "onecycle", "max_lr": X, "total_steps": N, "pct_start": 0.3, "anneal_strategy": "cos",
 *  "div_factor": 25, "final_div_factor": 1e4, "three_phase": false}
 *     OneCycleLR with cycle_momentum=False (its own base: max_lr / div_factor);
 *     after total_steps the last value stays.
 * DP_ERR_JSON / DP_ERR_MODEL (naming the key) for a bad schedule, which
 * leaves the optimizer's schedule as it was. */
DP_API dp_status dp_optimizer_set_lr_schedule(dp_optimizer* opt, const char* json);
/* torch.nn.utils.clip_grad_norm_(parameters, max_norm) before every step
 * (dp_group_train_step's and dp_optimizer_step's): the global 2-norm of the
 * gradients summed over every device (and process), the same for every
 * split of the batch up to rounding (the sums of two splits differ in their
 * last bits, as N devices' gradients differ from one's); above max_norm, the gradients are scaled in place by
 * max_norm / (norm + 1e-6), computed in float32 as PyTorch does. 0 turns it
 * off (the default); INFINITY measures the norm without clipping. A
 * non-finite norm takes no step: DP_ERR_NUMERIC, parameters and optimizer
 * state unchanged (a train step's gradients are left zero). In a process
 * group every process must call it alike (checked: DP_ERR_INVALID_ARGUMENT). */
DP_API dp_status dp_optimizer_set_clip_grad_norm(dp_optimizer* opt, double max_norm);
/* The last step's gradient norm, before clipping (what clip_grad_norm_
 * returns); 0 before the first. DP_ERR_INVALID_ARGUMENT when no norm is
 * measured (clipping off). */
DP_API dp_status dp_optimizer_grad_norm(const dp_optimizer* opt, double* norm);
/* Dynamic loss scaling, as torch.amp.GradScaler("cpu" or "cuda", ...):
 * {"init_scale": 65536, "growth_factor": 2, "backoff_factor": 0.5,
 *  "growth_interval": 2000, "enabled": true} (every key optional, PyTorch's
 * defaults); NULL or "" turns it off (the default). Each dp_group_train_step
 * scales the loss's gradient by the scale (a float32), then, before the
 * step, multiplies the gradients summed over every device and process by
 * float32(1 / double(scale)) and checks them for inf and NaN. A step with
 * an inf or NaN gradient (and a finite loss) is skipped, as PyTorch skips
 * it: DP_OK, parameters and optimizer state unchanged (a train step's
 * gradients are left zero), the scale multiplied by backoff_factor, the
 * skipped-step count increased; otherwise the step is taken and after
 * growth_interval steps in a row without one the scale is multiplied by
 * growth_factor (unless that overflows float32). With clipping on, the
 * unscaled gradients are clipped (PyTorch's unscale_, clip_grad_norm_,
 * step); dp_optimizer_grad_norm of a skipped step is inf or NaN. A NaN or
 * infinite loss stays an error (DP_ERR_NUMERIC, nothing changes, the scaler
 * included: the loss is computed unscaled, so no scale would help); so is,
 * with clipping on, a norm that is finite while scaled but not once unscaled
 * (a scale below 1: the true gradients overflow float32; PyTorch would step
 * with NaN), and a scale backed off below 2^-127, whose inverse overflows
 * float32 (at the step after that skip). A learning-rate schedule counts
 * skipped steps as steps (as PyTorch's scheduler.step() runs every
 * iteration). While the scale is a power of two (the defaults) and nothing
 * overflows or falls into float32's subnormal range, float32 training with
 * the scaler gives bitwise the parameters of training without it.
 * dp_optimizer_step unscales, checks and skips alike, and expects the
 * gradients to be scaled already: pass loss_scale times the scale to
 * dp_group_forward_backward (PyTorch's scaler.scale(loss)), or a grad_output
 * multiplied by it to dp_group_backward. Setting it starts the scale at
 * init_scale (call it before dp_checkpoint_load, which restores the state:
 * scale, growth tracker, skipped steps; the settings stay these, and a
 * tracker saved under a longer growth_interval is cut to this one's less
 * one, so the scale grows at the next clean step). DP_ERR_JSON / DP_ERR_MODEL (naming
 * the key) for bad settings, which leave the optimizer as it was. In a
 * process group every process must call it alike (checked:
 * DP_ERR_INVALID_ARGUMENT). */
DP_API dp_status dp_optimizer_set_grad_scaler(dp_optimizer* opt, const char* json);
/* The grad scaler's state: *scale the scale the next step's loss gradient
 * is multiplied by (PyTorch's get_scale(); 1 when the scaler is off),
 * *growth_tracker the steps in a row without inf/NaN since the scale last
 * changed (0 when off), *skipped_steps the steps it skipped since the
 * optimizer was created (or as the checkpoint loaded says). Each may be NULL. */
DP_API dp_status dp_optimizer_grad_scaler_state(const dp_optimizer* opt, double* scale, int64_t* growth_tracker,
                                                int64_t* skipped_steps);
/* Restores the grad scaler's state (what dp_optimizer_grad_scaler_state
 * read, torch.amp.GradScaler.load_state_dict's "scale" and
 * "_growth_tracker"): scale a finite float32 > 0, growth_tracker >= 0 (cut
 * to growth_interval less one, as dp_checkpoint_load does), skipped_steps >=
 * 0. The settings stay this optimizer's (call it after
 * dp_optimizer_set_grad_scaler, which starts the scale afresh); with the
 * scaler off, the scale and tracker are unused. DP_ERR_INVALID_ARGUMENT
 * (nothing changes) for a value out of range. */
DP_API dp_status dp_optimizer_set_grad_scaler_state(dp_optimizer* opt, double scale, int64_t growth_tracker,
                                                    int64_t skipped_steps);
/* The optimizer's state, as PyTorch's optimizer.state_dict()["state"] holds
 * it: per-parameter arrays named "momentum_buffer" (SGD with momentum),
 * "exp_avg" and "exp_avg_sq" (Adam, AdamW), each laid out as the parameters
 * (dp_model_num_parameters floats, in declaration order: slice them by
 * dp_model_parameter_info), zero until the first step; plain SGD keeps none.
 * As in PyTorch, SGD's first step (steps 0) starts the momentum buffer from
 * the gradient: a buffer set before it is replaced (set the steps too).
 * dp_optimizer_state_name's *name is owned by the optimizer. From a GPU
 * group, dp_optimizer_copy_state reads the newest values (synchronising);
 * dp_optimizer_set_state's reach the GPUs at the next step. In a process
 * group every process must set the same values (as dp_checkpoint_load does
 * from one file); nothing checks it. DP_ERR_INVALID_ARGUMENT for an unknown
 * name (listing this optimizer's) or a count that does not fit; nothing
 * changes then. */
DP_API dp_status dp_optimizer_num_states(const dp_optimizer* opt, int* count);
DP_API dp_status dp_optimizer_state_name(const dp_optimizer* opt, int index, const char** name);
/* count: the floats dst holds, at least dp_model_num_parameters. */
DP_API dp_status dp_optimizer_copy_state(const dp_optimizer* opt, const char* name, float* dst, int64_t count);
/* count: exactly dp_model_num_parameters. */
DP_API dp_status dp_optimizer_set_state(dp_optimizer* opt, const char* name, const float* src, int64_t count);
/* The steps taken (PyTorch's per-parameter "step": Adam's bias corrections
 * and, with the steps a grad scaler skipped, a schedule's position), read
 * and set; steps >= 0. */
DP_API dp_status dp_optimizer_steps(const dp_optimizer* opt, int64_t* steps);
DP_API dp_status dp_optimizer_set_steps(dp_optimizer* opt, int64_t steps);
DP_API void dp_optimizer_destroy(dp_optimizer* opt);

/* zero_grad, forward, the model's loss (reduced over the whole batch),
 * backward, optimizer step. target: int64 class indices [B] for
 * cross_entropy and nll, float32 of the output's shape for the other losses
 * (mse, l1, smooth_l1, huber, bce, bce_with_logits). *loss (may be NULL)
 * receives the batch loss. A NaN or infinite loss (infinite as the float
 * *loss receives: beyond FLT_MAX) returns DP_ERR_NUMERIC and leaves the
 * parameters as they were; its forward ran, so the group's step
 * count (which keys dropout's masks) moved on, as PyTorch's random generator
 * does: a run that skips a bad batch draws other masks after it than a run
 * that never met it. A call refused before its forward (a bad shape) counts
 * nothing. */
DP_API dp_status dp_group_train_step(dp_group* g, dp_optimizer* opt, const dp_tensor* input, const dp_tensor* target,
                                     float* loss);
/* Gradient accumulation, as PyTorch's (loss * loss_scale).backward(): forward,
 * the model's loss over the whole batch, backward, and the gradients of
 * loss_scale * loss ADDED into the model's (no zero_grad, no step; then
 * dp_optimizer_step and dp_group_zero_grad). K batches with loss_scale 1/K
 * give the gradients of one batch K times larger (up to rounding; dropout
 * masks and batch-norm statistics are per batch, as in PyTorch; with
 * cross_entropy's or nll's class weights or ignored rows each batch's mean
 * divides by its own weight, as PyTorch's loop of (loss / K).backward()).
 * *loss (may be NULL) receives the unscaled batch loss. A NaN or infinite
 * loss (also: beyond FLT_MAX) returns DP_ERR_NUMERIC and leaves the
 * gradients as they were. */
DP_API dp_status dp_group_forward_backward(dp_group* g, const dp_tensor* input, const dp_tensor* target,
                                           double loss_scale, float* loss);
/* The model's loss without training (evaluation); *loss receives it, and
 * *correct (may be NULL) the number of rows whose arg-max equals the target
 * (int64 class targets: cross_entropy, nll; 0 otherwise). Always in evaluation mode (dropout off,
 * batch norm from its running statistics, which stay unchanged), whatever
 * dp_group_set_training says, as model.eval() under torch.no_grad(). A NaN
 * input or loss is not an error here: *loss is NaN (as dp_group_forward's
 * outputs); only training steps refuse it (DP_ERR_NUMERIC). */
DP_API dp_status dp_group_evaluate(dp_group* g, const dp_tensor* input, const dp_tensor* target, float* loss,
                                   int64_t* correct);

/* ---- Datasets: samples of a float32 input of fixed shape and a target. ----
 * The target is an int64 class index (shape []) or float32 values of a fixed
 * shape. A dataset is read by a loader's worker threads at once: its
 * functions, callbacks included, must be safe to call concurrently. */

/* IDX files (MNIST, Fashion-MNIST), gzip-compressed or not: images [1, H, W]
 * with pixels scaled to [0, 1], int64 labels. Errors name the file and offset. */
DP_API dp_status dp_dataset_from_idx(dp_context* ctx, const char* images_path, const char* labels_path,
                                     dp_dataset** out);
/* CIFAR-10 binary batches (data_batch_1.bin ...): images [3, 32, 32] in [0, 1]. */
DP_API dp_status dp_dataset_from_cifar10(dp_context* ctx, const char* const* paths, int count, dp_dataset** out);
/* count samples from memory: inputs count * prod(sample_shape) floats; targets
 * count int64 (target_ndim 0) or count * prod(target_shape) floats. With
 * borrow = 1 dp reads the caller's arrays, which must outlive the dataset;
 * with borrow = 0 it copies them. A shape, or count times it, whose element
 * count overflows is DP_ERR_SHAPE; a copy larger than the machine's
 * available memory DP_ERR_OUT_OF_MEMORY naming the bytes, before allocating. */
DP_API dp_status dp_dataset_from_arrays(dp_context* ctx, const float* inputs, int ndim, const int64_t* sample_shape,
                                        int64_t count, dp_dtype target_dtype, const void* targets, int target_ndim,
                                        const int64_t* target_shape, int borrow, dp_dataset** out);
/* A dataset of the caller's: get_item fills one sample (input: prod(sample
 * shape) floats; target: one int64 or prod(target shape) floats) and returns
 * 0, or non-zero with a message in error (error_capacity bytes) to fail the
 * batch: dp_loader_next then returns DP_ERR_INVALID_ARGUMENT, "dataset
 * callback failed at index I: <message>", and the next call goes on with
 * the next batch. Called from loader threads, concurrently. release (may be NULL) runs
 * when the dataset is destroyed; if this call fails, it is not called (user stays the
 * caller's to free). The struct is versioned by struct_size. */
typedef struct dp_dataset_callbacks {
  size_t struct_size; /* sizeof(dp_dataset_callbacks) */
  void* user;
  int64_t length;
  int (*get_item)(void* user, int64_t index, float* input, void* target, char* error, size_t error_capacity);
  void (*release)(void* user);
} dp_dataset_callbacks;
DP_API dp_status dp_dataset_from_callbacks(dp_context* ctx, const dp_dataset_callbacks* callbacks, int ndim,
                                           const int64_t* sample_shape, dp_dtype target_dtype, int target_ndim,
                                           const int64_t* target_shape, dp_dataset** out);
DP_API dp_status dp_dataset_length(const dp_dataset* ds, int64_t* count);
DP_API dp_status dp_dataset_sample_shape(const dp_dataset* ds, int* ndim, int64_t shape[DP_MAX_DIMS]);
/* Transforms applied as samples are read, in this order (JSON; all optional):
 * {"random_crop": {"size": 32, "padding": 4}, "horizontal_flip": 0.5,
 *  "normalize": {"mean": [0.2860], "std": [0.3530]}}
 * Random choices are a pure function of (loader seed, epoch, sample index). */
DP_API dp_status dp_dataset_set_transform(dp_dataset* ds, const char* json);
DP_API void dp_dataset_destroy(dp_dataset* ds);

/* ---- Loaders: shuffled batches assembled ahead by worker threads. ----
 * {"batch_size": 64, "shuffle": true, "drop_last": false, "num_workers": 2,
 *  "prefetch_factor": 2, "seed": 0, "pin_memory": false}
 * PyTorch's DataLoader names and defaults (batch_size 1, shuffle false,
 * num_workers 0: batches assembled by the calling thread; prefetch_factor 2
 * batches ahead per worker, also accepted as "prefetch"); "seed" (default 0)
 * keys the shuffle, as a torch.Generator would. The order of an epoch is a
 * pure function of (seed, epoch). The dataset must outlive the loader. */
DP_API dp_status dp_loader_create(dp_dataset* ds, const char* json_config, dp_loader** out);
/* Stops the workers and frees the loader; returns once they are joined.
 * Called from one of its own workers (inside the dataset's get_item: a
 * garbage collector running there), it returns at once and another thread
 * finishes the job after that callback returns: the callbacks' user data must
 * then stay valid until the process ends or the caller knows it is done. */
DP_API void dp_loader_destroy(dp_loader* loader);
/* Batches per epoch. */
DP_API dp_status dp_loader_num_batches(const dp_loader* loader, int64_t* count);
/* The next batch of the current epoch into input and target (caller-owned
 * tensors, given the batch's shape [rows, ...] and the dataset's dtypes,
 * whatever they held before; no allocation once they are large enough).
 * *rows is 0 at the end of an epoch, and the tensors then hold 0 rows; the
 * next call starts the next epoch. */
DP_API dp_status dp_loader_next(dp_loader* loader, dp_tensor* input, dp_tensor* target, int64_t* rows);
/* Where the loader stands: the epoch and the index of the next batch. */
DP_API dp_status dp_loader_position(const dp_loader* loader, int64_t* epoch, int64_t* batch);
/* Continues from a position (a checkpoint's). */
DP_API dp_status dp_loader_seek(dp_loader* loader, int64_t epoch, int64_t batch);
/* A distributed sampler: from now on the loader reads only this process's
 * rows of each global batch (its devices' share under g's split rule at
 * this call), so that the processes' loaders together read every batch
 * once, in the order of one process's loader (the same seed, shuffle and
 * batch size on every process). dp_loader_next then returns in *rows the
 * global batch's rows, so that every process's loop ends together, and
 * resizes the tensors to this process's rows (possibly 0). Call it before
 * the loader's first batch. */
DP_API dp_status dp_loader_shard(dp_loader* loader, const dp_group* g);

/* ---- Weights and checkpoints: safetensors files. ---- */
/* Parameters and buffers by name ("0.weight", "bn.running_mean"), as
 * PyTorch's state_dict() names them for the same architecture; a file written
 * by safetensors.torch.save_file(model.state_dict(), path) loads. Every
 * parameter must be present with its shape (float32); num_batches_tracked is
 * ignored. A NaN or infinite value is DP_ERR_IO naming the tensor and
 * element. On failure the model is unchanged. Saving (here and in
 * dp_checkpoint_save) refuses, with DP_ERR_NUMERIC naming the tensor and
 * element and nothing written, values no load would take: a NaN or infinite
 * parameter, buffer or optimizer state, a negative exp_avg_sq (training can
 * overflow a parameter with a finite loss: a huge learning rate). */
DP_API dp_status dp_model_load_safetensors(dp_model* m, const char* path);
DP_API dp_status dp_model_save_safetensors(const dp_model* m, const char* path);
/* The weights for PyTorch: what dp_model_save_safetensors writes, plus a
 * num_batches_tracked (int64, 0: dp keeps no count) beside each batch
 * norm's running_var, so that the file holds exactly the keys of PyTorch's
 * state_dict() for the same architecture and
 * model.load_state_dict(safetensors.torch.load_file(path)) takes it with
 * strict=True. Written as every file dp writes (dp_checkpoint_save). */
DP_API dp_status dp_model_save_weights(const dp_model* m, const char* path);
/* The model with its current weights as an ONNX file (opset 17, IR version 8)
 * for inference runtimes such as ONNX Runtime: evaluation form (batch norm
 * with its running statistics, dropout removed); input "input" and output
 * "output", float32, [N, ...] with a symbolic batch dimension N;
 * initializers named as the state_dict ("0.weight"); the model JSON in the
 * metadata property "dp.model". Checked with ONNX's checker, then written to
 * path as every file dp writes (see "Files dp writes" below). DP_ERR_MODEL
 * for a layer whose type has no ONNX mapping (a plugin's: the message names
 * the layer and its type) or weights over ONNX's 2 GiB; DP_ERR_IO for a path
 * that cannot be written, or a libdp built without ONNX support (Debian's
 * libonnx-dev). */
DP_API dp_status dp_model_export_onnx(const dp_model* m, const char* path);
/* A training checkpoint: parameters, buffers, the optimizer's state (opt may
 * be NULL), the loader's position (loader may be NULL), the group's step, and
 * in __metadata__ the model JSON, what it means ("model_canonical", which
 * dp_checkpoint_load compares) and user_metadata_json (a JSON object, may be
 * NULL), "data_crc32", the CRC-32 of the tensor data, and "header_crc32",
 * that of the tensors' names, dtypes and shapes and every other metadata
 * key and value. Written as every file dp writes:
 *
 * Files dp writes (checkpoints, weights, ONNX): to a new temporary file
 * beside path, fsynced and renamed over it, so a crash or a failed write
 * leaves the old file or the new one, never half of one; a replaced file
 * keeps its permissions. A symbolic link to an existing file is followed by
 * the kernel (fs.protected_symlinks applies) and that file replaced, the
 * link kept; a link to nothing is DP_ERR_IO. An existing file that is not a
 * regular one (/dev/null, a FIFO, /dev/stdout) is written in place, as far as
 * the write got; a FIFO without a reader is DP_ERR_IO at once. */
DP_API dp_status dp_checkpoint_save(const char* path, const dp_group* g, const dp_optimizer* opt,
                                    const dp_loader* loader, const char* user_metadata_json);
/* Restores what dp_checkpoint_save wrote into the same model's group (the
 * same seed, input, loss, and layers with the same types, names, inputs and
 * hyperparameters, defaults included; free text, spacing and how values are
 * written may differ; DP_ERR_MODEL names the first difference),
 * optimizer (may be NULL: else the same type with the same hyperparameters,
 * all but the learning rate, which is the loading optimizer's; DP_ERR_MODEL
 * names the first difference, "/betas/0 is 0.9 in the checkpoint, 0.5 here")
 * and loader (may be NULL). A truncated, corrupted or
 * mismatched file is rejected with a clear error and changes nothing:
 * DP_ERR_IO for tensor data or a header that does not match data_crc32 or
 * header_crc32 (each checked when the file has it; checkpoints written
 * before dp recorded them load without), and
 * for a NaN or infinite parameter, buffer or optimizer state or a negative
 * exp_avg_sq (naming the tensor and element). A loader position saved inside
 * an epoch needs a loader of the same batch size, shuffle, seed, drop_last and
 * dataset length (DP_ERR_INVALID_ARGUMENT naming both, else it would resume at
 * other samples); at an epoch's end any loader goes on (at the end of its own
 * epoch). */
DP_API dp_status dp_checkpoint_load(const char* path, dp_group* g, dp_optimizer* opt, dp_loader* loader);
/* The checkpoint's __metadata__ as one JSON object (values are strings, as
 * the format requires). *json is owned by the caller: free it with dp_free. */
DP_API dp_status dp_checkpoint_metadata(const char* path, char** json);
/* Frees memory that dp handed to the caller (dp_checkpoint_metadata). NULL is fine. */
DP_API void dp_free(void* p);

#ifdef __cplusplus
}
#endif

#endif /* DP_H */
