#include "io/torch_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <map>
#include <set>

#include "core/error.h"
#include "io/pickle.h"
#include "io/zip_archive.h"

namespace lingbot::io {

namespace {

using pickle::Kind;
using pickle::Object;

constexpr uint64_t kMaxPickleBytes = 256ull << 20;  // a full-size state dict pickle is ~200 KB
constexpr int kMaxDims = 64;
constexpr uint64_t kMaxExpansion = 4;  // loaded bytes / file bytes (f16 -> f32 doubles; shared views)

std::optional<StorageDType> storage_class_dtype(std::string_view cls) {
  static const std::map<std::string_view, StorageDType> m = {
      {"torch.FloatStorage", StorageDType::F32},   {"torch.DoubleStorage", StorageDType::F64},
      {"torch.HalfStorage", StorageDType::F16},    {"torch.BFloat16Storage", StorageDType::BF16},
      {"torch.LongStorage", StorageDType::I64},    {"torch.IntStorage", StorageDType::I32},
      {"torch.ShortStorage", StorageDType::I16},   {"torch.CharStorage", StorageDType::I8},
      {"torch.ByteStorage", StorageDType::U8},     {"torch.BoolStorage", StorageDType::Bool},
  };
  auto it = m.find(cls);
  return it == m.end() ? std::nullopt : std::optional<StorageDType>(it->second);
}

const Object* dict_get(const Object* d, std::string_view key) {
  if (!d || d->kind != Kind::Dict) return nullptr;
  for (size_t i = 0; i + 1 < d->items.size(); i += 2)
    if (d->items[i]->kind == Kind::Str && d->items[i]->s == key) return d->items[i + 1];
  return nullptr;
}

bool has_tensor_value(const Object* d) {
  if (!d || d->kind != Kind::Dict) return false;
  for (size_t i = 1; i < d->items.size(); i += 2)
    if (d->items[i]->kind == Kind::Tensor) return true;
  return false;
}

class Loader {
 public:
  Loader(std::unique_ptr<ByteSource> source) : src_(std::move(source)), zip_(check_format(*src_)) {}

  // Interprets data.pkl and locates the state dict; fills entries_ (name -> tensor object).
  void parse() {
    const std::string& file = src_->label();
    find_archive();
    const ZipDirectory::Entry* pkl = zip_.find(prefix_ + "data.pkl");
    LINGBOT_CHECK(pkl->size <= kMaxPickleBytes, file, ": data.pkl of ", pkl->size, " bytes exceeds the ", kMaxPickleBytes,
                  "-byte limit");
    pickle_bytes_.assign(pkl->size, '\0');
    src_->read_at(zip_.data_offset(*pkl), pickle_bytes_.data(), pickle_bytes_.size());
    LINGBOT_CHECK(crc32(pickle_bytes_.data(), pickle_bytes_.size()) == pkl->crc32, file, ": ", pkl->name,
                  " fails its CRC-32 check (corrupt)");
    if (const ZipDirectory::Entry* bo = zip_.find(prefix_ + "byteorder")) {
      LINGBOT_CHECK(bo->size <= 16, file, ": corrupt byteorder entry");
      std::string order(bo->size, '\0');
      src_->read_at(zip_.data_offset(*bo), order.data(), order.size());
      LINGBOT_CHECK(order == "little", file, ": checkpoint byte order is '", order, "', only little-endian is supported");
    }

    vm_ = std::make_unique<pickle::Unpickler>(
        pickle_bytes_, file + " (" + pkl->name + ")",
        [this](pickle::Unpickler& u, const Object& callable, Object* args) { return call(u, callable, args, 0); },
        [this](pickle::Unpickler& u, Object* pid) { return persistent(u, pid); });
    const Object* root = vm_->load();

    const Object* sd = nullptr;
    for (const char* key : {"model", "state_dict", "model_state_dict", "module"}) {
      if (has_tensor_value(dict_get(root, key))) {
        sd = dict_get(root, key);
        location_ = key;
        break;
      }
    }
    if (!sd && has_tensor_value(root)) sd = root;
    if (!sd) {
      std::string keys;
      if (root->kind == Kind::Dict)
        for (size_t i = 0; i < root->items.size() && i < 40; i += 2)
          keys += (keys.empty() ? "" : ", ") + (root->items[i]->kind == Kind::Str ? "'" + root->items[i]->s + "'" : std::string(kind_name(root->items[i]->kind)));
      throw Error(detail::concat(file, ": no state dict found (the checkpoint holds a ", kind_name(root->kind),
                                 keys.empty() ? "" : " with keys " + keys, "; expected tensors under 'model', 'state_dict' or at the top level)"));
    }

    bool all_module = sd->items.size() >= 2;
    for (size_t i = 0; i + 1 < sd->items.size(); i += 2) {
      const Object* k = sd->items[i];
      LINGBOT_CHECK(k->kind == Kind::Str, file, ": state dict key ", i / 2, " is a ", kind_name(k->kind), ", not a string");
      all_module = all_module && k->s.rfind("module.", 0) == 0;
    }
    stripped_ = all_module;
    std::set<std::string> seen;
    for (size_t i = 0; i + 1 < sd->items.size(); i += 2) {
      std::string name = sd->items[i]->s.substr(all_module ? 7 : 0);
      const Object* v = sd->items[i + 1];
      LINGBOT_CHECK(!name.empty(), file, ": state dict has an empty key");
      LINGBOT_CHECK(seen.insert(name).second, file, ": state dict key '", name, "' appears more than once");
      LINGBOT_CHECK(v->kind == Kind::Tensor, file, ": state dict entry '", name, "' is a ", kind_name(v->kind),
                    v->kind == Kind::Object ? " (" + v->s + ")" : std::string(), ", not a tensor");
      entries_.emplace_back(std::move(name), v);
    }
  }

  TorchCheckpoint load(std::optional<DType> as) {
    parse();
    TorchCheckpoint out;
    out.location = location_;
    out.stripped_module_prefix = stripped_;
    // Views of shared storages can declare more tensor bytes than the file holds; a crafted file could
    // multiply that without limit, so the total is bounded before anything is allocated.
    uint64_t total = 0;
    for (const auto& [name, v] : entries_) {
      const uint64_t n = static_cast<uint64_t>(checked_numel(v->shape, name));
      const uint64_t es = std::max<uint64_t>(storage_dtype_size(v->storage->dtype), as ? dtype_size(*as) : 0);
      total += n * es * (is_floating(v->storage->dtype) ? 1 : 8 / storage_dtype_size(v->storage->dtype));
      LINGBOT_CHECK(total <= kMaxExpansion * src_->size() + (1ull << 30), src_->label(), ": tensors declare more than ", total,
                    " bytes, over ", kMaxExpansion, "x the file size (", src_->size(), " bytes); refusing to load");
    }
    for (const auto& [name, v] : entries_) {
      const std::string what = detail::concat(src_->label(), ": tensor '", name, "'");
      if (is_floating(v->storage->dtype)) {
        out.tensors.emplace(name, read_tensor<Tensor>(*v, what, as));
      } else {
        out.int_tensors.emplace(name, read_tensor<IntTensor>(*v, what, as));
      }
    }
    return out;
  }

  TorchIndex index() {
    parse();
    TorchIndex out;
    out.location = location_;
    out.stripped_module_prefix = stripped_;
    for (const auto& [name, v] : entries_) out.tensors.emplace(name, TensorInfo{v->storage->dtype, v->shape});
    return out;
  }

 private:
  static const ByteSource& check_format(const ByteSource& s) {
    LINGBOT_CHECK(s.size() > 0, s.label(), ": file is empty");
    if (!looks_like_zip(s)) {
      uint8_t b[2] = {0, 0};
      s.read_at(0, b, std::min<uint64_t>(2, s.size()));
      LINGBOT_CHECK(b[0] != 0x80, s.label(),
                    ": legacy (pre-1.6, non-zip) PyTorch checkpoint format is not supported; re-save it with a current "
                    "torch.save or convert it to safetensors");
      throw Error(detail::concat(s.label(), ": not a PyTorch checkpoint (no zip signature) or safetensors file"));
    }
    return s;
  }

  void find_archive() {
    const std::string& file = src_->label();
    std::vector<std::string> pkls;
    for (const auto& e : zip_.entries()) {
      const size_t slash = e.name.find('/');
      if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) pkls.push_back(e.name);
    }
    LINGBOT_CHECK(!pkls.empty(), file, ": zip archive has no <archive>/data.pkl entry (not a torch.save checkpoint",
                  zip_.find("constants.pkl") ? "; TorchScript archives are not supported" : "", ")");
    LINGBOT_CHECK(pkls.size() == 1, file, ": zip archive has ", pkls.size(), " data.pkl entries (", pkls[0], ", ", pkls[1], ")");
    prefix_ = pkls[0].substr(0, pkls[0].size() - 8);
    for (const auto& e : zip_.entries())
      LINGBOT_CHECK(e.name.rfind(prefix_ + "code/", 0) != 0, file, ": TorchScript archives are not supported (found ", e.name, ")");
  }

  // BINPERSID: ('storage', <storage class>, key, location, numel).
  Object* persistent(pickle::Unpickler& u, Object* pid) {
    if (pid->kind != Kind::Tuple || pid->items.size() != 5 || pid->items[0]->kind != Kind::Str || pid->items[0]->s != "storage")
      u.fail("persistent id is not a ('storage', type, key, location, numel) tuple");
    const Object* cls = pid->items[1];
    const Object* key = pid->items[2];
    const Object* numel = pid->items[4];
    if (cls->kind != Kind::Global || key->kind != Kind::Str || numel->kind != Kind::Int || numel->i < 0)
      u.fail("malformed storage persistent id");
    const auto dtype = storage_class_dtype(cls->s);
    if (!dtype) u.fail("unsupported storage type '" + cls->s + "'");
    auto it = storages_.find(key->s);
    if (it != storages_.end()) {
      if (it->second->dtype != *dtype || it->second->i != numel->i) u.fail("storage '" + key->s + "' is declared twice differently");
      return it->second;
    }
    const ZipDirectory::Entry* e = zip_.find(prefix_ + "data/" + key->s);
    LINGBOT_CHECK(e != nullptr, src_->label(), ": storage '", key->s, "' referenced by the pickle has no ", prefix_, "data/",
                  key->s, " entry");
    const uint64_t esize = storage_dtype_size(*dtype);
    LINGBOT_CHECK(static_cast<uint64_t>(numel->i) <= e->size / esize, src_->label(), ": storage '", key->s, "' declares ",
                  numel->i, " elements of ", esize, " bytes but its entry holds ", e->size, " bytes");
    Object* s = u.make(Kind::Storage);
    s->s = key->s;
    s->dtype = *dtype;
    s->i = numel->i;
    storages_.emplace(key->s, s);
    return s;
  }

  static bool int_tuple(const Object* o, Shape& out) {
    if (o->kind != Kind::Tuple && o->kind != Kind::List) return false;
    if (o->items.size() > kMaxDims) return false;
    out.clear();
    for (const Object* x : o->items) {
      if (x->kind != Kind::Int) return false;
      out.push_back(x->i);
    }
    return true;
  }

  Object* call(pickle::Unpickler& u, const Object& callable, Object* args, int depth) {
    const std::string& f = callable.s;
    const auto& a = args->items;
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      if (a.size() < 4 || a[0]->kind != Kind::Storage || a[1]->kind != Kind::Int) u.fail(f + " called with malformed arguments");
      Object* t = u.make(Kind::Tensor);
      t->storage = a[0];
      t->offset = a[1]->i;
      if (!int_tuple(a[2], t->shape) || !int_tuple(a[3], t->stride) || t->shape.size() != t->stride.size())
        u.fail(f + " called with a malformed size/stride");
      check_view(u, *t);
      return t;
    }
    if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != Kind::Tensor) u.fail(f + " called without a tensor");
      return a[0];
    }
    if (f == "torch._utils._rebuild_from_type_v2") {  // (func, type, args, state)
      if (depth > 0 || a.size() < 3 || a[0]->kind != Kind::Global || a[2]->kind != Kind::Tuple)
        u.fail(f + " called with malformed arguments");
      return call(u, *a[0], a[2], depth + 1);
    }
    if (f == "collections.OrderedDict") {
      Object* d = u.make(Kind::Dict);
      if (a.empty()) return d;
      if (a.size() == 1 && a[0]->kind == Kind::List) {
        for (const Object* p : a[0]->items) {
          if (p->kind != Kind::Tuple || p->items.size() != 2) u.fail("OrderedDict item is not a pair");
          d->items.push_back(p->items[0]);
          d->items.push_back(p->items[1]);
        }
        return d;
      }
      return nullptr;
    }
    return nullptr;  // everything else: inert object
  }

  // The view [offset, offset + sum((size-1)*stride)] must lie inside the storage.
  static void check_view(pickle::Unpickler& u, const Object& t) {
    if (t.offset < 0) u.fail("negative storage offset");
    int64_t numel = 1;
    uint64_t last = static_cast<uint64_t>(t.offset);
    bool empty = false;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0 || t.stride[d] < 0) u.fail("negative tensor size or stride");
      if (t.shape[d] == 0) empty = true;
      if (t.shape[d] > 0 && numel > (int64_t{1} << 62) / t.shape[d]) u.fail("tensor size overflows");
      numel *= t.shape[d];
      if (t.shape[d] > 1) {
        const auto span = static_cast<unsigned __int128>(t.shape[d] - 1) * static_cast<uint64_t>(t.stride[d]);
        if (span > (uint64_t{1} << 62)) u.fail("tensor stride overflows");
        last += static_cast<uint64_t>(span);
        if (last > (uint64_t{1} << 62)) u.fail("tensor stride overflows");
      }
    }
    if (!empty && last >= static_cast<uint64_t>(t.storage->i))
      u.fail(detail::concat("tensor view (offset ", t.offset, ", size ", shape_str(t.shape), ", stride ", shape_str(t.stride),
                            ") reaches element ", last, " of storage '", t.storage->s, "' with ", t.storage->i, " elements"));
  }

  static bool contiguous(const Object& t) {
    int64_t expect = 1;
    for (size_t d = t.shape.size(); d-- > 0;) {
      if (t.shape[d] != 1 && t.stride[d] != expect) return false;
      expect *= t.shape[d];
    }
    return true;
  }

  template <typename Out>
  Out read_tensor(const Object& t, const std::string& what, std::optional<DType> as) {
    const ZipDirectory::Entry* e = zip_.find(prefix_ + "data/" + t.storage->s);
    const uint64_t base = zip_.data_offset(*e);
    const StorageDType st = t.storage->dtype;
    const uint64_t esize = storage_dtype_size(st);
    if (contiguous(t) || checked_numel(t.shape, what) == 0) {
      const uint64_t off = base + static_cast<uint64_t>(t.offset) * esize;
      if constexpr (std::is_same_v<Out, Tensor>) return read_float_tensor(*src_, off, st, t.shape, as, what);
      else return read_int_tensor(*src_, off, st, t.shape, what);
    }
    // Strided view: read the storage span it covers, gather into row-major order, decode from memory.
    uint64_t span = 1;
    for (size_t d = 0; d < t.shape.size(); ++d) span += static_cast<uint64_t>(t.shape[d] - 1) * static_cast<uint64_t>(t.stride[d]);
    std::vector<uint8_t> window(span * esize);
    src_->read_at(base + static_cast<uint64_t>(t.offset) * esize, window.data(), window.size());
    const int64_t n = shape_numel(t.shape);
    std::vector<uint8_t> dense(static_cast<size_t>(n) * esize);
    std::vector<int64_t> idx(t.shape.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t src = 0;
      for (size_t d = 0; d < idx.size(); ++d) src += static_cast<uint64_t>(idx[d] * t.stride[d]);
      std::memcpy(dense.data() + static_cast<size_t>(i) * esize, window.data() + src * esize, esize);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < t.shape[d]) break;
        idx[d] = 0;
      }
    }
    window = {};
    const auto mem = ByteSource::from_memory(std::move(dense), what);
    if constexpr (std::is_same_v<Out, Tensor>) return read_float_tensor(*mem, 0, st, t.shape, as, what);
    else return read_int_tensor(*mem, 0, st, t.shape, what);
  }

  std::unique_ptr<ByteSource> src_;
  ZipDirectory zip_;
  std::string prefix_;
  std::string pickle_bytes_;
  std::unique_ptr<pickle::Unpickler> vm_;  // owns every pickle object referenced below
  std::string location_;
  bool stripped_ = false;
  std::vector<std::pair<std::string, const Object*>> entries_;
  std::map<std::string, Object*, std::less<>> storages_;
};

}  // namespace

TorchCheckpoint load_torch_checkpoint(std::unique_ptr<ByteSource> source, std::optional<DType> as) {
  Loader loader(std::move(source));
  return loader.load(as);
}

TorchIndex index_torch_checkpoint(const std::string& path) {
  Loader loader(ByteSource::open_file(path));
  return loader.index();
}

TorchIndex index_torch_checkpoint(std::unique_ptr<ByteSource> source) {
  Loader loader(std::move(source));
  return loader.index();
}

TorchCheckpoint load_torch_checkpoint(const std::string& path, std::optional<DType> as) {
  return load_torch_checkpoint(ByteSource::open_file(path), as);
}

}  // namespace lingbot::io
