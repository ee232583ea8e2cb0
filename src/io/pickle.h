#pragma once
// A safe, bounded interpreter for Python pickle streams (protocols 2-5, binary opcodes), as written by
// torch.save. It never executes code: GLOBAL only records a (module, name) pair, and REDUCE / NEWOBJ
// ask a caller-supplied hook to build the few objects it knows (the torch loader allows
// _rebuild_tensor_v2, OrderedDict, ...); every other call becomes an inert Kind::Object that records
// its class name. Objects live in an arena owned by the Unpickler (cycles are harmless); the stream
// length, object count, memo and stack are bounded, and every length field is checked against the
// remaining input before use. Errors are lingbot::Error("<label>: corrupt pickle stream: ... at byte N").
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/tensor_map.h"

namespace lingbot::io::pickle {

enum class Kind : uint8_t { None, Bool, Int, BigInt, Float, Str, Bytes, Tuple, List, Dict, Set, Global, Object, Storage, Tensor };
std::string_view kind_name(Kind k);

struct Object {
  Kind kind = Kind::None;
  int64_t i = 0;                  // Bool, Int; Storage: element count
  double f = 0;                   // Float
  std::string s;                  // Str, Bytes; Global and Object: "module.name"; Storage: archive key
  std::vector<Object*> items;     // Tuple, List, Set; Dict: key0, value0, key1, value1, ...
  Object* args = nullptr;         // Object: constructor arguments
  Object* state = nullptr;        // Object / Dict: BUILD state (ignored by loaders)
  // Storage / Tensor payload (filled by the torch hooks).
  StorageDType dtype = StorageDType::F32;
  Object* storage = nullptr;      // Tensor: its Kind::Storage
  int64_t offset = 0;             // Tensor: storage offset in elements
  Shape shape, stride;            // Tensor
};

struct Limits {
  size_t max_objects = size_t{1} << 21;  // ~2M objects; a full-size state dict needs ~25k
  size_t max_stack = size_t{1} << 20;
};

class Unpickler {
 public:
  // Builds the object for a call of `callable` (a Kind::Global) with `args`; returns nullptr to get
  // an inert Kind::Object instead.
  using CallHook = std::function<Object*(Unpickler&, const Object& callable, Object* args)>;
  // Resolves a persistent id (BINPERSID); must return an object or throw.
  using PersistentHook = std::function<Object*(Unpickler&, Object* pid)>;

  Unpickler(std::string_view data, std::string label, CallHook call, PersistentHook persistent, Limits limits = {});
  Object* load();                       // runs to STOP; the stream must end there
  Object* make(Kind k);                 // arena allocation (counts towards max_objects)
  [[noreturn]] void fail(const std::string& what) const;  // throws the corrupt-stream Error
  const std::string& label() const { return label_; }

 private:
  uint8_t byte();
  const uint8_t* take(uint64_t n);
  uint64_t le(int n);
  void push(Object* o);
  Object* pop();
  Object* top();
  std::vector<Object*> pop_mark();
  Object* call(Object* callable, Object* args);

  std::string_view data_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::string label_;
  CallHook call_;
  PersistentHook persistent_;
  Limits limits_;
  std::deque<Object> arena_;
  std::vector<Object*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Object*> memo_;
};

}  // namespace lingbot::io::pickle
