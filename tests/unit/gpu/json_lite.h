#pragma once
// A strict little JSON parser for the GPU view and webhook tests (RFC 8259: no trailing commas,
// no comments, escapes checked, UTF-8 checked, nothing after the value). Test support only.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infergate::gpu::testing {

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool b = false;
  double num = 0;
  std::string raw_number;  // the number's text (exact integers beyond 2^53)
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  const Json& operator[](const std::string& key) const {
    static const Json kMissing;
    auto it = obj.find(key);
    return it == obj.end() ? kMissing : it->second;
  }
  const Json& operator[](size_t i) const { return arr.at(i); }
  bool has(const std::string& key) const { return obj.count(key) > 0; }
};

class JsonParser {
 public:
  // The value, or nullopt with `error` set.
  static std::optional<Json> parse(std::string_view text, std::string* error = nullptr) {
    JsonParser p(text);
    Json v;
    if (!p.value(v, 0) || (p.ws(), p.i_ != text.size())) {
      if (error) *error = "at byte " + std::to_string(p.i_) + ": " + (p.err_.empty() ? "trailing data" : p.err_);
      return std::nullopt;
    }
    return v;
  }

 private:
  explicit JsonParser(std::string_view s) : s_(s) {}

  bool fail(const char* why) {
    if (err_.empty()) err_ = why;
    return false;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool lit(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return fail("bad literal");
    i_ += w.size();
    return true;
  }
  bool value(Json& v, int depth) {
    if (depth > 64) return fail("too deep");
    ws();
    if (i_ >= s_.size()) return fail("unexpected end");
    const char c = s_[i_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v.type = Json::Type::kString;
      return string(v.str);
    }
    if (c == 't') {
      v.type = Json::Type::kBool;
      v.b = true;
      return lit("true");
    }
    if (c == 'f') {
      v.type = Json::Type::kBool;
      return lit("false");
    }
    if (c == 'n') return lit("null");
    return number(v);
  }
  bool number(Json& v) {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > d;
    };
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (!digits()) {
      return fail("bad number");
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) return fail("bad fraction");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return fail("bad exponent");
    }
    v.type = Json::Type::kNumber;
    v.raw_number = std::string(s_.substr(start, i_ - start));
    v.num = std::stod(v.raw_number);
    return true;
  }
  static void utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  bool hex4(uint32_t& cp) {
    if (i_ + 4 > s_.size()) return fail("short \\u escape");
    cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= h - '0';
      else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
      else return fail("bad \\u escape");
    }
    return true;
  }
  bool string(std::string& out) {
    ++i_;  // '"'
    while (i_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return fail("control character in a string");
      if (c == '\\') {
        if (++i_ >= s_.size()) return fail("unexpected end");
        const char e = s_[i_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp;
            if (!hex4(cp)) return false;
            if (cp >= 0xd800 && cp <= 0xdbff) {
              uint32_t lo;
              if (s_.substr(i_, 2) != "\\u") return fail("lone high surrogate");
              i_ += 2;
              if (!hex4(lo) || lo < 0xdc00 || lo > 0xdfff) return fail("bad low surrogate");
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
              return fail("lone low surrogate");
            }
            utf8(out, cp);
            break;
          }
          default: return fail("bad escape");
        }
        continue;
      }
      // UTF-8: check the sequence.
      size_t n = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
      if (n == 0 || i_ + n > s_.size()) return fail("invalid UTF-8");
      for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s_[i_ + k]) & 0xc0) != 0x80) return fail("invalid UTF-8");
      out.append(s_.substr(i_, n));
      i_ += n;
    }
    return fail("unterminated string");
  }
  bool array(Json& v, int depth) {
    v.type = Json::Type::kArray;
    ++i_;
    ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      Json e;
      if (!value(e, depth + 1)) return false;
      v.arr.push_back(std::move(e));
      ws();
      if (i_ >= s_.size()) return fail("unexpected end");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == ']') {
        ++i_;
        return true;
      }
      return fail("expected , or ]");
    }
  }
  bool object(Json& v, int depth) {
    v.type = Json::Type::kObject;
    ++i_;
    ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return true;
    }
    for (;;) {
      ws();
      if (i_ >= s_.size() || s_[i_] != '"') return fail("expected a key");
      std::string key;
      if (!string(key)) return false;
      ws();
      if (i_ >= s_.size() || s_[i_] != ':') return fail("expected :");
      ++i_;
      Json e;
      if (!value(e, depth + 1)) return false;
      if (v.obj.count(key)) return fail("duplicate key");
      v.obj.emplace(std::move(key), std::move(e));
      ws();
      if (i_ >= s_.size()) return fail("unexpected end");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == '}') {
        ++i_;
        return true;
      }
      return fail("expected , or }");
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string err_;
};

}  // namespace infergate::gpu::testing
