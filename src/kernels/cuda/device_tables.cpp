// The device tables of attention_cuda.h (DevicePageTable, DeviceSpanTable): host-side validation and
// staging, copied to the device on the caller's stream. Host code only.
#include <algorithm>
#include <cstring>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cuda_check.h"

namespace lingbot::cuda {

DevicePageTable::DevicePageTable(Allocator& device_allocator) : alloc_(&device_allocator) {
  LINGBOT_CHECK(device_allocator.kind() == MemoryKind::Device,
                "DevicePageTable: the allocator must allocate device memory");
}

void DevicePageTable::upload(const kernels::PageTableView& t, int num_pages, int page_size, cudaStream_t stream,
                             PinnedStaging* staging) {
  const int n = t.num_entries;
  const int64_t keys = kernels::check_page_table("paged_attention", t, num_pages, page_size);
  if (n > capacity_) {
    const int cap = std::max(n, 2 * capacity_);
    device_ = Buffer(*alloc_, static_cast<size_t>(cap) * 3 * sizeof(int32_t));
    staging_.assign(static_cast<size_t>(cap) * 3, 0);
    capacity_ = cap;
  }
  if (n > 0 && staging) {  // the n entries of each array, straight from the caller's table
    int32_t* d = static_cast<int32_t*>(device_.data());
    const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
    staging->copy_to_device(d, t.page_ids, bytes, stream);
    staging->copy_to_device(d + capacity_, t.start, bytes, stream);
    staging->copy_to_device(d + 2 * capacity_, t.len, bytes, stream);
  } else if (n > 0) {
    int32_t* s = staging_.data();
    std::memcpy(s, t.page_ids, n * sizeof(int32_t));
    std::memcpy(s + capacity_, t.start, n * sizeof(int32_t));
    std::memcpy(s + 2 * capacity_, t.len, n * sizeof(int32_t));
    // Pageable source: CUDA first waits for the stream's earlier work, then returns once the data
    // has left staging_ (pinned_staging.h), so staging_ may be reused at once.
    LINGBOT_CUDA_CHECK(cudaMemcpyAsync(device_.data(), s, staging_.size() * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream));
  }
  num_entries_ = n;
  num_keys_ = keys;
  num_pages_ = num_pages;
  page_size_ = page_size;
}

kernels::PageTableView DevicePageTable::view() const {
  kernels::PageTableView v;
  const auto* base = static_cast<const int32_t*>(device_.data());
  v.num_entries = num_entries_;
  if (base) {
    v.page_ids = base;
    v.start = base + capacity_;
    v.len = base + 2 * capacity_;
  }
  return v;
}

DeviceSpanTable::DeviceSpanTable(Allocator& device_allocator) : alloc_(&device_allocator) {
  LINGBOT_CHECK(device_allocator.kind() == MemoryKind::Device,
                "DeviceSpanTable: the allocator must allocate device memory");
}

void DeviceSpanTable::upload(std::span<const kernels::KVSpan> spans, DType dtype, int64_t row, cudaStream_t stream,
                             PinnedStaging* staging) {
  LINGBOT_CHECK(row > 0, "DeviceSpanTable: row must be > 0, got ", row);
  const int n = static_cast<int>(spans.size());
  for (int i = 0; i < n; ++i) {
    const kernels::KVSpan& s = spans[i];
    LINGBOT_CHECK(s.n_tokens >= 0, "DeviceSpanTable: span ", i, ": negative n_tokens ", s.n_tokens);
    LINGBOT_CHECK(s.dtype == dtype, "DeviceSpanTable: span ", i, ": dtype ", dtype_name(s.dtype), " != ",
                  dtype_name(dtype));
    if (s.n_tokens == 0) continue;
    LINGBOT_CHECK(s.k != nullptr && s.v != nullptr, "DeviceSpanTable: span ", i,
                  ": k/v data is null with n_tokens = ", s.n_tokens);
    LINGBOT_CHECK(s.token_stride >= row, "DeviceSpanTable: span ", i, ": token_stride ", s.token_stride,
                  " is smaller than heads*head_dim = ", row);
  }
  if (n > capacity_) {
    const int cap = std::max(n, 2 * capacity_);
    device_ = Buffer(*alloc_, static_cast<size_t>(cap) * sizeof(DeviceSpan));
    staging_.resize(cap);
    capacity_ = cap;
  }
  keys_before_.assign(1, 0);
  for (int i = 0; i < n; ++i) {
    const kernels::KVSpan& s = spans[i];
    staging_[i] = DeviceSpan{s.k, s.v, s.token_stride, s.n_tokens, 0};
    keys_before_.push_back(keys_before_.back() + s.n_tokens);
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(DeviceSpan);
  if (n > 0 && staging) staging->copy_to_device(device_.data(), staging_.data(), bytes, stream);
  else if (n > 0) LINGBOT_CUDA_CHECK(cudaMemcpyAsync(device_.data(), staging_.data(), bytes, cudaMemcpyHostToDevice, stream));
  dtype_ = dtype;
  row_ = row;
}

int64_t DeviceSpanTable::num_keys(int first, int count) const {
  LINGBOT_CHECK(first >= 0 && count >= 0 && first + count <= size(), "DeviceSpanTable: range [", first, ", ",
                first + count, ") out of [0, ", size(), ")");
  return keys_before_[first + count] - keys_before_[first];
}

}  // namespace lingbot::cuda

namespace lingbot::cuda {

int choose_kv_splits(int64_t blocks, int64_t wave_blocks, int64_t n_keys) {
  if (blocks <= 0 || n_keys <= 0) return 1;
  int64_t splits = wave_blocks / blocks;                        // ranges that still fit in one wave
  splits = std::min(splits, n_keys / kMinKeysPerSplit);         // each keeps at least kMinKeysPerSplit keys
  return static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxKvSplits));
}

AttentionWorkspace::AttentionWorkspace(Allocator& device_allocator) : alloc_(&device_allocator) {
  LINGBOT_CHECK(device_allocator.kind() == MemoryKind::Device,
                "AttentionWorkspace: the allocator must allocate device memory");
}

float* AttentionWorkspace::reserve(int64_t floats) {
  LINGBOT_CHECK(floats >= 0, "AttentionWorkspace: negative size ", floats);
  if (floats > capacity_) {
    device_.reset();  // before allocating the new one: the peak holds one workspace, not two
    capacity_ = 0;    // should the allocation throw, a later smaller call allocates again (no null workspace)
    device_ = Buffer(*alloc_, static_cast<size_t>(floats) * sizeof(float));
    capacity_ = floats;
  }
  return static_cast<float*>(device_.data());
}

}  // namespace lingbot::cuda
