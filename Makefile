# Thin wrapper around meson so a fresh machine needs exactly one command.
BUILD ?= build

.PHONY: all deps build check demo bench fuzz format clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD) >/dev/null
	@ninja -C $(BUILD) >/dev/null

check: build
	meson test -C $(BUILD) --print-errorlogs

demo: build
	@scripts/demo.sh $(BUILD)

bench: build
	@scripts/deps.sh bench
	@bench/run $(BUILD)

# libFuzzer binaries (clang); run e.g. build-fuzz/fuzz/fuzz-duration-libfuzzer fuzz/corpus/duration
fuzz: deps
	@[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true \
		-Db_sanitize=address,undefined -Db_lundef=false >/dev/null
	ninja -C build-fuzz

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-fuzz
