// Gradient buckets and their overlapped all-reduce (dist/grad_buckets.h).
#include "dist/grad_buckets.h"

#include <algorithm>

namespace hla::dist {

GradBuckets::GradBuckets(const ParameterList& params, Communicator& comm, double bucket_mb)
    : params_(params), comm_(comm), complete_(params.size(), false) {
  HLA_CHECK(bucket_mb > 0, "[dist] bucket_mb must be > 0, got ", bucket_mb);
  const double limit_bytes = bucket_mb * 1024.0 * 1024.0;
  // pass 1: members, in reverse registration order
  std::vector<DType> dtypes;
  double bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Var& v = params_[k].var;
    HLA_CHECK(v.device() == comm_.device(), "data parallel: parameter '", params_[k].name, "' is on ",
              v.device() == Device::CUDA ? "cuda" : "cpu", " but the communicator's buffers are not");
    const double param_bytes = double(v.numel()) * double(dtype_size(v.dtype()));
    const bool fits = !buckets_.empty() && dtypes.back() == v.dtype() && bytes + param_bytes <= limit_bytes;
    if (!fits) {
      buckets_.emplace_back();
      dtypes.push_back(v.dtype());
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    b.offsets.push_back(b.members.empty() ? 0 : b.offsets.back() + params_[b.members.back()].var.numel());
    b.members.push_back(k);
    bytes += param_bytes;
    where_[v.impl()] = {k, buckets_.size() - 1};
  }
  // pass 2: one flat buffer per bucket, allocated once
  for (size_t i = 0; i < buckets_.size(); i++) {
    Bucket& b = buckets_[i];
    const int64_t numel = b.offsets.back() + params_[b.members.back()].var.numel();
    b.flat = Tensor::zeros({numel}, dtypes[i], comm_.device());
  }
}

LeafReadyFn GradBuckets::hook() {
  return [this](const Var& leaf) { leaf_ready(leaf); };
}

void GradBuckets::leaf_ready(const Var& leaf) {
  auto it = where_.find(leaf.impl());
  if (it == where_.end()) return;  // a leaf that is not a parameter
  const auto [param, bucket] = it->second;
  if (complete_[param]) return;
  complete_[param] = true;
  buckets_[bucket].ready++;
  issue_ready_buckets();
}

void GradBuckets::issue_ready_buckets() {
  while (next_to_issue_ < buckets_.size() &&
         buckets_[next_to_issue_].ready == buckets_[next_to_issue_].members.size())
    issue(buckets_[next_to_issue_]);
}

// Copies the members' gradients into the flat buffer (zeros for one without) on hla's stream,
// then the all-reduce on the communicator's.
void GradBuckets::issue(Bucket& bucket) {
  for (size_t j = 0; j < bucket.members.size(); j++) {
    const Var& v = params_[bucket.members[j]].var;
    Tensor slot = bucket.flat.slice0(bucket.offsets[j], bucket.offsets[j] + v.numel());
    if (v.grad().defined()) slot.copy_(v.grad().reshape({v.numel()}));
    else slot.zero_();
  }
  all_reduce_(comm_, bucket.flat, ReduceOp::Sum);
  next_to_issue_++;
}

void GradBuckets::finish() {
  for (Bucket& b : buckets_) b.ready = b.members.size();
  issue_ready_buckets();
  comm_.wait();
  for (Bucket& b : buckets_) {
    for (size_t j = 0; j < b.members.size(); j++) {
      Var v = params_[b.members[j]].var;
      v.mutable_grad() = b.flat.slice0(b.offsets[j], b.offsets[j] + v.numel()).reshape(v.shape());
    }
    b.ready = 0;
  }
  std::fill(complete_.begin(), complete_.end(), false);
  next_to_issue_ = 0;
}

}  // namespace hla::dist
