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
  char num[32];
  out.append("HTTP/1.1 ");
  auto r = std::to_chars(num, num + sizeof num, resp.status);
  out.append(num, r.ptr);
  out.push_back(' ');
  out.append(reasonPhrase(resp.status));
  out.append("\r\n");
  if (!resp.content_type.empty() && !resp.body.empty()) {
    out.append("Content-Type: ").append(resp.content_type).append("\r\n");
  }
  for (const HttpHeader& h : resp.headers) {
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  out.append("Content-Length: ");
  r = std::to_chars(num, num + sizeof num, resp.body.size());
  out.append(num, r.ptr);
  out.append("\r\n");
  if (!keep_alive || resp.close) out.append("Connection: close\r\n");
  out.append("\r\n");
  out.append(resp.body);
}

void appendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out.append(buf);
        } else {
          out.push_back(c);
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
