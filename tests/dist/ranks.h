// Ranks as forked processes of a test, over loopback (tests/dist).
#pragma once
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "dist/store.h"

namespace {

// A port nobody listens on right now, below the kernel's ephemeral range
// (where the kernel's own picks, Gloo's connections of tests running
// meanwhile, say, would take it before the test binds it).
int free_port() {
  static unsigned seed = static_cast<unsigned>(::getpid()) * 2654435761u ^
                         static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (;;) {
    seed = seed * 1103515245u + 12345u;
    const int port = 20000 + static_cast<int>((seed >> 8) % 12000);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return port;
  }
}

struct Outcome {
  int status = -1;      // the child's exit code: 0, 1 (it threw); -1: killed at the deadline, or a signal
  std::string message;  // what it returned, or its error
};

using RankFn = std::function<std::string()>;

// Runs each function in a child process; their results, in order. A child
// still running after `deadline_s` is killed (and reported as -1).
std::vector<Outcome> run_ranks(const std::vector<RankFn>& ranks, double deadline_s) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (const auto& f : ranks) {
    int p[2];
    REQUIRE(::pipe(p) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(p[0]);
      int code = 0;
      std::string msg;
      try {
        msg = f();
      } catch (const std::exception& e) {
        msg = e.what();
        code = 1;
      }
      if (!msg.empty()) (void)!::write(p[1], msg.data(), msg.size());
      ::_exit(code);
    }
    ::close(p[1]);
    pids.push_back(pid);
    pipes.push_back(p[0]);
  }
  // Each child's pipe is drained while it runs: a result larger than the
  // pipe's buffer (64 KB) would otherwise block the child forever.
  std::vector<Outcome> out(ranks.size());
  for (int fd : pipes) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  auto drain = [&](size_t i) {
    char buf[65536];
    ssize_t n;
    while ((n = ::read(pipes[i], buf, sizeof buf)) > 0) out[i].message.append(buf, static_cast<size_t>(n));
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < pids.size(); ++i) {
    int st = 0;
    while (::waitpid(pids[i], &st, WNOHANG) == 0) {
      for (size_t j = i; j < pids.size(); ++j) drain(j);
      if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(deadline_s)) {
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], &st, 0);
        st = -1;
        break;
      }
      ::usleep(10000);
    }
    drain(i);
    out[i].status = st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    if (st != -1 && WIFSIGNALED(st)) out[i].message = "killed by signal " + std::to_string(WTERMSIG(st)) + ": " + out[i].message;
    ::close(pipes[i]);
  }
  return out;
}

// Rank `rank` of `world` on loopback: the store (served by rank 0 at
// `port`) after every rank has joined, for `body` to use.
template <class F>
RankFn joined_rank(int rank, int world, int port, double timeout_s, F body) {
  return [=] {
    dp::DistConfig c;
    c.rank = rank;
    c.world_size = world;
    c.master_port = port;
    c.timeout_s = timeout_s;
    dp::TcpStore store(c.master_addr, c.master_port, rank == 0, c.timeout_s);
    dp::rendezvous(store, c);
    return body(store, c);
  };
}

}  // namespace
