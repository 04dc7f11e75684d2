// Model files against hostile and broken input: every failure is a freight::Error that names the
// file and, where one is at fault, the layer (its index and type) and the field; nothing crashes,
// hangs or allocates beyond the limits the builder states.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/nn/lstm.h"
#include "freight/nn/model_file.h"

namespace freight::nn {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::has;

// A model file with input `input`, `classes` and the given "layers" array (JSON text).
std::string model(const std::string& layers, const std::string& input = "[4]",
                  const std::string& classes = "2") {
  return R"({"input": {"shape": )" + input + R"(}, "classes": )" + classes + R"(, "layers": )" +
         layers + "}";
}

// Parses and builds `text` as "net.json", returning the error message ("" when it builds).
std::string build_error(const std::string& text) {
  return error_of([&] { build_model(parse_model_spec(text, "net.json")); });
}

// Expects the build of `text` to fail with a message naming the file and every fragment.
void expect_build_error(const std::string& text, const std::vector<std::string>& fragments) {
  std::string m = build_error(text);
  ASSERT_FALSE(m.empty()) << "expected an error for " << text.substr(0, 200);
  EXPECT_TRUE(has(m, "net.json")) << m;
  for (const std::string& f : fragments) EXPECT_TRUE(has(m, f)) << "missing '" << f << "': " << m;
}

int64_t peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) / 1024;
}

TEST(ModelFile, GoodFileBuilds) {
  EXPECT_EQ(build_error(model(R"([{"type": "linear", "out": 8}, {"type": "relu"},
      {"type": "repeat", "times": 3, "layers": [{"type": "linear", "out": 8}]},
      {"type": "linear", "out": 2}])")),
            "");
}

// nlohmann's parser is iterative but its serializer (and the builder) recurse, so a file nested
// 200,000 levels deep used to overflow the stack. The nesting is bounded before parsing.
// The dry pass counts what the real build makes: every zoo model's parameters and layers.
TEST(ModelFile, MeasureCountsWhatTheBuildMakes) {
  for (const std::string& name : zoo_models()) {
    ModelSpec spec = load_model_spec(name);
    ModelSize size = measure_model(spec);
    if (size.parameters > 20'000'000) continue;  // vgg16: seconds to initialise, nothing new
    ModulePtr model = build_model(spec);
    EXPECT_EQ(size.parameters, model->num_parameters()) << name;
    EXPECT_GT(size.layers, 0) << name;
    EXPECT_GT(size.flops, 0) << name;
  }
}

TEST(ModelFile, DeepNestingIsRefusedBeforeParsing) {
  const int depth = 200000;
  std::string arrays = model(std::string(depth, '[') + std::string(depth, ']'));
  std::string m = error_of([&] { parse_model_spec(arrays, "net.json"); });
  EXPECT_TRUE(has(m, "net.json")) << m;
  EXPECT_TRUE(has(m, "nested")) << m;
  // The same depth built of layers that really nest (sequential inside sequential).
  std::string seq;
  for (int i = 0; i < depth; ++i) seq += R"([{"type": "sequential", "layers": )";
  seq += "[]";
  for (int i = 0; i < depth; ++i) seq += "}]";
  m = error_of([&] { parse_model_spec(model(seq), "net.json"); });
  EXPECT_TRUE(has(m, "nested")) << m;
  // Brackets inside strings do not count.
  EXPECT_EQ(build_error(R"({"name": ")" + std::string(1000, '[') +
                        R"(", "input": {"shape": [4]}, "classes": 4, "layers": []})"),
            "");
}

// repeat counts multiply: the builder checks the layer count they add up to before expanding.
TEST(ModelFile, HugeRepeatsAreRefusedBeforeExpanding) {
  expect_build_error(model(R"([{"type": "repeat", "times": 1000000000,
                                 "layers": [{"type": "relu"}]}])"),
                     {"layer 0 (repeat)", "100000"});
  expect_build_error(model(R"([{"type": "repeat", "times": 100000, "layers": [
                  {"type": "repeat", "times": 100000, "layers": [{"type": "relu"}]}]}])"),
                     {"layer 0 (repeat)", "100000"});
  // Repeats nested through sequential layers are counted too.
  expect_build_error(
      model(R"([{"type": "repeat", "times": 100000, "layers": [{"type": "sequential", "layers": [
                  {"type": "repeat", "times": 100000, "layers": [{"type": "relu"}]}]}]}])"),
      {"100000 layers"});
}

// The parameter count is known from the shapes before any weight is allocated: a layer (or a
// stack of them) beyond the limit is an error naming the layer, and memory does not move.
TEST(ModelFile, HugeLayersAreRefusedBeforeAllocating) {
  int64_t before = peak_rss_mib();
  expect_build_error(model(R"([{"type": "linear", "out": 1000000000000}])"),
                     {"layer 0 (linear)", "\"out\""});
  expect_build_error(model(R"([{"type": "linear", "out": 2000000000}])"),
                     {"layer 0 (linear)", "parameters"});
  // 20 layers of 10^8 weights: each is fine alone, the model is not, and the error comes before
  // the first 400 MB are allocated.
  expect_build_error(model(R"([{"type": "repeat", "times": 20,
                                 "layers": [{"type": "linear", "out": 10000}]}])",
                           "[10000]", "10000"),
                     {"(linear)", "parameters"});
  expect_build_error(
      model(R"([{"type": "conv2d", "out": 100000, "kernel": 100}])", "[100000, 100, 100]"),
      {"layer 0 (conv2d)", "parameters"});
  expect_build_error(R"({"input": {"shape": [4], "dtype": "int64"}, "classes": 2, "layers":
                         [{"type": "embedding", "num": 2000000000, "dim": 2000000000}]})",
                     {"layer 0 (embedding)", "parameters"});
  expect_build_error(model(R"([{"type": "lstm", "hidden": 100000, "layers": 100}])", "[5, 4]"),
                     {"layer 0 (lstm)", "parameters"});
  // Activations and compute: padding that makes a 2 GB feature map, a reshape past int64.
  expect_build_error(
      model(R"([{"type": "conv2d", "out": 1, "kernel": 1, "padding": 100000}])", "[1, 4, 4]"),
      {"layer 0 (conv2d)"});
  expect_build_error(
      model(R"([{"type": "reshape", "shape": [4294967296, 4294967296, 4294967296, -1]}])"),
      {"layer 0 (reshape)"});
  expect_build_error(model(R"([{"type": "flatten"}])", "[4294967296, 4294967296]"), {"input"});
  EXPECT_LT(peak_rss_mib() - before, 200) << "the builder allocated the weights it refused";
}

// Wrong JSON types used to escape as nlohmann's type_error ("internal error").
TEST(ModelFile, WrongTypesNameTheFieldAndLayer) {
  expect_build_error(model(R"([{"type": "linear", "out": "ten"}])"),
                     {"layer 0 (linear)", "\"out\"", "\"ten\""});
  expect_build_error(model("5"), {"\"layers\""});
  expect_build_error(model(R"([{"type": "linear", "out": 2, "bias": "yes"}])"),
                     {"layer 0 (linear)", "\"bias\""});
  expect_build_error(model(R"([{"type": "dropout", "p": "half"}, {"type": "linear", "out": 2}])"),
                     {"layer 0 (dropout)", "\"p\""});
  expect_build_error(model(R"([{"type": "batchnorm", "eps": [1]}])"),
                     {"layer 0 (batchnorm)", "\"eps\""});
  expect_build_error(model(R"([{"type": "flatten", "end": "x"}])"),
                     {"layer 0 (flatten)", "\"end\""});
  expect_build_error(model(R"([{"type": "reshape", "shape": ["a"]}])"),
                     {"layer 0 (reshape)", "\"shape\""});
  expect_build_error(model(R"([{"type": "linear", "out": 2.5}])"), {"\"out\"", "2.5"});
  expect_build_error(model(R"([{"type": "linear", "out": -3}])"), {"\"out\"", "-3"});
  expect_build_error(model("[]", R"("four")"), {"input", "shape"});
  expect_build_error(model("[]", "[4.5]"), {"input", "shape"});
  expect_build_error(model("[]", "[4]", R"("two")"), {"\"classes\""});
  expect_build_error(R"({"name": 5, "input": {"shape": [2]}, "classes": 2, "layers": []})",
                     {"\"name\""});
  expect_build_error(R"({"input": {"shape": [2], "dtype": 8}, "classes": 2, "layers": []})",
                     {"\"dtype\""});
  expect_build_error(R"({"input": {"shape": [2], "vocab": "x"}, "classes": 2, "layers": []})",
                     {"\"vocab\""});
  expect_build_error(R"({"input": {"shape": [2]}, "classes": 2, "task": 1, "layers": []})",
                     {"\"task\""});
  expect_build_error(model(R"([{"type": "residual", "body": 3}])"), {"layer 0 (residual)"});
  expect_build_error(model(R"([{"type": "sequential", "layers": {"a": 1}}])"),
                     {"layer 0 (sequential)"});
  expect_build_error(model(R"([{"type": "repeat", "times": 2, "layers": 7}])"),
                     {"layer 0 (repeat)", "\"layers\""});
  // A nested layer is named by its path.
  expect_build_error(
      model(R"([{"type": "sequential", "layers": [{"type": "relu"}, {"type": "linear"}]}])"),
      {"layer 0.1 (linear)", "\"out\""});
}

// A field the layer type does not take (a misspelling, or another type's field) is an error
// naming it, the layer and the fields it takes, with the closest one when it is near: before,
// "stide" was ignored and the default stride used without a word. Notes ("comment", "_...")
// are allowed anywhere.
TEST(ModelFile, UnknownFieldsNameTheFieldTheLayerAndWhatItTakes) {
  std::string img = "[1, 8, 8]";
  expect_build_error(model(R"([{"type": "conv2d", "out": 2, "kernel": 3, "stide": 2}])", img),
                     {"layer 0 (conv2d)", "unknown field \"stide\"", "did you mean \"stride\"",
                      "out, kernel, stride, padding, dilation, bias"});
  expect_build_error(model(R"([{"type": "relu", "inplace": true}, {"type": "linear", "out": 2}])"),
                     {"layer 0 (relu)", "\"inplace\"", "no fields"});
  expect_build_error(
      model(R"([{"type": "sequential", "layers": [{"type": "linear", "out": 2, "kernel": 3}]}])"),
      {"layer 0.0 (linear)", "\"kernel\"", "out, bias"});
  expect_build_error(model(R"([{"type": "repeat", "times": 2, "layer": []}])"),
                     {"layer 0 (repeat)", "\"layer\"", "did you mean \"layers\""});
  expect_build_error(R"({"input": {"shape": [2]}, "classes": 2, "layers": [], "layerz": []})",
                     {"top level", "\"layerz\""});
  expect_build_error(R"({"input": {"shape": [2], "dtpye": "float32"}, "classes": 2, "layers": []})",
                     {"input", "\"dtpye\"", "did you mean \"dtype\""});
  expect_build_error(
      R"({"input": {"shape": [2]}, "classes": 2, "layers": [], "train": {"epoch": 3}})",
      {"train", "\"epoch\"", "did you mean \"epochs\""});
  EXPECT_EQ(build_error(R"({"comment": "a note", "_v": 2, "input": {"shape": [4]}, "classes": 2,
                          "layers": [{"type": "linear", "out": 2, "comment": "the head"}]})"),
            "");
}

// Declared token ids (an int64 input) must reach an embedding, and an embedding placed after
// another layer would read floats: the builder says so when the file is read (summary, plan)
// rather than at the first training step, and checks "vocab" against the table's rows.
TEST(ModelFile, TokenIdsGoToAnEmbeddingThatComesFirst) {
  const std::string tokens = R"({"input": {"shape": [5], "dtype": "int64", "vocab": 20},
                                 "classes": 3, "layers": )";
  EXPECT_EQ(build_error(tokens + R"([{"type": "embedding", "num": 20, "dim": 4},
                                      {"type": "flatten"}, {"type": "linear", "out": 3}]})"),
            "");
  expect_build_error(tokens + R"([{"type": "embedding", "num": 10, "dim": 4},
                                   {"type": "flatten"}, {"type": "linear", "out": 3}]})",
                     {"layer 0 (embedding)", "\"vocab\": 20", "10 rows"});
  expect_build_error(tokens + R"([{"type": "linear", "out": 3}]})",
                     {"layer 0 (linear)", "int64 token ids", "only an embedding"});
  expect_build_error(model(R"([{"type": "linear", "out": 3}, {"type": "embedding", "num": 10,
                               "dim": 3}, {"type": "flatten"}, {"type": "linear", "out": 2}])"),
                     {"layer 1 (embedding)", "first layer", "float output"});
  expect_build_error(
      tokens + R"([{"type": "embedding", "num": 20, "dim": 4}, {"type": "embedding", "num": 4,
                   "dim": 2}, {"type": "flatten"}, {"type": "linear", "out": 3}]})",
      {"layer 1 (embedding)", "float output"});
  // A floating-point input is no token ids: refused when the file is read, not at the first
  // step's "indices must be int64".
  expect_build_error(model(R"([{"type": "embedding", "num": 10, "dim": 4}, {"type": "flatten"},
                               {"type": "linear", "out": 2}])"),
                     {"layer 0 (embedding)", "int64 token ids", "floating point"});
  // Inside a container the first layer still receives the input.
  EXPECT_EQ(build_error(tokens + R"([{"type": "sequential", "layers": [{"type": "embedding",
                                      "num": 20, "dim": 4}, {"type": "flatten"}]},
                                      {"type": "linear", "out": 3}]})"),
            "");
}

// The loss reads a classifier's output as [N, classes] and a language model's as [N, T, classes]:
// a network whose output has another shape per sample is refused when the file is read, naming
// the shape it makes and the one it must make (not at the loss of the first step).
TEST(ModelFile, TheOutputPerSampleIsWhatTheTaskPredicts) {
  expect_build_error(model(R"([{"type": "linear", "out": 2}])", "[3, 4]"),
                     {"produces [3, 2] per sample", "must produce [2]", "flatten"});
  EXPECT_EQ(build_error(model(R"([{"type": "flatten"}, {"type": "linear", "out": 2}])", "[3, 4]")),
            "");
  const std::string lm = R"({"input": {"shape": [5], "dtype": "int64", "vocab": 7},
                             "classes": 7, "task": "language_model", "layers": )";
  EXPECT_EQ(build_error(lm + R"([{"type": "embedding", "num": 7, "dim": 4},
                                  {"type": "linear", "out": 7}]})"),
            "");
  expect_build_error(lm + R"([{"type": "embedding", "num": 7, "dim": 4}, {"type": "flatten"},
                               {"type": "linear", "out": 7}]})",
                     {"produces [7] per sample", "must produce [5, 7]", "per input token"});
  expect_build_error(R"({"input": {"shape": [1, 4, 4]}, "classes": 2, "task": "language_model",
                         "layers": [{"type": "flatten"}, {"type": "linear", "out": 2}]})",
                     {"language_model", "float32", "\"dtype\": \"int64\""});
}

// Values that the layers' constructors refuse: the message names the file, the layer and the
// field, whichever of the model file or the constructor catches it.
TEST(ModelFile, BadValuesNameTheLayer) {
  expect_build_error(model(R"([{"type": "linear", "out": 0}])"), {"layer 0 (linear)", "\"out\""});
  std::string img = "[1, 8, 8]";
  expect_build_error(model(R"([{"type": "conv2d", "out": 2, "kernel": 3, "stride": 0}])", img),
                     {"layer 0 (conv2d)", "stride"});
  expect_build_error(model(R"([{"type": "conv2d", "out": 2, "kernel": 3, "dilation": 0}])", img),
                     {"layer 0 (conv2d)", "dilation"});
  expect_build_error(model(R"([{"type": "conv2d", "out": 2, "kernel": [3, 0]}])", img),
                     {"layer 0 (conv2d)", "kernel"});
  expect_build_error(model(R"([{"type": "maxpool2d", "kernel": 2, "stride": 0}])", img),
                     {"layer 0 (maxpool2d)", "stride"});
  expect_build_error(model(R"([{"type": "dropout", "p": 2}, {"type": "linear", "out": 2}])"),
                     {"layer 0 (dropout)", "p"});
  expect_build_error(model(R"([{"type": "lstm", "hidden": 4, "layers": 0}])", "[5, 3]"),
                     {"layer 0 (lstm)", "\"layers\""});
  expect_build_error(R"({"input": {"shape": [4], "dtype": "int64"}, "classes": 2,
                         "layers": [{"type": "embedding", "num": 0, "dim": 3}]})",
                     {"layer 0 (embedding)", "\"num\""});
  expect_build_error(model(R"([{"type": "batchnorm", "momentum": 3}])", img),
                     {"layer 0 (batchnorm)", "momentum"});
  expect_build_error(model(R"([{"type": "linear", "out": 2}])", "[4, 0]"), {"input", "[4, 0]"});
  expect_build_error(model(R"([{"type": "linear", "out": 2}])", "[4]", "0"), {"\"classes\""});
  expect_build_error(model(R"([{"type": "flatten", "start": 7}])"), {"layer 0 (flatten)"});
}

TEST(ModelFile, DirectoryOrUnreadablePathIsAClearError) {
  fs::path dir = fs::temp_directory_path() / ("freight_model_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir / "net.json");
  for (std::string p : {dir.string() + "/", (dir / "net.json").string()}) {
    std::string m = error_of([&] { load_model_spec(p); });
    EXPECT_TRUE(has(m, p)) << m;
    EXPECT_TRUE(has(m, "directory")) << m;
  }
  fs::remove_all(dir);
}

// Layers built from C++ check their arguments themselves (the model file is one caller).
TEST(NnLayerArguments, ConstructorsRefuseNonsense) {
  EXPECT_TRUE(has(error_of([] { Conv2d(1, 2, 3, 0); }), "stride"));
  EXPECT_TRUE(has(error_of([] { Conv2d(1, 2, 3, 1, 0, 0); }), "dilation"));
  EXPECT_TRUE(has(error_of([] { Conv2d(1, 2, Size2(3, 0)); }), "kernel"));
  EXPECT_TRUE(has(error_of([] { MaxPool2d(2, Size2(0, 2)); }), "stride"));
  EXPECT_TRUE(has(error_of([] { AvgPool2d(2, -1); }), "stride"));
  EXPECT_TRUE(has(error_of([] { Dropout(2); }), "p"));
  EXPECT_TRUE(has(error_of([] { Dropout(std::nan("")); }), "p"));
  EXPECT_TRUE(has(error_of([] { LSTM(4, 4, 0); }), "LSTM"));
  EXPECT_TRUE(has(error_of([] { Linear(4, 0); }), "Linear"));
  EXPECT_TRUE(has(error_of([] { Embedding(0, 3); }), "Embedding"));
  EXPECT_TRUE(has(error_of([] { BatchNorm2d(0); }), "BatchNorm2d"));
  EXPECT_TRUE(has(error_of([] { BatchNorm1d(4, std::nan(""), 0.1); }), "eps"));
  EXPECT_TRUE(has(error_of([] { Flatten(1, 0).output_shape({2, 3}); }), "Flatten"));
  // Sizes whose product does not fit in int64.
  EXPECT_TRUE(has(error_of([] { Reshape({int64_t(1) << 40, int64_t(1) << 40}); }), "Reshape"));
  EXPECT_FALSE(error_of([] { Linear(int64_t(1) << 40, int64_t(1) << 40); }).empty());
}

}  // namespace
}  // namespace freight::nn
