// Corpus readers: documents from .txt, .jsonl, .txt.zst and .jsonl.zst files, named one by one,
// by glob or by directory (all such files below it, in sorted path order).
//
// .txt: one document per file by default (TxtSplit::File, the file's bytes exactly), or one per
//       block of lines separated by blank lines (TxtSplit::BlankLine: a block's lines joined by
//       "\n", without the final newline; a line of only spaces, tabs or "\r" counts as blank).
// .jsonl: one JSON object per line, the document is the string field `jsonl_field` ("text" by
//       default). Blank lines are skipped; a line that is not JSON, or lacks the field, is an
//       hla::Error naming the file and line.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/file_io.h"

namespace hla::data {

enum class TxtSplit { File, BlankLine };

struct CorpusOptions {
  std::string jsonl_field = "text";
  TxtSplit txt_split = TxtSplit::File;
};

// Files, globs ("data/*.jsonl.zst") and directories -> the corpus files, in order. A named file
// of another kind, a glob that matches nothing or a missing path is an hla::Error.
std::vector<std::string> expand_corpus_inputs(const std::vector<std::string>& specs);

// Reads the documents of several files in order.
class CorpusReader {
 public:
  CorpusReader(std::vector<std::string> files, CorpusOptions options);
  ~CorpusReader();

  // The next document, false after the last one.
  bool next(std::string& doc);
  size_t file_index() const { return file_index_; }  // file of the document just returned
  uint64_t file_bytes_read() const;  // over all files, on disk (compressed): for progress

 private:
  bool next_line(std::string& line);
  bool next_in_file(std::string& doc);
  bool open_next_file();

  std::vector<std::string> files_;
  CorpusOptions options_;
  size_t file_index_ = 0;
  std::unique_ptr<FileReader> reader_;
  uint64_t bytes_of_closed_files_ = 0;
  int64_t line_number_ = 0;
  bool whole_file_returned_ = false;  // TxtSplit::File: the open file's document was returned
  std::vector<char> buf_;
  size_t buf_pos_ = 0, buf_size_ = 0;
};

// Total size on disk of the files (the denominator of progress bars).
uint64_t total_file_bytes(const std::vector<std::string>& files);

// Every document of the files, in order.
std::vector<std::string> read_corpus(const std::vector<std::string>& files,
                                     const CorpusOptions& options = {});

}  // namespace hla::data
