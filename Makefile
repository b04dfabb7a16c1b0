# Front door. The real build is CMakeLists.txt; every target here is one line of it.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
LAUNCHER := $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

.PHONY: all deps configure test san-configure test-asan fuzz ci-sanitize demo gpu-check dist-check bench clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@bash scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# One clang build, build-san, serves the sanitizer tests and the fuzzer: every layer compiled
# once with -fsanitize=address,undefined plus libFuzzer's coverage (fuzzer-no-link); hla_tests
# (the ASan + UBSan unit tests) and the fuzz_* targets (linked with -fsanitize=fuzzer) link the
# same objects. Coverage costs the unit tests little; a second build would double the compile.
SAN_BUILD := build-san
CI_FUZZ_SECONDS ?= 20
# The layering probes are left out here: they only compile one #include each (nothing of hla
# runs under the sanitizers), and make test runs them already (they pass with clang too).
SAN_CTEST := UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -E '^layering\.'

san-configure:
	@bash scripts/install-deps.sh fuzz
	@test -f $(SAN_BUILD)/CMakeCache.txt || cmake -S . -B $(SAN_BUILD) -DHLA_CUDA=OFF -DHLA_FUZZ=ON \
	  -DHLA_SANITIZE=address,undefined -DCMAKE_CXX_COMPILER=clang++ $(LAUNCHER)

# The unit tests under AddressSanitizer + UBSan, CPU only.
test-asan: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target hla_tests
	cd $(SAN_BUILD) && $(SAN_CTEST) -LE '^fuzz$$'

# The libFuzzer targets (tests/fuzz), each run FUZZ_SECONDS; a table of execs and findings.
fuzz: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target hla_fuzz_targets
	bash tests/fuzz/run.sh $(SAN_BUILD) $(FUZZ_SECONDS)

# CI's sanitizer pass (.ci/run, after make test): one build of both, then one ctest of the
# sanitizer unit tests and the "fuzz pass" test (CI_FUZZ_SECONDS per target, on one of the cores
# while the unit tests take the others), which ends last: its table, and a finding's input in
# base64, come just before ctest's summary.
ci-sanitize: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target hla_tests hla_fuzz_targets
	cd $(SAN_BUILD) && HLA_FUZZ_SECONDS=$(CI_FUZZ_SECONDS) $(SAN_CTEST)

demo: all
	bash scripts/demo.sh

gpu-check:
	bash scripts/gpu-check.sh

# On a machine with 2+ GPUs: the --gpus 2 loss test and the scaling bench (issue 19), built with NCCL.
dist-check:
	bash scripts/dist-check.sh

bench: all
	$(BUILD)/hla bench

clean:
	rm -rf $(BUILD)
