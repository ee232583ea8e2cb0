#include "io/pickle.h"

#include <bit>
#include <cstring>

#include "core/error.h"

namespace lingbot::io::pickle {

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "big int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::Global: return "global";
    case Kind::Object: return "object";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
  }
  return "?";
}

Unpickler::Unpickler(std::string_view data, std::string label, CallHook call, PersistentHook persistent, Limits limits)
    : data_(data), label_(std::move(label)), call_(std::move(call)), persistent_(std::move(persistent)), limits_(limits) {}

void Unpickler::fail(const std::string& what) const {
  throw Error(detail::concat(label_, ": corrupt pickle stream: ", what, " at byte ", op_pos_));
}

Object* Unpickler::make(Kind k) {
  if (arena_.size() >= limits_.max_objects) fail(detail::concat("more than ", limits_.max_objects, " objects"));
  arena_.emplace_back();
  arena_.back().kind = k;
  return &arena_.back();
}

uint8_t Unpickler::byte() {
  if (pos_ >= data_.size()) fail("unexpected end of data");
  return static_cast<uint8_t>(data_[pos_++]);
}

const uint8_t* Unpickler::take(uint64_t n) {
  if (n > data_.size() - pos_) fail(detail::concat("length ", n, " exceeds the remaining ", data_.size() - pos_, " bytes"));
  const auto* p = reinterpret_cast<const uint8_t*>(data_.data() + pos_);
  pos_ += n;
  return p;
}

uint64_t Unpickler::le(int n) {
  const uint8_t* p = take(static_cast<uint64_t>(n));
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void Unpickler::push(Object* o) {
  if (stack_.size() >= limits_.max_stack) fail("stack overflow");
  stack_.push_back(o);
}

Object* Unpickler::pop() {
  if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) fail("pop from an empty stack");
  Object* o = stack_.back();
  stack_.pop_back();
  return o;
}

Object* Unpickler::top() {
  if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) fail("empty stack");
  return stack_.back();
}

std::vector<Object*> Unpickler::pop_mark() {
  if (marks_.empty()) fail("no MARK on the stack");
  const size_t m = marks_.back();
  marks_.pop_back();
  std::vector<Object*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

Object* Unpickler::call(Object* callable, Object* args) {
  if (callable->kind == Kind::Global && call_) {
    if (Object* o = call_(*this, *callable, args)) return o;
  }
  Object* o = make(Kind::Object);
  o->s = callable->kind == Kind::Global ? callable->s : detail::concat("<", kind_name(callable->kind), ">");
  o->args = args;
  return o;
}

Object* Unpickler::load() {
  auto str = [&](uint64_t n, Kind k) {
    const uint8_t* p = take(n);
    Object* o = make(k);
    o->s.assign(reinterpret_cast<const char*>(p), n);
    push(o);
  };
  auto integer = [&](int64_t v) {
    Object* o = make(Kind::Int);
    o->i = v;
    push(o);
  };
  auto line = [&]() {
    const size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos) fail("unterminated GLOBAL name");
    std::string s(data_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  };
  auto make_global = [&](const std::string& module, const std::string& name) {
    Object* o = make(Kind::Global);
    o->s = module + "." + name;
    push(o);
  };
  auto seq = [&](Kind k, std::vector<Object*> items) {
    Object* o = make(k);
    o->items = std::move(items);
    push(o);
  };
  auto set_items = [&](Object* dict, const std::vector<Object*>& kv) {
    if (dict->kind != Kind::Dict) fail(detail::concat("SETITEM on a ", kind_name(dict->kind)));
    if (kv.size() % 2) fail("odd number of items for SETITEMS");
    dict->items.insert(dict->items.end(), kv.begin(), kv.end());
  };
  auto append = [&](Object* list, const std::vector<Object*>& v) {
    if (list->kind != Kind::List && list->kind != Kind::Set) fail(detail::concat("APPEND to a ", kind_name(list->kind)));
    list->items.insert(list->items.end(), v.begin(), v.end());
  };
  auto long_int = [&](uint64_t n) {
    const uint8_t* p = take(n);
    if (n > 8) {
      push(make(Kind::BigInt));
      return;
    }
    uint64_t v = 0;
    for (uint64_t k = n; k-- > 0;) v = (v << 8) | p[k];
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    integer(static_cast<int64_t>(v));
  };

  while (true) {
    op_pos_ = pos_;
    const uint8_t op = byte();
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = byte();
        if (v > 5) fail(detail::concat("unsupported pickle protocol ", int(v)));
        break;
      }
      case 0x95: le(8); break;  // FRAME (length is advisory)
      case '.': {               // STOP
        Object* result = pop();
        if (pos_ != data_.size()) fail(detail::concat(data_.size() - pos_, " trailing bytes after STOP"));
        return result;
      }
      case '(': marks_.push_back(stack_.size()); break;                         // MARK
      case '}': push(make(Kind::Dict)); break;                                  // EMPTY_DICT
      case ']': push(make(Kind::List)); break;                                  // EMPTY_LIST
      case ')': push(make(Kind::Tuple)); break;                                 // EMPTY_TUPLE
      case 0x8f: push(make(Kind::Set)); break;                                  // EMPTY_SET
      case 'N': push(make(Kind::None)); break;                                  // NONE
      case 0x88: case 0x89: {                                                   // NEWTRUE / NEWFALSE
        Object* o = make(Kind::Bool);
        o->i = op == 0x88;
        push(o);
        break;
      }
      case 'J': integer(static_cast<int32_t>(static_cast<uint32_t>(le(4)))); break;  // BININT
      case 'K': integer(static_cast<int64_t>(le(1))); break;                         // BININT1
      case 'M': integer(static_cast<int64_t>(le(2))); break;                         // BININT2
      case 0x8a: long_int(le(1)); break;                                             // LONG1
      case 0x8b: {                                                                   // LONG4
        const auto n = static_cast<int32_t>(static_cast<uint32_t>(le(4)));
        if (n < 0) fail("negative LONG4 length");
        long_int(static_cast<uint64_t>(n));
        break;
      }
      case 'G': {  // BINFLOAT, big-endian IEEE double
        const uint8_t* p = take(8);
        uint64_t u = 0;
        for (int k = 0; k < 8; ++k) u = (u << 8) | p[k];
        Object* o = make(Kind::Float);
        o->f = std::bit_cast<double>(u);
        push(o);
        break;
      }
      case 'X': str(le(4), Kind::Str); break;     // BINUNICODE
      case 0x8c: str(le(1), Kind::Str); break;    // SHORT_BINUNICODE
      case 0x8d: str(le(8), Kind::Str); break;    // BINUNICODE8
      case 'B': str(le(4), Kind::Bytes); break;   // BINBYTES
      case 'C': str(le(1), Kind::Bytes); break;   // SHORT_BINBYTES
      case 0x8e: str(le(8), Kind::Bytes); break;  // BINBYTES8
      case 'U': str(le(1), Kind::Str); break;     // SHORT_BINSTRING
      case 'T': {                                 // BINSTRING
        const auto n = static_cast<int32_t>(static_cast<uint32_t>(le(4)));
        if (n < 0) fail("negative BINSTRING length");
        str(static_cast<uint64_t>(n), Kind::Str);
        break;
      }
      case 't': seq(Kind::Tuple, pop_mark()); break;  // TUPLE
      case 0x85: {                                     // TUPLE1
        Object* a = pop();
        seq(Kind::Tuple, {a});
        break;
      }
      case 0x86: {  // TUPLE2
        Object* b = pop();
        Object* a = pop();
        seq(Kind::Tuple, {a, b});
        break;
      }
      case 0x87: {  // TUPLE3
        Object* c = pop();
        Object* b = pop();
        Object* a = pop();
        seq(Kind::Tuple, {a, b, c});
        break;
      }
      case 'l': seq(Kind::List, pop_mark()); break;  // LIST
      case 'd': {                                     // DICT
        Object* d = make(Kind::Dict);
        set_items(d, pop_mark());
        push(d);
        break;
      }
      case 0x91: seq(Kind::Set, pop_mark()); break;  // FROZENSET
      case 's': {                                     // SETITEM
        Object* v = pop();
        Object* k = pop();
        set_items(top(), {k, v});
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<Object*> kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case 'a': {  // APPEND
        Object* v = pop();
        append(top(), {v});
        break;
      }
      case 'e': case 0x90: {  // APPENDS / ADDITEMS
        std::vector<Object*> v = pop_mark();
        append(top(), v);
        break;
      }
      case 'q': memo_[le(1)] = top(); break;  // BINPUT
      case 'r': memo_[le(4)] = top(); break;  // LONG_BINPUT
      case 0x94: {                            // MEMOIZE
        const uint64_t idx = memo_.size();
        memo_[idx] = top();
        break;
      }
      case 'h': case 'j': {  // BINGET / LONG_BINGET
        const uint64_t idx = le(op == 'h' ? 1 : 4);
        auto it = memo_.find(idx);
        if (it == memo_.end()) fail(detail::concat("memo key ", idx, " was never stored"));
        push(it->second);
        break;
      }
      case 'c': {  // GLOBAL
        const std::string module = line();
        const std::string name = line();
        make_global(module, name);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Object* name = pop();
        Object* module = pop();
        if (name->kind != Kind::Str || module->kind != Kind::Str) fail("STACK_GLOBAL needs two strings");
        make_global(module->s, name->s);
        break;
      }
      case 'R': {  // REDUCE
        Object* args = pop();
        Object* callable = pop();
        if (args->kind != Kind::Tuple) fail(detail::concat("REDUCE arguments are a ", kind_name(args->kind), ", not a tuple"));
        push(call(callable, args));
        break;
      }
      case 0x81: {  // NEWOBJ
        Object* args = pop();
        Object* cls = pop();
        if (args->kind != Kind::Tuple) fail("NEWOBJ arguments are not a tuple");
        push(call(cls, args));
        break;
      }
      case 0x92: {  // NEWOBJ_EX
        pop();      // kwargs
        Object* args = pop();
        Object* cls = pop();
        if (args->kind != Kind::Tuple) fail("NEWOBJ_EX arguments are not a tuple");
        push(call(cls, args));
        break;
      }
      case 'b': {  // BUILD: state is recorded, never applied through code
        Object* state = pop();
        top()->state = state;
        break;
      }
      case 'Q': {  // BINPERSID
        Object* pid = pop();
        if (!persistent_) fail("persistent id without a loader");
        push(persistent_(*this, pid));
        break;
      }
      case '0': pop(); break;  // POP
      case '1': pop_mark(); break;  // POP_MARK
      case '2': push(top()); break;  // DUP
      default:
        fail(detail::concat("unsupported opcode 0x", "0123456789abcdef"[op >> 4], "0123456789abcdef"[op & 15]));
    }
  }
}

}  // namespace lingbot::io::pickle
