# Front door. The real build is CMakeLists.txt; every target here is one line of it.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure test demo gpu-check bench clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@bash scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: all
	bash scripts/demo.sh

gpu-check:
	bash scripts/gpu-check.sh

bench: all
	$(BUILD)/hla bench

clean:
	rm -rf $(BUILD)
