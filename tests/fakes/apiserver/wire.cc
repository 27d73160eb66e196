#include "tests/fakes/apiserver/wire.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>

namespace ringtrain::fake {
namespace {

constexpr std::size_t kMaxHeaderBytes = 1 << 20;
constexpr std::size_t kMaxBodyBytes = 64 << 20;
constexpr std::size_t kChunkedAbove = 2048;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Trim(const std::string& s) {
  std::size_t b = s.find_first_not_of(" \t");
  std::size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Makes sure `buffer` holds at least `n` bytes.
Status Fill(const net::Socket& socket, std::string* buffer, std::size_t n, SteadyTime deadline) {
  char tmp[16384];
  while (buffer->size() < n) {
    ASSIGN_OR_RETURN(std::size_t got, net::RecvSome(socket, tmp, sizeof(tmp), deadline));
    if (got == 0) return Unavailable("connection closed");
    buffer->append(tmp, got);
  }
  return Status::Ok();
}

// Reads up to and including CRLF; returns the line without it.
StatusOr<std::string> ReadLine(const net::Socket& socket, std::string* buffer,
                               SteadyTime deadline) {
  char tmp[4096];
  for (;;) {
    if (auto pos = buffer->find("\r\n"); pos != std::string::npos) {
      std::string line = buffer->substr(0, pos);
      buffer->erase(0, pos + 2);
      return line;
    }
    if (buffer->size() > kMaxHeaderBytes) return InvalidArgument("line too long");
    ASSIGN_OR_RETURN(std::size_t got, net::RecvSome(socket, tmp, sizeof(tmp), deadline));
    if (got == 0) return Unavailable("connection closed");
    buffer->append(tmp, got);
  }
}

void ParseQuery(const std::string& q, std::map<std::string, std::string>* out) {
  std::size_t start = 0;
  while (start <= q.size()) {
    std::size_t amp = q.find('&', start);
    std::string part = q.substr(start, amp == std::string::npos ? amp : amp - start);
    if (!part.empty()) {
      std::size_t eq = part.find('=');
      std::string key = PercentDecode(part.substr(0, eq), true);
      std::string value = eq == std::string::npos ? "" : PercentDecode(part.substr(eq + 1), true);
      (*out)[key] = value;
    }
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
}

}  // namespace

std::string HttpRequest::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

std::string HttpRequest::Query(const std::string& name) const {
  auto it = query.find(name);
  return it == query.end() ? "" : it->second;
}

StatusOr<HttpRequest> ReadRequest(const net::Socket& socket, std::string* buffer,
                                  SteadyTime deadline) {
  HttpRequest req;
  std::string line;
  do {  // tolerate stray CRLF between requests
    ASSIGN_OR_RETURN(line, ReadLine(socket, buffer, deadline));
  } while (line.empty());
  std::size_t sp1 = line.find(' ');
  std::size_t sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return InvalidArgument("bad request line");
  req.method = line.substr(0, sp1);
  req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  for (;;) {
    ASSIGN_OR_RETURN(line, ReadLine(socket, buffer, deadline));
    if (line.empty()) break;
    std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = Lower(line.substr(0, colon));
    std::string value = Trim(line.substr(colon + 1));
    auto [it, inserted] = req.headers.emplace(name, value);
    if (!inserted) it->second += "," + value;
  }
  std::size_t q = req.target.find('?');
  req.path = PercentDecode(req.target.substr(0, q), false);
  if (q != std::string::npos) ParseQuery(req.target.substr(q + 1), &req.query);

  if (Lower(req.Header("transfer-encoding")).find("chunked") != std::string::npos) {
    for (;;) {
      ASSIGN_OR_RETURN(line, ReadLine(socket, buffer, deadline));
      std::size_t size = std::strtoul(line.c_str(), nullptr, 16);
      if (size == 0) {
        ASSIGN_OR_RETURN(line, ReadLine(socket, buffer, deadline));  // trailer end
        break;
      }
      if (req.body.size() + size > kMaxBodyBytes) return InvalidArgument("body too large");
      RETURN_IF_ERROR(Fill(socket, buffer, size + 2, deadline));
      req.body.append(*buffer, 0, size);
      buffer->erase(0, size + 2);
    }
  } else if (std::string cl = req.Header("content-length"); !cl.empty()) {
    std::size_t size = std::strtoul(cl.c_str(), nullptr, 10);
    if (size > kMaxBodyBytes) return InvalidArgument("body too large");
    RETURN_IF_ERROR(Fill(socket, buffer, size, deadline));
    req.body = buffer->substr(0, size);
    buffer->erase(0, size);
  }
  return req;
}

std::string ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

std::string HttpDate() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

namespace {
std::string CommonHeaders(int code, const std::string& content_type,
                          const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string out = "HTTP/1.1 " + std::to_string(code) + " " + ReasonPhrase(code) + "\r\n";
  out += "Audit-Id: " + RandomUuid() + "\r\n";
  out += "Cache-Control: no-cache, private\r\n";
  out += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : extra) out += k + ": " + v + "\r\n";
  out += "Date: " + HttpDate() + "\r\n";
  return out;
}
}  // namespace

std::string SerializeResponse(const HttpResponse& r) {
  std::string out = CommonHeaders(r.code, r.content_type, r.headers);
  if (r.body.size() > kChunkedAbove) {
    out += "Transfer-Encoding: chunked\r\n\r\n";
    out += Chunk(r.body);
    out += kLastChunk;
  } else {
    out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n";
    out += r.body;
  }
  return out;
}

std::string StreamHeaders(int code, const std::string& content_type) {
  return CommonHeaders(code, content_type, {}) + "Transfer-Encoding: chunked\r\n\r\n";
}

std::string Chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

std::string PercentDecode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string RandomUuid() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = rng();
    b = rng();
  }
  a = (a & 0xffffffffffff0fffULL) | 0x4000ULL;
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

}  // namespace ringtrain::fake
