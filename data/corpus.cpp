// Corpus file discovery and document reading (line-based for .jsonl and blank-line .txt).
#include "data/corpus.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tensor/error.h"
#include "tensor/json.h"

namespace hla::data {

namespace fs = std::filesystem;

namespace {

const char* kCorpusSuffixes[] = {".txt", ".jsonl", ".txt.zst", ".jsonl.zst"};

bool is_corpus_file(const std::string& path) {
  for (const char* s : kCorpusSuffixes) {
    if (ends_with(path, s)) return true;
  }
  return false;
}

bool is_jsonl(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.zst");
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

void add_directory(const std::string& dir, std::vector<std::string>& out) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && is_corpus_file(entry.path().string())) {
      found.push_back(entry.path().string());
    }
  }
  if (found.empty()) fail("corpus directory ", dir, " holds no .txt, .jsonl, .txt.zst or .jsonl.zst files");
  std::sort(found.begin(), found.end());
  out.insert(out.end(), found.begin(), found.end());
}

void add_path(const std::string& path, std::vector<std::string>& out) {
  if (!fs::exists(path)) fail("corpus input ", path, " does not exist");
  if (fs::is_directory(path)) return add_directory(path, out);
  if (!is_corpus_file(path)) {
    fail("corpus input ", path, " is not a supported kind (expected .txt, .jsonl, .txt.zst or .jsonl.zst)");
  }
  out.push_back(path);
}

}  // namespace

std::vector<std::string> expand_corpus_inputs(const std::vector<std::string>& specs) {
  std::vector<std::string> out;
  for (const auto& spec : specs) {
    if (!has_glob_chars(spec) || fs::exists(spec)) {
      add_path(spec, out);
      continue;
    }
    std::vector<std::string> matches = glob_paths(spec);
    if (matches.empty()) fail("corpus glob ", spec, " matches no files");
    for (const auto& m : matches) add_path(m, out);
  }
  return out;
}

uint64_t total_file_bytes(const std::vector<std::string>& files) {
  uint64_t total = 0;
  for (const auto& f : files) total += fs::file_size(f);
  return total;
}

CorpusReader::CorpusReader(std::vector<std::string> files, CorpusOptions options)
    : files_(std::move(files)), options_(std::move(options)), buf_(1 << 20) {}

CorpusReader::~CorpusReader() = default;

uint64_t CorpusReader::file_bytes_read() const {
  return bytes_of_closed_files_ + (reader_ ? reader_->file_bytes_read() : 0);
}

bool CorpusReader::open_next_file() {
  if (reader_) {
    bytes_of_closed_files_ += reader_->file_bytes_read();
    reader_.reset();
    file_index_++;
  }
  if (file_index_ >= files_.size()) return false;
  reader_ = std::make_unique<FileReader>(files_[file_index_]);
  line_number_ = 0;
  whole_file_returned_ = false;
  buf_pos_ = buf_size_ = 0;
  return true;
}

// One line without its "\n" (a final line without "\n" counts too); false at end of file.
bool CorpusReader::next_line(std::string& line) {
  line.clear();
  bool any = false;
  for (;;) {
    if (buf_pos_ == buf_size_) {
      buf_size_ = reader_->read(buf_.data(), buf_.size());
      buf_pos_ = 0;
      if (buf_size_ == 0) {
        if (any) line_number_++;
        return any;
      }
    }
    any = true;
    const char* start = buf_.data() + buf_pos_;
    const char* newline = static_cast<const char*>(std::memchr(start, '\n', buf_size_ - buf_pos_));
    if (newline) {
      line.append(start, newline - start);
      buf_pos_ += newline - start + 1;
      line_number_++;
      return true;
    }
    line.append(start, buf_size_ - buf_pos_);
    buf_pos_ = buf_size_;
  }
}

bool CorpusReader::next_in_file(std::string& doc) {
  const std::string& path = files_[file_index_];
  if (is_jsonl(path)) {
    std::string line;
    while (next_line(line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const nlohmann::json j = parse_json(line, path + ":" + std::to_string(line_number_));
      auto field = j.is_object() ? j.find(options_.jsonl_field) : j.end();
      if (!j.is_object() || field == j.end() || !field->is_string()) {
        fail(path, ":", line_number_, ": no string field \"", options_.jsonl_field, "\"");
      }
      doc = field->get<std::string>();
      return true;
    }
    return false;
  }
  if (options_.txt_split == TxtSplit::File) {
    if (whole_file_returned_) return false;
    doc = reader_->read_all();
    whole_file_returned_ = true;
    return true;
  }
  doc.clear();
  std::string line;
  bool in_block = false;
  while (next_line(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      if (in_block) return true;
      continue;
    }
    if (in_block) doc += '\n';
    doc += line;
    in_block = true;
  }
  return in_block;
}

bool CorpusReader::next(std::string& doc) {
  if (!reader_ && !open_next_file()) return false;
  while (!next_in_file(doc)) {
    if (!open_next_file()) return false;
  }
  return true;
}

std::vector<std::string> read_corpus(const std::vector<std::string>& files,
                                     const CorpusOptions& options) {
  CorpusReader reader(files, options);
  std::vector<std::string> docs;
  std::string doc;
  while (reader.next(doc)) docs.push_back(std::move(doc));
  return docs;
}

}  // namespace hla::data
