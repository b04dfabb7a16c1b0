// Tensor storage, construction, copies and dtype conversion (see tensor.h).
#include "tensor/tensor.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "tensor/random.h"
#ifdef HLA_CUDA
#include "cuda/convert.h"
#include "cuda/runtime.h"
#endif

namespace hla {

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType t : {DType::F32, DType::BF16, DType::F64, DType::I32, DType::U16}) {
    if (name == dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); i++) os << (i ? ", " : "") << s[i];
  if (s.size() == 1) os << ",";
  os << ")";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) fail("shape ", shape_str(s), ": element count overflows int64");
  return n;
}

int64_t shape_nbytes(const Shape& s, DType dtype) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(shape_numel(s), static_cast<int64_t>(dtype_size(dtype)), &bytes))
    fail("shape ", shape_str(s), " ", dtype_name(dtype), ": byte count overflows int64");
  return bytes;
}

void check_shape_valid(const Shape& s, DType dtype) {
  if (s.size() > static_cast<size_t>(kMaxRank))
    fail("tensor rank ", s.size(), " exceeds ", kMaxRank, " for shape ", shape_str(s));
  for (int64_t d : s)
    if (d < 0) fail("negative dimension in shape ", shape_str(s));
  shape_nbytes(s, dtype);
}

static std::atomic<int64_t> host_bytes{0};
int64_t host_bytes_live() { return host_bytes.load(std::memory_order_relaxed); }

Storage::Storage(size_t nbytes, Device dev) : bytes(nbytes), device(dev) {
  if (device == Device::CPU) {
    size_t rounded = (nbytes + 63) / 64 * 64;
    ptr = std::aligned_alloc(64, rounded ? rounded : 64);
    HLA_CHECK(ptr, "out of host memory allocating ", nbytes, " bytes");
    host_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  } else {
#ifdef HLA_CUDA
    ptr = cuda::device_alloc(nbytes);
#else
    fail("a CUDA tensor was requested but hla was built without CUDA");
#endif
  }
}

Storage::~Storage() {
  if (device == Device::CPU) {
    std::free(ptr);
    host_bytes.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  } else {
#ifdef HLA_CUDA
    cuda::device_free(ptr, bytes);
#endif
  }
}

// CPU poisoning (set_poison_allocations); the CUDA allocator keeps its own flag.
static std::atomic<bool> poison_cpu{false};

void set_poison_allocations(Device device, bool on) {
  if (device == Device::CPU) {
    poison_cpu.store(on, std::memory_order_relaxed);
    return;
  }
#ifdef HLA_CUDA
  cuda::set_poison_allocations(on);
#endif
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape_valid(shape, dtype);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  if (device == Device::CPU && is_float(dtype) && poison_cpu.load(std::memory_order_relaxed))
    std::memset(t.storage_->ptr, 0xFF, t.nbytes());  // NaN in F32, F64 and BF16
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

// Writes double values into a CPU buffer of any dtype.
static void store_f64(void* dst, DType dtype, const double* src, int64_t n) {
  switch (dtype) {
    case DType::F32: for (int64_t i = 0; i < n; i++) static_cast<float*>(dst)[i] = static_cast<float>(src[i]); break;
    case DType::F64: for (int64_t i = 0; i < n; i++) static_cast<double*>(dst)[i] = src[i]; break;
    case DType::BF16: for (int64_t i = 0; i < n; i++) static_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(static_cast<float>(src[i])); break;
    case DType::I32: for (int64_t i = 0; i < n; i++) static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(src[i]); break;
    case DType::U16: for (int64_t i = 0; i < n; i++) static_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(src[i]); break;
  }
}

static double load_one(const void* src, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(src)[i];
    case DType::F64: return static_cast<const double*>(src)[i];
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::I32: return static_cast<const int32_t*>(src)[i];
    case DType::U16: return static_cast<const uint16_t*>(src)[i];
  }
  return 0;
}

Tensor Tensor::from_f64(const std::vector<double>& values, const Shape& shape, DType dtype) {
  HLA_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_f64: ", values.size(),
            " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  store_f64(t.raw(), dtype, values.data(), t.numel());
  return t;
}

Tensor Tensor::from_i32(const std::vector<int32_t>& values, const Shape& shape) {
  HLA_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_i32: ", values.size(),
            " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::I32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, double stddev, DType dtype, Device device) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); i++) v[i] = stddev * counter_normal(seed, i);
  return from_f64(v, shape, dtype).to(device);
}

Tensor Tensor::uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype,
                       Device device) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); i++) v[i] = lo + (hi - lo) * counter_uniform(seed, i);
  return from_f64(v, shape, dtype).to(device);
}

int64_t Tensor::size(int d) const {
  int r = dim();
  int i = d < 0 ? d + r : d;
  HLA_CHECK(i >= 0 && i < r, "dimension ", d, " out of range for shape ", shape_str(shape_));
  return shape_[i];
}

std::string Tensor::str() const {
  if (!defined()) return "(undefined tensor)";
  return shape_str(shape_) + " " + dtype_name(dtype_) + " " + device_name(device_);
}

void* Tensor::raw() {
  HLA_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->ptr) + offset_;
}
const void* Tensor::raw() const {
  HLA_CHECK(defined(), "access to an undefined tensor");
  return static_cast<const char*>(storage_->ptr) + offset_;
}

void Tensor::check_type(DType t) const {
  HLA_CHECK(dtype_ == t, "tensor ", str(), " accessed as ", dtype_name(t));
}

void Tensor::copy_(const Tensor& src) {
  HLA_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_ from ", src.str(), " into ", str());
  size_t n = nbytes();
  if (n == 0) return;
  if (device_ == Device::CPU && src.device_ == Device::CPU) {
    std::memcpy(raw(), src.raw(), n);
    return;
  }
#ifdef HLA_CUDA
  if (device_ == Device::CUDA && src.device_ == Device::CPU) cuda::copy_h2d(raw(), src.raw(), n);
  else if (device_ == Device::CPU) cuda::copy_d2h(raw(), src.raw(), n);
  else cuda::copy_d2d(raw(), src.raw(), n);
#else
  fail("copy_ between devices needs a CUDA build");
#endif
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype, device_);
  int64_t n = numel();
  if (device_ == Device::CUDA) {
#ifdef HLA_CUDA
    cuda::convert(t.raw(), dtype, raw(), dtype_, n);
#endif
    return t;
  }
  const void* src = raw();
  if (dtype == DType::BF16 && dtype_ == DType::F32) {  // the hot path: exact RNE from float
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(t.raw());
    for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16_bits(s[i]);
    return t;
  }
  std::vector<double> buf(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) buf[i] = load_one(src, dtype_, i);
  store_f64(t.raw(), dtype, buf.data(), n);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == -1) {
      HLA_CHECK(infer < 0, "reshape to ", shape_str(shape), ": more than one -1");
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    HLA_CHECK(known > 0 && numel() % known == 0, "cannot reshape ", str(), " to ", shape_str(shape));
    s[infer] = numel() / known;
  }
  check_shape_valid(s, dtype_);
  HLA_CHECK(shape_numel(s) == numel(), "cannot reshape ", str(), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  HLA_CHECK(dim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "slice0(", begin, ", ",
            end, ") out of range for ", str());
  Tensor t = *this;
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::zero_() {
  if (nbytes() == 0) return;
  if (device_ == Device::CPU) {
    std::memset(raw(), 0, nbytes());
  } else {
#ifdef HLA_CUDA
    cuda::memset_zero(raw(), nbytes());
#endif
  }
}

void Tensor::fill_(double value) {
  int64_t n = numel();
  if (device_ == Device::CUDA) {
#ifdef HLA_CUDA
    cuda::fill(raw(), dtype_, value, n);
#endif
    return;
  }
  std::vector<double> buf(static_cast<size_t>(n), value);
  store_f64(raw(), dtype_, buf.data(), n);
}

double Tensor::item() const {
  HLA_CHECK(numel() == 1, "item() on ", str(), " which has ", numel(), " elements");
  return to_f64_vector()[0];
}

std::vector<double> Tensor::to_f64_vector() const {
  Tensor c = to(Device::CPU);
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); i++) out[i] = load_one(c.raw(), dtype_, i);
  return out;
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  HLA_CHECK(a.shape() == b.shape(), op, ": shape mismatch ", shape_str(a.shape()), " vs ",
            shape_str(b.shape()));
}

void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* name) {
  HLA_CHECK(t.shape() == expected, op, ": ", name, " has shape ", shape_str(t.shape()),
            ", expected ", shape_str(expected));
}

void check_dtype(const Tensor& t, DType expected, const char* op, const char* name) {
  HLA_CHECK(t.dtype() == expected, op, ": ", name, " is ", dtype_name(t.dtype()), ", expected ",
            dtype_name(expected));
}

int cuda_device_count() {
#ifdef HLA_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

}  // namespace hla
