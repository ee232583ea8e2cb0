// The safe pickle VM on hand-written streams: values, memo, inert globals, limits, and each error.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "io/pickle.h"

namespace lingbot::io::pickle {
namespace {

using namespace std::string_literals;

// Runs `bytes` without hooks; returns the error message or "". `check` sees the result while the
// Unpickler (which owns every object) is alive.
std::string run(const std::string& bytes, const std::function<void(Object*)>& check = {}, Limits limits = {}) {
  Unpickler u(bytes, "p", nullptr, nullptr, limits);
  try {
    Object* o = u.load();
    if (check) check(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string s(std::initializer_list<int> b) {
  std::string r;
  for (int x : b) r.push_back(static_cast<char>(x));
  return r;
}

TEST(Pickle, Values) {
  // PROTO 2, MARK, BININT -2, BININT1 200, BININT2 40000, LONG1 (2 bytes 0xff7f = 32767), LONG1 -1, NONE, TRUE,
  // BINFLOAT 1.5, SHORT_BINUNICODE "hi", SHORT_BINBYTES "\0", TUPLE, STOP
  const std::string p = s({0x80, 2, '(', 'J', 0xfe, 0xff, 0xff, 0xff, 'K', 200, 'M', 0x40, 0x9c, 0x8a, 2, 0xff, 0x7f, 0x8a, 1, 0xff,
                           'N', 0x88, 'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x8c, 2, 'h', 'i', 'C', 1, 0, 't', '.'});
  ASSERT_EQ(run(p, [](Object* o) {
  ASSERT_EQ(o->kind, Kind::Tuple);
  ASSERT_EQ(o->items.size(), 10u);
  EXPECT_EQ(o->items[0]->i, -2);
  EXPECT_EQ(o->items[1]->i, 200);
  EXPECT_EQ(o->items[2]->i, 40000);
  EXPECT_EQ(o->items[3]->i, 32767);
  EXPECT_EQ(o->items[4]->i, -1);
  EXPECT_EQ(o->items[5]->kind, Kind::None);
  EXPECT_EQ(o->items[6]->i, 1);
  EXPECT_EQ(o->items[7]->f, 1.5);
  EXPECT_EQ(o->items[8]->s, "hi");
  EXPECT_EQ(o->items[9]->kind, Kind::Bytes);
  EXPECT_EQ(o->items[9]->s, std::string(1, '\0'));
  }), "");
}

TEST(Pickle, MemoDictAndInertGlobals) {
  // {"a": os.system("x"), "b": <memo 0 = the dict itself>}: the call is recorded, never made.
  const std::string p = "\x80\x02}q\x00(X\x01\x00\x00\x00"s + "a" + "cos\nsystem\nX\x01\x00\x00\x00"s + "x\x85R" +
                        "X\x01\x00\x00\x00"s + "bh\x00u."s;
  ASSERT_EQ(run(p, [](Object* o) {
  ASSERT_EQ(o->kind, Kind::Dict);
  ASSERT_EQ(o->items.size(), 4u);
  EXPECT_EQ(o->items[1]->kind, Kind::Object);
  EXPECT_EQ(o->items[1]->s, "os.system");
  EXPECT_EQ(o->items[3], o);  // a cycle through the memo is fine: objects live in the arena
  }), "");
}

TEST(Pickle, DeepNestingNeedsNoRecursion) {
  std::string p = "\x80\x02";
  for (int i = 0; i < 100000; ++i) p += "]";         // 100k empty lists
  for (int i = 0; i < 99999; ++i) p += "a";          // each appended into the one below
  p += ".";
  EXPECT_EQ(run(p, [](Object* o) { EXPECT_EQ(o->kind, Kind::List); }), "");
}

TEST(Pickle, Errors) {
  EXPECT_EQ(run(""), "p: corrupt pickle stream: unexpected end of data at byte 0");
  EXPECT_EQ(run("\x80\x06."), "p: corrupt pickle stream: unsupported pickle protocol 6 at byte 0");
  EXPECT_EQ(run("\x80\x02."), "p: corrupt pickle stream: pop from an empty stack at byte 2");
  EXPECT_EQ(run("\x80\x02h\x05."s), "p: corrupt pickle stream: memo key 5 was never stored at byte 2");
  EXPECT_EQ(run("\x80\x02X\xff\xff\xff\x7f" "ab."), "p: corrupt pickle stream: length 2147483647 exceeds the remaining 3 bytes at byte 2");
  EXPECT_EQ(run("\x80\x02N.N"), "p: corrupt pickle stream: 1 trailing bytes after STOP at byte 3");
  EXPECT_EQ(run("\x80\x02NNu."), "p: corrupt pickle stream: no MARK on the stack at byte 4");
  EXPECT_EQ(run("\x80\x02(."), "p: corrupt pickle stream: pop from an empty stack at byte 3");
  EXPECT_EQ(run("\x80\x02NNNs."), "p: corrupt pickle stream: SETITEM on a None at byte 5");
  EXPECT_EQ(run("\x80\x02NNR."), "p: corrupt pickle stream: REDUCE arguments are a None, not a tuple at byte 4");
  EXPECT_EQ(run("\x80\x02\xff."), "p: corrupt pickle stream: unsupported opcode 0xff at byte 2");
  EXPECT_EQ(run("\x80\x02" "cos\nsys"), "p: corrupt pickle stream: unterminated GLOBAL name at byte 2");
  EXPECT_EQ(run("\x80\x02NQ."), "p: corrupt pickle stream: persistent id without a loader at byte 3");
  EXPECT_EQ(run("\x80\x02\x8b\xff\xff\xff\xff."), "p: corrupt pickle stream: negative LONG4 length at byte 2");
  EXPECT_EQ(run("\x80\x02]]]]].", {}, Limits{4, 100}), "p: corrupt pickle stream: more than 4 objects at byte 6");
  EXPECT_EQ(run("\x80\x02NNN.", {}, Limits{100, 2}), "p: corrupt pickle stream: stack overflow at byte 4");
}

TEST(Pickle, BigIntegersAreInert) {
  EXPECT_EQ(run(s({0x80, 2, 0x8a, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, '.'}), [](Object* o) { EXPECT_EQ(o->kind, Kind::BigInt); }), "");
}

}  // namespace
}  // namespace lingbot::io::pickle
