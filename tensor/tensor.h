// Tensor: shared storage + byte offset + shape (rank <= 5) + dtype + device.
// Always contiguous row-major. A view (reshape, a slice of the leading dimension) shares the
// storage; anything that would be strided is a copy. CPU memory is 64-byte aligned; CUDA
// memory comes from the caching allocator in cuda/runtime.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/error.h"

namespace hla {

using Shape = std::vector<int64_t>;
constexpr int kMaxRank = 5;

std::string shape_str(const Shape& s);
// Element and byte counts; an Error when they overflow int64 (a shape read from a file).
int64_t shape_numel(const Shape& s);
int64_t shape_nbytes(const Shape& s, DType dtype);
// An Error unless the shape has rank <= kMaxRank, no negative dimension and a byte count that fits int64.
void check_shape_valid(const Shape& s, DType dtype);

// Bytes of CPU tensor storage alive now: what a CPU test measures activation memory by.
int64_t host_bytes_live();

struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device = Device::CPU;
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::CPU);
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::CPU);
  // Seeded random values, identical on every device: value i depends only on (seed, i).
  static Tensor randn(const Shape& shape, uint64_t seed, double stddev = 1.0,
                      DType dtype = DType::F32, Device device = Device::CPU);
  static Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi,
                        DType dtype = DType::F32, Device device = Device::CPU);
  // A CPU tensor holding `values` converted to `dtype`.
  static Tensor from_f64(const std::vector<double>& values, const Shape& shape,
                         DType dtype = DType::F32);
  static Tensor from_i32(const std::vector<int32_t>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cuda() const { return device_ == Device::CUDA; }
  std::string str() const;  // "(2, 3) F32 cpu"

  void* raw();
  const void* raw() const;
  template <class T> T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  template <class T> const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(raw());
  }

  Tensor to(Device device) const;
  Tensor to(DType dtype) const;  // same device; bf16 rounds to nearest even
  Tensor clone() const;
  // Whether no other Tensor (a copy or a view) shares this one's storage: then writing into it in
  // place changes no value anyone else can see.
  bool owns_storage_alone() const { return storage_.use_count() == 1; }
  Tensor reshape(const Shape& shape) const;  // a view; one dimension may be -1
  Tensor slice0(int64_t begin, int64_t end) const;  // a view of rows [begin, end) of dim 0
  void copy_(const Tensor& src);  // same shape and dtype, any devices
  void zero_();
  void fill_(double value);

  double item() const;                       // one element, as double
  std::vector<double> to_f64_vector() const;  // all elements, as double (copies to CPU)

 private:
  void check_type(DType t) const;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

// An optional buffer's pointer for a kernel call: null when the tensor is undefined (an absent
// input, an initial state of zeros, a gradient nobody wants).
template <class T> T* data_or_null(Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <class T> const T* data_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
inline void* raw_or_null(Tensor& t) { return t.defined() ? t.raw() : nullptr; }
inline const void* raw_or_null(const Tensor& t) { return t.defined() ? t.raw() : nullptr; }

// The dtype of an op's accumulated side buffers (norm statistics, recurrent states) for inputs
// like `t`: fp32 on the GPU whatever the storage dtype (F32 or BF16), the storage dtype on the
// CPU (F32, or F64 in gradchecks).
inline DType accum_dtype(const Tensor& t) { return t.is_cuda() ? DType::F32 : t.dtype(); }

// Checks used at op boundaries; the message names the op and shows the shapes.
void check_same_shape(const Tensor& a, const Tensor& b, const char* op);
void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* name);
void check_dtype(const Tensor& t, DType expected, const char* op, const char* name);

// While on, every new floating-point tensor made by Tensor::empty on `device` is filled with NaN
// (0xFF bytes), so a kernel that leaves part of an output or gradient unwritten shows NaN;
// zeros() and full() still fill their tensors. For the check registry (nn/check/); off by
// default, and off costs one relaxed load per empty().
void set_poison_allocations(Device device, bool on);

// Returns the CUDA device count, 0 when built without CUDA or no GPU is present.
int cuda_device_count();
bool cuda_available();

}  // namespace hla
