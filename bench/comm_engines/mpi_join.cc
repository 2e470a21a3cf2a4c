// Can two independently started (singleton) Open MPI processes form a communicator
// the torchrun way (MASTER_ADDR/MASTER_PORT), via MPI_Comm_join on a TCP socket?
// usage: mpi_join RANK PORT     (rank 0 listens on 127.0.0.1:PORT, rank 1 connects)
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

int main(int argc, char** argv) {
  int rank = atoi(argv[1]), port = atoi(argv[2]);
  auto t0 = std::chrono::steady_clock::now();
  MPI_Init(&argc, &argv);
  int wsize;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  fprintf(stderr, "rank %d: singleton MPI_Init ok, world size %d\n", rank, wsize);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd;
  if (rank == 0) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (sockaddr*)&a, sizeof a) || listen(l, 1)) { perror("bind"); return 1; }
    fd = accept(l, nullptr, nullptr);
  } else {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    while (connect(fd, (sockaddr*)&a, sizeof a)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm inter;
  int rc = MPI_Comm_join(fd, &inter);
  if (rc != MPI_SUCCESS) {
    char s[MPI_MAX_ERROR_STRING]; int l; MPI_Error_string(rc, s, &l);
    fprintf(stderr, "rank %d: MPI_Comm_join failed: %s\n", rank, s);
    return 2;
  }
  MPI_Comm intra;
  MPI_Intercomm_merge(inter, rank, &intra);
  int r, n;
  MPI_Comm_rank(intra, &r);
  MPI_Comm_size(intra, &n);
  float x = 1.0f + rank;
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, intra);
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fprintf(stderr, "rank %d: joined, merged rank %d/%d, allreduce=%g, %.2fs\n", rank, r, n, x, el);
  MPI_Finalize();
  return 0;
}
