// `lingbot-map inspect` and `lingbot-map convert` on the golden tiny checkpoint and the torch fixtures:
// output contract, exit codes and error lines; converted files compared byte for byte.
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <string>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "run_test_util.h"

namespace {

using namespace run_test;

// Not wiped between calls: a test may check that a failed convert left no file behind.
fs::path inspect_convert_dir() {
  const fs::path d = fs::path(::testing::TempDir()) / ("inspect_convert_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

TEST(InspectCli, TinyCheckpointPassesAllChecks) {
  for (const char* file : {"model.pt", "weights.safetensors"}) {
    const Result r = run_cli("inspect " + kTestdata + "/tiny/" + file);
    EXPECT_EQ(r.exit_code, 0) << file << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "tensors: 258, parameters: 1,731,628")) << r.out;
    EXPECT_TRUE(contains(r.out, "config check: OK (all 258 keys present with the expected shapes)")) << r.out;
    EXPECT_FALSE(contains(r.out, "FAILED")) << r.out;
    EXPECT_TRUE(contains(r.out, "  aggregator.num_heads = 16\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "  aggregator.rope3d_fhw = 4,2,2\n")) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
  EXPECT_TRUE(contains(run_cli("inspect " + kTestdata + "/tiny/model.pt").out,
                       "format: pytorch (state dict under 'model'), 6,991,925 bytes"));
  EXPECT_TRUE(contains(run_cli("inspect " + kTestdata + "/tiny/weights.safetensors").out, "  F16      258 tensors        3,463,256 bytes"));
}

// A checkpoint with tensors of heads the model does not run (upstream's point_head): inspect passes it
// and names them; run says it ignores them (it refused the file before).
TEST(InspectCli, TensorsOfOtherHeadsAreNamedAndRunIgnoresThem) {
  lingbot::io::TensorMap w = lingbot::io::load_checkpoint(kTestdata + "/tiny/weights.safetensors").tensors;
  w.emplace("point_head.fc.weight", lingbot::Tensor(lingbot::Shape{3, 4}));
  const fs::path path = inspect_convert_dir() / "with_point_head.safetensors";
  lingbot::io::write_safetensors(path.string(), w);
  const std::string line =
      "checkpoint tensors of modules this model does not run are ignored (as upstream's demo drops them): "
      "point_head (1 tensors, 12 parameters)\n";
  const Result r = run_cli("inspect " + path.string());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "config check: OK (all 258 keys present with the expected shapes)\n" + line)) << r.out;
  EXPECT_FALSE(contains(r.out, "FAILED")) << r.out;
  const fs::path out = inspect_convert_dir() / "with_point_head_out";
  const Result run = run_cli("run --images " + kTestdata + "/tiny/frames --first-k 2 --scale-frames 2 --image-size 112 "
                             "--export poses --out " + out.string() + " --model " + path.string());
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "notice: " + line)) << run.out;
}

TEST(InspectCli, LoadReportsPeakMemory) {
  const Result r = run_cli("inspect " + kTestdata + "/tiny/model.pt --load");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "load: 258 tensors, 6,926,512 bytes of tensor data in ")) << r.out;
  // The ratio is of the growth during the load (the peak minus the RSS before it): about 1 for a file
  // read once, not the whole process's RSS over the file size.
  const size_t at = r.out.find(" more than before the load = ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double ratio = std::stod(r.out.substr(at + std::string(" more than before the load = ").size()));
  EXPECT_GT(ratio, 0.5) << r.out;
  EXPECT_LT(ratio, 2.5) << r.out;
  EXPECT_TRUE(contains(r.out, " x file size\n")) << r.out;
}

TEST(InspectCli, ManifestCheck) {
  // A manifest listing exactly the tiny checkpoint's keys passes; the full-size manifest does not.
  nlohmann::json m;
  m["tensors"] = nlohmann::json::array();
  const auto r0 = lingbot::io::SafetensorsReader::open(kTestdata + "/tiny/weights.safetensors");
  for (const auto& e : r0.entries()) m["tensors"].push_back({{"name", e.name}, {"shape", e.shape}});
  const fs::path good = inspect_convert_dir() / "tiny-manifest.json";
  std::ofstream(good) << m.dump();
  const Result ok = run_cli("inspect " + kTestdata + "/tiny/model.pt --manifest " + good.string());
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_TRUE(contains(ok.out, "manifest check (" + good.string() + "): OK")) << ok.out;

  const Result bad = run_cli("inspect " + kTestdata + "/tiny/model.pt --manifest " + kTestdata + "/full-size-manifest.json");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(contains(bad.out, "  wrong shape aggregator.camera_token: manifest [1, 2, 1, 1024], checkpoint [1, 2, 1, 128]\n"));
  EXPECT_TRUE(contains(bad.out, "  missing aggregator.frame_blocks.23.ls2.gamma [1024]\n"));
  EXPECT_EQ(bad.err, "error: " + kTestdata + "/tiny/model.pt: 1337 problem(s) found by the config and manifest checks (listed above)\n");
}

TEST(InspectCli, OverridesAndProblems) {
  const Result wrong = run_cli("inspect " + kTestdata + "/tiny/model.pt --set dpt.features=32");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(contains(wrong.out, "  wrong shape depth_head.scratch.output_conv1.weight: expected [16, 32, 3, 3], got [8, 16, 3, 3]\n"))
      << wrong.out;
  const Result heads = run_cli("inspect " + kTestdata + "/tiny/model.pt --set camera.num_heads=8 --set kv_cache.sliding_window=3");
  EXPECT_EQ(heads.exit_code, 0) << heads.err;
  EXPECT_TRUE(contains(heads.out, "  camera.num_heads = 8\n"));
  EXPECT_TRUE(contains(heads.out, "  kv_cache.sliding_window = 3\n"));
  const Result unknown = run_cli("inspect " + kTestdata + "/tiny/model.pt --set camera.heads=8");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_EQ(unknown.err, "error: unknown config key 'camera.heads' (see `lingbot-map inspect` for the list)\n");
  const Result bad_set = run_cli("inspect " + kTestdata + "/tiny/model.pt --set camera.num_heads");
  EXPECT_EQ(bad_set.exit_code, 2);  // a usage error
  EXPECT_EQ(bad_set.err, "error: --set: expects key=value, got 'camera.num_heads'\nRun 'lingbot-map inspect --help' for usage.\n");
  const Result missing = run_cli("inspect /nonexistent/model.pt");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "error: cannot open '/nonexistent/model.pt': No such file or directory\n");
  const Result not_ckpt = run_cli("inspect " + kTestdata + "/full-size-manifest.json");
  EXPECT_EQ(not_ckpt.err, "error: " + kTestdata + "/full-size-manifest.json: unrecognised checkpoint format (neither a PyTorch zip "
                          "checkpoint nor safetensors)\n");
  // A safetensors file cut inside its JSON header is named as one, not as an unknown format.
  const fs::path cut = fresh_dir("inspect_cut") / "cut.safetensors";
  const std::string whole = slurp(kTestdata + "/tiny/weights.safetensors");
  std::ofstream(cut, std::ios::binary) << whole.substr(0, 1000);
  uint64_t header = 0;
  std::memcpy(&header, whole.data(), 8);
  const Result truncated = run_cli("inspect " + cut.string());
  EXPECT_EQ(truncated.exit_code, 1);
  EXPECT_EQ(truncated.err, "error: " + cut.string() + ": safetensors header length " + std::to_string(header) +
                               " exceeds the file size 1000 (truncated or not a safetensors file)\n");
}

TEST(ConvertCli, PtToSafetensorsIsBitIdentical) {
  const fs::path out = inspect_convert_dir() / "tiny-f16.safetensors";
  const Result r = run_cli("convert " + kTestdata + "/tiny/model.pt " + out.string() + " --dtype f16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "258 tensors (258 float, 0 integer), f16 from pytorch checkpoint")) << r.out;
  const lingbot::io::TensorMap a = lingbot::io::SafetensorsReader::open(out.string()).read_all();
  const lingbot::io::TensorMap b = lingbot::io::SafetensorsReader::open(kTestdata + "/tiny/weights.safetensors").read_all();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b) {
    ASSERT_EQ(a.at(name).shape(), t.shape()) << name;
    ASSERT_EQ(std::memcmp(a.at(name).raw(), t.raw(), t.nbytes()), 0) << name;
  }
  // Keeping dtypes: the f32 .pt becomes an f32 safetensors file that inspect accepts.
  const fs::path f32 = inspect_convert_dir() / "tiny-f32.safetensors";
  ASSERT_EQ(run_cli("convert " + kTestdata + "/tiny/model.pt " + f32.string()).exit_code, 0);
  const auto c = lingbot::io::load_checkpoint(f32.string());
  EXPECT_EQ(c.tensors.at("aggregator.camera_token").dtype(), lingbot::DType::F32);
  EXPECT_EQ(run_cli("inspect " + f32.string()).exit_code, 0);
}

TEST(ConvertCli, KeepsIntegerTensorsAndViews) {
  const fs::path out = inspect_convert_dir() / "views.safetensors";
  const Result r = run_cli("convert " + kTestdata + "/torch/views.pt " + out.string() + " --dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto st = lingbot::io::SafetensorsReader::open(out.string());
  EXPECT_EQ(st.read_int("steps").values, (std::vector<int64_t>{7, -1, int64_t{1} << 40}));
  EXPECT_EQ(st.entry("steps").dtype, lingbot::io::StorageDType::I64);
  EXPECT_EQ(st.entry("mask").dtype, lingbot::io::StorageDType::Bool);
  const lingbot::Tensor at = st.read("a_t", lingbot::DType::F32);
  EXPECT_EQ(st.entry("a_t").dtype, lingbot::io::StorageDType::BF16);
  EXPECT_EQ(std::vector<float>(at.f32(), at.f32() + 12), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

TEST(ConvertCli, Errors) {
  const Result dtype = run_cli("convert " + kTestdata + "/tiny/model.pt /tmp/x.safetensors --dtype f8");
  EXPECT_EQ(dtype.exit_code, 2);  // a usage error
  EXPECT_EQ(dtype.err, "error: --dtype: f8 not in {f32,f16,bf16}\nRun 'lingbot-map convert --help' for usage.\n");
  const Result corrupt = run_cli("convert " + kTestdata + "/torch/view_out_of_range.pt " + (inspect_convert_dir() / "x.safetensors").string());
  EXPECT_EQ(corrupt.exit_code, 1);
  EXPECT_TRUE(contains(corrupt.err, "corrupt pickle stream: tensor view (offset 2, size [2], stride [1])")) << corrupt.err;
  EXPECT_FALSE(fs::exists(inspect_convert_dir() / "x.safetensors"));
  const Result same = run_cli("convert " + kTestdata + "/tiny/model.pt " + kTestdata + "/tiny/model.pt");
  EXPECT_EQ(same.err, "error: convert: output path is the input path '" + kTestdata + "/tiny/model.pt'\n");
  // Safetensors under a PyTorch checkpoint's name (torch.load would fail on it): refused, nothing written.
  for (const std::string name : {"x.pt", "x.PTH", "x.bin", "x.ckpt"}) {
    const fs::path out = inspect_convert_dir() / name;
    const Result torch_name = run_cli("convert " + kTestdata + "/tiny/model.pt " + out.string());
    EXPECT_EQ(torch_name.exit_code, 1) << name;
    EXPECT_EQ(torch_name.err, "error: convert: the output is safetensors: '" + out.string() +
                                  "' names a PyTorch checkpoint (" + fs::path(name).extension().string() +
                                  "); name it .safetensors\n");
    EXPECT_FALSE(fs::exists(out)) << name;
  }
}

// The output path never replaces what is not a checkpoint file: a folder, a pipe (a device such as
// /dev/full alike) and the input under another name or as the output's temporary are refused before
// anything is read; a symbolic link is written through (the link stays).
TEST(ConvertCli, OutputPathsThatWouldDestroySomethingAreRefused) {
  const fs::path dir = fresh_dir("convert_outputs");
  const std::string in = kTestdata + "/tiny/model.pt";
  fs::create_directories(dir / "folder");
  ASSERT_EQ(::mkfifo((dir / "pipe").c_str(), 0600), 0);
  const Result folder = run_cli("convert " + in + " " + (dir / "folder").string());
  EXPECT_EQ(folder.exit_code, 1);
  EXPECT_EQ(folder.err, "error: cannot write " + (dir / "folder").string() + ": it is a directory\n");
  const Result pipe = run_cli("convert " + in + " " + (dir / "pipe").string());
  EXPECT_EQ(pipe.exit_code, 1);
  EXPECT_EQ(pipe.err, "error: cannot write " + (dir / "pipe").string() + ": it is not a regular file (a device, pipe or socket)\n");
  EXPECT_TRUE(fs::is_fifo(dir / "pipe"));

  fs::copy_file(kTestdata + "/tiny/weights.safetensors", dir / "x.safetensors");
  const std::string x = (dir / "x.safetensors").string(), dotted = (dir / "." / "x.safetensors").string();
  const Result same = run_cli("convert " + x + " " + dotted);
  EXPECT_EQ(same.err, "error: convert: output path '" + dotted + "' is the input file '" + x + "'\n");
  fs::copy_file(x, dir / "y.safetensors.tmp");
  const Result temp = run_cli("convert " + (dir / "y.safetensors.tmp").string() + " " + (dir / "y.safetensors").string());
  EXPECT_EQ(temp.err, "error: convert: the input '" + (dir / "y.safetensors.tmp").string() +
                          "' is the temporary file the output is written through: choose another output name\n");
  EXPECT_TRUE(fs::exists(dir / "y.safetensors.tmp"));

  fs::create_symlink("x.safetensors", dir / "link.safetensors");
  const Result link = run_cli("convert " + in + " " + (dir / "link.safetensors").string() + " --dtype f16");
  EXPECT_EQ(link.exit_code, 0) << link.err;
  EXPECT_TRUE(fs::is_symlink(dir / "link.safetensors"));
  EXPECT_NE(slurp(dir / "x.safetensors"), slurp(kTestdata + "/tiny/weights.safetensors"));  // written through
  EXPECT_FALSE(fs::exists(dir / "x.safetensors.tmp"));
}

}  // namespace
