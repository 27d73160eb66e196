#include "common/yaml_guard.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace ringtrain {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// "---" or "..." at column 0, alone or followed by a blank.
bool IsDocumentMarker(std::string_view line) {
  if (!line.starts_with("---") && !line.starts_with("...")) return false;
  return line.size() == 3 || IsBlank(line[3]);
}

// A blank line, a comment line or a directive: no content.
bool IsEmptyLine(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size() && IsBlank(line[i])) ++i;
  return i == line.size() || line[i] == '#' || (i == 0 && line[0] == '%');
}

// A block mapping key at column 0: a plain scalar (not starting with an indicator) or a quoted
// one, then ':' followed by a blank or the end of the line.
bool IsBlockMappingKeyLine(std::string_view line) {
  if (line.empty()) return false;
  std::size_t i = 0;
  if (line[0] == '"' || line[0] == '\'') {
    const char q = line[0];
    i = 1;
    while (i < line.size() && line[i] != q) i += (q == '"' && line[i] == '\\') ? 2 : 1;
    if (i >= line.size()) return false;
    ++i;
  } else {
    if (std::string_view(",[]{}#&*!|>%@`-?: \t\r").find(line[0]) != std::string_view::npos) {
      return false;
    }
    while (i < line.size() && !(line[i] == ':' && (i + 1 == line.size() || IsBlank(line[i + 1])))) {
      if (line[i] == '#' && IsBlank(line[i - 1])) return false;
      ++i;
    }
    if (i >= line.size()) return false;
  }
  while (i < line.size() && IsBlank(line[i])) ++i;
  return i < line.size() && line[i] == ':' && (i + 1 == line.size() || IsBlank(line[i + 1]));
}

// "<source>: <what> (line N): <hint>", so the error starts as yaml-cpp's path would word it.
Status Refuse(std::string_view source, const std::string& what, std::size_t line,
              const std::string& hint) {
  return InvalidArgument(std::string(source) + ": " + what + " (line " + std::to_string(line) +
                         "): " + hint);
}

}  // namespace

Status CheckYamlDocumentShape(std::string_view text, std::string_view source) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  // yaml-cpp's scanner queues every token before its depth guard (500) trips, about 150 bytes
  // per bracket: a megabyte of '[' takes hundreds of megabytes. No manifest or kubeconfig nests
  // flow collections deeply, so count brackets (quotes ignored: a string would need hundreds).
  // YAML (1.2, c-printable) and JSON allow no control character but tab, line feed and
  // carriage return; yaml-cpp reads a NUL as the end of the stream and then never returns on
  // what follows ("\0," allocates without bound), so refuse them all, as kubectl does.
  int depth = 0;
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto ch = static_cast<unsigned char>(text[i]);
    if (ch == '\n') {
      ++line;
      line_start = i + 1;
    } else if ((ch < 0x20 && ch != '\t' && ch != '\r') || ch == 0x7F) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02X", ch);
      return Refuse(source, std::string("a control character (") + code + ")", line,
                    "column " + std::to_string(i - line_start + 1) +
                        "; YAML allows only tab, line feed and carriage return");
    }
    depth += (ch == '[' || ch == '{') - (ch == ']' || ch == '}');
    if (depth > kMaxFlowDepth) {
      return InvalidArgument(std::string(source) +
                             ": flow collections ([ or {) nested deeper than " +
                             std::to_string(kMaxFlowDepth));
    }
  }
  bool content = false;
  bool ended = false;    // a document marker after the content
  bool started = false;  // a "---" before the content
  std::size_t number = 0;
  for (std::size_t pos = 0; pos <= text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    // A directive ('%' at column 0) belongs before the document's "---": yaml-cpp takes one
    // anywhere as the start of another document, and never returns on "p:\n%\n," (found by
    // the kubeconfig fuzz target).
    if (line.starts_with("%") && (content || started)) {
      return Refuse(source, "a directive ('%') inside the document", number,
                    "directives (%YAML, %TAG) go before the document's first '---' only");
    }
    if (!content) {
      if (IsEmptyLine(line)) continue;
      if (line == "---" ||
          (IsDocumentMarker(line) && line.starts_with("---") && IsEmptyLine(line.substr(3)))) {
        started = true;
        continue;  // the start of the first document
      }
      std::size_t i = 0;
      while (i < line.size() && IsBlank(line[i])) ++i;
      if (i < line.size() && (line[i] == '{' || line[i] == '[')) {
        // Flow style at the root is accepted as JSON only (as kubectl takes JSON manifests).
        if (nlohmann::json::accept(text)) return Status::Ok();
        return Refuse(source, "not a YAML map", number,
                      "a document in flow style ('{' or '[') must be valid JSON; write YAML in "
                      "block style (key: value lines)");
      }
      if (!IsBlockMappingKeyLine(line)) {
        return Refuse(source, "not a YAML map", number,
                      "the document must be a mapping of keys at column 0 (apiVersion: ..., "
                      "kind: ...)");
      }
      content = true;
      continue;
    }
    if (IsDocumentMarker(line)) {
      ended = true;
      if (!IsEmptyLine(line.substr(3))) {
        return Refuse(source, "a second YAML document", number, "put one in each file");
      }
      continue;
    }
    if (ended && !IsEmptyLine(line)) {
      return Refuse(source, "a second YAML document", number, "put one in each file");
    }
  }
  return Status::Ok();
}

}  // namespace ringtrain
