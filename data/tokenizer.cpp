// The byte tokenizer, the default hash, parallel encoding and FNV-1a.
#include "data/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "tensor/error.h"

namespace hla::data {

namespace {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEos = 256, kPad = 257;

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); i++) ids[i] = static_cast<uint8_t>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      HLA_CHECK(id >= 0 && id <= kPad, "byte tokenizer: cannot decode id ", id,
                " (ids are 0..255 bytes, 256 eos, 257 pad)");
      if (id < 256) out += static_cast<char>(id);  // eos and pad decode to nothing
    }
    return out;
  }
  int32_t vocab_size() const override { return 258; }
  int32_t eos_id() const override { return kEos; }
  int32_t pad_id() const override { return kPad; }
  std::string name() const override { return "byte"; }
};

}  // namespace

std::string Tokenizer::hash() const {
  std::string canonical = std::to_string(vocab_size()) + "," + std::to_string(eos_id()) + "," +
                          std::to_string(pad_id()) + ",";
  for (int32_t id = 0; id < vocab_size(); id++) {
    std::string bytes = decode({id});
    canonical += std::to_string(bytes.size()) + ":" + bytes;
  }
  return fnv1a_hex(canonical);
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tokenizer,
                                                   const std::vector<std::string>& docs,
                                                   int threads) {
  std::vector<std::vector<int32_t>> out(docs.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(threads, std::max<size_t>(docs.size(), 1)));
  std::atomic<size_t> next_doc{0};
  auto work = [&] {
    for (size_t i = next_doc++; i < docs.size(); i = next_doc++) out[i] = tokenizer.encode(docs[i]);
  };
  if (threads == 1) {
    work();
    return out;
  }
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  for (int t = 0; t < threads; t++) {
    pool.emplace_back([&] {
      try {
        work();
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
        next_doc = docs.size();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  return out;
}

std::string fnv1a_hex(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace hla::data
