#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/io/safetensors.h"

namespace freight::io {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) { return (dir_ / name).string(); }
  // Writes a file whose header is `header_json` followed by `data_bytes` zero bytes.
  std::string raw(const std::string& name, const std::string& header_json, size_t data_bytes,
                  uint64_t declared = 0) {
    std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    uint64_t n = declared ? declared : header_json.size();
    for (int i = 0; i < 8; ++i) f.put(char(n >> (8 * i)));
    f << header_json << std::string(data_bytes, '\0');
    return p;
  }
  static void expect_error(const std::function<void()>& f, const std::string& fragment) {
    try {
      f();
      FAIL() << "expected an error mentioning " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
  fs::path dir_;
};

TEST_F(Safetensors, RoundTripKeepsNamesShapesDtypesValuesAndMetadata) {
  Generator g(1);
  NamedTensors in = {
      {"0.weight", Tensor::normal({4, 3}, 0, 1, DType::F32, Device::cpu(), &g)},
      {"0.bias", Tensor::normal({4}, 0, 1, DType::F64, Device::cpu(), &g)},
      {"1.num_batches_tracked", Tensor::scalar(7, DType::I64)},
      {"pixels", Tensor::full({2, 2}, 200, DType::U8)},
      {"empty", Tensor::empty({0, 5})},
      {"view", Tensor::normal({3, 5}, 0, 1, DType::F32, Device::cpu(), &g).t()},
  };
  std::string p = path("m.safetensors");
  save_safetensors(p, in, {{"epoch", "3"}, {"model", "mlp"}});
  SafetensorsFile out = load_safetensors(p);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);
    EXPECT_EQ(out.tensors[i].second.shape(), in[i].second.shape()) << in[i].first;
    EXPECT_EQ(out.tensors[i].second.dtype(), in[i].second.dtype()) << in[i].first;
    EXPECT_EQ(out.tensors[i].second.to_double_vector(), in[i].second.to_double_vector());
  }
  EXPECT_EQ(out.metadata.at("epoch"), "3");
  EXPECT_EQ(out.metadata.at("model"), "mlp");
  // Data starts 8-byte aligned (header padded).
  std::ifstream f(p, std::ios::binary);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(f.get())) << (8 * i);
  EXPECT_EQ((n + 8) % 8, 0u);
}

TEST_F(Safetensors, BrokenFilesAreClearErrors) {
  expect_error([&] { load_safetensors(path("missing")); }, "no such file");
  std::string tiny = path("tiny");
  std::ofstream(tiny) << "abc";
  expect_error([&] { load_safetensors(tiny); }, "truncated");
  expect_error([&] { load_safetensors(raw("big", "{}", 0, uint64_t(1) << 40)); }, "header");
  expect_error([&] { load_safetensors(raw("json", "{not json", 0)); }, "not valid JSON");
  expect_error(
      [&] {
        load_safetensors(
            raw("short", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
      },
      "outside");
  expect_error(
      [&] {
        load_safetensors(
            raw("size", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16));
      },
      "needs 12 bytes");
  expect_error(
      [&] {
        load_safetensors(
            raw("dtype", R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", 8));
      },
      "unsupported dtype");
  std::string named = raw("named", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,9]}})", 9);
  try {
    load_safetensors(named);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << "names the file";
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << "names the tensor";
  }
}

// Shapes whose element or byte counts do not fit in 64 bits used to wrap (UB in shape_numel)
// to 0, so an entry spanning 0 bytes was accepted as a [2^32, 2^32] tensor with no storage.
TEST_F(Safetensors, SizesThatOverflowAreErrorsNamingTheFileAndTensor) {
  struct Case {
    const char* name;
    const char* header;
  };
  const Case cases[] = {
      {"numel", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"},
      {"bytes", R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})"},
      {"i64", R"({"w":{"dtype":"I64","shape":[2,1152921504606846976],"data_offsets":[0,0]}})"},
      {"huge_end", R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string p = raw(c.name, c.header, 8);
    std::string m = test::error_of([&] { load_safetensors(p); });
    EXPECT_TRUE(test::has(m, p)) << "names the file: " << m;
    EXPECT_TRUE(test::has(m, "'w'")) << "names the tensor: " << m;
  }
  // Negative sizes and sizes beyond int64 (which nlohmann would read back as negative).
  for (const char* shape : {"[-1]", "[18446744073709551615]", "[2.5]"}) {
    SCOPED_TRACE(shape);
    std::string p =
        raw("neg",
            fmt::format(R"({{"w":{{"dtype":"U8","shape":{},"data_offsets":[0,0]}}}})", shape), 0);
    expect_error([&] { load_safetensors(p); }, "'w'");
  }
}

// A header is JSON: one nested 200,000 levels deep (here in the metadata, which the loader
// serialises back to text) must be refused up front rather than overflow the stack.
TEST_F(Safetensors, DeeplyNestedHeaderIsAnError) {
  const int depth = 200000;
  std::string header =
      R"({"__metadata__":{"a":)" + std::string(depth, '[') + std::string(depth, ']') + "}}";
  std::string p = raw("deep", header, 0);
  std::string m = test::error_of([&] { load_safetensors(p); });
  EXPECT_TRUE(test::has(m, p)) << m;
  EXPECT_TRUE(test::has(m, "nest")) << m;
}

TEST_F(Safetensors, DirectoryIsAClearError) {
  std::string d = path("ckpt.safetensors");
  fs::create_directories(d);
  std::string m = test::error_of([&] { load_safetensors(d); });
  EXPECT_TRUE(test::has(m, d)) << m;
  EXPECT_TRUE(test::has(m, "directory")) << m;
}

TEST_F(Safetensors, SaveKilledHalfWayLeavesThePreviousCheckpointLoadable) {
  std::string p = path("ckpt.safetensors");
  save_safetensors(p, {{"w", Tensor::full({4}, 1.0)}}, {{"step", "1"}});
  // A child starts overwriting it with a large tensor and is killed mid-write.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    set_num_threads(1);  // OpenMP's pool threads do not survive fork: run inline in the child
    save_safetensors(p, {{"w", Tensor::full({64 << 20}, 2.0)}}, {{"step", "2"}});
    _exit(0);
  }
  usleep(20000);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  SafetensorsFile f = load_safetensors(p);  // must not throw: old or (if it finished) new
  std::string step = f.metadata.at("step");
  ASSERT_TRUE(step == "1" || step == "2");
  EXPECT_EQ(f.tensors[0].second.numel(), step == "1" ? 4 : (64 << 20));
}

}  // namespace
}  // namespace freight::io
