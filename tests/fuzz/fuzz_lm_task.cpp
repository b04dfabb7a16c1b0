// Fuzz target: one zero-shot task's JSONL reader (eval/lm_tasks.h); the task is HLA_FUZZ_TASK,
// one binary per task (tests/fuzz/CMakeLists.txt). The input is the task file.
#include "eval/lm_tasks.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const hla::eval::LmTaskInfo* task = hla::eval::find_lm_task(HLA_FUZZ_TASK);
  if (!task) hla::fuzz::finding("HLA_FUZZ_TASK " HLA_FUZZ_TASK " is not an LM task");
  std::string path = hla::fuzz::write_input(task->file_name, data, size);
  hla::fuzz::expect_only_hla_errors([&] {
    if (task->format == hla::eval::TaskFormat::Lambada)
      (void)hla::eval::read_lambada(path);
    else
      (void)hla::eval::read_multiple_choice(task->name, path);
  });
  return 0;
}
