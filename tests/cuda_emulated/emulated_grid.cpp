// The fiber scheduler behind emulated_grid.h, and the warp-wide PTX instructions of
// shim/kernels/cuda/ptx.cuh, implemented from the PTX ISA's definitions of their operand layouts.
// Built with LINGBOT_EMULATED_GRID: the shim's runtime header brings emulated_grid.h after the
// allocation registry that Schedule::Compare snapshots.
#include <cuda_runtime_api.h>

#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lingbot/dtype.h"
#include "tests/sanitizer_build.h"

#if LINGBOT_ASAN_BUILD
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define LINGBOT_EMU_ASAN 1
#endif

// The emulator's own bookkeeping of warp collectives: operands passed by value and the warp's slots,
// never memory a kernel owns, so not instrumented in sanitizer builds (it ran once per lane per
// shuffle and dominated the emulated tests' time there).
#if LINGBOT_ASAN_BUILD && defined(__clang__)
#define LINGBOT_EMU_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))
#elif LINGBOT_ASAN_BUILD
#define LINGBOT_EMU_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined"), optimize("O2")))
#else
#define LINGBOT_EMU_UNINSTRUMENTED
#endif

namespace lingbot::emu {
namespace {

// Kernels keep their arrays in registers on a device; here they live on the fiber's stack (the SIMT
// attention kernel holds two head_dim-sized float arrays per thread). Small stacks keep a block's
// fibers in few pages (a switch is then cheap); ASan's redzones need more.
#ifdef LINGBOT_EMU_ASAN
constexpr size_t kStackBytes = 256 * 1024;
constexpr ptrdiff_t kExitMarginBytes = 16 * 1024;
#else
constexpr size_t kStackBytes = 64 * 1024;
#endif
constexpr int kWarp = 32;

enum class State { Runnable, AtBlockBarrier, AtWarpCollective, Done };

struct Copy {
  void* dst;
  const void* src;
  size_t bytes;
};

namespace ctx = boost::context::detail;  // Boost.Context's stack switch (a few ns; swapcontext is a syscall)

struct Fiber {
  ctx::fcontext_t context = nullptr;
  char* stack = nullptr;
  State state = State::Done;
  ThreadCoords coords{};
  std::vector<Copy> open_group;
  std::deque<std::vector<Copy>> in_flight;  // committed groups, oldest first
  void* asan_fake = nullptr;
  char* exit_frame = nullptr;  // the trampoline's frame when the thread finished (ASan builds)
};

struct Warp {
  LaneSlot slots[kWarp];
  int arrived = 0;
  int returned = 0;  // lanes that returned from the kernel
  const char* what = nullptr;
  WarpOp op = nullptr;
};

struct Grid {
  LaunchConfig cfg;
  const char* name = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  ctx::fcontext_t scheduler = nullptr;
  Fiber* current = nullptr;
  bool one_pass = false;  // run_grid_one_pass: no fibers, no collectives
  int live = 0;
  int at_block = 0;
  dim3 block_idx;
  Schedule schedule = Schedule::Forward;
  std::vector<int> order;  // fiber indices in the order of a round
  std::vector<const void*> poisoned;  // __shared__ variables declared in this block so far
  std::mt19937 shuffle_rng;
  void* asan_fake = nullptr;
  const void* sched_stack = nullptr;
  size_t sched_stack_size = 0;
};

thread_local Grid* g_grid = nullptr;
std::atomic<bool> g_grid_running{false};  // __shared__ variables are one per process
thread_local int g_schedule_scope = -1;  // the innermost ScheduleScope's Schedule, -1 = none
thread_local std::unique_ptr<char[]> g_stacks;  // kMaxThreads stacks, reused across launches
constexpr int kMaxThreads = 1024;

[[noreturn]] void fail(const std::string& msg) {
  const Grid* g = g_grid;
  if (g) {
    std::fprintf(stderr, "emulated CUDA: %s (kernel %s, block (%u,%u,%u)", msg.c_str(), g->name, g->block_idx.x,
                 g->block_idx.y, g->block_idx.z);
    if (g->current)
      std::fprintf(stderr, ", thread (%u,%u,%u)", g->current->coords.thread_idx.x, g->current->coords.thread_idx.y,
                   g->current->coords.thread_idx.z);
    std::fprintf(stderr, ")\n");
  } else {
    std::fprintf(stderr, "emulated CUDA: %s\n", msg.c_str());
  }
  std::abort();
}

Grid& grid_for(const char* what) {
  if (!g_grid || !g_grid->current) fail(std::string(what) + " outside a kernel");
  if (g_grid->one_pass)
    fail(std::string(what) + " in a kernel launched as one pass (no barriers): launch it as a grid of fibers");
  return *g_grid;
}

int index_of(const Grid& g, const Fiber& f) { return static_cast<int>(&f - g.fibers.data()); }

void to_fiber(Grid& g, Fiber& f) {
  g.current = &f;
#ifdef LINGBOT_EMU_ASAN
  __sanitizer_start_switch_fiber(&g.asan_fake, f.stack, kStackBytes);
#endif
  f.context = ctx::jump_fcontext(f.context, nullptr).fctx;
#ifdef LINGBOT_EMU_ASAN
  __sanitizer_finish_switch_fiber(g.asan_fake, nullptr, nullptr);
#endif
  g.current = nullptr;
}

void to_scheduler(Grid& g, Fiber& f, bool exiting) {
#ifdef LINGBOT_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.asan_fake, g.sched_stack, g.sched_stack_size);
#else
  (void)f;
  (void)exiting;
#endif
  g.scheduler = ctx::jump_fcontext(g.scheduler, nullptr).fctx;
#ifdef LINGBOT_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake, &g.sched_stack, &g.sched_stack_size);
#endif
}

void run_copies(std::vector<Copy>& group) {
  for (const Copy& c : group) std::memcpy(c.dst, c.src, c.bytes);
  group.clear();
}

void trampoline(ctx::transfer_t from) {
  Grid& g = *g_grid;
  Fiber& f = *g.current;
  g.scheduler = from.fctx;
#ifdef LINGBOT_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g.sched_stack, &g.sched_stack_size);
#endif
  (*g.body)();
  // Copies still in flight land when the thread exits (their data is never read).
  for (auto& group : f.in_flight) run_copies(group);
  f.in_flight.clear();
  run_copies(f.open_group);
  f.state = State::Done;
  f.exit_frame = static_cast<char*>(__builtin_frame_address(0));
  to_scheduler(g, f, true);
  fail("a finished thread was resumed");
}

void release_block(Grid& g) {
  for (Fiber& f : g.fibers)
    if (f.state == State::AtBlockBarrier) f.state = State::Runnable;
  g.at_block = 0;
}

std::string states(const Grid& g) {
  int block = 0, warp = 0, done = 0;  // called when no fiber is runnable
  for (const Fiber& f : g.fibers) {
    block += f.state == State::AtBlockBarrier;
    warp += f.state == State::AtWarpCollective;
    done += f.state == State::Done;
  }
  return std::to_string(block) + " threads at __syncthreads, " + std::to_string(warp) +
         " at a warp collective, " + std::to_string(done) + " returned";
}

void run_block(Grid& g) {
  const dim3 bd = g.cfg.block;
  const int n = static_cast<int>(g.fibers.size());
  for (int i = 0; i < n; ++i) {
    Fiber& f = g.fibers[i];
    f.state = State::Runnable;
    f.coords = {dim3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)), g.block_idx, bd, g.cfg.grid};
    f.open_group.clear();
    f.in_flight.clear();
    f.context = ctx::make_fcontext(f.stack + kStackBytes, kStackBytes, trampoline);
  }
  for (Warp& w : g.warps) w.arrived = w.returned = 0;
  g.poisoned.clear();
  g.live = n;
  g.at_block = 0;
  g.order.resize(n);
  std::iota(g.order.begin(), g.order.end(), 0);
  if (g.schedule == Schedule::Reverse) std::reverse(g.order.begin(), g.order.end());
  g.shuffle_rng.seed(0x9e3779b9u ^ (g.block_idx.x + 7919u * (g.block_idx.y + 7919u * g.block_idx.z)));
  while (g.live > 0) {
    bool ran = false;
    if (g.schedule == Schedule::Shuffled) std::shuffle(g.order.begin(), g.order.end(), g.shuffle_rng);
    for (const int i : g.order) {
      Fiber& f = g.fibers[i];
      if (f.state != State::Runnable) continue;
      ran = true;
      to_fiber(g, f);
      if (f.state == State::Done) {
        --g.live;
        Warp& w = g.warps[index_of(g, f) / kWarp];
        ++w.returned;
        if (w.arrived > 0) {
          g.current = &f;
          fail(std::string("a lane returned while its warp waits at ") + w.what);
        }
        if (g.at_block > 0 && g.at_block == g.live) release_block(g);
      }
      if (g.schedule == Schedule::Greedy) break;  // back to the first runnable thread
    }
    if (!ran && g.live > 0) fail("deadlock: " + states(g));
  }
#ifdef LINGBOT_EMU_ASAN
  // A finished fiber never returns from trampoline(): the poisoning of the frames live at its last
  // switch (trampoline's and the few below it) stays behind on a stack the next block and the next
  // launch reuse. Every other frame returned and was unpoisoned, so the top of the stack down to a
  // margin under trampoline's frame is enough (the frames below it, to_scheduler's and the switch's,
  // are far smaller than the margin); unpoisoning whole stacks made the shadow memsets dominate.
  for (Fiber& f : g.fibers) {
    char* const top = f.stack + kStackBytes;
    char* const low = std::max(f.stack, f.exit_frame - kExitMarginBytes);
    ASAN_UNPOISON_MEMORY_REGION(low, static_cast<size_t>(top - low));
  }
#endif
}

void check_full_mask(unsigned mask, const char* what) {
  if (mask != 0xffffffffu) fail(std::string(what) + " with a partial lane mask (not emulated)");
}

LINGBOT_EMU_UNINSTRUMENTED void shfl_op(LaneSlot (&lanes)[kWarp]) {
  for (int l = 0; l < kWarp; ++l) {
    if (lanes[l].in[2] != lanes[0].in[2]) fail("__shfl_xor_sync lanes disagree on the lane mask");
    const LaneSlot& src = lanes[l ^ (lanes[l].in[2] & 31)];
    lanes[l].out[0] = src.in[0];
    lanes[l].out[1] = src.in[1];
  }
}

inline float half_value(uint32_t word, int which, DType t) {
  const uint16_t h = static_cast<uint16_t>(which ? word >> 16 : word & 0xffffu);
  return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

// mma.m16n8k16.row.col with f32 accumulators. Lane l, g = l / 4, t = l % 4 (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type"): a_i is A[g + 8·((i / 2) % 2)][2t + (i % 2) +
// 8·(i / 4)], b_i is B[2t + (i % 2) + 8·(i / 2)][g], c_i is C[g + 8·(i / 2)][2t + (i % 2)]; two 16-bit
// values per register, a_0 / b_0 in the low half. Products are exact and summed in double here; the
// device sums in f32 (an order of f32 rounding, inside every test's tolerance).
// Register arithmetic only (no memory the kernel owns), so not instrumented: under ASan it would
// dominate the emulated tests' time.
template <DType T>
LINGBOT_EMU_UNINSTRUMENTED void mma_op(LaneSlot (&lanes)[kWarp]) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < kWarp; ++l) {
    const int g = l / 4, t = l % 4;
    const uint32_t* in = lanes[l].in;
    for (int i = 0; i < 8; ++i) A[g + 8 * ((i / 2) % 2)][2 * t + (i % 2) + 8 * (i / 4)] = half_value(in[i / 2], i % 2, T);
    for (int i = 0; i < 4; ++i) B[2 * t + (i % 2) + 8 * (i / 2)][g] = half_value(in[4 + i / 2], i % 2, T);
    for (int i = 0; i < 4; ++i) std::memcpy(&C[g + 8 * (i / 2)][2 * t + (i % 2)], &in[6 + i], 4);
  }
  for (int l = 0; l < kWarp; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i / 2), c = 2 * t + (i % 2);
      double acc = C[r][c];
      for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[r][k]) * B[k][c];
      const float d = static_cast<float>(acc);
      std::memcpy(&lanes[l].out[i], &d, 4);
    }
  }
}

const uint16_t* row_address(const LaneSlot& lane) {
  if (reinterpret_cast<uintptr_t>(lane.addr) % 16 != 0) fail("ldmatrix row address not 16-byte aligned");
  return static_cast<const uint16_t*>(lane.addr);
}

// ldmatrix.m8n8.x4.b16: lane 8i + r gives row r of matrix i. Register i of lane l holds elements
// (l / 4, 2·(l % 4)) and (l / 4, 2·(l % 4) + 1) of matrix i, or of its transpose with .trans.
template <bool Trans>
void ldmatrix_op(LaneSlot (&lanes)[kWarp]) {
  for (int l = 0; l < kWarp; ++l) {
    for (int i = 0; i < 4; ++i) {
      uint16_t lo, hi;
      if (Trans) {
        lo = row_address(lanes[8 * i + 2 * (l % 4)])[l / 4];
        hi = row_address(lanes[8 * i + 2 * (l % 4) + 1])[l / 4];
      } else {
        const uint16_t* row = row_address(lanes[8 * i + l / 4]);
        lo = row[2 * (l % 4)];
        hi = row[2 * (l % 4) + 1];
      }
      lanes[l].out[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
}

// Device memory (every cudaMalloc / pool allocation of the shim) as it stands: Compare's snapshots.
struct DeviceBytes {
  std::vector<std::pair<char*, std::vector<char>>> blocks;
};
DeviceBytes snapshot_device() {
  EmulatedAllocations& a = emulated_allocations();
  std::lock_guard<std::mutex> lock(a.m);
  DeviceBytes d;
  for (const auto& [base, info] : a.blocks)
    if (info.second == cudaMemoryTypeDevice)
      d.blocks.emplace_back(const_cast<char*>(base), std::vector<char>(base, base + info.first));
  return d;
}
void restore_device(const DeviceBytes& d) {
  for (const auto& [base, bytes] : d.blocks) std::memcpy(base, bytes.data(), bytes.size());
}

void run_blocks(Grid& g, Schedule order) {
  g.schedule = order;
  for (unsigned z = 0; z < g.cfg.grid.z; ++z)
    for (unsigned y = 0; y < g.cfg.grid.y; ++y)
      for (unsigned x = 0; x < g.cfg.grid.x; ++x) {
        g.block_idx = dim3(x, y, z);
        run_block(g);
      }
}

// Aborts unless device memory is as `want` (Compare: the run under `order` against the forward run).
void expect_same_device_bytes(const DeviceBytes& want_all, const char* kernel_name, Schedule order) {
  const DeviceBytes got = snapshot_device();
  for (size_t b = 0; b < want_all.blocks.size(); ++b) {
    const std::vector<char>& want = want_all.blocks[b].second;
    const std::vector<char>& have = got.blocks[b].second;
    const auto diff = std::mismatch(want.begin(), want.end(), have.begin());
    if (diff.first == want.end()) continue;
    g_grid = nullptr;
    fail(std::string("kernel ") + kernel_name + ": a race: device memory differs between the forward and " +
         schedule_name(order) + " thread orders (allocation of " + std::to_string(want.size()) +
         " bytes, first at byte " + std::to_string(diff.first - want.begin()) + ")");
  }
}

Schedule schedule_in_effect() {
  if (g_schedule_scope >= 0) return static_cast<Schedule>(g_schedule_scope);
  const char* env = std::getenv("LINGBOT_EMU_SCHEDULE");
  if (!env || !*env) return Schedule::Forward;
  for (Schedule s : {Schedule::Forward, Schedule::Reverse, Schedule::Shuffled, Schedule::Greedy, Schedule::Compare})
    if (std::strcmp(env, schedule_name(s)) == 0) return s;
  fail(std::string("LINGBOT_EMU_SCHEDULE must be forward, reverse, shuffled, greedy or compare, got '") + env + "'");
}

}  // namespace

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::Forward: return "forward";
    case Schedule::Reverse: return "reverse";
    case Schedule::Shuffled: return "shuffled";
    case Schedule::Greedy: return "greedy";
    case Schedule::Compare: return "compare";
  }
  return "?";
}

ScheduleScope::ScheduleScope(Schedule s) : previous_(g_schedule_scope) { g_schedule_scope = static_cast<int>(s); }
ScheduleScope::~ScheduleScope() { g_schedule_scope = previous_; }

const ThreadCoords& coords() {
  if (!g_grid || !g_grid->current) fail("threadIdx / blockIdx outside a kernel");
  return g_grid->current->coords;
}

void run_grid(const LaunchConfig& cfg, const char* kernel_name, const std::function<void()>& body) {
  if (g_grid) fail(std::string("kernel ") + kernel_name + " launched from inside a kernel");
  check_launch(cfg, kernel_name);
  if (g_grid_running.exchange(true))
    fail(std::string("kernel ") + kernel_name +
         " launched while another host thread runs a kernel (the emulation's __shared__ memory is one per process)");
  const long threads = static_cast<long>(cfg.block.x) * cfg.block.y * cfg.block.z;
  const Schedule schedule = schedule_in_effect();
  Grid g;
  g.cfg = cfg;
  g.name = kernel_name;
  g.body = &body;
  g.fibers.resize(threads);
  g.warps.resize((threads + kWarp - 1) / kWarp);
  if (!g_stacks) g_stacks.reset(new char[kMaxThreads * kStackBytes]);  // untouched pages cost nothing
  for (long i = 0; i < threads; ++i) g.fibers[i].stack = g_stacks.get() + i * kStackBytes;
  g_grid = &g;
  if (schedule != Schedule::Compare) {
    run_blocks(g, schedule);
  } else {
    const DeviceBytes before = snapshot_device();
    run_blocks(g, Schedule::Forward);
    const DeviceBytes forward = snapshot_device();
    for (Schedule other : {Schedule::Reverse, Schedule::Shuffled, Schedule::Greedy}) {
      restore_device(before);
      run_blocks(g, other);
      expect_same_device_bytes(forward, kernel_name, other);
    }
  }
  g_grid = nullptr;
  g_grid_running = false;
}

namespace {

void run_one_pass(Grid& g, bool reverse) {
  const LaunchConfig& c = g.cfg;
  const uint64_t per_block = static_cast<uint64_t>(c.block.x) * c.block.y * c.block.z;
  const uint64_t total = per_block * c.grid.x * c.grid.y * c.grid.z;
  Fiber thread;  // only its coordinates are used
  g.current = &thread;
  for (uint64_t k = 0; k < total; ++k) {
    const uint64_t t = reverse ? total - 1 - k : k;
    const uint64_t b = t / per_block, i = t % per_block;
    const dim3 bi(static_cast<unsigned>(b % c.grid.x), static_cast<unsigned>(b / c.grid.x % c.grid.y),
                  static_cast<unsigned>(b / (static_cast<uint64_t>(c.grid.x) * c.grid.y)));
    const dim3 ti(static_cast<unsigned>(i % c.block.x), static_cast<unsigned>(i / c.block.x % c.block.y),
                  static_cast<unsigned>(i / (static_cast<uint64_t>(c.block.x) * c.block.y)));
    thread.coords = {ti, bi, c.block, c.grid};
    g.block_idx = bi;
    (*g.body)();
  }
  g.current = nullptr;
}

}  // namespace

void run_grid_one_pass(const LaunchConfig& cfg, const char* kernel_name, const std::function<void()>& body) {
  if (g_grid) fail(std::string("kernel ") + kernel_name + " launched from inside a kernel");
  check_launch(cfg, kernel_name);
  Grid g;
  g.cfg = cfg;
  g.name = kernel_name;
  g.body = &body;
  g.one_pass = true;
  g_grid = &g;
  if (schedule_in_effect() != Schedule::Compare) {
    run_one_pass(g, false);
  } else {
    const DeviceBytes before = snapshot_device();
    run_one_pass(g, false);
    const DeviceBytes forward = snapshot_device();
    restore_device(before);
    run_one_pass(g, true);
    expect_same_device_bytes(forward, kernel_name, Schedule::Reverse);
  }
  g_grid = nullptr;
}

void declare_shared(void* variable, size_t bytes) {
  Grid& g = grid_for("a __shared__ declaration");
  if (std::find(g.poisoned.begin(), g.poisoned.end(), variable) != g.poisoned.end()) return;
  std::memset(variable, 0xff, bytes);
  g.poisoned.push_back(variable);
}

void sync_block() {
  Grid& g = grid_for("__syncthreads");
  Fiber& f = *g.current;
  if (++g.at_block == g.live) {
    release_block(g);
    return;
  }
  f.state = State::AtBlockBarrier;
  to_scheduler(g, f, false);
}

LINGBOT_EMU_UNINSTRUMENTED LaneSlot warp_collective(const char* what, WarpOp op, const LaneSlot& mine) {
  Grid& g = grid_for(what);
  Fiber& f = *g.current;
  const int tid = index_of(g, f);
  const int first = tid / kWarp * kWarp, lane = tid % kWarp;
  if (first + kWarp > static_cast<int>(g.fibers.size())) fail(std::string(what) + " in a partial warp");
  Warp& w = g.warps[tid / kWarp];
  if (w.returned > 0) fail(std::string(what) + " while a lane of the warp has returned");
  if (w.arrived == 0) {
    w.what = what;
    w.op = op;
  } else if (w.op != op) {
    fail(std::string("lanes of one warp at different collectives: ") + w.what + " and " + what);
  }
  w.slots[lane] = mine;
  if (++w.arrived == kWarp) {
    w.op(w.slots);
    w.arrived = 0;
    for (int l = first; l < first + kWarp; ++l)
      if (g.fibers[l].state == State::AtWarpCollective) g.fibers[l].state = State::Runnable;
    return w.slots[lane];
  }
  f.state = State::AtWarpCollective;
  to_scheduler(g, f, false);
  return w.slots[lane];
}

void async_copy(void* dst, const void* src, size_t bytes) {
  Grid& g = grid_for("cp.async");
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % bytes != 0)
    fail("cp.async addresses not aligned to the copy size");
  // Until the copy's group is waited for, the destination holds 0xff bytes (NaN as f16 / bf16 / f32),
  // so a kernel that reads it too early computes NaN.
  std::memset(dst, 0xff, bytes);
  g.current->open_group.push_back({dst, src, bytes});
}

void async_commit() {
  Fiber& f = *grid_for("cp.async.commit_group").current;
  f.in_flight.push_back(std::move(f.open_group));
  f.open_group.clear();
}

void async_wait(int keep_groups) {
  Fiber& f = *grid_for("cp.async.wait_group").current;
  while (static_cast<int>(f.in_flight.size()) > keep_groups) {
    run_copies(f.in_flight.front());
    f.in_flight.pop_front();
  }
}

template <typename T>
LINGBOT_EMU_UNINSTRUMENTED T shfl_xor(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  check_full_mask(mask, "__shfl_xor_sync");
  LaneSlot s{};
  std::memcpy(s.in, &v, sizeof(T));
  s.in[2] = static_cast<uint32_t>(lane_mask);
  const LaneSlot r = warp_collective("__shfl_xor_sync", shfl_op, s);
  T out;
  std::memcpy(&out, r.out, sizeof(T));
  return out;
}
template float shfl_xor(unsigned, float, int);
template double shfl_xor(unsigned, double, int);
template int shfl_xor(unsigned, int, int);
template unsigned shfl_xor(unsigned, unsigned, int);

// The operands are the calling lane's registers, passed as fixed-size arrays: nothing to check.
LINGBOT_EMU_UNINSTRUMENTED void mma_m16n8k16(DType t, float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  LaneSlot s{};
  for (int i = 0; i < 4; ++i) s.in[i] = a[i];
  s.in[4] = b0;
  s.in[5] = b1;
  std::memcpy(&s.in[6], c, sizeof(c));
  const LaneSlot r = t == DType::F16 ? warp_collective("mma.m16n8k16.f16", mma_op<DType::F16>, s)
                                     : warp_collective("mma.m16n8k16.bf16", mma_op<DType::BF16>, s);
  std::memcpy(c, r.out, sizeof(c));
}

// The rows are read (and checked) in ldmatrix_op.
LINGBOT_EMU_UNINSTRUMENTED void ldmatrix_x4(bool trans, uint32_t (&r)[4], const uint16_t* smem) {
  LaneSlot s{};
  s.addr = smem;
  const LaneSlot o = trans ? warp_collective("ldmatrix.x4.trans", ldmatrix_op<true>, s)
                           : warp_collective("ldmatrix.x4", ldmatrix_op<false>, s);
  for (int i = 0; i < 4; ++i) r[i] = o.out[i];
}

}  // namespace lingbot::emu
