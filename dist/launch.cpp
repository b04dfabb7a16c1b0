// One process per GPU (dist/launch.h): the launcher and the build-without-NCCL answer.
#include "dist/launch.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace hla::dist {

std::string no_nccl_message(int gpus) {
  std::ostringstream os;
  os << "--gpus " << gpus << ": this build of hla has no NCCL, so it trains on one GPU only; rebuild with "
     << "cmake -DHLA_NCCL=ON (NCCL is looked for in -DHLA_NCCL_ROOT=<folder with include/nccl.h and lib/libnccl.so>, "
     << "the CUDA toolkit and the system paths; the nvidia-nccl Python wheel's folder works: python3 -c \"import "
     << "nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))\")";
  return os.str();
}

void disable_nvls_in_environment() { ::setenv("NCCL_NVLS_ENABLE", "0", 1); }

std::string unique_id_path(const std::string& run_dir) { return run_dir + "/nccl_unique_id"; }

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  HLA_CHECK_INPUT(in, "cannot read /proc/self/cmdline to start the ranks (", std::strerror(errno), ")");
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  return args;
}

namespace {

pid_t spawn_rank(const std::string& program, const std::vector<std::string>& args, int rank) {
  std::vector<std::string> argv_text = args;
  argv_text.push_back("--rank");
  argv_text.push_back(std::to_string(rank));
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv.data(), environ);
  if (err != 0) fail("--gpus: cannot start rank ", rank, " (", program, "): ", std::strerror(err));
  return pid;
}

int exit_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

std::string own_program() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

int launch_ranks(const std::string& program, const std::vector<std::string>& args, int gpus,
                 const std::string& run_dir) {
  HLA_CHECK_INPUT(gpus >= 1, "--gpus must be >= 1, got ", gpus);
  disable_nvls_in_environment();
  std::filesystem::create_directories(run_dir);
  std::filesystem::remove(unique_id_path(run_dir));  // a previous run's id would pair ranks with dead peers
  std::vector<pid_t> ranks;
  for (int r = 0; r < gpus; r++) ranks.push_back(spawn_rank(program, args, r));
  int first_failure = 0;
  for (size_t running = ranks.size(); running > 0;) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, 0);
    if (done < 0) fail("--gpus: waiting for the ranks failed: ", std::strerror(errno));
    auto it = std::find(ranks.begin(), ranks.end(), done);
    if (it == ranks.end()) continue;  // not a rank
    running--;
    const int code = exit_status(status);
    *it = 0;
    if (code == 0 || first_failure != 0) continue;
    first_failure = code;
    std::fprintf(stderr, "--gpus %d: rank %d exited with status %d; stopping the other ranks\n", gpus,
                 int(it - ranks.begin()), code);
    for (pid_t pid : ranks)
      if (pid > 0) ::kill(pid, SIGTERM);
  }
  return first_failure;
}

#ifndef HLA_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(int, int world, const std::string&, double) {
  fail(no_nccl_message(world));
}
#endif

}  // namespace hla::dist
