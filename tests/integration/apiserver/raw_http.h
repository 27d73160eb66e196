// A deliberately dumb HTTP/1.1 client for wire-format tests of the fake API server: it sends
// exactly the bytes given and hands back status, headers and the body (or the chunks of a
// stream) without interpreting them, so the tests see what a real client would see.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/net.h"

namespace ringtrain::fake::testing {

struct RawResponse {
  int code = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool chunked = false;
};

class RawConnection {
 public:
  explicit RawConnection(int port) {
    auto s = net::Connect("127.0.0.1", port, DeadlineAfter(std::chrono::seconds(5)));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) socket_ = std::move(*s);
  }

  void Send(const std::string& method, const std::string& target, const std::string& body = "",
            const std::string& content_type = "application/json",
            const std::vector<std::string>& extra_headers = {}) {
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    req += "User-Agent: ringtrain-recorder/1.0\r\n";
    bool has_accept = false;
    for (const auto& h : extra_headers) {
      req += h + "\r\n";
      has_accept = has_accept || h.rfind("Accept:", 0) == 0;
    }
    if (!has_accept) req += "Accept: application/json\r\n";
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
      req += "Content-Type: " + content_type + "\r\n";
      req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    req += "\r\n" + body;
    auto st = net::SendAll(socket_, req.data(), req.size(), DeadlineAfter(std::chrono::seconds(5)));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // Status line and headers only (for streams).
  RawResponse ReadHead(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    RawResponse r;
    auto line = ReadLine(timeout);
    if (!line) return r;
    r.code = std::atoi(line->substr(9, 3).c_str());
    for (;;) {
      auto h = ReadLine(timeout);
      if (!h || h->empty()) break;
      auto colon = h->find(':');
      std::string name = h->substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::string value = h->substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers[name] = value;
    }
    r.chunked = r.headers.count("transfer-encoding") > 0;
    return r;
  }

  // The next chunk's payload; "" for the terminating zero-length chunk, nullopt on timeout.
  std::optional<std::string> NextChunk(std::chrono::milliseconds timeout) {
    auto size_line = ReadLine(timeout);
    if (!size_line) return std::nullopt;
    std::size_t size = std::strtoul(size_line->c_str(), nullptr, 16);
    if (!Fill(size + 2, timeout)) return std::nullopt;
    std::string data = buffer_.substr(0, size);
    buffer_.erase(0, size + 2);
    return data;
  }

  RawResponse ReadResponse(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    RawResponse r = ReadHead(timeout);
    if (r.chunked) {
      for (;;) {
        auto c = NextChunk(timeout);
        if (!c || c->empty()) break;
        r.body += *c;
      }
    } else if (r.headers.count("content-length")) {
      std::size_t n = std::strtoul(r.headers["content-length"].c_str(), nullptr, 10);
      if (Fill(n, timeout)) {
        r.body = buffer_.substr(0, n);
        buffer_.erase(0, n);
      }
    }
    return r;
  }

  RawResponse Do(const std::string& method, const std::string& target, const std::string& body = "",
                 const std::string& content_type = "application/json",
                 const std::vector<std::string>& extra_headers = {}) {
    Send(method, target, body, content_type, extra_headers);
    return ReadResponse();
  }

  // True when the server closed the connection (reads 0 bytes) within the timeout.
  bool PeerClosed(std::chrono::milliseconds timeout) {
    char c;
    auto n = net::RecvSome(socket_, &c, 1, DeadlineAfter(timeout));
    return n.ok() && *n == 0;
  }

 private:
  bool Fill(std::size_t n, std::chrono::milliseconds timeout) {
    SteadyTime deadline = DeadlineAfter(timeout);
    char tmp[8192];
    while (buffer_.size() < n) {
      auto got = net::RecvSome(socket_, tmp, sizeof(tmp), deadline);
      if (!got.ok() || *got == 0) return false;
      buffer_.append(tmp, *got);
    }
    return true;
  }
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    SteadyTime deadline = DeadlineAfter(timeout);
    char tmp[8192];
    for (;;) {
      if (auto pos = buffer_.find("\r\n"); pos != std::string::npos) {
        std::string line = buffer_.substr(0, pos);
        buffer_.erase(0, pos + 2);
        return line;
      }
      auto got = net::RecvSome(socket_, tmp, sizeof(tmp), deadline);
      if (!got.ok() || *got == 0) return std::nullopt;
      buffer_.append(tmp, *got);
    }
  }

  net::Socket socket_;
  std::string buffer_;
};

}  // namespace ringtrain::fake::testing
