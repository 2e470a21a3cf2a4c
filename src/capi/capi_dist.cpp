// The C ABI of process groups (include/dp.h, "Process groups"): argument
// checks and handle plumbing; the work is in src/dist and src/group.
#include <string>

#include "capi/guard.h"
#include "capi/handles.h"
#include "data/handles.h"
#include "group/split.h"

using dp::fail;

extern "C" {

dp_status dp_process_group_create(const char* config_json, dp_process_group** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(out, "out must not be NULL");
  auto h = std::make_unique<dp_process_group>();
  h->pg = std::make_shared<dp::ProcessGroup>(dp::dist_config_from_json(config_json ? config_json : ""));
  *out = h.release();
  DP_GUARD_END
}

void dp_process_group_destroy(dp_process_group* pg) { delete pg; }

dp_status dp_process_group_rank(const dp_process_group* pg, int* rank) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg && rank, "pg and rank must not be NULL");
  *rank = pg->pg->rank();
  DP_GUARD_END
}

dp_status dp_process_group_world_size(const dp_process_group* pg, int* world_size) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg && world_size, "pg and world_size must not be NULL");
  *world_size = pg->pg->world_size();
  DP_GUARD_END
}

dp_status dp_process_group_local_rank(const dp_process_group* pg, int* local_rank) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg && local_rank, "pg and local_rank must not be NULL");
  *local_rank = pg->pg->local_rank();
  DP_GUARD_END
}

dp_status dp_process_group_local_world_size(const dp_process_group* pg, int* local_world_size) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg && local_world_size, "pg and local_world_size must not be NULL");
  *local_world_size = pg->pg->local_world_size();
  DP_GUARD_END
}

dp_status dp_process_group_barrier(dp_process_group* pg) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg, "pg is NULL");
  if (dp::Communicator* c = pg->pg->comm()) c->barrier(pg->pg->rank());
  DP_GUARD_END
}

dp_status dp_process_group_check_same(dp_process_group* pg, const char* what, const char* value) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg && what && value, "pg, what and value must not be NULL");
  pg->pg->check_same(what, value);
  DP_GUARD_END
}

dp_status dp_process_group_request_stop(dp_process_group* pg) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg, "pg is NULL");
  pg->pg->request_stop();
  DP_GUARD_END
}

dp_status dp_process_group_stop_requested(const dp_process_group* pg, int* processes) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(pg && processes, "pg and processes must not be NULL");
  *processes = pg->pg->stop_agreed();
  DP_GUARD_END
}

dp_status dp_group_create_distributed(dp_model* m, const char* devices, dp_process_group* pg, dp_group** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && devices && pg && out, "m, devices, pg and out must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  auto g = std::make_unique<dp_group>();
  g->model = m;
  g->procs = pg->pg;
  g->group = std::make_unique<dp::Group>(*m->model, devices, pg->pg.get());
  *out = g.release();
  DP_GUARD_END
}

dp_status dp_group_global_devices(const dp_group* g, int* count, int* first) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && count && first, "g, count and first must not be NULL");
  *count = g->group->global_size();
  *first = g->group->first_device();
  DP_GUARD_END
}

dp_status dp_group_comm_seconds(const dp_group* g, double* busy, double* exposed) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && busy && exposed, "g, busy and exposed must not be NULL");
  g->group->comm_seconds(busy, exposed);
  DP_GUARD_END
}

dp_status dp_loader_shard(dp_loader* loader, const dp_group* g) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(loader && g, "loader and g must not be NULL");
  const dp::Group& group = *g->group;
  dp::Loader& l = *loader->loader;
  if (dp::ProcessGroup* pg = group.process_group()) {
    const dp::LoaderConfig& c = l.config();
    pg->check_same("dataset or loader",
                   std::to_string(l.dataset_length()) + " samples of " + l.sample_shape().str() + ", targets " +
                       l.target_shape().str() + ", batch_size " + std::to_string(c.batch_size) + ", shuffle " +
                       std::to_string(c.shuffle) + ", drop_last " + std::to_string(c.drop_last) + ", seed " +
                       std::to_string(c.seed));
  }
  // The group's layout now, by value: the loader may outlive the group.
  const int devices = group.global_size(), first = group.first_device(), mine = group.size();
  const dp::SplitMode mode = group.split_mode();
  l.shard([=](int64_t rows, int64_t* first_row, int64_t* count) {
    dp::split_share(rows, devices, mode, first, mine, first_row, count);
  });
  DP_GUARD_END
}

}  // extern "C"
