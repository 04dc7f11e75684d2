// The `freight` command against hostile files (issue 11, "resource limits and crashes" and
// "messages that name the culprit"): IDX headers that claim more than the file holds, model files
// that nest, repeat or size without bound or carry the wrong JSON types, safetensors headers whose
// sizes overflow. Each must end in "freight: error: ..." naming the file (and the layer or
// tensor), exit 1, and stay within a bounded address space (`ulimit -v`), never a crash, a hang or
// "internal error: std::bad_alloc".
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"

namespace {

namespace fs = std::filesystem;
using freight::test::ShellRun;

// Address space for one run of the command: ample for a small model on the CPU (the command
// needs about 200 MB of it; CUDA is never initialised here, every run is --device cpu or does
// not touch a device), below the 4 GiB a lying IDX header asks for. Not for ASan builds of the
// command, whose shadow memory needs terabytes of address space.
constexpr const char* kUlimit = "ulimit -v 3000000; ";

class HostileFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_hostile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) { return (dir_ / n).string(); }
  std::string write(const std::string& name, const std::string& bytes, bool gz = false) {
    std::string p = path(name);
    if (gz) {
      gzFile f = gzopen(p.c_str(), "wb");
      gzwrite(f, bytes.data(), unsigned(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(p, std::ios::binary) << bytes;
    }
    return p;
  }
  // Runs `freight args` under the address-space limit; expects exit 1 with every fragment.
  void expect_failure(const std::string& args, const std::vector<std::string>& fragments) {
    freight::test::expect_refusal(
        freight::test::shell(std::string(kUlimit) + FREIGHT_CLI_PATH + " " + args), args,
        fragments);
  }
  // A model file with the given layers; returns its path.
  std::string model(const std::string& name, const std::string& layers,
                    const std::string& input = "[4]", const std::string& classes = "2") {
    return write(name, R"({"input": {"shape": )" + input + R"(}, "classes": )" + classes +
                           R"(, "layers": )" + layers + "}");
  }
  fs::path dir_;
};

// 16 bytes: magic 00 00 08 03, then 16384 x 512 x 512 (4 GiB, within the reader's cap), no data.
std::string huge_idx_header() {
  return std::string("\x00\x00\x08\x03\x00\x00\x40\x00\x00\x00\x02\x00\x00\x00\x02\x00", 16);
}

TEST_F(HostileFiles, ShortIdxWithAHugeHeaderFailsWithoutAllocating) {
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    std::string sub = gz ? "gz" : "plain", suffix = gz ? ".gz" : "";
    fs::create_directories(dir_ / sub);
    std::string images = write(sub + "/train-images-idx3-ubyte" + suffix, huge_idx_header(), gz);
    write(sub + "/train-labels-idx1-ubyte" + suffix, std::string("\x00\x00\x08\x01\0\0\0\0", 8),
          gz);
    expect_failure("train --model mlp --no-save --device cpu --data " + path(sub),
                   {images, "[16384, 512, 512]"});
  }
}

TEST_F(HostileFiles, DeeplyNestedModelFile) {
  const int depth = 200000;
  std::string p = model("deep.json", std::string(depth, '[') + std::string(depth, ']'));
  expect_failure("summary --model " + p, {p, "nested"});
}

TEST_F(HostileFiles, RepeatsAndSizesBeyondTheLimits) {
  std::string times = model("times.json", R"([{"type": "repeat", "times": 1000000000,
                                              "layers": [{"type": "relu"}]}])");
  expect_failure("summary --model " + times, {times, "layer 0 (repeat)"});
  std::string nested = model("nested.json", R"([{"type": "repeat", "times": 100000, "layers": [
                           {"type": "repeat", "times": 100000, "layers": [{"type": "relu"}]}]}])");
  expect_failure("summary --model " + nested, {nested, "layer 0 (repeat)"});
  std::string out = model("out.json", R"([{"type": "linear", "out": 1000000000000}])");
  expect_failure("summary --model " + out, {out, "layer 0 (linear)", "\"out\""});
  std::string params = model("params.json", R"([{"type": "linear", "out": 2000000000}])");
  expect_failure("summary --model " + params, {params, "layer 0 (linear)", "parameters"});
}

// Fields of the wrong JSON type used to escape as "internal error: [json.exception.type_error]".
TEST_F(HostileFiles, WrongJsonTypeNamesTheFieldAndLayer) {
  std::string p = model("types.json", R"([{"type": "linear", "out": 2, "bias": "yes"}])");
  expect_failure("summary --model " + p, {p, "layer 0 (linear)", "\"bias\""});
  std::string q = model("shape.json", "[]", R"("four")");
  expect_failure("summary --model " + q, {q, "\"shape\""});
  std::string r = model("list.json", "5");
  expect_failure("summary --model " + r, {r, "\"layers\""});
}

TEST_F(HostileFiles, ConstructorErrorsNameTheFileAndLayer) {
  struct Case {
    const char* name;
    std::string layers, input, classes;
    std::vector<std::string> fragments;
  };
  const std::string img = "[1, 8, 8]";
  const Case cases[] = {
      {"out0", R"([{"type": "linear", "out": 0}])", "[4]", "2", {"layer 0 (linear)", "\"out\""}},
      {"stride0",
       R"([{"type": "conv2d", "out": 2, "kernel": 3, "stride": 0}])",
       img,
       "2",
       {"layer 0 (conv2d)", "stride"}},
      {"dilation0",
       R"([{"type": "conv2d", "out": 2, "kernel": 3, "dilation": 0}])",
       img,
       "2",
       {"layer 0 (conv2d)", "dilation"}},
      {"dropout2",
       R"([{"type": "dropout", "p": 2}, {"type": "linear", "out": 2}])",
       "[4]",
       "2",
       {"layer 0 (dropout)", "p"}},
      {"lstm0",
       R"([{"type": "lstm", "hidden": 4, "layers": 0}])",
       "[5, 3]",
       "4",
       {"layer 0 (lstm)", "\"layers\""}},
      {"input0", R"([{"type": "linear", "out": 2}])", "[4, 0]", "2", {"input", "[4, 0]"}},
      {"classes0", R"([{"type": "linear", "out": 2}])", "[4]", "0", {"\"classes\""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string p = model(std::string(c.name) + ".json", c.layers, c.input, c.classes);
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back(p);
    expect_failure("summary --model " + p, fragments);
  }
}

TEST_F(HostileFiles, ModelPathThatIsADirectory) {
  fs::create_directories(path("models"));
  std::string p = path("models") + "/";
  expect_failure("summary --model " + p, {p, "directory"});
}

TEST_F(HostileFiles, SafetensorsShapesThatOverflow) {
  for (const char* shape : {"[4294967296, 4294967296]", "[4611686018427387904]"}) {
    SCOPED_TRACE(shape);
    std::string header =
        std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,0]}})";
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(char(uint64_t(header.size()) >> (8 * i)));
    std::string p = write("over.safetensors", bytes + header);
    expect_failure("eval " + p + " --data synthetic --device cpu", {p, "'w'", shape});
  }
}

}  // namespace
