// Start-up of a process group (dist/store.h) with real processes over
// loopback: ranks forked from this test find each other through rank 0's
// store; a rank that never comes, a world size that differs and a port
// nobody serves end in an error naming what is wrong, within the time limit,
// never a hang. And the launchers' environments parse as they should.
#include <arpa/inet.h>
#include <dirent.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/store.h"
#include "ranks.h"

namespace {

RankFn rank_fn(int rank, int world, int port, double timeout_s) {
  return joined_rank(rank, world, port, timeout_s, [rank](dp::TcpStore& store, const dp::DistConfig& c) {
    // After the rendezvous the store still works for everyone.
    store.set("hello/" + std::to_string(rank), std::to_string(rank * 10));
    auto v = store.get({"hello/0"}, c.timeout_s);
    if (v[0] != "0") throw std::runtime_error("hello/0 is '" + v[0] + "'");
    // Rank 0's store leaves with it: it waits until every rank has read.
    store.set("read/" + std::to_string(rank), "1");
    if (rank == 0)
      for (int r = 1; r < c.world_size; ++r) store.get({"read/" + std::to_string(r)}, c.timeout_s);
    return std::string();
  });
}

}  // namespace

TEST_CASE("three processes find each other through rank 0's store") {
  const int port = free_port();
  // Rank 0 last: the others wait for its store.
  auto out = run_ranks({rank_fn(1, 3, port, 10), rank_fn(2, 3, port, 10), rank_fn(0, 3, port, 10)}, 30);
  for (const Outcome& o : out) {
    CAPTURE(o.message);
    CHECK(o.status == 0);
  }
}

TEST_CASE("a rank that never joins: every other rank fails within the time limit, naming it and the address") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto out = run_ranks({rank_fn(0, 3, port, 2), rank_fn(1, 3, port, 2)}, 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Outcome& o : out) {
    CAPTURE(o.message);
    CHECK(o.status == 1);
    CHECK(o.message.find("rank 2 of 3 did not join within 2 s") != std::string::npos);
    CHECK(o.message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  CHECK(took < 15);
}

TEST_CASE("world sizes that differ between processes: a clear error") {
  const int port = free_port();
  auto out = run_ranks({rank_fn(0, 2, port, 10), rank_fn(1, 3, port, 10)}, 30);
  // Whichever rank notices first says so, and the other fails with its words.
  for (const Outcome& o : out) {
    CAPTURE(o.message);
    CHECK(o.status == 1);
    const bool seen_by_0 = o.message.find("rank 1 joined a world of 3 processes, rank 0 one of 2") != std::string::npos;
    const bool seen_by_1 = o.message.find("rank 0 joined a world of 2 processes, rank 1 one of 3") != std::string::npos;
    CHECK((seen_by_0 || seen_by_1));
    CHECK(o.message.find("WORLD_SIZE differs between the processes") != std::string::npos);
  }
}

TEST_CASE("two processes given one rank: every process of the rendezvous fails at once, saying so") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 2 never comes: without the check all three would wait for it the
  // whole 20 s, and the message would name rank 2.
  auto out = run_ranks({rank_fn(0, 3, port, 20), rank_fn(1, 3, port, 20), rank_fn(1, 3, port, 20)}, 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Outcome& o : out) {
    CAPTURE(o.message);
    CHECK(o.status == 1);
    CHECK(o.message.find("two processes announced rank 1") != std::string::npos);
  }
  CHECK(took < 10);
}

TEST_CASE("a port nobody serves: the error names the address, within the time limit") {
  const int port = free_port();
  auto out = run_ranks({rank_fn(1, 2, port, 1)}, 30);
  CAPTURE(out[0].message);
  CHECK(out[0].status == 1);
  CHECK(out[0].message.find("cannot reach the store of rank 0 at 127.0.0.1:" + std::to_string(port) + " within 1 s") !=
        std::string::npos);
  CHECK(out[0].message.find("MASTER_PORT") != std::string::npos);
}

// Rank 0's store stays up as long as the job: whatever else reaches its
// port (a health probe, a scanner, a client of another protocol) must not
// cost it a descriptor per connection, nor stop it answering its ranks.
TEST_CASE("the store's server: connections that come and go, or speak another protocol, leave nothing behind") {
  auto open_fds = [] {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d)) ++n;
      closedir(d);
    }
    return n;
  };
  const int port = free_port();
  dp::TcpStore store("127.0.0.1", port, /*serve=*/true, 10);
  store.set("k", "v");
  const int before = open_fds();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string garbage[] = {"", "GET / HTTP/1.0\r\n\r\n", std::string("S\xff\xff\xff\xff", 5),
                                 std::string("G\x05\x00\x00\x00" "ab", 7)};
  for (int i = 0; i < 400; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    const std::string& g = garbage[i % 4];
    if (!g.empty()) CHECK(::send(fd, g.data(), g.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(g.size()));
    ::close(fd);
  }
  // The handlers end as their peers close; give them a moment.
  int after = open_fds();
  for (int k = 0; k < 100 && after > before + 2; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    after = open_fds();
  }
  CHECK(after <= before + 2);
  CHECK(store.get({"k"}, 5)[0] == "v");
  store.set("k2", "w");
  CHECK(store.get({"k2"}, 5)[0] == "w");
}

TEST_CASE("launchers' environments: torchrun, mpirun, Slurm, and what is wrong with a bad one") {
  const char* all[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                       "SLURM_LOCALID", "DP_COMM_TIMEOUT"};
  auto clear = [&] {
    for (const char* v : all) unsetenv(v);
  };
  clear();
  dp::DistConfig c = dp::dist_config_from_env();
  CHECK(c.launcher == "");
  CHECK(c.world_size == 1);
  CHECK(c.master_port == 29500);

  setenv("RANK", "1", 1), setenv("WORLD_SIZE", "4", 1), setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "node7", 1), setenv("MASTER_PORT", "1234", 1), setenv("DP_COMM_TIMEOUT", "30", 1);
  c = dp::dist_config_from_env();
  CHECK(c.launcher == "torchrun");
  CHECK((c.rank == 1 && c.world_size == 4 && c.local_rank == 1));
  CHECK((c.master_addr == "node7" && c.master_port == 1234 && c.timeout_s == 30));
  clear();

  setenv("OMPI_COMM_WORLD_RANK", "2", 1), setenv("OMPI_COMM_WORLD_SIZE", "3", 1), setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  c = dp::dist_config_from_env();
  CHECK((c.launcher == "mpirun" && c.rank == 2 && c.world_size == 3 && c.local_rank == 0));
  clear();

  setenv("SLURM_PROCID", "0", 1), setenv("SLURM_NTASKS", "2", 1);
  c = dp::dist_config_from_env();
  CHECK((c.launcher == "slurm" && c.rank == 0 && c.world_size == 2));
  clear();

  setenv("RANK", "4", 1), setenv("WORLD_SIZE", "4", 1);
  CHECK_THROWS_WITH(dp::dist_config_from_env(), doctest::Contains("RANK=4 is outside the world of WORLD_SIZE=4"));
  clear();
  setenv("RANK", "0", 1);
  CHECK_THROWS_WITH(dp::dist_config_from_env(), doctest::Contains("RANK is set but WORLD_SIZE is not"));
  clear();
  setenv("MASTER_PORT", "http", 1);
  CHECK_THROWS_WITH(dp::dist_config_from_env(), doctest::Contains("MASTER_PORT=\"http\": expected an integer in [1, 65535]"));
  clear();
}
