# Front door. The real build is CMakeLists.txt; every target here is one line of it.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
LAUNCHER := $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

.PHONY: all deps configure test test-asan fuzz demo gpu-check bench clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@bash scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The unit tests under AddressSanitizer + UBSan, CPU only, in build-asan.
test-asan: deps
	@test -f build-asan/CMakeCache.txt || cmake -S . -B build-asan -DHLA_CUDA=OFF -DHLA_SANITIZE=address,undefined $(LAUNCHER)
	cmake --build build-asan -j $(JOBS) --target hla_tests
	cd build-asan && UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# The libFuzzer targets (tests/fuzz), built with clang in build-fuzz, each run FUZZ_SECONDS.
fuzz:
	@bash scripts/install-deps.sh fuzz
	@test -f build-fuzz/CMakeCache.txt || cmake -S . -B build-fuzz -DHLA_CUDA=OFF -DHLA_FUZZ=ON \
	  -DHLA_SANITIZE=address,undefined -DCMAKE_CXX_COMPILER=clang++ $(LAUNCHER)
	cmake --build build-fuzz -j $(JOBS) --target hla_fuzz_targets
	bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

demo: all
	bash scripts/demo.sh

gpu-check:
	bash scripts/gpu-check.sh

bench: all
	$(BUILD)/hla bench

clean:
	rm -rf $(BUILD)
