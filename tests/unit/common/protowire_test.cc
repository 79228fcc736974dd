// The protobuf wire primitives (common/protowire.h) against bytes libprotobuf produces and
// refuses: varints, keys, length-delimited fields, skipping (groups included) and the field
// iterator.

#include "common/protowire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infergate::common::protowire {
namespace {

TEST(ProtoWire, VarintEncoding) {
  const std::vector<std::pair<uint64_t, std::string>> cases = {
      {0, std::string("\x00", 1)},
      {1, "\x01"},
      {127, "\x7f"},
      {128, "\x80\x01"},
      {300, "\xac\x02"},
      {~uint64_t{0}, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
  };
  for (const auto& [v, bytes] : cases) {
    std::string out;
    putVarint(out, v);
    EXPECT_EQ(out, bytes) << v;
    EXPECT_EQ(varintSize(v), bytes.size()) << v;
    Input in(out);
    uint64_t back = 0;
    ASSERT_TRUE(in.readVarint(back));
    EXPECT_EQ(back, v);
    EXPECT_TRUE(in.atEnd());
  }
}

TEST(ProtoWire, FieldsAndSizes) {
  std::string out;
  putString(out, 1, "abc");
  EXPECT_EQ(out, "\x0a\x03" "abc");
  EXPECT_EQ(lenFieldSize(1, 3), out.size());
  out.clear();
  putVarintField(out, 3, 150);
  EXPECT_EQ(out, "\x18\x96\x01");
  out.clear();
  putPackedInt64(out, 4, {3, 270, 86942});
  EXPECT_EQ(out, "\x22\x06\x03\x8e\x02\x9e\xa7\x05");
  out.clear();
  putPackedInt64(out, 4, {});
  EXPECT_TRUE(out.empty());
  out.clear();
  putLenHeader(out, 16, 2);
  EXPECT_EQ(out, "\x82\x01\x02");
  EXPECT_EQ(lenFieldSize(16, 2), 5u);
}

TEST(ProtoWire, InputReadsEveryWireType) {
  std::string msg;
  putVarintField(msg, 1, 7);
  putTag(msg, 2, kFixed32);
  msg.append("\x01\x02\x03\x04");
  putTag(msg, 3, kFixed64);
  msg.append("\x01\x00\x00\x00\x00\x00\x00\x80", 8);
  putString(msg, 4, "");
  putString(msg, 5, "xyz");
  Input in(msg);
  uint32_t tag = in.readTag();
  EXPECT_EQ(tag, makeTag(1, kVarint));
  uint64_t v = 0;
  ASSERT_TRUE(in.readVarint(v));
  EXPECT_EQ(v, 7u);
  EXPECT_EQ(in.readTag(), makeTag(2, kFixed32));
  uint32_t f32 = 0;
  ASSERT_TRUE(in.readFixed32(f32));
  EXPECT_EQ(f32, 0x04030201u);
  EXPECT_EQ(in.readTag(), makeTag(3, kFixed64));
  uint64_t f64 = 0;
  ASSERT_TRUE(in.readFixed64(f64));
  EXPECT_EQ(f64, 0x8000000000000001ull);
  std::string_view view;
  EXPECT_EQ(in.readTag(), makeTag(4, kLen));
  ASSERT_TRUE(in.readView(view));
  EXPECT_TRUE(view.empty());
  EXPECT_EQ(in.readTag(), makeTag(5, kLen));
  ASSERT_TRUE(in.readView(view));
  EXPECT_EQ(view, "xyz");
  EXPECT_EQ(view.data(), msg.data() + msg.size() - 3);  // a view, not a copy
  EXPECT_EQ(in.readTag(), 0u);
  EXPECT_TRUE(in.consumedEntireMessage());
}

TEST(ProtoWire, InputRefusesMalformedKeysAndPayloads) {
  {
    Input in(std::string_view("\x00", 1));  // key 0
    EXPECT_EQ(in.readTag(), 0u);
    EXPECT_FALSE(in.consumedEntireMessage());
  }
  {
    Input in(std::string_view("\x80\x80", 2));  // truncated key
    EXPECT_EQ(in.readTag(), 0u);
    EXPECT_FALSE(in.consumedEntireMessage());
    EXPECT_EQ(in.readTag(), 0u);
    EXPECT_FALSE(in.consumedEntireMessage());
  }
  {
    Input in(std::string_view("\x0a\x05" "ab"));  // length past the end
    ASSERT_EQ(in.readTag(), makeTag(1, kLen));
    std::string_view v;
    EXPECT_FALSE(in.readView(v));
  }
  {
    Input in(std::string_view("\x0d\x01\x02"));  // fixed32 short
    ASSERT_EQ(in.readTag(), makeTag(1, kFixed32));
    uint32_t v;
    EXPECT_FALSE(in.readFixed32(v));
  }
  {
    // 11-byte varint
    Input in(std::string_view("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"));
    ASSERT_EQ(in.readTag(), makeTag(1, kVarint));
    uint64_t v;
    EXPECT_FALSE(in.readVarint(v));
  }
}

TEST(ProtoWire, SkipFieldAsProtobufDoes) {
  // Every wire type, and a group with a nested group, is skipped; the next field is read.
  std::string msg;
  putVarintField(msg, 1, 300);
  putTag(msg, 2, kFixed64);
  msg.append(8, '\0');
  putString(msg, 3, "abc");
  putTag(msg, 4, kFixed32);
  msg.append(4, '\0');
  putTag(msg, 5, kStartGroup);
  putVarintField(msg, 1, 1);
  putTag(msg, 6, kStartGroup);
  putTag(msg, 6, kEndGroup);
  putTag(msg, 5, kEndGroup);
  putVarintField(msg, 9, 42);
  Input in(msg);
  for (int i = 0; i < 5; ++i) {
    const uint32_t tag = in.readTag();
    ASSERT_NE(tag, 0u);
    ASSERT_TRUE(in.skipField(tag)) << i;
  }
  EXPECT_EQ(in.readTag(), makeTag(9, kVarint));

  auto skips = [](std::string_view bytes) {
    Input in(bytes);
    return in.skipField(in.readTag());
  };
  EXPECT_FALSE(skips("\x0c"));          // end group without a group
  EXPECT_FALSE(skips("\x0b\x14"));      // group 1 closed by group 2's end
  EXPECT_FALSE(skips("\x0b\x08\x01"));  // group not closed
  EXPECT_FALSE(skips("\x0e"));          // wire type 6
  EXPECT_FALSE(skips("\x02\x00"));      // field number 0
  std::string deep;
  for (int i = 0; i < 101; ++i) putTag(deep, 1, kStartGroup);
  for (int i = 0; i < 101; ++i) putTag(deep, 1, kEndGroup);
  EXPECT_FALSE(skips(deep));  // deeper than protobuf's recursion limit of 100
  std::string ok;
  for (int i = 0; i < 100; ++i) putTag(ok, 1, kStartGroup);
  for (int i = 0; i < 100; ++i) putTag(ok, 1, kEndGroup);
  EXPECT_TRUE(skips(ok));
}

TEST(ProtoWire, ReaderIteratesFields) {
  std::string msg;
  putString(msg, 1, "name");
  putPackedInt64(msg, 2, {1, -1, 300});
  putVarintField(msg, 2, 5);  // unpacked element of the same repeated field
  Reader r(msg);
  ASSERT_TRUE(r.next());
  EXPECT_EQ(r.field(), 1u);
  EXPECT_EQ(r.wireType(), kLen);
  EXPECT_EQ(r.bytes(), "name");
  std::vector<int64_t> values;
  ASSERT_TRUE(r.next());
  ASSERT_TRUE(readInt64s(r, values));
  ASSERT_TRUE(r.next());
  ASSERT_TRUE(readInt64s(r, values));
  EXPECT_EQ(values, (std::vector<int64_t>{1, -1, 300, 5}));
  EXPECT_FALSE(r.next());
  EXPECT_FALSE(r.error());

  Reader bad(std::string_view("\x0b", 1));  // groups are refused
  EXPECT_FALSE(bad.next());
  EXPECT_TRUE(bad.error());
  Reader zero(std::string_view("\x02\x00", 2));  // field 0
  EXPECT_FALSE(zero.next());
  EXPECT_TRUE(zero.error());
}

}  // namespace
}  // namespace infergate::common::protowire
