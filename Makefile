# The two commands of the README, plus their parts. Each installs what is missing first.
#   make run   - build Release and run the main job on the default model
#   make test  - build and run every test (then the unit tests again under ASan+UBSan)

JOBS ?= $(shell nproc)

.PHONY: all deps deps-test release run test test-main test-asan fuzz bench clean

all: release

deps:
	@bash scripts/install-deps.sh

deps-test:
	@bash scripts/install-deps.sh --with-tests

release: deps
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

run: release
	bash scripts/run-default.sh

test: test-main test-asan

test-main: deps-test
	cmake --preset test >/dev/null
	cmake --build --preset test -j $(JOBS)
	ctest --preset test

# Under ASan+UBSan only the unit tests are built and run: the CLI and integration tests drive the
# same library code through the binary, which the plain build already tests.
test-asan: deps-test
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS) --target unit_tests
	ctest --preset asan

fuzz:
	@bash scripts/install-deps.sh --with-fuzz
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz -j $(JOBS)
	@echo "run: build/fuzz/fuzz/gguf_reader_fuzz -max_total_time=300 fuzz/corpus-run fuzz/corpus/gguf"

bench: deps
	cmake --preset release -DLEOAM_BUILD_BENCH=ON >/dev/null
	cmake --build --preset release -j $(JOBS)

clean:
	rm -rf build
