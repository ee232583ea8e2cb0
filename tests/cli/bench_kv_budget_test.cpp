// `bench kv`'s shared memory budget (KvBenchOptions::mem_budget_gb, what --mem-cap-gb auto sets): the
// backends together stay within it; the one whose allocation would pass it stops and frees its memory,
// so the others run to the end. Before, auto gave each backend an equal share, which on a 16-24 GiB
// machine was smaller than the paged pool: paged stopped at frame 1 and the default run measured nothing.
#include <gtest/gtest.h>

#include <map>

#include "bench_kv.h"

namespace bench_kv_budget_test {  // named: a unity build merges this folder's files into one unit

using namespace lingbot;

TEST(BenchKvBudget, TheGrowingBackendStopsAndTheOthersRunToTheEnd) {
  bench::KvBenchOptions o;
  o.resolution = 224;
  o.blocks = 1;
  o.window = 4;
  o.scale_frames = 2;
  o.frames = 40;
  o.attention = false;
  o.calibrate = false;
  o.threads = 1;
  o.mem_cap_gb = 0;  // no cap of their own: only the budget
  // 262 tokens x 2 (K, V) x 16 heads x 64 x bf16 = 1.07 MB a frame: paged and dense hold about the 6
  // frames of scale + window (paged in its reserved pool, dense in doubling buffers), dense-full every
  // frame, 40 MB at the end.
  const size_t frame_bytes = 262 * 2 * 16 * 64 * 2;
  o.mem_budget_gb = 24.0 * frame_bytes / 1073741824.0;
  const bench::KvBenchResult r = bench::run_kv_bench(o);

  ASSERT_EQ(r.stops.size(), 1u);
  const bench::BackendStop& s = r.stops[0];
  EXPECT_EQ(o.backends[static_cast<size_t>(s.backend)], KVBackend::DenseFull);
  EXPECT_TRUE(s.budget);
  EXPECT_GT(s.frame, 1);  // it ran until the budget was reached
  EXPECT_LT(s.frame, o.frames);
  // Every step: the backends' reserved bytes together within the budget; paged and dense to the last frame.
  std::map<int, size_t> reserved;  // frame -> bytes of all backends after its step
  std::map<KVBackend, int> last;
  for (const bench::FrameRow& row : r.rows) {
    reserved[row.frame] += static_cast<size_t>(row.stats.bytes_reserved);
    last[o.backends[static_cast<size_t>(row.backend)]] = row.frame;
  }
  const size_t budget = static_cast<size_t>(o.mem_budget_gb * 1073741824.0);
  for (const auto& [frame, bytes] : reserved) EXPECT_LE(bytes, budget) << "frame " << frame;
  EXPECT_EQ(last[KVBackend::Paged], o.frames);
  EXPECT_EQ(last[KVBackend::Dense], o.frames);
  EXPECT_EQ(last[KVBackend::DenseFull], s.frame - 1);
}

}  // namespace bench_kv_budget_test
