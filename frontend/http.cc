#include "frontend/http.h"

#include <charconv>
#include <cstdio>

namespace infergate::frontend {

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const HttpHeader& h : headers) {
    if (h.name == lower_name) return &h.value;
  }
  return nullptr;
}

std::string_view HttpRequest::path() const {
  std::string_view t = target;
  size_t q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

std::string_view reasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

void serializeResponse(const HttpResponse& resp, bool keep_alive, std::string& out) {
  char status[16];
  char length[24];
  char* status_end = std::to_chars(status, status + sizeof status, resp.status).ptr;
  char* length_end = std::to_chars(length, length + sizeof length, resp.body.size()).ptr;
  const std::string_view reason = reasonPhrase(resp.status);
  const bool content_type = !resp.content_type.empty() && !resp.body.empty();
  const bool close = !keep_alive || resp.close;
  // Sized once: the appends below never grow the buffer (a reused one often has room already).
  size_t need = 9 + (status_end - status) + 1 + reason.size() + 2 + 16 + (length_end - length) +
                2 + 2 + resp.body.size();
  if (content_type) need += 14 + resp.content_type.size() + 2;
  for (const HttpHeader& h : resp.headers) need += h.name.size() + 2 + h.value.size() + 2;
  if (close) need += 19;
  out.reserve(out.size() + need);
  out.append("HTTP/1.1 ");
  out.append(status, static_cast<size_t>(status_end - status));
  out.push_back(' ');
  out.append(reason);
  out.append("\r\n");
  if (content_type) {
    out.append("Content-Type: ").append(resp.content_type).append("\r\n");
  }
  for (const HttpHeader& h : resp.headers) {
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  out.append("Content-Length: ");
  out.append(length, static_cast<size_t>(length_end - length));
  out.append("\r\n");
  if (close) out.append("Connection: close\r\n");
  out.append("\r\n");
  out.append(resp.body);
}

void appendJsonString(std::string& out, std::string_view s, bool latin1) {
  // Usual case (names, ids): nothing to escape, one append.
  size_t plain = 0;
  while (plain < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[plain]);
    if (c < 0x20 || c == '"' || c == '\\' || (latin1 && c >= 0x80)) break;
    ++plain;
  }
  out.push_back('"');
  out.append(s.data(), plain);
  for (char c : s.substr(plain)) {
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default: {
        const auto uc = static_cast<unsigned char>(c);
        if (uc < 0x20 || (latin1 && uc >= 0x80)) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", uc);
          out.append(buf);
        } else {
          out.push_back(c);
        }
      }
    }
  }
  out.push_back('"');
}

std::string errorBody(std::string_view message) {
  std::string out = "{\"error\":";
  appendJsonString(out, message);
  out.push_back('}');
  return out;
}

}  // namespace infergate::frontend
