#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama.cpp source that the npm package
# node-llama-cpp ships (llama/gitRelease.bundle), and caches it with the files the
# interop suite needs from the same source: the Qwen2 tokenizer vocab, the Qwen2.5
# chat template and the gguf-py package that writes the test models.
#
#   test/interop/build-llama-server.sh            # prints the cache directory
#
# The cache is $ROLLOUT_INTEROP_CACHE (default $HOME/.cache/rollout-interop)/node-llama-cpp-<version>,
# keyed by the package version; a complete cache is reused as is. The build takes
# about 10 minutes on 2 cores. Needs npm, git, cmake and a C++ compiler.
set -euo pipefail

version="${NODE_LLAMA_CPP_VERSION:-3.22.1}"
root="${ROLLOUT_INTEROP_CACHE:-$HOME/.cache/rollout-interop}"
dir="$root/node-llama-cpp-$version"
jobs="${ROLLOUT_INTEROP_JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [ -x "$dir/bin/llama-server" ] && [ -f "$dir/models/ggml-vocab-qwen2.gguf" ] && [ -d "$dir/gguf-py/gguf" ]; then
	echo "$dir"
	exit 0
fi

for tool in npm git cmake c++ tar; do
	command -v "$tool" >/dev/null 2>&1 || { echo "build-llama-server: $tool is not installed (Debian: apt-get install -y cmake g++ git npm)" >&2; exit 3; }
done

mkdir -p "$root"
work="$(mktemp -d "$root/build-$version.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "build-llama-server: fetching node-llama-cpp@$version from the npm registry" >&2
(cd "$work" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
tar -xzf "$work/node-llama-cpp-$version.tgz" -C "$work" package/llama/gitRelease.bundle
git clone --quiet "$work/package/llama/gitRelease.bundle" "$work/llama.cpp" 2>/dev/null
commit="$(git -C "$work/llama.cpp" rev-parse --short HEAD)"

echo "build-llama-server: building llama-server (llama.cpp $commit) with $jobs jobs; about 10 minutes on 2 cores" >&2
# No network at build time (no prebuilt web UI, no curl/openssl downloads),
# portable CPU code so that the cached binary runs on any x86-64 or arm64 machine.
cmake -S "$work/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
	-DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >"$work/cmake.log" 2>&1 ||
	{ tail -40 "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 ||
	{ tail -40 "$work/build.log" >&2; exit 1; }

out="$work/out"
mkdir -p "$out/bin" "$out/models/templates"
cp "$work/build/bin/llama-server" "$out/bin/"
cp "$work/llama.cpp/models/ggml-vocab-qwen2.gguf" "$out/models/"
cp "$work/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$out/models/templates/"
cp -r "$work/llama.cpp/gguf-py" "$out/gguf-py"
cp "$work/llama.cpp/LICENSE" "$out/LICENSE.llama.cpp"
echo "node-llama-cpp@$version llama.cpp $commit" >"$out/VERSION"
rm -rf "$dir"
mv "$out" "$dir"
echo "build-llama-server: cached in $dir" >&2
echo "$dir"
