#!/usr/bin/env bash
# Installs a build into a temporary prefix, then, with the source and build trees out of reach
# (another working directory, no Freight variables set):
#   - builds the README's C++ example with the README's CMakeLists.txt (find_package(Freight),
#     Freight::freight) and runs it; it loads a zoo model, which must come from the prefix;
#   - runs the installed freight: a zoo model, a model found through FREIGHT_MODEL_PATH, and the
#     error for a model that is nowhere, which must list the prefix and not the source tree;
#   - checks that no installed file names the source or the build tree.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR GENERATOR CXX_COMPILER [PYTHON]
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) generator=$3 cxx=$4 python=${5:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
unset FREIGHT_MODEL_PATH FREIGHT_MODELS_DIR FREIGHT_DATA_DIR
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in bin/freight include/freight/freight.h share/freight/models/lenet5.json \
         lib/cmake/Freight/FreightConfig.cmake lib/cmake/Freight/FreightConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
lib=$(find "$prefix" -name libfreight.so | head -1)
[ -n "$lib" ] || fail "cmake --install did not install libfreight.so"
if find "$prefix" -name freight-source-dir.txt | grep -q .; then
  fail "the build tree's marker freight-source-dir.txt was installed"
fi
# The device code's line table (nvcc -lineinfo, section .nv_fatbin) names the CUDA source files
# for compute-sanitizer's reports; nothing reads it at run time, so it is left out of the check.
for f in "$prefix/bin/freight" "$lib"; do
  host_only="$work/$(basename "$f").host"
  objcopy --remove-section=.nv_fatbin "$f" "$host_only"
  for tree in "$src" "$build"; do
    if grep -qaF "$tree" "$host_only"; then fail "$f contains the path $tree"; fi
  done
done

# The README's program and CMakeLists.txt, as the README has them: the first cpp block after
# "## The C++ API" and the first cmake block.
example=$work/example
mkdir -p "$example"
awk '/^## The C\+\+ API/ {api = 1} api && /^```cpp$/ {on = 1; next} on && /^```$/ {exit}
     on {print}' "$src/README.md" > "$example/train_step.cpp"
awk '/^```cmake$/ {on = 1; next} on && /^```$/ {exit} on {print}' "$src/README.md" \
  > "$example/CMakeLists.txt"
grep -q "int main" "$example/train_step.cpp" || fail "no C++ program found in README.md"
grep -q "find_package(Freight REQUIRED)" "$example/CMakeLists.txt" ||
  fail "no CMakeLists.txt with find_package(Freight REQUIRED) found in README.md"

cd "$work"
cmake -S "$example" -B "$example/build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" ||
  { cat "$work/configure.log"; fail "configuring the README example"; }
cmake --build "$example/build" > "$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "building the README example"; }
out=$("$example/build/train_step" 2>&1) || fail "the README example failed: $out"
echo "$out"
grep -q "^loss [0-9]" <<< "$out" || fail "the README example printed no loss"
grep -qF "lenet5 from $prefix/share/freight/models/lenet5.json" <<< "$out" ||
  fail "the README example did not find the zoo in the prefix"

# The installed command, from elsewhere.
out=$("$prefix/bin/freight" summary --model lenet5 2>&1) || fail "installed freight summary: $out"
grep -q "total parameters   61,706" <<< "$out" || fail "freight summary --model lenet5: $out"

mkdir -p "$work/mine"
cat > "$work/mine/tiny.json" << 'JSON'
{"name": "tiny", "input": {"shape": [4]}, "classes": 3, "layers": [{"type": "linear", "out": 3}]}
JSON
out=$(FREIGHT_MODEL_PATH="$work/none:$work/mine" "$prefix/bin/freight" summary --model tiny) ||
  fail "freight summary --model tiny through FREIGHT_MODEL_PATH: $out"
grep -q "total parameters   15 " <<< "$out" || fail "tiny through FREIGHT_MODEL_PATH: $out"

if out=$(FREIGHT_MODEL_PATH="$work/none" "$prefix/bin/freight" summary --model no-such 2>&1); then
  fail "freight summary --model no-such succeeded"
fi
echo "$out"
grep -qF "1. $work/none/no-such.json (FREIGHT_MODEL_PATH)" <<< "$out" || fail "error: $out"
grep -qF "$prefix/share/freight/models/no-such.json" <<< "$out" || fail "error: $out"
if grep -qF "$src" <<< "$out"; then fail "the installed freight looked in the source tree"; fi
# The Python package, when the build made it: importable from the prefix's site directory alone,
# finding the engine (RUNPATH) and the zoo in the prefix.
package=$(find "$prefix" -path '*/freight/_freight*.so' | head -1)
if [ -n "$package" ]; then
  site=$(dirname "$(dirname "$package")")
  out=$(cd "$work" && PYTHONPATH="$site" "$python" -c '
import freight
m = freight.nn.build("lenet5")
print(m.num_parameters(), freight.__file__)' 2>&1) || fail "import freight from the prefix: $out"
  echo "$out"
  grep -qF "61706 $site/freight/__init__.py" <<< "$out" || fail "freight from the prefix: $out"
  for tree in "$src" "$build"; do
    if grep -qaF "$tree" "$package"; then fail "$package contains the path $tree"; fi
  done
fi
echo "install test passed"
