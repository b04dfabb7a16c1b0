// Plain-text documents for the perplexity evaluation and the n-gram baseline:
//   *.txt               the whole file is one document;
//   *.jsonl[.zst]       one JSON object per line, its "text" field is a document.
// (data/ owns the training pipeline's readers; this is the small reader eval needs.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hla::eval {

// max_documents < 0 reads all. Errors name the file (and line for JSONL).
std::vector<std::string> read_text_documents(const std::string& path, int64_t max_documents = -1);

}  // namespace hla::eval
