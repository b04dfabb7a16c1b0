// ZeRO-1: owners, the parameter all_gather and the checkpoint's state gather (train/zero.h).
#include "train/zero.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace hla {

std::vector<int> assign_owners(const ParameterList& params, int world) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].var.numel() > params[b].var.numel(); });
  std::vector<int64_t> load(world, 0);
  std::vector<int> owner(params.size(), 0);
  for (size_t i : order) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[r] += params[i].var.numel();
  }
  return owner;
}

ZeroShards::ZeroShards(const ParameterList& params, dist::Communicator& comm)
    : params_(params), comm_(comm), owner_(assign_owners(params, comm.world())), by_rank_(comm.world()) {
  DType dtype = params_.empty() ? DType::F32 : params_[0].var.dtype();
  for (size_t i = 0; i < params_.size(); i++) {
    HLA_CHECK(params_[i].var.dtype() == dtype, "ZeRO-1: parameter '", params_[i].name, "' is ",
              dtype_name(params_[i].var.dtype()), " but the others are ", dtype_name(dtype));
    owned_.push_back(owner_[i] == comm_.rank());
    by_rank_[owner_[i]].push_back(i);
  }
  for (const std::vector<size_t>& mine : by_rank_) {
    int64_t n = 0;
    for (size_t i : mine) n += params_[i].var.numel();
    shard_numel_ = std::max(shard_numel_, n);
  }
  send_ = Tensor::zeros({shard_numel_}, dtype, comm_.device());
  recv_ = Tensor::zeros({comm_.world(), shard_numel_}, dtype, comm_.device());
}

void ZeroShards::gather_parameters() {
  // pass 1: this rank's parameters into its shard
  int64_t at = 0;
  for (size_t i : by_rank_[comm_.rank()]) {
    const Tensor& v = params_[i].var.value();
    send_.slice0(at, at + v.numel()).copy_(v.reshape({v.numel()}));
    at += v.numel();
  }
  // pass 2: every shard to every rank
  comm_.all_gather(send_.raw(), recv_.raw(), shard_numel_, send_.dtype());
  comm_.wait();
  // pass 3: the other ranks' parameters out of their shards
  for (int r = 0; r < comm_.world(); r++) {
    if (r == comm_.rank()) continue;
    Tensor shard = recv_.slice0(r, r + 1).reshape({shard_numel_});
    at = 0;
    for (size_t i : by_rank_[r]) {
      Tensor& v = params_[i].var.mutable_value();
      v.copy_(shard.slice0(at, at + v.numel()).reshape(v.shape()));
      params_[i].refresh_compute_copy();
      at += v.numel();
    }
  }
}

NamedTensors ZeroShards::gather_state(const Optimizer& optimizer) const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); i++) {
    const std::vector<std::string> names = optimizer.state_names(i);
    for (size_t k = 0; k < names.size(); k++) {
      const Var& p = params_[i].var;
      Tensor t = optimizer.updates(i) ? optimizer.param_state(i)[k].second.clone()
                                      : Tensor::empty(p.shape(), p.dtype(), p.device());
      dist::broadcast_(comm_, t, owner_[i]);
      comm_.wait();
      out.emplace_back(names[k], t.to(Device::CPU));
    }
  }
  return out;
}

std::string ZeroShards::describe() const {
  std::ostringstream os;
  os << "ZeRO-1: optimizer state of whole tensors sharded over " << comm_.world() << " ranks (";
  for (int r = 0; r < comm_.world(); r++) {
    int64_t n = 0;
    for (size_t i : by_rank_[r]) n += params_[i].var.numel();
    os << (r ? ", " : "") << "rank " << r << ": " << by_rank_[r].size() << " tensors, " << n << " params";
  }
  os << ")";
  return os.str();
}

}  // namespace hla
