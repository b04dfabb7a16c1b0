// `hla train --gpus N`: one process per GPU. The parent (launch_ranks) starts N copies of the
// hla binary with the same arguments plus `--rank r`, sets NCCL_NVLS_ENABLE=0 (NCCL's NVLink
// multicast stays off in everything hla starts) and waits for them; when one fails it stops the
// others (an NCCL rank whose peer died would wait forever). Rank r uses GPU r (cudaSetDevice).
// The NCCL unique id goes through a file in the run directory: rank 0 writes it atomically, the
// others wait for it (a timeout with a clear error), and the parent removes a stale one first.
// A build without NCCL (CMake found none, or -DHLA_NCCL=OFF) refuses --gpus N > 1 at once.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace hla::dist {

#ifdef HLA_NCCL
constexpr bool kBuiltWithNccl = true;
#else
constexpr bool kBuiltWithNccl = false;
#endif

// The error of --gpus N > 1 in a build without NCCL, saying how to get one.
std::string no_nccl_message(int gpus);

// Sets NCCL_NVLS_ENABLE=0 in this process's environment (children inherit it).
void disable_nvls_in_environment();

// Where the ranks of a run exchange the NCCL unique id.
std::string unique_id_path(const std::string& run_dir);

// Runs `program` with argv `args` (args[0] is argv[0]) once per rank, "--rank r" appended, with
// NCCL_NVLS_ENABLE=0 in the environment, after removing run_dir's stale unique id; returns 0 when
// every rank exits 0, else the first failing rank's exit status (the others are stopped).
int launch_ranks(const std::string& program, const std::vector<std::string>& args, int gpus,
                 const std::string& run_dir);

// This binary (/proc/self/exe).
std::string own_program();

// This process's command line (from /proc/self/cmdline).
std::vector<std::string> own_command_line();

// The NCCL communicator of rank `rank` of `world` on GPU `rank`; id_file: unique_id_path of the
// run; the ranks other than 0 wait up to timeout_s for it. Without NCCL: no_nccl_message.
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int world, const std::string& id_file,
                                                     double timeout_s);

}  // namespace hla::dist
