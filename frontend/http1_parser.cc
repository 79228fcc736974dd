#include "frontend/http1_parser.h"

#include <llhttp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <limits>
#include <utility>

#include "common/ascii.h"

// How the parser stays strict on top of llhttp 8.1 (built without LLHTTP_STRICT_MODE):
//
// llhttp alone accepts several things a front door must refuse (verified by the unit tests):
// bare LF line endings, a bare CR after a chunk size (it swallows the next byte), obs-fold
// lines, spaces before the colon, empty header names, "GET  /" with two spaces, RTSP/ICE
// versions, HTTP/0.9 and 2.0, tabs and non-ASCII in the target, "Transfer-Encoding: gzip,
// chunked" and empty Transfer-Encoding. So every byte first goes through a small framing
// scanner (`Impl::scan`) that checks line endings, obs-fold, header-section size and the
// chunked framing, and finds where each section (head, body, trailers) ends. llhttp is then
// run over exactly the bytes the scanner accepted; the callbacks check the semantics
// (tokens, versions, Host, Content-Length, Transfer-Encoding, limits, Expect). The first
// error in byte order wins. on_message_complete pauses llhttp, so each pipelined request
// ends exactly where the scanner says it does; a mismatch is refused as a bad request.
//
// Choices: absolute-form targets (http/https) are accepted and reduced to path+query (RFC
// 9112 3.2.2); userinfo, other schemes and authority-form are 400 bad_target; "*" only with
// OPTIONS. CONNECT is 501; a well-formed method llhttp does not know is 501, a non-token 400.
// Upgrade requests are served as plain HTTP/1.1. After a request that is not keep-alive,
// later bytes are ignored. Trailers are checked like headers (bytes limit of their own) and
// dropped. Body memory is reserved up to 1 MiB from Content-Length, then grows with data.

namespace infergate::frontend {
namespace {

enum class Err : uint8_t {
  kNone,
  kClAndTe,
  kDupContentLength,
  kBadContentLength,
  kBadTransferEncoding,
  kUnsupportedTransferEncoding,
  kObsFold,
  kBareLf,
  kBareCr,
  kBadMethod,
  kUnknownMethod,
  kUnsupportedMethod,
  kBadHeaderName,
  kBadHeaderValue,
  kBadVersion,
  kUnsupportedVersion,
  kBadRequestLine,
  kHeaderTooLarge,
  kTooManyHeaders,
  kUriTooLong,
  kBodyTooLarge,
  kLengthRequired,
  kMissingHost,
  kDupHost,
  kBadChunk,
  kBadTarget,
  kExpectationFailed,
  kNoMemory,
  kBadRequest,
};

struct ErrInfo {
  int status;
  const char* reason;
  const char* message;
};

constexpr ErrInfo kErrInfo[] = {
    {0, "", ""},
    {400, "cl_and_te", "Content-Length and Transfer-Encoding must not both be present."},
    {400, "dup_content_length", "Duplicate Content-Length header."},
    {400, "bad_content_length", "Malformed Content-Length header."},
    {400, "bad_transfer_encoding", "Malformed Transfer-Encoding: chunked must be the last and only coding."},
    {501, "unsupported_transfer_encoding", "Unsupported transfer coding: only chunked is implemented."},
    {400, "obs_fold", "Obsolete line folding is not allowed in header fields."},
    {400, "bare_lf", "Lines must end with CRLF, not a bare LF."},
    {400, "bare_cr", "A CR must be followed by LF."},
    {400, "bad_method", "The request method is not a valid token."},
    {501, "unknown_method", "The request method is not implemented."},
    {501, "unsupported_method", "CONNECT is not supported by this server."},
    {400, "bad_header_name", "Invalid character in a header field name."},
    {400, "bad_header_value", "Invalid character in a header field value."},
    {400, "bad_version", "Malformed HTTP version in the request line."},
    {505, "unsupported_version", "Only HTTP/1.0 and HTTP/1.1 are supported."},
    {400, "bad_request_line", "Malformed request line."},
    {431, "header_too_large", "The request header section is too large."},
    {431, "too_many_headers", "The request has too many header fields."},
    {414, "uri_too_long", "The request target is too long."},
    {413, "body_too_large", "The request body is too large."},
    {411, "length_required", "A request with a body needs Content-Length or chunked Transfer-Encoding."},
    {400, "missing_host", "HTTP/1.1 requests must carry a Host header."},
    {400, "dup_host", "Duplicate Host header."},
    {400, "bad_chunk", "Malformed chunked body."},
    {400, "bad_target", "The request target must be an absolute path (or * for OPTIONS)."},
    {417, "expectation_failed", "Only the 100-continue expectation is supported."},
    {503, "no_memory", "Out of memory for this request."},
    {400, "bad_request", "Malformed HTTP request."},
};
static_assert(sizeof(kErrInfo) / sizeof(kErrInfo[0]) == static_cast<size_t>(Err::kBadRequest) + 1);

// RFC 9110 tchar.
constexpr std::array<bool, 256> makeTchar() {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}
constexpr std::array<bool, 256> kTchar = makeTchar();

// field-value bytes: HTAB, SP, VCHAR, obs-text.
constexpr std::array<bool, 256> makeValueChar() {
  std::array<bool, 256> t{};
  t['\t'] = true;
  for (int c = 0x20; c <= 0x7e; ++c) t[c] = true;
  for (int c = 0x80; c <= 0xff; ++c) t[c] = true;
  return t;
}
constexpr std::array<bool, 256> kValueChar = makeValueChar();

// Request-target bytes: visible ASCII except '#' (no fragment in a request).
constexpr std::array<bool, 256> makeTargetChar() {
  std::array<bool, 256> t{};
  for (int c = 0x21; c <= 0x7e; ++c) t[c] = true;
  t['#'] = false;
  return t;
}
constexpr std::array<bool, 256> kTargetChar = makeTargetChar();

inline unsigned char lower(unsigned char c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// tchar bytes lower-cased; 0 for a byte that is not a tchar (header names, one lookup a byte).
constexpr std::array<unsigned char, 256> makeLowerTchar() {
  std::array<unsigned char, 256> t{};
  for (int c = 0; c < 256; ++c) {
    if (kTchar[c]) t[c] = static_cast<unsigned char>((c >= 'A' && c <= 'Z') ? c + 32 : c);
  }
  return t;
}
constexpr std::array<unsigned char, 256> kLowerTchar = makeLowerTchar();

using common::ascii::iequals;
// Optional whitespace (RFC 9110: SP / HTAB) around a field value.
inline std::string_view trimOws(std::string_view s) { return common::ascii::trim(s); }

inline int hexVal(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = lower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The first CR or LF in [p, end), or end: eight bytes per step (SWAR), as a header line is
// scanned once here and once by llhttp.
inline const char* findLineEnd(const char* p, const char* end) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  constexpr uint64_t kHighs = 0x8080808080808080ull;
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    const uint64_t cr = w ^ (kOnes * '\r');
    const uint64_t lf = w ^ (kOnes * '\n');
    // A zero byte in cr or lf: exact for the lowest one (borrows only run upwards).
    const uint64_t hit = ((cr - kOnes) & ~cr & kHighs) | ((lf - kOnes) & ~lf & kHighs);
    if (hit != 0) return p + (__builtin_ctzll(hit) >> 3);
    p += 8;
  }
  while (p < end && *p != '\r' && *p != '\n') ++p;
  return p;
}

// Header fields the parser interprets itself.
enum class Special : uint8_t { kNone, kContentLength, kTransferEncoding, kHost, kExpect };

// Longest chunk-size line (size + extensions) accepted.
constexpr size_t kMaxChunkLine = 4096;
// Body bytes reserved up front from Content-Length; beyond that the body grows as data
// arrives, so a peer cannot make us commit max_body_bytes per connection with one header.
constexpr size_t kMaxUpfrontReserve = 1 << 20;

}  // namespace

struct Http1Parser::Impl {
  // What the framing scanner is looking at.
  enum class Stage : uint8_t {
    kHead,          // request line and header fields
    kIdentity,      // Content-Length body
    kChunkSize,     // hex digits of a chunk-size line
    kChunkExt,      // after ';' on a chunk-size line
    kChunkSizeLf,   // CR seen on a chunk-size line
    kChunkData,     // chunk payload
    kChunkDataCr,   // CR expected after the payload
    kChunkDataLf,   // LF expected after the payload
    kTrailers,      // trailer fields after the last chunk
    kClosed,        // a request without keep-alive completed: ignore the rest
  };
  enum class Event : uint8_t { kNeedMore, kLineEnd, kHeadEnd, kMessageEnd, kError };

  Http1Parser* owner;
  Http1Limits limits;
  llhttp_t parser;
  uint64_t now_ns = 0;
  bool copied = false;              // feed()'s bytes were copied by the transport
  BodyHook* body_hook = nullptr;

  // ---- scanner state ----
  Stage stage = Stage::kHead;
  bool cr = false;             // head/trailer line: CR seen, LF expected
  size_t line_len = 0;         // bytes in the current head/trailer line (without CR)
  uint32_t line_idx = 0;       // complete non-empty lines in this section
  size_t section_bytes = 0;    // head (or trailer) bytes so far
  size_t rl_len = 0;           // request-line length (without CRLF)
  char rl_tail[8] = {};        // last bytes of the request line ("HTTP/1.1")
  size_t rl_tail_len = 0;
  uint64_t remaining = 0;      // identity body or chunk bytes still to come
  uint64_t chunk_size = 0;
  size_t chunk_line = 0;       // bytes of the current chunk-size line
  bool chunk_digits = false;
  Err scan_err = Err::kNone;

  // ---- per-message state (callbacks) ----
  HttpRequest cur;
  Err cb_err = Err::kNone;
  bool completed = false;      // on_message_complete ran in the last llhttp_execute
  bool headers_done = false;   // later header callbacks are trailers
  bool in_field = false;       // inside a header name (callbacks may split it)
  size_t field_len = 0;        // trailer name length (trailers are not stored)
  size_t header_count = 0;
  Special special = Special::kNone;
  bool saw_version = false;
  char version[4] = {};
  size_t version_len = 0;
  size_t method_len = 0;
  size_t target_raw_len = 0;
  bool saw_cl = false;
  uint64_t content_length = 0;
  int host_count = 0;
  bool saw_te = false;
  bool te_chunked = false;
  bool te_unknown = false;
  bool expect_continue = false;
  bool expect_other = false;
  uint64_t body_bytes = 0;     // de-chunked body bytes so far (assembled or streamed)
  // Entries of cur.headers in use: a recycled request's entries are overwritten in place
  // (their strings keep their capacity) and the rest dropped when the headers are complete.
  size_t used_headers = 0;

  HttpHeader& lastHeader() { return cur.headers[used_headers - 1]; }

  Impl(Http1Parser* o, const Http1Limits& l) : owner(o), limits(l) {
    llhttp_init(&parser, HTTP_REQUEST, &settings());
    parser.data = this;
    llhttp_set_lenient_headers(&parser, 0);
    llhttp_set_lenient_chunked_length(&parser, 0);
    llhttp_set_lenient_keep_alive(&parser, 0);
    llhttp_set_lenient_transfer_encoding(&parser, 0);
    resetMessage();
  }

  static const llhttp_settings_t& settings() {
    static const llhttp_settings_t s = [] {
      llhttp_settings_t st;
      llhttp_settings_init(&st);
      // Every callback through a guard: no exception (bad_alloc appending a header or body)
      // may unwind through llhttp's C frames.
      st.on_message_begin = &guard<&onMessageBegin>;
      st.on_method = &guardData<&onMethod>;
      st.on_method_complete = &guard<&onMethodComplete>;
      st.on_url = &guardData<&onUrl>;
      st.on_url_complete = &guard<&onUrlComplete>;
      st.on_version = &guardData<&onVersion>;
      st.on_version_complete = &guard<&onVersionComplete>;
      st.on_header_field = &guardData<&onHeaderField>;
      st.on_header_field_complete = &guard<&onHeaderFieldComplete>;
      st.on_header_value = &guardData<&onHeaderValue>;
      st.on_header_value_complete = &guard<&onHeaderValueComplete>;
      st.on_headers_complete = &guard<&onHeadersComplete>;
      st.on_chunk_header = &guard<&onChunkHeader>;
      st.on_body = &guardData<&onBody>;
      st.on_message_complete = &guard<&onMessageComplete>;
      return st;
    }();
    return s;
  }

  static Impl* self(llhttp_t* p) { return static_cast<Impl*>(p->data); }

  // An exception in a callback becomes a parse error (503 no_memory: bad_alloc is the one a
  // callback can raise) instead of unwinding through llhttp.
  template <int (*F)(llhttp_t*)>
  static int guard(llhttp_t* p) noexcept {
    try {
      return F(p);
    } catch (...) {
      return self(p)->fail(Err::kNoMemory);
    }
  }
  template <int (*F)(llhttp_t*, const char*, size_t)>
  static int guardData(llhttp_t* p, const char* at, size_t len) noexcept {
    try {
      return F(p, at, len);
    } catch (...) {
      return self(p)->fail(Err::kNoMemory);
    }
  }
  // Tests: makes the next body callback throw std::bad_alloc.
  bool throw_in_body = false;

  int fail(Err e) {
    cb_err = e;
    llhttp_set_error_reason(&parser, kErrInfo[static_cast<size_t>(e)].reason);
    return HPE_USER;
  }

  void resetMessage() {
    // `cur` (moved from, or fresh) is replaced by onMessageBegin before any callback uses it.
    used_headers = 0;
    headers_done = false;
    in_field = false;
    field_len = 0;
    header_count = 0;
    special = Special::kNone;
    saw_version = false;
    version_len = 0;
    method_len = 0;
    target_raw_len = 0;
    saw_cl = false;
    content_length = 0;
    host_count = 0;
    saw_te = false;
    te_chunked = false;
    te_unknown = false;
    expect_continue = false;
    expect_other = false;
    body_bytes = 0;
  }

  void resetScanner(Stage s) {
    stage = s;
    cr = false;
    line_len = 0;
    line_idx = 0;
    section_bytes = 0;
    rl_len = 0;
    rl_tail_len = 0;
    remaining = 0;
    chunk_size = 0;
    chunk_line = 0;
    chunk_digits = false;
  }

  // ------------------------------------------------------------------ scanner

  // Scans [p, end) and sets *stop to where llhttp may run up to: the end of the data, the
  // end of the head or of the message, or the offending byte (exclusive) on error.
  Event scan(const char* p, const char* end, const char** stop) {
    const char* q = p;
    auto error = [&](Err e) {
      scan_err = e;
      *stop = q;
      return Event::kError;
    };
    while (q < end) {
      switch (stage) {
        case Stage::kHead:
        case Stage::kTrailers: {
          const unsigned char c = static_cast<unsigned char>(*q);
          if (cr) {
            if (c != '\n') return error(Err::kBareCr);
            if (section_bytes + 1 > limits.max_header_bytes) return error(Err::kHeaderTooLarge);
            ++section_bytes;
            ++q;
            cr = false;
            if (line_len == 0) {
              // RFC 9112 2.2: empty lines before the request line are ignored.
              if (stage == Stage::kHead && line_idx == 0) continue;
              *stop = q;
              return stage == Stage::kHead ? Event::kHeadEnd : Event::kMessageEnd;
            }
            ++line_idx;
            line_len = 0;
            if (stage == Stage::kHead && line_idx == 1) {
              *stop = q;  // end of the request line: checked once llhttp is past it
              return Event::kLineEnd;
            }
            continue;
          }
          if (c == '\n') return error(Err::kBareLf);
          if (section_bytes + 1 > limits.max_header_bytes) return error(Err::kHeaderTooLarge);
          if (c == '\r') {
            if (stage == Stage::kHead && line_idx == 0) rl_len = line_len;
            ++section_bytes;
            ++q;
            cr = true;
            continue;
          }
          if (line_len == 0 && (c == ' ' || c == '\t') &&
              (line_idx > 0 || stage == Stage::kTrailers)) {
            return error(Err::kObsFold);
          }
          const char* r = findLineEnd(q + 1, end);
          size_t n = static_cast<size_t>(r - q);
          if (section_bytes + n > limits.max_header_bytes) {
            q += limits.max_header_bytes - section_bytes;
            return error(Err::kHeaderTooLarge);
          }
          if (stage == Stage::kHead && line_idx == 0) keepTail(q, n);
          section_bytes += n;
          line_len += n;
          q = r;
          break;
        }
        case Stage::kIdentity: {
          uint64_t avail = static_cast<uint64_t>(end - q);
          uint64_t n = std::min(avail, remaining);
          q += n;
          remaining -= n;
          if (remaining == 0) {
            *stop = q;
            return Event::kMessageEnd;
          }
          break;
        }
        case Stage::kChunkSize: {
          const unsigned char c = static_cast<unsigned char>(*q);
          if (++chunk_line > kMaxChunkLine) return error(Err::kBadChunk);
          int v = hexVal(c);
          if (v >= 0) {
            if (chunk_size > (std::numeric_limits<uint64_t>::max() >> 4)) {
              return error(Err::kBadChunk);
            }
            chunk_size = chunk_size * 16 + static_cast<uint64_t>(v);
            if (chunk_size > limits.max_body_bytes) return error(Err::kBodyTooLarge);
            chunk_digits = true;
            ++q;
            break;
          }
          if (!chunk_digits) return error(c == '\n' ? Err::kBareLf : Err::kBadChunk);
          if (c == ';') {
            stage = Stage::kChunkExt;
          } else if (c == '\r') {
            stage = Stage::kChunkSizeLf;
          } else if (c == '\n') {
            return error(Err::kBareLf);
          } else {
            return error(Err::kBadChunk);
          }
          ++q;
          break;
        }
        case Stage::kChunkExt: {
          // Extension syntax is llhttp's to check; only line endings and length here.
          const char* r = q;
          while (r < end && *r != '\r' && *r != '\n') ++r;
          chunk_line += static_cast<size_t>(r - q);
          if (chunk_line > kMaxChunkLine) {
            q += static_cast<size_t>(r - q) - (chunk_line - kMaxChunkLine);
            return error(Err::kBadChunk);
          }
          q = r;
          if (q == end) break;
          if (*q == '\n') return error(Err::kBareLf);
          stage = Stage::kChunkSizeLf;
          ++q;
          break;
        }
        case Stage::kChunkSizeLf: {
          if (*q != '\n') return error(Err::kBareCr);
          ++q;
          if (chunk_size == 0) {
            stage = Stage::kTrailers;
            cr = false;
            line_len = 0;
            line_idx = 0;
            section_bytes = 0;
          } else {
            stage = Stage::kChunkData;
            remaining = chunk_size;
          }
          break;
        }
        case Stage::kChunkData: {
          uint64_t avail = static_cast<uint64_t>(end - q);
          uint64_t n = std::min(avail, remaining);
          q += n;
          remaining -= n;
          if (remaining == 0) stage = Stage::kChunkDataCr;
          break;
        }
        case Stage::kChunkDataCr:
          if (*q != '\r') return error(*q == '\n' ? Err::kBareLf : Err::kBadChunk);
          ++q;
          stage = Stage::kChunkDataLf;
          break;
        case Stage::kChunkDataLf:
          if (*q != '\n') return error(Err::kBareCr);
          ++q;
          stage = Stage::kChunkSize;
          chunk_size = 0;
          chunk_line = 0;
          chunk_digits = false;
          break;
        case Stage::kClosed:
          *stop = end;
          return Event::kNeedMore;
      }
    }
    *stop = end;
    return Event::kNeedMore;
  }

  void keepTail(const char* p, size_t n) {
    constexpr size_t kCap = sizeof(rl_tail);
    if (n >= kCap) {
      std::memcpy(rl_tail, p + n - kCap, kCap);
      rl_tail_len = kCap;
      return;
    }
    size_t keep = std::min(rl_tail_len, kCap - n);
    std::memmove(rl_tail, rl_tail + rl_tail_len - keep, keep);
    std::memcpy(rl_tail + keep, p, n);
    rl_tail_len = keep + n;
  }

  // ---------------------------------------------------------------- callbacks

  static int onMessageBegin(llhttp_t* p) {
    Impl* s = self(p);
    s->owner->in_request_ = true;
    s->owner->headers_complete_ = false;
    s->cur = Http1Parser::takeRecycledRequest();
    s->used_headers = 0;
    s->cur.received_ns = s->now_ns;
    return 0;
  }

  static int onMethod(llhttp_t* p, const char* at, size_t len) {
    self(p)->method_len += len;
    return 0;
  }

  static int onMethodComplete(llhttp_t* p) {
    Impl* s = self(p);
    if (p->method == HTTP_CONNECT) return s->fail(Err::kUnsupportedMethod);
    s->cur.method = llhttp_method_name(static_cast<llhttp_method_t>(p->method));
    if (s->cur.method.size() != s->method_len) return s->fail(Err::kBadMethod);
    return 0;
  }

  static int onUrl(llhttp_t* p, const char* at, size_t len) {
    Impl* s = self(p);
    for (size_t i = 0; i < len; ++i) {
      if (!kTargetChar[static_cast<unsigned char>(at[i])]) return s->fail(Err::kBadTarget);
    }
    s->cur.target.append(at, len);
    return 0;
  }

  static int onUrlComplete(llhttp_t* p) {
    Impl* s = self(p);
    std::string& t = s->cur.target;
    s->target_raw_len = t.size();
    // Checked here, not in onUrl, so the answer does not depend on how bytes were split;
    // the scanner's header-byte limit bounds what is buffered meanwhile.
    if (t.size() > s->limits.max_target_bytes) return s->fail(Err::kUriTooLong);
    if (t.empty()) return s->fail(Err::kBadTarget);
    if (t[0] == '/') return 0;
    // "*" is for OPTIONS; PRI * is the HTTP/2 preface, refused with 505 at the version.
    if (t == "*") {
      return (p->method == HTTP_OPTIONS || p->method == HTTP_PRI) ? 0 : s->fail(Err::kBadTarget);
    }
    // absolute-form (RFC 9112 3.2.2: a server MUST accept it): keep only path and query.
    size_t scheme_len = 0;
    std::string_view tv = t;
    if (tv.size() >= 7 && iequals(tv.substr(0, 7), "http://")) {
      scheme_len = 7;
    } else if (tv.size() >= 8 && iequals(tv.substr(0, 8), "https://")) {
      scheme_len = 8;
    } else {
      return s->fail(Err::kBadTarget);
    }
    size_t auth_end = tv.find_first_of("/?", scheme_len);
    std::string_view authority = tv.substr(scheme_len, auth_end == std::string_view::npos
                                                           ? std::string_view::npos
                                                           : auth_end - scheme_len);
    if (authority.empty() || authority.find('@') != std::string_view::npos) {
      return s->fail(Err::kBadTarget);
    }
    if (auth_end == std::string_view::npos) {
      t = "/";
    } else if (t[auth_end] == '?') {
      t.erase(0, auth_end);
      t.insert(t.begin(), '/');
    } else {
      t.erase(0, auth_end);
    }
    return 0;
  }

  static int onVersion(llhttp_t* p, const char* at, size_t len) {
    Impl* s = self(p);
    for (size_t i = 0; i < len; ++i) {
      if (s->version_len < sizeof(s->version)) s->version[s->version_len] = at[i];
      ++s->version_len;
    }
    return 0;
  }

  bool versionIsDigitDotDigit() const {
    return version_len == 3 && version[0] >= '0' && version[0] <= '9' && version[1] == '.' &&
           version[2] >= '0' && version[2] <= '9';
  }

  static int onVersionComplete(llhttp_t* p) {
    // Called after the minor digit, before the CR: the request line is checked as a whole
    // by checkRequestLine() once the scanner has seen its end.
    Impl* s = self(p);
    s->saw_version = true;
    if (!s->versionIsDigitDotDigit()) return s->fail(Err::kBadVersion);
    if (p->http_major != 1 || p->http_minor > 1 || p->method == HTTP_PRI) {
      return s->fail(Err::kUnsupportedVersion);
    }
    s->cur.version_minor = p->http_minor;
    return 0;
  }

  // Runs from feed() when llhttp has consumed the request line's CRLF (a fixed point,
  // whatever the split: span callbacks run at buffer ends, so checks there would not be).
  int checkRequestLine() {
    if (!saw_version) return fail(Err::kUnsupportedVersion);  // HTTP/0.9 "GET /"
    // llhttp also accepts RTSP/ and ICE/; the scanner kept the request line's last bytes.
    if (rl_tail_len < 8 || std::memcmp(rl_tail, "HTTP/", 5) != 0 ||
        std::memcmp(rl_tail + 5, version, 3) != 0) {
      return fail(Err::kBadVersion);
    }
    // Exactly "method SP target SP HTTP/x.y": llhttp tolerates repeated spaces.
    if (rl_len != method_len + target_raw_len + 8 + 2) return fail(Err::kBadRequestLine);
    return 0;
  }

  static int onHeaderField(llhttp_t* p, const char* at, size_t len) {
    Impl* s = self(p);
    if (!s->in_field) {
      s->in_field = true;
      s->field_len = 0;
      if (!s->headers_done) {
        if (s->used_headers < s->cur.headers.size()) {
          HttpHeader& h = s->cur.headers[s->used_headers];
          h.name.clear();
          h.value.clear();
        } else {
          s->cur.headers.emplace_back();
        }
        ++s->used_headers;
      }
    }
    s->field_len += len;
    if (s->headers_done) {
      for (size_t i = 0; i < len; ++i) {
        if (!kTchar[static_cast<unsigned char>(at[i])]) return s->fail(Err::kBadHeaderName);
      }
      return 0;
    }
    std::string& name = s->lastHeader().name;
    size_t old = name.size();
    name.resize(old + len);
    for (size_t i = 0; i < len; ++i) {
      const unsigned char c = kLowerTchar[static_cast<unsigned char>(at[i])];
      if (c == 0) return s->fail(Err::kBadHeaderName);
      name[old + i] = static_cast<char>(c);
    }
    return 0;
  }

  static int onHeaderFieldComplete(llhttp_t* p) {
    Impl* s = self(p);
    s->in_field = false;
    if (s->field_len == 0) return s->fail(Err::kBadHeaderName);
    if (s->headers_done) return 0;
    if (s->used_headers == 0) return s->fail(Err::kBadHeaderName);  // cannot happen
    if (++s->header_count > s->limits.max_headers) return s->fail(Err::kTooManyHeaders);
    const std::string& name = s->lastHeader().name;
    s->special = Special::kNone;
    if (name == "content-length") {
      if (s->saw_cl) return s->fail(Err::kDupContentLength);
      if (s->saw_te) return s->fail(Err::kClAndTe);
      s->saw_cl = true;
      s->special = Special::kContentLength;
    } else if (name == "transfer-encoding") {
      if (s->saw_cl) return s->fail(Err::kClAndTe);
      s->saw_te = true;
      s->special = Special::kTransferEncoding;
    } else if (name == "host") {
      if (++s->host_count > 1) return s->fail(Err::kDupHost);
      s->special = Special::kHost;
    } else if (name == "expect") {
      s->special = Special::kExpect;
    }
    return 0;
  }

  static int onHeaderValue(llhttp_t* p, const char* at, size_t len) {
    Impl* s = self(p);
    for (size_t i = 0; i < len; ++i) {
      if (!kValueChar[static_cast<unsigned char>(at[i])]) return s->fail(Err::kBadHeaderValue);
    }
    if (!s->headers_done && s->used_headers != 0) s->lastHeader().value.append(at, len);
    return 0;
  }

  static int onHeaderValueComplete(llhttp_t* p) {
    Impl* s = self(p);
    if (s->headers_done || s->used_headers == 0) return 0;  // trailers: checked, not kept
    std::string& value = s->lastHeader().value;
    std::string_view v = trimOws(value);
    if (v.size() != value.size()) {
      size_t off = static_cast<size_t>(v.data() - value.data());
      size_t n = v.size();
      value.erase(0, off);
      value.resize(n);
      v = value;
    }
    switch (s->special) {
      case Special::kContentLength: {
        if (v.empty()) return s->fail(Err::kBadContentLength);
        uint64_t n = 0;
        for (char c : v) {
          if (c < '0' || c > '9') return s->fail(Err::kBadContentLength);
          uint64_t d = static_cast<uint64_t>(c - '0');
          if (n > (std::numeric_limits<uint64_t>::max() - d) / 10) return s->fail(Err::kBadContentLength);
          n = n * 10 + d;
        }
        s->content_length = n;
        break;
      }
      case Special::kTransferEncoding: {
        // Comma list of codings; chunked must appear once and last.
        std::string_view rest = v;
        while (true) {
          size_t comma = rest.find(',');
          std::string_view coding = trimOws(rest.substr(0, comma));
          if (coding.empty()) return s->fail(Err::kBadTransferEncoding);
          if (s->te_chunked) return s->fail(Err::kBadTransferEncoding);  // after chunked
          if (iequals(coding, "chunked")) {
            s->te_chunked = true;
          } else {
            s->te_unknown = true;
          }
          if (comma == std::string_view::npos) break;
          rest.remove_prefix(comma + 1);
        }
        break;
      }
      case Special::kExpect:
        if (iequals(v, "100-continue")) {
          s->expect_continue = true;
        } else {
          s->expect_other = true;
        }
        break;
      case Special::kHost:
      case Special::kNone:
        break;
    }
    return 0;
  }

  static int onHeadersComplete(llhttp_t* p) {
    Impl* s = self(p);
    s->headers_done = true;
    HttpRequest& r = s->cur;
    r.headers.resize(s->used_headers);  // drops a recycled request's unused entries
    if (r.version_minor == 1 && s->host_count == 0) return s->fail(Err::kMissingHost);
    if (s->saw_te) {
      // RFC 9112 6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
      if (r.version_minor == 0) return s->fail(Err::kBadTransferEncoding);
      if (s->te_unknown) return s->fail(Err::kUnsupportedTransferEncoding);
      if (!s->te_chunked) return s->fail(Err::kBadTransferEncoding);
    }
    if (!s->saw_cl && !s->saw_te &&
        (p->method == HTTP_POST || p->method == HTTP_PUT)) {
      return s->fail(Err::kLengthRequired);
    }
    if (s->saw_cl && s->content_length > s->limits.max_body_bytes) return s->fail(Err::kBodyTooLarge);
    if (s->expect_other) return s->fail(Err::kExpectationFailed);
    r.keep_alive = llhttp_should_keep_alive(p) != 0;
    s->owner->headers_complete_ = true;
    // Upgrade (websocket, h2c) is not offered: serve the request as plain HTTP/1.1.
    p->upgrade = 0;
    const bool has_body = s->te_chunked || s->content_length > 0;
    // RFC 9110 10.1.1: ignore 100-continue from HTTP/1.0 clients.
    if (has_body && s->expect_continue && r.version_minor == 1) s->owner->expect_continue_ = true;
    if (has_body && s->body_hook != nullptr) {
      HttpBodyInfo info;
      if (s->saw_cl) info.content_length = s->content_length;
      info.max_body = s->limits.max_body_bytes;
      r.body_reader = s->body_hook->startBody(r, info);
      if (r.body_reader) return 0;
    }
    if (s->saw_cl && s->content_length > 0) {
      r.body.reserve(static_cast<size_t>(std::min<uint64_t>(s->content_length, kMaxUpfrontReserve)));
    }
    return 0;
  }

  static int onChunkHeader(llhttp_t* p) {
    Impl* s = self(p);
    s->owner->expect_continue_ = false;
    if (p->content_length > s->limits.max_body_bytes - s->body_bytes) {
      return s->fail(Err::kBodyTooLarge);
    }
    return 0;
  }

  static int onBody(llhttp_t* p, const char* at, size_t len) {
    Impl* s = self(p);
    if (s->throw_in_body) {
      s->throw_in_body = false;
      throw std::bad_alloc();
    }
    s->owner->expect_continue_ = false;
    if (len > s->limits.max_body_bytes - s->body_bytes) return s->fail(Err::kBodyTooLarge);
    s->body_bytes += len;
    if (s->cur.body_reader) {
      s->cur.body_reader->onBody(at, len, s->copied);  // streamed: no assembly
    } else {
      s->cur.body.append(at, len);
    }
    return 0;
  }

  static int onMessageComplete(llhttp_t* p) {
    Impl* s = self(p);
    Http1Parser* o = s->owner;
    o->expect_continue_ = false;
    o->in_request_ = false;
    o->headers_complete_ = false;
    s->cur.headers.resize(s->used_headers);
    o->ready_.push_back(std::move(s->cur));
    s->completed = true;
    s->resetMessage();
    return HPE_PAUSED;  // one message per llhttp_execute: the scanner places the next
  }

  // ------------------------------------------------------------------ errors

  // Maps an llhttp error that no callback of ours raised.
  Err mapLlhttp(llhttp_errno_t e, const char* data, const char* end) const {
    const char* reason = llhttp_get_error_reason(&parser);
    auto is = [&](const char* r) { return reason != nullptr && std::strcmp(reason, r) == 0; };
    switch (e) {
      case HPE_INVALID_METHOD: {
        // llhttp stops at the first byte that leaves its method table: a token byte there
        // means a well-formed but unknown method (501), anything else is not a method.
        const char* pos = llhttp_get_error_pos(&parser);
        if (pos >= data && pos < end && kTchar[static_cast<unsigned char>(*pos)]) {
          return Err::kUnknownMethod;
        }
        return Err::kBadMethod;
      }
      case HPE_INVALID_URL:
        return Err::kBadTarget;
      case HPE_INVALID_CONSTANT:
        return is("Invalid method for HTTP/x.x request") ? Err::kUnknownMethod : Err::kBadVersion;
      case HPE_INVALID_VERSION:
        return (is("Invalid HTTP version") && versionIsDigitDotDigit()) ? Err::kUnsupportedVersion
                                                                        : Err::kBadVersion;
      case HPE_INVALID_HEADER_TOKEN:
        return is("Invalid header value char") ? Err::kBadHeaderValue : Err::kBadHeaderName;
      case HPE_UNEXPECTED_CONTENT_LENGTH:
        return is("Duplicate Content-Length") ? Err::kDupContentLength : Err::kClAndTe;
      case HPE_INVALID_CONTENT_LENGTH:
        return Err::kBadContentLength;
      case HPE_INVALID_TRANSFER_ENCODING:
        return Err::kBadTransferEncoding;
      case HPE_INVALID_CHUNK_SIZE:
      case HPE_STRICT:
        return Err::kBadChunk;
      case HPE_UNEXPECTED_SPACE:
        return Err::kObsFold;
      case HPE_LF_EXPECTED:
        return Err::kBareCr;
      case HPE_PAUSED_H2_UPGRADE:
        return Err::kUnsupportedVersion;
      default:
        return Err::kBadRequest;
    }
  }
};

Http1Parser::Http1Parser(const Http1Limits& limits) : impl_(std::make_unique<Impl>(this, limits)) {}

Http1Parser::~Http1Parser() = default;

void Http1Parser::failNextBodyAllocationForTesting() { impl_->throw_in_body = true; }

void Http1Parser::setBodyHook(BodyHook* hook) { impl_->body_hook = hook; }

HttpRequest Http1Parser::popRequest() {
  HttpRequest r = std::move(ready_[ready_head_++]);
  if (ready_head_ == ready_.size()) {
    ready_.clear();  // keeps the capacity: the next request is stored without an allocation
    ready_head_ = 0;
  }
  return r;
}

// Per-thread recycling of request objects (a reactor thread's connections share them): the
// strings and vectors of an answered request keep their capacity for the next one parsed on
// the same thread, so a keep-alive request allocates nothing for its target, headers and
// body. Bounded in count and in what a pooled request may hold, so an idle thread keeps
// little and one large request does not stay pinned.
namespace {
constexpr size_t kMaxPooledRequests = 16;
constexpr size_t kMaxPooledBody = 16 * 1024;
constexpr size_t kMaxPooledHeaders = 32;
constexpr size_t kMaxPooledString = 1024;
constexpr size_t kInitialHeaders = 16;

std::vector<HttpRequest>& requestPool() {
  thread_local std::vector<HttpRequest> pool;
  return pool;
}
}  // namespace

void Http1Parser::recycle(HttpRequest&& request) {
  std::vector<HttpRequest>& pool = requestPool();
  if (pool.size() >= kMaxPooledRequests || request.body.capacity() > kMaxPooledBody ||
      request.headers.size() > kMaxPooledHeaders || request.target.capacity() > kMaxPooledString) {
    return;
  }
  for (const HttpHeader& h : request.headers) {
    if (h.name.capacity() > kMaxPooledString || h.value.capacity() > kMaxPooledString) return;
  }
  HttpRequest& r = pool.emplace_back(std::move(request));
  // Back to a fresh request's state; the header entries are overwritten by the next parse.
  r.method.clear();
  r.target.clear();
  r.version_minor = 1;
  r.body.clear();
  r.body_reader.reset();
  r.handler_route = nullptr;
  r.keep_alive = true;
  r.received_ns = 0;
  r.tag.reset();
  r.priority_trusted = true;
  r.cancel.reset();
}

HttpRequest Http1Parser::takeRecycledRequest() {
  std::vector<HttpRequest>& pool = requestPool();
  if (pool.empty()) {
    HttpRequest r;
    r.headers.reserve(kInitialHeaders);
    return r;
  }
  HttpRequest r = std::move(pool.back());
  pool.pop_back();
  return r;
}

Http1Parser::Result Http1Parser::feed(const char* data, size_t len, uint64_t now_ns,
                                      bool copied) {
  if (failed_) return Result::kError;
  Impl& s = *impl_;
  s.now_ns = now_ns;
  s.copied = copied;
  auto fail = [&](Err e) {
    const ErrInfo& info = kErrInfo[static_cast<size_t>(e)];
    failed_ = true;
    expect_continue_ = false;
    error_.status = info.status;
    error_.reason = info.reason;
    error_.message = info.message;
    return Result::kError;
  };

  const char* p = data;
  const char* end = data + len;
  while (p < end) {
    if (s.stage == Impl::Stage::kClosed) return Result::kOk;  // peer asked to close: ignore
    const char* stop = end;
    const Impl::Event ev = s.scan(p, end, &stop);
    s.completed = false;
    if (stop > p) {
      const llhttp_errno_t rc = llhttp_execute(&s.parser, p, static_cast<size_t>(stop - p));
      if (rc == HPE_PAUSED) {
        // Paused by on_message_complete: the message must end where the scanner said.
        if (llhttp_get_error_pos(&s.parser) != stop || !s.completed) return fail(Err::kBadRequest);
        llhttp_resume(&s.parser);
      } else if (rc != HPE_OK) {
        if (s.cb_err != Err::kNone) return fail(s.cb_err);
        return fail(s.mapLlhttp(rc, p, stop));
      }
    }
    switch (ev) {
      case Impl::Event::kError:
        return fail(s.scan_err);
      case Impl::Event::kNeedMore:
        if (s.completed) return fail(Err::kBadRequest);  // llhttp ended a message early
        break;
      case Impl::Event::kLineEnd:
        if (s.completed) return fail(Err::kBadRequest);
        if (s.checkRequestLine() != 0) return fail(s.cb_err);
        break;
      case Impl::Event::kHeadEnd:
        if (!s.completed) {
          // Headers are done and a body follows; frame it ourselves as llhttp will.
          if (s.te_chunked) {
            s.resetScanner(Impl::Stage::kChunkSize);
          } else if (s.content_length > 0) {
            s.resetScanner(Impl::Stage::kIdentity);
            s.remaining = s.content_length;
          } else {
            return fail(Err::kBadRequest);
          }
        }
        break;
      case Impl::Event::kMessageEnd:
        if (!s.completed) return fail(Err::kBadRequest);
        break;
    }
    if (s.completed) {
      s.resetScanner(ready_.back().keep_alive ? Impl::Stage::kHead : Impl::Stage::kClosed);
    }
    p = stop;
  }
  return Result::kOk;
}

}  // namespace infergate::frontend
