# Writes OUT: the CUDA file IN (cuda/decay_attention_chunk.cu, cuda/delta_rule_chunk.cu,
# cuda/attention.cu, cuda/wgmma_gemm.cu, cuda/short_conv.cu) as g++ compiles it against the
# emulator (tests/emu/include), with the only three spellings that differ: the file's one launch,
# `kernel<<<grid, THREADS, BYTES>>>(ARGS);` or `kernel<<<grid, THREADS, BYTES, STREAM>>>(ARGS);`
# in a helper (any names for THREADS, BYTES and STREAM, any arguments), becomes emu::launch (one
# host stream: launches run in order), `extern __shared__ float4 smem_raw[];` becomes the emulator's
# shared buffer (in a file that uses shared memory), and a member template call `x.mma<...>` gets
# the `template` keyword that g++ wants and nvcc does not.
file(READ "${IN}" source)
string(REGEX REPLACE "kernel<<<grid, ([A-Za-z]+), ([A-Za-z]+)(, [A-Za-z]+)?>>>\\(([^)]*)\\);"
                     "emu::launch(kernel, grid, \\1, \\2, \\4);" source "${source}")
string(REPLACE "extern __shared__ float4 smem_raw[];" "float4* smem_raw = emu::shared_memory();" source "${source}")
string(REGEX REPLACE "([a-z]+)\\.mma<" "\\1.template mma<" source "${source}")
set(needles "emu::launch")
string(FIND "${source}" "__shared__" uses_shared)
if(NOT uses_shared EQUAL -1)
  list(APPEND needles "emu::shared_memory")
endif()
foreach(needle ${needles})
  string(FIND "${source}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "tests/emu/host_source.cmake: ${IN} no longer has the spelling that becomes ${needle}; "
                        "update the substitutions")
  endif()
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by tests/emu/host_source.cmake: do not edit.\n#line 1 \"${IN}\"\n${source}")
file(RENAME "${OUT}.tmp" "${OUT}")
