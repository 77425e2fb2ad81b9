# Thin wrapper around meson so a fresh machine needs exactly one command.
BUILD ?= build

.PHONY: all deps build check chaos demo bench fuzz deb format clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD) >/dev/null
	@ninja -C $(BUILD) >/dev/null

check: build
	meson test -C $(BUILD) --print-errorlogs

# REL-1's chaos test at length: 200 SIGKILLs under load (replay one run with VGPUD_CHAOS_SEED=N);
# the summary line and every violation end its output.
CHAOS_ITERATIONS ?= 200
chaos: build
	@VGPUD_CHAOS_ITERATIONS=$(CHAOS_ITERATIONS) meson test -C $(BUILD) --suite chaos \
		--timeout-multiplier 0 --verbose; st=$$?; \
	sed -n 's/^# \(chaos: .*\|violation: .*\)/\1/p' $(BUILD)/meson-logs/testlog.txt; exit $$st

demo: build
	@scripts/demo.sh $(BUILD)

bench: build
	@scripts/deps.sh bench
	@bench/run $(BUILD)

# The Debian package vgpud_<version>_<arch>.deb (OPS-14), from a fresh release build in
# build-deb/, into DEBDIR (default: here); tests/deb/test-deb.sh installs and checks it.
DEBDIR ?= .
deb:
	@scripts/build-deb.sh $(DEBDIR)

# libFuzzer binaries (clang); run e.g. build-fuzz/fuzz/fuzz-duration-libfuzzer fuzz/corpus/duration
fuzz: deps
	@[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true \
		-Db_sanitize=address,undefined -Db_lundef=false >/dev/null
	ninja -C build-fuzz

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-fuzz
