#include "io/live_source.h"

extern "C" {
#include <libavdevice/avdevice.h>
#include <libavdevice/version.h>
}
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/error.h"

namespace lingbot::io {
namespace {

// FFmpeg's device inputs (V4L2 cameras) come from libavdevice, loaded here on first use rather than
// linked: linked, it and the libraries it needs make every process start about 0.1 s slower, camera
// or not. Loaded once per process and never unloaded (FFmpeg keeps pointers to the formats it
// registers); a function-local static makes the load thread-safe.
void register_device_inputs() {
  static const std::string failure = [] {
    const std::string lib = "libavdevice.so." + std::to_string(LIBAVDEVICE_VERSION_MAJOR);
    void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return "camera input needs FFmpeg's device library " + lib + " (Debian package libavdevice" +
             std::to_string(LIBAVDEVICE_VERSION_MAJOR) + "): " + (why ? why : "dlopen failed");
    }
    auto* register_all = reinterpret_cast<decltype(&avdevice_register_all)>(dlsym(handle, "avdevice_register_all"));
    if (register_all == nullptr) return lib + " has no avdevice_register_all";
    register_all();
    return std::string();
  }();
  LINGBOT_CHECK(failure.empty(), failure);
}

}  // namespace

struct LiveFrameSource::Impl {
  FrameSelection sel;
  std::function<bool()> user_interrupt;
  std::atomic<bool> stopping{false};
  std::optional<VideoReader> reader;

  mutable std::mutex mutex;
  std::condition_variable cv;
  std::optional<VideoFrame> slot;  // the newest decoded frame not taken yet
  bool ended = false;
  std::exception_ptr error;
  LiveStats stats;
  int64_t produced = 0;
  std::thread thread;
  StreamDamage damage;  // the reader's, copied when the decoder thread ends (read under `mutex`)

  bool interrupted() const { return stopping.load() || (user_interrupt && user_interrupt()); }

  void decode_loop() {
    int64_t sampled = 0;
    try {
      VideoFrame f;
      while (!interrupted()) {
        if (sel.first_k > 0 && sampled >= sel.first_k) break;
        if (!reader->next(&f)) break;
        if (sampled++ % sel.stride != 0) continue;
        std::lock_guard lock(mutex);
        ++stats.decoded;
        if (slot) ++stats.dropped;  // the engine has not taken the previous one: newest first
        slot = std::move(f);
        cv.notify_all();
      }
    } catch (...) {
      // A read aborted by a stop or Ctrl-C is the clean end it was asked for.
      if (!interrupted()) {
        std::lock_guard lock(mutex);
        error = std::current_exception();
      }
    }
    std::lock_guard lock(mutex);
    damage = reader->damage();
    ended = true;
    cv.notify_all();
  }
};

LiveFrameSource::LiveFrameSource(const std::string& source, const FrameSelection& sel, std::function<bool()> interrupt)
    : impl_(std::make_unique<Impl>()) {
  LINGBOT_CHECK(sel.stride >= 1, "stride must be >= 1, got ", sel.stride);
  LINGBOT_CHECK(sel.first_k >= 0, "first_k must be >= 0, got ", sel.first_k);
  Impl& s = *impl_;
  s.sel = sel;
  s.user_interrupt = std::move(interrupt);
  VideoOpenOptions open;
  open.low_latency = true;
  open.interrupt = [impl = impl_.get()] { return impl->interrupted(); };
  if (source.rfind("/dev/video", 0) == 0) {
    register_device_inputs();
    open.format = "video4linux2";
  }
  s.reader.emplace(source, sel.video_fps, open);
  s.thread = std::thread([impl = impl_.get()] { impl->decode_loop(); });
}

LiveFrameSource::~LiveFrameSource() {
  stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void LiveFrameSource::stop() {
  impl_->stopping = true;
  impl_->cv.notify_all();
}

bool LiveFrameSource::next(SourceFrame* out) {
  Impl& s = *impl_;
  std::unique_lock lock(s.mutex);
  // Wake up regularly to notice Ctrl-C while the source is silent.
  while (!s.slot && !s.ended && !s.interrupted()) s.cv.wait_for(lock, std::chrono::milliseconds(50));
  if (!s.slot) {
    if (s.error && !s.interrupted()) std::rethrow_exception(s.error);
    return false;
  }
  VideoFrame f = std::move(*s.slot);
  s.slot.reset();
  ++s.stats.delivered;
  lock.unlock();
  out->image = std::move(f.image);
  if (s.sel.rotate_clockwise_90) out->image = transpose(out->image, Transpose::Rotate270);
  out->name = "frame_" + std::to_string(f.source_index);
  out->timestamp = f.timestamp_s;
  out->timestamp_unit = TimestampUnit::Seconds;
  out->index = s.produced++;
  return true;
}

StreamDamage LiveFrameSource::finish_and_damage() {
  stop();
  std::unique_lock lock(impl_->mutex);
  impl_->cv.wait(lock, [&] { return impl_->ended; });  // the decoder thread's last act (its stop is polled)
  return impl_->damage;
}

LiveStats LiveFrameSource::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

const VideoInfo& LiveFrameSource::info() const { return impl_->reader->info(); }

FrameSource::VideoSampling LiveFrameSource::video_sampling() const {
  return {info().fps, impl_->reader->sample_interval()};  // both fixed when the source opened
}

ImageSize LiveFrameSource::canvas(const PreprocessOptions& opt) const {
  const VideoInfo& i = info();
  const ImageSize size = impl_->sel.rotate_clockwise_90 ? ImageSize{i.height, i.width} : ImageSize{i.width, i.height};
  return preprocessed_size(size, opt);
}

}  // namespace lingbot::io
