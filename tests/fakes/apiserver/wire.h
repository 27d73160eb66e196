// HTTP/1.1 wire format for the fake API server: request parsing (Content-Length or chunked
// bodies, keep-alive), responses framed the way kube-apiserver frames them (Content-Length up to
// 2 KiB, chunked above, chunked watch streams), and the small encodings the API uses.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace ringtrain::fake {

struct HttpRequest {
  std::string method;
  std::string target;  // path and query as sent
  std::string path;
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;

  std::string Header(const std::string& lower_name) const;
  std::string Query(const std::string& name) const;
  bool HasQuery(const std::string& name) const { return query.count(name) > 0; }
};

struct HttpResponse {
  int code = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// Reads one request from the connection; `buffer` keeps bytes of the next pipelined request.
// Unavailable when the peer closed the connection between requests.
StatusOr<HttpRequest> ReadRequest(const net::Socket& socket, std::string* buffer,
                                  SteadyTime deadline);

// Status line and headers; a body over 2 KiB is sent chunked as kube-apiserver does.
std::string SerializeResponse(const HttpResponse& response);
// Headers of a streaming (watch) response; the body follows as chunks.
std::string StreamHeaders(int code, const std::string& content_type);
std::string Chunk(const std::string& data);
inline constexpr char kLastChunk[] = "0\r\n\r\n";

std::string ReasonPhrase(int code);
std::string HttpDate();
std::string PercentDecode(const std::string& s, bool plus_is_space);
std::string RandomUuid();

}  // namespace ringtrain::fake
