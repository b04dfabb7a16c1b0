// The NCCL communicator (dist/communicator.h, dist/launch.h): one process per GPU. Compiled only
// when CMake finds NCCL (HLA_NCCL). Host code: the CUDA runtime API and NCCL, no kernels.
//
// Streams: hla queues its kernels on the per-thread default stream (cudaStreamPerThread, CMake's
// --default-stream=per-thread). Each collective first makes the communicator's stream wait for
// an event recorded on it (so the buffer holds what hla's stream wrote so far), then runs there;
// wait() records an event on the communicator's stream and makes hla's stream wait for it. The
// host never blocks, so a bucket's all-reduce overlaps the backward that goes on.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dist/launch.h"
#include "tensor/atomic_file.h"

namespace hla::dist {

namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("NCCL communicator: CUDA error ", cudaGetErrorString(err), " in ", what);
}

void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess)
    fail("NCCL error ", ncclGetErrorString(result), " in ", what, " (", ncclGetLastError(nullptr),
         "); NCCL_DEBUG=INFO in the environment says more");
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    default: fail("NCCL communicator: no NCCL type for ", dtype_name(dtype));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Avg ? ncclAvg : ncclSum; }

std::string to_hex(const ncclUniqueId& id) {
  std::string hex;
  char byte[3];
  for (size_t i = 0; i < sizeof id.internal; i++) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(id.internal[i]));
    hex += byte;
  }
  return hex + "\n";
}

ncclUniqueId from_hex(const std::string& text, const std::string& path) {
  ncclUniqueId id;
  const size_t digits = 2 * sizeof id.internal;
  HLA_CHECK_INPUT(text.size() >= digits && text.find_first_not_of("0123456789abcdef") >= digits, path,
                  ": not an NCCL unique id (", digits, " hex digits expected): another run's file? remove it");
  for (size_t i = 0; i < sizeof id.internal; i++)
    id.internal[i] = static_cast<char>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  return id;
}

// Rank 0's id, read once the file exists (write_file_atomic renames it into place whole).
ncclUniqueId wait_for_id(const std::string& path, int rank, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(path)) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    HLA_CHECK_INPUT(waited < timeout_s, "rank ", rank, ": no NCCL unique id in ", path, " after ", timeout_s,
                    " s: rank 0 did not start or failed before writing it (see its error)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return from_hex(text.str(), path);
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int world, const std::string& id_file, double timeout_s) : rank_(rank), world_(world) {
    disable_nvls_in_environment();
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    HLA_CHECK_INPUT(world <= devices, "--gpus ", world, ": this machine has ", devices, " GPU(s)");
    check_cuda(cudaSetDevice(rank), "cudaSetDevice");
    ncclUniqueId id;
    if (rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      write_file_atomic(id_file, to_hex(id));
    } else {
      id = wait_for_id(id_file, rank, timeout_s);
    }
    check_nccl(ncclCommInitRank(&comm_, world, id, rank), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&barrier_token_), sizeof(float)), "cudaMalloc");
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(issued_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
    cudaFree(barrier_token_);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  Device device() const override { return Device::CUDA; }
  std::string describe() const override {
    int version = 0;
    ncclGetVersion(&version);
    return "NCCL " + std::to_string(version) + ": rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
           " on GPU " + std::to_string(rank_) + ", NCCL_NVLS_ENABLE=0";
  }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    after_hla_stream();
    check_nccl(ncclAllReduce(data, data, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream_),
               "ncclAllReduce");
  }
  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    after_hla_stream();
    check_nccl(ncclBroadcast(data, data, size_t(count), nccl_type(dtype), root, comm_, stream_), "ncclBroadcast");
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    after_hla_stream();
    check_nccl(ncclAllGather(send, recv, size_t(count), nccl_type(dtype), comm_, stream_), "ncclAllGather");
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    after_hla_stream();
    check_nccl(ncclReduceScatter(send, recv, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream_),
               "ncclReduceScatter");
  }
  void wait() override {
    check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(cudaStreamPerThread, done_, 0), "cudaStreamWaitEvent");
  }
  void barrier() override {
    // a one-element all-reduce every rank must join
    check_nccl(ncclAllReduce(barrier_token_, barrier_token_, 1, ncclFloat32, ncclSum, comm_, stream_),
               "ncclAllReduce (barrier)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  void after_hla_stream() {
    check_cuda(cudaEventRecord(issued_, cudaStreamPerThread), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, issued_, 0), "cudaStreamWaitEvent");
  }

  int rank_, world_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr, done_ = nullptr;
  float* barrier_token_ = nullptr;  // (1), on the GPU
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int world, const std::string& id_file,
                                                     double timeout_s) {
  return std::make_unique<NcclCommunicator>(rank, world, id_file, timeout_s);
}

}  // namespace hla::dist
